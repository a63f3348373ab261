/* hfconfig_doc: reading a config.json's members for hfconfig.c (sim/hfconfig_internal.h):
 * the document parsed once by SQLite's json_each into members, looked up by key (in
 * text_config first for a vision wrapper), and read as typed values with the messages that
 * name the key and what it held. */
#include "sim/hfconfig_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim/errf.h"
#include "sim/kvfile.h"

int hfd_fail(hf_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int hfd_fail(hf_t *h, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return errf(h->err, h->errlen, "%s: %s", h->path, msg);
}


/* ---- reading the document ------------------------------------------------------------- */

int hfd_read_whole(const char *path, char **text, size_t *len, char *err, size_t errlen) {
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

sqlite3_stmt *hfd_prep(hf_t *h, const char *sql, const char *json, size_t len) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(h->db, sql, -1, &st, NULL) != SQLITE_OK) {
        hfd_fail(h, "cannot read the JSON: %s", sqlite3_errmsg(h->db));
        return NULL;
    }
    sqlite3_bind_text(st, 1, json, (int)len, SQLITE_STATIC);
    return st;
}

char *hfd_dup_col(sqlite3_stmt *st, int col) {
    const char *s = (const char *)sqlite3_column_text(st, col);
    return strdup(s ? s : "");
}

void hfd_free_members(member_t *m, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(m[i].key);
        free(m[i].text);
        free(m[i].json);
    }
    free(m);
}

/* The document (or text_config's object) must be one JSON object; its members go to h->m,
 * named with pre in messages. */
int hfd_read_members(hf_t *h, const char *text, size_t len, const char *pre) {
    char type[16] = "";
    int rc = -1, r;
    sqlite3_stmt *st = hfd_prep(h, "SELECT json_valid(?1), json_type(?1)", text, len);
    if (!st) return -1;
    int valid = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0);
    if (valid) snprintf(type, sizeof type, "%s", (const char *)sqlite3_column_text(st, 1));
    sqlite3_finalize(st);
    if (!valid) {
        /* Python's json.dump writes NaN and Infinity, which JSON does not have */
        int py = memmem(text, len, "NaN", 3) || memmem(text, len, "Infinity", 8);
        return hfd_fail(h, "not valid JSON%s: a Hugging Face config.json is one JSON object",
                       py ? " (it holds NaN or Infinity, which Python writes but JSON does "
                       "not allow)" : "");
    }
    if (strcmp(type, "object") != 0)
        return hfd_fail(h, "not a Hugging Face config.json: the document is a JSON %s, not an "
                       "object", type);
    if (!(st = hfd_prep(h, "SELECT key, type, value, json_quote(value) FROM json_each(?1)", text,
                    len)))
        return -1;
    size_t cap = 0;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (h->n == HF_MAX_MEMBERS) {
            hfd_fail(h, "more than %d keys: not a config.json", HF_MAX_MEMBERS);
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
        m->pre = pre;
        m->key = hfd_dup_col(st, 0);
        m->text = hfd_dup_col(st, 2);
        m->json = hfd_dup_col(st, 3);
        if (!m->key || !m->text || !m->json) goto oom;
        snprintf(m->type, sizeof m->type, "%s", (const char *)sqlite3_column_text(st, 1));
        m->is_int = !strcmp(m->type, "integer") &&
                    sqlite3_column_type(st, 2) == SQLITE_INTEGER;
        m->i = sqlite3_column_int64(st, 2);
        /* Python keeps the last of two equal keys, SQLite the first: refuse to guess */
        for (size_t k = 0; k + 1 < h->n; k++)
            if (!strcmp(h->m[k].key, m->key)) {
                hfd_fail(h, "key '%s%s' appears twice", pre, m->key);
                goto done;
            }
    }
    if (r != SQLITE_DONE) {
        hfd_fail(h, "cannot read the JSON: %s", sqlite3_errmsg(h->db));
        goto done;
    }
    rc = 0;
    goto done;
oom:
    hfd_fail(h, "out of memory reading the JSON");
done:
    sqlite3_finalize(st);
    return rc;
}

/* Keys a multimodal wrapper holds beside its text_config, not inside it. */
int hfd_wrapper_key(const char *key) {
    return !strcmp(key, "torch_dtype") || !strcmp(key, "dtype") ||
           !strcmp(key, "tie_word_embeddings") || !strcmp(key, "quantization_config");
}

/* A member whether null or not: text_config's, else (for a wrapper's keys) the
 * document's. */
const member_t *hfd_find(const hf_t *h, const char *key) {
    for (size_t i = 0; i < h->n; i++)
        if (!strcmp(h->m[i].key, key)) return &h->m[i];
    if (h->top && hfd_wrapper_key(key))
        for (size_t i = 0; i < h->ntop; i++)
            if (!strcmp(h->top[i].key, key)) return &h->top[i];
    return NULL;
}

