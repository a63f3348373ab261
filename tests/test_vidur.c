/* test_vidur: the CSV table reader, the GPU calibration from Vidur-format profiles (on a
 * synthetic profile tree with known answers, and on the real published profiles when
 * ../shared/data is present), tensor-parallel cost files and the shipped calibrations. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analysis/csvtab.h"
#include "analysis/vidur.h"
#include "analysis/vidur_ops.h"
#include "sim/cost.h"
#include "sim/cost_file.h"
#include "sim/gpu_ops.h"
#include "testutil.h"

static char root[256];   /* the synthetic profile tree */

static const char *const ops[] = {"emb", "input_layernorm", "attn_pre_proj", "attn_rope",
                                  "attn_post_proj", "post_attention_layernorm", "mlp_up_proj",
                                  "mlp_act", "mlp_down_proj", "add"};
#define N_OPS 10
/* op k at T tokens on tp devices: a_k + b_k T / tp ms, so every curve is linear and the
 * calibration must reproduce the profile exactly at the profiled counts */
static double op_ms(int k, double tokens, int tp) {
    return 0.002 * (k + 1) + 1e-4 * (k + 1) * tokens / tp;
}
static const int tokens[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512};
#define N_TOK ((int)(sizeof tokens / sizeof tokens[0]))

