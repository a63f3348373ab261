/* test_gpu_ops: a GPU's operator rates by shape (sim/gpu_ops.h) and the mixture-of-experts
 * term of the linear cost model (sim/cost.h): the shipped rates load and are monotone, a
 * model priced from them lands near the calibration fitted to its own Vidur profile, the
 * expected number of distinct experts by hand, and an MoE step's cost between one token's
 * top-k experts and every expert. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sim/cost.h"
#include "sim/cost_file.h"
#include "sim/gpu_ops.h"
#include "sim/presets.h"
#include "tests/testutil.h"

static gpu_ops_t ops;

START_TEST(shipped_rates_load_and_are_monotone) {
    const char *gpus[] = { "h100", "a100-80g" };
    for (int g = 0; g < 2; g++) {
        ck_assert_msg(gpu_ops_builtin(gpus[g], &ops) == 0, "%s", gpus[g]);
        ck_assert_str_eq(ops.hw, gpus[g]);
        ck_assert(ops.n >= 2);
        for (int k = 0; k < GPU_OP_KINDS; k++)
            for (int i = 1; i < ops.n; i++) {
                ck_assert(ops.rows[i] > ops.rows[i - 1]);
                ck_assert(ops.t0[k][i] >= ops.t0[k][i - 1] && ops.s[k][i] >= ops.s[k][i - 1]);
            }
        /* a bigger matrix, a longer call; more rows, no faster */
        ck_assert(gpu_ops_time(&ops, GPU_OP_GEMM, 16, 5e7) > gpu_ops_time(&ops, GPU_OP_GEMM, 16, 1e7));
        ck_assert(gpu_ops_gemm_s(&ops, 4096) >= gpu_ops_gemm_s(&ops, 1));
        ck_assert(ops.ar_s_per_byte[0] > 0 && ops.ar_latency_s[2] >= ops.ar_latency_s[0]);
        ck_assert(isfinite(ops.cv_median[GPU_OP_KINDS]) && ops.cv_median[GPU_OP_KINDS] < 0.2);
    }
    ck_assert_int_eq(gpu_ops_builtin("mi300x", &ops), -1);
}
END_TEST

/* A decode step and a prefill step of the model from the rates vs from its own profile's
 * calibration: the cross-validated layer error is a few percent; a whole step within 15%. */
