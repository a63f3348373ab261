/* hfconfig: see hfconfig.h.
 *
 * The document is parsed once: json_each lists its top-level members (key, JSON type,
 * value) into an array that every later check reads, so a message can say which key held
 * what. The two nested values read (the architectures list, Qwen's mlp_only_layers) are
 * parsed again from their own JSON text. SQLite is the parser because every build already
 * links it (traces/import_vllm.c does the same); a private in-memory database per call
 * keeps callers on different threads apart.
 *
 * Defaults are those of the Hugging Face config class when a key is absent or null, since
 * that is what transformers and vLLM would build from the same file: num_key_value_heads =
 * num_attention_heads, head_dim = hidden_size / num_attention_heads (Qwen3Config: 128),
 * tie_word_embeddings false, a missing dtype bf16. Sizes with no sensible default are
 * required. */
#include "sim/hfconfig.h"

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

#define HF_MAX_BYTES ((size_t)64 << 20)  /* config.json is a few KB; a tokenizer.json 10 MB */
#define HF_MAX_MEMBERS 4096               /* real configs have under 100 keys */
#define HF_NOTE_CAP 768
#define HF_PATH_CAP 4096

typedef enum { K_DENSE, K_MIXTRAL, K_QWEN_MOE } kind_t;

/* What a class has beyond the shape preset_model_t counts: noted, never counted. */
enum {
    X_QKV_BIAS = 1,       /* q/k/v projections always carry biases (Qwen2) */
    X_BIAS_KEYS = 2,      /* attention_bias / mlp_bias switch biases on (Llama, Qwen3) */
    X_QK_NORM = 4,        /* an RMSNorm over each head's q and k (Qwen3) */
    X_WINDOW = 8,         /* a numeric sliding_window applies (Mistral, Mixtral) */
    X_WINDOW_IF_USED = 16 /* sliding_window applies only with use_sliding_window (Qwen) */
};

typedef struct {
    const char *arch;
    kind_t kind;
    int extras;
    int32_t head_dim;  /* the class's head_dim when the file has none; 0: hidden / heads */
} arch_t;

static const arch_t archs[] = {
    {"LlamaForCausalLM", K_DENSE, X_BIAS_KEYS, 0},
    {"MistralForCausalLM", K_DENSE, X_WINDOW, 0},
    {"Qwen2ForCausalLM", K_DENSE, X_QKV_BIAS | X_WINDOW_IF_USED, 0},
    {"Qwen3ForCausalLM", K_DENSE, X_BIAS_KEYS | X_QK_NORM | X_WINDOW_IF_USED, 128},
    {"MixtralForCausalLM", K_MIXTRAL, X_WINDOW, 0},
    {"Qwen3MoeForCausalLM", K_QWEN_MOE, X_BIAS_KEYS | X_QK_NORM | X_WINDOW_IF_USED, 0},
};
#define N_ARCHS ((int)(sizeof archs / sizeof archs[0]))

static const char supported[] = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                                "Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM";

typedef struct {
    char *key;         /* owned */
    char type[8];      /* json_type(): null true false integer real text array object */
    int is_int;        /* an integer that SQLite holds exactly (not a huge one as real) */
    int64_t i;
    char *text;        /* a text's value, or an array's or object's JSON; owned */
    char *json;        /* the value as JSON, for messages; owned */
} member_t;

typedef struct {
    const char *path;
    sqlite3 *db;
    member_t *m;       /* [n] top-level members in file order */
    size_t n;
    const arch_t *arch;
    char note[HF_NOTE_CAP];
    char *err;
    size_t errlen;
} hf_t;

