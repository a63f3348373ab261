/* trace_jsonl: Mooncake traces, one JSON object per line:
 *   {"timestamp": MS, "input_length": N, "output_length": N, "hash_ids": [ID, ...]}
 * A small strict scanner instead of a JSON library: it validates the whole line (RFC 8259
 * grammar), decodes only the four keys it needs and skips any other key whatever its type.
 * Errors name the line and the byte column where the scan stopped. */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "traces/trace_internal.h"

#define JSON_MAX_DEPTH 64 /* nested arrays/objects inside skipped values */
#define KEY_MAX 32        /* longer keys cannot be ones we know; they are just skipped */

typedef struct {
    trace_t *t;
    const char *s; /* the line, NUL-terminated */
    const char *p; /* scan position */
} jscan_t;

static int jfail(jscan_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int jfail(jscan_t *j, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return trace_fail(j->t, j->t->lineno, "col %d: %s", (int)(j->p - j->s) + 1, msg);
}

/* What the scanner found at p, for "expected X, found Y" messages. */
static const char *found(const jscan_t *j, char *buf, size_t cap)
{
    unsigned char c = (unsigned char)*j->p;

    if (c == '\0') return "the end of the line (truncated?)";
    if (c >= 0x20 && c < 0x7f) snprintf(buf, cap, "'%c'", c);
    else snprintf(buf, cap, "byte 0x%02x", c);
    return buf;
}

static void skip_ws(jscan_t *j)
{
    while (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n') j->p++;
}

static int expect(jscan_t *j, char c, const char *where)
{
    char b[16];

    skip_ws(j);
    if (*j->p != c) return jfail(j, "expected '%c' %s, found %s", c, where, found(j, b, sizeof b));
    j->p++;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Scans a string at p (which is at the opening quote). When key is not NULL the decoded
 * text goes there (cut at cap - 1 bytes, *cut set); \u escapes of ASCII decode to their
 * character, others to '?', which is enough to compare against our ASCII key names. */
static int scan_string(jscan_t *j, char *key, size_t cap, int *cut)
{
    const char *open = j->p;
    size_t n = 0;

    j->p++;
    for (;;) {
        unsigned char c = (unsigned char)*j->p;
        char out;

        if (c == '\0') {
            /* Point at the opening quote: the end of the line says nothing. */
            j->p = open;
            return jfail(j, "unterminated string (truncated line?)");
        }
        if (c < 0x20) return jfail(j, "control character 0x%02x inside a string", c);
        if (c == '"') break;
        out = (char)c;
        if (c == '\\') {
            j->p++;
            switch (*j->p) {
            case '"': case '\\': case '/': out = *j->p; break;
            case 'b': out = '\b'; break;
            case 'f': out = '\f'; break;
            case 'n': out = '\n'; break;
            case 'r': out = '\r'; break;
            case 't': out = '\t'; break;
            case 'u': {
                int v = 0, k;
                for (k = 1; k <= 4; k++) {
                    int h = hexval(j->p[k]);
                    if (h < 0) {
                        j->p += k;
                        return jfail(j, "bad \\u escape: expected 4 hex digits");
                    }
                    v = v * 16 + h;
                }
                j->p += 4;
                out = v > 0 && v < 0x80 ? (char)v : '?';
                break;
            }
            default:
                return jfail(j, "bad escape '\\%c' in a string",
                             isprint((unsigned char)*j->p) ? *j->p : '?');
            }
        }
        if (key) {
            if (n + 1 < cap) key[n++] = out;
            else *cut = 1;
        }
        j->p++;
    }
    j->p++;
    if (key) key[n] = '\0';
    return 0;
}

/* Scans a JSON number at p; start and len give its text. */
static int scan_number(jscan_t *j, const char *what, const char **start, size_t *len)
{
    const char *p = j->p;
    char b[16];

    *start = p;
    if (*p == '-') p++;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (isdigit((unsigned char)*p)) p++;
    } else {
        j->p = p;
        return jfail(j, "%s: expected a number, found %s", what, found(j, b, sizeof b));
    }
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) {
            j->p = p;
            return jfail(j, "%s: expected a digit after '.'", what);
        }
        while (isdigit((unsigned char)*p)) p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!isdigit((unsigned char)*p)) {
            j->p = p;
            return jfail(j, "%s: expected a digit in the exponent", what);
        }
        while (isdigit((unsigned char)*p)) p++;
    }
    *len = (size_t)(p - *start);
    j->p = p;
    return 0;
}