static void mkdirs(const char *path) {
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

/* compute/a100/testorg/llama7/mlp.csv (llama-2-7b's shape) at tp 1 and 2, with one token
 * count repeated (Vidur's files repeat some), and network/a100_dgx/all_reduce.csv with
 * 20 us + 1e-11 s per byte at 2 workers. */
static void make_tree(const char *bad_cell, const char *drop_col) {
    char dir[512], path[600];
    snprintf(root, sizeof root, "/tmp/twintest-vidur-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    snprintf(dir, sizeof dir, "%s/compute/a100/testorg/llama7", root);
    mkdirs(dir);
    snprintf(path, sizeof path, "%s/mlp.csv", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int k = 0; k < N_OPS; k++)
        if (!drop_col || strcmp(drop_col, ops[k]))
            fprintf(f, "time_stats.%s.min,time_stats.%s.median,", ops[k], ops[k]);
    fputs("n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,"
          "num_tensor_parallel_workers\n", f);
    for (int tp = 1; tp <= 2; tp++)
        for (int i = 0; i <= N_TOK; i++) {
            int t = i < N_TOK ? tokens[i] : 32;   /* 32 twice */
            for (int k = 0; k < N_OPS; k++) {
                if (drop_col && !strcmp(drop_col, ops[k])) continue;
                if (bad_cell && tp == 2 && i == 3 && k == 2) fprintf(f, "0,%s,", bad_cell);
                else fprintf(f, "0,%.9g,", op_ms(k, t, tp));
            }
            fprintf(f, "32,32,4096,11008,32768,True,%d,%d\n", t, tp);
        }
    fclose(f);
    snprintf(dir, sizeof dir, "%s/network/a100_dgx", root);
    mkdirs(dir);
    snprintf(path, sizeof path, "%s/all_reduce.csv", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs(",time_stats.all_reduce.median,rank,num_workers,size,collective,devices_per_node\n", f);
    for (int i = 0; i < 12; i++) {
        double size = 2048.0 * (1 << i);
        fprintf(f, "%d,%.12g,0,2,%.0f,all_reduce,2\n", 2 * i, 0.02 + size * 1e-8, size);
        fprintf(f, "%d,%.12g,0,2,%.0f,all_reduce,1\n", 2 * i + 1, 9.0, size);  /* 2 nodes */
    }
    fclose(f);
}

static void rm_tree(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}

static vidur_result_t res;

static int calibrate(const char *model, const char *hw, int tp, char *err, size_t len) {
    vidur_opts_t o = {.dir = root, .model = model, .hw = hw, .tp = tp, .folds = 5, .seed = 1};
    return vidur_calibrate(&o, &res, err, len);
}

/* ------------------------------------------------------------------ csvtab */

START_TEST(csvtab_reads_and_names_bad_cells) {
    char p[256], err[512];
    csvtab_t t;
    ck_assert_ptr_nonnull(testutil_write_tmp(p, sizeof p, ".csv", "a,b\n1,2\n\n3,x\n"));
    ck_assert_msg(csvtab_read(p, &t, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(t.n_rows, 2);
    ck_assert_int_eq(csvtab_col(&t, "b"), 1);
    double v;
    ck_assert_int_eq(csvtab_num(&t, 0, 1, &v, err, sizeof err), 0);
    ck_assert(v == 2);
    ck_assert_int_eq(csvtab_num(&t, 1, 1, &v, err, sizeof err), -1);
    ck_assert_msg(strstr(err, ":4: column b: 'x' is not a number"), "%s", err);
    ck_assert_int_eq(csvtab_need(&t, "c", err, sizeof err), -1);
    ck_assert_msg(strstr(err, ":1: no column 'c'"), "%s", err);
    csvtab_free(&t);
    ck_assert_ptr_nonnull(testutil_write_tmp(p, sizeof p, ".csv", "a,b\n1,2\n3\n"));
    ck_assert_int_eq(csvtab_read(p, &t, err, sizeof err), -1);
    ck_assert_msg(strstr(err, ":3: 1 cells, the header has 2 columns"), "%s", err);
    ck_assert_ptr_nonnull(testutil_write_tmp(p, sizeof p, ".csv", "a,b\n\"1\",2\n"));
    ck_assert_int_eq(csvtab_read(p, &t, err, sizeof err), -1);
    ck_assert_msg(strstr(err, ":2: a quoted cell"), "%s", err);
    unlink(p);
}
END_TEST

/* ------------------------------------------------------------------ the calibration */

START_TEST(calibration_reproduces_the_profile) {
    char err[2048];
    make_tree(NULL, NULL);
    ck_assert_msg(calibrate("llama-2-7b", "a100-80g", 2, err, sizeof err) == 0, "%s", err);
    const cost_file_t *cf = &res.cf;
    const cost_linear_params_t *p = &cf->lin;
    ck_assert_int_eq(p->tp, 2);
    ck_assert_str_eq(cf->hw_preset, "a100-80g");
    ck_assert_int_eq(res.n_points, N_TOK);   /* the repeated count is one point */
    cost_model_t *m = cost_file_model(cf, 2, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    for (int i = 0; i < N_TOK; i++) {
        double t = tokens[i], layer = 0;
        for (int k = 1; k < N_OPS; k++) layer += (k == N_OPS - 1 ? 2 : 1) * op_ms(k, t, 2);
        double want = (32 * layer + op_ms(0, t, 2) + op_ms(1, t, 2)) * 1e-3;
        cost_features_t f = {.tokens = tokens[i], .seqs = 1};
        double got = cost_pass_time(m, &f) - p->step_s - cost_linear_comm_time(p, t);
        ck_assert_msg(fabs(got / want - 1) < 1e-9, "T %d: %g vs %g", tokens[i], got, want);
    }
    /* every op is linear in the tokens: held-out counts are predicted exactly too */
    for (int i = 0; i < res.n_ops; i++)
        ck_assert_msg(res.ops[i].cv_median < 1e-9 && res.ops[i].cv_p90 < 1e-9, "%s: %g",
                      res.ops[i].name, res.ops[i].cv_p90);
    /* the all-reduce: 20 us + 1e-11 s per byte, the two-node rows left out */
    ck_assert_msg(fabs(p->allreduce_latency_s / 20e-6 - 1) < 1e-6, "%g", p->allreduce_latency_s);
    ck_assert_msg(fabs(p->allreduce_s_per_byte / 1e-11 - 1) < 1e-6, "%g", p->allreduce_s_per_byte);
    double comm = 2 * 32 * (20e-6 + 1e-11 * 100 * 4096 * 2);
    ck_assert(fabs(cost_linear_comm_time(p, 100) / comm - 1) < 1e-6);
    /* attention on the roofline at the GEMMs' 1-token read rate; two floor kernels/layer */
    double gemm1 = (op_ms(2, 1, 2) + op_ms(4, 1, 2) + op_ms(6, 1, 2) + op_ms(8, 1, 2)) * 1e-3;
    double bw = cf->lin.layer_params / 32 / 2 * 2 / gemm1;
    ck_assert(fabs(res.gemm_read_bw / bw - 1) < 1e-9);
    ck_assert(fabs(p->kv_token_s / (32 * 2 * 16 * 128 * 2 / bw) - 1) < 1e-9);
    ck_assert(fabs(p->step_s / (32 * 2 * op_ms(1, 1, 2) * 1e-3) - 1) < 1e-9);
    /* the file round-trips, and a tp 2 model refuses tp 1 */
    char path[256];
    testutil_tmpfile(path, sizeof path, ".cost");
    ck_assert_msg(cost_file_write(path, cf, NULL, err, sizeof err) == 0, "%s", err);
    cost_file_t back;
    ck_assert_msg(cost_file_read(path, &back, err, sizeof err) == 0, "%s", err);
    ck_assert(back.lin.tp == 2 && back.lin.allreduce_latency_s == p->allreduce_latency_s);
    ck_assert(back.lin.allreduces == 64 && back.lin.ar_bytes_per_token == 4096 * 2);
    ck_assert_ptr_null(cost_file_model(&back, 1, err, sizeof err));
    ck_assert_msg(strstr(err, "fitted at one tensor-parallel degree (2); --tp 1"), "%s", err);
    unlink(path);
    cost_free(m);
    rm_tree();
}
END_TEST

START_TEST(bad_profiles_are_named) {
    char err[2048];
    make_tree("oops", NULL);
    ck_assert_int_eq(calibrate("llama-2-7b", "a100-80g", 2, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "mlp.csv:") && strstr(err, "column time_stats.attn_pre_proj"
                  ".median: 'oops' is not a number"), "%s", err);
    ck_assert_int_eq(calibrate("llama-2-7b", "a100-80g", 4, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "0 token counts at tp 4"), "%s", err);
    ck_assert_int_eq(calibrate("llama-2-7b", "a100-80g", 3, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--tp 3 does not divide llama-2-7b's 32 attention heads"), "%s",
                  err);
    ck_assert_int_eq(calibrate("llama-2-7b", "l40s", 1, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "cover a100-80g and h100"), "%s", err);
    ck_assert_int_eq(calibrate("llama-3-8b", "a100-80g", 1, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "no Vidur profile on a100 has llama-3-8b's shape"), "%s", err);
    rm_tree();
    make_tree(NULL, "mlp_act");
    ck_assert_int_eq(calibrate("llama-2-7b", "a100-80g", 1, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "mlp.csv:1: no column 'time_stats.mlp_act.median'"), "%s", err);
    rm_tree();
}
END_TEST

START_TEST(tp_cost_files_are_checked) {
    char p[256], err[1024];
    const char *head = "format = 1\nkind = linear\nname = llama-2-7b\nn_layers = 32\n"
                       "d_model = 4096\nn_heads = 32\nn_kv_heads = 32\nhead_dim = 128\n"
                       "d_ff = 11008\nvocab = 32000\nmax_seq = 4096\ntied_embeddings = 0\n"
                       "dtype_bytes = 2\nstep_s = 0\nseq_s = 0\nsampled_s = 0\n"
                       "kv_token_s = 0\nattn_pair_s = 0\ngemm_rows = 1, 64\n"
                       "gemm_s_per_param = 1e-12, 2e-12\n";
    char text[2048];
    cost_file_t cf;
    snprintf(text, sizeof text, "%stp = 4\nallreduce_latency_s = 1e-5\n", head);
    ck_assert_ptr_nonnull(testutil_write_tmp(p, sizeof p, ".cost", text));
    ck_assert_int_eq(cost_file_read(p, &cf, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tp = 4 needs 'allreduce_s_per_byte'"), "%s", err);
    snprintf(text, sizeof text, "%stp = 0\n", head);
    ck_assert_ptr_nonnull(testutil_write_tmp(p, sizeof p, ".cost", text));
    ck_assert_int_eq(cost_file_read(p, &cf, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tp must be a tensor-parallel degree >= 1 (got 0)"), "%s", err);
    snprintf(text, sizeof text, "%stp = 4\nallreduce_latency_s = 1e-5\n"
             "allreduce_s_per_byte = 1e-11\nhw = h100\n", head);
    ck_assert_ptr_nonnull(testutil_write_tmp(p, sizeof p, ".cost", text));
    ck_assert_msg(cost_file_read(p, &cf, err, sizeof err) == 0, "%s", err);
    cost_model_t *m = cost_file_model(&cf, 4, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    cost_features_t f = {.tokens = 10, .seqs = 10, .sampled = 0};
    preset_model_t m7;
    ck_assert_int_eq(preset_model_get("llama-2-7b", &m7, err, sizeof err), 0);
    double gemm10 = 1e-12 + (10.0 - 1) / (64 - 1) * 1e-12;
    double want = preset_model_layer_matrix_params(&m7) * gemm10 +
                  64 * (1e-5 + 1e-11 * 10 * 4096 * 2);
    ck_assert_msg(fabs(cost_pass_time(m, &f) / want - 1) < 1e-6, "%g vs %g",
                  cost_pass_time(m, &f), want);
    cost_free(m);
    unlink(p);
}
END_TEST

START_TEST(shipped_calibrations_load) {
    char path[320], err[1024];
    ck_assert_msg(cost_file_builtin_count() >= 24, "%d", cost_file_builtin_count());
    ck_assert_int_eq(cost_file_builtin("llama-2-7b", "a100-80g", 1, path, sizeof path), 0);
    ck_assert_str_eq(path, "builtin:llama-2-7b.a100-80g.tp1");
    ck_assert_int_eq(cost_file_builtin("llama-2-13b", "a100-80g", 1, path, sizeof path), -1);
    for (int i = 0; i < cost_file_builtin_count(); i++) {
        cost_file_t cf;
        snprintf(path, sizeof path, "builtin:%s", cost_file_builtin_name(i));
        ck_assert_msg(cost_file_read(path, &cf, err, sizeof err) == 0, "%s", err);
        ck_assert(cf.kind == COST_FILE_LINEAR && cf.hw_preset[0]);
        ck_assert_msg(cf.cv_median_err <= 0.03 && cf.cv_p90_err <= 0.08, "%s: cv %g / %g",
                      path, cf.cv_median_err, cf.cv_p90_err);
    }
    cost_file_t cf;
    ck_assert_int_eq(cost_file_read("builtin:nope", &cf, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "builtin:nope: no such shipped calibration"), "%s", err);
}
END_TEST

/* The shipped files are what `calibrate --vidur` makes of the published profiles today
 * (sim/costs/regen.sh rebuilds them), and their whole-pass errors meet the goal. */
START_TEST(shipped_calibrations_match_the_profiles) {
    char dir[512], path[320], err[2048];
    if (!testutil_data_path("profiles/vidur/compute", dir, sizeof dir)) return;
    dir[strlen(dir) - strlen("/compute")] = '\0';
    static const struct { const char *model, *hw; int tp; } cases[] = {
        {"llama-2-7b", "a100-80g", 1}, {"llama-2-7b", "h100", 2}, {"llama-2-70b", "h100", 4},
        {"llama-3-8b", "a100-80g", 8},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        vidur_opts_t o = {.dir = dir, .model = cases[c].model, .hw = cases[c].hw,
                          .tp = cases[c].tp, .folds = 5, .seed = 1};
        ck_assert_msg(vidur_calibrate(&o, &res, err, sizeof err) == 0, "%s", err);
        const vidur_op_fit_t *layer = &res.ops[res.n_ops - 2];
        ck_assert_msg(layer->cv_median <= 0.03 && layer->cv_p90 <= 0.08, "%s %s tp %d: %g %g",
                      cases[c].model, cases[c].hw, cases[c].tp, layer->cv_median, layer->cv_p90);
        cost_file_t shipped;
        ck_assert_int_eq(cost_file_builtin(cases[c].model, cases[c].hw, cases[c].tp, path,
                                           sizeof path), 0);
        ck_assert_msg(cost_file_read(path, &shipped, err, sizeof err) == 0, "%s", err);
        const cost_linear_params_t *a = &res.cf.lin, *b = &shipped.lin;
        ck_assert_int_eq(a->n_knots, b->n_knots);
        for (int k = 0; k < a->n_knots; k++)
            ck_assert_msg(a->knot_rows[k] == b->knot_rows[k] &&
                          fabs(a->knot_s[k] / b->knot_s[k] - 1) < 1e-12,
                          "%s: knot %d differs: rerun sim/costs/regen.sh", path, k);
        ck_assert(fabs(a->kv_token_s / b->kv_token_s - 1) < 1e-12);
        ck_assert(a->allreduce_latency_s == 0 ||
                  fabs(a->allreduce_latency_s / b->allreduce_latency_s - 1) < 1e-12);
    }
}
END_TEST

/* The shipped operator rates (sim/costs/GPU.ops) are what `calibrate --vidur --ops` makes
 * of the published profiles today, and a held-out model's layer stays within a few percent. */
START_TEST(shipped_operator_rates_match_the_profiles) {
    char dir[512], err[2048];
    if (!testutil_data_path("profiles/vidur/compute", dir, sizeof dir)) return;
    dir[strlen(dir) - strlen("/compute")] = '\0';
    static vidur_ops_result_t r;
    static gpu_ops_t shipped;
    const char *gpus[] = { "h100", "a100-80g" };
    for (int g = 0; g < 2; g++) {
        ck_assert_msg(vidur_ops_fit(dir, gpus[g], &r, err, sizeof err) == 0, "%s", err);
        ck_assert_int_ge(r.n_models, 5);
        for (int m = 0; m < r.n_models; m++)
            ck_assert_msg(r.cv_layer_by_model[m] < 0.08, "%s held out: %g", r.models[m],
                          r.cv_layer_by_model[m]);
        ck_assert(gpu_ops_builtin(gpus[g], &shipped) == 0);
        ck_assert_int_eq(r.ops.n, shipped.n);
        for (int k = 0; k < GPU_OP_KINDS; k++)
            for (int i = 0; i < r.ops.n; i++)
                ck_assert_msg(r.ops.rows[i] == shipped.rows[i] &&
                              fabs(r.ops.s[k][i] - shipped.s[k][i]) <= 1e-8 * shipped.s[k][i] &&
                              fabs(r.ops.t0[k][i] - shipped.t0[k][i]) <= 1e-8 * shipped.t0[k][i] + 1e-15,
                              "%s: %s at %g rows differs: rerun sim/costs/regen.sh", gpus[g],
                              gpu_op_names[k], r.ops.rows[i]);
    }
    ck_assert_int_eq(vidur_ops_fit(dir, "h200", &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "h200"), "%s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("vidur");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, csvtab_reads_and_names_bad_cells);
    tcase_add_test(tc, calibration_reproduces_the_profile);
    tcase_add_test(tc, bad_profiles_are_named);
    tcase_add_test(tc, tp_cost_files_are_checked);
    tcase_add_test(tc, shipped_calibrations_load);
    tcase_add_test(tc, shipped_calibrations_match_the_profiles);
    tcase_add_test(tc, shipped_operator_rates_match_the_profiles);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}
