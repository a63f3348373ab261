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

/* layer_types lists: gpt-oss's alternate from a sliding layer 0 */
#define FA "\"full_attention\""
#define SA "\"sliding_attention\""
#define FA5 FA ", " FA ", " FA ", " FA ", " FA
#define Q2_FULL20 FA5 ", " FA5 ", " FA5 ", " FA5
/* 12 layers */
#define SF12 SA ", " FA ", " SA ", " FA ", " SA ", " FA ", " SA ", " FA ", " SA ", " FA ", " \
            SA ", " FA
#define SF24 SF12 ", " SF12
#define SF36 SF12 ", " SF12 ", " SF12

/* https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json: 60 experts of 1408,
 * top 4, and a shared expert of 5632 in every layer (max_position_embeddings 8192 here; one
 * copy of the file seen shows 32768: nothing below depends on it) */
static const kvp_t qwen15_moe[] = {
    {"architectures", "[\"Qwen2MoeForCausalLM\"]"}, {"decoder_sparse_step", "1"},
    {"hidden_act", "\"silu\""}, {"hidden_size", "2048"}, {"intermediate_size", "5632"},
    {"max_position_embeddings", "8192"}, {"max_window_layers", "21"},
    {"model_type", "\"qwen2_moe\""}, {"moe_intermediate_size", "1408"},
    {"norm_topk_prob", "false"}, {"num_attention_heads", "16"}, {"num_experts", "60"},
    {"num_experts_per_tok", "4"}, {"num_hidden_layers", "24"}, {"num_key_value_heads", "16"},
    {"rope_theta", "1000000.0"}, {"shared_expert_intermediate_size", "5632"},
    {"sliding_window", "32768"}, {"tie_word_embeddings", "false"},
    {"torch_dtype", "\"bfloat16\""}, {"use_sliding_window", "false"},
    {"vocab_size", "151936"}, {NULL, NULL}};

/* https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json */
static const kvp_t phi3_mini[] = {
    {"architectures", "[\"Phi3ForCausalLM\"]"}, {"attention_bias", "false"},
    {"attention_dropout", "0.0"}, {"embd_pdrop", "0.0"}, {"hidden_act", "\"silu\""},
    {"hidden_size", "3072"}, {"intermediate_size", "8192"},
    {"max_position_embeddings", "4096"}, {"model_type", "\"phi3\""},
    {"num_attention_heads", "32"}, {"num_hidden_layers", "32"}, {"num_key_value_heads", "32"},
    {"original_max_position_embeddings", "4096"}, {"resid_pdrop", "0.0"},
    {"rms_norm_eps", "1e-05"}, {"rope_scaling", "null"}, {"rope_theta", "10000.0"},
    {"sliding_window", "2047"}, {"tie_word_embeddings", "false"},
    {"torch_dtype", "\"bfloat16\""}, {"vocab_size", "32064"}, {NULL, NULL}};

/* https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json, less its
 * quantization_config (the published weights are fp8: {"activation_scheme": "dynamic",
 * "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}), which the loader
 * refuses (test_refused_deepseek); without it this is the bf16 checkpoint's shape */
static const kvp_t deepseek_v3[] = {
    {"architectures", "[\"DeepseekV3ForCausalLM\"]"}, {"attention_bias", "false"},
    {"first_k_dense_replace", "3"}, {"hidden_act", "\"silu\""}, {"hidden_size", "7168"},
    {"intermediate_size", "18432"}, {"kv_lora_rank", "512"},
    {"max_position_embeddings", "163840"}, {"model_type", "\"deepseek_v3\""},
    {"moe_intermediate_size", "2048"}, {"moe_layer_freq", "1"}, {"n_group", "8"},
    {"n_routed_experts", "256"}, {"n_shared_experts", "1"}, {"norm_topk_prob", "true"},
    {"num_attention_heads", "128"}, {"num_experts_per_tok", "8"},
    {"num_hidden_layers", "61"}, {"num_key_value_heads", "128"},
    {"num_nextn_predict_layers", "1"}, {"q_lora_rank", "1536"}, {"qk_nope_head_dim", "128"},
    {"qk_rope_head_dim", "64"},
    {"rope_scaling", "{\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0, "
                     "\"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, "
                     "\"type\": \"yarn\"}"},
    {"rope_theta", "10000"}, {"routed_scaling_factor", "2.5"},
    {"scoring_func", "\"sigmoid\""}, {"tie_word_embeddings", "false"}, {"topk_group", "4"},
    {"topk_method", "\"noaux_tc\""}, {"torch_dtype", "\"bfloat16\""}, {"v_head_dim", "128"},
    {"vocab_size", "129280"}, {NULL, NULL}};

/* https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json: a direct
 * query projection (q_lora_rank null), one dense layer, 2 shared experts */
static const kvp_t deepseek_v2_lite[] = {
    {"architectures", "[\"DeepseekV2ForCausalLM\"]"}, {"first_k_dense_replace", "1"},
    {"hidden_size", "2048"}, {"intermediate_size", "10944"}, {"kv_lora_rank", "512"},
    {"max_position_embeddings", "163840"}, {"model_type", "\"deepseek_v2\""},
    {"moe_intermediate_size", "1408"}, {"moe_layer_freq", "1"}, {"n_group", "1"},
    {"n_routed_experts", "64"}, {"n_shared_experts", "2"}, {"norm_topk_prob", "false"},
    {"num_attention_heads", "16"}, {"num_experts_per_tok", "6"}, {"num_hidden_layers", "27"},
    {"num_key_value_heads", "16"}, {"q_lora_rank", "null"}, {"qk_nope_head_dim", "128"},
    {"qk_rope_head_dim", "64"},
    {"rope_scaling", "{\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 0.707, "
                     "\"mscale_all_dim\": 0.707, \"original_max_position_embeddings\": 4096, "
                     "\"type\": \"yarn\"}"},
    {"tie_word_embeddings", "false"}, {"topk_group", "1"}, {"topk_method", "\"greedy\""},
    {"torch_dtype", "\"bfloat16\""}, {"v_head_dim", "128"}, {"vocab_size", "102400"},
    {NULL, NULL}};

/* https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json, less its
 * quantization_config ({"quant_method": "mxfp4", "modules_to_not_convert": [...]}: the
 * experts ship in MXFP4), which the loader refuses (test_refused_gpt_oss) */
