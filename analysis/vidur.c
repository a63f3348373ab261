/* vidur: see vidur.h. */
#include "analysis/vidur.h"
#include "analysis/vidur_internal.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analysis/csvtab.h"
#include "traces/stats.h"
#include "sim/errf.h"
#include "sim/nnls.h"
#include "traces/json.h"

/* Ops of one layer with their calls per layer: a Llama layer adds its residual twice. */
static const struct { const char *name; double calls; int gemm; } layer_ops[] = {
    {"input_layernorm", 1, 0}, {"attn_pre_proj", 1, 1}, {"attn_rope", 1, 0},
    {"attn_post_proj", 1, 1}, {"post_attention_layernorm", 1, 0}, {"mlp_up_proj", 1, 1},
    {"mlp_act", 1, 0}, {"mlp_down_proj", 1, 1}, {"add", 2, 0},
};
#define N_LAYER_OPS ((int)(sizeof layer_ops / sizeof layer_ops[0]))

/* Fills f's errors for a curve (is_line 0) or a line (1) over x, y: in-sample, and held
 * out in o->folds folds (the endpoints always stay in: a held-out end would test
 * extrapolation, not the curve). 0 or -1. */
static int assess(const vidur_opts_t *o, const double *x, const double *y, int n, int is_line,
                  vidur_op_fit_t *f, char *err, size_t errlen) {
    int rc = -1, *use = malloc(sizeof *use * (size_t)n), *fold = malloc(sizeof *fold * (size_t)n);
    double *e = malloc(sizeof *e * (size_t)n);
    int ne = 0;
    vidur_curve_t c;
    vidur_line_t l;
    if (!use || !fold || !e) {
        errf(err, errlen, "out of memory (fit)");
        goto done;
    }
    f->n = n;
    f->at_1 = y[0];
    f->at_max = y[n - 1];
    if (is_line ? vidur_line_fit(x, y, NULL, n, &l, err, errlen) : vidur_curve_fit(x, y, NULL, n, &c, err, errlen))
        goto done;
    for (int i = 0; i < n; i++)
        e[i] = fabs((is_line ? l.a + l.b * x[i] : vidur_curve_at(&c, x[i])) / y[i] - 1);
    f->fit_median = stats_percentile(e, (size_t)n, 50);
    vidur_deal_folds(n, o->folds, o->seed, fold);
    for (int k = 0; k < o->folds; k++) {
        for (int i = 0; i < n; i++) use[i] = fold[i] != k || i == 0 || i == n - 1;
        if (is_line ? vidur_line_fit(x, y, use, n, &l, err, errlen) : vidur_curve_fit(x, y, use, n, &c, err, errlen))
            goto done;
        for (int i = 0; i < n; i++)
            if (!use[i]) e[ne++] = fabs((is_line ? l.a + l.b * x[i] : vidur_curve_at(&c, x[i])) / y[i] - 1);
    }
    f->cv_median = ne ? stats_percentile(e, (size_t)ne, 50) : NAN;
    f->cv_p90 = ne ? stats_percentile(e, (size_t)ne, 90) : NAN;
    rc = 0;
done:
    free(use);
    free(fold);
    free(e);
    return rc;
}

/* compute/<gpu>/<org>/<model>/mlp.csv whose first row has the shape's heads, KV heads,
 * d_model and d_ff; of several (Llama-2-70B and Llama-3-70B differ only in the vocabulary,
 * which no profiled operator but the embedding gather sees), the one whose vocab_size is
 * nearest the shape's. 0, or -1 naming what was looked for. */
