/* presets: model shapes and hardware figures for the simulator's cost model and the
 * teaching calculators (kv, roofline); later also the engine's dummy:PRESET weights.
 *
 * Invariants: built-in presets are immutable and live for the whole program; a preset
 * loaded from a file is owned by the caller (plain struct, no pointers). Sizes count
 * parameters, not bytes; bytes come from dtype_bytes. */
#ifndef TWIN_PRESETS_H
#define TWIN_PRESETS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/kvfile.h"

typedef struct {
    char name[48];
    int32_t n_layers;
    int32_t d_model;
    int32_t n_heads;
    int32_t n_kv_heads;   /* GQA: < n_heads */
    int32_t head_dim;     /* usually d_model / n_heads */
    int32_t d_ff;         /* SwiGLU hidden size */
    int32_t vocab;
    int32_t max_seq;      /* context length */
    int32_t tied_embeddings; /* 1: LM head shares the embedding matrix */
    int32_t dtype_bytes;  /* bytes per weight and per KV element (2 for bf16/fp16) */
    /* Mixture of experts (0 for a dense model): every layer's MLP is n_experts SwiGLU
     * experts of intermediate size moe_d_ff, of which a router (d_model x n_experts)
     * picks experts_per_tok per token (Mixtral: 8, top 2, 14336). d_ff is then unused. */
    int32_t n_experts;
    int32_t experts_per_tok;
    int32_t moe_d_ff;
    /* Fine-grained MoE (DeepSeek, Qwen2-MoE): the first n_dense_layers layers are dense
     * (SwiGLU of d_ff; first_k_dense_replace), and every MoE layer adds an always-active
     * shared expert of intermediate size shared_d_ff (0: none; DeepSeek's
     * n_shared_experts x moe_intermediate_size). */
    int32_t n_dense_layers;
    int32_t shared_d_ff;
    /* Multi-head latent attention (DeepSeek-V2/V3; 0 = off). The cache holds, per token and
     * layer, one latent of kv_lora_rank plus the shared rope key of qk_rope_head_dim, not
     * per-head K and V. Queries: d_model -> q_lora_rank (0: a direct projection) ->
     * n_heads x (qk_nope_head_dim + qk_rope_head_dim); values of v_head_dim per head. With
     * MLA, head_dim is qk_nope_head_dim + qk_rope_head_dim and n_kv_heads equals n_heads. */
    int32_t kv_lora_rank;
    int32_t q_lora_rank;
    int32_t qk_nope_head_dim;
    int32_t qk_rope_head_dim;
    int32_t v_head_dim;
    /* Sliding-window attention (0 = none): n_window_layers of the layers attend to the
     * last sliding_window tokens only (gpt-oss: every other layer, 128; Gemma 3: 5 of 6,
     * 1024); the others to the whole context. Which layers does not change a cost. */
    int32_t sliding_window;
    int32_t n_window_layers;
    /* Precision (0 = dtype_bytes for all): the layers' matrices (attention, MLP, experts)
     * stored at weight_bits, with one scale of scale_bits per weight_group weights (0: no
     * group scales; per-channel or per-block scales cost nothing that matters), multiplied
     * at act_bits (16: dequantised to bf16, W4A16 / W8A16; 8: FP8 products, W8A8; 4: FP4,
     * W4A4); the embedding, the LM head and the norms stay at dtype_bytes, as quantised
     * checkpoints keep them. kv_dtype_bytes: the KV cache's element (fp8 KV: 1). Named
     * formats: preset_model_set_format. */
    int32_t weight_bits;
    int32_t weight_group;
    int32_t scale_bits;
    int32_t act_bits;
    int32_t kv_dtype_bytes;
} preset_model_t;

typedef struct {
    char name[48];
    double mem_bw;        /* bytes/s, HBM */
    double flops;         /* dense bf16 FLOP/s */
    double mem_bytes;     /* device memory, bytes (decimal: 80 GB = 80e9) */
    double link_bw;       /* bytes/s per direction, GPU-to-GPU (NVLink); 0 = unknown.
                             Used for tensor-parallel all-reduces. */
    double link_latency;  /* seconds: the fixed cost of one all-reduce between the devices
                             (NCCL's launch and synchronisation); 0 = not modelled */
    double mem_cuda;      /* bytes: the device memory CUDA reports as its total
                             (cudaMemGetInfo, what vLLM's gpu_memory_utilization is a
                             fraction of); 0 = mem_bytes */
    /* Recorded and shown only: no cost formula reads these yet. */
    double flops_fp8;     /* dense FP8 tensor FLOP/s; 0 = no FP8 tensor math */
    double flops_fp4;     /* dense FP4 tensor FLOP/s (Blackwell); 0 = none */
    double net_bw;        /* bytes/s per GPU and direction of the scale-out network (one
                             400 Gb/s NIC per GPU on a DGX H100 = 50e9); 0 = unknown */
    double net_latency;   /* seconds, one message across that network; 0 = unknown */
    int32_t node_gpus;    /* GPUs one link domain joins (an HGX board: 8; GB200 NVL72: 72);
                             a tensor-parallel group larger than it all-reduces over the
                             network (net_bw). 0: any group fits (a file that does not say) */
    int32_t measured;     /* 1: link_latency and the roofline efficiencies used with this
                             GPU come from measurements in the data (Vidur's profiles);
                             0: datasheet figures only, the efficiencies are guesses */
} preset_hw_t;