static const kvp_t gpt_oss_120b[] = {
    {"architectures", "[\"GptOssForCausalLM\"]"}, {"attention_bias", "true"},
    {"attention_dropout", "0.0"}, {"eos_token_id", "200002"}, {"experts_per_token", "4"},
    {"head_dim", "64"}, {"hidden_act", "\"silu\""}, {"hidden_size", "2880"},
    {"initial_context_length", "4096"}, {"intermediate_size", "2880"},
    {"layer_types", "[" SF36 "]"}, {"max_position_embeddings", "131072"},
    {"model_type", "\"gpt_oss\""}, {"num_attention_heads", "64"},
    {"num_experts_per_tok", "4"}, {"num_hidden_layers", "36"}, {"num_key_value_heads", "8"},
    {"num_local_experts", "128"}, {"output_router_logits", "false"},
    {"rope_scaling", "{\"beta_fast\": 32.0, \"beta_slow\": 1.0, \"factor\": 32.0, "
                     "\"original_max_position_embeddings\": 4096, \"rope_type\": \"yarn\", "
                     "\"truncate\": false}"},
    {"rope_theta", "150000"}, {"router_aux_loss_coef", "0.9"}, {"sliding_window", "128"},
    {"swiglu_limit", "7.0"}, {"tie_word_embeddings", "false"}, {"use_cache", "true"},
    {"vocab_size", "201088"}, {NULL, NULL}};

/* https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json: as the 120b with 24
 * layers and 32 experts (its quantization_config likewise left out) */
static const kvp_t gpt_oss_20b_edits[] = {
    {"num_hidden_layers", "24"}, {"num_local_experts", "32"}, {"layer_types", "[" SF24 "]"},
    {NULL, NULL}};

/* https://huggingface.co/google/gemma-2-9b/blob/main/config.json */
static const kvp_t gemma2_9b[] = {
    {"architectures", "[\"Gemma2ForCausalLM\"]"}, {"attention_bias", "false"},
    {"attn_logit_softcapping", "50.0"}, {"cache_implementation", "\"hybrid\""},
    {"final_logit_softcapping", "30.0"}, {"head_dim", "256"},
    {"hidden_activation", "\"gelu_pytorch_tanh\""}, {"hidden_size", "3584"},
    {"intermediate_size", "14336"}, {"max_position_embeddings", "8192"},
    {"model_type", "\"gemma2\""}, {"num_attention_heads", "16"}, {"num_hidden_layers", "42"},
    {"num_key_value_heads", "8"}, {"query_pre_attn_scalar", "256"}, {"rope_theta", "10000.0"},
    {"sliding_window", "4096"}, {"torch_dtype", "\"bfloat16\""}, {"vocab_size", "256000"},
    {NULL, NULL}};

/* https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json: the language model's
 * keys are in text_config, which leaves vocab_size (262208), max_position_embeddings
 * (131072) and tie_word_embeddings (true) to Gemma3TextConfig's defaults.
 * sliding_window_pattern 6 is in some copies of the file and is the default anyway. */
#define GEMMA3_27B_TEXT                                                                    \
    "{\"head_dim\": 128, \"hidden_size\": 5376, \"intermediate_size\": 21504, "             \
    "\"model_type\": \"gemma3_text\", \"num_attention_heads\": 32, "                        \
    "\"num_hidden_layers\": 62, \"num_key_value_heads\": 16, \"query_pre_attn_scalar\": "   \
    "168, \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}, "                 \
    "\"sliding_window\": 1024, \"sliding_window_pattern\": 6}"
static const kvp_t gemma3_27b[] = {
    {"architectures", "[\"Gemma3ForConditionalGeneration\"]"}, {"boi_token_index", "255999"},
    {"eoi_token_index", "256000"}, {"eos_token_id", "[1, 106]"},
    {"image_token_index", "262144"}, {"initializer_range", "0.02"},
    {"mm_tokens_per_image", "256"}, {"model_type", "\"gemma3\""},
    {"text_config", GEMMA3_27B_TEXT}, {"torch_dtype", "\"bfloat16\""},
    {"transformers_version", "\"4.50.0.dev0\""},
    {"vision_config", "{\"hidden_size\": 1152, \"image_size\": 896, \"intermediate_size\": "
                      "4304, \"model_type\": \"siglip_vision_model\", "
                      "\"num_attention_heads\": 16, \"num_hidden_layers\": 27, "
                      "\"patch_size\": 14, \"vision_use_head\": false}"},
    {NULL, NULL}};

