/* test_serving: serving profiles (sim/serving.h): the built-in vllm profile and its file
 * format, refusals that name the key or list the profiles, vLLM's KV sizing against the
 * block counts the real vLLM runs reported, CUDA-graph padding as vLLM captures, the
 * all-reduce table, and the profile's effect on a cost model (sim/serving_cost.h). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sim/cost.h"
#include "sim/presets.h"
#include "sim/serving.h"
#include "sim/serving_cost.h"
#include "tests/testutil.h"

START_TEST(builtin_vllm_loads) {
    serving_t s;
    char err[512];
    ck_assert_msg(serving_get("vllm", &s, err, sizeof err) == 0, "%s", err);
    ck_assert(s.active);
    ck_assert_str_eq(s.name, "vllm");
    ck_assert_str_eq(s.path, "builtin:vllm");
    ck_assert_int_eq(s.async_scheduling, 1);
    ck_assert_int_eq(s.cuda_graphs, 1);
    ck_assert(s.attn_kv_bw_eff > 0 && s.attn_kv_bw_eff <= 1);
    ck_assert(s.nccl_bytes > 0);
    ck_assert_msg(serving_validate(&s, err, sizeof err) == 0, "%s", err);
    /* case does not matter; builtin:NAME is the same */
    serving_t t;
    ck_assert(serving_get("builtin:VLLM", &t, err, sizeof err) == 0);
    ck_assert(t.attn_kv_bw_eff == s.attn_kv_bw_eff);
    serving_none(&t);
    ck_assert(!t.active);
    ck_assert(serving_get("none", &t, err, sizeof err) == 0 && !t.active);
}
END_TEST

START_TEST(unknown_name_lists_the_profiles) {
    serving_t s;
    char err[512];
    ck_assert_int_eq(serving_get("sglang", &s, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "unknown serving profile 'sglang'") && strstr(err, "vllm") &&
                  strstr(err, "none"), "%s", err);
}
END_TEST

