/* hfconfig_internal: what sim/hfconfig.c (the architectures: which keys make which shape)
 * takes from sim/hfconfig_doc.c (reading the document: its members, typed keys with the
 * Hugging Face classes' defaults, and the messages that name a key). Nothing else includes
 * this header.
 *
 * Invariants: an hf_t's members (m, top) are owned by it and freed by hfd_free_members;
 * every hfd_ reader that fails has written "PATH: ..." into h->err (hfd_fail) and returns
 * -1. Ownership: as hfconfig.h; the JSON text given is not kept. */
#ifndef TWIN_HFCONFIG_INTERNAL_H
#define TWIN_HFCONFIG_INTERNAL_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/presets.h"

#define HF_MAX_BYTES ((size_t)64 << 20)  /* config.json is a few KB; a tokenizer.json 10 MB */
#define HF_MAX_MEMBERS 4096               /* real configs have under 100 keys */
#define HF_NOTE_CAP 1024
#define HF_PATH_CAP 4096
#define TEXT_PRE "text_config."

/* How a class's MLPs are laid out. */
typedef enum {
    K_DENSE,     /* SwiGLU (Gemma: GeGLU, the same three matrices) of intermediate_size */
    K_MIXTRAL,   /* every layer num_local_experts experts of intermediate_size */
    K_QWEN_MOE,  /* every layer num_experts of moe_intermediate_size (Qwen3-MoE) */
    K_QWEN2_MOE, /* the same plus a shared expert of shared_expert_intermediate_size */
    K_DEEPSEEK,  /* first_k_dense_replace dense layers, then routed + shared experts; MLA */
    K_GPT_OSS    /* every layer num_local_experts experts of intermediate_size, no dense MLP */
} kind_t;

/* Which layers a sliding_window applies to (HF's own rule for each class). */
typedef enum {
    W_NONE,    /* no window (Llama, DeepSeek) */
    W_ALL,     /* every layer, when sliding_window is a number (Mistral, Mixtral, Phi-3) */
    W_QWEN,    /* only with use_sliding_window: layers from max_window_layers on */
    W_EVEN,    /* layer_types, else the even layers (gpt-oss, Gemma 2) */
    W_PATTERN  /* layer_types, else all but every sliding_window_pattern-th (Gemma 3) */
} window_t;

/* What a class has beyond the shape preset_model_t counts: noted, never counted. */
enum {
    X_QKV_BIAS = 1,      /* q/k/v projections always carry biases (Qwen2, Qwen2-MoE) */
    X_BIAS_KEYS = 2,     /* attention_bias / mlp_bias switch biases on (Llama, Qwen3, gpt-oss) */
    X_QK_NORM = 4,       /* an RMSNorm over each head's q and k (Qwen3, Gemma 3) */
    X_SHARED_GATE = 8,   /* a sigmoid gate on the shared expert (Qwen2-MoE) */
    X_GEMMA = 16,        /* soft-capping, query_pre_attn_scalar, two more norms a layer */
    X_TEXT_CONFIG = 32,  /* the language model's keys are in text_config (a vision wrapper) */
    X_PHI3 = 64,         /* partial_rotary_factor */
    X_DEEPSEEK = 128,    /* grouped routing, the multi-token-prediction layer */
    X_GPT_OSS = 256      /* attention sinks, expert and router biases */
};

typedef struct {
    const char *arch;
    kind_t kind;
    window_t window;
    int extras;
    /* The class's values for keys a file may leave out; 0: the key is required (heads,
     * vocab, max_seq) or follows the generic rule (kv_heads = heads, head_dim = hidden /
     * heads). */
    int32_t heads, kv_heads, head_dim, vocab, max_seq;
    int tied;          /* tie_word_embeddings when absent */
} arch_t;

typedef struct {
    char *key;         /* owned */
    const char *pre;   /* "" or TEXT_PRE: how messages name the key (static) */
    char type[8];      /* json_type(): null true false integer real text array object */
    int is_int;        /* an integer that SQLite holds exactly (not a huge one as real) */
    int64_t i;
    char *text;        /* a text's value, or an array's or object's JSON; owned */
    char *json;        /* the value as JSON, for messages; owned */
} member_t;

typedef struct {
    const char *path;
    sqlite3 *db;
    member_t *m;       /* [n] the members read: the document's, or its text_config's */
    size_t n;
    member_t *top;     /* [ntop] the document's own when m holds text_config's; else NULL */
    size_t ntop;
    const char *pre;   /* how a missing key is named: "" or TEXT_PRE */
    const arch_t *arch;
    char note[HF_NOTE_CAP];
    char *err;
    size_t errlen;
} hf_t;

int hfd_fail(hf_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hfd_read_whole(const char *path, char **text, size_t *len, char *err, size_t errlen);
sqlite3_stmt *hfd_prep(hf_t *h, const char *sql, const char *json, size_t len);
char *hfd_dup_col(sqlite3_stmt *st, int col);
void hfd_free_members(member_t *m, size_t n);
int hfd_read_members(hf_t *h, const char *text, size_t len, const char *pre);
int hfd_wrapper_key(const char *key);
const member_t *hfd_find(const hf_t *h, const char *key);
const member_t *hfd_given(const hf_t *h, const char *key);
int hfd_present(const hf_t *h, const char *key);
const char *hfd_pre_of(const hf_t *h, const char *key);
const char *hfd_shown(const member_t *m, char *buf, size_t len);
#define HFD_REQUIRED 0    /* hfd_int's def: the key must be given */
#define HFD_OPTIONAL (-1) /* hfd_int's def: no default, *out left as it was */
int hfd_int(hf_t *h, const char *key, int32_t def, int32_t *out, int *seen);
int hfd_count(hf_t *h, const char *key, int32_t def, int32_t *out);
int hfd_size_or_null(hf_t *h, const char *key, const char *null_means, int32_t *out);
int hfd_bool(hf_t *h, const char *key, int *out);
int hfd_dtype(hf_t *h, int32_t *bytes);

#endif