static int hf_fail(hf_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int hf_fail(hf_t *h, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return errf(h->err, h->errlen, "%s: %s", h->path, msg);
}

const char *hfcfg_supported(void) { return supported; }

/* ---- reading the document ------------------------------------------------------------- */

static int read_whole(const char *path, char **text, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    size_t cap = 1 << 14, n = 0;
    char *buf = NULL;
    int rc = -1;
    if (!f) return errf(err, errlen, "%s: %s", path, strerror(errno));
    if (!(buf = malloc(cap))) goto oom;
    for (;;) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        if (cap > HF_MAX_BYTES) {
            errf(err, errlen, "%s: larger than %zu MiB: not a config.json", path,
                 HF_MAX_BYTES >> 20);
            goto done;
        }
        char *g = realloc(buf, cap * 2);
        if (!g) goto oom;
        buf = g;
        cap *= 2;
    }
    if (ferror(f)) {
        errf(err, errlen, "%s: %s", path, strerror(errno));
        goto done;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    buf = NULL;
    rc = 0;
    goto done;
oom:
    errf(err, errlen, "%s: out of memory reading the file", path);
done:
    free(buf);
    fclose(f);
    return rc;
}

static sqlite3_stmt *prep(hf_t *h, const char *sql, const char *json, size_t len) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(h->db, sql, -1, &st, NULL) != SQLITE_OK) {
        hf_fail(h, "cannot read the JSON: %s", sqlite3_errmsg(h->db));
        return NULL;
    }
    sqlite3_bind_text(st, 1, json, (int)len, SQLITE_STATIC);
    return st;
}

static char *dup_col(sqlite3_stmt *st, int col) {
    const char *s = (const char *)sqlite3_column_text(st, col);
    return strdup(s ? s : "");
}

/* The document must be one JSON object; its members go to h->m. */
static int read_members(hf_t *h, const char *text, size_t len) {
    char type[16] = "";
    int rc = -1, r;
    sqlite3_stmt *st = prep(h, "SELECT json_valid(?1), json_type(?1)", text, len);
    if (!st) return -1;
    int valid = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0);
    if (valid) snprintf(type, sizeof type, "%s", (const char *)sqlite3_column_text(st, 1));
    sqlite3_finalize(st);
    if (!valid) {
        /* Python's json.dump writes NaN and Infinity, which JSON does not have */
        int py = memmem(text, len, "NaN", 3) || memmem(text, len, "Infinity", 8);
        return hf_fail(h, "not valid JSON%s: a Hugging Face config.json is one JSON object",
                       py ? " (it holds NaN or Infinity, which Python writes but JSON does "
                       "not allow)" : "");
    }
    if (strcmp(type, "object") != 0)
        return hf_fail(h, "not a Hugging Face config.json: the document is a JSON %s, not an "
                       "object", type);
    if (!(st = prep(h, "SELECT key, type, value, json_quote(value) FROM json_each(?1)", text,
                    len)))
        return -1;
    size_t cap = 0;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (h->n == HF_MAX_MEMBERS) {
            hf_fail(h, "more than %d keys: not a config.json", HF_MAX_MEMBERS);
            goto done;
        }
        if (h->n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            member_t *g = realloc(h->m, nc * sizeof *g);
            if (!g) goto oom;
            h->m = g;
            cap = nc;
        }
        member_t *m = &h->m[h->n];
        memset(m, 0, sizeof *m);
        h->n++;
        m->key = dup_col(st, 0);
        m->text = dup_col(st, 2);
        m->json = dup_col(st, 3);
        if (!m->key || !m->text || !m->json) goto oom;
        snprintf(m->type, sizeof m->type, "%s", (const char *)sqlite3_column_text(st, 1));
        m->is_int = !strcmp(m->type, "integer") &&
                    sqlite3_column_type(st, 2) == SQLITE_INTEGER;
        m->i = sqlite3_column_int64(st, 2);
        /* Python keeps the last of two equal keys, SQLite the first: refuse to guess */
        for (size_t k = 0; k + 1 < h->n; k++)
            if (!strcmp(h->m[k].key, m->key)) {
                hf_fail(h, "key '%s' appears twice", m->key);
                goto done;
            }
    }
    if (r != SQLITE_DONE) {
        hf_fail(h, "cannot read the JSON: %s", sqlite3_errmsg(h->db));
        goto done;
    }
    rc = 0;
    goto done;
