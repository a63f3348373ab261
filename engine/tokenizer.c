/* tokenizer: sentencepiece-style BPE over a scored vocabulary (llama2.c's algorithm).
 *
 * Both sources are normalised into one representation at load: pieces with a plain space
 * for U+2581, a byte value for <0xNN> pieces, and a "special" flag for pieces that are not
 * text (llama2.c's ids 0..2 = <unk>, BOS, EOS; GGUF's unknown, control and unused types).
 * Special pieces are left out of the lookup table and decode to "", so the two sources
 * encode and decode identically although llama2.c spells BOS "\n<s>\n" and GGUF "<s>". */
#include "engine/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gguf.h"

#define MAX_PIECE_LEN 65536
#define MAX_VOCAB (1 << 22)

struct tok {
    int32_t n;
    char **piece;         /* [n], NUL-terminated (a piece holds no NUL: <0x00> is text) */
    uint32_t *len;        /* [n] */
    float *score;         /* [n] */
    int16_t *byte_val;    /* [n]: 0..255 for <0xNN> pieces, -1 otherwise */
    uint8_t *special;     /* [n] */
    int32_t *sorted;      /* ids of non-special pieces, sorted by bytes */
    int32_t n_sorted;
    int32_t byte_id[256]; /* the token of each raw byte, -1 if none */
    uint32_t max_len;
    char buf[2];          /* tok_decode's one-byte result */
};

static int cmp_bytes(const char *a, size_t al, const char *b, size_t bl) {
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al > bl) - (al < bl);
}

static int cmp_ids(const void *x, const void *y, void *ctx) {
    const tok_t *t = ctx;
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    int c = cmp_bytes(t->piece[a], t->len[a], t->piece[b], t->len[b]);
    return c ? c : (a > b) - (a < b); /* duplicates: the lowest id first, and found first */
}

/* The lowest id whose piece is exactly s[0..len), or -1. */
static int32_t lookup(const tok_t *t, const char *s, size_t len) {
    int32_t lo = 0, hi = t->n_sorted;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2, id = t->sorted[mid];
        if (cmp_bytes(t->piece[id], t->len[id], s, len) < 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo < t->n_sorted) {
        int32_t id = t->sorted[lo];
        if (cmp_bytes(t->piece[id], t->len[id], s, len) == 0) return id;
    }
    return -1;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static tok_t *tok_new(int32_t n) {
    tok_t *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->n = n;
    t->piece = calloc((size_t)n, sizeof *t->piece);
    t->len = calloc((size_t)n, sizeof *t->len);
    t->score = calloc((size_t)n, sizeof *t->score);
    t->byte_val = calloc((size_t)n, sizeof *t->byte_val);
    t->special = calloc((size_t)n, sizeof *t->special);
    t->sorted = calloc((size_t)n, sizeof *t->sorted);
    if (!t->piece || !t->len || !t->score || !t->byte_val || !t->special || !t->sorted) {
        tok_free(t);
        return NULL;
    }
    return t;
}

/* Stores piece i, turning U+2581 into a space. */
static int set_piece(tok_t *t, int32_t i, const char *s, size_t len) {
    char *p = malloc(len + 1);
    if (!p) return -1;
    size_t o = 0;
    for (size_t k = 0; k < len; k++) {
        if (k + 2 < len && (uint8_t)s[k] == 0xE2 && (uint8_t)s[k + 1] == 0x96 &&
            (uint8_t)s[k + 2] == 0x81) {
            p[o++] = ' ';
            k += 2;
        } else {
            p[o++] = s[k];
        }
    }
    p[o] = '\0';
    t->piece[i] = p;
    t->len[i] = (uint32_t)o;
    return 0;
}

/* Byte values, the lookup table, the byte fallback table. */
static void finish(tok_t *t) {
    t->n_sorted = 0;
    t->max_len = 1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    for (int32_t i = 0; i < t->n; i++) {
        const char *p = t->piece[i];
        t->byte_val[i] = -1;
        if (t->len[i] == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>' &&
            hexval(p[3]) >= 0 && hexval(p[4]) >= 0) {
            int b = hexval(p[3]) * 16 + hexval(p[4]);
            t->byte_val[i] = (int16_t)b;
            if (t->byte_id[b] < 0 && !t->special[i]) t->byte_id[b] = i;
        }
        if (t->len[i] > t->max_len) t->max_len = t->len[i];
        if (!t->special[i]) t->sorted[t->n_sorted++] = i;
    }
    /* llama2.c's fallback when a vocabulary has no <0xNN> pieces: byte b is token b + 3. */
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0 && b + 3 < t->n) t->byte_id[b] = b + 3;
    qsort_r(t->sorted, (size_t)t->n_sorted, sizeof *t->sorted, cmp_ids, t);
}

