/* presets: see presets.h.
 *
 * The built-in tables are in presets_table.c. Parameter counts are derived, never stored,
 * so a typo in a shape shows up as a wrong count in tests/test_presets.c.
 *
 * User preset files: one `key = value` per line, `#` starts a comment (whole line or after a
 * value), blank lines ignored, keys are the struct field names. Integers are plain decimal;
 * the hardware figures are doubles and may use scientific notation (2.039e12).
 *
 *   model: name, n_layers*, d_model*, n_heads*, n_kv_heads (= n_heads), head_dim
 *          (= d_model / n_heads), d_ff*, vocab*, max_seq (= 2048), tied_embeddings (= 0),
 *          dtype_bytes (= 2), n_experts (= 0: dense), experts_per_tok (needed with
 *          experts), moe_d_ff (= d_ff), and the optional keys of presets.h at 0 (dense
 *          first layers, a shared expert, latent attention, a window, a precision)
 *   hw:    name, mem_bw*, flops*, mem_bytes*, link_bw (= 0), link_latency (= 0),
 *          mem_cuda (= mem_bytes), flops_fp8 (= 0: none), flops_fp4 (= 0), net_bw (= 0:
 *          unknown), net_latency (= 0), measured (= 0: the efficiencies are guesses),
 *          node_gpus (= 0: any tp fits one link domain)
 *
 * (* required.) The optional defaults follow Hugging Face's LlamaConfig where it has one
 * (max_position_embeddings 2048, tie_word_embeddings false); a missing name becomes the file
 * name without its directory and extension. */
#include "sim/presets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim/errf.h"
#include "sim/hfconfig.h"
#include "traces/json.h"

/* ---- derived figures ------------------------------------------------------------------ */

int preset_model_is_moe(const preset_model_t *m) { return m->n_experts > 0; }

int32_t preset_model_moe_layers(const preset_model_t *m) {
    return preset_model_is_moe(m) ? m->n_layers - m->n_dense_layers : 0;
}

const char *preset_model_attention(const preset_model_t *m) {
    if (m->kv_lora_rank > 0) return "MLA";
    if (m->n_kv_heads == m->n_heads) return "MHA";
    return m->n_kv_heads == 1 ? "MQA" : "GQA";
}

/* One layer's attention projections: Q, K, V, O; with MLA, the query's low-rank pair (or
 * its direct projection), the joint latent and rope key (kv_a), the latent's expansion into
 * per-head keys and values (kv_b) and the output. */
static double attn_params(const preset_model_t *m) {
    double d = m->d_model, h = m->n_heads;
    if (m->kv_lora_rank > 0) {
        double qk = m->qk_nope_head_dim + (double)m->qk_rope_head_dim;
        double q = m->q_lora_rank > 0 ? d * m->q_lora_rank + (double)m->q_lora_rank * h * qk
                                      : d * h * qk;
        double kv_a = d * (m->kv_lora_rank + (double)m->qk_rope_head_dim);
        double kv_b = (double)m->kv_lora_rank * h * (m->qk_nope_head_dim + (double)m->v_head_dim);
        return q + kv_a + kv_b + h * m->v_head_dim * d;
    }
    double q = h * m->head_dim, kv = (double)m->n_kv_heads * m->head_dim;
    return d * q + 2.0 * d * kv + q * d;
}

double preset_model_expert_params(const preset_model_t *m) {
    return preset_model_is_moe(m) ? 3.0 * m->d_model * (double)m->moe_d_ff : 0.0;
}

double preset_model_all_expert_params(const preset_model_t *m) {
    return (double)preset_model_moe_layers(m) * m->n_experts * preset_model_expert_params(m);
}

double preset_model_layer_matrix_params(const preset_model_t *m) {
    double d = m->d_model;
    int32_t moe = preset_model_moe_layers(m);
    /* SwiGLU gate, up, down in the dense layers; an MoE layer's tokens all pass its router
     * and its shared expert, the routed experts being counted apart */
    double dense = (double)(m->n_layers - moe) * 3.0 * d * m->d_ff;
    double sparse = (double)moe * (d * m->n_experts + 3.0 * d * m->shared_d_ff);
    return m->n_layers * attn_params(m) + dense + sparse;
}

double preset_model_lm_params(const preset_model_t *m) { return (double)m->vocab * m->d_model; }

