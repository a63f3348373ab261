/* test_presets: built-in shapes against published parameter counts, KV sizes, file loading
 * and its error messages, lookups, validation. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sim/presets.h"
#include "tests/testutil.h"

static const preset_model_t *model(const char *name) {
    const preset_model_t *m = preset_model_find(name);
    ck_assert_msg(m != NULL, "built-in model %s missing", name);
    return m;
}

/* Exact counts, i.e. what summing the tensors of the HF checkpoints gives (the rounded
 * published figures are 6.74e9, 13.0e9, 68.98e9, 8.03e9, 70.6e9, 1.24e9, 7.24e9, 135e6). */
START_TEST(test_param_counts) {
    struct { const char *name; double params; } want[] = {
        {"llama-2-7b", 6738415616.0},   {"llama-2-13b", 13015864320.0},
        {"llama-2-70b", 68976648192.0}, {"llama-3-8b", 8030261248.0},
        {"llama-3-70b", 70553706496.0}, {"llama-3.2-1b", 1235814400.0},
        {"mistral-7b", 7241732096.0},   {"smollm2-135m", 134515008.0},
        /* stories260K.bin holds 260,032 floats of weights (data README size check). */
        {"stories260k", 260032.0},
        /* Mixtral-8x7B-v0.1: 8 experts of 3 x 4096 x 14336 in each of 32 layers, a
         * 4096 x 8 router, GQA attention (the published 46.7B) */
        {"mixtral-8x7b", 46702792704.0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(preset_model_params(model(want[i].name)) == want[i].params,
                      "%s: %.0f params, want %.0f", want[i].name,
                      preset_model_params(model(want[i].name)), want[i].params);
    /* The figures the brief states, to their precision. */
    ck_assert_double_eq_tol(preset_model_params(model("llama-2-7b")) / 1e9, 6.74, 0.005);
    ck_assert_double_eq_tol(preset_model_params(model("llama-3-8b")) / 1e9, 8.03, 0.005);
    ck_assert_double_eq_tol(preset_model_params(model("llama-2-70b")) / 1e10, 6.898, 0.0005);
    ck_assert(preset_model_weight_bytes(model("llama-2-7b")) == 2 * 6738415616.0);
    /* `twinserve roofline --model llama-2-70b --bandwidth 2.0e12` bounds decode at
     * bandwidth / weight bytes = 2e12 / 137.95e9 = 14.50 tokens/s; the usual quote
     * "70B fp16 at 2.0 TB/s -> ~14.3 tokens/s" rounds to 70e9 parameters. */
    double bound = 2.0e12 / preset_model_weight_bytes(model("llama-2-70b"));
    ck_assert_double_eq_tol(bound, 14.50, 0.005);
    ck_assert(fabs(bound / 14.3 - 1) < 0.02);
}
END_TEST

START_TEST(test_kv_bytes) {
    /* 2 x 32 layers x 32 kv heads x 128 x 2 bytes */
    ck_assert(preset_model_kv_bytes_per_token(model("llama-2-7b")) == 524288.0);
    /* GQA: 2 x 32 x 8 x 128 x 2 */
    ck_assert(preset_model_kv_bytes_per_token(model("llama-3-8b")) == 131072.0);
    /* 2 x 80 x 8 x 128 x 2 = 327,680; x 4096 tokens = 1,342,177,280 */
    ck_assert(preset_model_kv_bytes_per_token(model("llama-2-70b")) * 4096 == 1342177280.0);
    /* 2 x 5 x 4 x 8 x 4 bytes (fp32) */
    ck_assert(preset_model_kv_bytes_per_token(model("stories260k")) == 1280.0);
}
END_TEST

/* The 2026 models (issue #29) against their published totals, to the precision published:
 * Meta's model cards (Llama 3.1: 8.03B, 70.6B, 405B), Qwen3's (8.2B, 32.8B, 30.5B total /
 * 3.3B active, 235B / 22B), DeepSeek-V3's report (671B total, 37B active, without the 14B
 * multi-token-prediction module), Mistral's (Mixtral 8x22B: 141B / 39B; Nemo 12B), OpenAI's
 * gpt-oss model card (116.8B total / 5.1B active without the embeddings; 20.9B / 3.6B). */
START_TEST(test_param_counts_2026) {
    struct { const char *name; double total, tol, active, atol; } want[] = {
        {"llama-3.1-8b", 8.03e9, 0.005e9, 0, 0},     {"llama-3.1-70b", 70.6e9, 0.05e9, 0, 0},
        {"llama-3.1-405b", 405.9e9, 0.5e9, 0, 0},    {"qwen3-8b", 8.2e9, 0.05e9, 0, 0},
        {"qwen3-32b", 32.8e9, 0.05e9, 0, 0},
        {"qwen3-30b-a3b", 30.5e9, 0.05e9, 3.3e9, 0.06e9},
        {"qwen3-235b-a22b", 235e9, 0.5e9, 22e9, 0.25e9},
        {"deepseek-v3", 671e9, 0.5e9, 37e9, 0.6e9},
        {"mixtral-8x22b", 141e9, 0.5e9, 39e9, 0.5e9},
        {"mistral-nemo-12b", 12.2e9, 0.06e9, 0, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const preset_model_t *m = model(want[i].name);
        ck_assert_msg(fabs(preset_model_params(m) - want[i].total) <= want[i].tol,
                      "%s: %.4g params, want %.4g", m->name, preset_model_params(m), want[i].total);
        if (want[i].active > 0)
            ck_assert_msg(fabs(preset_model_active_params(m) - want[i].active) <= want[i].atol,
                          "%s: %.4g active, want %.4g", m->name, preset_model_active_params(m),
                          want[i].active);
    }
    /* gpt-oss: the card's active figures leave the embedding table out (vocab x d_model) */
    const preset_model_t *g = model("gpt-oss-120b"), *g20 = model("gpt-oss-20b");
    ck_assert_double_eq_tol(preset_model_params(g) / 1e9, 116.8, 0.05);
    ck_assert_double_eq_tol((preset_model_active_params(g) - preset_model_lm_params(g)) / 1e9,
                            5.1, 0.05);
    ck_assert_double_eq_tol(preset_model_params(g20) / 1e9, 20.9, 0.05);
    ck_assert_double_eq_tol((preset_model_active_params(g20) - preset_model_lm_params(g20)) / 1e9,
                            3.6, 0.05);
    /* a dense model's active parameters are all of them */
    ck_assert(preset_model_active_params(model("llama-3.1-8b")) ==
              preset_model_params(model("llama-3.1-8b")));
}
END_TEST

/* KV per token as each architecture stores it, by hand. */
START_TEST(test_kv_architectures) {
    const preset_model_t *ds = model("deepseek-v3"), *g = model("gpt-oss-120b");
    /* MLA: 61 layers x (512 latent + 64 rope key) x 2 bytes */
    ck_assert(preset_model_kv_bytes_per_token(ds) == 61.0 * 576 * 2);
    ck_assert_str_eq(preset_model_attention(ds), "MLA");
    ck_assert_int_eq(preset_model_moe_layers(ds), 58);
    ck_assert(preset_model_kv_bytes_at(ds, 1000) == 1000 * 70272.0);
    /* gpt-oss-120b: 2 x 8 heads x 64 x 2 B = 2,048 B a layer; 18 full layers hold the whole
     * context, 18 window layers 128 tokens at most */
    ck_assert(preset_model_kv_bytes_per_token(g) == 36 * 2048.0);
    ck_assert(preset_model_kv_bytes_at(g, 100) == 100 * 36 * 2048.0);
    ck_assert(preset_model_kv_bytes_at(g, 4096) == 18 * 2048.0 * 4096 + 18 * 2048.0 * 128);
    /* Gemma 3: 52 of 62 layers keep 1024 tokens */
    const preset_model_t *gm = model("gemma-3-27b");
    double layer = 2.0 * 16 * 128 * 2;
    ck_assert(preset_model_kv_bytes_at(gm, 32768) == 10 * layer * 32768 + 52 * layer * 1024);
    ck_assert_str_eq(preset_model_attention(model("llama-2-7b")), "MHA");
    ck_assert_str_eq(preset_model_attention(model("llama-3-8b")), "GQA");
}
END_TEST

/* What validation refuses of the new fields, each naming the field. */
START_TEST(test_validation_2026) {
    char err[512];
    preset_model_t m = *model("deepseek-v3");
    m.qk_rope_head_dim = 0;
    ck_assert_int_eq(preset_model_validate(&m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "qk_rope_head_dim") != NULL, "%s", err);
    m = *model("deepseek-v3");
    m.head_dim = 128;
    ck_assert_int_eq(preset_model_validate(&m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "head_dim is qk_nope_head_dim + qk_rope_head_dim") != NULL, "%s", err);
    m = *model("deepseek-v3");
    m.n_dense_layers = 61;
    ck_assert_int_eq(preset_model_validate(&m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "n_dense_layers (61) leaves no layer of experts") != NULL, "%s", err);
    m = *model("llama-3-8b");
    m.v_head_dim = 128;
    ck_assert_int_eq(preset_model_validate(&m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "need kv_lora_rank > 0") != NULL, "%s", err);
    m = *model("llama-3-8b");
    m.shared_d_ff = 1024;
    ck_assert_int_eq(preset_model_validate(&m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "need n_experts > 0") != NULL, "%s", err);
    m = *model("gpt-oss-20b");
    m.n_window_layers = 25;
    ck_assert_int_eq(preset_model_validate(&m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "n_window_layers in 1..n_layers (24)") != NULL, "%s", err);
    m = *model("gpt-oss-20b");
    m.sliding_window = 0;
    ck_assert_int_eq(preset_model_validate(&m, err, sizeof err), -1);
}
END_TEST

/* Weight formats (issue #29 item 3): the bytes a matrix weight takes with its scales, the
 * peak its products run at, the KV element. */
START_TEST(test_precision) {
    char err[256];
    preset_model_t m = *model("gpt-oss-120b");
    const preset_hw_t *h100 = preset_hw_find("h100"), *a100 = preset_hw_find("a100-80g"),
                      *b200 = preset_hw_find("b200");
    ck_assert(preset_model_matrix_bytes(&m) == 2.0);
    ck_assert_str_eq(preset_model_format_name(&m), "bf16");
    ck_assert_int_eq(preset_model_set_format(&m, "mxfp4", err, sizeof err), 0);
    ck_assert(preset_model_matrix_bytes(&m) == 0.5 + 1.0 / 32);   /* e8m0 per 32 */
    ck_assert_str_eq(preset_model_format_name(&m), "mxfp4");
    /* the layers' matrices at 0.53125 B, the embedding, LM head and norms at 2 B */
    double matrices = preset_model_layer_matrix_params(&m) + preset_model_all_expert_params(&m);
    ck_assert_double_eq_tol(preset_model_weight_bytes(&m),
                            matrices * 0.53125 + (preset_model_params(&m) - matrices) * 2, 1);
    ck_assert(preset_model_weight_bytes(&m) < 80e9);   /* gpt-oss-120b fits one 80 GB GPU */
    ck_assert(preset_hw_matrix_flops(h100, &m) == h100->flops);    /* W4A16: bf16 products */
    ck_assert_int_eq(preset_model_set_format(&m, "int4", err, sizeof err), 0);
    ck_assert(preset_model_matrix_bytes(&m) == 0.5 + 2.0 / 128);  /* fp16 per 128 */
    ck_assert_int_eq(preset_model_set_format(&m, "fp8", err, sizeof err), 0);
    ck_assert(preset_model_matrix_bytes(&m) == 1.0);
    ck_assert(preset_hw_matrix_flops(h100, &m) == h100->flops_fp8);
    ck_assert(preset_hw_matrix_flops(a100, &m) == a100->flops);   /* no FP8 products on A100 */
    ck_assert_int_eq(preset_model_set_format(&m, "nvfp4", err, sizeof err), 0);
    ck_assert(preset_model_matrix_bytes(&m) == 0.5 + 1.0 / 16);
    ck_assert(preset_hw_matrix_flops(b200, &m) == b200->flops_fp4);
    ck_assert(preset_hw_matrix_flops(h100, &m) == h100->flops);   /* Hopper: W4A16 */
    ck_assert_int_eq(preset_model_set_format(&m, "bf16", err, sizeof err), 0);
    ck_assert(preset_model_weight_bytes(&m) == preset_model_weight_bytes(model("gpt-oss-120b")));
    ck_assert_int_eq(preset_model_set_format(&m, "fp6", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "unknown weight format 'fp6' (bf16, fp8, int4, mxfp4, nvfp4, q8_0 or q4_0)"),
                  "%s", err);
    /* fp8 KV halves the cache */
    preset_model_t k = *model("llama-3-8b");
    ck_assert_int_eq(preset_model_set_kv_dtype(&k, "fp8", err, sizeof err), 0);
    ck_assert(preset_model_kv_bytes_per_token(&k) == 65536.0);
    ck_assert(preset_model_kv_bytes_device(&k, 2) == 32768.0);
    ck_assert_int_eq(preset_model_set_kv_dtype(&k, "int2", err, sizeof err), -1);
    ck_assert(preset_model_validate(&k, err, sizeof err) == 0);
    k.weight_bits = 6;
    ck_assert_int_eq(preset_model_validate(&k, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "weight_bits 4, 8, 16 or 32"), "%s", err);
}
END_TEST

START_TEST(test_builtins_valid) {
    char err[256];
    int n = 0;
    for (const preset_model_t *m; (m = preset_model_at(n)) != NULL; n++) {
        ck_assert_msg(preset_model_validate(m, err, sizeof err) == 0, "%s", err);
        ck_assert(preset_model_find(m->name) == m);
    }
    ck_assert_int_ge(n, 9);
    int k = 0;
    for (const preset_hw_t *h; (h = preset_hw_at(k)) != NULL; k++)
        ck_assert_msg(preset_hw_validate(h, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(k, 13);
    ck_assert_ptr_null(preset_model_at(-1));
    ck_assert_ptr_null(preset_hw_at(k));
    const preset_hw_t *a100 = preset_hw_find("a100-80g");
    ck_assert_ptr_nonnull(a100);
    ck_assert(a100->mem_bw == 2.039e12 && a100->flops == 312e12 && a100->mem_bytes == 80e9);
    ck_assert(preset_hw_find("h100")->mem_bw == 3.35e12);
    ck_assert(preset_hw_find("h200")->mem_bytes == 141e9);
}
END_TEST

/* The figures of the newer presets as their datasheets print them (sim/presets.c), with-
 * sparsity peaks halved; and which presets are measured. */
START_TEST(test_hw_datasheets) {
    const char *measured[] = {"a100-80g", "h100", "h200"};
    for (int i = 0; preset_hw_at(i); i++) {
        const preset_hw_t *h = preset_hw_at(i);
        int want = 0;
        for (size_t j = 0; j < sizeof measured / sizeof *measured; j++)
            want |= !strcmp(h->name, measured[j]);
        ck_assert_msg(h->measured == want, "%s: measured %d", h->name, (int)h->measured);
        /* an FP4 peak only where there is an FP8 one, and each above the one before */
        if (h->flops_fp4 > 0) ck_assert(h->flops_fp8 > 0 && h->flops_fp4 > h->flops_fp8);
        if (h->flops_fp8 > 0) ck_assert(h->flops_fp8 > h->flops);
    }
    /* H100 SXM: FP8 3,958 TFLOPS with sparsity; 400 Gb/s NDR per GPU on a DGX H100 */
    const preset_hw_t *h = preset_hw_find("h100");
    ck_assert(h->flops_fp8 == 1979e12 && h->flops_fp4 == 0 && h->net_bw == 50e9);
    ck_assert_ptr_null(preset_hw_find("h100-sxm"));
    /* H100 PCIe: BF16 1,513 and FP8 3,026 with sparsity, 2 TB/s; PCIe Gen5 x16 link */
    h = preset_hw_find("h100-pcie");
    ck_assert(h->flops == 756.5e12 && h->flops_fp8 == 1513e12 && h->mem_bw == 2.0e12);
    ck_assert(h->link_bw == 64e9 && h->net_bw == 0 && h->link_latency == 0);
    /* B200 (HGX): FP4 18, FP8 9, BF16 4.5 PFLOPS with sparsity, 180 GB, 7.7 TB/s */
    h = preset_hw_find("b200");
    ck_assert(h->flops == 2.25e15 && h->flops_fp8 == 4.5e15 && h->flops_fp4 == 9e15);
    ck_assert(h->mem_bytes == 180e9 && h->mem_bw == 7.7e12 && h->link_bw == 900e9);
    /* one GB200 NVL72 GPU: FP4 20, FP8 10, BF16 5 PFLOPS with sparsity, 186 GB, 8 TB/s */
    h = preset_hw_find("gb200");
    ck_assert(h->flops == 2.5e15 && h->flops_fp8 == 5e15 && h->flops_fp4 == 10e15);
    ck_assert(h->mem_bytes == 186e9 && h->mem_bw == 8e12);
    /* L4: BF16 242 and FP8 485 with sparsity, 300 GB/s, PCIe Gen4 x16 */
    h = preset_hw_find("l4");
    ck_assert(h->flops == 121e12 && h->flops_fp8 == 242.5e12 && h->mem_bw == 300e9);
    ck_assert(h->link_bw == 32e9 && h->mem_bytes == 24e9);
    /* MI300X: BF16 1,307.4 and FP8 2,614.9 dense, 5.3 TB/s, 192 GB; 7 x 128 GB/s links */
    h = preset_hw_find("mi300x");
    ck_assert(h->flops == 1307.4e12 && h->flops_fp8 == 2614.9e12 && h->mem_bw == 5.3e12);
    ck_assert(h->mem_bytes == 192e9 && h->link_bw == 448e9 && h->flops_fp4 == 0);
    /* A100 40GB: 1,555 GB/s; no FP8 */
    h = preset_hw_find("a100-40g");
    ck_assert(h->mem_bw == 1.555e12 && h->mem_bytes == 40e9 && h->flops_fp8 == 0);
}
END_TEST

START_TEST(test_lookup_case_insensitive) {
    ck_assert_ptr_eq(preset_model_find("LLaMA-2-7B"), preset_model_find("llama-2-7b"));
    ck_assert_ptr_eq(preset_hw_find("H100"), preset_hw_find("h100"));
    ck_assert_ptr_null(preset_model_find("llama-2-8b"));
    ck_assert_ptr_null(preset_model_find(NULL));
    preset_model_t m;
    char err[512];
    ck_assert_int_eq(preset_model_get("Mistral-7B", &m, err, sizeof err), 0);
    ck_assert_str_eq(m.name, "mistral-7b");
    preset_hw_t h;
    ck_assert_int_eq(preset_hw_get("A100-80G", &h, err, sizeof err), 0);
    ck_assert_str_eq(h.name, "a100-80g");
}
END_TEST

START_TEST(test_unknown_names) {
    preset_model_t m;
    preset_hw_t h;
    char err[512];
    ck_assert_int_eq(preset_model_get("llama-9", &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "unknown model 'llama-9'; built-in models: llama-2-7b, ") == err,
                  "%s", err);
    ck_assert_msg(strstr(err, "mixtral-8x7b, ") && strstr(err, "qwen-72b, ") &&
                  strstr(err, "mistral-nemo-12b (or give a preset file path)"),
                  "%s", err);
    /* A typo with a dot is still a name, not a missing file. */
    ck_assert_int_eq(preset_model_get("llama-3.2-3b", &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "unknown model 'llama-3.2-3b'") == err, "%s", err);
    ck_assert_int_eq(preset_hw_get("tpu", &h, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "unknown hardware 'tpu'; built-in hardware: a100-80g, a100-40g, "
                         "h100, h100-pcie, h200, h20, b200, gb200, l40s, l4, rtx-4090, mi300x, "
                         "mi325x (or give a preset file path)") == err, "%s", err);
    ck_assert_int_eq(preset_model_get("", &m, err, sizeof err), -1);
}
END_TEST

/* Loads text as a model file; returns the status, leaves the message in err. */
static int load_model_text(const char *text, preset_model_t *m, char *path, char *err) {
    ck_assert_ptr_nonnull(testutil_write_tmp(path, 64, ".model", text));
    int rc = preset_model_get(path, m, err, 512);
    unlink(path);
    return rc;
}

START_TEST(test_model_file_good) {
    char path[64], err[512];
    preset_model_t m;
    const char *text =
        "# a made-up tiny model\n"
        "name = tiny-test   # trailing comment\n"
        "n_layers = 2\n"
        "   d_model=64\n"
        "n_heads = 4\n"
        "n_kv_heads = 2\n"
        "\n"
        "d_ff = 128\n"
        "vocab = 100\n"
        "tied_embeddings = 1\n";
    ck_assert_msg(load_model_text(text, &m, path, err) == 0, "%s", err);
    ck_assert_str_eq(m.name, "tiny-test");
    ck_assert_int_eq(m.n_layers, 2);
    ck_assert_int_eq(m.d_model, 64);
    ck_assert_int_eq(m.n_kv_heads, 2);
    ck_assert_int_eq(m.head_dim, 16);    /* default d_model / n_heads */
    ck_assert_int_eq(m.max_seq, 2048);   /* default */
    ck_assert_int_eq(m.dtype_bytes, 2);  /* default */
    /* embed 100*64 + 2 layers * (wq 64*64 + wk,wv 2*64*32 + wo 64*64 + mlp 3*64*128 +
     * norms 2*64) + final norm 64, tied: no LM head = 6400 + 2*36992 + 64 */
    ck_assert(preset_model_params(&m) == 6400.0 + 2 * 36992.0 + 64.0);

    /* Without name and n_kv_heads: the file stem, and MHA. */
    const char *bare = "n_layers = 1\nd_model = 8\nn_heads = 2\nd_ff = 8\nvocab = 4\n";
    ck_assert_msg(load_model_text(bare, &m, path, err) == 0, "%s", err);
    ck_assert_int_eq(m.n_kv_heads, 2);
    char stem[64];
    snprintf(stem, sizeof stem, "%s", strrchr(path, '/') + 1);
    *strrchr(stem, '.') = '\0';
    ck_assert_str_eq(m.name, stem);
}
END_TEST

START_TEST(test_model_file_errors) {
    char path[64], err[512], want[160];
    preset_model_t m;
    ck_assert_int_eq(load_model_text("n_layers = 2\nd_modle = 64\n", &m, path, err), -1);
    snprintf(want, sizeof want, "%s:2: unknown key 'd_modle'", path);
    ck_assert_str_eq(err, want);

    ck_assert_int_eq(load_model_text("# c\nn_layers = abc\n", &m, path, err), -1);
    snprintf(want, sizeof want, "%s:2: 'abc' is not a number (n_layers)", path);
    ck_assert_str_eq(err, want);

    ck_assert_int_eq(load_model_text("n_layers = 1.5\n", &m, path, err), -1);
    snprintf(want, sizeof want, "%s:1: '1.5' is not an integer (n_layers)", path);
    ck_assert_str_eq(err, want);

    ck_assert_int_eq(load_model_text("n_layers = 99999999999\n", &m, path, err), -1);
    ck_assert_msg(strstr(err, ":1: '99999999999' is out of range") != NULL, "%s", err);

    ck_assert_int_eq(load_model_text("d_model = 64\n", &m, path, err), -1);
    snprintf(want, sizeof want, "%s: missing required key 'n_layers'", path);
    ck_assert_str_eq(err, want);

    ck_assert_int_eq(load_model_text("n_layers 2\n", &m, path, err), -1);
    ck_assert_msg(strstr(err, ":1: expected 'key = value'") != NULL, "%s", err);

    ck_assert_int_eq(load_model_text("n_layers = 2\nn_layers = 3\n", &m, path, err), -1);
    ck_assert_msg(strstr(err, ":2: duplicate key 'n_layers'") != NULL, "%s", err);

    ck_assert_int_eq(load_model_text("name =\n", &m, path, err), -1);
    ck_assert_msg(strstr(err, ":1: empty value for 'name'") != NULL, "%s", err);

    ck_assert_int_eq(preset_model_get("/nonexistent/dir/x.model", &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/nonexistent/dir/x.model: cannot open") == err, "%s", err);
}
END_TEST

START_TEST(test_model_validation) {
    char path[64], err[512];
    preset_model_t m;
    const char *base = "n_layers = 2\nd_model = 64\nd_ff = 128\nvocab = 100\n";
    char text[256];
    snprintf(text, sizeof text, "%sn_heads = 8\nn_kv_heads = 3\n", base);
    ck_assert_int_eq(load_model_text(text, &m, path, err), -1);
    ck_assert_msg(strstr(err, "n_heads (8) is not a multiple of n_kv_heads (3)"), "%s", err);
    snprintf(text, sizeof text, "%sn_heads = 6\n", base);  /* 64 / 6: no head_dim */
    ck_assert_int_eq(load_model_text(text, &m, path, err), -1);
    ck_assert_msg(strstr(err, "head_dim not given"), "%s", err);
    snprintf(text, sizeof text, "%sn_heads = 6\nhead_dim = 16\n", base);  /* explicit: fine */
    ck_assert_msg(load_model_text(text, &m, path, err) == 0, "%s", err);
    snprintf(text, sizeof text, "%sn_heads = 4\ndtype_bytes = 3\n", base);
    ck_assert_int_eq(load_model_text(text, &m, path, err), -1);
    ck_assert_msg(strstr(err, "dtype_bytes must be 1, 2 or 4"), "%s", err);
    snprintf(text, sizeof text, "%sn_heads = 4\nmax_seq = 0\n", base);
    ck_assert_int_eq(load_model_text(text, &m, path, err), -1);
    ck_assert_msg(strstr(err, "max_seq must be positive"), "%s", err);

    preset_model_t bad = *model("llama-2-7b");
    bad.n_kv_heads = 64;
    ck_assert_int_eq(preset_model_validate(&bad, err, sizeof err), -1);
    bad = *model("llama-2-7b");
    bad.tied_embeddings = 2;
    ck_assert_int_eq(preset_model_validate(&bad, err, sizeof err), -1);
}
END_TEST

START_TEST(test_hw_file) {
    char path[64], err[512], want[160];
    preset_hw_t h;
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".hw",
        "name = test-gpu\nmem_bw = 1.5e12\nflops = 200e12 # dense\nmem_bytes = 48000000000\n"));
    ck_assert_msg(preset_hw_get(path, &h, err, sizeof err) == 0, "%s", err);
    unlink(path);
    ck_assert_str_eq(h.name, "test-gpu");
    ck_assert(h.mem_bw == 1.5e12 && h.flops == 200e12 && h.mem_bytes == 48e9);
    ck_assert(h.link_bw == 0);
    ck_assert(h.flops_fp8 == 0 && h.flops_fp4 == 0 && h.net_bw == 0 && h.net_latency == 0);
    ck_assert(h.measured == 0);

    /* the optional figures: read when given, >= 0, measured 0 or 1 */
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".hw",
        "mem_bw = 1e12\nflops = 1e14\nmem_bytes = 1e9\nflops_fp8 = 2e14\nflops_fp4 = 4e14\n"
        "net_bw = 50e9\nnet_latency = 5e-6\nmeasured = 1\n"));
    ck_assert_msg(preset_hw_get(path, &h, err, sizeof err) == 0, "%s", err);
    unlink(path);
    ck_assert(h.flops_fp8 == 2e14 && h.flops_fp4 == 4e14 && h.net_bw == 50e9);
    ck_assert(h.net_latency == 5e-6 && h.measured == 1);
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".hw",
        "mem_bw = 1e12\nflops = 1e14\nmem_bytes = 1e9\nnet_bw = -1\n"));
    ck_assert_int_eq(preset_hw_get(path, &h, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "net_bw must be >= 0"), "%s", err);
    unlink(path);
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".hw",
        "mem_bw = 1e12\nflops = 1e14\nmem_bytes = 1e9\nmeasured = 2\n"));
    ck_assert_int_eq(preset_hw_get(path, &h, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "measured must be 0 or 1 (got 2)"), "%s", err);
    unlink(path);

    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".hw",
        "mem_bw = 2.0T\n"));
    ck_assert_int_eq(preset_hw_get(path, &h, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:1: '2.0T' is not a number (mem_bw)", path);
    ck_assert_str_eq(err, want);
    unlink(path);

    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".hw",
        "mem_bw = 1e12\nflops = 1e14\n"));
    ck_assert_int_eq(preset_hw_get(path, &h, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: missing required key 'mem_bytes'", path);
    ck_assert_str_eq(err, want);
    unlink(path);

    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".hw",
        "mem_bw = 1e12\nflops = -1e14\nmem_bytes = 1e9\n"));
    ck_assert_int_eq(preset_hw_get(path, &h, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "flops must be a positive number"), "%s", err);
    unlink(path);
}
END_TEST