oom:
    hf_fail(h, "out of memory reading the JSON");
done:
    sqlite3_finalize(st);
    return rc;
}

/* A member, or NULL when absent or null (the config classes treat both as "use the
 * default"). */
static const member_t *given(const hf_t *h, const char *key) {
    for (size_t i = 0; i < h->n; i++)
        if (!strcmp(h->m[i].key, key)) return strcmp(h->m[i].type, "null") ? &h->m[i] : NULL;
    return NULL;
}

static int present(const hf_t *h, const char *key) {
    for (size_t i = 0; i < h->n; i++)
        if (!strcmp(h->m[i].key, key)) return 1;
    return 0;
}

/* A member's JSON for a message, shortened: a config's lists can be long. */
static const char *shown(const member_t *m, char *buf, size_t len) {
    if (!m) return "null";
    if (strlen(m->json) < 40) return m->json;
    snprintf(buf, len, "%.36s...", m->json);
    return buf;
}

/* ---- typed keys ----------------------------------------------------------------------- */

#define REQUIRED 0   /* get_int's def: the key must be given */
#define OPTIONAL (-1) /* get_int's def: no default, *out left as it was */

/* A positive int32 key. Absent or null: def when > 0, nothing for OPTIONAL, an error for
 * REQUIRED. *seen (may be NULL) says whether the file gave it. */
static int get_int(hf_t *h, const char *key, int32_t def, int32_t *out, int *seen) {
    char buf[48];
    const member_t *m = given(h, key);
    if (seen) *seen = m != NULL;
    if (!m && def != REQUIRED) {
        if (def > 0) *out = def;
        return 0;
    }
    if (!m && !present(h, key)) return hf_fail(h, "key '%s' is missing", key);
    if (!m || !m->is_int || m->i <= 0 || m->i > INT32_MAX)
        return hf_fail(h, "key '%s' must be a positive integer (got %s)", key,
                       shown(m, buf, sizeof buf));
    *out = (int32_t)m->i;
    return 0;
}

static int get_bool(hf_t *h, const char *key, int *out) {
    char buf[48];
    const member_t *m = given(h, key);
    *out = 0;
    if (!m) return 0;
    if (strcmp(m->type, "true") != 0 && strcmp(m->type, "false") != 0)
        return hf_fail(h, "key '%s' must be true or false (got %s)", key,
                       shown(m, buf, sizeof buf));
    *out = !strcmp(m->type, "true");
    return 0;
}

/* torch_dtype, or dtype as newer transformers write it; bf16 when neither. */
static int get_dtype(hf_t *h, int32_t *bytes) {
    char buf[48];
    const char *key = given(h, "torch_dtype") ? "torch_dtype" : "dtype";
    const member_t *m = given(h, key);
    *bytes = 2;
    if (!m) return 0;
    if (strcmp(m->type, "text") != 0)
        return hf_fail(h, "key '%s' must be a type name such as \"bfloat16\" (got %s)", key,
                       shown(m, buf, sizeof buf));
    if (!strcmp(m->text, "bfloat16") || !strcmp(m->text, "float16")) return 0;
    if (!strcmp(m->text, "float32")) {
        *bytes = 4;
        return 0;
    }
    return hf_fail(h, "key '%s': %s is not supported (bfloat16, float16 or float32: the "
                   "simulator models 2- and 4-byte weights; a later issue adds other "
                   "precisions)", key, shown(m, buf, sizeof buf));
}

/* ---- the architecture ----------------------------------------------------------------- */