double preset_model_params(const preset_model_t *m) {
    double d = m->d_model;
    /* RMSNorm before attention and MLP (and MLA's on the query and latent ranks) */
    double norms = 2.0 * d + (m->kv_lora_rank > 0 ? (double)m->q_lora_rank + m->kv_lora_rank : 0);
    double embed = preset_model_lm_params(m);
    double head = m->tied_embeddings ? 0.0 : embed;
    return embed + preset_model_layer_matrix_params(m) + preset_model_all_expert_params(m) +
           m->n_layers * norms + d /* final norm */ + head;
}

/* The routed experts' parameters a token does not pass through. */
static double unpicked_expert_params(const preset_model_t *m) {
    return preset_model_all_expert_params(m) -
           (double)preset_model_moe_layers(m) * m->experts_per_tok * preset_model_expert_params(m);
}

double preset_model_active_params(const preset_model_t *m) {
    return preset_model_params(m) - unpicked_expert_params(m);
}

double preset_model_active_weight_bytes(const preset_model_t *m) {
    return preset_model_weight_bytes(m) - unpicked_expert_params(m) * preset_model_matrix_bytes(m);
}

double preset_model_matrix_bytes(const preset_model_t *m) {
    if (m->weight_bits <= 0) return m->dtype_bytes;
    double b = m->weight_bits / 8.0;
    return m->weight_group > 0 ? b + m->scale_bits / 8.0 / m->weight_group : b;
}

int32_t preset_model_kv_elem_bytes(const preset_model_t *m) {
    return m->kv_dtype_bytes > 0 ? m->kv_dtype_bytes : m->dtype_bytes;
}

double preset_model_weight_bytes(const preset_model_t *m) {
    /* the layers' matrices at their format; the embedding, LM head and norms at dtype */
    double matrices = preset_model_layer_matrix_params(m) + preset_model_all_expert_params(m);
    return matrices * preset_model_matrix_bytes(m) +
           (preset_model_params(m) - matrices) * m->dtype_bytes;
}

typedef struct {
    const char *name;
    int32_t bits, group, scale_bits, act_bits;
} format_t;

static const format_t formats[] = {
    {"fp8", 8, 0, 0, 8},        /* W8A8 (DeepSeek-V3's block-scaled fp8, vLLM's fp8) */
    {"int4", 4, 128, 16, 16},   /* AWQ/GPTQ: fp16 scales per 128 weights, bf16 products */
    {"mxfp4", 4, 32, 8, 16},    /* OCP MX: e8m0 scales per 32 (gpt-oss's experts) */
    {"nvfp4", 4, 16, 8, 4},     /* NVIDIA: fp8 scales per 16, FP4 products on Blackwell */
    {"q8_0", 8, 32, 16, 16},    /* ggml: fp16 scale per 32 (a GGUF's Q8_0), dequantised */
    {"q4_0", 4, 32, 16, 16},    /* ggml: fp16 scale per 32 (Q4_0) */
};

int preset_model_set_format(preset_model_t *m, const char *format, char *err, size_t errlen) {
    if (!strcasecmp(format, "bf16") || !strcasecmp(format, "fp16")) {
        m->weight_bits = m->weight_group = m->scale_bits = m->act_bits = 0;
        return 0;
    }
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcasecmp(format, formats[i].name)) {
            m->weight_bits = formats[i].bits;
            m->weight_group = formats[i].group;
            m->scale_bits = formats[i].scale_bits;
            m->act_bits = formats[i].act_bits;
            return 0;
        }
    return errf(err, errlen, "unknown weight format '%s' (bf16, fp8, int4, mxfp4, nvfp4, q8_0 or q4_0)",
                format);
}

int preset_model_set_kv_dtype(preset_model_t *m, const char *dtype, char *err, size_t errlen) {
    if (!strcasecmp(dtype, "bf16") || !strcasecmp(dtype, "fp16")) m->kv_dtype_bytes = 2;
    else if (!strcasecmp(dtype, "fp8")) m->kv_dtype_bytes = 1;
    else return errf(err, errlen, "unknown KV dtype '%s' (bf16 or fp8)", dtype);
    return 0;
}

