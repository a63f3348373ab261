/* hfconfig: see hfconfig.h.
 *
 * The document is parsed once: json_each lists its top-level members (key, JSON type,
 * value) into an array that every later check reads, so a message can say which key held
 * what. The nested values read (the architectures list, Qwen's mlp_only_layers,
 * layer_types, a quantization_config's method) are parsed again from their own JSON text.
 * A multimodal wrapper (Gemma3ForConditionalGeneration) keeps its language model in
 * "text_config": that object's members become the ones read, the document's own staying
 * behind for the few keys a wrapper holds at its top (the dtype, tied embeddings,
 * quantization_config); a message names such a key "text_config.KEY". SQLite is the parser
 * because every build already links it (analysis/import_vllm.c does the same); a private
 * in-memory database per call keeps callers on different threads apart.
 *
 * Defaults are those of the Hugging Face config class when a key is absent or null, since
 * that is what transformers and vLLM would build from the same file: num_key_value_heads =
 * num_attention_heads, head_dim = hidden_size / num_attention_heads (Qwen3Config: 128),
 * tie_word_embeddings false, a missing dtype bf16; the classes whose published files leave
 * keys out (Gemma 3's text_config has no vocab_size; gpt-oss and Gemma give head_dim a
 * value of their own) carry their class's figures in the table below. Sizes with no
 * sensible default are required. */
#include "sim/hfconfig.h"
#include "sim/hfconfig_internal.h"

#include <ctype.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim/errf.h"
#include "sim/kvfile.h"

static const arch_t archs[] = {
    {"LlamaForCausalLM", K_DENSE, W_NONE, X_BIAS_KEYS, 0, 0, 0, 0, 0, 0},
    {"MistralForCausalLM", K_DENSE, W_ALL, 0, 0, 0, 0, 0, 0, 0},
    {"Qwen2ForCausalLM", K_DENSE, W_QWEN, X_QKV_BIAS, 0, 0, 0, 0, 0, 0},
    {"Qwen3ForCausalLM", K_DENSE, W_QWEN, X_BIAS_KEYS | X_QK_NORM, 0, 0, 128, 0, 0, 0},
    {"MixtralForCausalLM", K_MIXTRAL, W_ALL, 0, 0, 0, 0, 0, 0, 0},
    {"Qwen3MoeForCausalLM", K_QWEN_MOE, W_QWEN, X_BIAS_KEYS | X_QK_NORM, 0, 0, 0, 0, 0, 0},
    {"Qwen2MoeForCausalLM", K_QWEN2_MOE, W_QWEN, X_QKV_BIAS | X_SHARED_GATE, 0, 0, 0, 0, 0,
     0},
    {"Phi3ForCausalLM", K_DENSE, W_ALL, X_PHI3, 0, 0, 0, 0, 0, 0},
    {"DeepseekV2ForCausalLM", K_DEEPSEEK, W_NONE, X_DEEPSEEK, 0, 0, 0, 0, 0, 0},
    {"DeepseekV3ForCausalLM", K_DEEPSEEK, W_NONE, X_DEEPSEEK, 0, 0, 0, 0, 0, 0},
    /* GptOssConfig: 8 KV heads, head_dim 64 */
    {"GptOssForCausalLM", K_GPT_OSS, W_EVEN, X_BIAS_KEYS | X_GPT_OSS, 0, 8, 64, 0, 0, 0},
    /* Gemma2Config and Gemma3TextConfig: 8 heads, 4 KV heads of 256, tied embeddings;
     * Gemma 3's published text_configs omit the heads (4B), vocab_size and
     * max_position_embeddings, so these defaults are what builds them */
    {"Gemma2ForCausalLM", K_DENSE, W_EVEN, X_GEMMA, 8, 4, 256, 256000, 8192, 1},
    {"Gemma3ForCausalLM", K_DENSE, W_PATTERN, X_GEMMA | X_QK_NORM, 8, 4, 256, 262208, 131072,
     1},
    {"Gemma3ForConditionalGeneration", K_DENSE, W_PATTERN, X_GEMMA | X_QK_NORM | X_TEXT_CONFIG,
     8, 4, 256, 262208, 131072, 1},
};
#define N_ARCHS ((int)(sizeof archs / sizeof archs[0]))

static const char supported[] =
    "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
    "MixtralForCausalLM, Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, Phi3ForCausalLM, "
    "DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, GptOssForCausalLM, Gemma2ForCausalLM, "
    "Gemma3ForCausalLM, Gemma3ForConditionalGeneration";

const char *hfcfg_supported(void) { return supported; }

/* ---- the architecture ----------------------------------------------------------------- */