/* Built-in lookup by name (case-insensitive); NULL when unknown. */
const preset_model_t *preset_model_find(const char *name);
const preset_hw_t *preset_hw_find(const char *name);
/* Iteration over built-ins: NULL past the end. */
const preset_model_t *preset_model_at(int i);
const preset_hw_t *preset_hw_at(int i);

/* NAME is a built-in name, a path to a small "key = value" file (see sim/presets.c), or a
 * Hugging Face config.json (a name ending in ".json", or a file that holds a JSON object:
 * sim/hfconfig.h). Returns 0, or -1 with a message "FILE:LINE: ..." in err. */
int preset_model_get(const char *name, preset_model_t *out, char *err, size_t errlen);
/* The same, and for a config.json one line of what it holds that the simulator does not
 * model (a sliding window, attention biases...) in note ("" when nothing, and for the other
 * kinds of NAME; note may be NULL). */
int preset_model_get_noted(const char *name, preset_model_t *out, char *note, size_t notelen,
                           char *err, size_t errlen);
int preset_hw_get(const char *name, preset_hw_t *out, char *err, size_t errlen);

/* The preset files' keys (kvfile.h tables over preset_model_t / preset_hw_t), for files
 * that embed a shape or hardware figures (cost files). */
extern const kv_spec_t preset_model_keys[];
extern const int preset_model_n_keys;
extern const kv_spec_t preset_hw_keys[];
extern const int preset_hw_n_keys;
/* After a file's keys were read into m through table t: the optional keys' defaults
 * (n_kv_heads = n_heads, head_dim = d_model / n_heads, max_seq 2048, dtype_bytes 2), then
 * preset_model_validate. `what` names the file in messages. 0 or -1. */
int preset_model_complete(preset_model_t *m, const kv_table_t *t, const char *what, char *err,
                          size_t errlen);

/* 1 when preset_model_keys[i] is left out of a record when 0 (n_experts and every key
 * after it: a dense model's record stays as it was before they existed), so a reader takes
 * its absence as 0. */
int preset_model_key_may_be_absent(int i);

/* The shape as a JSON object of the preset file's keys ({"name":..,"n_layers":..,..}),
 * as run configs record it; preset_model_keys names the members. */
void preset_model_json(FILE *f, const preset_model_t *m);

/* Checks a shape or a hardware record: positive sizes, n_heads a multiple of n_kv_heads,
 * dtype_bytes 1, 2 or 4, finite positive figures (the optional hardware figures finite and
 * >= 0, measured 0 or 1). Returns 0, or -1 with a message in err
 * (prefixed by the preset's name). Built-ins always pass; the file loaders call these. */
int preset_model_validate(const preset_model_t *m, char *err, size_t errlen);
int preset_hw_validate(const preset_hw_t *hw, char *err, size_t errlen);
/* The dense peak the layers' products of m run at on hw: FP8 for act_bits 8 and FP4 for 4
 * where the GPU has them (flops_fp8, flops_fp4), else its bf16 peak (a GPU without FP8
 * products runs an fp8 checkpoint dequantised, as vLLM's Marlin kernels do). */
double preset_hw_matrix_flops(const preset_hw_t *hw, const preset_model_t *m);
/* A tensor-parallel all-reduce of tp devices that spans several link domains (tp >
 * node_gpus): a ring bottlenecked by the network, 2 (tp - 1) / tp of the bytes at net_bw
 * per device, after link_latency + net_latency. Returns 1 with the figures (seconds, and
 * seconds per byte of the all-reduced tensor), 0 when the group fits one domain (nothing
 * written), -1 when it spans domains and net_bw is unknown (a message in err). */
int preset_hw_multinode_allreduce(const preset_hw_t *hw, int32_t tp, double *latency_s,
                                  double *s_per_byte, char *err, size_t errlen);

/* tp against the heads: it divides the attention heads, and it and the KV heads divide one
 * or the other (one replicated KV head a device past them). 0, or -1 with the reason. */
int preset_model_check_tp(const preset_model_t *m, int32_t tp, char *err, size_t errlen);

/* Derived figures. */
double preset_model_params(const preset_model_t *m);       /* total parameters */
double preset_model_weight_bytes(const preset_model_t *m);
/* The matrix parameters each token multiplies through the layers (Q, K, V, O, gate, up,
 * down of every layer: 2 FLOPs each per token; for a mixture of experts Q, K, V, O and the
 * router, the experts being counted apart), and the LM head's (vocab x d_model, 2 FLOPs
 * each per sampled row). The cost models' GEMM terms are in these units. */
double preset_model_layer_matrix_params(const preset_model_t *m);
/* A mixture of experts: 1 when n_experts > 0. One expert's parameters (gate, up and down:
 * 3 x d_model x moe_d_ff) and all experts of all layers; 0 for a dense model. */
