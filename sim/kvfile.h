/* kvfile: the plain "key = value" text files of twinserve's presets and cost models.
 *
 * Syntax: one `key = value` per line; `#` starts a comment (a whole line or after a
 * value); blank lines are ignored; a key may appear once. Keys are described by tables of
 * specs (name, type, offset into a struct, required), so that a file can combine several
 * (a cost file holds a model shape, hardware figures and its own coefficients); keys no
 * table knows go to an optional handler, else they are an error.
 *
 * Sections (kvfile_read_sections, for cluster files): a line `[HEADER]` starts a section,
 * handed to a section callback with its line; keys may repeat across sections, not within
 * one.
 *
 * Every message names the file and line: "PATH:LINE: unknown key 'x'", "PATH:LINE: '1.5'
 * is not an integer (n_layers)", "PATH: missing required key 'd_model'".
 *
 * Ownership: the caller's structs are written through the specs' offsets; nothing is
 * kept after the call. */
#ifndef TWIN_KVFILE_H
#define TWIN_KVFILE_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    KV_INT,      /* int32_t, plain decimal */
    KV_DOUBLE,   /* double, finite, scientific notation allowed */
    KV_NAME,     /* char[48] (the presets' name field) */
    KV_TEXT      /* char[256]: free text such as provenance */
} kv_type_t;

#define KV_NAME_CAP 48
#define KV_TEXT_CAP 256

typedef struct {
    const char *key;
    kv_type_t type;
    size_t offset;   /* of the field in the table's struct */
    int required;
} kv_spec_t;

typedef struct {
    const kv_spec_t *specs;
    int n;
    void *obj;       /* the struct the offsets point into */
    int *seen;       /* [n]: set to 1 for each key the file gives; zeroed by kvfile_read */
} kv_table_t;

/* For keys no table knows: 1 handled, 0 unknown (an error), -1 a bad value with the reason
 * in msg (kvfile_read adds "PATH:LINE: "). */
typedef int (*kv_other_fn)(void *ud, const char *key, const char *val, char *msg,
                           size_t msglen);

/* 0, or -1 with a message in err. other may be NULL. */
int kvfile_read(const char *path, kv_table_t *tables, int n_tables, kv_other_fn other,
                void *ud, char *err, size_t errlen);

/* The same from text in memory (NUL-terminated); name stands for the path in messages. */
int kvfile_read_text(const char *name, const char *text, kv_table_t *tables, int n_tables,
                     kv_other_fn other, void *ud, char *err, size_t errlen);

/* A `[header]` line (the text between the brackets, trimmed) at line `line`: 0 accepted,
 * -1 with the reason in msg (kvfile_read_sections adds "PATH:LINE: "). */
typedef int (*kv_section_fn)(void *ud, const char *header, int line, char *msg, size_t msglen);

/* A file of sections: every key goes to `key` (0 = unknown, an error), each `[...]` line
 * to `section`; the same checks and messages as kvfile_read. */
int kvfile_read_sections(const char *path, kv_section_fn section, kv_other_fn key, void *ud,
                         char *err, size_t errlen);

/* A list value "1, 2.5, 4e3" into v (at most cap items; *n set): 0, or -1 with a message
 * naming key and item in msg (for an other-key handler to return). */
int kvfile_parse_list(const char *key, const char *val, double *v, int *n, int cap, char *msg,
                      size_t len);

/* Writes a file the way every kind of key = value file is written: body(f, ud) into
 * PATH.tmp-PID, renamed over path only when all of it was written (a reader never sees half
 * a file). 0, or -1 with a message naming path. */
int kvfile_write(const char *path, void (*body)(FILE *f, const void *ud), const void *ud,
                 char *err, size_t errlen);

/* Each line of comment (may be NULL) as a "# " line. */
void kvfile_put_comment(FILE *f, const char *comment);

/* 1 when spec table t saw `key`. */
int kvfile_seen(const kv_table_t *t, const char *key);

#endif
