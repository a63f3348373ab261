/* profile: see profile.h. The reader is strict about everything a calibration would trust
 * (numbers, features, the shape) and lenient about what it does not use (unknown header
 * keys and columns), so that profiles written by other engines' tools read as long as they
 * hold the required columns. */
#include "sim/profile.h"
#include "sim/errf.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- columns -------------------------------------------------------------------------- */

enum {
    C_KIND, C_DEC_SEQS, C_DEC_CTX, C_CHUNK_TOKENS, C_CHUNK_CTX, C_CHUNK_SAMPLED, C_TOKENS,
    C_SEQS, C_SAMPLED, C_KV_TOKENS, C_ATTN_PAIRS, C_REPS, C_MEDIAN, C_MEAN, C_MIN, C_MAX,
    C_P10, C_P90, N_COLS
};

static const char *const col_names[N_COLS] = {
    "kind", "dec_seqs", "dec_ctx", "chunk_tokens", "chunk_ctx", "chunk_sampled", "tokens",
    "seqs", "sampled", "kv_tokens", "attn_pairs", "reps", "median_s", "mean_s", "min_s",
    "max_s", "p10_s", "p90_s",
};

static int col_required(int c) { return (c >= C_TOKENS && c <= C_ATTN_PAIRS) || c == C_MEDIAN; }
static int col_is_time(int c) { return c >= C_MEDIAN; }
/* The 32-bit columns: the shape and reps. Capped at 2^30 so that the shape's features
 * cannot overflow int64 (n c + n (n + 1) / 2 plus dec_seqs (dec_ctx + 1)). */
static int col_is_small(int c) { return (c >= C_DEC_SEQS && c <= C_CHUNK_SAMPLED) || c == C_REPS; }
#define SMALL_MAX (1 << 30)

static int32_t *small_field(profile_point_t *pt, int c) {
    switch (c) {
    case C_DEC_SEQS: return &pt->dec_seqs;
    case C_DEC_CTX: return &pt->dec_ctx;
    case C_CHUNK_TOKENS: return &pt->chunk_tokens;
    case C_CHUNK_CTX: return &pt->chunk_ctx;
    case C_CHUNK_SAMPLED: return &pt->chunk_sampled;
    default: return &pt->reps;
    }
}

static int64_t *feature_field(profile_point_t *pt, int c) {
    switch (c) {
    case C_TOKENS: return &pt->f.tokens;
    case C_SEQS: return &pt->f.seqs;
    case C_SAMPLED: return &pt->f.sampled;
    case C_KV_TOKENS: return &pt->f.kv_tokens;
    default: return &pt->f.attn_pairs;
    }
}

static double *time_field(profile_point_t *pt, int c) {
    switch (c) {
    case C_MEDIAN: return &pt->median_s;
    case C_MEAN: return &pt->mean_s;
    case C_MIN: return &pt->min_s;
    case C_MAX: return &pt->max_s;
    case C_P10: return &pt->p10_s;
    default: return &pt->p90_s;
    }
}

/* ---- header keys ---------------------------------------------------------------------- */

/* K_SHAPE0: a shape key that may be 0 and is written only when it is not (a mixture of
 * experts' keys: a dense profile's header stays as it was) */
enum { K_STR, K_COUNT, K_SHAPE, K_RATE, K_SHAPE0 };

typedef struct {
    const char *key;
    int type;
    size_t off;      /* into profile_t (K_STR, K_COUNT, K_RATE) or preset_model_t (K_SHAPE) */
    size_t cap;      /* K_STR: the field's size */
} hkey_t;

