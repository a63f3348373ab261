/* test_hfconfig: Hugging Face config.json files read as model shapes (sim/hfconfig.h).
 *
 * The configs are written here, in a temporary folder, from the shapes of published models
 * (their config.json values; parameter counts are what summing the checkpoints' tensors
 * gives, less what the loader notes but does not count). Each supported architecture, the
 * defaults, every refusal and its message, the preset's name, the routing through
 * preset_model_get, the shared data's real configs against the built-ins, and truncated or
 * mutated files (which must be refused, never crash). */
#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/cost_file.h"
#include "sim/hfconfig.h"
#include "sim/presets.h"
#include "tests/testutil.h"

/* ---- configs as key / JSON-value lists ------------------------------------------------ */

typedef struct {
    const char *key;
    const char *val;  /* JSON text; NULL in an edit drops the key */
} kvp_t;

/* https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json */
static const kvp_t llama2_7b[] = {
    {"architectures", "[\"LlamaForCausalLM\"]"}, {"hidden_act", "\"silu\""},
    {"hidden_size", "4096"}, {"intermediate_size", "11008"},
    {"max_position_embeddings", "4096"}, {"model_type", "\"llama\""},
    {"num_attention_heads", "32"}, {"num_hidden_layers", "32"}, {"num_key_value_heads", "32"},
    {"rms_norm_eps", "1e-05"}, {"rope_scaling", "null"}, {"tie_word_embeddings", "false"},
    {"torch_dtype", "\"float16\""}, {"vocab_size", "32000"}, {NULL, NULL}};

/* https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json */
static const kvp_t mistral_7b[] = {
    {"architectures", "[\"MistralForCausalLM\"]"}, {"hidden_size", "4096"},
    {"intermediate_size", "14336"}, {"max_position_embeddings", "32768"},
    {"num_attention_heads", "32"}, {"num_hidden_layers", "32"}, {"num_key_value_heads", "8"},
    {"rope_theta", "10000.0"}, {"sliding_window", "4096"}, {"tie_word_embeddings", "false"},
    {"torch_dtype", "\"bfloat16\""}, {"vocab_size", "32000"}, {NULL, NULL}};

/* https://huggingface.co/mistralai/Mistral-Nemo-Instruct-2407: head_dim 128, not 5120 / 32 */
static const kvp_t mistral_nemo[] = {
    {"architectures", "[\"MistralForCausalLM\"]"}, {"head_dim", "128"},
    {"hidden_size", "5120"}, {"intermediate_size", "14336"},
    {"max_position_embeddings", "131072"}, {"num_attention_heads", "32"},
    {"num_hidden_layers", "40"}, {"num_key_value_heads", "8"}, {"sliding_window", "null"},
    {"tie_word_embeddings", "false"}, {"torch_dtype", "\"bfloat16\""},
    {"vocab_size", "131072"}, {NULL, NULL}};

/* https://huggingface.co/Qwen/Qwen2.5-0.5B: a small Qwen2 that ties its embeddings */
static const kvp_t qwen25_05b[] = {
    {"architectures", "[\"Qwen2ForCausalLM\"]"}, {"hidden_size", "896"},
    {"intermediate_size", "4864"}, {"max_position_embeddings", "32768"},
    {"max_window_layers", "24"}, {"num_attention_heads", "14"}, {"num_hidden_layers", "24"},
    {"num_key_value_heads", "2"}, {"rope_theta", "1000000.0"}, {"sliding_window", "32768"},
    {"tie_word_embeddings", "true"}, {"torch_dtype", "\"bfloat16\""},
    {"use_sliding_window", "false"}, {"vocab_size", "151936"}, {NULL, NULL}};

/* https://huggingface.co/Qwen/Qwen3-14B */
static const kvp_t qwen3_14b[] = {
    {"architectures", "[\"Qwen3ForCausalLM\"]"}, {"attention_bias", "false"},
    {"head_dim", "128"}, {"hidden_size", "5120"}, {"intermediate_size", "17408"},
    {"max_position_embeddings", "40960"}, {"num_attention_heads", "40"},
    {"num_hidden_layers", "40"}, {"num_key_value_heads", "8"}, {"rope_scaling", "null"},
    {"sliding_window", "null"}, {"tie_word_embeddings", "false"},
    {"torch_dtype", "\"bfloat16\""}, {"use_sliding_window", "false"},
    {"vocab_size", "151936"}, {NULL, NULL}};

