/* kvfile: see kvfile.h. */
#include "sim/kvfile.h"
#include "sim/errf.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LINE 65536   /* a cost file's knot lists are long; anything longer is damage */
#define MAX_OTHER 64     /* distinct keys handled by `other`, for the duplicate check */

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

/* One value into its field; -1 with the reason (no location) in msg. */
static int set_value(const kv_spec_t *k, const char *val, void *obj, char *msg, size_t len) {
    char *field = (char *)obj + k->offset;
    char *end = NULL;
    if (k->type == KV_NAME || k->type == KV_TEXT) {
        size_t cap = k->type == KV_NAME ? KV_NAME_CAP : KV_TEXT_CAP;
        if (strlen(val) >= cap)
            return errf(msg, len, "%s '%s' is longer than %d characters", k->key, val,
                        (int)cap - 1);
        memcpy(field, val, strlen(val) + 1);
        return 0;
    }
    errno = 0;
    if (k->type == KV_INT) {
        long long v = strtoll(val, &end, 10);
        if (end == val || *end != '\0') {
            /* "1.5" or "4e3" parse as numbers but not as integers: say which. */
            char *dend = NULL;
            strtod(val, &dend);
            if (dend != val && *dend == '\0')
                return errf(msg, len, "'%s' is not an integer (%s)", val, k->key);
            return errf(msg, len, "'%s' is not a number (%s)", val, k->key);
        }
        if (errno == ERANGE || v < INT32_MIN || v > INT32_MAX)
            return errf(msg, len, "'%s' is out of range for %s", val, k->key);
        int32_t v32 = (int32_t)v;
        memcpy(field, &v32, sizeof v32);
        return 0;
    }
    double v = strtod(val, &end);
    if (end == val || *end != '\0' || !isfinite(v))
        return errf(msg, len, "'%s' is not a number (%s)", val, k->key);
    memcpy(field, &v, sizeof v);
    return 0;
}

int kvfile_parse_list(const char *key, const char *val, double *v, int *n, int cap, char *msg,
                      size_t len) {
    const char *p = val;
    *n = 0;
    for (;;) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno || !isfinite(x))
            return errf(msg, len, "%s: item %d is not a number ('%s')", key, *n + 1, val);
        if (*n == cap) return errf(msg, len, "%s: more than %d items", key, cap);
        v[(*n)++] = x;
        while (*end == ' ' || *end == '\t') end++;
        if (*end == '\0') return 0;
        if (*end != ',') return errf(msg, len, "%s: expected ',' between items ('%s')", key, val);
        p = end + 1;
    }
}

int kvfile_seen(const kv_table_t *t, const char *key) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->specs[i].key, key) == 0) return t->seen[i];
    return 0;
}

static int read_stream(FILE *f, const char *path, kv_table_t *tables, int n_tables,
                       kv_other_fn other, kv_section_fn section, void *ud, char *err,
                       size_t errlen);

int kvfile_read_sections(const char *path, kv_section_fn section, kv_other_fn key, void *ud,
                         char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) return errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return read_stream(f, path, NULL, 0, key, section, ud, err, errlen);
}

int kvfile_read(const char *path, kv_table_t *tables, int n_tables, kv_other_fn other,
                void *ud, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) return errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return read_stream(f, path, tables, n_tables, other, NULL, ud, err, errlen);
}

int kvfile_read_text(const char *name, const char *text, kv_table_t *tables, int n_tables,
                     kv_other_fn other, void *ud, char *err, size_t errlen) {
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    if (!f) return errf(err, errlen, "%s: cannot read: %s", name, strerror(errno));
    return read_stream(f, name, tables, n_tables, other, NULL, ud, err, errlen);
}