const char *preset_model_format_name(const preset_model_t *m) {
    if (m->weight_bits <= 0) return "bf16";
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (m->weight_bits == formats[i].bits && m->weight_group == formats[i].group &&
            m->scale_bits == formats[i].scale_bits && m->act_bits == formats[i].act_bits)
            return formats[i].name;
    return "custom";
}

int preset_hw_multinode_allreduce(const preset_hw_t *hw, int32_t tp, double *latency_s,
                                  double *s_per_byte, char *err, size_t errlen) {
    if (hw->node_gpus <= 0 || tp <= hw->node_gpus) return 0;
    if (!(hw->net_bw > 0))
        return errf(err, errlen, "tp %d spans %d link domains of %d %s GPUs, and the network "
                    "between them is unknown (net_bw)", (int)tp,
                    (int)((tp + hw->node_gpus - 1) / hw->node_gpus), (int)hw->node_gpus, hw->name);
    *latency_s = hw->link_latency + hw->net_latency;
    *s_per_byte = 2.0 * (tp - 1.0) / tp / hw->net_bw;
    return 1;
}

int preset_model_check_tp(const preset_model_t *m, int32_t tp, char *err, size_t errlen) {
    if (tp < 1) return errf(err, errlen, "tp must be >= 1 (got %d)", (int)tp);
    if (m->n_heads % tp != 0)
        return errf(err, errlen, "tp %d does not divide %s's %d attention heads", (int)tp,
                    m->name, (int)m->n_heads);
    if (m->n_kv_heads % tp != 0 && tp % m->n_kv_heads != 0)
        return errf(err, errlen, "tp %d and %s's %d KV heads: one must divide the other",
                    (int)tp, m->name, (int)m->n_kv_heads);
    return 0;
}

double preset_hw_matrix_flops(const preset_hw_t *hw, const preset_model_t *m) {
    if (m->act_bits == 8 && hw->flops_fp8 > 0) return hw->flops_fp8;
    if (m->act_bits == 4 && hw->flops_fp4 > 0) return hw->flops_fp4;
    return hw->flops;
}

double preset_model_kv_elems_per_layer(const preset_model_t *m) {
    if (m->kv_lora_rank > 0) return m->kv_lora_rank + (double)m->qk_rope_head_dim;
    return 2.0 * m->n_kv_heads * (double)m->head_dim;
}

double preset_model_kv_bytes_per_token(const preset_model_t *m) {
    return m->n_layers * preset_model_kv_elems_per_layer(m) * preset_model_kv_elem_bytes(m);
}

double preset_model_kv_bytes_device(const preset_model_t *m, int32_t tp) {
    const double t = tp > 1 ? tp : 1;
    if (m->kv_lora_rank > 0) return preset_model_kv_bytes_per_token(m);
    double kv = m->n_kv_heads >= t ? m->n_kv_heads / t : 1.0;
    return 2.0 * m->n_layers * kv * m->head_dim * preset_model_kv_elem_bytes(m);
}

double preset_model_attn_pair_flops(const preset_model_t *m, int32_t tp) {
    const double heads = m->n_heads / (tp > 1 ? (double)tp : 1.0);
    if (m->kv_lora_rank > 0)
        return 2.0 * heads * (2.0 * m->kv_lora_rank + m->qk_rope_head_dim);
    return 4.0 * heads * m->head_dim;
}

double preset_model_mla_expand_params(const preset_model_t *m, int32_t tp) {
    if (m->kv_lora_rank <= 0) return 0;
    const double heads = m->n_heads / (tp > 1 ? (double)tp : 1.0);
    return (double)m->kv_lora_rank * heads * (m->qk_nope_head_dim + (double)m->v_head_dim);
}

double preset_model_mla_prefill_pair_flops(const preset_model_t *m, int32_t tp) {
    if (m->kv_lora_rank <= 0) return 0;
    const double heads = m->n_heads / (tp > 1 ? (double)tp : 1.0);
    return 2.0 * heads *
           ((double)m->qk_nope_head_dim + m->qk_rope_head_dim + (double)m->v_head_dim);
}