/* https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json */
static const kvp_t mixtral[] = {
    {"architectures", "[\"MixtralForCausalLM\"]"}, {"hidden_size", "4096"},
    {"intermediate_size", "14336"}, {"max_position_embeddings", "32768"},
    {"num_attention_heads", "32"}, {"num_experts_per_tok", "2"}, {"num_hidden_layers", "32"},
    {"num_key_value_heads", "8"}, {"num_local_experts", "8"}, {"rope_theta", "1000000.0"},
    {"sliding_window", "null"}, {"tie_word_embeddings", "false"},
    {"torch_dtype", "\"bfloat16\""}, {"vocab_size", "32000"}, {NULL, NULL}};

/* https://huggingface.co/Qwen/Qwen3-30B-A3B: 128 experts of 768, 8 per token, all sparse */
static const kvp_t qwen3_30b_a3b[] = {
    {"architectures", "[\"Qwen3MoeForCausalLM\"]"}, {"attention_bias", "false"},
    {"decoder_sparse_step", "1"}, {"head_dim", "128"}, {"hidden_size", "2048"},
    {"intermediate_size", "6144"}, {"max_position_embeddings", "40960"},
    {"mlp_only_layers", "[]"}, {"moe_intermediate_size", "768"},
    {"num_attention_heads", "32"}, {"num_experts", "128"}, {"num_experts_per_tok", "8"},
    {"num_hidden_layers", "48"}, {"num_key_value_heads", "4"}, {"rope_scaling", "null"},
    {"sliding_window", "null"}, {"tie_word_embeddings", "false"},
    {"torch_dtype", "\"bfloat16\""}, {"use_sliding_window", "false"},
    {"vocab_size", "151936"}, {NULL, NULL}};

static const kvp_t no_edits[] = {{NULL, NULL}};

static const kvp_t *edit_for(const kvp_t *edits, const char *key) {
    for (; edits->key; edits++)
        if (!strcmp(edits->key, key)) return edits;
    return NULL;
}

/* base with edits applied (replace, drop, or append), as JSON text in a static buffer */
static const char *cfg_json(const kvp_t *base, const kvp_t *edits) {
    static char buf[8192];
    size_t n = 0;
    int first = 1;
    n += (size_t)snprintf(buf + n, sizeof buf - n, "{\n");
    for (const kvp_t *b = base; b->key; b++) {
        const kvp_t *e = edit_for(edits, b->key);
        const char *v = e ? e->val : b->val;
        if (!v) continue;
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s  \"%s\": %s", first ? "" : ",\n",
                              b->key, v);
        first = 0;
    }
    for (const kvp_t *e = edits; e->key; e++) {
        if (edit_for(base, e->key) || !e->val) continue;
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s  \"%s\": %s", first ? "" : ",\n",
                              e->key, e->val);
        first = 0;
    }
    snprintf(buf + n, sizeof buf - n, "\n}\n");
    ck_assert_uint_lt(n, sizeof buf - 8);
    return buf;
}

/* ---- a temporary folder per test ------------------------------------------------------ */