static int find_model(const char *dir, const char *gpu, const preset_model_t *m, char *out,
                      size_t outlen, char *err, size_t errlen) {
    char base[1100], org_dir[1400], e[512];
    snprintf(base, sizeof base, "%s/compute/%s", dir, gpu);
    DIR *d = opendir(base);
    if (!d) return errf(err, errlen, "%s: no such directory (is --vidur the profiles/vidur "
                        "folder?)", base);
    int found = 0, ambiguous = 0;
    double best = INFINITY;
    struct dirent *o;
    while ((o = readdir(d))) {
        if (o->d_name[0] == '.') continue;
        snprintf(org_dir, sizeof org_dir, "%s/%s", base, o->d_name);
        DIR *d2 = opendir(org_dir);
        if (!d2) continue;
        struct dirent *mm;
        while ((mm = readdir(d2))) {
            if (mm->d_name[0] == '.') continue;
            char path[1700];
            snprintf(path, sizeof path, "%s/%s/mlp.csv", org_dir, mm->d_name);
            csvtab_t t;
            if (csvtab_read(path, &t, e, sizeof e) != 0) continue;
            static const char *const cols[] = {"n_head", "n_kv_head", "n_embd",
                                               "n_expanded_embd"};
            const double want[] = {m->n_heads, m->n_kv_heads, m->d_model, m->d_ff};
            int match = t.n_rows > 0;
            for (int i = 0; i < 4 && match; i++) {
                int c = csvtab_col(&t, cols[i]);
                double v;
                match = c >= 0 && csvtab_num(&t, 0, c, &v, e, sizeof e) == 0 && v == want[i];
            }
            int vc = csvtab_col(&t, "vocab_size");
            double vocab = 0;
            if (match && (vc < 0 || csvtab_num(&t, 0, vc, &vocab, e, sizeof e) != 0)) vocab = 0;
            csvtab_free(&t);
            if (!match) continue;
            double dist = fabs(vocab - m->vocab);
            if (found && dist == best) ambiguous = 1;
            if (!found || dist < best) {
                snprintf(out, outlen, "%s", path);
                ambiguous = 0;
                best = dist;
            }
            found = 1;
        }
        closedir(d2);
    }
    closedir(d);
    if (!found)
        return errf(err, errlen, "no Vidur profile on %s has %s's shape (%d heads, %d KV "
                    "heads, d_model %d, d_ff %d) under %s", gpu, m->name, (int)m->n_heads,
                    (int)m->n_kv_heads, (int)m->d_model, (int)m->d_ff, base);
    if (ambiguous)
        return errf(err, errlen, "several Vidur profiles on %s have %s's shape; the first is "
                    "%s", gpu, m->name, out);
    return 0;
}

/* ------------------------------------------------------------------ the calibration */

static int fit_compute(const vidur_opts_t *o, vidur_result_t *r, const preset_model_t *m,
                       vidur_curve_t *pass, char *err, size_t errlen) {
    csvtab_t t;
    if (csvtab_read(r->compute_path, &t, err, errlen) != 0) return -1;
    int rc = -1, xcol, tpcol, cols[N_LAYER_OPS + 1];
    static vidur_grid_t g, g2;
    static double y[N_LAYER_OPS + 1][VIDUR_MAX_POINTS], tot[2][VIDUR_MAX_POINTS];
    char name[96];
    if ((xcol = csvtab_need(&t, "num_tokens", err, errlen)) < 0 ||
        (tpcol = csvtab_need(&t, "num_tensor_parallel_workers", err, errlen)) < 0)
        goto done;
    for (int i = 0; i <= N_LAYER_OPS; i++) {
        snprintf(name, sizeof name, "time_stats.%s.median", i < N_LAYER_OPS ? layer_ops[i].name : "emb");
        if ((cols[i] = csvtab_need(&t, name, err, errlen)) < 0) goto done;
    }
    const double tp = o->tp;
    for (int i = 0; i <= N_LAYER_OPS; i++) {
        if (vidur_collect(&t, xcol, cols[i], &tpcol, &tp, 1, i ? &g2 : &g, y[i], err, errlen)) goto done;
        if (i && (g2.n != g.n || memcmp(g2.x, g.x, sizeof g.x[0] * (size_t)g.n))) {
            errf(err, errlen, "%s: the operators were profiled at different token counts",
                 r->compute_path);
            goto done;
        }
    }
    if (g.n < 8) {
        errf(err, errlen, "%s: %d token counts at tp %d (need at least 8; the file's degrees "
             "are its num_tensor_parallel_workers column)", r->compute_path, g.n, (int)o->tp);
        goto done;
    }
    /* one layer, and the pass's token-parallel time (layers + embedding + final norm) */
    const double L = m->n_layers;
    for (int k = 0; k < g.n; k++) {
        double layer = 0;
        for (int i = 0; i < N_LAYER_OPS; i++) layer += layer_ops[i].calls * y[i][k];
        tot[0][k] = layer;
        tot[1][k] = L * layer + y[N_LAYER_OPS][k] + y[0][k];
    }
    r->n_ops = 0;
    for (int i = 0; i <= N_LAYER_OPS + 2; i++) {
        vidur_op_fit_t *f = &r->ops[r->n_ops++];
        const double *yy = i <= N_LAYER_OPS ? y[i] : tot[i - N_LAYER_OPS - 1];
        snprintf(f->name, sizeof f->name, "%s", i < N_LAYER_OPS ? layer_ops[i].name
                 : i == N_LAYER_OPS ? "emb" : i == N_LAYER_OPS + 1 ? "layer (sum)" : "pass (sum)");
        if (assess(o, g.x, yy, g.n, 0, f, err, errlen)) goto done;
    }
    if (vidur_curve_fit(g.x, tot[1], NULL, g.n, pass, err, errlen)) goto done;
    r->n_points = g.n;
    for (int k = 0; k < g.n; k++) r->tokens[k] = g.x[k], r->pass_s[k] = tot[1][k] * 1e-3;
    /* the rates the GEMMs reach: weights read at the fewest tokens, FLOP/s at the most */
    double g1 = 0, gmax = 0, floor_ms = INFINITY;
    for (int i = 0; i < N_LAYER_OPS; i++) {
        if (layer_ops[i].gemm) g1 += y[i][0], gmax += y[i][g.n - 1];
        else if (y[i][0] > 0) floor_ms = fmin(floor_ms, y[i][0]);
    }
    double dev_params = preset_model_layer_matrix_params(m) / L / tp;   /* one layer, one device */
    r->gemm_read_bw = dev_params * m->dtype_bytes / (g1 * 1e-3);
    r->gemm_flops = 2.0 * g.x[g.n - 1] * dev_params / (gmax * 1e-3);
    r->kernel_floor_s = isfinite(floor_ms) ? floor_ms * 1e-3 : 0;
    r->cf.range_tokens = g.x[g.n - 1];
    r->cf.fit_points = g.n;
    rc = 0;
done:
    csvtab_free(&t);
    return rc;
}

