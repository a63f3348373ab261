/* bench/vidur_table: the docs table of docs/fidelity.md ("GPU calibrations"): for
 * llama-2-7b on A100 and H100 and llama-2-70b at TP 4 on H100, the token-parallel time of a
 * pass as Vidur's profiles measured it (the operators' sum), as the shipped calibration
 * predicts it and as the roofline does, with the errors; then whole steps (attention and
 * the LM head included, which the profiles do not cover) from both models.
 *
 *   usage: build/bench/vidur_table [PROFILES_DIR]   (default ../shared/data/profiles/vidur)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/vidur.h"
#include "sim/cost.h"
#include "sim/cost_file.h"

static double measured_at(const vidur_result_t *r, double tokens) {
    for (int k = 0; k < r->n_points; k++)
        if (r->tokens[k] == tokens) return r->pass_s[k];
    return -1;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "../shared/data/profiles/vidur";
    static const struct { const char *model, *hw; int tp; } cases[] = {
        {"llama-2-7b", "a100-80g", 1}, {"llama-2-7b", "h100", 1}, {"llama-2-70b", "h100", 4},
    };
    static vidur_result_t r;
    char err[2048];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        vidur_opts_t o = {.dir = dir, .model = cases[c].model, .hw = cases[c].hw,
                          .tp = cases[c].tp, .folds = 5, .seed = 1};
        if (vidur_calibrate(&o, &r, err, sizeof err) != 0) {
            fprintf(stderr, "vidur_table: %s\n", err);
            return 1;
        }
        cost_model_t *cal = cost_file_model(&r.cf, cases[c].tp, err, sizeof err);
        cost_roofline_params_t rp;
        cost_roofline_defaults(&rp);
        rp.tp = cases[c].tp;
        cost_model_t *roof = cost_roofline_new(&r.cf.model, &r.hw, &rp);
        if (!cal || !roof) {
            fprintf(stderr, "vidur_table: %s\n", cal ? "roofline" : err);
            return 1;
        }
        printf("\n%s on %s, tp %d\n\n", cases[c].model, cases[c].hw, cases[c].tp);
        printf("| tokens | profile sum | calibrated | error | roofline | error |\n");
        printf("|---:|---:|---:|---:|---:|---:|\n");
        static const double toks[] = {1, 8, 32, 128, 512, 2048};
        for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) {
            double meas = measured_at(&r, toks[i]);
            /* the token-parallel part alone: no KV, no attention, no LM head, and without
             * each model's fixed per-step term */
            cost_features_t f = {.tokens = (int64_t)toks[i], .seqs = 1};
            double pc = cost_pass_time(cal, &f) - r.cf.lin.step_s -
                        cost_linear_comm_time(&r.cf.lin, toks[i]);
            double pr = cost_pass_time(roof, &f) - rp.overhead_s;
            cost_breakdown_t b;
            cost_seq_t one = {(int32_t)toks[i], 0, 0};
            if (cost_roofline_explain(roof, &one, 1, &b) == 0) pr -= b.comm_s;
            if (meas < 0) continue;
            printf("| %.0f | %.2f ms | %.2f ms | %+.1f%% | %.2f ms | %+.1f%% |\n", toks[i],
                   meas * 1e3, pc * 1e3, 100 * (pc / meas - 1), pr * 1e3, 100 * (pr / meas - 1));
        }
        printf("\n| step | roofline | calibrated | calibrated / roofline |\n|---|---:|---:|---:|\n");
        static const int batches[] = {1, 8, 32, 128}, ctxs[] = {512, 2048}, prompts[] = {128, 512, 2048};
        for (size_t j = 0; j < 2; j++)
            for (size_t i = 0; i < 4; i++) {
                cost_features_t f = {0};
                for (int k = 0; k < batches[i]; k++) cost_features_add(&f, 1, ctxs[j], 1);
                double a = cost_pass_time(roof, &f), b2 = cost_pass_time(cal, &f);
                printf("| decode %d at %d | %.2f ms | %.2f ms | %.2f |\n", batches[i], ctxs[j],
                       a * 1e3, b2 * 1e3, b2 / a);
            }
        for (size_t i = 0; i < 3; i++) {
            cost_features_t f = {0};
            cost_features_add(&f, prompts[i], 0, 1);
            double a = cost_pass_time(roof, &f), b2 = cost_pass_time(cal, &f);
            printf("| prefill %d | %.2f ms | %.2f ms | %.2f |\n", prompts[i], a * 1e3, b2 * 1e3,
                   b2 / a);
        }
        cost_free(cal);
        cost_free(roof);
    }
    return 0;
}