static int get_arch(hf_t *h) {
    char buf[48], name[128] = "";
    const member_t *m = given(h, "architectures");
    int rc = -1;
    if (!m && !present(h, "architectures"))
        return hf_fail(h, "key 'architectures' is missing (supported: %s)", supported);
    if (!m || strcmp(m->type, "array") != 0)
        return hf_fail(h, "key 'architectures' must be a list of class names (got %s)",
                       shown(m, buf, sizeof buf));
    sqlite3_stmt *st = prep(h, "SELECT json_type(?1, '$[0]'), json_extract(?1, '$[0]')",
                            m->text, strlen(m->text));
    if (!st) return -1;
    if (sqlite3_step(st) != SQLITE_ROW) {
        hf_fail(h, "cannot read key 'architectures': %s", sqlite3_errmsg(h->db));
        goto done;
    }
    const char *type = (const char *)sqlite3_column_text(st, 0);
    if (!type) {
        hf_fail(h, "key 'architectures' is an empty list (supported: %s)", supported);
        goto done;
    }
    if (strcmp(type, "text") != 0) {
        hf_fail(h, "key 'architectures' must be a list of class names (got %s)",
                shown(m, buf, sizeof buf));
        goto done;
    }
    snprintf(name, sizeof name, "%s", (const char *)sqlite3_column_text(st, 1));
    for (int i = 0; i < N_ARCHS; i++)
        if (!strcmp(archs[i].arch, name)) h->arch = &archs[i];
    if (!h->arch && !strcmp(name, "Qwen2MoeForCausalLM")) {
        /* transformers builds a shared expert (and its gate) in every sparse layer, even
         * at size 0, so no Qwen2-MoE config maps onto the shape */
        hf_fail(h, "shared_expert_intermediate_size: Qwen2MoeForCausalLM has a shared expert "
                "in every layer, which the model shape does not have yet (a later issue adds "
                "shared experts)");
        goto done;
    }
    if (!h->arch) {
        hf_fail(h, "architectures: '%s' is not supported (supported: %s)", name, supported);
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

/* Qwen-MoE: a layer is sparse unless mlp_only_layers names it or (index + 1) is not a
 * multiple of decoder_sparse_step; every layer must be sparse. */
static int check_all_sparse(hf_t *h, int32_t n_layers) {
    char buf[48];
    int32_t step;
    int rc = -1, r;
    if (get_int(h, "decoder_sparse_step", 1, &step, NULL) != 0) return -1;
    if (step != 1)
        return hf_fail(h, "key 'decoder_sparse_step' is %d: only every %dth layer is a "
                       "mixture of experts, and dense layers between sparse ones are not "
                       "supported yet (a later issue adds them)", (int)step, (int)step);
    const member_t *m = given(h, "mlp_only_layers");
    if (!m) return 0;
    if (strcmp(m->type, "array") != 0)
        return hf_fail(h, "key 'mlp_only_layers' must be a list of layer indices (got %s)",
                       shown(m, buf, sizeof buf));
    sqlite3_stmt *st = prep(h, "SELECT type, value FROM json_each(?1)", m->text,
                            strlen(m->text));
    if (!st) return -1;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(st, 0);
        if (strcmp(type, "integer") != 0 || sqlite3_column_type(st, 1) != SQLITE_INTEGER) {
            hf_fail(h, "key 'mlp_only_layers' must be a list of layer indices (got %s)",
                    shown(m, buf, sizeof buf));
            goto done;
        }
        int64_t layer = sqlite3_column_int64(st, 1);
        /* an index past the last layer makes nothing dense (transformers ignores it) */
        if (layer >= 0 && layer < n_layers) {
            hf_fail(h, "key 'mlp_only_layers' makes layer %lld dense: dense layers between "
                    "sparse ones are not supported yet (a later issue adds them)",
                    (long long)layer);
            goto done;
        }
    }
    if (r != SQLITE_DONE) {
        hf_fail(h, "cannot read key 'mlp_only_layers': %s", sqlite3_errmsg(h->db));
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

static int get_experts(hf_t *h, preset_model_t *m) {
    if (h->arch->kind == K_MIXTRAL) {
        m->moe_d_ff = m->d_ff;  /* Mixtral's intermediate_size is each expert's */
        if (get_int(h, "num_local_experts", REQUIRED, &m->n_experts, NULL) != 0) return -1;
    } else {
        /* newer transformers map num_experts onto num_local_experts when saving */
        const char *key = !given(h, "num_experts") && given(h, "num_local_experts")
                              ? "num_local_experts" : "num_experts";
        if (get_int(h, key, REQUIRED, &m->n_experts, NULL) != 0) return -1;
        if (get_int(h, "moe_intermediate_size", REQUIRED, &m->moe_d_ff, NULL) != 0) return -1;
        if (check_all_sparse(h, m->n_layers) != 0) return -1;
    }
    return get_int(h, "num_experts_per_tok", REQUIRED, &m->experts_per_tok, NULL);
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
    const member_t *m = given(h, key);
    char type[32] = "";
    if (!m || strcmp(m->type, "object") != 0) return;
    sqlite3_stmt *st = prep(h, "SELECT coalesce(json_extract(?1, '$.rope_type'), "
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

/* The flags read are checked as any key is: a wrong type is refused, naming it. */
static int note_extras(hf_t *h, const preset_model_t *m) {
    const member_t *w = given(h, "sliding_window");
    int on = (h->arch->extras & X_WINDOW) != 0, attn_bias = 0, mlp_bias = 0;
    double qkv = ((double)m->n_heads + 2.0 * m->n_kv_heads) * m->head_dim;
    if ((h->arch->extras & X_WINDOW_IF_USED) && get_bool(h, "use_sliding_window", &on) != 0)
        return -1;
    if ((h->arch->extras & X_BIAS_KEYS) && (get_bool(h, "attention_bias", &attn_bias) != 0 ||
                                            get_bool(h, "mlp_bias", &mlp_bias) != 0))
        return -1;
    if (on && w && w->is_int)
        add_note(h, "sliding_window %lld (attention is costed over the whole context, and "
                 "the KV cache holds every token)", (long long)w->i);
    note_rope(h, "rope_scaling");
    note_rope(h, "rope_parameters");
    if (h->arch->extras & X_QKV_BIAS)
        add_note(h, "q/k/v biases (%.0f parameters a layer, not counted in the weights)", qkv);
    if (attn_bias)
        add_note(h, "attention_bias (%.0f parameters a layer, not counted in the weights)",
                 qkv + m->d_model);
    if (mlp_bias)
        add_note(h, "mlp_bias (%.0f parameters a layer, not counted in the weights)",
                 2.0 * m->d_ff + m->d_model);
    if (h->arch->extras & X_QK_NORM)
        add_note(h, "q/k norms (2 x head_dim = %d parameters a layer, not counted in the "
                 "weights)", 2 * (int)m->head_dim);
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
    char verr[512], keys[256] = "";
    const char *map[][2] = {
        {"n_layers", "num_hidden_layers"}, {"d_model", "hidden_size"},
        {"n_heads", "num_attention_heads"}, {"n_kv_heads", "num_key_value_heads"},
        {"head_dim", "head_dim"}, {"d_ff", "intermediate_size"}, {"vocab", "vocab_size"},
        {"max_seq", "max_position_embeddings"},
        {"n_experts", h->arch->kind == K_MIXTRAL ? "num_local_experts" : "num_experts"},
        {"experts_per_tok", "num_experts_per_tok"},
        {"moe_d_ff",
         h->arch->kind == K_MIXTRAL ? "intermediate_size" : "moe_intermediate_size"},
    };
    if (preset_model_validate(m, verr, sizeof verr) == 0) return 0;
    const char *msg = verr;
    size_t nl = strlen(m->name);
    if (!strncmp(verr, m->name, nl) && !strncmp(verr + nl, ": ", 2)) msg = verr + nl + 2;
    size_t used = 0;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (!word_in(msg, map[i][0])) continue;
        int w = snprintf(keys + used, sizeof keys - used, "%s%s is %s", used ? ", " : "",
                         map[i][0], map[i][1]);
        if (w < 0 || (size_t)w >= sizeof keys - used) break;
        used += (size_t)w;
    }
    return hf_fail(h, "%s%s%s%s", msg, used ? " (in config.json terms: " : "", keys,
                   used ? ")" : "");
}

/* ---- entry points --------------------------------------------------------------------- */

int hfcfg_parse(const char *path, const char *text, size_t len, preset_model_t *out,
                char *note, size_t notelen, char *err, size_t errlen) {
    hf_t h;
    preset_model_t m;
    char scratch[8];
    int rc = -1, seen_hd = 0, tied = 0;
    memset(&h, 0, sizeof h);
    memset(&m, 0, sizeof m);
    h.path = path ? path : "(config)";
    h.err = err && errlen ? err : scratch;
    h.errlen = err && errlen ? errlen : sizeof scratch;
    h.err[0] = '\0';
    if (note && notelen) note[0] = '\0';
    if (len > HF_MAX_BYTES) {
        hf_fail(&h, "larger than %zu MiB: not a config.json", HF_MAX_BYTES >> 20);
        goto done;
    }
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) {  /* a UTF-8 byte-order mark */
        text += 3;
        len -= 3;
    }
    if (sqlite3_open_v2(":memory:", &h.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY,
                        NULL) != SQLITE_OK) {
        hf_fail(&h, "cannot open SQLite to read the JSON");
        goto done;
    }
    if (read_members(&h, text, len) != 0 || get_arch(&h) != 0) goto done;
    /* quantized checkpoints carry this object; their weight bytes are not dtype_bytes */
    if (given(&h, "quantization_config")) {
        hf_fail(&h, "quantization_config: quantized weights are not supported: the simulator "
                "models bf16/fp16/fp32 weights only (a later issue adds precisions)");
        goto done;
    }
    name_from_path(h.path, m.name);
    if (get_int(&h, "num_hidden_layers", REQUIRED, &m.n_layers, NULL) != 0 ||
        get_int(&h, "hidden_size", REQUIRED, &m.d_model, NULL) != 0 ||
        get_int(&h, "num_attention_heads", REQUIRED, &m.n_heads, NULL) != 0 ||
        get_int(&h, "num_key_value_heads", m.n_heads, &m.n_kv_heads, NULL) != 0 ||
        get_int(&h, "intermediate_size", REQUIRED, &m.d_ff, NULL) != 0 ||
        get_int(&h, "vocab_size", REQUIRED, &m.vocab, NULL) != 0 ||
        get_int(&h, "max_position_embeddings", REQUIRED, &m.max_seq, NULL) != 0 ||
        get_bool(&h, "tie_word_embeddings", &tied) != 0 || get_dtype(&h, &m.dtype_bytes) != 0)
        goto done;
    m.tied_embeddings = tied;
    if (h.arch->head_dim > 0) {
        if (get_int(&h, "head_dim", h.arch->head_dim, &m.head_dim, NULL) != 0) goto done;
    } else {
        if (get_int(&h, "head_dim", OPTIONAL, &m.head_dim, &seen_hd) != 0) goto done;
        if (!seen_hd) {
            if (m.d_model % m.n_heads != 0) {
                hf_fail(&h, "key 'head_dim' is missing and hidden_size (%d) is not a multiple "
                        "of num_attention_heads (%d)", (int)m.d_model, (int)m.n_heads);
                goto done;
            }
            m.head_dim = m.d_model / m.n_heads;
        }
    }
    if (h.arch->kind != K_DENSE && get_experts(&h, &m) != 0) goto done;
    if (validate(&h, &m) != 0 || note_extras(&h, &m) != 0) goto done;
    if (note && notelen) snprintf(note, notelen, "%s", h.note);
    *out = m;
    rc = 0;
done:
    for (size_t i = 0; i < h.n; i++) {
        free(h.m[i].key);
        free(h.m[i].text);
        free(h.m[i].json);
    }
    free(h.m);
    sqlite3_close(h.db);
    return rc;
}

int hfcfg_load(const char *path, preset_model_t *out, char *note, size_t notelen, char *err,
               size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    int rc = -1;
    if (note && notelen) note[0] = '\0';
    if (read_whole(path, &text, &len, err, errlen) != 0) goto done;
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