/* Reads f to its end and closes it; path names it in messages. */
static int read_stream(FILE *f, const char *path, kv_table_t *tables, int n_tables,
                       kv_other_fn other, kv_section_fn section, void *ud, char *err,
                       size_t errlen) {
    int rc = -1, lineno = 0, n_other = 0;
    char *buf = NULL, msg[512], *other_keys[MAX_OTHER] = {0};
    size_t cap = 0;
    ssize_t got;
    for (int t = 0; t < n_tables; t++) memset(tables[t].seen, 0, sizeof(int) * (size_t)tables[t].n);
    while ((got = getline(&buf, &cap, f)) >= 0) {
        lineno++;
        if (got > MAX_LINE) {
            errf(err, errlen, "%s:%d: line longer than %d characters", path, lineno, MAX_LINE);
            goto done;
        }
        if ((size_t)got != strlen(buf)) {
            errf(err, errlen, "%s:%d: a NUL byte (not a text file?)", path, lineno);
            goto done;
        }
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        char *line = trim(buf);
        if (!*line) continue;
        size_t len = strlen(line);
        if (section && line[0] == '[' && line[len - 1] == ']') {
            line[len - 1] = '\0';
            msg[0] = '\0';
            if (section(ud, trim(line + 1), lineno, msg, sizeof msg) != 0) {
                errf(err, errlen, "%s:%d: %s", path, lineno, msg);
                goto done;
            }
            /* a key may appear once per section */
            for (int i = 0; i < n_other; i++) free(other_keys[i]);
            n_other = 0;
            continue;
        }
        char *eq = strchr(line, '=');
        if (!eq) {
            errf(err, errlen, "%s:%d: expected 'key = value', got '%s'", path, lineno, line);
            goto done;
        }
        *eq = '\0';
        char *key = trim(line), *val = trim(eq + 1);
        if (!*val) {
            errf(err, errlen, "%s:%d: empty value for '%s'", path, lineno, key);
            goto done;
        }
        int handled = 0;
        for (int t = 0; t < n_tables && !handled; t++)
            for (int i = 0; i < tables[t].n; i++) {
                if (strcmp(tables[t].specs[i].key, key) != 0) continue;
                if (tables[t].seen[i]) {
                    errf(err, errlen, "%s:%d: duplicate key '%s'", path, lineno, key);
                    goto done;
                }
                if (set_value(&tables[t].specs[i], val, tables[t].obj, msg, sizeof msg) != 0) {
                    errf(err, errlen, "%s:%d: %s", path, lineno, msg);
                    goto done;
                }
                tables[t].seen[i] = handled = 1;
                break;
            }
        if (!handled && other) {
            for (int i = 0; i < n_other; i++)
                if (strcmp(other_keys[i], key) == 0) {
                    errf(err, errlen, "%s:%d: duplicate key '%s'", path, lineno, key);
                    goto done;
                }
            msg[0] = '\0';
            handled = other(ud, key, val, msg, sizeof msg);
            if (handled < 0) {
                errf(err, errlen, "%s:%d: %s", path, lineno, msg);
                goto done;
            }
            if (handled && n_other < MAX_OTHER && !(other_keys[n_other++] = strdup(key))) {
                errf(err, errlen, "out of memory reading %s", path);
                goto done;
            }
        }
        if (!handled) {
            errf(err, errlen, "%s:%d: unknown key '%s'", path, lineno, key);
            goto done;
        }
    }
    if (ferror(f)) {
        errf(err, errlen, "%s: read error", path);
        goto done;
    }
    for (int t = 0; t < n_tables; t++)
        for (int i = 0; i < tables[t].n; i++)
            if (tables[t].specs[i].required && !tables[t].seen[i]) {
                errf(err, errlen, "%s: missing required key '%s'", path, tables[t].specs[i].key);
                goto done;
            }
    rc = 0;
done:
    fclose(f);
    free(buf);
    for (int i = 0; i < n_other; i++) free(other_keys[i]);
    return rc;
}

int kvfile_write(const char *path, void (*body)(FILE *f, const void *ud), const void *ud,
                 char *err, size_t errlen) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return errf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    body(f, ud);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        unlink(tmp);
        return errf(err, errlen, "%s: write error", path);
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return errf(err, errlen, "%s: cannot write: %s", path, strerror(e));
    }
    return 0;
}

void kvfile_put_comment(FILE *f, const char *comment) {
    for (const char *p = comment; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(f, "# %.*s\n", (int)n, p);
        p += n + (nl ? 1 : 0);
    }
}