/* https://huggingface.co/google/gemma-3-1b-it/blob/main/config.json: text only */
static const kvp_t gemma3_1b[] = {
    {"architectures", "[\"Gemma3ForCausalLM\"]"}, {"attn_logit_softcapping", "null"},
    {"final_logit_softcapping", "null"}, {"head_dim", "256"},
    {"hidden_activation", "\"gelu_pytorch_tanh\""}, {"hidden_size", "1152"},
    {"intermediate_size", "6912"}, {"max_position_embeddings", "32768"},
    {"model_type", "\"gemma3_text\""}, {"num_attention_heads", "4"},
    {"num_hidden_layers", "26"}, {"num_key_value_heads", "1"}, {"query_pre_attn_scalar", "256"},
    {"rope_local_base_freq", "10000"}, {"rope_scaling", "null"}, {"rope_theta", "1000000"},
    {"sliding_window", "512"}, {"sliding_window_pattern", "6"},
    {"torch_dtype", "\"bfloat16\""}, {"vocab_size", "262144"}, {NULL, NULL}};

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
    /* MistralConfig's window applies to every layer: the KV cache holds 4096 tokens a
     * layer however long the sequence */
    ck_assert_int_eq(m.sliding_window, 4096);
    ck_assert_int_eq(m.n_window_layers, 32);
    ck_assert(preset_model_kv_bytes_at(&m, 10000) == 32.0 * 2 * 8 * 128 * 2 * 4096);
    ck_assert(preset_model_kv_bytes_at(&m, 1000) == 32.0 * 2 * 8 * 128 * 2 * 1000);
    ck_assert_str_eq(g_note, "");
    /* a window as long as the context never binds: no window */
    const kvp_t wide[] = {{"sliding_window", "32768"}, {NULL, NULL}};
    load_ok("wide/config.json", mistral_7b, wide, &m);
    ck_assert_int_eq(m.sliding_window, 0);
    ck_assert_int_eq(m.n_window_layers, 0);
    const kvp_t zero[] = {{"sliding_window", "0"}, {NULL, NULL}};
    refused(mistral_7b, zero, "key 'sliding_window' must be a positive integer (got 0)");
    /* an explicit head_dim that is not hidden_size / heads (5120 / 32 = 160) */
    load_ok("nemo/config.json", mistral_nemo, no_edits, &m);
    ck_assert_int_eq(m.head_dim, 128);
    ck_assert(preset_model_params(&m) == 12247782400.0);
    ck_assert(preset_model_kv_bytes_per_token(&m) == 2.0 * 40 * 8 * 128 * 2);
    ck_assert_int_eq(m.sliding_window, 0);  /* sliding_window null */
    ck_assert_str_eq(g_note, "");
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
    ck_assert_int_eq(m.sliding_window, 0);
    ck_assert_int_eq(m.n_window_layers, 0);
    /* with it, layers from max_window_layers on slide (transformers' layer_types rule:
     * layer i when i >= max_window_layers); 24 of 24 leaves none */
    const kvp_t used[] = {{"use_sliding_window", "true"}, {"sliding_window", "4096"},
                          {NULL, NULL}};
    load_ok("w/config.json", qwen25_05b, used, &m);
    ck_assert_int_eq(m.n_window_layers, 0);
    ck_assert_int_eq(m.sliding_window, 0);
    const kvp_t top3[] = {{"use_sliding_window", "true"}, {"sliding_window", "4096"},
                          {"max_window_layers", "21"}, {NULL, NULL}};
    load_ok("w3/config.json", qwen25_05b, top3, &m);
    ck_assert_int_eq(m.sliding_window, 4096);
    ck_assert_int_eq(m.n_window_layers, 3);
    const kvp_t all[] = {{"use_sliding_window", "true"}, {"sliding_window", "4096"},
                         {"max_window_layers", "0"}, {NULL, NULL}};
    load_ok("w0/config.json", qwen25_05b, all, &m);
    ck_assert_int_eq(m.n_window_layers, 24);
    /* Qwen2Config's max_window_layers default is 28, more than these 24 layers */
    const kvp_t dflt[] = {{"use_sliding_window", "true"}, {"sliding_window", "4096"},
                          {"max_window_layers", NULL}, {NULL, NULL}};
    load_ok("wd/config.json", qwen25_05b, dflt, &m);
    ck_assert_int_eq(m.n_window_layers, 0);
    /* newer transformers save layer_types, which then decides */
    const kvp_t types[] = {{"use_sliding_window", "true"}, {"sliding_window", "4096"},
                           {"layer_types", "[" Q2_FULL20 ", \"sliding_attention\", "
                                           "\"full_attention\", \"sliding_attention\", "
                                           "\"sliding_attention\"]"},
                           {NULL, NULL}};
    load_ok("wt/config.json", qwen25_05b, types, &m);
    ck_assert_int_eq(m.n_window_layers, 3);
    /* the window's layers need its size */
    const kvp_t nowin[] = {{"use_sliding_window", "true"}, {"sliding_window", NULL},
                           {"max_window_layers", "21"}, {NULL, NULL}};
    refused(qwen25_05b, nowin, "key 'sliding_window' is missing: 3 of the 24 layers are "
                               "windowed (use_sliding_window is true)");
    const kvp_t negmwl[] = {{"use_sliding_window", "true"}, {"max_window_layers", "-1"},
                            {NULL, NULL}};
    refused(qwen25_05b, negmwl, "key 'max_window_layers' must be a non-negative integer "
                                "(got -1)");
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
    ck_assert_int_eq(m.shared_d_ff, 0);  /* Qwen3-MoE has no shared expert */
    ck_assert_int_eq(m.n_dense_layers, 0);
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

/* ---- the 2026 architectures ----------------------------------------------------------- */

/* |x - want| within frac of want */
static void near(double x, double want, double frac, const char *what) {
    ck_assert_msg(x > want * (1 - frac) && x < want * (1 + frac), "%s: %.6g, published %.6g",
                  what, x, want);
}

/* Every field of the preset file's keys (the MLA, shared-expert and window ones too) equals
 * the built-in's: the config.json and the preset citing it describe one shape. */
static void same_as_builtin(const preset_model_t *m, const char *builtin) {
    const preset_model_t *b = preset_model_find(builtin);
    ck_assert_msg(b != NULL, "no built-in %s", builtin);
    for (int i = 0; i < preset_model_n_keys; i++) {
        const kv_spec_t *k = &preset_model_keys[i];
        int32_t x, y;
        if (k->type != KV_INT) continue;
        memcpy(&x, (const char *)m + k->offset, sizeof x);
        memcpy(&y, (const char *)b + k->offset, sizeof y);
        ck_assert_msg(x == y, "%s vs %s: %s %d vs %d", m->name, builtin, k->key, (int)x, (int)y);
    }
}

/* The parameters one token passes through: all but the routed experts it is not sent to,
 * and less the input embedding (a table lookup), as DeepSeek and OpenAI count "active". */
static double active_params(const preset_model_t *m) {
    return preset_model_params(m) - preset_model_all_expert_params(m) +
           (double)preset_model_moe_layers(m) * m->experts_per_tok *
               preset_model_expert_params(m) -
           preset_model_lm_params(m);
}

START_TEST(test_qwen2_moe) {
    preset_model_t m;
    load_ok("Qwen1.5-MoE-A2.7B/config.json", qwen15_moe, no_edits, &m);
    ck_assert_int_eq(m.n_layers, 24);
    ck_assert_int_eq(m.d_model, 2048);
    ck_assert_int_eq(m.n_heads, 16);
    ck_assert_int_eq(m.n_kv_heads, 16);
    ck_assert_int_eq(m.head_dim, 128);
    ck_assert_int_eq(m.d_ff, 5632);
    ck_assert_int_eq(m.n_experts, 60);
    ck_assert_int_eq(m.experts_per_tok, 4);
    ck_assert_int_eq(m.moe_d_ff, 1408);
    ck_assert_int_eq(m.shared_d_ff, 5632);
    ck_assert_int_eq(m.n_dense_layers, 0);
    ck_assert_int_eq(m.vocab, 151936);
    ck_assert_int_eq(m.tied_embeddings, 0);
    ck_assert_int_eq(m.sliding_window, 0);  /* use_sliding_window false */
    /* 14.3B total on the model card (https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B); its
     * "2.7B activated" is not asserted: how Qwen counts it (embeddings or not) is unclear */
    near(preset_model_params(&m), 14.3e9, 0.01, "Qwen1.5-MoE-A2.7B");
    ck_assert_msg(strstr(g_note, "q/k/v biases (6144 parameters a layer") &&
                  strstr(g_note, "the shared expert's gate (hidden_size = 2048 parameters"),
                  "%s", g_note);
}
END_TEST