/* A member, or NULL when absent or null (the config classes treat both as "use the
 * default"). */
const member_t *hfd_given(const hf_t *h, const char *key) {
    const member_t *m = hfd_find(h, key);
    return m && strcmp(m->type, "null") ? m : NULL;
}

int hfd_present(const hf_t *h, const char *key) { return hfd_find(h, key) != NULL; }

/* How a message names key: with "text_config." when it is (or, absent, would be) there. */
const char *hfd_pre_of(const hf_t *h, const char *key) {
    const member_t *m = hfd_find(h, key);
    return m ? m->pre : h->pre;
}

/* A member's JSON for a message, shortened: a config's lists can be long. */
const char *hfd_shown(const member_t *m, char *buf, size_t len) {
    if (!m) return "null";
    if (strlen(m->json) < 40) return m->json;
    snprintf(buf, len, "%.36s...", m->json);
    return buf;
}

/* ---- typed keys ----------------------------------------------------------------------- */


/* A positive int32 key. Absent or null: def when > 0, nothing for HFD_OPTIONAL, an error for
 * HFD_REQUIRED. *seen (may be NULL) says whether the file gave it. */
int hfd_int(hf_t *h, const char *key, int32_t def, int32_t *out, int *seen) {
    char buf[48];
    const member_t *m = hfd_given(h, key);
    const char *pre = hfd_pre_of(h, key);
    if (seen) *seen = m != NULL;
    if (!m && def != HFD_REQUIRED) {
        if (def > 0) *out = def;
        return 0;
    }
    if (!m && !hfd_present(h, key)) return hfd_fail(h, "key '%s%s' is missing", pre, key);
    if (!m || !m->is_int || m->i <= 0 || m->i > INT32_MAX)
        return hfd_fail(h, "key '%s%s' must be a positive integer (got %s)", pre, key,
                       hfd_shown(m, buf, sizeof buf));
    *out = (int32_t)m->i;
    return 0;
}

/* A count that may be 0 (first_k_dense_replace, max_window_layers): def when absent or
 * null and def >= 0; required when def < 0. */
int hfd_count(hf_t *h, const char *key, int32_t def, int32_t *out) {
    char buf[48];
    const member_t *m = hfd_given(h, key);
    const char *pre = hfd_pre_of(h, key);
    if (!m && def >= 0) {
        *out = def;
        return 0;
    }
    if (!m && !hfd_present(h, key)) return hfd_fail(h, "key '%s%s' is missing", pre, key);
    if (!m || !m->is_int || m->i < 0 || m->i > INT32_MAX)
        return hfd_fail(h, "key '%s%s' must be a non-negative integer (got %s)", pre, key,
                       hfd_shown(m, buf, sizeof buf));
    *out = (int32_t)m->i;
    return 0;
}

/* A size where null means "none" (DeepSeek's q_lora_rank, n_shared_experts): the key must
 * be there, null giving 0; what null means goes into the missing key's message. */
int hfd_size_or_null(hf_t *h, const char *key, const char *null_means, int32_t *out) {
    *out = 0;
    if (!hfd_present(h, key))
        return hfd_fail(h, "key '%s%s' is missing (null for %s)", hfd_pre_of(h, key), key,
                       null_means);
    return hfd_given(h, key) ? hfd_int(h, key, HFD_REQUIRED, out, NULL) : 0;
}

/* A flag; absent or null leaves *out as it was (the caller's default). */
int hfd_bool(hf_t *h, const char *key, int *out) {
    char buf[48];
    const member_t *m = hfd_given(h, key);
    if (!m) return 0;
    if (strcmp(m->type, "true") != 0 && strcmp(m->type, "false") != 0)
        return hfd_fail(h, "key '%s%s' must be true or false (got %s)", m->pre, key,
                       hfd_shown(m, buf, sizeof buf));
    *out = !strcmp(m->type, "true");
    return 0;
}

/* torch_dtype, or dtype as newer transformers write it; bf16 when neither. */
int hfd_dtype(hf_t *h, int32_t *bytes) {
    char buf[48];
    const char *key = hfd_given(h, "torch_dtype") ? "torch_dtype" : "dtype";
    const member_t *m = hfd_given(h, key);
    *bytes = 2;
    if (!m) return 0;
    if (strcmp(m->type, "text") != 0)
        return hfd_fail(h, "key '%s%s' must be a type name such as \"bfloat16\" (got %s)",
                       m->pre, key, hfd_shown(m, buf, sizeof buf));
    if (!strcmp(m->text, "bfloat16") || !strcmp(m->text, "float16")) return 0;
    if (!strcmp(m->text, "float32")) {
        *bytes = 4;
        return 0;
    }
    return hfd_fail(h, "key '%s%s': %s is not supported (bfloat16, float16 or float32: the "
                   "simulator models 2- and 4-byte weights; a later issue adds other "
                   "precisions)", m->pre, key, hfd_shown(m, buf, sizeof buf));
}
