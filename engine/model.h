/* model: a Llama-family decoder's shape and fp32 host weights, loaded from a llama2.c
 * checkpoint, a GGUF v3 file (architecture llama) or generated as dummy:PRESET.
 *
 * The architecture: token embedding; n_layers x (RMSNorm -> Q,K,V projections -> RoPE ->
 * grouped-query attention -> output projection -> residual; RMSNorm -> SwiGLU MLP w2(silu(w1 x)
 * * w3 x) -> residual); final RMSNorm; LM head.
 *
 * A mixture of experts (n_experts > 0): the layers from n_dense_layers on replace the MLP by
 * a router and n_experts SwiGLU experts of moe_hidden, experts_per_tok of them per token
 * (engine/forward_moe.c has the routing rule), plus a shared expert of shared_hidden that
 * every token passes (0: none). Their w1/w2/w3 are then NULL; the dense layers before them
 * keep a SwiGLU of hidden_dim and have no router or experts.
 *
 * Invariants:
 *  - Every weight is fp32 on the host, dequantised at load, row-major [out][in]: the rows of
 *    wq are the outputs, each row holds `in` contiguous floats (llama2.c's layout, and
 *    GGUF's with ne[0] = in).
 *  - RoPE rotates adjacent pairs (x[2i], x[2i+1]) of each head with angle pos * theta^(-2i/hd),
 *    as llama2.c and llama.cpp's LLAMA mode: both file formats store Q/K rows in that order.
 *  - n_heads is a multiple of n_kv_heads; head_dim * n_heads need not equal dim.
 *  - lm_head == tok_emb (the same pointer) when the embeddings are tied; freed once.
 *  - A GGUF model also keeps each matrix as stored (model_stored_t): the same values as
 *    its fp32 copy, once dequantised.
 *  - A loader never crashes on bad input: a short file, a bad magic, absurd counts, unknown
 *    tensor types or tensors past the end of the file give -1 and a message naming the file
 *    (and the tensor or key).
 *
 * Ownership: model_load returns a model owned by the caller (model_free). Weights live in
 * one allocation per tensor (or one arena), freed by model_free. The tokenizer found in a
 * GGUF file is not part of the model: see engine/tokenizer.h (tok_load_gguf). */
#ifndef TWIN_MODEL_H
#define TWIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "sim/presets.h"

typedef struct {
    int32_t dim;          /* d_model */
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t hidden_dim;   /* SwiGLU hidden size */
    int32_t vocab;
    int32_t max_seq;      /* context length */
    float rope_theta;     /* 10000 for llama2.c files */
    float norm_eps;       /* 1e-5 for llama2.c files */
    int32_t tied;         /* 1: lm_head shares tok_emb */
    /* mixture of experts; all 0 for a dense model (see the top of this file) */
    int32_t n_experts;    /* 0, or >= 2 */
    int32_t experts_per_tok; /* top-k: 1..n_experts */
    int32_t moe_hidden;   /* one expert's SwiGLU hidden size */
    int32_t n_dense_layers; /* the first layers are dense: 0..n_layers - 1 */
    int32_t shared_hidden;  /* the shared expert's hidden size; 0: none */
} model_config_t;

typedef struct {
    float *attn_norm;     /* [dim] */
    float *wq;            /* [n_heads * head_dim][dim] */
    float *wk;            /* [n_kv_heads * head_dim][dim] */
    float *wv;            /* [n_kv_heads * head_dim][dim] */
    float *wo;            /* [dim][n_heads * head_dim] */
    float *ffn_norm;      /* [dim] */
    float *w1;            /* gate [hidden_dim][dim] */
    float *w2;            /* down [dim][hidden_dim] */
    float *w3;            /* up   [hidden_dim][dim] */
    /* MoE layers only (NULL otherwise); experts are the outer dimension, as GGUF's 3-D
     * tensors: expert e's gate is exp_gate + e * moe_hidden * dim */
    float *router;        /* [n_experts][dim] */
    float *exp_gate;      /* [n_experts][moe_hidden][dim] */
    float *exp_down;      /* [n_experts][dim][moe_hidden] */
    float *exp_up;        /* [n_experts][moe_hidden][dim] */
    float *sh_w1;         /* shared expert gate [shared_hidden][dim] (NULL: none) */
    float *sh_w2;         /* down [dim][shared_hidden] */
    float *sh_w3;         /* up [shared_hidden][dim] */
} model_layer_t;

/* A matrix as its file stores it (ggml type id, engine/dequant.h; bytes row-major
 * [out][in]), for backends that keep stored types (engine/backend.h): data NULL when the
 * source has no stored form (llama2.c, dummy). */
typedef struct {
    uint32_t type;
    const void *data;
} model_stored_t;

/* exp_*: the whole 3-D tensor (every expert), expert e at e x its bytes per expert. */
typedef struct {
    model_stored_t wq, wk, wv, wo, w1, w2, w3;
    model_stored_t router, exp_gate, exp_down, exp_up, sh_w1, sh_w2, sh_w3;
} model_stored_layer_t;