START_TEST(test_phi3) {
    preset_model_t m;
    load_ok("Phi-3-mini-4k-instruct/config.json", phi3_mini, no_edits, &m);
    ck_assert_int_eq(m.n_layers, 32);
    ck_assert_int_eq(m.d_model, 3072);
    ck_assert_int_eq(m.n_heads, 32);
    ck_assert_int_eq(m.n_kv_heads, 32);
    ck_assert_int_eq(m.head_dim, 96);
    ck_assert_int_eq(m.d_ff, 8192);
    ck_assert_int_eq(m.vocab, 32064);
    ck_assert_int_eq(m.max_seq, 4096);
    ck_assert_int_eq(m.tied_embeddings, 0);
    /* its 2047-token window is below the context, and vLLM applies it to every layer */
    ck_assert_int_eq(m.sliding_window, 2047);
    ck_assert_int_eq(m.n_window_layers, 32);
    /* 3.8B in Microsoft's model card */
    near(preset_model_params(&m), 3.8e9, 0.01, "Phi-3-mini");
    ck_assert_str_eq(g_note, "");
    /* the 128k variant's shape: a window past the context, LongRoPE, and (Phi-4-mini) a
     * partial rotary factor; only the notes change */
    const kvp_t long_ctx[] = {
        {"max_position_embeddings", "131072"}, {"sliding_window", "262144"},
        {"rope_scaling", "{\"long_factor\": [1.0], \"short_factor\": [1.0], \"type\": "
                         "\"longrope\"}"},
        {"partial_rotary_factor", "0.75"}, {NULL, NULL}};
    load_ok("long/config.json", phi3_mini, long_ctx, &m);
    ck_assert_int_eq(m.sliding_window, 0);
    ck_assert_int_eq(m.n_window_layers, 0);
    ck_assert_msg(strstr(g_note, "rope_scaling 'longrope'") &&
                  strstr(g_note, "partial_rotary_factor 0.75"), "%s", g_note);
    const kvp_t none[] = {{"sliding_window", "null"}, {NULL, NULL}};
    load_ok("none/config.json", phi3_mini, none, &m);
    ck_assert_int_eq(m.sliding_window, 0);
    const kvp_t odd[] = {{"hidden_size", "3000"}, {NULL, NULL}};
    refused(phi3_mini, odd, "key 'head_dim' is missing and hidden_size (3000) is not a "
                            "multiple of num_attention_heads (32)");
}
END_TEST

START_TEST(test_deepseek_v3) {
    preset_model_t m;
    load_ok("DeepSeek-V3/config.json", deepseek_v3, no_edits, &m);
    ck_assert_str_eq(m.name, "DeepSeek-V3");
    same_as_builtin(&m, "deepseek-v3");
    ck_assert_int_eq(m.n_layers, 61);
    ck_assert_int_eq(m.d_model, 7168);
    ck_assert_int_eq(m.n_heads, 128);
    ck_assert_int_eq(m.n_kv_heads, 128);   /* MLA: every head reads the latent */
    ck_assert_int_eq(m.head_dim, 192);     /* qk_nope 128 + qk_rope 64 */
    ck_assert_int_eq(m.d_ff, 18432);       /* the 3 dense layers' */
    ck_assert_int_eq(m.vocab, 129280);
    ck_assert_int_eq(m.max_seq, 163840);
    ck_assert_int_eq(m.tied_embeddings, 0);
    ck_assert_int_eq(m.dtype_bytes, 2);
    ck_assert_int_eq(m.n_experts, 256);
    ck_assert_int_eq(m.experts_per_tok, 8);
    ck_assert_int_eq(m.moe_d_ff, 2048);
    ck_assert_int_eq(m.n_dense_layers, 3);
    ck_assert_int_eq(m.shared_d_ff, 2048);  /* 1 shared expert x 2048 */
    ck_assert_int_eq(m.kv_lora_rank, 512);
    ck_assert_int_eq(m.q_lora_rank, 1536);
    ck_assert_int_eq(m.qk_nope_head_dim, 128);
    ck_assert_int_eq(m.qk_rope_head_dim, 64);
    ck_assert_int_eq(m.v_head_dim, 128);
    ck_assert_int_eq(m.sliding_window, 0);
    ck_assert_str_eq(preset_model_attention(&m), "MLA");
    ck_assert_int_eq(preset_model_moe_layers(&m), 58);
    /* the cache: one 512 latent and one 64 rope key a layer */
    ck_assert(preset_model_kv_bytes_per_token(&m) == 61.0 * (512 + 64) * 2);
    /* DeepSeek's README_WEIGHTS.md (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/
     * README_WEIGHTS.md): the main model's 61 layers are 671B parameters, 36.6B of them
     * active (0.9B of which the output head); the hub's 685B adds the 11.5B + 1.8B of the
     * multi-token-prediction module, which num_nextn_predict_layers names and the shape
     * leaves out. The shape gives 671.03B and 36.63B. */
    near(preset_model_params(&m), 671e9, 0.01, "DeepSeek-V3 total");
    near(active_params(&m), 36.6e9, 0.01, "DeepSeek-V3 active");
    ck_assert_msg(strstr(g_note, "routing topk_method 'noaux_tc' with n_group 8, topk_group 4") &&
                  strstr(g_note, "num_nextn_predict_layers 1 (the multi-token-prediction") &&
                  strstr(g_note, "rope_scaling 'yarn'"), "%s", g_note);
    /* num_key_value_heads does not describe the latent cache: it changes nothing */
    const kvp_t kv[] = {{"num_key_value_heads", "8"}, {NULL, NULL}};
    load_ok("kv/config.json", deepseek_v3, kv, &m);
    ck_assert_int_eq(m.n_kv_heads, 128);
    /* null shared experts: none; no dense layer */
    const kvp_t noshared[] = {{"n_shared_experts", "null"}, {"first_k_dense_replace", "0"},
                              {NULL, NULL}};
    load_ok("ns/config.json", deepseek_v3, noshared, &m);
    ck_assert_int_eq(m.shared_d_ff, 0);
    ck_assert_int_eq(m.n_dense_layers, 0);
}
END_TEST

