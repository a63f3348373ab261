/* presets: see presets.h.
 *
 * Built-in shapes are copied from each model's Hugging Face config.json (cited per entry);
 * hardware figures from the vendor datasheets (cited per entry). Parameter counts are derived,
 * never stored, so a typo in a shape shows up as a wrong count in tests/test_presets.c.
 *
 * User preset files: one `key = value` per line, `#` starts a comment (whole line or after a
 * value), blank lines ignored, keys are the struct field names. Integers are plain decimal;
 * the hardware figures are doubles and may use scientific notation (2.039e12).
 *
 *   model: name, n_layers*, d_model*, n_heads*, n_kv_heads (= n_heads), head_dim
 *          (= d_model / n_heads), d_ff*, vocab*, max_seq (= 2048), tied_embeddings (= 0),
 *          dtype_bytes (= 2), n_experts (= 0: dense), experts_per_tok (needed with
 *          experts), moe_d_ff (= d_ff)
 *   hw:    name, mem_bw*, flops*, mem_bytes*, link_bw (= 0), link_latency (= 0),
 *          mem_cuda (= mem_bytes)
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

/* ---- built-in models ---------------------------------------------------------------- */

static const preset_model_t builtin_models[] = {
    /* https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json */
    {"llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, 4096, 0, 2, 0, 0, 0},
    /* https://huggingface.co/meta-llama/Llama-2-13b-hf/blob/main/config.json */
    {"llama-2-13b", 40, 5120, 40, 40, 128, 13824, 32000, 4096, 0, 2, 0, 0, 0},
    /* https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json (GQA, 8 KV heads) */
    {"llama-2-70b", 80, 8192, 64, 8, 128, 28672, 32000, 4096, 0, 2, 0, 0, 0},
    /* https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json */
    {"llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, 8192, 0, 2, 0, 0, 0},
    /* https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json */
    {"llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256, 8192, 0, 2, 0, 0, 0},
    /* https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json
     * (head_dim 64, tie_word_embeddings true, max_position_embeddings 131072) */
    {"llama-3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 1, 2, 0, 0, 0},
    /* https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json
     * (its 4096-token sliding window is not modelled: attention cost uses the full context) */
    {"mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768, 0, 2, 0, 0, 0},
    /* https://huggingface.co/HuggingFaceTB/SmolLM2-135M/blob/main/config.json
     * (head_dim 64, tied; max_position_embeddings 8192 in the current config, 2048 in the
     * first upload) */
    {"smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152, 8192, 1, 2, 0, 0, 0},
    /* Karpathy's stories260K (huggingface.co/karpathy/tinyllamas, stories260K/), the header of
     * /work/shared/data/models/stories260K.bin: dim 64, hidden 172, 5 layers, 8 heads, 4 KV
     * heads, vocab 512 (tied), seq_len 512. dtype 4: the checkpoint is fp32 and the engine's
     * CPU backend runs it in fp32, so sim-vs-engine comparisons on it need fp32 bytes. */
    {"stories260k", 5, 64, 8, 4, 8, 172, 512, 512, 1, 4, 0, 0, 0},
    /* https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
     * (num_local_experts 8, num_experts_per_tok 2, intermediate_size 14336 per expert;
     * max_position_embeddings 32768; its sliding_window is null). 46.70B parameters. */
    {"mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768, 0, 2, 8, 2, 14336},
    /* The other models Vidur profiled (its vidur/config/model_config.py, and the shapes in
     * the profiles' own columns), so that their shipped calibrations have a model:
     * https://huggingface.co/codellama/CodeLlama-34b-Instruct-hf/blob/main/config.json
     * (GQA, 8 KV heads; max_position_embeddings 16384) */
    {"codellama-34b", 48, 8192, 64, 8, 128, 22016, 32000, 16384, 0, 2, 0, 0, 0},
    /* https://huggingface.co/internlm/internlm-20b/blob/main/config.json (60 layers, MHA;
     * 4096 positions, longer with its dynamic RoPE scaling, which is not modelled) */
    {"internlm-20b", 60, 5120, 40, 40, 128, 13824, 103168, 4096, 0, 2, 0, 0, 0},
    /* https://huggingface.co/Qwen/Qwen-72B/blob/main/config.json (MHA; its intermediate_size
     * 49152 counts both halves of the gated MLP: 24576 each; 32768 positions; the QKV bias
     * is not modelled) */
    {"qwen-72b", 80, 8192, 64, 64, 128, 24576, 152064, 32768, 0, 2, 0, 0, 0},
};
#define N_MODELS ((int)(sizeof builtin_models / sizeof builtin_models[0]))

/* ---- built-in hardware ---------------------------------------------------------------
 * Memory in decimal bytes (80 GB = 80e9), as the datasheets print it; nvidia-smi reports a
 * little more (81920 MiB on an A100 80GB), so budgets computed from these are conservative.
 * FLOP/s are dense (no 2:4 sparsity) bf16 tensor-core peaks. link_bw is the NVLink figure per
 * direction: the datasheets quote the bidirectional total (600 GB/s on A100, 900 GB/s on
 * H100/H200), and a ring all-reduce sends and receives at once, so half of it bounds it.
 * link_latency is the fixed cost of one all-reduce, fitted (latency + bytes / bandwidth) to
 * Vidur's NCCL all-reduce profiles on DGX nodes (profiles/vidur/network/GPU_dgx, by
 * `twinserve calibrate --vidur`): 36, 29 and 39 us at 2, 4 and 8 A100s, 17, 31 and 29 us at
 * 2, 4 and 8 H100s; the median of each. H200 shares H100's NVLink 4 and NVSwitch.
 * mem_cuda is the total CUDA reports (less than the datasheet's decimal figure and than
 * nvidia-smi's: the driver keeps some): 79.22 GiB on an H100 80GB (vLLM's own memory
 * profile log, vllm-project/vllm PR #10511: "total_gpu_memory 79.22GiB"), 79.15 GiB on
 * an A100 80GB (PyTorch's out-of-memory messages there: "79.15 GiB total capacity"); the
 * H200's 143,771 MiB in nvidia-smi less the 438 MiB the H100 loses the same way (81,559
 * MiB in nvidia-smi) gives 139.97 GiB, an estimate. */
static const preset_hw_t builtin_hws[] = {
    /* NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM: 2,039 GB/s HBM2e, BF16 tensor
     * 312 TFLOPS (624 with sparsity), 80 GB, NVLink 600 GB/s. */
    {"a100-80g", 2.039e12, 312e12, 80e9, 300e9, 36e-6, 79.15 * 1073741824.0},
    /* NVIDIA H100 Tensor Core GPU datasheet, H100 SXM5: 3.35 TB/s HBM3, BF16 tensor
     * 1,979 TFLOPS with sparsity = 989 dense, 80 GB, NVLink 900 GB/s. */
    {"h100", 3.35e12, 989e12, 80e9, 450e9, 29e-6, 79.22 * 1073741824.0},
    /* NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: 4.8 TB/s HBM3e, BF16 tensor
     * 1,979 TFLOPS with sparsity = 989 dense, 141 GB, NVLink 900 GB/s. */
    {"h200", 4.8e12, 989e12, 141e9, 450e9, 29e-6, 139.97 * 1073741824.0},
};
#define N_HWS ((int)(sizeof builtin_hws / sizeof builtin_hws[0]))

const preset_model_t *preset_model_at(int i) {
    return (i >= 0 && i < N_MODELS) ? &builtin_models[i] : NULL;
}

const preset_hw_t *preset_hw_at(int i) {
    return (i >= 0 && i < N_HWS) ? &builtin_hws[i] : NULL;
}

const preset_model_t *preset_model_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < N_MODELS; i++)
        if (strcasecmp(builtin_models[i].name, name) == 0) return &builtin_models[i];
    return NULL;
}

const preset_hw_t *preset_hw_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < N_HWS; i++)
        if (strcasecmp(builtin_hws[i].name, name) == 0) return &builtin_hws[i];
    return NULL;
}

/* ---- derived figures ------------------------------------------------------------------ */

int preset_model_is_moe(const preset_model_t *m) { return m->n_experts > 0; }

double preset_model_expert_params(const preset_model_t *m) {
    return preset_model_is_moe(m) ? 3.0 * m->d_model * (double)m->moe_d_ff : 0.0;
}

double preset_model_all_expert_params(const preset_model_t *m) {
    return (double)m->n_layers * m->n_experts * preset_model_expert_params(m);
}

double preset_model_layer_matrix_params(const preset_model_t *m) {
    double d = m->d_model, hd = m->head_dim;
    double q = (double)m->n_heads * hd, kv = (double)m->n_kv_heads * hd;
    double attn = d * q + 2.0 * d * kv + q * d;  /* wq, wk, wv, wo */
    /* SwiGLU gate, up, down; a mixture of experts' tokens all pass its router instead */
    double mlp = preset_model_is_moe(m) ? d * m->n_experts : 3.0 * d * m->d_ff;
    return m->n_layers * (attn + mlp);
}

double preset_model_lm_params(const preset_model_t *m) { return (double)m->vocab * m->d_model; }

double preset_model_params(const preset_model_t *m) {
    double d = m->d_model;
    double norms = 2.0 * d;                      /* RMSNorm before attention and MLP */
    double embed = preset_model_lm_params(m);
    double head = m->tied_embeddings ? 0.0 : embed;
    return embed + preset_model_layer_matrix_params(m) + preset_model_all_expert_params(m) +
           m->n_layers * norms + d /* final norm */ + head;
}

double preset_model_weight_bytes(const preset_model_t *m) {
    return preset_model_params(m) * m->dtype_bytes;
}

double preset_model_kv_bytes_per_token(const preset_model_t *m) {
    return 2.0 * m->n_layers * m->n_kv_heads * (double)m->head_dim * m->dtype_bytes;
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
    if (!isfinite(hw->mem_cuda) || hw->mem_cuda < 0 || hw->mem_cuda > hw->mem_bytes * 1.1)
        return errf(err, errlen, "%s: mem_cuda must be >= 0 bytes and no more than about "
                    "mem_bytes (got %g)", n, hw->mem_cuda);
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
};
const int preset_hw_n_keys = (int)(sizeof preset_hw_keys / sizeof preset_hw_keys[0]);

#define MAX_KEYS 16

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

void preset_model_json(FILE *f, const preset_model_t *m) {
    fputs("{\"name\":", f);
    json_write_str(f, m->name);
    for (int i = 0; i < preset_model_n_keys; i++) {
        const kv_spec_t *k = &preset_model_keys[i];
        if (k->type != KV_INT) continue;
        int32_t v;
        memcpy(&v, (const char *)m + k->offset, sizeof v);
        /* a dense model's record stays as it was before experts existed */
        if (v == 0 && !preset_model_is_moe(m) && (!strcmp(k->key, "n_experts") ||
            !strcmp(k->key, "experts_per_tok") || !strcmp(k->key, "moe_d_ff")))
            continue;
        fprintf(f, ",\"%s\":%d", k->key, (int)v);
    }
    fputc('}', f);
}