typedef struct model {
    model_config_t cfg;
    float *tok_emb;       /* [vocab][dim] */
    model_layer_t *layers;/* [n_layers] */
    float *final_norm;    /* [dim] */
    float *lm_head;       /* [vocab][dim]; == tok_emb when tied */
    char source[512];     /* the path or "dummy:NAME", for records and messages */
    char format[16];      /* "llama2c" | "gguf" | "dummy" */
    char weight_type[16]; /* the file's dominant tensor type ("F32", "Q8_0", ...) */
    void *arena;          /* loader-owned storage behind the pointers above */
    /* A dummy model loaded with MODEL_SHAPE_ONLY has no host weights (every weight pointer
     * NULL): the forward pass generates them on its backend from dummy_seed
     * (engine/dummy_weight.h), the same values a host load would hold. */
    int shape_only;
    uint64_t dummy_seed;
    /* GGUF models: the matrices as stored, pointing into the file's mapping (file, an open
     * gguf_t owned by the model); stored_layers NULL for other sources. */
    model_stored_t stored_tok_emb, stored_lm_head;
    model_stored_layer_t *stored_layers;
    void *file;
} model_t;

/* spec: a path to a .bin (llama2.c) or .gguf file (detected by magic, not by extension), or
 * "dummy:PRESET" (a simulator preset name or preset file, weights drawn from seed).
 * Returns 0 with *out set, or -1 with a message in err (*out NULL). */
int model_load(const char *spec, uint64_t seed, model_t **out, char *err, size_t errlen);

/* flags for model_open */
#define MODEL_SHAPE_ONLY 1   /* dummy:PRESET without host weights (files load as usual) */
/* GGUF files: the matrices stay in the file (stored_*, the mapping) and their host
 * pointers are NULL; only the norms are loaded in fp32. The forward pass converts what it
 * keeps in fp32 one group at a time, at upload (engine/forward.c), so loading a Q4_0 file
 * needs its own bytes, not 4 per weight. Other sources load as usual. */
#define MODEL_LAZY 2
/* model_load with flags; model_load(...) == model_open(..., 0, ...). */
int model_open(const char *spec, uint64_t seed, int flags, model_t **out, char *err,
               size_t errlen);
void model_free(model_t *m);

/* Checks a configuration read from a file: positive sizes within sane bounds, head
 * divisibility, an even head_dim; a mixture of experts' fields all 0, or n_experts >= 2,
 * experts_per_tok 1..n_experts, moe_hidden positive, n_dense_layers below n_layers.
 * 0, or -1 with a message naming `what` (the file). */
int model_config_check(const model_config_t *c, const char *what, char *err, size_t errlen);

/* 1 when layer l's MLP is a mixture of experts (n_experts > 0, l >= n_dense_layers). */
int model_layer_is_moe(const model_config_t *c, int32_t l);

/* Parameters (counting lm_head once when tied), and fp32 bytes of weights. */
double model_params(const model_config_t *c);

/* The model's shape as a simulator preset (sim/presets.h) named `name`, with weights and KV
 * of dtype_bytes each: how the simulator and the cost models see an engine model. */
void model_preset_shape(const model_config_t *c, const char *name, int32_t dtype_bytes,
                        preset_model_t *out);

/* The one resolver of a model's description for every command (issue #29's Design): a
 * GGUF file's shape from its header and tensor shapes (model_gguf_shape: the engine's own
 * reading of it, matrices' type as the weight format, nothing loaded), and every other name
 * (a built-in preset, a .model file, a config.json) through sim/presets.h's
 * preset_model_get_noted. note gets what a config.json holds that is not modelled ("" for
 * the others; may be NULL). 0, or -1 with a message. */
int model_gguf_shape(const char *path, preset_model_t *out, char *err, size_t errlen);
int model_is_gguf(const char *path);
int model_shape_resolve(const char *name, preset_model_t *out, char *note, size_t notelen,
                        char *err, size_t errlen);

/* Allocates a model for a checked configuration: one 64-byte-aligned arena of fp32 weights
 * (uninitialised) laid out in llama2.c's order (tok_emb, then each per-layer tensor for all
 * layers: attn_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3, then a mixture of experts' router,
 * exp_gate, exp_down, exp_up, sh_w1, sh_w2, sh_w3, each only in the layers that have it;
 * final_norm; lm_head unless tied),
 * the pointers set into it, source and format copied. Refuses (-1 with a message naming
 * `source`) a model larger than the machine's physical memory, before allocating. */
int model_alloc(const model_config_t *c, const char *source, const char *format,
                model_t **out, char *err, size_t errlen);
/* The same, but the arena holds the norms only (every matrix pointer NULL): MODEL_LAZY. */
int model_alloc_norms(const model_config_t *c, const char *source, const char *format,
                      model_t **out, char *err, size_t errlen);
/* Floats in the arena up to and including final_norm (llama2.c's contiguous block). */
size_t model_body_floats(const model_config_t *c);

/* Loaders, called by model_load (exposed for tests). */
int model_load_llama2c(const char *path, model_t **out, char *err, size_t errlen);
int model_load_gguf(const char *path, int flags, model_t **out, char *err, size_t errlen);
int model_load_dummy(const char *preset, uint64_t seed, int flags, model_t **out, char *err,
                     size_t errlen);

#endif