START_TEST(test_deepseek_v2_lite) {
    preset_model_t m;
    load_ok("DeepSeek-V2-Lite/config.json", deepseek_v2_lite, no_edits, &m);
    ck_assert_int_eq(m.n_layers, 27);
    ck_assert_int_eq(m.d_model, 2048);
    ck_assert_int_eq(m.n_heads, 16);
    ck_assert_int_eq(m.n_kv_heads, 16);
    ck_assert_int_eq(m.head_dim, 192);
    ck_assert_int_eq(m.d_ff, 10944);
    ck_assert_int_eq(m.vocab, 102400);
    ck_assert_int_eq(m.n_experts, 64);
    ck_assert_int_eq(m.experts_per_tok, 6);
    ck_assert_int_eq(m.moe_d_ff, 1408);
    ck_assert_int_eq(m.n_dense_layers, 1);
    ck_assert_int_eq(m.shared_d_ff, 2 * 1408);
    ck_assert_int_eq(m.kv_lora_rank, 512);
    ck_assert_int_eq(m.q_lora_rank, 0);  /* null: a direct query projection */
    ck_assert_int_eq(m.v_head_dim, 128);
    /* 15.7B total in DeepSeek's model card; its "2.4B activated" is not asserted (the
     * shape's count less the embedding is 2.45B, and the card rounds to 0.1B) */
    near(preset_model_params(&m), 15.7e9, 0.01, "DeepSeek-V2-Lite");
    ck_assert_msg(strstr(g_note, "routing topk_method 'greedy' with n_group 1, topk_group 1"),
                  "%s", g_note);
    ck_assert_ptr_null(strstr(g_note, "num_nextn_predict_layers"));
}
END_TEST

START_TEST(test_gpt_oss) {
    preset_model_t m;
    load_ok("gpt-oss-120b/config.json", gpt_oss_120b, no_edits, &m);
    same_as_builtin(&m, "gpt-oss-120b");
    ck_assert_int_eq(m.n_layers, 36);
    ck_assert_int_eq(m.d_model, 2880);
    ck_assert_int_eq(m.n_heads, 64);
    ck_assert_int_eq(m.n_kv_heads, 8);
    ck_assert_int_eq(m.head_dim, 64);
    ck_assert_int_eq(m.n_experts, 128);
    ck_assert_int_eq(m.experts_per_tok, 4);
    ck_assert_int_eq(m.moe_d_ff, 2880);
    ck_assert_int_eq(m.d_ff, 2880);  /* no dense MLP: d_ff repeats the experts' */
    ck_assert_int_eq(m.n_dense_layers, 0);
    ck_assert_int_eq(m.shared_d_ff, 0);
    ck_assert_int_eq(m.vocab, 201088);
    ck_assert_int_eq(m.max_seq, 131072);
    ck_assert_int_eq(m.tied_embeddings, 0);
    ck_assert_int_eq(m.sliding_window, 128);
    ck_assert_int_eq(m.n_window_layers, 18);
    /* half the layers hold 128 tokens, half the whole context */
    ck_assert(preset_model_kv_bytes_at(&m, 100000) == (18.0 * 100000 + 18.0 * 128) * 2048);
    /* OpenAI's model card (https://openai.com/index/gpt-oss-model-card/): 116.83B total,
     * 5.13B active. The shape's 116.79B leaves out the biases and sinks it notes (40.1M);
     * with them it is 116.83B. */
    double noted = 36.0 * (8000 + 64 + 128.0 * (2 * 2880 + 2880) + 128);
    near(preset_model_params(&m), 116.83e9, 0.01, "gpt-oss-120b total");
    near(preset_model_params(&m) + noted, 116.83e9, 0.0005, "gpt-oss-120b with biases");
    near(active_params(&m), 5.13e9, 0.01, "gpt-oss-120b active");
    ck_assert_msg(strstr(g_note, "attention_bias (8000 parameters a layer") &&
                  strstr(g_note, "attention sinks (num_attention_heads = 64 parameters a "
                                 "layer) and the experts' and router's biases (1106048 a "
                                 "layer)") &&
                  strstr(g_note, "rope_scaling 'yarn'"), "%s", g_note);
    /* gpt-oss-20b: 20.91B total, 3.61B active (the same card) */
    load_ok("gpt-oss-20b/config.json", gpt_oss_120b, gpt_oss_20b_edits, &m);
    same_as_builtin(&m, "gpt-oss-20b");
    ck_assert_int_eq(m.n_layers, 24);
    ck_assert_int_eq(m.n_experts, 32);
    ck_assert_int_eq(m.n_window_layers, 12);
    near(preset_model_params(&m), 20.91e9, 0.01, "gpt-oss-20b total");
    near(active_params(&m), 3.61e9, 0.01, "gpt-oss-20b active");
    /* without layer_types, GptOssConfig's rule: the even layers slide */
    const kvp_t no_types[] = {{"layer_types", NULL}, {"num_hidden_layers", "5"}, {NULL, NULL}};
    load_ok("nt/config.json", gpt_oss_120b, no_types, &m);
    ck_assert_int_eq(m.n_window_layers, 3);
    /* top-k from either key; GptOssConfig's head_dim and KV heads when absent */
    const kvp_t own_key[] = {{"num_experts_per_tok", NULL}, {"head_dim", NULL},
                             {"num_key_value_heads", NULL}, {NULL, NULL}};
    load_ok("ok/config.json", gpt_oss_120b, own_key, &m);
    ck_assert_int_eq(m.experts_per_tok, 4);
    ck_assert_int_eq(m.head_dim, 64);
    ck_assert_int_eq(m.n_kv_heads, 8);
}
END_TEST

START_TEST(test_gemma2) {
    preset_model_t m;
    load_ok("gemma-2-9b/config.json", gemma2_9b, no_edits, &m);
    ck_assert_int_eq(m.n_layers, 42);
    ck_assert_int_eq(m.d_model, 3584);
    ck_assert_int_eq(m.n_heads, 16);
    ck_assert_int_eq(m.n_kv_heads, 8);
    ck_assert_int_eq(m.head_dim, 256);  /* not 3584 / 16 */
    ck_assert_int_eq(m.d_ff, 14336);
    ck_assert_int_eq(m.vocab, 256000);
    ck_assert_int_eq(m.max_seq, 8192);
    ck_assert_int_eq(m.tied_embeddings, 1);  /* Gemma2Config's default */
    ck_assert_int_eq(m.sliding_window, 4096);
    ck_assert_int_eq(m.n_window_layers, 21);  /* the even layers */
    /* Gemma 2's report: 917M embedding + 8,324M other parameters (9.24B) */
    near(preset_model_params(&m), 9.241e9, 0.01, "gemma-2-9b");
    ck_assert_msg(strstr(g_note, "logit soft-capping (attention 50.0, final 30.0;") &&
                  strstr(g_note, "query_pre_attn_scalar 256") &&
                  strstr(g_note, "pre- and post-feedforward norms (2 x hidden_size = 7168"),
                  "%s", g_note);
    const kvp_t three[] = {{"num_hidden_layers", "3"}, {"tie_word_embeddings", "false"},
                           {NULL, NULL}};
    load_ok("3/config.json", gemma2_9b, three, &m);
    ck_assert_int_eq(m.n_window_layers, 2);  /* layers 0 and 2 */
    ck_assert_int_eq(m.tied_embeddings, 0);
}
END_TEST