static int skip_value(jscan_t *j, int depth);

/* Skips the rest of an array or object whose opening bracket is at p. */
static int skip_container(jscan_t *j, int depth)
{
    char close = *j->p == '[' ? ']' : '}', b[16];

    if (depth >= JSON_MAX_DEPTH)
        return jfail(j, "values nested more than %d deep", JSON_MAX_DEPTH);
    j->p++;
    skip_ws(j);
    if (*j->p == close) {
        j->p++;
        return 0;
    }
    for (;;) {
        skip_ws(j);
        if (close == '}') {
            if (*j->p != '"')
                return jfail(j, "expected a key string, found %s", found(j, b, sizeof b));
            if (scan_string(j, NULL, 0, NULL) < 0) return -1;
            if (expect(j, ':', "after a key") < 0) return -1;
        }
        if (skip_value(j, depth + 1) < 0) return -1;
        skip_ws(j);
        if (*j->p == close) break;
        if (*j->p != ',')
            return jfail(j, "expected ',' or '%c', found %s", close, found(j, b, sizeof b));
        j->p++;
    }
    j->p++;
    return 0;
}

static int skip_literal(jscan_t *j, const char *word)
{
    size_t n = strlen(word);

    if (strncmp(j->p, word, n) != 0) return jfail(j, "expected a JSON value");
    j->p += n;
    return 0;
}

static int skip_value(jscan_t *j, int depth)
{
    const char *s;
    size_t n;
    char b[16];

    skip_ws(j);
    switch (*j->p) {
    case '"': return scan_string(j, NULL, 0, NULL);
    case '[': case '{': return skip_container(j, depth);
    case 't': return skip_literal(j, "true");
    case 'f': return skip_literal(j, "false");
    case 'n': return skip_literal(j, "null");
    default:
        if (*j->p == '-' || isdigit((unsigned char)*j->p))
            return scan_number(j, "value", &s, &n);
        return jfail(j, "expected a JSON value, found %s", found(j, b, sizeof b));
    }
}

static int push_hash(trace_t *t, int64_t v)
{
    if ((size_t)t->n_hash == t->hash_cap) {
        size_t cap = t->hash_cap ? t->hash_cap * 2 : 64;
        int64_t *h;
        if (t->n_hash == INT32_MAX) return -1;
        h = realloc(t->hash, cap * sizeof *h);
        if (!h) return -1;
        t->hash = h;
        t->hash_cap = cap;
    }
    t->hash[t->n_hash++] = v;
    return 0;
}

/* "hash_ids": an array of integers (64-bit, as block hashes may be). */
static int scan_hash_ids(jscan_t *j)
{
    char b[16], shown[TRACE_SNIP];

    skip_ws(j);
    if (*j->p != '[')
        return jfail(j, "key 'hash_ids': expected '[', found %s", found(j, b, sizeof b));
    j->p++;
    skip_ws(j);
    if (*j->p == ']') {
        j->p++;
        return 0;
    }
    for (;;) {
        const char *s, *q;
        size_t n;
        int neg;
        uint64_t v = 0;

        skip_ws(j);
        if (scan_number(j, "key 'hash_ids'", &s, &n) < 0) return -1;
        neg = *s == '-';
        for (q = s + neg; q < s + n; q++) {
            if (!isdigit((unsigned char)*q) || v > (uint64_t)INT64_MAX / 10) break;
            v = v * 10 + (uint64_t)(*q - '0');
        }
        if (q != s + n || v > (uint64_t)INT64_MAX) {
            trace_snip(shown, sizeof shown, s, n);
            j->p = s;
            return jfail(j, "key 'hash_ids': element %d: '%s' is not a 64-bit integer",
                         j->t->n_hash + 1, shown);
        }
        if (push_hash(j->t, neg ? -(int64_t)v : (int64_t)v) < 0)
            return jfail(j, "key 'hash_ids': out of memory");
        skip_ws(j);
        if (*j->p == ']') break;
        if (*j->p != ',')
            return jfail(j, "key 'hash_ids': expected ',' or ']', found %s",
                         found(j, b, sizeof b));
        j->p++;
    }
    j->p++;
    return 0;
}