static char g_dir[64];
static char g_path[512];

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/twinhf-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static void teardown(void) { nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* Writes text to g_dir/rel (making its folders) and returns the path (g_path). */
static const char *write_rel(const char *rel, const char *text) {
    snprintf(g_path, sizeof g_path, "%s/%s", g_dir, rel);
    for (char *s = g_path + strlen(g_dir) + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        mkdir(g_path, 0700);
        *s = '/';
    }
    FILE *f = fopen(g_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return g_path;
}

static char g_err[1024], g_note[1024];

/* Loads base + edits written as rel; the loader's status. */
static int load(const char *rel, const kvp_t *base, const kvp_t *edits, preset_model_t *m) {
    const char *path = write_rel(rel, cfg_json(base, edits));
    g_err[0] = g_note[0] = '\0';
    return hfcfg_load(path, m, g_note, sizeof g_note, g_err, sizeof g_err);
}

static void load_ok(const char *rel, const kvp_t *base, const kvp_t *edits,
                    preset_model_t *m) {
    ck_assert_msg(load(rel, base, edits, m) == 0, "%s: %s", rel, g_err);
    char err[256];
    ck_assert_msg(preset_model_validate(m, err, sizeof err) == 0, "%s", err);
}

/* The config is refused with a message that starts with its path and holds want. */
static void refused(const kvp_t *base, const kvp_t *edits, const char *want) {
    preset_model_t m;
    ck_assert_msg(load("m/config.json", base, edits, &m) == -1, "accepted; wanted '%s'", want);
    size_t n = strlen(g_path);
    ck_assert_msg(!strncmp(g_err, g_path, n) && !strncmp(g_err + n, ": ", 2),
                  "message does not start with the path: %s", g_err);
    ck_assert_msg(strstr(g_err, want) != NULL, "got '%s', wanted '%s'", g_err, want);
}

/* Field for field (names aside): cost_file_same_shape's fields, the context and dtype. */
static void same_shape(const preset_model_t *a, const preset_model_t *b) {
    char err[256];
    ck_assert_msg(cost_file_same_shape(a, b, err, sizeof err) == 0, "%s vs %s: %s", a->name,
                  b->name, err);
    ck_assert_int_eq(a->max_seq, b->max_seq);
    ck_assert_int_eq(a->dtype_bytes, b->dtype_bytes);
}

/* ---- each architecture ---------------------------------------------------------------- */

START_TEST(test_llama) {
    preset_model_t m;
    load_ok("Llama-2-7b-hf/config.json", llama2_7b, no_edits, &m);
    same_shape(&m, preset_model_find("llama-2-7b"));
    ck_assert_str_eq(m.name, "Llama-2-7b-hf");
    ck_assert(preset_model_params(&m) == 6738415616.0);
    ck_assert_str_eq(g_note, "");  /* nothing in it goes unmodelled */
    /* a Llama with biases says so, and still counts none */
    const kvp_t biased[] = {{"attention_bias", "true"}, {"mlp_bias", "true"}, {NULL, NULL}};
    load_ok("b/config.json", llama2_7b, biased, &m);
    ck_assert(preset_model_params(&m) == 6738415616.0);
    ck_assert_msg(strstr(g_note, "attention_bias (16384 parameters a layer") &&
                  strstr(g_note, "mlp_bias (26112 parameters a layer"), "%s", g_note);
    const kvp_t rope[] = {{"rope_scaling", "{\"factor\": 8.0, \"rope_type\": \"llama3\"}"},
                          {NULL, NULL}};
    load_ok("r/config.json", llama2_7b, rope, &m);
    ck_assert_msg(strstr(g_note, "rope_scaling 'llama3'"), "%s", g_note);
}
END_TEST

START_TEST(test_mistral) {
    preset_model_t m;
    load_ok("Mistral-7B-v0.1/config.json", mistral_7b, no_edits, &m);
    same_shape(&m, preset_model_find("mistral-7b"));
    ck_assert_msg(strstr(g_note, "sliding_window 4096 (attention is costed over the whole "
                                 "context"), "%s", g_note);
    /* an explicit head_dim that is not hidden_size / heads (5120 / 32 = 160) */
    load_ok("nemo/config.json", mistral_nemo, no_edits, &m);
    ck_assert_int_eq(m.head_dim, 128);
    ck_assert(preset_model_params(&m) == 12247782400.0);
    ck_assert(preset_model_kv_bytes_per_token(&m) == 2.0 * 40 * 8 * 128 * 2);
    ck_assert_str_eq(g_note, "");  /* sliding_window null */
}
END_TEST

START_TEST(test_qwen2) {
    preset_model_t m;
    load_ok("Qwen2.5-0.5B/config.json", qwen25_05b, no_edits, &m);
    ck_assert_int_eq(m.tied_embeddings, 1);
    ck_assert_int_eq(m.head_dim, 64);
    ck_assert_int_eq(m.n_kv_heads, 2);
    /* 494,032,768 in the checkpoint, less 24 layers x 1,152 q/k/v biases */
    ck_assert(preset_model_params(&m) == 494032768.0 - 24 * 1152.0);
    ck_assert_msg(strstr(g_note, "q/k/v biases (1152 parameters a layer"), "%s", g_note);
    /* its sliding_window is unused without use_sliding_window */
    ck_assert_ptr_null(strstr(g_note, "sliding_window"));
    const kvp_t used[] = {{"use_sliding_window", "true"}, {NULL, NULL}};
    load_ok("w/config.json", qwen25_05b, used, &m);
    ck_assert_msg(strstr(g_note, "sliding_window 32768"), "%s", g_note);
}
END_TEST

START_TEST(test_qwen3) {
    preset_model_t m;
    load_ok("Qwen3-14B/config.json", qwen3_14b, no_edits, &m);
    ck_assert_int_eq(m.head_dim, 128);
    /* 14,768,307,200 in the checkpoint, less 40 layers x 2 x 128 q/k norm weights */
    ck_assert(preset_model_params(&m) == 14768307200.0 - 40 * 256.0);
    ck_assert_msg(strstr(g_note, "q/k norms (2 x head_dim = 256"), "%s", g_note);
    /* Qwen3-0.6B's shape: 1024 / 16 heads = 64, but its head_dim is 128; without the key
     * Qwen3Config's default (128) applies, not the quotient */
    const kvp_t small[] = {{"hidden_size", "1024"}, {"num_attention_heads", "16"},
                           {"head_dim", NULL}, {NULL, NULL}};
    load_ok("s/config.json", qwen3_14b, small, &m);
    ck_assert_int_eq(m.head_dim, 128);
}
END_TEST

START_TEST(test_mixtral) {
    preset_model_t m;
    load_ok("Mixtral-8x7B-v0.1/config.json", mixtral, no_edits, &m);
    same_shape(&m, preset_model_find("mixtral-8x7b"));
    ck_assert_int_eq(m.n_experts, 8);
    ck_assert_int_eq(m.experts_per_tok, 2);
    ck_assert_int_eq(m.moe_d_ff, 14336);
    ck_assert(preset_model_params(&m) == 46702792704.0);
}
END_TEST

START_TEST(test_qwen3_moe) {
    preset_model_t m;
    load_ok("Qwen3-30B-A3B/config.json", qwen3_30b_a3b, no_edits, &m);
    ck_assert_int_eq(m.n_experts, 128);
    ck_assert_int_eq(m.experts_per_tok, 8);
    ck_assert_int_eq(m.moe_d_ff, 768);
    ck_assert_int_eq(m.d_ff, 6144);
    /* 30,532,122,624 in the checkpoint, less 48 layers x 256 q/k norm weights */
    ck_assert(preset_model_params(&m) == 30532122624.0 - 48 * 256.0);
    /* the defaults make every layer sparse too, as does an index past the last layer;
     * newer transformers save num_experts as num_local_experts */
    const kvp_t defaults[] = {{"decoder_sparse_step", NULL}, {"mlp_only_layers", "null"},
                              {NULL, NULL}};
    load_ok("d/config.json", qwen3_30b_a3b, defaults, &m);
    ck_assert_int_eq(m.n_experts, 128);
    const kvp_t past[] = {{"mlp_only_layers", "[48, 99]"}, {NULL, NULL}};
    load_ok("p/config.json", qwen3_30b_a3b, past, &m);
    const kvp_t renamed[] = {{"num_experts", NULL}, {"num_local_experts", "64"}, {NULL, NULL}};
    load_ok("n/config.json", qwen3_30b_a3b, renamed, &m);
    ck_assert_int_eq(m.n_experts, 64);
}
END_TEST

/* ---- defaults and types --------------------------------------------------------------- */

START_TEST(test_defaults) {
    preset_model_t m;
    const kvp_t bare[] = {{"num_key_value_heads", NULL}, {"tie_word_embeddings", NULL},
                          {"torch_dtype", NULL}, {NULL, NULL}};
    load_ok("bare/config.json", mistral_7b, bare, &m);
    ck_assert_int_eq(m.n_kv_heads, 32);   /* = num_attention_heads */
    ck_assert_int_eq(m.head_dim, 128);    /* = 4096 / 32 */
    ck_assert_int_eq(m.tied_embeddings, 0);
    ck_assert_int_eq(m.dtype_bytes, 2);
    /* null reads as absent, as the config classes read None */
    const kvp_t nulls[] = {{"num_key_value_heads", "null"}, {"head_dim", "null"},
                           {"tie_word_embeddings", "null"}, {"torch_dtype", "null"},
                           {NULL, NULL}};
    load_ok("nulls/config.json", mistral_7b, nulls, &m);
    ck_assert_int_eq(m.n_kv_heads, 32);
    ck_assert_int_eq(m.head_dim, 128);
    ck_assert_int_eq(m.tied_embeddings, 0);
    ck_assert_int_eq(m.dtype_bytes, 2);
}
END_TEST

START_TEST(test_dtypes) {
    preset_model_t m;
    const kvp_t f32[] = {{"torch_dtype", "\"float32\""}, {NULL, NULL}};
    load_ok("f32/config.json", llama2_7b, f32, &m);
    ck_assert_int_eq(m.dtype_bytes, 4);
    ck_assert(preset_model_weight_bytes(&m) == 4 * 6738415616.0);
    ck_assert(preset_model_kv_bytes_per_token(&m) == 2.0 * 32 * 32 * 128 * 4);
    /* newer transformers write "dtype" */
    const kvp_t renamed[] = {{"torch_dtype", NULL}, {"dtype", "\"float32\""}, {NULL, NULL}};
    load_ok("dtype/config.json", llama2_7b, renamed, &m);
    ck_assert_int_eq(m.dtype_bytes, 4);
    const kvp_t bf16[] = {{"torch_dtype", "\"bfloat16\""}, {NULL, NULL}};
    load_ok("bf16/config.json", llama2_7b, bf16, &m);
    ck_assert_int_eq(m.dtype_bytes, 2);
}
END_TEST

/* ---- refusals ------------------------------------------------------------------------- */

START_TEST(test_refused_architectures) {
    const kvp_t ds[] = {{"architectures", "[\"DeepseekV3ForCausalLM\"]"}, {NULL, NULL}};
    refused(llama2_7b, ds, "architectures: 'DeepseekV3ForCausalLM' is not supported "
                           "(supported: LlamaForCausalLM, MistralForCausalLM");
    const kvp_t none[] = {{"architectures", NULL}, {NULL, NULL}};
    refused(llama2_7b, none, "key 'architectures' is missing");
    const kvp_t text[] = {{"architectures", "\"LlamaForCausalLM\""}, {NULL, NULL}};
    refused(llama2_7b, text, "key 'architectures' must be a list of class names (got "
                             "\"LlamaForCausalLM\")");
    const kvp_t empty[] = {{"architectures", "[]"}, {NULL, NULL}};
    refused(llama2_7b, empty, "key 'architectures' is an empty list");
    const kvp_t num[] = {{"architectures", "[7]"}, {NULL, NULL}};
    refused(llama2_7b, num, "key 'architectures' must be a list of class names (got [7])");
    /* every Qwen2-MoE layer has a shared expert */
    const kvp_t q2moe[] = {{"architectures", "[\"Qwen2MoeForCausalLM\"]"},
                           {"shared_expert_intermediate_size", "5632"}, {NULL, NULL}};
    refused(qwen3_30b_a3b, q2moe, "shared_expert_intermediate_size: Qwen2MoeForCausalLM has a "
                                  "shared expert");
    /* the first entry decides, and the match is exact */
    const kvp_t lower[] = {{"architectures", "[\"llamaforcausallm\"]"}, {NULL, NULL}};
    refused(llama2_7b, lower, "'llamaforcausallm' is not supported");
}
END_TEST

START_TEST(test_refused_keys) {
    const kvp_t missing[] = {{"hidden_size", NULL}, {NULL, NULL}};
    refused(llama2_7b, missing, "key 'hidden_size' is missing");
    const kvp_t text[] = {{"hidden_size", "\"4096\""}, {NULL, NULL}};
    refused(llama2_7b, text, "key 'hidden_size' must be a positive integer (got \"4096\")");
    const kvp_t real[] = {{"hidden_size", "4096.0"}, {NULL, NULL}};
    refused(llama2_7b, real, "key 'hidden_size' must be a positive integer (got 4096.0)");
    const kvp_t neg[] = {{"intermediate_size", "-1"}, {NULL, NULL}};
    refused(llama2_7b, neg, "key 'intermediate_size' must be a positive integer (got -1)");
    const kvp_t zero[] = {{"num_attention_heads", "0"}, {NULL, NULL}};
    refused(llama2_7b, zero, "key 'num_attention_heads' must be a positive integer (got 0)");
    const kvp_t kv0[] = {{"num_key_value_heads", "0"}, {NULL, NULL}};
    refused(llama2_7b, kv0, "key 'num_key_value_heads' must be a positive integer (got 0)");
    const kvp_t huge[] = {{"vocab_size", "3000000000"}, {NULL, NULL}};
    refused(llama2_7b, huge, "key 'vocab_size' must be a positive integer (got 3000000000)");
    const kvp_t vast[] = {{"vocab_size", "100000000000000000000"}, {NULL, NULL}};
    refused(llama2_7b, vast, "key 'vocab_size' must be a positive integer");
    const kvp_t null[] = {{"num_hidden_layers", "null"}, {NULL, NULL}};
    refused(llama2_7b, null, "key 'num_hidden_layers' must be a positive integer (got null)");
    const kvp_t list[] = {{"max_position_embeddings", "[4096]"}, {NULL, NULL}};
    refused(llama2_7b, list, "key 'max_position_embeddings' must be a positive integer "
                             "(got [4096])");
    const kvp_t tie[] = {{"tie_word_embeddings", "1"}, {NULL, NULL}};
    refused(llama2_7b, tie, "key 'tie_word_embeddings' must be true or false (got 1)");
    const kvp_t flag[] = {{"use_sliding_window", "\"no\""}, {NULL, NULL}};
    refused(qwen25_05b, flag, "key 'use_sliding_window' must be true or false");
    const kvp_t i8[] = {{"torch_dtype", "\"int8\""}, {NULL, NULL}};
    refused(llama2_7b, i8, "key 'torch_dtype': \"int8\" is not supported");
    const kvp_t dnum[] = {{"torch_dtype", "16"}, {NULL, NULL}};
    refused(llama2_7b, dnum, "key 'torch_dtype' must be a type name");
    const kvp_t twice[] = {{"vocab_size", "32000, \"vocab_size\": 32001"}, {NULL, NULL}};
    refused(llama2_7b, twice, "key 'vocab_size' appears twice");
    const kvp_t quant[] = {{"quantization_config", "{\"quant_method\": \"fp8\"}"},
                           {NULL, NULL}};
    refused(llama2_7b, quant, "quantization_config: quantized weights are not supported");
    const kvp_t odd[] = {{"hidden_size", "4095"}, {NULL, NULL}};
    refused(llama2_7b, odd, "key 'head_dim' is missing and hidden_size (4095) is not a "
                            "multiple of num_attention_heads (32)");
}
END_TEST

/* Shapes the struct cannot hold: preset_model_validate's message, in config.json terms. */
START_TEST(test_refused_shapes) {
    const kvp_t gqa[] = {{"num_key_value_heads", "5"}, {NULL, NULL}};
    refused(llama2_7b, gqa, "n_heads (32) is not a multiple of n_kv_heads (5) (in config.json "
                            "terms: n_heads is num_attention_heads, n_kv_heads is "
                            "num_key_value_heads)");
    const kvp_t more_kv[] = {{"num_key_value_heads", "64"}, {NULL, NULL}};
    refused(llama2_7b, more_kv, "is not a multiple of n_kv_heads (64)");
    const kvp_t top9[] = {{"num_experts_per_tok", "9"}, {NULL, NULL}};
    refused(mixtral, top9, "a mixture of 8 experts needs experts_per_tok in 1..8 (got 9)");
    refused(mixtral, top9, "experts_per_tok is num_experts_per_tok");
    const kvp_t no_experts[] = {{"num_local_experts", NULL}, {NULL, NULL}};
    refused(mixtral, no_experts, "key 'num_local_experts' is missing");
    const kvp_t no_top[] = {{"num_experts_per_tok", NULL}, {NULL, NULL}};
    refused(mixtral, no_top, "key 'num_experts_per_tok' is missing");
}
END_TEST

/* Dense layers between the sparse ones (a later issue models them). */
START_TEST(test_refused_dense_layers) {
    const kvp_t only[] = {{"mlp_only_layers", "[0, 5]"}, {NULL, NULL}};
    refused(qwen3_30b_a3b, only, "key 'mlp_only_layers' makes layer 0 dense: dense layers "
                                 "between sparse ones are not supported yet");
    const kvp_t step[] = {{"decoder_sparse_step", "2"}, {NULL, NULL}};
    refused(qwen3_30b_a3b, step, "key 'decoder_sparse_step' is 2");
    const kvp_t step0[] = {{"decoder_sparse_step", "0"}, {NULL, NULL}};
    refused(qwen3_30b_a3b, step0, "key 'decoder_sparse_step' must be a positive integer");
    const kvp_t bad[] = {{"mlp_only_layers", "[\"3\"]"}, {NULL, NULL}};
    refused(qwen3_30b_a3b, bad, "key 'mlp_only_layers' must be a list of layer indices");
    const kvp_t no_ff[] = {{"moe_intermediate_size", NULL}, {NULL, NULL}};
    refused(qwen3_30b_a3b, no_ff, "key 'moe_intermediate_size' is missing");
    const kvp_t zero[] = {{"num_experts", "0"}, {NULL, NULL}};
    refused(qwen3_30b_a3b, zero, "key 'num_experts' must be a positive integer (got 0)");
}
END_TEST

START_TEST(test_not_a_config) {
    preset_model_t m;
    struct { const char *text, *want; } cases[] = {
        {"n_layers = 32\nd_model = 4096\n", "not valid JSON"},
        {"", "not valid JSON"},
        {"{\"hidden_size\": 4096,", "not valid JSON"},
        {"{\"hidden_size\": NaN}", "it holds NaN or Infinity"},
        {"[1, 2]", "the document is a JSON array, not an object"},
        {"42", "the document is a JSON integer, not an object"},
        {"\"LlamaForCausalLM\"", "the document is a JSON text, not an object"},
        {"{}", "key 'architectures' is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = write_rel("x.json", cases[i].text);
        ck_assert_int_eq(hfcfg_load(path, &m, NULL, 0, g_err, sizeof g_err), -1);
        ck_assert_msg(!strncmp(g_err, path, strlen(path)) && strstr(g_err, cases[i].want),
                      "%s: got '%s', wanted '%s'", cases[i].text, g_err, cases[i].want);
    }
    snprintf(g_path, sizeof g_path, "%s/absent.json", g_dir);
    ck_assert_int_eq(hfcfg_load(g_path, &m, NULL, 0, g_err, sizeof g_err), -1);
    ck_assert_msg(strstr(g_err, "No such file"), "%s", g_err);
}
END_TEST

/* ---- names and routing ---------------------------------------------------------------- */

START_TEST(test_names) {
    preset_model_t m;
    load_ok("Llama-2-7b-hf/config.json", llama2_7b, no_edits, &m);
    ck_assert_str_eq(m.name, "Llama-2-7b-hf");
    load_ok("model_configs/Mixtral-8x7B-v0.1.config.json", mixtral, no_edits, &m);
    ck_assert_str_eq(m.name, "Mixtral-8x7B-v0.1");
    load_ok("qwen.json", qwen25_05b, no_edits, &m);
    ck_assert_str_eq(m.name, "qwen");
    /* a Hugging Face cache: the repository's name, not the snapshot's hash */
    load_ok("hub/models--meta-llama--Llama-2-7b-hf/snapshots/8cca527612d856d7d32bd94f8103728d6"
            "14eb852/config.json", llama2_7b, no_edits, &m);
    ck_assert_str_eq(m.name, "Llama-2-7b-hf");
    /* cut to the name field (47 characters and the NUL) */
    load_ok("a-very-long-model-directory-name-that-goes-on-and-on-and-on/config.json",
            llama2_7b, no_edits, &m);
    ck_assert_uint_eq(strlen(m.name), KV_NAME_CAP - 1);
    ck_assert(!strncmp(m.name, "a-very-long-model-directory-name-that-goes-on-a", 47));
    /* a relative config.json names the folder it is in */
    char cwd[512];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    write_rel("here-dir/config.json", cfg_json(llama2_7b, no_edits));
    snprintf(g_path, sizeof g_path, "%s/here-dir", g_dir);
    ck_assert_int_eq(chdir(g_path), 0);
    int rc = hfcfg_load("config.json", &m, NULL, 0, g_err, sizeof g_err);
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_msg(rc == 0, "%s", g_err);
    ck_assert_str_eq(m.name, "here-dir");
}
END_TEST

START_TEST(test_preset_model_get) {
    preset_model_t m;
    char err[1024], note[1024];
    /* a JSON object in a file with no .json name is still a config */
    const char *path = write_rel("snapshot-file", cfg_json(mistral_7b, no_edits));
    ck_assert_int_eq(hfcfg_is_config(path), 1);
    ck_assert_msg(preset_model_get_noted(path, &m, note, sizeof note, err, sizeof err) == 0,
                  "%s", err);
    same_shape(&m, preset_model_find("mistral-7b"));
    ck_assert_msg(strstr(note, "sliding_window 4096"), "%s", note);
    ck_assert_int_eq(preset_model_get(path, &m, err, sizeof err), 0);
    /* a byte-order mark and white space before the object */
    char bom[8192];
    snprintf(bom, sizeof bom, "\xEF\xBB\xBF \n\t%s", cfg_json(llama2_7b, no_edits));
    path = write_rel("bom", bom);
    ck_assert_int_eq(hfcfg_is_config(path), 1);
    ck_assert_msg(preset_model_get(path, &m, err, sizeof err) == 0, "%s", err);
    same_shape(&m, preset_model_find("llama-2-7b"));
    /* a missing .json is the loader's "no such file", not the list of built-ins */
    snprintf(g_path, sizeof g_path, "%s/absent.json", g_dir);
    ck_assert_int_eq(preset_model_get(g_path, &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "absent.json: No such file"), "%s", err);
    ck_assert_int_eq(preset_model_get("absent.json", &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "absent.json: No such file"), "%s", err);
    /* the loader's refusals come back through preset_model_get */
    path = write_rel("deep/config.json", "{\"architectures\": [\"DeepseekV3ForCausalLM\"]}");
    ck_assert_int_eq(preset_model_get(path, &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "'DeepseekV3ForCausalLM' is not supported"), "%s", err);
    /* key = value files and built-ins are unchanged, with no note */
    path = write_rel("tiny.model", "n_layers = 2\nd_model = 64\nn_heads = 4\nd_ff = 128\n"
                                   "vocab = 100\n");
    ck_assert_int_eq(hfcfg_is_config(path), 0);
    strcpy(note, "stale");
    ck_assert_msg(preset_model_get_noted(path, &m, note, sizeof note, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_str_eq(m.name, "tiny");
    ck_assert_str_eq(note, "");
    strcpy(note, "stale");
    ck_assert_int_eq(preset_model_get_noted("mixtral-8x7b", &m, note, sizeof note, err,
                                            sizeof err), 0);
    ck_assert_str_eq(note, "");
    ck_assert_int_eq(hfcfg_is_config("llama-2-7b"), 0);
}
END_TEST

/* ---- the shared data's real files ----------------------------------------------------- */

START_TEST(test_real_configs) {
    struct { const char *rel, *builtin, *name; double params; } want[] = {
        {"vllm-h100/model_configs/Llama-2-7b-hf.config.json", "llama-2-7b", "Llama-2-7b-hf",
         6738415616.0},
        {"vllm-h100/model_configs/Mixtral-8x7B-v0.1.config.json", "mixtral-8x7b",
         "Mixtral-8x7B-v0.1", 46702792704.0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[1024], note[1024];
        preset_model_t m;
        if (!testutil_data_path(want[i].rel, path, sizeof path)) continue;
        ck_assert_msg(preset_model_get_noted(path, &m, note, sizeof note, g_err,
                                             sizeof g_err) == 0, "%s", g_err);
        same_shape(&m, preset_model_find(want[i].builtin));
        ck_assert_str_eq(m.name, want[i].name);
        ck_assert(preset_model_params(&m) == want[i].params);
        ck_assert_msg(note[0] == '\0', "%s", note);
    }
}
END_TEST

/* ---- damaged files -------------------------------------------------------------------- */

/* Refused with a message naming the file, or a shape that validates: never anything else.
 * The status. */
static int parse_any(const char *text, size_t len) {
    preset_model_t m;
    char err[1024] = "", note[1024], verr[256];
    memset(&m, 0, sizeof m);
    int rc = hfcfg_parse("fuzz.json", text, len, &m, note, sizeof note, err, sizeof err);
    ck_assert(rc == 0 || rc == -1);
    if (rc == 0)
        ck_assert_msg(preset_model_validate(&m, verr, sizeof verr) == 0, "%s", verr);
    else
        ck_assert_msg(!strncmp(err, "fuzz.json: ", 11) && strlen(err) > 11, "'%s'", err);
    return rc;
}

START_TEST(test_fuzz) {
    const kvp_t *bases[] = {mixtral, qwen3_30b_a3b, qwen25_05b};
    static const char pick[] = "\"{}[],:0-9e.\\ nt\x01\xff";
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int refusals = 0, accepts = 0;
    for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++) {
        char text[8192], work[8192];
        snprintf(text, sizeof text, "%s", cfg_json(bases[b], no_edits));
        size_t len = strlen(text);
        size_t close = (size_t)(strrchr(text, '}') - text);
        for (size_t n = 0; n < len; n++) {  /* refused unless only white space was cut */
            memcpy(work, text, n);
            work[n] = '\0';
            ck_assert_int_eq(parse_any(work, n), n > close ? 0 : -1);
        }
        for (int k = 0; k < 1500; k++) {  /* one to three bytes replaced */
            memcpy(work, text, len + 1);
            int edits = 1 + k % 3;
            for (int e = 0; e < edits; e++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                size_t at = (size_t)(x % len);
                work[at] = (k & 8) ? pick[(x >> 32) % (sizeof pick - 1)] : (char)(x >> 40);
            }
            if (parse_any(work, len) == 0) accepts++;
            else refusals++;
        }
    }
    /* the mutations reach both outcomes, so neither side is untested */
    ck_assert_int_gt(refusals, 100);
    ck_assert_int_gt(accepts, 100);
}
END_TEST

static Suite *hfconfig_suite(void) {
    Suite *s = suite_create("hfconfig");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_llama);
    tcase_add_test(tc, test_mistral);
    tcase_add_test(tc, test_qwen2);
    tcase_add_test(tc, test_qwen3);
    tcase_add_test(tc, test_mixtral);
    tcase_add_test(tc, test_qwen3_moe);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_dtypes);
    tcase_add_test(tc, test_refused_architectures);
    tcase_add_test(tc, test_refused_keys);
    tcase_add_test(tc, test_refused_shapes);
    tcase_add_test(tc, test_refused_dense_layers);
    tcase_add_test(tc, test_not_a_config);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_preset_model_get);
    tcase_add_test(tc, test_real_configs);
    tcase_add_test(tc, test_fuzz);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return testutil_run(hfconfig_suite()); }