START_TEST(test_gemma3) {
    preset_model_t m;
    load_ok("gemma-3-27b-it/config.json", gemma3_27b, no_edits, &m);
    ck_assert_str_eq(m.name, "gemma-3-27b-it");
    same_as_builtin(&m, "gemma-3-27b");
    ck_assert_int_eq(m.n_layers, 62);
    ck_assert_int_eq(m.d_model, 5376);
    ck_assert_int_eq(m.n_heads, 32);
    ck_assert_int_eq(m.n_kv_heads, 16);
    ck_assert_int_eq(m.head_dim, 128);
    ck_assert_int_eq(m.d_ff, 21504);
    ck_assert_int_eq(m.vocab, 262208);     /* Gemma3TextConfig's default */
    ck_assert_int_eq(m.max_seq, 131072);   /* likewise */
    ck_assert_int_eq(m.tied_embeddings, 1);
    ck_assert_int_eq(m.dtype_bytes, 2);    /* the wrapper's torch_dtype */
    ck_assert_int_eq(m.sliding_window, 1024);
    ck_assert_int_eq(m.n_window_layers, 52);  /* 62 less the 10 layers 5, 11, ... 59 */
    /* the Gemma 3 report's table: 1,416M embedding + 25,600M other parameters for the
     * language model (its 417M vision encoder is not in the shape) */
    near(preset_model_params(&m), 27.016e9, 0.01, "gemma-3-27b text");
    ck_assert_msg(strstr(g_note, "the vision tower (vision_config)") &&
                  strstr(g_note, "rope_scaling 'linear'") &&
                  strstr(g_note, "query_pre_attn_scalar 168") &&
                  strstr(g_note, "q/k norms (2 x head_dim = 256"), "%s", g_note);
    ck_assert_ptr_null(strstr(g_note, "soft-capping"));
    /* a text_config shaped like gemma-3-4b-it's, which leaves the heads to the defaults
     * too (8 heads, 4 KV heads of 256); the report: 675M + 3,209M */
    const kvp_t small[] = {
        {"text_config", "{\"hidden_size\": 2560, \"intermediate_size\": 10240, "
                        "\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 34, "
                        "\"sliding_window\": 1024}"},
        {NULL, NULL}};
    load_ok("4b/config.json", gemma3_27b, small, &m);
    ck_assert_int_eq(m.n_heads, 8);
    ck_assert_int_eq(m.n_kv_heads, 4);
    ck_assert_int_eq(m.head_dim, 256);
    ck_assert_int_eq(m.n_window_layers, 29);
    near(preset_model_params(&m), 3.884e9, 0.01, "gemma-3-4b text");
    /* Gemma3ForCausalLM: the 1B, text only */
    load_ok("gemma-3-1b-it/config.json", gemma3_1b, no_edits, &m);
    ck_assert_int_eq(m.n_layers, 26);
    ck_assert_int_eq(m.d_model, 1152);
    ck_assert_int_eq(m.n_heads, 4);
    ck_assert_int_eq(m.n_kv_heads, 1);
    ck_assert_int_eq(m.head_dim, 256);
    ck_assert_int_eq(m.vocab, 262144);
    ck_assert_int_eq(m.max_seq, 32768);
    ck_assert_int_eq(m.sliding_window, 512);
    ck_assert_int_eq(m.n_window_layers, 22);
    ck_assert_ptr_null(strstr(g_note, "vision"));
    ck_assert_ptr_null(strstr(g_note, "soft-capping"));  /* both null */
    const kvp_t pattern2[] = {{"sliding_window_pattern", "2"}, {NULL, NULL}};
    load_ok("p2/config.json", gemma3_1b, pattern2, &m);
    ck_assert_int_eq(m.n_window_layers, 13);
    const kvp_t nopattern[] = {{"sliding_window_pattern", NULL}, {NULL, NULL}};
    load_ok("p6/config.json", gemma3_1b, nopattern, &m);
    ck_assert_int_eq(m.n_window_layers, 22);
    /* newer transformers save layer_types instead, which decides */
    const kvp_t types[] = {{"num_hidden_layers", "24"}, {"layer_types", "[" SF24 "]"},
                           {NULL, NULL}};
    load_ok("lt/config.json", gemma3_1b, types, &m);
    ck_assert_int_eq(m.n_window_layers, 12);
    const kvp_t global[] = {{"sliding_window_pattern", "1"}, {NULL, NULL}};
    load_ok("g/config.json", gemma3_1b, global, &m);
    ck_assert_int_eq(m.n_window_layers, 0);
    ck_assert_int_eq(m.sliding_window, 0);
}
END_TEST

/* ---- their refusals ------------------------------------------------------------------- */

START_TEST(test_refused_deepseek) {
    const kvp_t fp8[] = {{"quantization_config",
                          "{\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", "
                          "\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}"},
                         {NULL, NULL}};
    /* the published checkpoint's fp8 (W8A8, block scales): the weight format, noted */
    preset_model_t q;
    load_ok("q/config.json", deepseek_v3, fp8, &q);
    ck_assert_int_eq(q.weight_bits, 8);
    ck_assert_int_eq(q.act_bits, 8);
    ck_assert_str_eq(preset_model_format_name(&q), "fp8");
    ck_assert_msg(strstr(g_note, "weights in fp8 (its quantization_config"), "%s", g_note);
    ck_assert_int_eq(q.kv_lora_rank, 512);
    const kvp_t freq[] = {{"moe_layer_freq", "2"}, {NULL, NULL}};
    refused(deepseek_v3, freq, "key 'moe_layer_freq' is 2: only every 2th layer");
    const kvp_t all_dense[] = {{"first_k_dense_replace", "61"}, {NULL, NULL}};
    refused(deepseek_v3, all_dense, "key 'first_k_dense_replace' (61) leaves no layer of "
                                    "experts: num_hidden_layers is 61");
    const kvp_t no_dense[] = {{"first_k_dense_replace", NULL}, {NULL, NULL}};
    refused(deepseek_v3, no_dense, "key 'first_k_dense_replace' is missing");
    const kvp_t neg_dense[] = {{"first_k_dense_replace", "-1"}, {NULL, NULL}};
    refused(deepseek_v3, neg_dense, "key 'first_k_dense_replace' must be a non-negative "
                                    "integer (got -1)");
    const kvp_t no_q[] = {{"q_lora_rank", NULL}, {NULL, NULL}};
    refused(deepseek_v3, no_q, "key 'q_lora_rank' is missing (null for a direct query "
                               "projection)");
    const kvp_t no_shared[] = {{"n_shared_experts", NULL}, {NULL, NULL}};
    refused(deepseek_v3, no_shared, "key 'n_shared_experts' is missing (null for no shared "
                                    "expert)");
    const kvp_t kv0[] = {{"kv_lora_rank", "0"}, {NULL, NULL}};
    refused(deepseek_v3, kv0, "key 'kv_lora_rank' must be a positive integer (got 0)");
    const kvp_t no_rope[] = {{"qk_rope_head_dim", NULL}, {NULL, NULL}};
    refused(deepseek_v3, no_rope, "key 'qk_rope_head_dim' is missing");
    const kvp_t no_routed[] = {{"n_routed_experts", NULL}, {NULL, NULL}};
    refused(deepseek_v3, no_routed, "key 'n_routed_experts' is missing");
    const kvp_t top[] = {{"num_experts_per_tok", "300"}, {NULL, NULL}};
    refused(deepseek_v3, top, "a mixture of 256 experts needs experts_per_tok in 1..256 "
                              "(got 300)");
    refused(deepseek_v3, top, "(in config.json terms: experts_per_tok is num_experts_per_tok, "
                              "moe_d_ff is moe_intermediate_size)");
}
END_TEST