static int fit_network(const vidur_opts_t *o, vidur_result_t *r, const preset_model_t *m,
                       vidur_line_t *ar, char *err, size_t errlen) {
    csvtab_t t;
    if (csvtab_read(r->network_path, &t, err, errlen) != 0) return -1;
    int rc = -1, xcol, ycol, where[2];
    static vidur_grid_t g;
    static double y[VIDUR_MAX_POINTS];
    if ((xcol = csvtab_need(&t, "size", err, errlen)) < 0 ||
        (ycol = csvtab_need(&t, "time_stats.all_reduce.median", err, errlen)) < 0 ||
        (where[0] = csvtab_need(&t, "num_workers", err, errlen)) < 0 ||
        (where[1] = csvtab_need(&t, "devices_per_node", err, errlen)) < 0)
        goto done;
    const double eq[2] = {o->tp, o->tp};   /* tp workers, all on one node */
    if (vidur_collect(&t, xcol, ycol, where, eq, 2, &g, y, err, errlen)) goto done;
    /* the messages a pass can make: up to twice the profiled tokens of activations */
    double cap = 2.0 * (isfinite(r->cf.range_tokens) ? r->cf.range_tokens : 4096) *
                 m->d_model * m->dtype_bytes;
    int n = 0;
    while (n < g.n && g.x[n] <= cap) n++;
    if (n < 4) {
        errf(err, errlen, "%s: %d all-reduce sizes of %d workers on one node up to %.0f bytes "
             "(need at least 4)", r->network_path, n, (int)o->tp, cap);
        goto done;
    }
    for (int i = 0; i < n; i++) y[i] *= 1e-3;   /* ms -> s */
    if (assess(o, g.x, y, n, 1, &r->allreduce, err, errlen) ||
        vidur_line_fit(g.x, y, NULL, n, ar, err, errlen))
        goto done;
    snprintf(r->allreduce.name, sizeof r->allreduce.name, "all_reduce (%d GPUs)", (int)o->tp);
    r->allreduce.at_1 *= 1e3;
    r->allreduce.at_max *= 1e3;
    rc = 0;
done:
    csvtab_free(&t);
    return rc;
}

