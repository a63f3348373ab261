/* test_parallel: parallel specs (sim/parallel.h): parsing and its refusals, the checks
 * against a model and a GPU, the fullest stage's shape, the all-to-all and hand-over
 * figures by hand, the pipeline's step time in both schedules, expert parallelism against
 * tensor-parallel experts and data-parallel attention in the roofline and the linear model,
 * the KV capacity of data-parallel ranks, and a cluster group's `parallel` key. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sim/cluster.h"
#include "sim/cost.h"
#include "sim/parallel.h"
#include "sim/presets.h"
#include "sim/serving.h"
#include "sim/sim.h"
#include "tests/testutil.h"

static preset_model_t model(const char *name) {
    preset_model_t m;
    char err[256];
    ck_assert_msg(preset_model_get(name, &m, err, sizeof err) == 0, "%s", err);
    return m;
}

static preset_hw_t hw(const char *name) {
    preset_hw_t h;
    char err[256];
    ck_assert_msg(preset_hw_get(name, &h, err, sizeof err) == 0, "%s", err);
    return h;
}

START_TEST(parse_and_format) {
    par_t p;
    char err[256], buf[128];
    ck_assert_msg(par_parse("ep=8,tp=8", &p, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(p.tp, 8);
    ck_assert_int_eq(p.ep, 8);
    ck_assert_int_eq(p.dp, 1);
    ck_assert_int_eq(p.pp, 1);
    ck_assert_int_eq(par_gpus(&p), 8);
    ck_assert(par_is_tp_only(&p) == 0);
    par_format(&p, buf, sizeof buf);
    ck_assert_str_eq(buf, "tp=8,dp=1,ep=8,pp=1");
    ck_assert(par_parse("tp=4,pp=2,mb=4,sched=sync", &p, err, sizeof err) == 0);
    ck_assert_int_eq(p.mb, 4);
    ck_assert_int_eq(p.pp_sync, 1);
    ck_assert_int_eq(par_gpus(&p), 8);
    par_format(&p, buf, sizeof buf);
    ck_assert_str_eq(buf, "tp=4,dp=1,ep=1,pp=2,mb=4,sched=sync");
    /* a canonical spec reads back as itself */
    par_t q;
    ck_assert(par_parse(buf, &q, err, sizeof err) == 0);
    ck_assert(memcmp(&p, &q, sizeof p) == 0);
    par_default(&p, 2);
    ck_assert(par_is_tp_only(&p));
    ck_assert_int_eq(par_gpus(&p), 2);
}
END_TEST

