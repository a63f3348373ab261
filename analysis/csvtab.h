/* csvtab: a small CSV table read whole into memory, for measurement files from other tools
 * (Vidur's operator and network profiles): a header line of column names, then rows of
 * comma-separated cells. No quoting (these files have none: a quote is refused); blank lines
 * are skipped; an empty first header cell (pandas' index column) is allowed.
 *
 * Invariants: every row has exactly as many cells as the header (refused otherwise, with
 * the line); cells are kept as text and parsed on demand, so a message can name the file,
 * line and column of the cell that is wrong.
 *
 * Ownership: csvtab_t owns its text; csvtab_free releases it. */
#ifndef TWIN_CSVTAB_H
#define TWIN_CSVTAB_H

#include <stddef.h>

typedef struct {
    char path[1024];
    char *text;        /* the file, NULs in place of separators */
    char **cells;      /* [n_rows * n_cols], row major */
    char **names;      /* [n_cols] */
    int *line;         /* [n_rows]: the file line of each row, for messages */
    int n_rows, n_cols;
} csvtab_t;

/* 0, or -1 with "PATH: ..." / "PATH:LINE: ..." in err (t is then empty). */
int csvtab_read(const char *path, csvtab_t *t, char *err, size_t errlen);
void csvtab_free(csvtab_t *t);

/* The index of the column named `name`, or -1. */
int csvtab_col(const csvtab_t *t, const char *name);
/* Like csvtab_col, but -1 with "PATH:1: no column 'NAME'" in err when it is missing. */
int csvtab_need(const csvtab_t *t, const char *name, char *err, size_t errlen);

static inline const char *csvtab_cell(const csvtab_t *t, int row, int col) {
    return t->cells[(size_t)row * (size_t)t->n_cols + (size_t)col];
}
/* The cell as a finite number: 0, or -1 with "PATH:LINE: column NAME: 'X' is not a number". */
int csvtab_num(const csvtab_t *t, int row, int col, double *v, char *err, size_t errlen);

#endif