void preset_model_attn_device(const preset_model_t *m, int32_t tp, double *w_in, double *w_out,
                              double *act_in, double *act_out) {
    const double t = tp > 1 ? tp : 1, d = m->d_model, heads = m->n_heads / t;
    if (m->kv_lora_rank > 0) {
        const double qk = m->qk_nope_head_dim + (double)m->qk_rope_head_dim;
        const double lat = m->kv_lora_rank + (double)m->qk_rope_head_dim;
        const double q_a = m->q_lora_rank > 0 ? d * m->q_lora_rank : 0;
        const double q_b = (m->q_lora_rank > 0 ? (double)m->q_lora_rank : d) * heads * qk;
        const double kv_b =
            (double)m->kv_lora_rank * heads * (m->qk_nope_head_dim + (double)m->v_head_dim);
        *w_in = q_a + d * lat + q_b + kv_b;
        *w_out = heads * m->v_head_dim * d;
        *act_in = m->q_lora_rank + lat + heads * (qk + qk + m->v_head_dim);
        *act_out = heads * m->v_head_dim;
        return;
    }
    const double kv = m->n_kv_heads >= t ? m->n_kv_heads / t : 1.0, hd = m->head_dim;
    *w_in = d * (heads + 2.0 * kv) * hd;
    *w_out = heads * hd * d;
    *act_in = (heads + 2.0 * kv) * hd;
    *act_out = heads * hd;
}

double preset_model_kv_bytes_at(const preset_model_t *m, double ctx) {
    double per = preset_model_kv_elems_per_layer(m) * preset_model_kv_elem_bytes(m);
    int32_t win = m->sliding_window > 0 ? m->n_window_layers : 0;
    double held = ctx < m->sliding_window ? ctx : m->sliding_window;
    return (m->n_layers - win) * per * ctx + win * per * (win ? held : 0);
}

/* ---- validation ----------------------------------------------------------------------- */