int tok_load_llama2c(const char *path, int32_t vocab, tok_t **out, char *err, size_t errlen) {
    int rc = -1;
    tok_t *t = NULL;
    char *buf = NULL;
    *out = NULL;
    if (vocab <= 0 || vocab > MAX_VOCAB) {
        snprintf(err, errlen, "%s: vocabulary size %d is out of range", path, (int)vocab);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open tokenizer: %s", path, strerror(errno));
        return -1;
    }
    int32_t max_len;
    if (fread(&max_len, 4, 1, f) != 1) {
        snprintf(err, errlen, "%s: too short for a llama2.c tokenizer", path);
        goto done;
    }
    if (!(t = tok_new(vocab)) || !(buf = malloc(MAX_PIECE_LEN))) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto done;
    }
    for (int32_t i = 0; i < vocab; i++) {
        int32_t len;
        if (fread(&t->score[i], 4, 1, f) != 1 || fread(&len, 4, 1, f) != 1) {
            snprintf(err, errlen, "%s: truncated at piece %d of %d (does the tokenizer match "
                     "the model's vocabulary?)", path, (int)i, (int)vocab);
            goto done;
        }
        if (len < 0 || len > MAX_PIECE_LEN || (size_t)len != fread(buf, 1, (size_t)len, f)) {
            snprintf(err, errlen, "%s: piece %d: %s length %d", path, (int)i,
                     len < 0 || len > MAX_PIECE_LEN ? "absurd" : "truncated at", (int)len);
            goto done;
        }
        if (memchr(buf, '\0', (size_t)len)) {
            snprintf(err, errlen, "%s: piece %d contains a NUL byte", path, (int)i);
            goto done;
        }
        if (set_piece(t, i, buf, (size_t)len) != 0) {
            snprintf(err, errlen, "%s: out of memory", path);
            goto done;
        }
        t->special[i] = i <= 2;
    }
    finish(t);
    *out = t;
    t = NULL;
    rc = 0;
done:
    free(buf);
    tok_free(t);
    fclose(f);
    return rc;
}

/* A GGUF array of n numbers under key (optional): -1 with a message when it has another
 * length or element type. */
static int num_array(const gguf_t *g, const char *key, uint64_t n, const gguf_kv_t **out,
                     char *err, size_t errlen) {
    const gguf_kv_t *kv = gguf_find(g, key);
    *out = NULL;
    if (!kv) return 0;
    if (kv->type != GGUF_ARRAY || kv->arr_n != n || kv->arr_type == GGUF_STRING ||
        kv->arr_type == GGUF_ARRAY) {
        snprintf(err, errlen, "%s: %s is not an array of %llu numbers", g->path, key,
                 (unsigned long long)n);
        return -1;
    }
    *out = kv;
    return 0;
}

int tok_load_gguf(const char *path, tok_t **out, char *err, size_t errlen) {
    int rc = -1;
    tok_t *t = NULL;
    gguf_str_t *strs = NULL;
    gguf_t *g;
    *out = NULL;
    if (gguf_open(path, &g, err, errlen) != 0) return -1;
    char model[64];
    /* a placeholder (quantize.c) stands in for a model without one: ids only */
    if (gguf_get_str(g, "twinserve.tokenizer", model, sizeof model, err, errlen) > 0 &&
        !strcmp(model, "placeholder")) {
        rc = 0;
        goto done;
    }
    int r = gguf_get_str(g, "tokenizer.ggml.model", model, sizeof model, err, errlen);
    if (r <= 0 || strcmp(model, "llama") != 0) {
        if (r >= 0)
            snprintf(err, errlen, "%s: tokenizer.ggml.model is %s%s%s (only \"llama\" is "
                     "supported)", path, r ? "\"" : "missing", r ? model : "", r ? "\"" : "");
        goto done;
    }
    const gguf_kv_t *tk = gguf_find(g, "tokenizer.ggml.tokens"), *sc, *ty;
    if (!tk || tk->type != GGUF_ARRAY || tk->arr_type != GGUF_STRING || tk->arr_n == 0 ||
        tk->arr_n > MAX_VOCAB) {
        snprintf(err, errlen, "%s: tokenizer.ggml.tokens is missing or not an array of 1..%d "
                 "strings", path, MAX_VOCAB);
        goto done;
    }
    if (num_array(g, "tokenizer.ggml.scores", tk->arr_n, &sc, err, errlen) != 0 ||
        num_array(g, "tokenizer.ggml.token_type", tk->arr_n, &ty, err, errlen) != 0)
        goto done;
    const char *ids[2] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
    for (int k = 0; k < 2; k++) {
        int64_t v;
        int q = gguf_get_int(g, ids[k], &v, err, errlen);
        if (q < 0) goto done;
        if (q > 0 && v != (k ? TOK_EOS : TOK_BOS)) {
            snprintf(err, errlen, "%s: %s = %lld (this tokenizer needs BOS 1 and EOS 2)", path,
                     ids[k], (long long)v);
            goto done;
        }
    }
    int32_t n = (int32_t)tk->arr_n;
    if (!(t = tok_new(n)) || !(strs = malloc((size_t)n * sizeof *strs))) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto done;
    }
    gguf_arr_strings(tk, strs);
    for (int32_t i = 0; i < n; i++) {
        if (strs[i].len > MAX_PIECE_LEN || memchr(strs[i].p, '\0', strs[i].len)) {
            snprintf(err, errlen, "%s: token %d is too long or contains a NUL byte", path, (int)i);
            goto done;
        }
        if (set_piece(t, i, strs[i].p, strs[i].len) != 0) {
            snprintf(err, errlen, "%s: out of memory", path);
            goto done;
        }
        t->score[i] = sc ? (float)gguf_arr_num(sc, (uint64_t)i) : 0.0f;
        /* llama.cpp token types: 2 unknown, 3 control, 5 unused are not text. */
        int type = ty ? (int)gguf_arr_num(ty, (uint64_t)i) : 1;
        t->special[i] = ty ? (type == 2 || type == 3 || type == 5) : i <= 2;
    }
    finish(t);
    *out = t;
    t = NULL;
    rc = 0;