static int get_arch(hf_t *h) {
    char buf[48], name[128] = "";
    const member_t *m = hfd_given(h, "architectures");
    int rc = -1;
    if (!m && !hfd_present(h, "architectures"))
        return hfd_fail(h, "key 'architectures' is missing (supported: %s)", supported);
    if (!m || strcmp(m->type, "array") != 0)
        return hfd_fail(h, "key 'architectures' must be a list of class names (got %s)",
                       hfd_shown(m, buf, sizeof buf));
    sqlite3_stmt *st = hfd_prep(h, "SELECT json_type(?1, '$[0]'), json_extract(?1, '$[0]')",
                            m->text, strlen(m->text));
    if (!st) return -1;
    if (sqlite3_step(st) != SQLITE_ROW) {
        hfd_fail(h, "cannot read key 'architectures': %s", sqlite3_errmsg(h->db));
        goto done;
    }
    const char *type = (const char *)sqlite3_column_text(st, 0);
    if (!type) {
        hfd_fail(h, "key 'architectures' is an empty list (supported: %s)", supported);
        goto done;
    }
    if (strcmp(type, "text") != 0) {
        hfd_fail(h, "key 'architectures' must be a list of class names (got %s)",
                hfd_shown(m, buf, sizeof buf));
        goto done;
    }
    snprintf(name, sizeof name, "%s", (const char *)sqlite3_column_text(st, 1));
    for (int i = 0; i < N_ARCHS; i++)
        if (!strcmp(archs[i].arch, name)) h->arch = &archs[i];
    if (!h->arch) {
        hfd_fail(h, "architectures: '%s' is not supported (supported: %s)", name, supported);
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

/* A vision wrapper: text_config's members become the ones read; the document's stay in
 * h->top for wrapper_key's keys. */
static int enter_text_config(hf_t *h) {
    char buf[48];
    const member_t *t = hfd_given(h, "text_config");
    if (!t && !hfd_present(h, "text_config"))
        return hfd_fail(h, "key 'text_config' is missing: %s keeps its language model's shape "
                       "there", h->arch->arch);
    if (!t || strcmp(t->type, "object") != 0)
        return hfd_fail(h, "key 'text_config' must be an object of the language model's keys "
                       "(got %s)", hfd_shown(t, buf, sizeof buf));
    /* the members move to top before text_config's are read, so t stays valid */
    h->top = h->m;
    h->ntop = h->n;
    h->m = NULL;
    h->n = 0;
    h->pre = TEXT_PRE;
    return hfd_read_members(h, t->text, strlen(t->text), TEXT_PRE);
}

/* A JSON member of the quantization_config object as text ("" when absent or not a
 * scalar), by SQLite's json_extract path. */
static int quant_member(hf_t *h, const member_t *q, const char *path, char *out, size_t n) {
    out[0] = '\0';
    sqlite3_stmt *st = hfd_prep(h, "SELECT json_extract(?1, ?2)", q->text, strlen(q->text));
    if (!st) return -1;
    sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL &&
        sqlite3_column_type(st, 0) != SQLITE_BLOB)
        snprintf(out, n, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return 0;
}

/* A quantized checkpoint's quantization_config as one of the weight formats of presets.h,
 * into fmt ("" when the config has none):
 *   quant_method fp8 (DeepSeek-V3, Qwen3-FP8: e4m3, 128 x 128 block scales)     -> fp8
 *   quant_method mxfp4 (gpt-oss: the experts in MXFP4)                          -> mxfp4
 *   quant_method awq or gptq with bits 4 (group scales per group_size)          -> int4
 *   quant_method modelopt, quant_algo FP8 / NVFP4                               -> fp8 / nvfp4
 *   quant_method compressed-tensors, format float-quantized / nvfp4-pack-quantized /
 *     pack-quantized (int4)                                                     -> fp8 / nvfp4 / int4
 * Anything else is refused naming the method. The format covers every layer matrix: a
 * checkpoint that keeps some in bf16 (gpt-oss's attention, modules_to_not_convert) is
 * slightly understated (the run's note says so). */
static int quant_format(hf_t *h, char *fmt, size_t n, char *why, size_t whylen) {
    const member_t *q = hfd_given(h, "quantization_config");
    char method[48], bits[16], group[16], form[48], algo[48];
    fmt[0] = why[0] = '\0';
    if (!q) return 0;
    if (strcmp(q->type, "object") != 0)
        return hfd_fail(h, "%squantization_config must be an object (got a %s)", q->pre, q->type);
    if (quant_member(h, q, "$.quant_method", method, sizeof method) != 0 ||
        quant_member(h, q, "$.bits", bits, sizeof bits) != 0 ||
        quant_member(h, q, "$.group_size", group, sizeof group) != 0 ||
        quant_member(h, q, "$.format", form, sizeof form) != 0 ||
        quant_member(h, q, "$.quant_algo", algo, sizeof algo) != 0)
        return -1;
    const char *f = NULL;
    if (!strcmp(method, "fp8")) f = "fp8";
    else if (!strcmp(method, "mxfp4")) f = "mxfp4";
    else if ((!strcmp(method, "awq") || !strcmp(method, "gptq")) && !strcmp(bits, "4")) {
        f = "int4";
        if (group[0] && strcmp(group, "128") != 0)
            snprintf(why, whylen, "%s's group_size %s is priced as 128", method, group);
    } else if (!strcmp(method, "modelopt") && !strcasecmp(algo, "fp8")) f = "fp8";
    else if (!strcmp(method, "modelopt") && !strcasecmp(algo, "nvfp4")) f = "nvfp4";
    else if (!strcmp(method, "compressed-tensors") && !strcmp(form, "float-quantized")) f = "fp8";
    else if (!strcmp(method, "compressed-tensors") && !strcmp(form, "nvfp4-pack-quantized"))
        f = "nvfp4";
    else if (!strcmp(method, "compressed-tensors") && !strcmp(form, "pack-quantized")) f = "int4";
    if (!f)
        return hfd_fail(h, "%squantization_config: quant_method '%s'%s%s%s is not one of the "
                       "weight formats modelled (fp8, mxfp4, awq/gptq 4-bit, modelopt FP8 or "
                       "NVFP4, compressed-tensors float-quantized, pack-quantized or "
                       "nvfp4-pack-quantized); remove the key to simulate the shape in bf16, "
                       "or give --weight-format", q->pre, method[0] ? method : "(none)",
                       bits[0] ? ", bits " : "", bits, form[0] ? " (its format)" : "");
    snprintf(fmt, n, "%s", f);
    return 0;
}

/* Qwen-MoE: a layer is sparse unless mlp_only_layers names it or (index + 1) is not a
 * multiple of decoder_sparse_step; every layer must be sparse. */
static int check_all_sparse(hf_t *h, int32_t n_layers) {
    char buf[48];
    int32_t step;
    int rc = -1, r;
    if (hfd_int(h, "decoder_sparse_step", 1, &step, NULL) != 0) return -1;
    if (step != 1)
        return hfd_fail(h, "key 'decoder_sparse_step' is %d: only every %dth layer is a "
                       "mixture of experts, and dense layers between sparse ones are not "
                       "supported yet (a later issue adds them)", (int)step, (int)step);
    const member_t *m = hfd_given(h, "mlp_only_layers");
    if (!m) return 0;
    if (strcmp(m->type, "array") != 0)
        return hfd_fail(h, "key 'mlp_only_layers' must be a list of layer indices (got %s)",
                       hfd_shown(m, buf, sizeof buf));
    sqlite3_stmt *st = hfd_prep(h, "SELECT type, value FROM json_each(?1)", m->text,
                            strlen(m->text));
    if (!st) return -1;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(st, 0);
        if (strcmp(type, "integer") != 0 || sqlite3_column_type(st, 1) != SQLITE_INTEGER) {
            hfd_fail(h, "key 'mlp_only_layers' must be a list of layer indices (got %s)",
                    hfd_shown(m, buf, sizeof buf));
            goto done;
        }
        int64_t layer = sqlite3_column_int64(st, 1);
        /* an index past the last layer makes nothing dense (transformers ignores it) */
        if (layer >= 0 && layer < n_layers) {
            hfd_fail(h, "key 'mlp_only_layers' makes layer %lld dense: dense layers between "
                    "sparse ones are not supported yet (a later issue adds them)",
                    (long long)layer);
            goto done;
        }
    }
    if (r != SQLITE_DONE) {
        hfd_fail(h, "cannot read key 'mlp_only_layers': %s", sqlite3_errmsg(h->db));
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

/* gpt-oss writes top-k twice (num_experts_per_tok and its own experts_per_token): either
 * will do, but two that disagree are refused rather than one picked. */
static int get_top_k(hf_t *h, int32_t *k) {
    int32_t a = 0, b = 0;
    int seen_a, seen_b;
    if (h->arch->kind != K_GPT_OSS)
        return hfd_int(h, "num_experts_per_tok", HFD_REQUIRED, k, NULL);
    if (hfd_int(h, "num_experts_per_tok", HFD_OPTIONAL, &a, &seen_a) != 0 ||
        hfd_int(h, "experts_per_token", HFD_OPTIONAL, &b, &seen_b) != 0)
        return -1;
    if (seen_a && seen_b && a != b)
        return hfd_fail(h, "keys 'num_experts_per_tok' (%d) and 'experts_per_token' (%d) "
                       "disagree", (int)a, (int)b);
    if (!seen_a && !seen_b) return hfd_fail(h, "key 'num_experts_per_tok' is missing");
    *k = seen_a ? a : b;
    return 0;
}

/* DeepSeek-V2/V3: multi-head latent attention, first_k_dense_replace dense layers, and in
 * every later layer n_routed_experts plus n_shared_experts always-active ones, each of
 * moe_intermediate_size (DeepseekV2MoE builds the shared ones as one MLP of their sum). */
static int get_deepseek(hf_t *h, preset_model_t *m) {
    int32_t shared = 0, freq = 1;
    if (hfd_int(h, "kv_lora_rank", HFD_REQUIRED, &m->kv_lora_rank, NULL) != 0 ||
        hfd_size_or_null(h, "q_lora_rank", "a direct query projection", &m->q_lora_rank) != 0 ||
        hfd_int(h, "qk_nope_head_dim", HFD_REQUIRED, &m->qk_nope_head_dim, NULL) != 0 ||
        hfd_int(h, "qk_rope_head_dim", HFD_REQUIRED, &m->qk_rope_head_dim, NULL) != 0 ||
        hfd_int(h, "v_head_dim", HFD_REQUIRED, &m->v_head_dim, NULL) != 0 ||
        hfd_int(h, "n_routed_experts", HFD_REQUIRED, &m->n_experts, NULL) != 0 ||
        hfd_int(h, "moe_intermediate_size", HFD_REQUIRED, &m->moe_d_ff, NULL) != 0 ||
        hfd_size_or_null(h, "n_shared_experts", "no shared expert", &shared) != 0 ||
        hfd_count(h, "first_k_dense_replace", -1, &m->n_dense_layers) != 0 ||
        hfd_int(h, "moe_layer_freq", 1, &freq, NULL) != 0)
        return -1;
    /* the cache and the attention are the latent's: num_key_value_heads and head_dim in
     * the file (DeepseekV3Config writes both) do not describe them */
    m->head_dim = m->qk_nope_head_dim + m->qk_rope_head_dim;
    m->n_kv_heads = m->n_heads;
    if (freq != 1)
        return hfd_fail(h, "key 'moe_layer_freq' is %d: only every %dth layer after the dense "
                       "ones is a mixture of experts, and dense layers between sparse ones are "
                       "not supported yet", (int)freq, (int)freq);
    if (m->n_dense_layers >= m->n_layers)
        return hfd_fail(h, "key 'first_k_dense_replace' (%d) leaves no layer of experts: "
                       "num_hidden_layers is %d", (int)m->n_dense_layers, (int)m->n_layers);
    if ((int64_t)shared * m->moe_d_ff > INT32_MAX)
        return hfd_fail(h, "keys 'n_shared_experts' (%d) x 'moe_intermediate_size' (%d) is "
                       "too large", (int)shared, (int)m->moe_d_ff);
    m->shared_d_ff = shared * m->moe_d_ff;
    return 0;
}

static int get_experts(hf_t *h, preset_model_t *m) {
    switch (h->arch->kind) {
    case K_DENSE:
        return 0;
    case K_DEEPSEEK:
        if (get_deepseek(h, m) != 0) return -1;
        break;
    case K_MIXTRAL:
    case K_GPT_OSS:
        /* their intermediate_size is each expert's; gpt-oss has no dense MLP, so d_ff
         * (unused with experts in every layer) keeps the same figure */
        m->moe_d_ff = m->d_ff;
        if (hfd_int(h, "num_local_experts", HFD_REQUIRED, &m->n_experts, NULL) != 0) return -1;
        break;
    case K_QWEN_MOE:
    case K_QWEN2_MOE: {
        /* newer transformers map num_experts onto num_local_experts when saving */
        const char *key = !hfd_given(h, "num_experts") && hfd_given(h, "num_local_experts")
                              ? "num_local_experts" : "num_experts";
        if (hfd_int(h, key, HFD_REQUIRED, &m->n_experts, NULL) != 0) return -1;
        if (hfd_int(h, "moe_intermediate_size", HFD_REQUIRED, &m->moe_d_ff, NULL) != 0) return -1;
        /* transformers builds Qwen2-MoE's shared expert in every sparse layer */
        if (h->arch->kind == K_QWEN2_MOE &&
            hfd_int(h, "shared_expert_intermediate_size", HFD_REQUIRED, &m->shared_d_ff, NULL) != 0)
            return -1;
        if (check_all_sparse(h, m->n_layers) != 0) return -1;
        break;
    }
    }
    return get_top_k(h, &m->experts_per_tok);
}

/* ---- sliding windows ------------------------------------------------------------------ */

/* layer_types (transformers 4.53 on: one entry a layer) as the count of windowed layers. */
static int count_layer_types(hf_t *h, const member_t *lt, int32_t n_layers, int32_t *n_win) {
    char buf[48];
    int rc = -1, r;
    int64_t n = 0, win = 0;
    if (strcmp(lt->type, "array") != 0)
        return hfd_fail(h, "key '%slayer_types' must be a list of \"sliding_attention\" and "
                       "\"full_attention\" (got %s)", lt->pre, hfd_shown(lt, buf, sizeof buf));
    sqlite3_stmt *st = hfd_prep(h, "SELECT type, value FROM json_each(?1)", lt->text,
                            strlen(lt->text));
    if (!st) return -1;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(st, 0);
        const char *v = (const char *)sqlite3_column_text(st, 1);
        int sliding = v && !strcmp(type, "text") && !strcmp(v, "sliding_attention");
        if (!sliding && !(v && !strcmp(type, "text") && !strcmp(v, "full_attention"))) {
            hfd_fail(h, "key '%slayer_types': entry %lld is %s%.40s%s: only "
                    "\"sliding_attention\" and \"full_attention\" layers are modelled",
                    lt->pre, (long long)n, strcmp(type, "text") ? "a JSON " : "\"",
                    strcmp(type, "text") ? type : (v ? v : ""),
                    strcmp(type, "text") ? "" : "\"");
            goto done;
        }
        n++;
        win += sliding;
    }
    if (r != SQLITE_DONE) {
        hfd_fail(h, "cannot read key '%slayer_types': %s", lt->pre, sqlite3_errmsg(h->db));
        goto done;
    }
    if (n != n_layers) {
        hfd_fail(h, "key '%slayer_types' lists %lld layers but num_hidden_layers is %d",
                lt->pre, (long long)n, (int)n_layers);
        goto done;
    }
    *n_win = (int32_t)win;
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

/* sliding_window and n_window_layers by the class's rule (window_t). A window as long as
 * the context never binds, so it is left out (the shape is then exact without it). */
static int get_window(hf_t *h, preset_model_t *m) {
    const member_t *lt = hfd_given(h, "layer_types");
    int32_t win = 0, n_win = 0;
    int used = 1;
    switch (h->arch->window) {
    case W_NONE:
        return 0;
    case W_ALL:
        n_win = m->n_layers;
        break;
    case W_QWEN: {
        /* Qwen2Config (and Qwen3's, Qwen2-MoE's): the window exists only with
         * use_sliding_window, and then, in transformers' layer_types rule, layer i slides
         * when i >= max_window_layers (default 28): the first max_window_layers layers
         * attend to everything. That is the rule implemented here; the class's older doc
         * string said the opposite ("the bottom layers use SWA"), the code never did. */
        int32_t full = 28;
        used = 0;
        if (hfd_bool(h, "use_sliding_window", &used) != 0) return -1;
        if (!used) return 0;
        if (hfd_count(h, "max_window_layers", 28, &full) != 0) return -1;
        n_win = full < m->n_layers ? m->n_layers - full : 0;
        break;
    }
    case W_EVEN:
        /* gpt-oss's and Gemma 2's layer i slides when i is even */
        n_win = (m->n_layers + 1) / 2;
        break;
    case W_PATTERN: {
        /* Gemma3TextConfig: layer i is global when (i + 1) % sliding_window_pattern == 0 */
        int32_t pattern = 6;
        if (hfd_int(h, "sliding_window_pattern", 6, &pattern, NULL) != 0) return -1;
        n_win = m->n_layers - m->n_layers / pattern;
        break;
    }
    }
    if (lt && count_layer_types(h, lt, m->n_layers, &n_win) != 0) return -1;
    if (h->arch->window == W_ALL) {
        /* these classes read a null sliding_window as "no window" */
        if (hfd_int(h, "sliding_window", HFD_OPTIONAL, &win, NULL) != 0) return -1;
        if (win == 0) return 0;
    } else if (n_win > 0) {
        if (!hfd_given(h, "sliding_window") && !hfd_present(h, "sliding_window"))
            return hfd_fail(h, "key '%ssliding_window' is missing: %d of the %d layers are "
                           "windowed%s", h->pre, (int)n_win, (int)m->n_layers,
                           h->arch->window == W_QWEN ? " (use_sliding_window is true)" : "");
        if (hfd_int(h, "sliding_window", HFD_REQUIRED, &win, NULL) != 0) return -1;
    }
    if (n_win == 0 || win >= m->max_seq) return 0;
    m->sliding_window = win;
    m->n_window_layers = n_win;
    return 0;
}

/* ---- what is read but not modelled ---------------------------------------------------- */

static void add_note(hf_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add_note(hf_t *h, const char *fmt, ...) {
    size_t used = strlen(h->note);
    if (used + 8 >= sizeof h->note) return;
    int w = snprintf(h->note + used, sizeof h->note - used, "%s",
                     used ? "; " : "read but not modelled: ");
    if (w < 0) return;
    used += (size_t)w;
    if (used >= sizeof h->note) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->note + used, sizeof h->note - used, fmt, ap);
    va_end(ap);
}

/* A RoPE scaling object (rope_scaling; rope_parameters in newer transformers) as a note,
 * with its type; none for "default", the plain RoPE. */
static void note_rope(hf_t *h, const char *key) {
    const member_t *m = hfd_given(h, key);
    char type[32] = "";
    if (!m || strcmp(m->type, "object") != 0) return;
    sqlite3_stmt *st = hfd_prep(h, "SELECT coalesce(json_extract(?1, '$.rope_type'), "
                            "json_extract(?1, '$.type'))", m->text, strlen(m->text));
    if (!st) {
        h->err[0] = '\0';  /* a note is not worth failing the load for */
        return;
    }
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(type, sizeof type, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (!strcmp(type, "default")) return;
    add_note(h, "%s%s%s%s (no cost depends on the position encoding)", key,
             type[0] ? " '" : "", type, type[0] ? "'" : "");
}

/* A number's JSON, or NULL when the key is absent, null or not a number. */
static const char *number(const hf_t *h, const char *key) {
    const member_t *m = hfd_given(h, key);
    return m && (!strcmp(m->type, "integer") || !strcmp(m->type, "real")) ? m->json : NULL;
}

static void note_gemma(hf_t *h, const preset_model_t *m) {
    const char *attn = number(h, "attn_logit_softcapping");
    const char *final = number(h, "final_logit_softcapping");
    const char *scalar = number(h, "query_pre_attn_scalar");
    if (attn || final)
        add_note(h, "logit soft-capping (%s%s%s%s%s; no cost depends on it)",
                 attn ? "attention " : "", attn ? attn : "", attn && final ? ", " : "",
                 final ? "final " : "", final ? final : "");
    if (scalar) add_note(h, "query_pre_attn_scalar %s (the attention's scale)", scalar);
    add_note(h, "Gemma's pre- and post-feedforward norms (2 x hidden_size = %.0f parameters a "
             "layer, not counted in the weights)", 2.0 * m->d_model);
}

static void note_deepseek(hf_t *h) {
    const member_t *method = hfd_given(h, "topk_method");
    const char *groups = number(h, "n_group"), *topk = number(h, "topk_group");
    const char *mtp = number(h, "num_nextn_predict_layers");
    if (method && !strcmp(method->type, "text"))
        add_note(h, "routing topk_method '%.24s'%s%s%s%s (the cost model does not restrict "
                 "which experts a token may reach)", method->text,
                 groups ? " with n_group " : "", groups ? groups : "",
                 topk ? ", topk_group " : "", topk ? topk : "");
    if (mtp && strcmp(mtp, "0") != 0)
        add_note(h, "num_nextn_predict_layers %s (the multi-token-prediction layer is neither "
                 "counted in the weights nor run)", mtp);
}

/* The flags read are checked as any key is: a wrong type is refused, naming it. */
static int note_extras(hf_t *h, const preset_model_t *m) {
    int attn_bias = 0, mlp_bias = 0, x = h->arch->extras;
    double qkv = ((double)m->n_heads + 2.0 * m->n_kv_heads) * m->head_dim;
    if ((x & X_BIAS_KEYS) && (hfd_bool(h, "attention_bias", &attn_bias) != 0 ||
                              hfd_bool(h, "mlp_bias", &mlp_bias) != 0))
        return -1;
    if (x & X_TEXT_CONFIG)
        add_note(h, "the vision tower (vision_config) and its image tokens: the shape is "
                 "text_config's language model");
    note_rope(h, "rope_scaling");
    note_rope(h, "rope_parameters");
    if (x & X_QKV_BIAS)
        add_note(h, "q/k/v biases (%.0f parameters a layer, not counted in the weights)", qkv);
    if (attn_bias)
        add_note(h, "attention_bias (%.0f parameters a layer, not counted in the weights)",
                 qkv + m->d_model);
    if (mlp_bias)
        add_note(h, "mlp_bias (%.0f parameters a layer, not counted in the weights)",
                 2.0 * m->d_ff + m->d_model);
    if (x & X_QK_NORM)
        add_note(h, "q/k norms (2 x head_dim = %d parameters a layer, not counted in the "
                 "weights)", 2 * (int)m->head_dim);
    if (x & X_SHARED_GATE)
        add_note(h, "the shared expert's gate (hidden_size = %d parameters a layer, not counted "
                 "in the weights)", (int)m->d_model);
    if (x & X_GEMMA) note_gemma(h, m);
    if (x & X_DEEPSEEK) note_deepseek(h);
    if (x & X_GPT_OSS)
        add_note(h, "attention sinks (num_attention_heads = %d parameters a layer) and the "
                 "experts' and router's biases (%.0f a layer), not counted in the weights",
                 (int)m->n_heads,
                 (double)m->n_experts * (2.0 * m->moe_d_ff + m->d_model) + m->n_experts);
    const char *rotary = number(h, "partial_rotary_factor");
    if ((x & X_PHI3) && rotary && strcmp(rotary, "1") && strcmp(rotary, "1.0"))
        add_note(h, "partial_rotary_factor %s (no cost depends on the position encoding)",
                 rotary);
    return 0;
}

/* ---- the preset's name ---------------------------------------------------------------- */

/* The last component of s[0..n) (trailing slashes ignored): its start and length. */
static size_t last_part(const char *s, size_t n, const char **part) {
    while (n > 1 && s[n - 1] == '/') n--;
    size_t e = n;
    while (n > 0 && s[n - 1] != '/') n--;
    *part = s + n;
    return e - n;
}

static void set_name(char *name, const char *s, size_t n) {
    if (n >= KV_NAME_CAP) n = KV_NAME_CAP - 1;
    memcpy(name, s, n);
    name[n] = '\0';
}

/* For a config.json, its directory's name; in a Hugging Face cache
 * (models--ORG--NAME/snapshots/HASH/config.json) the repository's NAME, not the hash. */
static void name_from_dir(const char *path, size_t dirlen, char *name) {
    char dir[HF_PATH_CAP], real[HF_PATH_CAP];
    const char *d = dir, *p1, *p2, *p3;
    if (dirlen == 0) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", (int)dirlen, path);
    /* a relative "./config.json" names its directory only once resolved */
    if (realpath(dir, real)) d = real;
    size_t dn = strlen(d);
    size_t n1 = last_part(d, dn, &p1);
    size_t n2 = last_part(d, (size_t)(p1 - d), &p2);
    size_t n3 = last_part(d, (size_t)(p2 - d), &p3);
    if (n2 == 9 && !strncmp(p2, "snapshots", 9) && n3 > 8 && !strncmp(p3, "models--", 8)) {
        const char *r = p3 + n3;
        while (r > p3 + 8 && !(r[-1] == '-' && r[-2] == '-')) r--;
        set_name(name, r, (size_t)(p3 + n3 - r));
    } else if (n1 && !(n1 == 1 && (*p1 == '/' || *p1 == '.')) &&
               !(n1 == 2 && !strncmp(p1, "..", 2))) {
        set_name(name, p1, n1);
    } else {
        set_name(name, "config", 6);
    }
}

static void name_from_path(const char *path, char *name) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t n = strlen(base);
    if (!strcmp(base, "config.json")) {
        name_from_dir(path, slash ? (size_t)(slash - path) + (slash == path) : 0, name);
        return;
    }
    if (n > 5 && !strcasecmp(base + n - 5, ".json")) n -= 5;
    if (n > 7 && !strncasecmp(base + n - 7, ".config", 7)) n -= 7;
    set_name(name, base, n);
}


/* ---- checks on the whole shape -------------------------------------------------------- */

static int word_in(const char *s, const char *w) {
    size_t n = strlen(w);
    for (const char *p = s; (p = strstr(p, w)) != NULL; p++) {
        int before = p > s && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
        int after = isalnum((unsigned char)p[n]) || p[n] == '_';
        if (!before && !after) return 1;
    }
    return 0;
}

/* preset_model_validate's message speaks of the struct's fields: say which config.json
 * keys they were read from. */
static int validate(hf_t *h, const preset_model_t *m) {
    char verr[512], keys[512] = "";
    kind_t k = h->arch->kind;
    const char *experts = k == K_DEEPSEEK ? "n_routed_experts"
                          : k == K_MIXTRAL || k == K_GPT_OSS ? "num_local_experts"
                                                              : "num_experts";
    const char *map[][2] = {
        {"n_layers", "num_hidden_layers"}, {"d_model", "hidden_size"},
        {"n_heads", "num_attention_heads"},
        {"n_kv_heads", k == K_DEEPSEEK ? "num_attention_heads" : "num_key_value_heads"},
        {"head_dim", k == K_DEEPSEEK ? "qk_nope_head_dim + qk_rope_head_dim" : "head_dim"},
        {"d_ff", "intermediate_size"}, {"vocab", "vocab_size"},
        {"max_seq", "max_position_embeddings"}, {"n_experts", experts},
        {"experts_per_tok", "num_experts_per_tok"},
        {"moe_d_ff", k == K_MIXTRAL || k == K_GPT_OSS ? "intermediate_size"
                                                      : "moe_intermediate_size"},
        {"n_dense_layers", "first_k_dense_replace"},
        {"shared_d_ff", k == K_DEEPSEEK ? "n_shared_experts x moe_intermediate_size"
                                        : "shared_expert_intermediate_size"},
        {"kv_lora_rank", "kv_lora_rank"}, {"q_lora_rank", "q_lora_rank"},
        {"qk_nope_head_dim", "qk_nope_head_dim"}, {"qk_rope_head_dim", "qk_rope_head_dim"},
        {"v_head_dim", "v_head_dim"}, {"sliding_window", "sliding_window"},
        {"n_window_layers", "the windowed layers"},
    };
    if (preset_model_validate(m, verr, sizeof verr) == 0) return 0;
    const char *msg = verr;
    size_t nl = strlen(m->name);
    if (!strncmp(verr, m->name, nl) && !strncmp(verr + nl, ": ", 2)) msg = verr + nl + 2;
    size_t used = 0;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (!word_in(msg, map[i][0])) continue;
        int w = snprintf(keys + used, sizeof keys - used, "%s%s is %s%s", used ? ", " : "",
                         map[i][0], h->pre, map[i][1]);
        if (w < 0 || (size_t)w >= sizeof keys - used) break;
        used += (size_t)w;
    }
    return hfd_fail(h, "%s%s%s%s", msg, used ? " (in config.json terms: " : "", keys,
                   used ? ")" : "");
}

/* ---- entry points --------------------------------------------------------------------- */

/* The keys every class has (Hugging Face's names), with the class's defaults. */
static int get_common(hf_t *h, preset_model_t *m) {
    const arch_t *a = h->arch;
    int seen_hd = 0, tied = a->tied;
    if (hfd_int(h, "num_hidden_layers", HFD_REQUIRED, &m->n_layers, NULL) != 0 ||
        hfd_int(h, "hidden_size", HFD_REQUIRED, &m->d_model, NULL) != 0 ||
        hfd_int(h, "num_attention_heads", a->heads, &m->n_heads, NULL) != 0 ||
        hfd_int(h, "num_key_value_heads", a->kv_heads ? a->kv_heads : m->n_heads,
                &m->n_kv_heads, NULL) != 0 ||
        hfd_int(h, "intermediate_size", HFD_REQUIRED, &m->d_ff, NULL) != 0 ||
        hfd_int(h, "vocab_size", a->vocab, &m->vocab, NULL) != 0 ||
        hfd_int(h, "max_position_embeddings", a->max_seq, &m->max_seq, NULL) != 0 ||
        hfd_bool(h, "tie_word_embeddings", &tied) != 0 || hfd_dtype(h, &m->dtype_bytes) != 0)
        return -1;
    m->tied_embeddings = tied;
    if (a->kind == K_DEEPSEEK) return 0;  /* get_deepseek sets head_dim from the latent's */
    if (a->head_dim > 0) return hfd_int(h, "head_dim", a->head_dim, &m->head_dim, NULL);
    if (hfd_int(h, "head_dim", HFD_OPTIONAL, &m->head_dim, &seen_hd) != 0) return -1;
    if (seen_hd) return 0;
    if (m->d_model % m->n_heads != 0)
        return hfd_fail(h, "key '%shead_dim' is missing and hidden_size (%d) is not a multiple "
                       "of num_attention_heads (%d)", h->pre, (int)m->d_model, (int)m->n_heads);
    m->head_dim = m->d_model / m->n_heads;
    return 0;
}

int hfcfg_parse(const char *path, const char *text, size_t len, preset_model_t *out,
                char *note, size_t notelen, char *err, size_t errlen) {
    hf_t h;
    preset_model_t m;
    char scratch[8];
    int rc = -1;
    memset(&h, 0, sizeof h);
    memset(&m, 0, sizeof m);
    h.path = path ? path : "(config)";
    h.pre = "";
    h.err = err && errlen ? err : scratch;
    h.errlen = err && errlen ? errlen : sizeof scratch;
    h.err[0] = '\0';
    if (note && notelen) note[0] = '\0';
    if (len > HF_MAX_BYTES) {
        hfd_fail(&h, "larger than %zu MiB: not a config.json", HF_MAX_BYTES >> 20);
        goto done;
    }
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) {  /* a UTF-8 byte-order mark */
        text += 3;
        len -= 3;
    }
    if (sqlite3_open_v2(":memory:", &h.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY,
                        NULL) != SQLITE_OK) {
        hfd_fail(&h, "cannot open SQLite to read the JSON");
        goto done;
    }
    if (hfd_read_members(&h, text, len, "") != 0 || get_arch(&h) != 0) goto done;
    if ((h.arch->extras & X_TEXT_CONFIG) && enter_text_config(&h) != 0) goto done;
    char fmt[16], qwhy[96];
    if (quant_format(&h, fmt, sizeof fmt, qwhy, sizeof qwhy) != 0) goto done;
    name_from_path(h.path, m.name);
    if (get_common(&h, &m) != 0 || get_experts(&h, &m) != 0 || get_window(&h, &m) != 0 ||
        validate(&h, &m) != 0 || note_extras(&h, &m) != 0)
        goto done;
    if (fmt[0]) {   /* the checkpoint's weight format (presets.h), said in the note */
        char e[256];
        if (preset_model_set_format(&m, fmt, e, sizeof e) != 0) {
            hfd_fail(&h, "quantization_config: %s", e);
            goto done;
        }
        size_t k = strlen(h.note);
        if (k < sizeof h.note)
            snprintf(h.note + k, sizeof h.note - k, "%sweights in %s (its quantization_config; "
                     "every layer matrix counted in it%s%s)", k ? "; " : "", fmt,
                     qwhy[0] ? ", " : "", qwhy);
    }
    if (note && notelen) snprintf(note, notelen, "%s", h.note);
    *out = m;
    rc = 0;
done:
    hfd_free_members(h.m, h.n);
    hfd_free_members(h.top, h.ntop);
    sqlite3_close(h.db);
    return rc;
}

int hfcfg_load(const char *path, preset_model_t *out, char *note, size_t notelen, char *err,
               size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    int rc = -1;
    if (note && notelen) note[0] = '\0';
    if (hfd_read_whole(path, &text, &len, err, errlen) != 0) goto done;
    rc = hfcfg_parse(path, text, len, out, note, notelen, err, errlen);
done:
    free(text);
    return rc;
}

int hfcfg_is_config(const char *name) {
    unsigned char buf[512];
    size_t n = name ? strlen(name) : 0, i = 0;
    if (n > 5 && !strcasecmp(name + n - 5, ".json")) return 1;
    FILE *f = n ? fopen(name, "rb") : NULL;
    if (!f) return 0;
    size_t got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (got >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3)) i = 3;
    while (i < got && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n'))
        i++;
    return i < got && buf[i] == '{';
}