int preset_model_validate(const preset_model_t *m, char *err, size_t errlen) {
    const char *n = m->name[0] ? m->name : "(unnamed)";
    struct { const char *key; int32_t v; } pos[] = {
        {"n_layers", m->n_layers}, {"d_model", m->d_model}, {"n_heads", m->n_heads},
        {"n_kv_heads", m->n_kv_heads}, {"head_dim", m->head_dim}, {"d_ff", m->d_ff},
        {"vocab", m->vocab}, {"max_seq", m->max_seq},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return errf(err, errlen, "%s: %s must be positive (got %d)", n, pos[i].key,
                        (int)pos[i].v);
    if (m->n_kv_heads > m->n_heads || m->n_heads % m->n_kv_heads != 0)
        return errf(err, errlen, "%s: n_heads (%d) is not a multiple of n_kv_heads (%d)", n,
                    (int)m->n_heads, (int)m->n_kv_heads);
    if (m->tied_embeddings != 0 && m->tied_embeddings != 1)
        return errf(err, errlen, "%s: tied_embeddings must be 0 or 1 (got %d)", n,
                    (int)m->tied_embeddings);
    if (m->dtype_bytes != 1 && m->dtype_bytes != 2 && m->dtype_bytes != 4)
        return errf(err, errlen, "%s: dtype_bytes must be 1, 2 or 4 (got %d)", n,
                    (int)m->dtype_bytes);
    if (m->n_experts < 0 || m->experts_per_tok < 0 || m->moe_d_ff < 0)
        return errf(err, errlen, "%s: n_experts, experts_per_tok and moe_d_ff must be >= 0 "
                    "(got %d, %d, %d)", n, (int)m->n_experts, (int)m->experts_per_tok,
                    (int)m->moe_d_ff);
    if (m->n_experts > 0 && (m->experts_per_tok < 1 || m->experts_per_tok > m->n_experts ||
                             m->moe_d_ff < 1))
        return errf(err, errlen, "%s: a mixture of %d experts needs experts_per_tok in 1..%d "
                    "(got %d) and a positive moe_d_ff (got %d)", n, (int)m->n_experts,
                    (int)m->n_experts, (int)m->experts_per_tok, (int)m->moe_d_ff);
    if (m->n_experts == 0 && (m->experts_per_tok > 0 || m->moe_d_ff > 0))
        return errf(err, errlen, "%s: experts_per_tok and moe_d_ff need n_experts > 0", n);
    struct { const char *key; int32_t v; } nonneg[] = {
        {"n_dense_layers", m->n_dense_layers}, {"shared_d_ff", m->shared_d_ff},
        {"kv_lora_rank", m->kv_lora_rank}, {"q_lora_rank", m->q_lora_rank},
        {"qk_nope_head_dim", m->qk_nope_head_dim}, {"qk_rope_head_dim", m->qk_rope_head_dim},
        {"v_head_dim", m->v_head_dim}, {"sliding_window", m->sliding_window},
        {"n_window_layers", m->n_window_layers},
    };
    for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
        if (nonneg[i].v < 0)
            return errf(err, errlen, "%s: %s must be >= 0 (got %d)", n, nonneg[i].key,
                        (int)nonneg[i].v);
    if (m->n_experts == 0 && (m->n_dense_layers > 0 || m->shared_d_ff > 0))
        return errf(err, errlen, "%s: n_dense_layers and shared_d_ff need n_experts > 0", n);
    if (m->n_dense_layers >= m->n_layers && m->n_experts > 0)
        return errf(err, errlen, "%s: n_dense_layers (%d) leaves no layer of experts of %d",
                    n, (int)m->n_dense_layers, (int)m->n_layers);
    if (m->kv_lora_rank > 0) {
        if (m->qk_rope_head_dim < 1 || m->qk_nope_head_dim < 1 || m->v_head_dim < 1)
            return errf(err, errlen, "%s: multi-head latent attention (kv_lora_rank %d) needs "
                        "positive qk_rope_head_dim, qk_nope_head_dim and v_head_dim (got %d, %d, "
                        "%d)", n, (int)m->kv_lora_rank, (int)m->qk_rope_head_dim,
                        (int)m->qk_nope_head_dim, (int)m->v_head_dim);
        if (m->head_dim != m->qk_nope_head_dim + m->qk_rope_head_dim || m->n_kv_heads != m->n_heads)
            return errf(err, errlen, "%s: with latent attention head_dim is qk_nope_head_dim + "
                        "qk_rope_head_dim (%d) and n_kv_heads is n_heads (%d); got %d and %d", n,
                        (int)(m->qk_nope_head_dim + m->qk_rope_head_dim), (int)m->n_heads,
                        (int)m->head_dim, (int)m->n_kv_heads);
    } else if (m->q_lora_rank || m->qk_nope_head_dim || m->qk_rope_head_dim || m->v_head_dim) {
        return errf(err, errlen, "%s: q_lora_rank, qk_nope_head_dim, qk_rope_head_dim and "
                    "v_head_dim describe latent attention: they need kv_lora_rank > 0", n);
    }
    if (!(m->weight_bits == 0 || m->weight_bits == 4 || m->weight_bits == 8 ||
          m->weight_bits == 16 || m->weight_bits == 32) ||
        !(m->act_bits == 0 || m->act_bits == 4 || m->act_bits == 8 || m->act_bits == 16) ||
        m->weight_group < 0 || m->scale_bits < 0 || (m->weight_group > 0) != (m->scale_bits > 0) ||
        !(m->kv_dtype_bytes == 0 || m->kv_dtype_bytes == 1 || m->kv_dtype_bytes == 2 ||
          m->kv_dtype_bytes == 4))
        return errf(err, errlen, "%s: a precision must be weight_bits 4, 8, 16 or 32, act_bits 4, "
                    "8 or 16, weight_group and scale_bits both > 0 or both 0, kv_dtype_bytes 1, "
                    "2 or 4 (got %d, %d, %d, %d, %d)", n, (int)m->weight_bits, (int)m->act_bits,
                    (int)m->weight_group, (int)m->scale_bits, (int)m->kv_dtype_bytes);
    if ((m->sliding_window > 0) != (m->n_window_layers > 0) || m->n_window_layers > m->n_layers)
        return errf(err, errlen, "%s: a sliding window needs both sliding_window > 0 and "
                    "n_window_layers in 1..n_layers (%d); got %d and %d", n, (int)m->n_layers,
                    (int)m->sliding_window, (int)m->n_window_layers);
    return 0;
}

int preset_hw_validate(const preset_hw_t *hw, char *err, size_t errlen) {
    const char *n = hw->name[0] ? hw->name : "(unnamed)";
    struct { const char *key; double v; } pos[] = {
        {"mem_bw", hw->mem_bw}, {"flops", hw->flops}, {"mem_bytes", hw->mem_bytes},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (!isfinite(pos[i].v) || pos[i].v <= 0)
            return errf(err, errlen, "%s: %s must be a positive number (got %g)", n,
                        pos[i].key, pos[i].v);
    if (!isfinite(hw->link_bw) || hw->link_bw < 0)
        return errf(err, errlen, "%s: link_bw must be >= 0 (got %g)", n, hw->link_bw);
    if (!isfinite(hw->link_latency) || hw->link_latency < 0)
        return errf(err, errlen, "%s: link_latency must be >= 0 seconds (got %g)", n,
                    hw->link_latency);
    if (hw->node_gpus < 0)
        return errf(err, errlen, "%s: node_gpus must be >= 0 (got %d)", n, (int)hw->node_gpus);
    if (!isfinite(hw->mem_cuda) || hw->mem_cuda < 0 || hw->mem_cuda > hw->mem_bytes * 1.1)
        return errf(err, errlen, "%s: mem_cuda must be >= 0 bytes and no more than about "
                    "mem_bytes (got %g)", n, hw->mem_cuda);
    /* the optional figures: 0 means none or unknown */
    struct { const char *key; double v; } opt[] = {
        {"flops_fp8", hw->flops_fp8}, {"flops_fp4", hw->flops_fp4}, {"net_bw", hw->net_bw},
        {"net_latency", hw->net_latency},
    };
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
        if (!isfinite(opt[i].v) || opt[i].v < 0)
            return errf(err, errlen, "%s: %s must be >= 0 (0: none or unknown; got %g)", n,
                        opt[i].key, opt[i].v);
    if (hw->measured != 0 && hw->measured != 1)
        return errf(err, errlen, "%s: measured must be 0 or 1 (got %d)", n, (int)hw->measured);
    return 0;
}

/* ---- preset files --------------------------------------------------------------------- */

const kv_spec_t preset_model_keys[] = {
    {"name", KV_NAME, offsetof(preset_model_t, name), 0},
    {"n_layers", KV_INT, offsetof(preset_model_t, n_layers), 1},
    {"d_model", KV_INT, offsetof(preset_model_t, d_model), 1},
    {"n_heads", KV_INT, offsetof(preset_model_t, n_heads), 1},
    {"n_kv_heads", KV_INT, offsetof(preset_model_t, n_kv_heads), 0},
    {"head_dim", KV_INT, offsetof(preset_model_t, head_dim), 0},
    {"d_ff", KV_INT, offsetof(preset_model_t, d_ff), 1},
    {"vocab", KV_INT, offsetof(preset_model_t, vocab), 1},
    {"max_seq", KV_INT, offsetof(preset_model_t, max_seq), 0},
    {"tied_embeddings", KV_INT, offsetof(preset_model_t, tied_embeddings), 0},
    {"dtype_bytes", KV_INT, offsetof(preset_model_t, dtype_bytes), 0},
    {"n_experts", KV_INT, offsetof(preset_model_t, n_experts), 0},
    {"experts_per_tok", KV_INT, offsetof(preset_model_t, experts_per_tok), 0},
    {"moe_d_ff", KV_INT, offsetof(preset_model_t, moe_d_ff), 0},
    /* from here on, a key whose value is 0 is left out of a run's record (preset_model_json):
     * a dense model's record stays as it was before the key existed */
    {"n_dense_layers", KV_INT, offsetof(preset_model_t, n_dense_layers), 0},
    {"shared_d_ff", KV_INT, offsetof(preset_model_t, shared_d_ff), 0},
    {"kv_lora_rank", KV_INT, offsetof(preset_model_t, kv_lora_rank), 0},
    {"q_lora_rank", KV_INT, offsetof(preset_model_t, q_lora_rank), 0},
    {"qk_nope_head_dim", KV_INT, offsetof(preset_model_t, qk_nope_head_dim), 0},
    {"qk_rope_head_dim", KV_INT, offsetof(preset_model_t, qk_rope_head_dim), 0},
    {"v_head_dim", KV_INT, offsetof(preset_model_t, v_head_dim), 0},
    {"sliding_window", KV_INT, offsetof(preset_model_t, sliding_window), 0},
    {"n_window_layers", KV_INT, offsetof(preset_model_t, n_window_layers), 0},
    {"weight_bits", KV_INT, offsetof(preset_model_t, weight_bits), 0},
    {"weight_group", KV_INT, offsetof(preset_model_t, weight_group), 0},
    {"scale_bits", KV_INT, offsetof(preset_model_t, scale_bits), 0},
    {"act_bits", KV_INT, offsetof(preset_model_t, act_bits), 0},
    {"kv_dtype_bytes", KV_INT, offsetof(preset_model_t, kv_dtype_bytes), 0},
};
const int preset_model_n_keys = (int)(sizeof preset_model_keys / sizeof preset_model_keys[0]);

const kv_spec_t preset_hw_keys[] = {
    {"name", KV_NAME, offsetof(preset_hw_t, name), 0},
    {"mem_bw", KV_DOUBLE, offsetof(preset_hw_t, mem_bw), 1},
    {"flops", KV_DOUBLE, offsetof(preset_hw_t, flops), 1},
    {"mem_bytes", KV_DOUBLE, offsetof(preset_hw_t, mem_bytes), 1},
    {"link_bw", KV_DOUBLE, offsetof(preset_hw_t, link_bw), 0},
    {"link_latency", KV_DOUBLE, offsetof(preset_hw_t, link_latency), 0},
    {"mem_cuda", KV_DOUBLE, offsetof(preset_hw_t, mem_cuda), 0},
    {"flops_fp8", KV_DOUBLE, offsetof(preset_hw_t, flops_fp8), 0},
    {"flops_fp4", KV_DOUBLE, offsetof(preset_hw_t, flops_fp4), 0},
    {"net_bw", KV_DOUBLE, offsetof(preset_hw_t, net_bw), 0},
    {"net_latency", KV_DOUBLE, offsetof(preset_hw_t, net_latency), 0},
    {"measured", KV_INT, offsetof(preset_hw_t, measured), 0},
    {"node_gpus", KV_INT, offsetof(preset_hw_t, node_gpus), 0},
};
const int preset_hw_n_keys = (int)(sizeof preset_hw_keys / sizeof preset_hw_keys[0]);

#define MAX_KEYS 32

/* The file name without directory and extension, as the default preset name. */
static void name_from_path(const char *path, char *name) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t n = (dot && dot != base) ? (size_t)(dot - base) : strlen(base);
    if (n >= KV_NAME_CAP) n = KV_NAME_CAP - 1;
    memcpy(name, base, n);
    name[n] = '\0';
}

/* A word that names no built-in and no existing file gets the list of built-in names (a
 * typo such as "llama-3.2-3b" is likelier than a missing file); a name with a '/' is read as
 * a file so that its own error ("cannot open") comes back. */
static int looks_like_path(const char *name) {
    FILE *f;
    if (strchr(name, '/')) return 1;
    if ((f = fopen(name, "r")) != NULL) {
        fclose(f);
        return 1;
    }
    return 0;
}

static void list_names(char *out, size_t cap, int is_model) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0;; i++) {
        const char *n = is_model ? (preset_model_at(i) ? preset_model_at(i)->name : NULL)
                                 : (preset_hw_at(i) ? preset_hw_at(i)->name : NULL);
        if (!n) break;
        int w = snprintf(out + used, cap - used, "%s%s", i ? ", " : "", n);
        if (w < 0 || (size_t)w >= cap - used) break;
        used += (size_t)w;
    }
}

