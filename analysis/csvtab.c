/* csvtab: see csvtab.h. */
#include "analysis/csvtab.h"
#include "sim/errf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Splits line in place at commas into out (at most max cells); the cell count. */
static int split(char *line, char **out, int max) {
    int n = 0;
    for (char *p = line;; p++) {
        if (n < max) out[n] = p;
        n++;
        p = strchr(p, ',');
        if (!p) break;
        *p = '\0';
    }
    return n;
}

static char *chomp(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
    return s;
}

void csvtab_free(csvtab_t *t) {
    free(t->text);
    free(t->cells);
    free(t->names);
    free(t->line);
    memset(t, 0, sizeof *t);
}

int csvtab_read(const char *path, csvtab_t *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s", path);
    int rc = -1;
    long size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        errf(err, errlen, "%s: cannot read", path);
        goto done;
    }
    if (!(t->text = malloc((size_t)size + 1))) {
        errf(err, errlen, "out of memory reading %s", path);
        goto done;
    }
    if (fread(t->text, 1, (size_t)size, f) != (size_t)size) {
        errf(err, errlen, "%s: read error", path);
        goto done;
    }
    t->text[size] = '\0';
    if (strlen(t->text) != (size_t)size) {
        errf(err, errlen, "%s: a NUL byte (not a CSV text file?)", path);
        goto done;
    }
    if (strchr(t->text, '"')) {
        int ln = 1;
        for (const char *p = t->text; *p != '"'; p++) ln += *p == '\n';
        errf(err, errlen, "%s:%d: a quoted cell: this reader takes plain numeric CSV", path, ln);
        goto done;
    }
    /* lines: at most one row per newline, plus one */
    size_t max_lines = 1;
    for (const char *p = t->text; *p; p++) max_lines += *p == '\n';
    char **lines = malloc(sizeof *lines * max_lines);
    int *lineno = malloc(sizeof *lineno * max_lines);
    if (!lines || !lineno) {
        free(lines);
        free(lineno);
        errf(err, errlen, "out of memory reading %s", path);
        goto done;
    }
    int n_lines = 0, ln = 0;
    for (char *p = t->text, *next; p; p = next) {
        next = strchr(p, '\n');
        if (next) *next++ = '\0';
        ln++;
        chomp(p);
        if (!*p) continue;
        lines[n_lines] = p;
        lineno[n_lines++] = ln;
    }
    t->line = lineno;
    if (n_lines == 0) {
        free(lines);
        errf(err, errlen, "%s: empty file (expected a header line of column names)", path);
        goto done;
    }
    t->n_cols = 1;
    for (const char *p = lines[0]; *p; p++) t->n_cols += *p == ',';
    t->n_rows = n_lines - 1;
    t->names = malloc(sizeof *t->names * (size_t)t->n_cols);
    t->cells = malloc(sizeof *t->cells * ((size_t)t->n_rows * (size_t)t->n_cols + 1));
    if (!t->names || !t->cells) {
        free(lines);
        errf(err, errlen, "out of memory reading %s", path);
        goto done;
    }
    split(lines[0], t->names, t->n_cols);
    for (int r = 0; r < t->n_rows; r++) {
        int n = split(lines[r + 1], t->cells + (size_t)r * (size_t)t->n_cols, t->n_cols);
        if (n != t->n_cols) {
            errf(err, errlen, "%s:%d: %d cells, the header has %d columns", path, lineno[r + 1],
                 n, t->n_cols);
            free(lines);
            goto done;
        }
        t->line[r] = lineno[r + 1];
    }
    free(lines);
    rc = 0;
done:
    fclose(f);
    if (rc != 0) csvtab_free(t);
    return rc;
}

int csvtab_col(const csvtab_t *t, const char *name) {
    for (int c = 0; c < t->n_cols; c++)
        if (!strcmp(t->names[c], name)) return c;
    return -1;
}

int csvtab_need(const csvtab_t *t, const char *name, char *err, size_t errlen) {
    int c = csvtab_col(t, name);
    if (c < 0) errf(err, errlen, "%s:1: no column '%s'", t->path, name);
    return c;
}

int csvtab_num(const csvtab_t *t, int row, int col, double *v, char *err, size_t errlen) {
    const char *s = csvtab_cell(t, row, col);
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    while (*end == ' ') end++;
    if (end == s || *end || errno || !isfinite(x))
        return errf(err, errlen, "%s:%d: column %s: '%s' is not a number", t->path,
                    t->line[row], t->names[col], s);
    *v = x;
    return 0;
}