/* The example files shipped for the docs must load (run from the repository root). */
START_TEST(test_example_files) {
    char err[512];
    preset_model_t m;
    preset_hw_t h;
    if (access("sim/presets/tinyllama-1.1b.model", R_OK) != 0) {
        fprintf(stderr, "SKIP: sim/presets/ not found (run from the repository root)\n");
        return;
    }
    ck_assert_msg(preset_model_get("sim/presets/tinyllama-1.1b.model", &m, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_str_eq(m.name, "tinyllama-1.1b");
    /* TinyLlama-1.1B: 1,100,048,384 parameters. */
    ck_assert(preset_model_params(&m) == 1100048384.0);
    ck_assert_msg(preset_hw_get("sim/presets/l40s.hw", &h, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(h.name, "l40s");
}
END_TEST

static Suite *presets_suite(void) {
    Suite *s = suite_create("presets");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_param_counts);
    tcase_add_test(tc, test_kv_bytes);
    tcase_add_test(tc, test_param_counts_2026);
    tcase_add_test(tc, test_kv_architectures);
    tcase_add_test(tc, test_validation_2026);
    tcase_add_test(tc, test_precision);
    tcase_add_test(tc, test_builtins_valid);
    tcase_add_test(tc, test_hw_datasheets);
    tcase_add_test(tc, test_lookup_case_insensitive);
    tcase_add_test(tc, test_unknown_names);
    tcase_add_test(tc, test_model_file_good);
    tcase_add_test(tc, test_model_file_errors);
    tcase_add_test(tc, test_model_validation);
    tcase_add_test(tc, test_hw_file);
    tcase_add_test(tc, test_example_files);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return testutil_run(presets_suite());
}