START_TEST(parse_refusals_name_the_item) {
    par_t p;
    char err[256];
    ck_assert_int_eq(par_parse("tp=8,xp=2", &p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "unknown key 'xp'"));
    ck_assert_int_eq(par_parse("tp=8,tp=4", &p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "tp given twice"));
    ck_assert_int_eq(par_parse("tp=0", &p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "tp=0 is not a whole number"));
    ck_assert_int_eq(par_parse("tp=2x", &p, err, sizeof err), -1);
    ck_assert_int_eq(par_parse("tp8", &p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not KEY=VALUE"));
    ck_assert_int_eq(par_parse("tp=8,,ep=8", &p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "empty item"));
    ck_assert_int_eq(par_parse("tp=8,mb=4", &p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "pipeline's"));
    ck_assert_int_eq(par_parse("pp=2,sched=later", &p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not async or sync"));
    ck_assert_int_eq(par_parse("", &p, err, sizeof err), -1);
}
END_TEST

START_TEST(check_against_model_and_gpu) {
    preset_model_t ds = model("deepseek-v3"), mx = model("mixtral-8x22b");
    preset_model_t ll = model("llama-3.1-8b");
    preset_hw_t h200 = hw("h200");
    par_t p;
    char err[256];
    ck_assert(par_parse("tp=8,ep=8", &p, err, sizeof err) == 0);
    ck_assert_msg(par_check(&p, &ds, &h200, err, sizeof err) == 0, "%s", err);
    ck_assert(par_parse("tp=1,dp=8,ep=8", &p, err, sizeof err) == 0);
    ck_assert_msg(par_check(&p, &ds, &h200, err, sizeof err) == 0, "%s", err);
    /* dp without ep over the ranks */
    ck_assert(par_parse("tp=8,dp=2", &p, err, sizeof err) == 0);
    ck_assert_int_eq(par_check(&p, &ds, &h200, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "ep=16"));
    /* ep neither 1 nor the stage */
    ck_assert(par_parse("tp=8,ep=4", &p, err, sizeof err) == 0);
    ck_assert_int_eq(par_check(&p, &ds, &h200, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "tp x dp = 8"));
    /* a dense model: no dp, no ep */
    ck_assert(par_parse("dp=2,ep=2", &p, err, sizeof err) == 0);
    ck_assert_int_eq(par_check(&p, &ll, &h200, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--replicas 2"));
    ck_assert(par_parse("tp=2,ep=2", &p, err, sizeof err) == 0);
    ck_assert_int_eq(par_check(&p, &ll, &h200, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "has no experts"));
    /* 16 GPUs of experts for 8 experts */
    ck_assert(par_parse("tp=16,ep=16", &p, err, sizeof err) == 0);
    ck_assert_int_eq(par_check(&p, &mx, &h200, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "8 experts"));
    /* heads */
    ck_assert(par_parse("tp=3", &p, err, sizeof err) == 0);
    ck_assert_int_eq(par_check(&p, &ds, &h200, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "128 attention heads"));
    /* layers */
    ck_assert(par_parse("pp=64", &p, err, sizeof err) == 0);
    ck_assert_int_eq(par_check(&p, &ds, &h200, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "only 61 layers"));
    /* past a node with no network figure */
    preset_hw_t lone = h200;
    lone.net_bw = 0;
    ck_assert(par_parse("tp=8,pp=2", &p, err, sizeof err) == 0);
    ck_assert_int_eq(par_check(&p, &ds, &lone, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "net_bw"));
    lone = h200;
    lone.link_bw = 0;
    ck_assert_int_eq(par_check(&p, &ds, &lone, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "link_bw"));
}
END_TEST

START_TEST(stage_shape) {
    preset_model_t ds = model("deepseek-v3"), st;
    par_t p;
    par_default(&p, 8);
    par_stage_model(&ds, &p, &st);
    ck_assert(memcmp(&ds, &st, sizeof ds) == 0);
    /* 61 layers over 2: the last stage holds 31, none of the 3 dense first layers */
    p.pp = 2;
    par_stage_model(&ds, &p, &st);
    ck_assert_int_eq(st.n_layers, 31);
    ck_assert_int_eq(st.n_dense_layers, 0);
    /* over 30 stages of 3 (the last stage's 3 are layers 58-60): still none dense; over
     * 61 of 1: none; a 4-layer model with 3 dense first layers over 2 stages: the last
     * stage holds layers 2 and 3, of which layer 2 is dense */
    preset_model_t tiny = ds;
    tiny.n_layers = 4;
    tiny.n_dense_layers = 3;
    par_stage_model(&tiny, &p, &st);
    ck_assert_int_eq(st.n_layers, 2);
    ck_assert_int_eq(st.n_dense_layers, 1);
    preset_model_t go = model("gpt-oss-120b");
    p.pp = 4;   /* 36 layers of which 18 windowed: 9 a stage, 4.5 -> 5 (rounded) windowed */
    par_stage_model(&go, &p, &st);
    ck_assert_int_eq(st.n_layers, 9);
    ck_assert_int_eq(st.n_window_layers, 5);
    /* a stage's KV a token is its layers' */
    ck_assert_double_eq_tol(preset_model_kv_bytes_per_token(&st),
                            preset_model_kv_bytes_per_token(&go) * 9 / 36, 1e-9);
}
END_TEST

START_TEST(a2a_and_p2p_by_hand) {
    preset_model_t ds = model("deepseek-v3");
    preset_hw_t h200 = hw("h200");
    par_t p;
    char err[256];
    double lat, spt;
    const double eff = 0.77, tok = (double)ds.d_model * ds.dtype_bytes;
    /* dp 1: the all-reduce combines; no all-to-all */
    ck_assert(par_parse("tp=8,ep=8", &p, err, sizeof err) == 0);
    ck_assert(par_a2a(&p, &ds, &h200, eff, &lat, &spt, err, sizeof err) == 0);
    ck_assert(lat == 0 && spt == 0);
    /* 8 ranks in a node: a token goes to 7 (1 - (7/8)^8) other GPUs, each GPU sends 1/8 of
     * the tokens, twice (dispatch, combine) over NVLink at eff */
    ck_assert(par_parse("tp=1,dp=8,ep=8", &p, err, sizeof err) == 0);
    ck_assert(par_a2a(&p, &ds, &h200, eff, &lat, &spt, err, sizeof err) == 0);
    const double remote = 7.0 * (1.0 - pow(7.0 / 8.0, 8));
    ck_assert_double_eq_tol(spt, 2.0 * remote * tok / 8.0 / (h200.link_bw * eff), 1e-18);
    ck_assert_double_eq_tol(lat, 2.0 * h200.link_latency, 1e-15);
    /* 16 ranks on two nodes: the off-node half of the peers over the network, the slower path */
    ck_assert(par_parse("tp=1,dp=16,ep=16", &p, err, sizeof err) == 0);
    ck_assert(par_a2a(&p, &ds, &h200, eff, &lat, &spt, err, sizeof err) == 0);
    const double r16 = 15.0 * (1.0 - pow(15.0 / 16.0, 8)), per = r16 * tok / 16.0;
    const double off = 8.0 / 15.0;
    ck_assert_double_eq_tol(spt, 2.0 * fmax(per * (1 - off) / (h200.link_bw * eff),
                                            per * off / h200.net_bw), 1e-18);
    ck_assert_double_eq_tol(lat, 2.0 * (h200.link_latency + h200.net_latency), 1e-15);
    /* the pipeline's hand-over: within a node over NVLink, across nodes over the network */
    ck_assert(par_parse("tp=4,pp=2", &p, err, sizeof err) == 0);
    ck_assert(par_p2p(&p, &ds, &h200, eff, &lat, &spt, err, sizeof err) == 0);
    ck_assert_double_eq_tol(spt, tok / (h200.link_bw * eff), 1e-18);
    ck_assert(par_parse("tp=8,pp=2", &p, err, sizeof err) == 0);
    ck_assert(par_p2p(&p, &ds, &h200, eff, &lat, &spt, err, sizeof err) == 0);
    ck_assert_double_eq_tol(spt, tok / h200.net_bw, 1e-18);
}
END_TEST

/* A stage whose pass costs 1 ms + 1 us a token, to check the pipeline's arithmetic. */
static double fake_pass(const cost_model_t *m, const cost_features_t *f) {
    (void)m;
    return f->tokens > 0 ? 1e-3 + 1e-6 * (double)f->tokens : 0;
}
static void fake_destroy(cost_model_t *m) { free(m); }
static cost_model_t *fake(void) {
    cost_model_t *m = calloc(1, sizeof *m);
    m->pass_time = fake_pass;
    m->destroy = fake_destroy;
    m->name = "fake";
    return m;
}

START_TEST(pipeline_schedules) {
    par_t p;
    char err[256];
    const double lat = 1e-5, spt = 1e-8;
    ck_assert(par_parse("pp=4", &p, err, sizeof err) == 0);
    cost_model_t *async = par_pipeline_new(fake(), &p, lat, spt);
    ck_assert(par_parse("pp=4,mb=8,sched=sync", &p, err, sizeof err) == 0);
    cost_model_t *sync = par_pipeline_new(fake(), &p, lat, spt);
    ck_assert_ptr_nonnull(async);
    ck_assert_ptr_nonnull(sync);
    /* one sequence of 100 tokens: one micro-batch through 4 stages */
    cost_features_t one = {.tokens = 100, .seqs = 1, .sampled = 1, .kv_tokens = 100,
                           .attn_pairs = 5050};
    double t1 = 1e-3 + 1e-6 * 100 + lat + spt * 100;
    ck_assert_double_eq_tol(cost_pass_time(async, &one), 4 * t1, 1e-12);
    ck_assert_double_eq_tol(cost_pass_time(sync, &one), (1 + 4 - 1) * t1, 1e-12);
    /* 64 decodes: async splits into 4 micro-batches of 16 and keeps every stage busy; sync
     * into 8 of 8 with a bubble of 3 */
    cost_features_t dec = {.tokens = 64, .seqs = 64, .sampled = 64, .kv_tokens = 64000,
                           .attn_pairs = 64000};
    double t16 = 1e-3 + 16e-6 + lat + spt * 16, t8 = 1e-3 + 8e-6 + lat + spt * 8;
    ck_assert_double_eq_tol(cost_pass_time(async, &dec), 4 * t16, 1e-12);
    ck_assert_double_eq_tol(cost_pass_time(sync, &dec), (8 + 3) * t8, 1e-12);
    cost_features_t none = {0};
    ck_assert(cost_pass_time(async, &none) == 0);
    /* pp 1 is the stage itself */
    par_default(&p, 1);
    cost_model_t *f = fake(), *same = par_pipeline_new(f, &p, lat, spt);
    ck_assert_ptr_eq(f, same);
    cost_free(same);
    cost_free(async);
    cost_free(sync);
    cost_features_t split;
    par_split_features(&dec, 3, &split);
    ck_assert_int_eq(split.tokens, 22);
    ck_assert_int_eq(split.kv_tokens, 21334);
}
END_TEST

static cost_model_t *roof(const preset_model_t *m, const preset_hw_t *h, const char *spec) {
    par_t p;
    char err[256];
    ck_assert(par_parse(spec, &p, err, sizeof err) == 0);
    cost_roofline_params_t rp;
    cost_roofline_defaults(&rp);
    rp.tp = p.tp;
    double lat, spt;
    ck_assert(par_a2a(&p, m, h, rp.bw_eff, &lat, &spt, err, sizeof err) == 0);
    par_apply_roofline(&p, lat, spt, &rp);
    ck_assert_msg(cost_roofline_check(m, h, &rp, err, sizeof err) == 0, "%s", err);
    return cost_roofline_new(m, h, &rp);
}

START_TEST(expert_and_data_parallel_roofline) {
    preset_model_t ds = model("deepseek-v3");
    preset_hw_t h200 = hw("h200");
    char err[128];
    ck_assert(preset_model_set_format(&ds, "fp8", err, sizeof err) == 0);
    cost_model_t *tp8 = roof(&ds, &h200, "tp=8"), *ep8 = roof(&ds, &h200, "tp=8,ep=8");
    cost_model_t *dp8 = roof(&ds, &h200, "tp=1,dp=8,ep=8");
    enum { B = 64 };
    cost_seq_t dec[B];
    for (int i = 0; i < B; i++) dec[i] = (cost_seq_t){1, 4096, 1};
    cost_breakdown_t a, b, c;
    ck_assert(cost_roofline_explain(tp8, dec, B, &a) == 0);
    ck_assert(cost_roofline_explain(ep8, dec, B, &b) == 0);
    ck_assert(cost_roofline_explain(dp8, dec, B, &c) == 0);
    /* whole experts on 8 GPUs read and multiply what tensor-parallel slices of all do */
    ck_assert_double_eq_tol(a.weight_bytes, b.weight_bytes, a.weight_bytes * 1e-9);
    ck_assert_double_eq_tol(a.flops, b.flops, a.flops * 1e-9);
    /* each token's activations go to its experts only: fewer bytes with ep */
    ck_assert(b.bytes < a.bytes);
    /* data-parallel attention: a GPU reads whole attention weights (more than a tp 8
     * slice) but only its 8 sequences' latent cache, which tp 8 replicates in full */
    ck_assert(c.weight_bytes > b.weight_bytes);
    ck_assert(c.kv_bytes < b.kv_bytes / 4);
    ck_assert(c.comm_s > 0);
    /* one sequence does not split over ranks: the busiest rank has it all */
    cost_features_t f1 = {.tokens = 1, .seqs = 1}, f8 = {.tokens = 8, .seqs = 8};
    ck_assert(cost_rank_share(&f1, 8) == 1.0);
    ck_assert(cost_rank_share(&f8, 8) == 1.0 / 8);
    cost_features_t f9 = {.tokens = 9, .seqs = 9};
    ck_assert_double_eq_tol(cost_rank_share(&f9, 8), 2.0 / 9, 1e-15);
    cost_free(tp8);
    cost_free(ep8);
    cost_free(dp8);
}
END_TEST

START_TEST(linear_model_split) {
    cost_linear_params_t p;
    memset(&p, 0, sizeof p);
    p.step_s = 1e-3;
    p.seq_s = 1e-5;
    p.layer_params = 1e9;
    p.n_knots = 1;
    p.knot_rows[0] = 1;
    p.knot_s[0] = 1e-12;
    p.kv_token_s = 1e-9;
    p.moe_layers = 10;
    p.moe_experts = 64;
    p.moe_top_k = 4;
    p.moe_expert_params = 1e7;
    char err[256];
    ck_assert_msg(cost_linear_check(&p, err, sizeof err) == 0, "%s", err);
    cost_model_t *one = cost_linear_new(&p);
    preset_model_t m = model("qwen3-30b-a3b");
    par_t par;
    ck_assert(par_parse("tp=1,dp=4,ep=4", &par, err, sizeof err) == 0);
    cost_linear_params_t q = p;
    par_apply_linear(&par, &m, 1e-5, 1e-9, &q);
    ck_assert_int_eq(q.dp, 4);
    ck_assert_double_eq_tol(q.moe_experts, m.n_experts / 4.0, 1e-12);
    ck_assert_double_eq_tol(q.moe_top_k, m.experts_per_tok / 4.0, 1e-12);
    ck_assert_double_eq_tol(q.moe_expert_params, preset_model_expert_params(&m), 1e-3);
    ck_assert_msg(cost_linear_check(&q, err, sizeof err) == 0, "%s", err);
    /* dp alone (the experts as they were): each rank prices a quarter of 64 decodes, and
     * every MoE layer adds its all-to-all over all 64 tokens */
    cost_linear_params_t d = p;
    d.dp = 4;
    d.a2a_latency_s = 1e-5;
    d.a2a_s_per_token = 1e-9;
    cost_model_t *four = cost_linear_new(&d);
    cost_features_t f = {.tokens = 64, .seqs = 64, .sampled = 64, .kv_tokens = 64000};
    cost_features_t g = {.tokens = 16, .seqs = 16, .sampled = 16, .kv_tokens = 16000};
    double want = cost_pass_time(one, &g) - cost_linear_moe_time(&p, 16) +
                  cost_linear_moe_time(&p, 64) + 10 * (1e-5 + 1e-9 * 64);
    ck_assert_double_eq_tol(cost_pass_time(four, &f), want, 1e-12);
    cost_free(one);
    cost_free(four);
}
END_TEST

START_TEST(kv_capacity_of_ranks) {
    preset_model_t ds = model("deepseek-v3");
    preset_hw_t h200 = hw("h200");
    char err[256];
    ck_assert(preset_model_set_format(&ds, "fp8", err, sizeof err) == 0);
    ck_assert(preset_model_set_kv_dtype(&ds, "fp8", err, sizeof err) == 0);
    int32_t tp8 = sim_kv_blocks(&ds, NULL, &h200, 8, 1, 0.9, 16, 8192, 256, err, sizeof err);
    int32_t dp8 = sim_kv_blocks(&ds, NULL, &h200, 1, 8, 0.9, 16, 8192, 256, err, sizeof err);
    ck_assert_msg(tp8 > 0 && dp8 > 0, "%s", err);
    /* by hand: the ranks' memory less one copy of the experts and 8 of everything else */
    const double mb = preset_model_matrix_bytes(&ds);
    const double whole = preset_model_weight_bytes(&ds);
    const double experts = preset_model_all_expert_params(&ds) * mb;
    const double act = 8.0 * (8192.0 * (4.0 * ds.d_model + 2.0 * ds.d_ff) * ds.dtype_bytes +
                              256.0 * ds.vocab * 4.0);
    const double mem = h200.mem_bytes * 8 * 0.9;
    const double per_block = 16.0 * preset_model_kv_bytes_per_token(&ds);
    ck_assert_int_eq(dp8, (int32_t)floor((mem - whole - 7 * (whole - experts) - act) / per_block));
    /* MLA's latent is whole on every tp device; ranks hold disjoint sequences */
    ck_assert(dp8 > 4 * tp8);
    /* vLLM's sizing: a rank's blocks, times the ranks */
    serving_t s;
    ck_assert(serving_get("vllm", &s, err, sizeof err) == 0);
    int32_t v1 = serving_kv_blocks(&s, &ds, &h200, 8, 1, 0.9, 16, 8192, 256, NULL, err,
                                   sizeof err);
    int32_t v8 = serving_kv_blocks(&s, &ds, &h200, 1, 8, 0.9, 16, 8192, 256, NULL, err,
                                   sizeof err);
    ck_assert_msg(v1 > 0 && v8 > 0, "%s", err);
    ck_assert_int_eq(v8 % 8, 0);
    ck_assert(v8 > 4 * v1);
    ck_assert(serving_weight_bytes_per_device(&ds, 1, 8) < serving_weight_bytes_per_device(&ds, 1, 1));
}
END_TEST

START_TEST(cluster_parallel_key) {
    char path[256], err[512];
    testutil_tmpfile(path, sizeof path, ".cluster");
    FILE *f = fopen(path, "w");
    fputs("[group big]\ncount = 2\nparallel = tp=8,ep=8\n", f);
    fclose(f);
    sim_cluster_t c;
    ck_assert_msg(sim_cluster_read(path, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c.groups[0].parallel, "tp=8,ep=8");
    sim_cluster_free(&c);
    f = fopen(path, "w");
    fputs("[group big]\ncount = 2\nparallel = tp=8,zz=1\n", f);
    fclose(f);
    ck_assert_int_eq(sim_cluster_read(path, &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, ":3:") && strstr(err, "unknown key 'zz'"), "%s", err);
    f = fopen(path, "w");
    fputs("[group big]\ncount = 2\ntp = 4\nparallel = tp=8\n", f);
    fclose(f);
    ck_assert_int_eq(sim_cluster_read(path, &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "both tp and parallel"), "%s", err);
    unlink(path);
}
END_TEST

int main(void) {
    Suite *su = suite_create("parallel");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, parse_and_format);
    tcase_add_test(tc, parse_refusals_name_the_item);
    tcase_add_test(tc, check_against_model_and_gpu);
    tcase_add_test(tc, stage_shape);
    tcase_add_test(tc, a2a_and_p2p_by_hand);
    tcase_add_test(tc, pipeline_schedules);
    tcase_add_test(tc, expert_and_data_parallel_roofline);
    tcase_add_test(tc, linear_model_split);
    tcase_add_test(tc, kv_capacity_of_ranks);
    tcase_add_test(tc, cluster_parallel_key);
    suite_add_tcase(su, tc);
    return testutil_run(su);
}