int preset_model_get(const char *name, preset_model_t *out, char *err, size_t errlen) {
    return preset_model_get_noted(name, out, NULL, 0, err, errlen);
}

int preset_model_get_noted(const char *name, preset_model_t *out, char *note, size_t notelen,
                           char *err, size_t errlen) {
    int rc = -1;
    int seen[MAX_KEYS] = {0};
    char names[512];
    preset_model_t m;
    memset(&m, 0, sizeof m);
    if (note && notelen) note[0] = '\0';
    if (!name || !*name) {
        errf(err, errlen, "no model name given");
        goto done;
    }
    const preset_model_t *b = preset_model_find(name);
    if (b) {
        *out = *b;
        rc = 0;
        goto done;
    }
    /* a GGUF's shape is the engine's to read (engine/model.h: model_shape_resolve, which
     * every --model goes through); a name that reaches here unresolved is refused plainly */
    FILE *gf = fopen(name, "rb");
    char magic[4] = {0};
    size_t got = gf ? fread(magic, 1, 4, gf) : 0;
    if (gf) fclose(gf);
    if (got == 4 && !memcmp(magic, "GGUF", 4)) {
        errf(err, errlen, "%s is a GGUF model: give it as a command's --model (its shape is "
             "read from the file's header there), not in a cluster file or a policy param", name);
        goto done;
    }
    /* before the preset-file test: a missing "x.json" is a missing config, not a typo */
    if (hfcfg_is_config(name)) {
        rc = hfcfg_load(name, out, note, notelen, err, errlen);
        goto done;
    }
    if (!looks_like_path(name)) {
        list_names(names, sizeof names, 1);
        errf(err, errlen, "unknown model '%s'; built-in models: %s (or give a preset file path)",
             name, names);
        goto done;
    }
    kv_table_t t = {preset_model_keys, preset_model_n_keys, &m, seen};
    if (kvfile_read(name, &t, 1, NULL, NULL, err, errlen) != 0) goto done;
    if (!kvfile_seen(&t, "name")) name_from_path(name, m.name);
    if (preset_model_complete(&m, &t, name, err, errlen) != 0) goto done;
    *out = m;
    rc = 0;
done:
    return rc;
}