done:
    free(strs);
    tok_free(t);
    gguf_close(g);
    return rc;
}

void tok_free(tok_t *t) {
    if (!t) return;
    if (t->piece)
        for (int32_t i = 0; i < t->n; i++) free(t->piece[i]);
    free(t->piece);
    free(t->len);
    free(t->score);
    free(t->byte_val);
    free(t->special);
    free(t->sorted);
    free(t);
}

int32_t tok_vocab(const tok_t *t) {
    return t->n;
}

const char *tok_piece(const tok_t *t, int32_t id, uint32_t *len, float *score, int *special) {
    *len = t->len[id];
    *score = t->score[id];
    *special = t->special[id];
    return t->piece[id];
}

/* The merge of tokens a and b, or -1. buf holds max_len * 2 bytes. */
static int32_t pair_id(const tok_t *t, int32_t a, int32_t b, char *buf) {
    memcpy(buf, t->piece[a], t->len[a]);
    memcpy(buf + t->len[a], t->piece[b], t->len[b]);
    return lookup(t, buf, (size_t)t->len[a] + t->len[b]);
}

/* A candidate merge of the symbols at left and right (positions in the input, which keep
 * their order as symbols merge), valid while both still hold lid and rid side by side. */
typedef struct {
    float score;
    int32_t left, right, lid, rid, mid;
} cand_t;

