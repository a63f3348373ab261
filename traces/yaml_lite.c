/* yaml_lite: the strict YAML subset reader (contract: yaml_lite.h).
 *
 * Two passes over a private copy of the text: the first cuts it into logical lines (their
 * indentation, their content NUL-terminated in place, blank and comment lines dropped); the
 * second is a recursive descent over those lines, one call per block, where a block is the
 * run of lines at one indentation. Keys and scalars stay in the copy (terminated, quotes
 * resolved in place), so a document is three allocations whatever its size. */
#include "traces/yaml_lite.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE ((size_t)-1)

struct yaml_node {
    yaml_type_t type;
    int line;
    const char *key;           /* its key in the enclosing mapping; NULL otherwise */
    const char *text;          /* a scalar's text; NULL for null, mappings and sequences */
    int64_t i;
    double f;
    size_t n;                  /* children */
    size_t first, last, next;  /* indices into the node array while parsing */
    const yaml_node_t *child, *sibling;   /* the same links once the array stops moving */
};

typedef struct {
    int no;                    /* 1-based line number */
    int indent;                /* leading spaces */
    char *s;                   /* content: no indentation, no line end, no trailing blanks */
} line_t;

struct yaml_doc {
    char *name;
    char *buf;                 /* the text's copy that keys and scalars point into */
    yaml_node_t *nodes;
    size_t n_nodes, cap_nodes;
};

typedef struct {
    yaml_doc_t *d;
    line_t *ln;
    size_t n, pos;
    char *err;
    size_t errlen;
} parser_t;

static int fail(parser_t *p, int line, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0) snprintf(p->err, p->errlen, "%s:%d: %s", p->d->name, line, msg);
    else snprintf(p->err, p->errlen, "%s: %s", p->d->name, msg);
    return -1;
}

/* ------------------------------------------------------------------ lines */

static int is_blank(char c) { return c == ' ' || c == '\t'; }

static int split_lines(parser_t *p, char *buf, size_t len) {
    size_t cap = 0;
    int no = 0;
    char *s = buf, *end = buf + len;
    if (len >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) s += 3;
    while (s < end) {
        char *nl = memchr(s, '\n', (size_t)(end - s));
        char *e = nl ? nl : end;
        no++;
        *e = '\0';
        if (e > s && e[-1] == '\r') *--e = '\0';
        int indent = 0;
        while (s[indent] == ' ') indent++;
        char *c = s + indent;
        while (is_blank(*c)) c++;
        if (*c && *c != '#') {
            if (c != s + indent)
                return fail(p, no, "a tab in the indentation (YAML indents with spaces)");
            while (e > c && is_blank(e[-1])) *--e = '\0';
            if (p->n == cap) {
                cap = cap ? 2 * cap : 64;
                line_t *g = realloc(p->ln, cap * sizeof *g);
                if (!g) return fail(p, 0, "out of memory");
                p->ln = g;
            }
            p->ln[p->n++] = (line_t){no, indent, c};
        }
        s = nl ? nl + 1 : end;
    }
    return 0;
}

/* ------------------------------------------------------------------ nodes */

static size_t new_node(parser_t *p, yaml_type_t type, int line) {
    yaml_doc_t *d = p->d;
    if (d->n_nodes == d->cap_nodes) {
        size_t cap = d->cap_nodes ? 2 * d->cap_nodes : 64;
        yaml_node_t *g = realloc(d->nodes, cap * sizeof *g);
        if (!g) {
            fail(p, 0, "out of memory");
            return NONE;
        }
        d->nodes = g;
        d->cap_nodes = cap;
    }
    yaml_node_t *x = &d->nodes[d->n_nodes];
    memset(x, 0, sizeof *x);
    x->type = type;
    x->line = line;
    x->first = x->last = x->next = NONE;
    return d->n_nodes++;
}

static void append(parser_t *p, size_t parent, size_t child) {
    yaml_node_t *a = &p->d->nodes[parent];
    if (a->last == NONE) a->first = child;
    else p->d->nodes[a->last].next = child;
    a->last = child;
    a->n++;
}