START_TEST(test_refused_gpt_oss) {
    const kvp_t mxfp4[] = {{"quantization_config",
                            "{\"modules_to_not_convert\": [\"model.layers.*.self_attn\", "
                            "\"model.embed_tokens\", \"lm_head\"], \"quant_method\": "
                            "\"mxfp4\"}"},
                           {NULL, NULL}};
    preset_model_t q;
    load_ok("q/config.json", gpt_oss_120b, mxfp4, &q);
    ck_assert_str_eq(preset_model_format_name(&q), "mxfp4");
    ck_assert_int_eq(q.weight_group, 32);
    const kvp_t disagree[] = {{"experts_per_token", "2"}, {NULL, NULL}};
    refused(gpt_oss_120b, disagree, "keys 'num_experts_per_tok' (4) and 'experts_per_token' "
                                    "(2) disagree");
    const kvp_t no_k[] = {{"experts_per_token", NULL}, {"num_experts_per_tok", NULL},
                          {NULL, NULL}};
    refused(gpt_oss_120b, no_k, "key 'num_experts_per_tok' is missing");
    const kvp_t short_list[] = {{"num_hidden_layers", "35"}, {NULL, NULL}};
    refused(gpt_oss_120b, short_list, "key 'layer_types' lists 36 layers but "
                                      "num_hidden_layers is 35");
    const kvp_t chunked[] = {{"num_hidden_layers", "2"},
                             {"layer_types", "[\"chunked_attention\", " FA "]"}, {NULL, NULL}};
    refused(gpt_oss_120b, chunked, "key 'layer_types': entry 0 is \"chunked_attention\": only "
                                   "\"sliding_attention\" and \"full_attention\" layers are "
                                   "modelled");
    const kvp_t number[] = {{"num_hidden_layers", "2"}, {"layer_types", "[" SA ", 1]"},
                            {NULL, NULL}};
    refused(gpt_oss_120b, number, "key 'layer_types': entry 1 is a JSON integer");
    const kvp_t text[] = {{"layer_types", "\"alternating\""}, {NULL, NULL}};
    refused(gpt_oss_120b, text, "key 'layer_types' must be a list of \"sliding_attention\" "
                                "and \"full_attention\"");
    const kvp_t no_window[] = {{"sliding_window", NULL}, {NULL, NULL}};
    refused(gpt_oss_120b, no_window, "key 'sliding_window' is missing: 18 of the 36 layers "
                                     "are windowed");
    const kvp_t few[] = {{"num_local_experts", "2"}, {NULL, NULL}};
    refused(gpt_oss_120b, few, "a mixture of 2 experts needs experts_per_tok in 1..2 (got 4)");
    refused(gpt_oss_120b, few, "(in config.json terms: experts_per_tok is num_experts_per_tok, "
                               "moe_d_ff is intermediate_size)");
}
END_TEST

START_TEST(test_refused_gemma) {
    const kvp_t none[] = {{"text_config", NULL}, {NULL, NULL}};
    refused(gemma3_27b, none, "key 'text_config' is missing: Gemma3ForConditionalGeneration "
                              "keeps its language model's shape there");
    const kvp_t list[] = {{"text_config", "[]"}, {NULL, NULL}};
    refused(gemma3_27b, list, "key 'text_config' must be an object");
    const kvp_t no_hidden[] = {{"text_config", "{\"num_hidden_layers\": 62, "
                                               "\"intermediate_size\": 21504}"},
                               {NULL, NULL}};
    refused(gemma3_27b, no_hidden, "key 'text_config.hidden_size' is missing");
    const kvp_t text[] = {{"text_config", "{\"num_hidden_layers\": 62, \"hidden_size\": "
                                          "\"x\", \"intermediate_size\": 21504}"},
                          {NULL, NULL}};
    refused(gemma3_27b, text, "key 'text_config.hidden_size' must be a positive integer (got "
                              "\"x\")");
    const kvp_t twice[] = {{"text_config", "{\"hidden_size\": 1, \"hidden_size\": 2}"},
                           {NULL, NULL}};
    refused(gemma3_27b, twice, "key 'text_config.hidden_size' appears twice");
    const kvp_t no_window[] = {{"text_config", "{\"num_hidden_layers\": 62, \"hidden_size\": "
                                               "5376, \"intermediate_size\": 21504, "
                                               "\"num_attention_heads\": 32}"},
                               {NULL, NULL}};
    refused(gemma3_27b, no_window, "key 'text_config.sliding_window' is missing: 52 of the 62 "
                                   "layers are windowed");
    const kvp_t pattern0[] = {{"text_config", "{\"num_hidden_layers\": 62, \"hidden_size\": "
                                              "5376, \"intermediate_size\": 21504, "
                                              "\"sliding_window\": 1024, "
                                              "\"sliding_window_pattern\": 0}"},
                              {NULL, NULL}};
    refused(gemma3_27b, pattern0, "key 'text_config.sliding_window_pattern' must be a "
                                  "positive integer (got 0)");
    const kvp_t kv5[] = {{"text_config", "{\"num_hidden_layers\": 62, \"hidden_size\": 5376, "
                                         "\"intermediate_size\": 21504, "
                                         "\"num_attention_heads\": 32, "
                                         "\"num_key_value_heads\": 5, \"sliding_window\": 1024}"},
                         {NULL, NULL}};
    refused(gemma3_27b, kv5, "n_heads (32) is not a multiple of n_kv_heads (5) (in config.json "
                             "terms: n_heads is text_config.num_attention_heads, n_kv_heads is "
                             "text_config.num_key_value_heads)");
    /* the wrapper's own keys are read at its top */
    const kvp_t quant[] = {{"quantization_config", "{\"quant_method\": \"gptq\"}"},
                           {NULL, NULL}};
    refused(gemma3_27b, quant, "quantization_config: quant_method 'gptq' is not one of the "
                               "weight formats modelled");
    const kvp_t gptq4[] = {{"quantization_config", "{\"quant_method\": \"gptq\", \"bits\": 4, "
                                                   "\"group_size\": 64}"},
                           {NULL, NULL}};
    preset_model_t q;
    load_ok("q/config.json", gemma3_27b, gptq4, &q);
    ck_assert_str_eq(preset_model_format_name(&q), "int4");
    ck_assert_msg(strstr(g_note, "group_size 64 is priced as 128"), "%s", g_note);
    const kvp_t i8[] = {{"torch_dtype", "\"int8\""}, {NULL, NULL}};
    refused(gemma3_27b, i8, "key 'torch_dtype': \"int8\" is not supported");
    const kvp_t tie[] = {{"tie_word_embeddings", "\"yes\""}, {NULL, NULL}};
    refused(gemma3_27b, tie, "key 'tie_word_embeddings' must be true or false");
    const kvp_t g2_window[] = {{"sliding_window", "null"}, {NULL, NULL}};
    refused(gemma2_9b, g2_window, "key 'sliding_window' must be a positive integer (got null)");
}
END_TEST