/* The heap's order: the highest score first, then the leftmost, as llama2.c's scan. */
static int cand_before(const cand_t *a, const cand_t *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(cand_t *h, size_t *n, cand_t c) {
    size_t i = (*n)++;
    for (; i > 0 && cand_before(&c, &h[(i - 1) / 2]); i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = c;
}

static cand_t heap_pop(cand_t *h, size_t *n) {
    cand_t top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_before(&h[c + 1], &h[c])) c++;
        if (!cand_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

static void push_pair(const tok_t *t, cand_t *h, size_t *n, const int32_t *tk, int32_t a,
                      int32_t b, char *buf) {
    if (a < 0 || b < 0) return;
    int32_t id = pair_id(t, tk[a], tk[b], buf);
    if (id >= 0) heap_push(h, n, (cand_t){t->score[id], a, b, tk[a], tk[b], id});
}

/* Greedy merges: repeatedly the adjacent pair whose merged piece scores highest (leftmost
 * on ties), exactly llama2.c's result, in O(n log n) with a heap of candidates (stale ones
 * are skipped when popped) and a linked list of live symbols. Compacts tk[*m]. */
static int merge_all(const tok_t *t, int32_t *tk, size_t *m, char *buf) {
    size_t n = *m, nh = 0;
    if (n < 2) return 0;
    int32_t *nxt = malloc(n * sizeof *nxt), *prv = malloc(n * sizeof *prv);
    cand_t *h = malloc(3 * n * sizeof *h); /* n - 1 at first, at most 2 per merge */
    if (!nxt || !prv || !h) {
        free(nxt), free(prv), free(h);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        prv[i] = (int32_t)i - 1;
        nxt[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, h, &nh, tk, (int32_t)i, (int32_t)i + 1, buf);
    while (nh > 0) {
        cand_t c = heap_pop(h, &nh);
        if (nxt[c.left] != c.right || tk[c.left] != c.lid || tk[c.right] != c.rid) continue;
        tk[c.left] = c.mid;
        tk[c.right] = -1;
        nxt[c.left] = nxt[c.right];
        if (nxt[c.right] >= 0) prv[nxt[c.right]] = c.left;
        push_pair(t, h, &nh, tk, prv[c.left], c.left, buf);
        push_pair(t, h, &nh, tk, c.left, nxt[c.left], buf);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = nxt[i]) tk[k++] = tk[i];
    *m = k;
    free(nxt), free(prv), free(h);
    return 0;
}

int tok_encode(tok_t *t, const char *text, int bos, int eos, int32_t *ids, int32_t cap,
               int32_t *n, char *err, size_t errlen) {
    int rc = -1;
    *n = 0;
    if (!text) {
        snprintf(err, errlen, "tok_encode: no text");
        return -1;
    }
    size_t tl = strlen(text);
    /* One token per byte at most, plus the dummy prefix. */
    int32_t *tk = malloc((tl + 2) * sizeof *tk);
    char *buf = malloc((size_t)t->max_len * 2 + 1);
    if (!tk || !buf || tl > INT32_MAX / 4) {
        snprintf(err, errlen, "tok_encode: out of memory for %zu bytes of text", tl);
        goto done;
    }
    size_t m = 0;
    /* The dummy prefix joins the text as a leading space (one code point), as
     * sentencepiece's add_dummy_prefix. */
    for (size_t i = 0; tl > 0 && i <= tl;) {
        const char *s = i == 0 ? " " : text + i - 1;
        size_t cl = 1;
        if (i > 0)
            while (cl < 4 && i - 1 + cl < tl && ((uint8_t)s[cl] & 0xC0) == 0x80) cl++;
        int32_t id = lookup(t, s, cl);
        if (id >= 0) {
            tk[m++] = id;
        } else {
            for (size_t k = 0; k < cl; k++) {
                id = t->byte_id[(uint8_t)s[k]];
                if (id < 0) {
                    snprintf(err, errlen, "tok_encode: byte 0x%02X at offset %zu has no token "
                             "in this vocabulary", (unsigned)(uint8_t)s[k], i ? i - 1 + k : 0);
                    goto done;
                }
                tk[m++] = id;
            }
        }
        i += cl;
    }
    if (merge_all(t, tk, &m, buf) != 0) {
        snprintf(err, errlen, "tok_encode: out of memory for %zu bytes of text", tl);
        goto done;
    }
    size_t total = m + (bos ? 1 : 0) + (eos ? 1 : 0);
    if (total > (size_t)(cap < 0 ? 0 : cap)) {
        snprintf(err, errlen, "tok_encode: %zu tokens do not fit in %d", total, (int)cap);
        goto done;
    }
    int32_t k = 0;
    if (bos) ids[k++] = TOK_BOS;
    memcpy(ids + k, tk, m * sizeof *tk);
    k += (int32_t)m;
    if (eos) ids[k++] = TOK_EOS;
    *n = k;
    rc = 0;
done:
    free(tk);
    free(buf);
    return rc;
}

const char *tok_decode(tok_t *t, int32_t prev, int32_t id) {
    if (id < 0 || id >= t->n || t->special[id]) return "";
    if (t->byte_val[id] >= 0) {
        t->buf[0] = (char)t->byte_val[id];
        t->buf[1] = '\0';
        return t->buf;
    }
    const char *p = t->piece[id];
    return (prev == TOK_BOS && p[0] == ' ') ? p + 1 : p;
}

int tok_load_for_model(const char *model, const char *format, int32_t vocab, const char *given,
                       tok_t **out, char *err, size_t errlen) {
    int rc = 0;
    *out = NULL;
    if (given) {
        rc = tok_load_llama2c(given, vocab, out, err, errlen);
    } else if (!strcmp(format, "gguf")) {
        rc = tok_load_gguf(model, out, err, errlen);
    } else if (!strcmp(format, "llama2c")) {
        const char *slash = strrchr(model, '/');
        int dir = slash ? (int)(slash - model + 1) : 0;
        char path[2][1100];
        snprintf(path[0], sizeof path[0], "%.*stok%d.bin", dir, model, vocab);
        snprintf(path[1], sizeof path[1], "%.*stokenizer.bin", dir, model);
        int i = 0;
        while (i < 2 && access(path[i], R_OK) != 0) i++;
        if (i == 2) {
            snprintf(err, errlen, "%s: no tokenizer: give --tokenizer FILE (tok%d.bin or "
                     "tokenizer.bin next to the model is used when present)", model, vocab);
            return -1;
        }
        rc = tok_load_llama2c(path[i], vocab, out, err, errlen);
    }
    if (rc == 0 && *out && tok_vocab(*out) != vocab) {
        snprintf(err, errlen, "the tokenizer has %d pieces but %s has a vocabulary of %d",
                 tok_vocab(*out), model, vocab);
        tok_free(*out);
        *out = NULL;
        rc = -1;
    }
    return rc;
}