/* ------------------------------------------------------------------ scalars */

static int is_null_word(const char *s) {
    return !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL") || !strcmp(s, "~");
}

/* The core schema's decimal integers and floats ([-+]?[0-9]+ and
 * [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?): 1 integer, 2 float, 0 neither. */
static int number_kind(const char *s) {
    int digits = 0, dot = 0;
    if (*s == '+' || *s == '-') s++;
    for (; *s >= '0' && *s <= '9'; s++) digits++;
    if (*s == '.') {
        dot = 1;
        for (s++; *s >= '0' && *s <= '9'; s++) digits++;
    }
    if (!digits) return 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!(*s >= '0' && *s <= '9')) return 0;
        while (*s >= '0' && *s <= '9') s++;
        dot = 1;
    }
    return *s ? 0 : dot ? 2 : 1;
}

/* A plain scalar's type and value. */
static int type_plain(parser_t *p, int line, yaml_node_t *x, const char *s) {
    x->text = s;
    if (is_null_word(s)) {
        x->type = YAML_NULL;
        x->text = NULL;
    } else if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
        x->type = YAML_BOOL;
        x->i = 1;
    } else if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
        x->type = YAML_BOOL;
    } else {
        int k = number_kind(s);
        errno = 0;
        if (k == 1) {
            x->type = YAML_INT;
            x->i = strtoll(s, NULL, 10);
            x->f = (double)x->i;
            if (errno == ERANGE) return fail(p, line, "integer '%s' is out of range", s);
        } else if (k == 2) {
            x->type = YAML_FLOAT;
            x->f = strtod(s, NULL);
            if (!isfinite(x->f)) return fail(p, line, "float '%s' is out of range", s);
        } else {
            x->type = YAML_STR;
        }
    }
    return 0;
}

/* A quoted scalar starting at s (its quote), resolved in place; *rest is what follows the
 * closing quote. */
static int unquote(parser_t *p, int line, char *s, char **rest) {
    char q = *s, *r = s + 1, *w = s;
    for (;; r++) {
        if (!*r) return fail(p, line, "an unterminated quoted string (a string must end on "
                             "its line)");
        if (*r == q) {
            if (q == '\'' && r[1] == '\'') {
                *w++ = *r++;
                continue;
            }
            break;
        }
        if (q == '"' && *r == '\\') {
            static const char from[] = "\"\\/ntr", to[] = "\"\\/\n\t\r";
            const char *k = r[1] ? strchr(from, r[1]) : NULL;
            if (!k) return fail(p, line, "the escape '\\%c' is not supported (only \\\" \\\\ "
                                "\\/ \\n \\t \\r)", r[1] ? r[1] : ' ');
            *w++ = to[k - from];
            r++;
            continue;
        }
        *w++ = *r;
    }
    *w = '\0';
    *rest = r + 1;
    return 0;
}