START_TEST(rates_predict_a_profiled_model) {
    char err[1024];
    ck_assert(gpu_ops_builtin("h100", &ops) == 0);
    preset_model_t m;
    preset_hw_t hw;
    ck_assert(preset_model_get("llama-2-7b", &m, err, sizeof err) == 0);
    ck_assert(preset_hw_get("h100", &hw, err, sizeof err) == 0);
    static cost_file_t syn, own;
    ck_assert_msg(gpu_ops_linear(&ops, &m, &hw, 1, &syn, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(cost_file_read("builtin:llama-2-7b.h100.tp1", &own, err, sizeof err) == 0, "%s",
                  err);
    cost_model_t *a = cost_file_model(&syn, 1, err, sizeof err);
    cost_model_t *b = cost_file_model(&own, 1, err, sizeof err);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    cost_seq_t dec[32], pre = { 1024, 0, 1 };
    for (int i = 0; i < 32; i++) dec[i] = (cost_seq_t){ 1, 600, 1 };
    double r1 = cost_step_time(a, dec, 32) / cost_step_time(b, dec, 32);
    double r2 = cost_step_time(a, &pre, 1) / cost_step_time(b, &pre, 1);
    ck_assert_msg(fabs(r1 - 1) < 0.15 && fabs(r2 - 1) < 0.15, "decode x%.3f, prefill x%.3f", r1, r2);
    cost_free(a);
    cost_free(b);
    /* tp that does not divide the heads is refused */
    ck_assert_int_eq(gpu_ops_linear(&ops, &m, &hw, 3, &syn, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tp 3"), "%s", err);
}
END_TEST

/* DeepSeek-V3 at tp 8 from the rates (issue #29): the latent's KV is read whole on every
 * device, attention in the latent space, 58 layers of experts after 3 dense ones. A decode
 * step of 16 costs more with its shared expert than without, and less with its 3 dense
 * layers than if they were layers of experts (16 tokens touch ~102 of 256 experts a layer:
 * 563M parameters a device to read, against a dense layer's 49.5M). */
START_TEST(latent_attention_and_dense_layers) {
    char err[1024];
    ck_assert(gpu_ops_builtin("h100", &ops) == 0);
    preset_model_t m;
    preset_hw_t hw;
    ck_assert(preset_model_get("deepseek-v3", &m, err, sizeof err) == 0);
    ck_assert(preset_hw_get("h100", &hw, err, sizeof err) == 0);
    static cost_file_t cf[3];
    ck_assert_msg(gpu_ops_linear(&ops, &m, &hw, 8, &cf[0], err, sizeof err) == 0, "%s", err);
    const cost_linear_params_t *p = &cf[0].lin;
    double read_bw = m.dtype_bytes / ops.s[GPU_OP_GEMM][0];
    ck_assert_double_eq_tol(p->kv_token_s, 61.0 * 576 * 2 / read_bw, 1e-18);
    ck_assert_double_eq_tol(p->attn_pair_s, 61.0 * 2 * 16 * (2 * 512 + 64) / (hw.flops * GPU_ATTN_EFF),
                            1e-20);
    ck_assert(p->moe_layers == 58 && p->moe_experts == 256 && p->moe_top_k == 8);
    preset_model_t no_shared = m, all_moe = m;
    no_shared.shared_d_ff = 0;
    all_moe.n_dense_layers = 0;
    ck_assert(gpu_ops_linear(&ops, &no_shared, &hw, 8, &cf[1], err, sizeof err) == 0);
    ck_assert(gpu_ops_linear(&ops, &all_moe, &hw, 8, &cf[2], err, sizeof err) == 0);
    cost_seq_t dec[16];
    for (int i = 0; i < 16; i++) dec[i] = (cost_seq_t){ 1, 4096, 1 };
    double t[3];
    for (int k = 0; k < 3; k++) {
        cost_model_t *c = cost_file_model(&cf[k], 8, err, sizeof err);
        ck_assert_msg(c != NULL, "%s", err);
        t[k] = cost_step_time(c, dec, 16);
        cost_free(c);
    }
    ck_assert_msg(t[0] > t[1] && t[0] < t[2], "%g %g %g", t[0], t[1], t[2]);
}
END_TEST

START_TEST(distinct_experts_by_hand) {
    /* E (1 - (1 - k/E)^T): one token touches its top-k, many touch all */
    ck_assert(fabs(cost_moe_experts_touched(8, 2, 1) - 2) < 1e-12);
    ck_assert(fabs(cost_moe_experts_touched(8, 2, 2) - 8 * (1 - 0.75 * 0.75)) < 1e-12);
    ck_assert(fabs(cost_moe_experts_touched(8, 2, 256) - 8) < 1e-9);
    ck_assert(cost_moe_experts_touched(128, 8, 16) < cost_moe_experts_touched(128, 8, 64));
    ck_assert(cost_moe_experts_touched(8, 2, 0) == 0);
}
END_TEST

START_TEST(moe_step_between_top_k_and_all_experts) {
    char err[1024];
    ck_assert(gpu_ops_builtin("h100", &ops) == 0);
    preset_model_t m;
    preset_hw_t hw;
    ck_assert(preset_model_get("mixtral-8x7b", &m, err, sizeof err) == 0);
    ck_assert(preset_model_is_moe(&m));
    ck_assert(preset_hw_get("h100", &hw, err, sizeof err) == 0);
    static cost_file_t cf;
    ck_assert_msg(gpu_ops_linear(&ops, &m, &hw, 2, &cf, err, sizeof err) == 0, "%s", err);
    const cost_linear_params_t *p = &cf.lin;
    ck_assert(p->moe_layers == 32 && p->moe_experts == 8 && p->moe_top_k == 2);
    /* one expert: gate, up and down of 4096 x 14336, half of each on a device at tp 2 */
    ck_assert(fabs(p->moe_expert_params - 3.0 * 4096 * 14336 / 2) < 1);
    /* a lone decode reads two experts' weights a layer, a large batch all eight: at least
     * the weight bytes at the peak bandwidth, and 4x as many experts cost ~4x */
    double one = cost_linear_moe_time(p, 1), many = cost_linear_moe_time(p, 256);
    double bytes1 = 32 * 2 * p->moe_expert_params * m.dtype_bytes;
    ck_assert_msg(one >= bytes1 / hw.mem_bw, "%g s for %g bytes", one, bytes1);
    ck_assert_msg(many / one > 3 && many / one < 6, "x%.2f", many / one);
    /* the efficiency term divides it */
    cost_linear_params_t q = *p;
    q.moe_eff = 0.5;
    ck_assert(fabs(cost_linear_moe_time(&q, 256) / many - 2) < 1e-9);
    /* a dense model has none */
    preset_model_t d;
    static cost_file_t dense;
    ck_assert(preset_model_get("llama-2-7b", &d, err, sizeof err) == 0);
    ck_assert(gpu_ops_linear(&ops, &d, &hw, 1, &dense, err, sizeof err) == 0);
    ck_assert(cost_linear_moe_time(&dense.lin, 256) == 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gpu_ops");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, shipped_rates_load_and_are_monotone);
    tcase_add_test(tc, rates_predict_a_profiled_model);
    tcase_add_test(tc, distinct_experts_by_hand);
    tcase_add_test(tc, latent_attention_and_dense_layers);
    tcase_add_test(tc, moe_step_between_top_k_and_all_experts);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}