int preset_model_complete(preset_model_t *m, const kv_table_t *t, const char *what, char *err,
                          size_t errlen) {
    if (!kvfile_seen(t, "n_kv_heads")) m->n_kv_heads = m->n_heads;
    if (!kvfile_seen(t, "max_seq")) m->max_seq = 2048;
    if (!kvfile_seen(t, "dtype_bytes")) m->dtype_bytes = 2;
    if (m->n_experts > 0 && !kvfile_seen(t, "moe_d_ff")) m->moe_d_ff = m->d_ff;
    if (!kvfile_seen(t, "head_dim")) {
        if (m->n_heads <= 0 || m->d_model % m->n_heads != 0)
            return errf(err, errlen, "%s: head_dim not given and d_model (%d) is not a "
                        "multiple of n_heads (%d)", what, (int)m->d_model, (int)m->n_heads);
        m->head_dim = m->d_model / m->n_heads;
    }
    char verr[256];
    if (preset_model_validate(m, verr, sizeof verr) != 0)
        return errf(err, errlen, "%s: %s", what, verr);
    return 0;
}

int preset_hw_get(const char *name, preset_hw_t *out, char *err, size_t errlen) {
    int rc = -1;
    int seen[MAX_KEYS] = {0};
    char names[512];
    preset_hw_t hw;
    memset(&hw, 0, sizeof hw);
    if (!name || !*name) {
        errf(err, errlen, "no hardware name given");
        goto done;
    }
    const preset_hw_t *b = preset_hw_find(name);
    if (b) {
        *out = *b;
        rc = 0;
        goto done;
    }
    if (!looks_like_path(name)) {
        list_names(names, sizeof names, 0);
        errf(err, errlen, "unknown hardware '%s'; built-in hardware: %s (or give a preset file "
             "path)", name, names);
        goto done;
    }
    kv_table_t t = {preset_hw_keys, preset_hw_n_keys, &hw, seen};
    if (kvfile_read(name, &t, 1, NULL, NULL, err, errlen) != 0) goto done;
    if (!kvfile_seen(&t, "name")) name_from_path(name, hw.name);
    char verr[256];
    if (preset_hw_validate(&hw, verr, sizeof verr) != 0) {
        errf(err, errlen, "%s: %s", name, verr);
        goto done;
    }
    *out = hw;
    rc = 0;
done:
    return rc;
}

int preset_model_key_may_be_absent(int i) {
    for (int k = 0; k < preset_model_n_keys && k <= i; k++)
        if (!strcmp(preset_model_keys[k].key, "n_experts")) return 1;
    return 0;
}

void preset_model_json(FILE *f, const preset_model_t *m) {
    fputs("{\"name\":", f);
    json_write_str(f, m->name);
    for (int i = 0; i < preset_model_n_keys; i++) {
        const kv_spec_t *k = &preset_model_keys[i];
        if (k->type != KV_INT) continue;
        int32_t v;
        memcpy(&v, (const char *)m + k->offset, sizeof v);
        /* a dense model's record stays as it was before experts (and the keys after them)
         * existed */
        if (v == 0 && preset_model_key_may_be_absent(i)) continue;
        fprintf(f, ",\"%s\":%d", k->key, (int)v);
    }
    fputc('}', f);
}