int preset_model_is_moe(const preset_model_t *m);
double preset_model_expert_params(const preset_model_t *m);
double preset_model_all_expert_params(const preset_model_t *m);
double preset_model_lm_params(const preset_model_t *m);
/* The parameters a token passes through: all but the routed experts it does not pick
 * (experts_per_tok of n_experts in each MoE layer); preset_model_params for a dense model. */
double preset_model_active_params(const preset_model_t *m);
/* Their bytes: preset_model_weight_bytes less the experts a token does not pick. */
double preset_model_active_weight_bytes(const preset_model_t *m);
/* 2 (K and V) x layers x kv_heads x head_dim x dtype_bytes; with MLA, layers x
 * (kv_lora_rank + qk_rope_head_dim) x dtype_bytes. A token's full cost, window or not (the
 * KV a cached token holds while it is inside every layer's window). */
double preset_model_kv_bytes_per_token(const preset_model_t *m);
/* One layer's KV elements per cached token (2 x kv_heads x head_dim, or MLA's latent and
 * rope key). */
double preset_model_kv_elems_per_layer(const preset_model_t *m);
/* The KV bytes a sequence of ctx tokens holds: its full-attention layers keep all ctx
 * tokens, its window layers min(ctx, sliding_window) (vLLM's hybrid allocator frees the
 * blocks that left the window). */
double preset_model_kv_bytes_at(const preset_model_t *m, double ctx);
/* Bytes a layer-matrix parameter takes, its group scales included (bf16: 2; fp8: 1; int4
 * with fp16 scales per 128: 0.5 + 2/128; MXFP4, e8m0 per 32: 0.5 + 1/32; NVFP4, fp8 per 16:
 * 0.5 + 1/16), and a KV element's bytes. */
double preset_model_matrix_bytes(const preset_model_t *m);
int32_t preset_model_kv_elem_bytes(const preset_model_t *m);
/* The weight format by name: bf16 (the model's dtype), fp8 (W8A8), int4 (W4A16, fp16 scales
 * per 128: AWQ/GPTQ), mxfp4 (W4A16, e8m0 scales per 32: gpt-oss's experts), nvfp4 (W4A4,
 * fp8 scales per 16, on a GPU with FP4 products; W4A16 elsewhere, as vLLM falls back),
 * q8_0 and q4_0 (ggml's blocks: an fp16 scale per 32, dequantised; a GGUF's types). And
 * the KV element: bf16 or fp8. 0, or -1 with the names accepted in err. */
int preset_model_set_format(preset_model_t *m, const char *format, char *err, size_t errlen);
int preset_model_set_kv_dtype(preset_model_t *m, const char *dtype, char *err, size_t errlen);
/* The format's name ("bf16", "fp8", "int4", "mxfp4", "nvfp4", or "custom"). */
const char *preset_model_format_name(const preset_model_t *m);

/* Per device at tensor-parallel degree tp (Megatron sharding, as vLLM):
 *  - the KV bytes a cached token holds on one device over all layers: K/V heads split by
 *    tp, one replicated head a device when tp > n_kv_heads; MLA's latent is replicated on
 *    every device (each holds it whole for its share of the heads);
 *  - one layer's attention FLOPs per (new token, attended position): 2 x (key width + value
 *    width) per head; MLA attends in the latent space as vLLM's decode does (the absorbed
 *    form: keys of kv_lora_rank + qk_rope_head_dim, values of kv_lora_rank);
 *  - one layer's attention projection parameters, in (Q, K, V, or MLA's q_a, q_b, kv_a,
 *    kv_b) and out (O): sharded by tp, except MLA's q_a and kv_a, which vLLM replicates;
 *    and the elements per token they write (in) and attention writes (out). */
double preset_model_kv_bytes_device(const preset_model_t *m, int32_t tp);
double preset_model_attn_pair_flops(const preset_model_t *m, int32_t tp);
/* Latent attention's prefill as vLLM runs it (0 for other attention): the context's latent
 * expanded by kv_b into per-head keys and values, kv_lora_rank x heads x (qk_nope_head_dim
 * + v_head_dim) parameters per layer on a device, 2 FLOPs each per position, then plain
 * attention over the expanded heads, 2 x heads x (qk_nope + qk_rope + v_head_dim) FLOPs
 * per (token, position) (fewer than the absorbed form's: 3.4x for deepseek-v3). */
double preset_model_mla_expand_params(const preset_model_t *m, int32_t tp);
double preset_model_mla_prefill_pair_flops(const preset_model_t *m, int32_t tp);
void preset_model_attn_device(const preset_model_t *m, int32_t tp, double *w_in, double *w_out,
                              double *act_in, double *act_out);
/* Layers whose MLP is a mixture of experts (n_layers - n_dense_layers; 0 if dense). */
int32_t preset_model_moe_layers(const preset_model_t *m);
/* "MHA", "GQA", "MQA" or "MLA". */
const char *preset_model_attention(const preset_model_t *m);

#endif