#define STR_KEY(k, f) { k, K_STR, offsetof(profile_t, f), sizeof((profile_t *)0)->f }
#define SHAPE_KEY(f) { #f, K_SHAPE, offsetof(preset_model_t, f), 0 }
#define SHAPE0_KEY(f) { #f, K_SHAPE0, offsetof(preset_model_t, f), 0 }
static const hkey_t hkeys[] = {
    STR_KEY("model", model), STR_KEY("backend", backend), STR_KEY("weight_type", weight_type),
    STR_KEY("date", date), STR_KEY("version", version),
    { "threads", K_COUNT, offsetof(profile_t, threads), 0 },
    SHAPE_KEY(n_layers), SHAPE_KEY(d_model), SHAPE_KEY(n_heads), SHAPE_KEY(n_kv_heads),
    SHAPE_KEY(head_dim), SHAPE_KEY(d_ff), SHAPE_KEY(vocab), SHAPE_KEY(max_seq),
    SHAPE_KEY(tied_embeddings), SHAPE_KEY(dtype_bytes),
    SHAPE0_KEY(n_experts), SHAPE0_KEY(experts_per_tok), SHAPE0_KEY(moe_d_ff),
    SHAPE0_KEY(n_dense_layers), SHAPE0_KEY(shared_d_ff),
    { "mem_bw_gbs", K_RATE, offsetof(profile_t, mem_bw), 0 },
    { "gemm_gflops", K_RATE, offsetof(profile_t, gemm_flops), 0 },
    { "mem_bw_gbs_end", K_RATE, offsetof(profile_t, mem_bw_end), 0 },
    { "gemm_gflops_end", K_RATE, offsetof(profile_t, gemm_flops_end), 0 },
    { "warmup", K_COUNT, offsetof(profile_t, warmup), 0 },
    { "reps", K_COUNT, offsetof(profile_t, reps), 0 },
};
#define N_HKEYS ((int)(sizeof hkeys / sizeof hkeys[0]))
#define N_SHAPE_KEYS 10

static int hkey_find(const char *key) {
    for (int i = 0; i < N_HKEYS; i++)
        if (!strcmp(hkeys[i].key, key)) return i;
    return -1;
}

/* ---- small helpers -------------------------------------------------------------------- */

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t')) *--e = '\0';
    return s;
}

static int is_word(const char *s, size_t max) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!isalnum((unsigned char)s[n]) && s[n] != '_' && s[n] != '-' && s[n] != '.') return 0;
    return n > 0 && n <= max;
}

/* Integer in [0, max]: 0, or 1 not a number, 2 negative, 3 out of range. */
static int parse_count(const char *s, int64_t max, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end) return 1;
    if (errno == ERANGE) return 3;
    if (v < 0) return 2;
    if (v > max) return 3;
    *out = v;
    return 0;
}

void profile_init(profile_t *p) {
    memset(p, 0, sizeof *p);
    p->threads = p->warmup = p->reps = -1;
    p->mem_bw = p->gemm_flops = p->mem_bw_end = p->gemm_flops_end = NAN;
}

void profile_free(profile_t *p) {
    for (size_t i = 0; i < p->n_hdr; i++) {
        free(p->hdr[i].key);
        free(p->hdr[i].value);
    }
    free(p->hdr);
    free(p->pts);
    profile_init(p);
}

static int add_header_at(profile_t *p, const char *key, const char *value, int64_t line) {
    profile_kv_t *h = realloc(p->hdr, (p->n_hdr + 1) * sizeof *h);
    if (!h) return -1;
    p->hdr = h;
    char *k = strdup(key), *v = strdup(value ? value : "");
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    /* One header line per entry, whatever the value held. */
    for (char *c = v; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    p->hdr[p->n_hdr++] = (profile_kv_t){ k, v, line };
    return 0;
}

int profile_add_header(profile_t *p, const char *key, const char *value) {
    return add_header_at(p, key, value, 0);
}

const char *profile_header_get(const profile_t *p, const char *key) {
    for (size_t i = p->n_hdr; i-- > 0;)
        if (!strcmp(p->hdr[i].key, key)) return p->hdr[i].value;
    return NULL;
}

int profile_add_point(profile_t *p, const profile_point_t *pt) {
    if ((p->n & (p->n - 1)) == 0) {   /* n is 0 or a power of two: the array is full */
        size_t cap = p->n ? 2 * p->n : 1;
        profile_point_t *q = realloc(p->pts, cap * sizeof *q);
        if (!q) return -1;
        p->pts = q;
    }
    p->pts[p->n++] = *pt;
    return 0;
}

void profile_point_init(profile_point_t *pt, const char *kind, const cost_features_t *f) {
    memset(pt, 0, sizeof *pt);
    snprintf(pt->kind, sizeof pt->kind, "%s", kind ? kind : "step");
    pt->dec_seqs = pt->dec_ctx = pt->chunk_tokens = pt->chunk_ctx = pt->chunk_sampled = -1;
    pt->reps = -1;
    if (f) pt->f = *f;
    pt->median_s = pt->mean_s = pt->min_s = pt->max_s = pt->p10_s = pt->p90_s = NAN;
}

int profile_point_shape_features(const profile_point_t *pt, cost_features_t *f) {
    if (pt->dec_seqs < 0 || pt->dec_ctx < 0 || pt->chunk_tokens < 0 || pt->chunk_ctx < 0 ||
        pt->chunk_sampled < 0)
        return -1;
    memset(f, 0, sizeof *f);
    /* Features are sums over sequences, so dec_seqs equal decodes are one decode's features
     * times dec_seqs (cost_features_add stays the one place the formulas live). */
    cost_features_t one = {0};
    cost_features_add(&one, 1, pt->dec_ctx, 1);
    f->tokens = one.tokens * pt->dec_seqs;
    f->seqs = one.seqs * pt->dec_seqs;
    f->sampled = one.sampled * pt->dec_seqs;
    f->kv_tokens = one.kv_tokens * pt->dec_seqs;
    f->attn_pairs = one.attn_pairs * pt->dec_seqs;
    cost_features_add(f, pt->chunk_tokens, pt->chunk_ctx, pt->chunk_sampled);
    return 0;
}

/* ---- reader --------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int64_t line;
    char *err;
    size_t errlen;
    int col[64];         /* per field of the column line: a C_* or -1 (ignored) */
    int ncols;           /* fields in the column line; 0 until it is read */
    int64_t key_line[N_HKEYS];
    int64_t shape_line;  /* the last shape key's line */
} reader_t;