enum { K_TIMESTAMP = 1, K_INPUT = 2, K_OUTPUT = 4, K_HASH = 8 };

int trace_jsonl_row(trace_t *t, trace_row_t *row)
{
    jscan_t j = {t, t->line, t->line};
    char key[KEY_MAX], b[16];
    unsigned seen = 0;

    if (expect(&j, '{', "at the start of a Mooncake JSON line") < 0) return -1;
    skip_ws(&j);
    if (*j.p == '}') {
        j.p++;
    } else {
        for (;;) {
            int cut = 0, k = 0;
            const char *s;
            size_t n;

            skip_ws(&j);
            if (*j.p != '"')
                return jfail(&j, "expected a key string, found %s", found(&j, b, sizeof b));
            if (scan_string(&j, key, sizeof key, &cut) < 0) return -1;
            if (expect(&j, ':', "after a key") < 0) return -1;
            skip_ws(&j);
            if (!cut) {
                if (strcmp(key, "timestamp") == 0) k = K_TIMESTAMP;
                else if (strcmp(key, "input_length") == 0) k = K_INPUT;
                else if (strcmp(key, "output_length") == 0) k = K_OUTPUT;
                else if (strcmp(key, "hash_ids") == 0) k = K_HASH;
            }
            if (k & seen) return jfail(&j, "duplicate key '%s'", key);
            seen |= (unsigned)k;
            switch (k) {
            case K_TIMESTAMP:
                if (scan_number(&j, "key 'timestamp'", &s, &n) < 0 ||
                    trace_parse_seconds(t, "key 'timestamp'", s, n, 1e-3, &row->t) < 0)
                    return -1;
                trace_snip(row->ts_text, sizeof row->ts_text, s, n);
                break;
            case K_INPUT:
                if (scan_number(&j, "key 'input_length'", &s, &n) < 0 ||
                    trace_parse_count(t, "key 'input_length'", s, n, &row->prompt) < 0)
                    return -1;
                break;
            case K_OUTPUT:
                if (scan_number(&j, "key 'output_length'", &s, &n) < 0 ||
                    trace_parse_count(t, "key 'output_length'", s, n, &row->output) < 0)
                    return -1;
                break;
            case K_HASH:
                if (scan_hash_ids(&j) < 0) return -1;
                break;
            default:
                if (skip_value(&j, 0) < 0) return -1;
            }
            skip_ws(&j);
            if (*j.p == '}') {
                j.p++;
                break;
            }
            if (*j.p != ',')
                return jfail(&j, "expected ',' or '}', found %s", found(&j, b, sizeof b));
            j.p++;
        }
    }
    skip_ws(&j);
    if (*j.p != '\0')
        return jfail(&j, "unexpected %s after the closing '}'", found(&j, b, sizeof b));
    if (!(seen & K_TIMESTAMP)) return trace_fail(t, t->lineno, "missing key 'timestamp'");
    if (!(seen & K_INPUT)) return trace_fail(t, t->lineno, "missing key 'input_length'");
    if (!(seen & K_OUTPUT)) return trace_fail(t, t->lineno, "missing key 'output_length'");
    if (row->output < 1)
        return trace_fail(t, t->lineno, "key 'output_length': must be at least 1, found 0");
    return 0;
}