/* The value written after `key: ` (non-empty, not a comment) as a node. */
static size_t scalar(parser_t *p, int line, char *v) {
    char c = v[0], *rest = NULL;
    size_t id = NONE;
    if (c == '"' || c == '\'') {
        char *text = v;
        if (unquote(p, line, v, &rest) != 0) return NONE;
        while (is_blank(*rest)) rest++;
        if (*rest && *rest != '#') {
            fail(p, line, "text after a closing quote");
            return NONE;
        }
        if ((id = new_node(p, YAML_STR, line)) != NONE) p->d->nodes[id].text = text;
        return id;
    }
    if (c == '[' || c == '{') {
        char close = c == '[' ? ']' : '}';
        rest = v + 1;
        while (is_blank(*rest)) rest++;
        if (*rest == close) {
            for (rest++; is_blank(*rest); rest++) {}
            if (!*rest || *rest == '#')
                return new_node(p, c == '[' ? YAML_SEQ : YAML_MAP, line);
        }
        fail(p, line, "a flow %s with content is not supported: write it as a block",
             c == '[' ? "sequence ([...])" : "mapping ({...})");
        return NONE;
    }
    if (c == '&' || c == '*' || c == '!') {
        fail(p, line, "anchors, aliases and tags (&, *, !) are not supported");
        return NONE;
    }
    if (c == '|' || c == '>') {
        fail(p, line, "block scalars (| and >) are not supported");
        return NONE;
    }
    if ((c == '-' || c == '?' || c == ':') && (!v[1] || is_blank(v[1]))) {
        fail(p, line, "'%c ' after a key is not supported (a sequence or a complex key on "
             "the key's line)", c);
        return NONE;
    }
    if (strchr(",]}%@`", c)) {
        fail(p, line, "a plain value cannot start with '%c' (quote it)", c);
        return NONE;
    }
    /* plain: a comment starts at a '#' after a blank */
    for (char *h = v + 1; *h; h++)
        if (*h == '#' && is_blank(h[-1])) {
            *h = '\0';
            break;
        }
    char *e = v + strlen(v);
    while (e > v && is_blank(e[-1])) *--e = '\0';
    for (char *k = v; *k; k++)
        if (*k == ':' && (!k[1] || is_blank(k[1]))) {
            fail(p, line, "a plain value holding ': ' (quote it; a mapping on one line is "
                 "not supported)");
            return NONE;
        }
    if ((id = new_node(p, YAML_STR, line)) == NONE) return NONE;
    return type_plain(p, line, &p->d->nodes[id], v) == 0 ? id : NONE;
}

/* ------------------------------------------------------------------ blocks */

static int is_item(const char *s) { return s[0] == '-' && (!s[1] || is_blank(s[1])); }

/* The ':' that ends the key on a `key: value` line, or NULL. */
static char *key_end(char *s) {
    for (char *c = s; *c; c++)
        if (*c == ':' && (!c[1] || is_blank(c[1]))) return c;
    return NULL;
}

static size_t block(parser_t *p, int indent, int depth);
static size_t seq(parser_t *p, int indent, int depth);

/* The line's start as a key, or a message saying why it is not one. */
static int check_key(parser_t *p, const line_t *L, char **sep) {
    const char *s = L->s;
    if (!strcmp(s, "---") || !strncmp(s, "--- ", 4) || !strcmp(s, "..."))
        return fail(p, L->no, "document markers (--- and ...) are not supported");
    if (*s == '"' || *s == '\'') return fail(p, L->no, "quoted keys are not supported");
    if (*s == '?' && (!s[1] || is_blank(s[1])))
        return fail(p, L->no, "complex keys (? ...) are not supported");
    if (strchr("[{", *s)) return fail(p, L->no, "flow collections ([...], {...}) are not "
                                      "supported: write them as blocks");
    if (strchr("&*!|>%@`,]}:", *s))
        return fail(p, L->no, "a key cannot start with '%c'", *s);
    if (!(*sep = key_end(L->s)))
        return fail(p, L->no, "expected `key: value` or `key:` (a plain scalar line on its "
                    "own, or a value continued from the line before, is not supported)");
    for (const char *c = s + 1; c < *sep; c++)
        if (*c == '#' && is_blank(c[-1])) return fail(p, L->no, "a comment inside a key");
    return 0;
}