#define RFAIL(r, ...) rfail(r, __VA_ARGS__)
static int rfail(reader_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rfail(reader_t *r, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return errf(r->err, r->errlen, "%s:%lld: %s", r->name, (long long)r->line, msg);
}

static int read_magic(reader_t *r, char *line) {
    size_t n = strlen(PROFILE_MAGIC);
    if (strncmp(line, PROFILE_MAGIC, n) || line[n] != ' ')
        return RFAIL(r, "not a twinserve profile: the first line must be '%s %d'",
                     PROFILE_MAGIC, PROFILE_VERSION);
    char *v = trim(line + n + 1);
    int64_t ver;
    if (parse_count(v, INT32_MAX, &ver) || ver != PROFILE_VERSION)
        return RFAIL(r, "unknown profile format version '%.32s' (this twinserve reads "
                     "version %d)", v, PROFILE_VERSION);
    return 0;
}

static int read_header(reader_t *r, profile_t *p, char *line) {
    char *body = line + 1, *eq = strchr(body, '=');
    if (eq) *eq = '\0';
    char *key = eq ? trim(body) : NULL, *val = eq ? trim(eq + 1) : NULL;
    if (!eq || !is_word(key, 64))
        return RFAIL(r, "a header line must be '# key = value', got '#%.60s'", body);
    int k = hkey_find(key);
    if (k >= 0) {
        if (r->key_line[k])
            return RFAIL(r, "duplicate header key '%s' (first on line %lld)", key,
                         (long long)r->key_line[k]);
        r->key_line[k] = r->line;
        const hkey_t *h = &hkeys[k];
        int64_t v;
        char *end;
        switch (h->type) {
        case K_STR:
            snprintf((char *)p + h->off, h->cap, "%s", val);
            break;
        case K_COUNT:
            if (parse_count(val, INT32_MAX, &v))
                return RFAIL(r, "%s: '%.40s' is not a non-negative integer", key, val);
            *(int *)((char *)p + h->off) = (int)v;
            break;
        case K_SHAPE0:
            if (parse_count(val, INT32_MAX, &v))
                return RFAIL(r, "model shape key %s: '%.40s' is not a non-negative integer", key,
                             val);
            *(int32_t *)((char *)&p->shape + h->off) = (int32_t)v;
            break;
        case K_SHAPE: {
            int tied = !strcmp(key, "tied_embeddings");
            if (parse_count(val, INT32_MAX, &v) || (!tied && v < 1) || (tied && v > 1))
                return RFAIL(r, "model shape key %s: '%.40s' is not %s", key, val,
                             tied ? "0 or 1" : "a positive integer");
            *(int32_t *)((char *)&p->shape + h->off) = (int32_t)v;
            r->shape_line = r->line;
            break;
        }
        case K_RATE: {
            errno = 0;
            double d = strtod(val, &end);
            if (end == val || *end || errno || !isfinite(d) || d <= 0)
                return RFAIL(r, "%s: '%.40s' is not a positive number", key, val);
            *(double *)((char *)p + h->off) = d * 1e9;   /* GB/s, GFLOP/s in the file */
            break;
        }
        }
    } else if (!strcmp(key, "host")) {
        const char *nm = "not measured";
        if (!strncmp(val, nm, strlen(nm))) {
            const char *why = val + strlen(nm);
            while (*why == ':' || *why == ' ') why++;
            snprintf(p->host_note, sizeof p->host_note, "%s", *why ? why : nm);
        } else {
            p->host_note[0] = '\0';
        }
    }
    if (add_header_at(p, key, val, r->line)) return RFAIL(r, "out of memory");
    return 0;
}

static int read_columns(reader_t *r, char *line) {
    int seen[N_COLS] = {0};
    int n = 0;
    /* Split by hand (strtok would merge ",,", hiding an empty name). */
    for (char *s = line;; n++) {
        char *comma = strchr(s, ',');
        if (comma) *comma = '\0';
        if (n == (int)(sizeof r->col / sizeof r->col[0]))
            return RFAIL(r, "more than %d columns", n);
        char *name = trim(s);
        if (!*name) return RFAIL(r, "column %d has an empty name", n + 1);
        int c = -1;
        for (int i = 0; i < N_COLS; i++)
            if (!strcmp(col_names[i], name)) c = i;
        if (c >= 0 && seen[c]) return RFAIL(r, "duplicate column '%s'", name);
        if (c >= 0) seen[c] = 1;
        r->col[n] = c;
        if (!comma) break;
        s = comma + 1;
    }
    r->ncols = n + 1;
    for (int c = 0; c < N_COLS; c++)
        if (col_required(c) && !seen[c])
            return RFAIL(r, "missing required column '%s' (the required columns: tokens, "
                         "seqs, sampled, kv_tokens, attn_pairs, median_s)", col_names[c]);
    return 0;
}

static int read_field(reader_t *r, profile_point_t *pt, int c, char *v) {
    const char *name = col_names[c];
    if (!*v) {
        if (col_required(c)) return RFAIL(r, "column '%s' is empty", name);
        return 0;   /* absent: the defaults of profile_point_init */
    }
    if (c == C_KIND) {
        if (!is_word(v, sizeof pt->kind - 1))
            return RFAIL(r, "column 'kind': '%.40s' is not a word of at most %d letters, "
                         "digits, '_', '-' or '.'", v, (int)sizeof pt->kind - 1);
        snprintf(pt->kind, sizeof pt->kind, "%s", v);
        return 0;
    }
    if (col_is_time(c)) {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (end == v || *end) return RFAIL(r, "column '%s': '%.40s' is not a number", name, v);
        if (!isfinite(d) || errno == ERANGE)
            return RFAIL(r, "column '%s': '%.40s' is not a finite number", name, v);
        if (d < 0) return RFAIL(r, "column '%s': negative value %.40s", name, v);
        *time_field(pt, c) = d;
        return 0;
    }
    int64_t x;
    int e = parse_count(v, col_is_small(c) ? SMALL_MAX : INT64_MAX, &x);
    if (e == 1) {
        char *end;
        double d = strtod(v, &end);
        if (end != v && !*end && !isfinite(d))
            return RFAIL(r, "column '%s': '%.40s' is not a finite number", name, v);
        return RFAIL(r, "column '%s': '%.40s' is not an integer", name, v);
    }
    if (e == 2) return RFAIL(r, "column '%s': negative value %.40s", name, v);
    if (e == 3) return RFAIL(r, "column '%s': %.40s is out of range", name, v);
    if (col_is_small(c)) *small_field(pt, c) = (int32_t)x;
    else *feature_field(pt, c) = x;
    return 0;
}

/* The checks a row's values must pass together (profile.h). */
static int check_point(reader_t *r, const profile_point_t *pt) {
    const cost_features_t *f = &pt->f;
    if (f->seqs < 1) return RFAIL(r, "impossible features: seqs %lld < 1", (long long)f->seqs);
    if (f->tokens < f->seqs)
        return RFAIL(r, "impossible features: tokens %lld < seqs %lld", (long long)f->tokens,
                     (long long)f->seqs);
    if (f->sampled > f->tokens)
        return RFAIL(r, "impossible features: sampled %lld > tokens %lld",
                     (long long)f->sampled, (long long)f->tokens);
    if (f->kv_tokens < f->tokens)
        return RFAIL(r, "impossible features: kv_tokens %lld < tokens %lld",
                     (long long)f->kv_tokens, (long long)f->tokens);
    if (f->attn_pairs < f->tokens)
        return RFAIL(r, "impossible features: attn_pairs %lld < tokens %lld",
                     (long long)f->attn_pairs, (long long)f->tokens);
    if (!(pt->median_s > 0))
        return RFAIL(r, "median_s must be > 0 (got %g)", pt->median_s);
    if (pt->reps == 0) return RFAIL(r, "reps must be >= 1 (got 0)");
    if (pt->chunk_sampled > 0 && pt->chunk_tokens >= 0 && pt->chunk_sampled > pt->chunk_tokens)
        return RFAIL(r, "chunk_sampled %d > chunk_tokens %d", pt->chunk_sampled,
                     pt->chunk_tokens);
    cost_features_t g;
    if (profile_point_shape_features(pt, &g) == 0) {
        static const char *const nm[] = { "tokens", "seqs", "sampled", "kv_tokens",
                                          "attn_pairs" };
        const int64_t a[] = { f->tokens, f->seqs, f->sampled, f->kv_tokens, f->attn_pairs };
        const int64_t b[] = { g.tokens, g.seqs, g.sampled, g.kv_tokens, g.attn_pairs };
        for (int i = 0; i < 5; i++)
            if (a[i] != b[i])
                return RFAIL(r, "features disagree with the shape columns: %s is %lld, but "
                             "%d decodes at context %d plus a chunk of %d tokens at context "
                             "%d (%d sampled) give %lld", nm[i], (long long)a[i],
                             pt->dec_seqs, pt->dec_ctx, pt->chunk_tokens, pt->chunk_ctx,
                             pt->chunk_sampled, (long long)b[i]);
    }
    return 0;
}

static int read_row(reader_t *r, profile_t *p, char *line) {
    profile_point_t pt;
    profile_point_init(&pt, "step", NULL);
    pt.line = r->line;
    int n = 1;
    for (const char *c = line; *c; c++) n += *c == ',';
    if (n != r->ncols)
        return RFAIL(r, "%d field%s, the column line has %d (a truncated or damaged row?)", n,
                     n == 1 ? "" : "s", r->ncols);
    char *fields[64];   /* ncols <= 64 (read_columns) */
    fields[0] = line;
    for (int i = 1; i < n; i++) {
        char *comma = strchr(fields[i - 1], ',');
        *comma = '\0';
        fields[i] = comma + 1;
    }
    for (int i = 0; i < n; i++)
        if (r->col[i] >= 0 && read_field(r, &pt, r->col[i], trim(fields[i]))) return -1;
    if (check_point(r, &pt)) return -1;
    if (profile_add_point(p, &pt)) return RFAIL(r, "out of memory");
    return 0;
}

/* After the last line: the shape, the data. */
static int finish(reader_t *r, profile_t *p) {
    if (!r->ncols) return RFAIL(r, "no column line (the header block never ends)");
    if (!p->n) return RFAIL(r, "no data rows");
    int shape_keys = 0;
    for (int k = 0; k < N_HKEYS; k++) shape_keys += hkeys[k].type == K_SHAPE && r->key_line[k];
    if (shape_keys == N_SHAPE_KEYS) {
        char msg[256];
        snprintf(p->shape.name, sizeof p->shape.name, "profile");
        r->line = r->shape_line;
        if (preset_model_validate(&p->shape, msg, sizeof msg))
            return RFAIL(r, "model shape: %s", msg);
        p->has_shape = 1;
    }
    return 0;
}

int profile_read_file(FILE *f, const char *name, profile_t *p, char *err, size_t errlen) {
    reader_t r = { .name = name, .err = err, .errlen = errlen };
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = -1;
    profile_init(p);
    while ((len = getline(&line, &cap, f)) >= 0) {
        r.line++;
        if ((size_t)len != strlen(line)) {
            RFAIL(&r, "a NUL byte in the line (not a text file?)");
            goto done;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (r.line == 1) {
            if (read_magic(&r, line)) goto done;
            continue;
        }
        char *s = trim(line);   /* blank lines anywhere are nothing */
        if (!*s) continue;
        if (*s == '#') {
            if (r.ncols) {
                RFAIL(&r, "a '#' line after the column line");
                goto done;
            }
            if (read_header(&r, p, s)) goto done;
        } else if (!r.ncols) {
            if (read_columns(&r, s)) goto done;
        } else if (read_row(&r, p, s)) {
            goto done;
        }
    }
    if (ferror(f)) {
        errf(err, errlen, "%s:%lld: read error", name, (long long)r.line + 1);
        goto done;
    }
    if (r.line == 0) {
        r.line = 1;
        RFAIL(&r, "empty file: not a twinserve profile (the first line must be '%s %d')",
              PROFILE_MAGIC, PROFILE_VERSION);
        goto done;
    }
    rc = finish(&r, p);
done:
    free(line);
    if (rc) profile_free(p);
    return rc;
}

int profile_read(const char *path, profile_t *p, char *err, size_t errlen) {
    profile_init(p);
    FILE *f = fopen(path, "r");
    if (!f) return errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    int rc = profile_read_file(f, path, p, err, errlen);
    fclose(f);
    return rc;
}

/* ---- writer --------------------------------------------------------------------------- */

/* `# key = value`, the value on one line whatever it holds. */
static void write_kv(FILE *f, const char *key, const char *value) {
    fprintf(f, "# %s = ", key);
    for (const char *c = value; *c; c++) fputc(*c == '\n' || *c == '\r' ? ' ' : *c, f);
    fputc('\n', f);
}

int profile_write_header(FILE *f, const profile_t *p, const char *command) {
    char num[64];
    fprintf(f, "%s %d\n", PROFILE_MAGIC, PROFILE_VERSION);
    for (int k = 0; k < N_HKEYS; k++) {
        const hkey_t *h = &hkeys[k];
        const char *cp = (const char *)p + h->off;
        if (h->type == K_STR) {
            if (*cp) write_kv(f, h->key, cp);
        } else if (h->type == K_COUNT) {
            if (*(const int *)cp >= 0) fprintf(f, "# %s = %d\n", h->key, *(const int *)cp);
        } else if (h->type == K_SHAPE || h->type == K_SHAPE0) {
            int32_t v = *(const int32_t *)((const char *)&p->shape + h->off);
            if (p->has_shape && (h->type == K_SHAPE || v != 0))
                fprintf(f, "# %s = %d\n", h->key, v);
        } else if (isfinite(*(const double *)cp)) {
            snprintf(num, sizeof num, "%.10g", *(const double *)cp / 1e9);
            write_kv(f, h->key, num);
        }
    }
    if (command) write_kv(f, "command", command);
    if (p->host_note[0] && !profile_header_get(p, "host")) {
        char v[300];
        snprintf(v, sizeof v, "not measured: %s", p->host_note);
        write_kv(f, "host", v);
    }
    /* Notes, the host line and foreign provenance: every line the struct does not hold. */
    for (size_t i = 0; i < p->n_hdr; i++) {
        const char *k = p->hdr[i].key;
        if (hkey_find(k) >= 0 || (command && !strcmp(k, "command"))) continue;
        write_kv(f, k, p->hdr[i].value);
    }
    for (int c = 0; c < N_COLS; c++) fprintf(f, "%s%s", c ? "," : "", col_names[c]);
    fputc('\n', f);
    return ferror(f) ? -1 : 0;
}

int profile_write_point(FILE *f, const profile_point_t *pt) {
    fputs(pt->kind[0] ? pt->kind : "step", f);
    const int32_t sh[] = { pt->dec_seqs, pt->dec_ctx, pt->chunk_tokens, pt->chunk_ctx,
                           pt->chunk_sampled };
    for (int i = 0; i < 5; i++)
        if (sh[i] >= 0) fprintf(f, ",%d", sh[i]);
        else fputc(',', f);
    fprintf(f, ",%lld,%lld,%lld,%lld,%lld", (long long)pt->f.tokens, (long long)pt->f.seqs,
            (long long)pt->f.sampled, (long long)pt->f.kv_tokens, (long long)pt->f.attn_pairs);
    if (pt->reps >= 0) fprintf(f, ",%d", pt->reps);
    else fputc(',', f);
    const double t[] = { pt->median_s, pt->mean_s, pt->min_s, pt->max_s, pt->p10_s, pt->p90_s };
    for (int i = 0; i < 6; i++)
        if (isfinite(t[i])) fprintf(f, ",%.9g", t[i]);
        else fputc(',', f);
    fputc('\n', f);
    return ferror(f) ? -1 : 0;
}