START_TEST(test_refused_qwen2_moe) {
    const kvp_t no_shared[] = {{"shared_expert_intermediate_size", NULL}, {NULL, NULL}};
    refused(qwen15_moe, no_shared, "key 'shared_expert_intermediate_size' is missing");
    const kvp_t step[] = {{"decoder_sparse_step", "2"}, {NULL, NULL}};
    refused(qwen15_moe, step, "key 'decoder_sparse_step' is 2");
    const kvp_t only[] = {{"mlp_only_layers", "[3]"}, {NULL, NULL}};
    refused(qwen15_moe, only, "key 'mlp_only_layers' makes layer 3 dense");
    const kvp_t top[] = {{"num_experts_per_tok", "61"}, {NULL, NULL}};
    refused(qwen15_moe, top, "a mixture of 60 experts needs experts_per_tok in 1..60 (got 61)");
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
    const kvp_t l4[] = {{"architectures", "[\"Llama4ForConditionalGeneration\"]"},
                        {NULL, NULL}};
    refused(llama2_7b, l4, "architectures: 'Llama4ForConditionalGeneration' is not supported "
                           "(supported: LlamaForCausalLM, MistralForCausalLM");
    refused(llama2_7b, l4, "GptOssForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, "
                           "Gemma3ForConditionalGeneration)");
    const kvp_t none[] = {{"architectures", NULL}, {NULL, NULL}};
    refused(llama2_7b, none, "key 'architectures' is missing");
    const kvp_t text[] = {{"architectures", "\"LlamaForCausalLM\""}, {NULL, NULL}};
    refused(llama2_7b, text, "key 'architectures' must be a list of class names (got "
                             "\"LlamaForCausalLM\")");
    const kvp_t empty[] = {{"architectures", "[]"}, {NULL, NULL}};
    refused(llama2_7b, empty, "key 'architectures' is an empty list");
    const kvp_t num[] = {{"architectures", "[7]"}, {NULL, NULL}};
    refused(llama2_7b, num, "key 'architectures' must be a list of class names (got [7])");
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
    preset_model_t q;
    load_ok("q/config.json", llama2_7b, quant, &q);
    ck_assert_str_eq(preset_model_format_name(&q), "fp8");
    /* the other methods of the checkpoints in use, and the ones refused */
    static const struct { const char *json, *format; } ok[] = {
        {"{\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 128}", "int4"},
        {"{\"quant_method\": \"modelopt\", \"quant_algo\": \"NVFP4\"}", "nvfp4"},
        {"{\"quant_method\": \"modelopt\", \"quant_algo\": \"FP8\"}", "fp8"},
        {"{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\"}", "fp8"},
        {"{\"quant_method\": \"compressed-tensors\", \"format\": \"nvfp4-pack-quantized\"}",
         "nvfp4"},
        {"{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\"}", "int4"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        const kvp_t e[] = {{"quantization_config", ok[i].json}, {NULL, NULL}};
        load_ok("q/config.json", llama2_7b, e, &q);
        ck_assert_msg(!strcmp(preset_model_format_name(&q), ok[i].format), "%s: %s", ok[i].json,
                      preset_model_format_name(&q));
    }
    const kvp_t bnb[] = {{"quantization_config", "{\"quant_method\": \"bitsandbytes\", "
                                                 "\"load_in_4bit\": true}"},
                         {NULL, NULL}};
    refused(llama2_7b, bnb, "quant_method 'bitsandbytes' is not one of the weight formats "
                            "modelled");
    refused(llama2_7b, bnb, "remove the key to simulate the shape in bf16, or give "
                            "--weight-format");
    const kvp_t awq8[] = {{"quantization_config", "{\"quant_method\": \"awq\", \"bits\": 8}"},
                          {NULL, NULL}};
    refused(llama2_7b, awq8, "quant_method 'awq', bits 8 is not one of");
    const kvp_t str[] = {{"quantization_config", "\"fp8\""}, {NULL, NULL}};
    refused(llama2_7b, str, "quantization_config must be an object");
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
    ck_assert_int_eq(m.sliding_window, 4096);
    ck_assert_str_eq(note, "");
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
    path = write_rel("l4/config.json", "{\"architectures\": [\"Llama4ForCausalLM\"]}");
    ck_assert_int_eq(preset_model_get(path, &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "'Llama4ForCausalLM' is not supported"), "%s", err);
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
    const kvp_t *bases[] = {mixtral, qwen3_30b_a3b, qwen25_05b, deepseek_v3, gemma3_27b};
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
    tcase_add_test(tc, test_qwen2_moe);
    tcase_add_test(tc, test_phi3);
    tcase_add_test(tc, test_deepseek_v3);
    tcase_add_test(tc, test_deepseek_v2_lite);
    tcase_add_test(tc, test_gpt_oss);
    tcase_add_test(tc, test_gemma2);
    tcase_add_test(tc, test_gemma3);
    tcase_add_test(tc, test_refused_deepseek);
    tcase_add_test(tc, test_refused_gpt_oss);
    tcase_add_test(tc, test_refused_gemma);
    tcase_add_test(tc, test_refused_qwen2_moe);
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