static size_t map(parser_t *p, int indent, int depth) {
    if (depth > YAML_MAX_DEPTH) {
        fail(p, p->ln[p->pos].no, "nested deeper than %d levels", YAML_MAX_DEPTH);
        return NONE;
    }
    size_t id = new_node(p, YAML_MAP, p->ln[p->pos].no);
    if (id == NONE) return NONE;
    while (p->pos < p->n && p->ln[p->pos].indent == indent) {
        line_t *L = &p->ln[p->pos];
        char *sep = NULL, *v;
        if (is_item(L->s)) {
            fail(p, L->no, "a sequence item where a key was expected (a sequence goes right "
                 "under its `key:`)");
            return NONE;
        }
        if (check_key(p, L, &sep) != 0) return NONE;
        for (v = sep + 1; is_blank(*v); v++) {}
        char *k = sep;
        while (k > L->s && is_blank(k[-1])) k--;
        *k = '\0';
        for (size_t c = p->d->nodes[id].first; c != NONE; c = p->d->nodes[c].next)
            if (!strcmp(p->d->nodes[c].key, L->s)) {
                fail(p, L->no, "key '%s' repeats line %d", L->s, p->d->nodes[c].line);
                return NONE;
            }
        p->pos++;
        const line_t *next = p->pos < p->n ? &p->ln[p->pos] : NULL;
        size_t val;
        if (*v && *v != '#') {
            if ((val = scalar(p, L->no, v)) == NONE) return NONE;
            if (next && next->indent > indent) {
                fail(p, next->no, "more indented than the line before, which has its value "
                     "(multi-line values are not supported)");
                return NONE;
            }
        } else if (next && next->indent > indent) {
            val = block(p, next->indent, depth + 1);
        } else if (next && next->indent == indent && is_item(next->s)) {
            val = seq(p, indent, depth + 1);
        } else {
            val = new_node(p, YAML_NULL, L->no);
        }
        if (val == NONE) return NONE;
        p->d->nodes[val].key = L->s;
        p->d->nodes[val].line = L->no;   /* a block value is named by its key's line */
        append(p, id, val);
    }
    return id;
}

static size_t seq(parser_t *p, int indent, int depth) {
    if (depth > YAML_MAX_DEPTH) {
        fail(p, p->ln[p->pos].no, "nested deeper than %d levels", YAML_MAX_DEPTH);
        return NONE;
    }
    size_t id = new_node(p, YAML_SEQ, p->ln[p->pos].no);
    if (id == NONE) return NONE;
    while (p->pos < p->n && p->ln[p->pos].indent == indent && is_item(p->ln[p->pos].s)) {
        line_t *L = &p->ln[p->pos];
        char *rest = L->s + 1;
        if (*rest == '\t') {
            fail(p, L->no, "a tab after '-' (YAML indents with spaces)");
            return NONE;
        }
        while (*rest == ' ') rest++;
        if (!*rest || *rest == '#' || is_item(rest) || !key_end(rest) || *rest == '"' ||
            *rest == '\'' || *rest == '[' || *rest == '{') {
            fail(p, L->no, "a sequence item that is not a mapping (only `- key: value` items "
                 "are supported)");
            return NONE;
        }
        /* the item is a mapping whose keys align with the one after the dash */
        L->indent = indent + (int)(rest - L->s);
        L->s = rest;
        size_t item = map(p, L->indent, depth + 1);
        if (item == NONE) return NONE;
        append(p, id, item);
    }
    return id;
}

static size_t block(parser_t *p, int indent, int depth) {
    return is_item(p->ln[p->pos].s) ? seq(p, indent, depth) : map(p, indent, depth);
}

/* ------------------------------------------------------------------ the document */

void yaml_free(yaml_doc_t *d) {
    if (!d) return;
    free(d->name);
    free(d->buf);
    free(d->nodes);
    free(d);
}