START_TEST(file_round_trip_and_bad_lines) {
    serving_t s, back;
    char err[512], path[256], bad[256];
    ck_assert(serving_get("vllm", &s, err, sizeof err) == 0);
    s.request_s = 0.0123;
    s.step_cv_err = 0.045;
    ck_assert_ptr_nonnull(testutil_tmpfile(path, sizeof path, ".serving"));
    ck_assert_msg(serving_write(path, &s, "a test\nof two lines", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(serving_get(path, &back, err, sizeof err) == 0, "%s", err);
    ck_assert(back.request_s == 0.0123 && back.step_cv_err == 0.045);
    ck_assert(back.attn_kv_bw_eff == s.attn_kv_bw_eff && back.nccl_bytes == s.nccl_bytes);
    ck_assert_str_eq(back.path, path);
    unlink(path);
    /* a term out of its physical range, an unknown key (with its line), a missing key */
    ck_assert_ptr_nonnull(testutil_tmpfile(bad, sizeof bad, ".serving"));
    s.attn_kv_bw_eff = 2;
    ck_assert(serving_write(bad, &s, NULL, err, sizeof err) == 0);
    ck_assert_int_eq(serving_get(bad, &back, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "attn_kv_bw_eff"), "%s", err);
    s.attn_kv_bw_eff = 0.9;
    ck_assert(serving_write(bad, &s, NULL, err, sizeof err) == 0);
    FILE *f = fopen(bad, "a");
    ck_assert_ptr_nonnull(f);
    fputs("speed = 3\n", f);
    fclose(f);
    ck_assert_int_eq(serving_get(bad, &back, err, sizeof err), -1);
    ck_assert_msg(strstr(err, bad) && strstr(err, "speed"), "%s", err);
    unlink(bad);
    ck_assert_ptr_nonnull(testutil_write_tmp(bad, sizeof bad, ".serving", "format = 1\nname = x\n"));
    ck_assert_int_eq(serving_get(bad, &back, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "missing required key"), "%s", err);
    unlink(bad);
}
END_TEST

/* The measured vLLM runs' own block counts (shared/data/vllm-h100, its README): the issue's
 * bar is 2%. */
static int32_t kv(const char *model, int tp) {
    serving_t s;
    char err[512];
    preset_model_t m;
    preset_hw_t hw;
    ck_assert(serving_get("vllm", &s, err, sizeof err) == 0);
    ck_assert_msg(preset_model_get(model, &m, err, sizeof err) == 0, "%s", err);
    ck_assert(preset_hw_get("h100", &hw, err, sizeof err) == 0);
    serving_kv_parts_t parts;
    int32_t n = serving_kv_blocks(&s, &m, &hw, tp, 1, 0.9, 16, 2048, 128, &parts, err, sizeof err);
    ck_assert_msg(n > 0, "%s", err);
    ck_assert(parts.weights > 0 && parts.activations > 0 && parts.per_block > 0);
    return n;
}

START_TEST(kv_blocks_as_vllm_sized_them) {
    int32_t llama = kv("llama-2-7b", 1), mixtral = kv("mixtral-8x7b", 2);
    ck_assert_msg(fabs(llama / 7462.0 - 1) < 0.02, "llama-2-7b tp1: %d blocks, vLLM 7462", llama);
    ck_assert_msg(fabs(mixtral / 27510.0 - 1) < 0.02, "mixtral tp2: %d blocks, vLLM 27510",
                  mixtral);
    /* more utilisation, more blocks; a model that does not fit says so */
    serving_t s;
    char err[512];
    preset_model_t m;
    preset_hw_t hw;
    ck_assert(serving_get("vllm", &s, err, sizeof err) == 0);
    ck_assert(preset_model_get("llama-2-70b", &m, err, sizeof err) == 0);
    ck_assert(preset_hw_get("h100", &hw, err, sizeof err) == 0);
    ck_assert_int_eq(serving_kv_blocks(&s, &m, &hw, 1, 1, 0.9, 16, 2048, 128, NULL, err, sizeof err),
                     -1);
    ck_assert_msg(strstr(err, "llama-2-70b"), "%s", err);
    ck_assert(serving_kv_blocks(&s, &m, &hw, 4, 1, 0.95, 16, 2048, 128, NULL, err, sizeof err) >
              serving_kv_blocks(&s, &m, &hw, 4, 1, 0.9, 16, 2048, 128, NULL, err, sizeof err));
}
END_TEST

START_TEST(graphs_pad_to_vllm_capture_sizes) {
    serving_t s;
    char err[512];
    ck_assert(serving_get("vllm", &s, err, sizeof err) == 0);
    /* min(2 x max_num_seqs, 512), never above the step budget */
    ck_assert_int_eq(serving_graph_max(&s, 128, 2048), 256);
    ck_assert_int_eq(serving_graph_max(&s, 512, 8192), 512);
    ck_assert_int_eq(serving_graph_max(&s, 128, 100), 100);
    /* 1, 2, 4, then multiples of 8 to 256, then of 16 */
    ck_assert_int_eq(serving_padded_tokens(1, 256), 1);
    ck_assert_int_eq(serving_padded_tokens(3, 256), 4);
    ck_assert_int_eq(serving_padded_tokens(9, 256), 16);
    ck_assert_int_eq(serving_padded_tokens(128, 256), 128);
    ck_assert_int_eq(serving_padded_tokens(257, 512), 272);
    ck_assert_int_eq(serving_padded_tokens(300, 256), 300);   /* eager: not captured */
    ck_assert_int_eq(serving_padded_tokens(250, 0), 250);
    s.cuda_graphs = 0;
    ck_assert_int_eq(serving_graph_max(&s, 128, 2048), 0);
}
END_TEST

START_TEST(allreduce_table_and_cpu_time) {
    serving_t s;
    char err[512];
    double lat2, b2, lat4, b4, lat3, b3, lat16, b16;
    ck_assert(serving_get("vllm", &s, err, sizeof err) == 0);
    serving_allreduce(&s, 2, &lat2, &b2);
    serving_allreduce(&s, 4, &lat4, &b4);
    serving_allreduce(&s, 3, &lat3, &b3);
    serving_allreduce(&s, 16, &lat16, &b16);
    ck_assert(lat2 > 0 && lat4 >= lat2 && b2 > 0);
    ck_assert(lat3 == lat4 && b3 == b4);            /* the next degree up */
    ck_assert(lat16 >= lat4);                       /* the largest beyond the table */
    double c0 = serving_cpu_time(&s, 0, 0), c1 = serving_cpu_time(&s, 100, 100);
    ck_assert(fabs(c0 - s.cpu_step_s) < 1e-15);
    ck_assert(fabs(c1 - (s.cpu_step_s + 100 * s.cpu_seq_s + 100 * s.cpu_token_s)) < 1e-15);
}
END_TEST

/* The profile on a cost model: graphs pad a small decode up to its capture size, an eager
 * step is at least its launches, "none" changes nothing. */
START_TEST(profile_on_a_cost_model) {
    serving_t s, none;
    char err[512];
    ck_assert(serving_get("vllm", &s, err, sizeof err) == 0);
    serving_none(&none);
    const preset_model_t *m = preset_model_find("llama-2-7b");
    const preset_hw_t *hw = preset_hw_find("h100");
    cost_roofline_params_t p;
    cost_roofline_defaults(&p);
    cost_model_t *bare = cost_roofline_new(m, hw, &p);
    cost_model_t *same = serving_cost_wrap(&none, cost_roofline_new(m, hw, &p), m, 256);
    cost_model_t *wrapped = serving_cost_wrap(&s, cost_roofline_new(m, hw, &p), m, 256);
    ck_assert_ptr_nonnull(bare);
    ck_assert_ptr_nonnull(wrapped);
    cost_seq_t three[3] = { { 1, 500, 1 }, { 1, 500, 1 }, { 1, 500, 1 } };
    cost_seq_t four[4] = { { 1, 500, 1 }, { 1, 500, 1 }, { 1, 500, 1 }, { 1, 0, 1 } };
    ck_assert(cost_step_time(same, three, 3) == cost_step_time(bare, three, 3));
    /* three decodes run as the 4-token graph: at least the bare cost of four rows */
    ck_assert(cost_step_time(wrapped, three, 3) >= cost_step_time(bare, four, 4) * 0.999);
    /* an eager step of 300 tokens (past the largest graph): at least its kernel launches */
    cost_seq_t big = { 300, 0, 1 };
    ck_assert(cost_step_time(wrapped, &big, 1) >=
              m->n_layers * s.kernels_per_layer * s.launch_s);
    cost_free(bare);
    cost_free(same);
    cost_free(wrapped);
}
END_TEST

int main(void) {
    Suite *su = suite_create("serving");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, builtin_vllm_loads);
    tcase_add_test(tc, unknown_name_lists_the_profiles);
    tcase_add_test(tc, file_round_trip_and_bad_lines);
    tcase_add_test(tc, kv_blocks_as_vllm_sized_them);
    tcase_add_test(tc, graphs_pad_to_vllm_capture_sizes);
    tcase_add_test(tc, allreduce_table_and_cpu_time);
    tcase_add_test(tc, profile_on_a_cost_model);
    suite_add_tcase(su, tc);
    return testutil_run(su);
}