int vidur_calibrate(const vidur_opts_t *o, vidur_result_t *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    cost_file_t *cf = &r->cf;
    cf->fit_points = cf->fit_median_err = cf->cv_median_err = cf->cv_p90_err = NAN;
    cf->range_tokens = cf->range_seqs = cf->range_kv_tokens = cf->range_attn_pairs = NAN;
    cost_roofline_defaults(&cf->roof);
    preset_model_t m;
    char e[1024];
    if (preset_model_get(o->model, &m, e, sizeof e) != 0) return errf(err, errlen, "--model: %s", e);
    const char *gpu = vidur_gpu_dir(o->hw);
    if (!gpu)
        return errf(err, errlen, "--hw %s: Vidur's profiles cover a100-80g and h100", o->hw);
    if (preset_hw_get(o->hw, &r->hw, e, sizeof e) != 0) return errf(err, errlen, "--hw: %s", e);
    if (o->tp < 1 || m.n_heads % o->tp != 0)
        return errf(err, errlen, "--tp %d does not divide %s's %d attention heads", (int)o->tp,
                    m.name, (int)m.n_heads);
    if (o->folds < 2) return errf(err, errlen, "--folds must be >= 2 (got %d)", o->folds);
    if (find_model(o->dir, gpu, &m, r->compute_path, sizeof r->compute_path, err, errlen))
        return -1;
    vidur_curve_t pass;
    vidur_line_t ar = {0, 0};
    if (fit_compute(o, r, &m, &pass, err, errlen)) return -1;
    if (o->tp > 1) {
        snprintf(r->network_path, sizeof r->network_path, "%s/network/%s%s/all_reduce.csv",
                 o->dir, o->network ? o->network : gpu, o->network ? "" : "_dgx");
        if (fit_network(o, r, &m, &ar, err, errlen)) return -1;
    }

    /* the cost file */
    cf->kind = COST_FILE_LINEAR;
    cf->model = m;
    cost_linear_params_t *p = &cf->lin;
    p->layer_params = preset_model_layer_matrix_params(&m);
    p->lm_params = preset_model_lm_params(&m);
    p->n_knots = pass.nk;
    for (int k = 0; k < pass.nk; k++) {
        p->knot_rows[k] = pass.knots[k];
        p->knot_s[k] = pass.val[k] * 1e-3 / p->layer_params;
    }
    const double tp = o->tp, L = m.n_layers, hd = m.head_dim;
    const double kv_heads = m.n_kv_heads >= o->tp ? m.n_kv_heads / tp : 1.0;
    p->kv_token_s = L * 2.0 * kv_heads * hd * m.dtype_bytes / r->gemm_read_bw;
    p->attn_pair_s = L * 4.0 * (m.n_heads / tp) * hd / (r->hw.flops * VIDUR_ATTN_EFF);
    p->step_s = L * 2.0 * r->kernel_floor_s;
    p->tp = o->tp;
    p->allreduce_latency_s = ar.a;
    p->allreduce_s_per_byte = ar.b;
    p->allreduces = 2.0 * L;
    p->ar_bytes_per_token = (double)m.d_model * m.dtype_bytes;
    const vidur_op_fit_t *ps = &r->ops[r->n_ops - 1];
    cf->fit_median_err = ps->fit_median;
    cf->cv_median_err = ps->cv_median;
    cf->cv_p90_err = ps->cv_p90;
    snprintf(cf->hw_preset, sizeof cf->hw_preset, "%s", o->hw);
    const char *rel = strstr(r->compute_path, "/compute/");
    snprintf(cf->fitted_for, sizeof cf->fitted_for, "%s on %s, tp %d (Vidur's operator "
             "profiles; attention on the roofline)", m.name, o->hw, (int)o->tp);
    snprintf(cf->source, sizeof cf->source, "vidur%.120s (%d token counts)%s%.80s",
             rel ? rel : r->compute_path, (int)cf->fit_points, o->tp > 1 ? " + " : "",
             o->tp > 1 ? strstr(r->network_path, "/network/") + 1 : "");
    const char *sde = getenv("SOURCE_DATE_EPOCH");   /* reproducible shipped files */
    time_t now = sde && *sde ? (time_t)strtoll(sde, NULL, 10) : time(NULL);
    strftime(cf->fitted_at, sizeof cf->fitted_at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    char m2[256];
    if (cost_linear_check(p, m2, sizeof m2) != 0)
        return errf(err, errlen, "the fitted model is not valid: %s", m2);
    return 0;
}

/* ------------------------------------------------------------------ the report */

void vidur_report(FILE *f, const vidur_result_t *r) {
    const cost_file_t *cf = &r->cf;
    const cost_linear_params_t *p = &cf->lin;
    fprintf(f, "%s\nprofile: %s\n", cf->fitted_for, r->compute_path);
    fprintf(f, "\nper-operator medians (one call, one layer%s) as non-decreasing piecewise-"
               "linear curves of the tokens\n(a knot at every profiled count); errors "
               "|predicted - measured| / measured, in sample and\ncross-validated on held-out "
               "token counts (5 folds; the fewest and most tokens always kept):\n",
            p->tp > 1 ? ", one device" : "");
    fprintf(f, "  %-26s %6s %10s %10s %8s %8s %8s\n", "operator", "points", "at 1 (ms)",
            "at max", "fit", "cv p50", "cv p90");
    for (int i = 0; i < r->n_ops; i++) {
        const vidur_op_fit_t *o = &r->ops[i];
        fprintf(f, "  %-26s %6d %10.4f %10.4f %7.2f%% %7.2f%% %7.2f%%\n", o->name, o->n,
                o->at_1, o->at_max, 100 * o->fit_median, 100 * o->cv_median, 100 * o->cv_p90);
    }
    if (r->allreduce.n) {
        fprintf(f, "\nall-reduce: %s, %d GPUs on one node, latency + bytes x time per byte:\n",
                r->network_path, (int)p->tp);
        fprintf(f, "  latency %.2f us, %.1f GB/s (algorithm bandwidth); %d sizes, fit %.1f%%, "
                   "cv p50 %.1f%%, p90 %.1f%%\n", p->allreduce_latency_s * 1e6,
                1e-9 / fmax(p->allreduce_s_per_byte, 1e-30), r->allreduce.n,
                100 * r->allreduce.fit_median, 100 * r->allreduce.cv_median,
                100 * r->allreduce.cv_p90);
    }
    fprintf(f, "\nwhat the GEMMs reach on this %s (datasheet: %.0f GB/s, %.0f TFLOP/s):\n",
            r->hw.name, r->hw.mem_bw * 1e-9, r->hw.flops * 1e-12);
    fprintf(f, "  weights read at 1 token: %.0f GB/s (%.0f%% of peak)\n", r->gemm_read_bw * 1e-9,
            100 * r->gemm_read_bw / r->hw.mem_bw);
    fprintf(f, "  at %.0f tokens: %.0f TFLOP/s (%.0f%% of peak)\n", cf->range_tokens,
            r->gemm_flops * 1e-12, 100 * r->gemm_flops / r->hw.flops);
    fprintf(f, "\nnot profiled, on the roofline:\n");
    fprintf(f, "  KV reads at the GEMMs' 1-token read rate: kv_token_s = %.4g s per position\n",
            p->kv_token_s);
    fprintf(f, "  attention FLOPs at %.0f%% of peak (FlashAttention-2/3): attn_pair_s = %.4g s\n",
            100 * VIDUR_ATTN_EFF, p->attn_pair_s);
    fprintf(f, "  2 kernels per layer (KV write, attention) at the smallest kernel's %.1f us: "
               "step_s = %.4g s\n", r->kernel_floor_s * 1e6, p->step_s);
    fprintf(f, "  the sampler, per-sequence work and the engine's CPU time: 0 (fit them from "
               "your own benchmark)\n");
}

static void json_fit(FILE *f, const vidur_op_fit_t *o) {
    fputs("{\"name\":", f);
    json_write_str(f, o->name);
    fprintf(f, ",\"points\":%d,\"fit_median_err\":%.6g,\"cv_median_err\":%.6g,"
               "\"cv_p90_err\":%.6g}", o->n, o->fit_median, o->cv_median, o->cv_p90);
}

void vidur_report_json(FILE *f, const vidur_result_t *r) {
    const cost_linear_params_t *p = &r->cf.lin;
    fputs("{\"fitted_for\":", f);
    json_write_str(f, r->cf.fitted_for);
    fputs(",\"profile\":", f);
    json_write_str(f, r->compute_path);
    fputs(",\"operators\":[", f);
    for (int i = 0; i < r->n_ops; i++) {
        if (i) fputc(',', f);
        json_fit(f, &r->ops[i]);
    }
    fputc(']', f);
    if (r->allreduce.n) {
        fputs(",\"allreduce\":", f);
        json_fit(f, &r->allreduce);
        fprintf(f, ",\"allreduce_latency_s\":%.6g,\"allreduce_s_per_byte\":%.6g",
                p->allreduce_latency_s, p->allreduce_s_per_byte);
    }
    fprintf(f, ",\"gemm_read_bw\":%.6g,\"gemm_flops\":%.6g,\"kernel_floor_s\":%.6g,"
               "\"kv_token_s\":%.6g,\"attn_pair_s\":%.6g,\"step_s\":%.6g}\n",
            r->gemm_read_bw, r->gemm_flops, r->kernel_floor_s, p->kv_token_s, p->attn_pair_s,
            p->step_s);
}