int yaml_parse(const char *text, size_t len, const char *name, yaml_doc_t **out, char *err,
               size_t errlen) {
    yaml_doc_t *d = calloc(1, sizeof *d);
    parser_t p = {.d = d, .err = err, .errlen = errlen};
    int rc = -1;
    *out = NULL;
    if (len > YAML_MAX_BYTES) {
        snprintf(err, errlen, "%s: larger than %zu bytes: not a configuration file",
                 name ? name : "(yaml)", YAML_MAX_BYTES);
        goto done;
    }
    if (!d || !(d->name = strdup(name ? name : "(yaml)")) || !(d->buf = malloc(len + 1))) {
        snprintf(err, errlen, "%s: out of memory", name ? name : "(yaml)");
        goto done;
    }
    memcpy(d->buf, text, len);
    d->buf[len] = '\0';
    const char *nul = memchr(d->buf, '\0', len);
    if (nul) {
        int line = 1;
        for (const char *c = d->buf; c < nul; c++) line += *c == '\n';
        fail(&p, line, "a NUL byte (not a text file?)");
        goto done;
    }
    if (split_lines(&p, d->buf, len) != 0) goto done;
    if (p.n == 0) {
        fail(&p, 0, "empty: no `key: value` line");
        goto done;
    }
    if (is_item(p.ln[0].s)) {
        fail(&p, p.ln[0].no, "the top level is a sequence; a mapping is expected");
        goto done;
    }
    if (map(&p, p.ln[0].indent, 0) == NONE) goto done;
    if (p.pos < p.n) {
        const line_t *L = &p.ln[p.pos];
        fail(&p, L->no, "the indentation (%d spaces) matches no enclosing block", L->indent);
        goto done;
    }
    for (size_t i = 0; i < d->n_nodes; i++) {
        yaml_node_t *x = &d->nodes[i];
        x->child = x->first == NONE ? NULL : &d->nodes[x->first];
        x->sibling = x->next == NONE ? NULL : &d->nodes[x->next];
    }
    *out = d;
    d = NULL;
    rc = 0;
done:
    free(p.ln);
    yaml_free(d);
    return rc;
}

int yaml_load(const char *path, yaml_doc_t **out, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 1 << 12;
    int rc = -1;
    *out = NULL;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        char *g = realloc(buf, cap);
        if (!g) {
            snprintf(err, errlen, "%s: out of memory", path);
            goto done;
        }
        buf = g;
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        if (cap > YAML_MAX_BYTES) {
            snprintf(err, errlen, "%s: larger than %zu bytes: not a configuration file", path,
                     YAML_MAX_BYTES);
            goto done;
        }
        cap *= 2;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto done;
    }
    rc = yaml_parse(buf, len, path, out, err, errlen);
done:
    free(buf);
    fclose(f);
    return rc;
}

/* ------------------------------------------------------------------ access */

const yaml_node_t *yaml_root(const yaml_doc_t *d) { return d && d->n_nodes ? d->nodes : NULL; }
const char *yaml_name(const yaml_doc_t *d) { return d->name; }
yaml_type_t yaml_type(const yaml_node_t *n) { return n ? n->type : YAML_NULL; }
int yaml_line(const yaml_node_t *n) { return n ? n->line : 0; }

const char *yaml_type_name(yaml_type_t t) {
    static const char *const names[] = {"null", "boolean", "integer", "float", "string",
                                        "mapping", "sequence"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

size_t yaml_len(const yaml_node_t *n) {
    return n && (n->type == YAML_MAP || n->type == YAML_SEQ) ? n->n : 0;
}

const yaml_node_t *yaml_get(const yaml_node_t *n, const char *key) {
    if (!n || n->type != YAML_MAP) return NULL;
    for (const yaml_node_t *c = n->child; c; c = c->sibling)
        if (!strcmp(c->key, key)) return c;
    return NULL;
}

const yaml_node_t *yaml_at(const yaml_node_t *n, size_t i, const char **key) {
    if (!n || (n->type != YAML_MAP && n->type != YAML_SEQ)) return NULL;
    const yaml_node_t *c = n->child;
    while (c && i--) c = c->sibling;
    if (c && key) *key = c->key;
    return c;
}

const char *yaml_str(const yaml_node_t *n) {
    return n && n->type != YAML_MAP && n->type != YAML_SEQ ? n->text : NULL;
}
int64_t yaml_int(const yaml_node_t *n) { return n && n->type == YAML_INT ? n->i : 0; }
double yaml_num(const yaml_node_t *n) {
    return n && (n->type == YAML_INT || n->type == YAML_FLOAT) ? n->f : NAN;
}
int yaml_bool(const yaml_node_t *n) { return n && n->type == YAML_BOOL ? (int)n->i : 0; }
