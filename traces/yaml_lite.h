/* yaml_lite: a small, strict reader for the subset of YAML that configuration dumps use
 * (inference-perf's resolved config.yaml, its flat exp-config.yaml), so that the importer
 * (analysis/import_ip.c) can read them without a YAML library.
 *
 * Accepted:
 *  - block mappings by indentation (spaces only): `key: value` and `key:` followed by a
 *    more indented block, or by a block sequence at the key's own indentation (PyYAML's
 *    default dump style, `stages:` then `- rate: 8.0` under it);
 *  - block sequences whose items are mappings, `- key: value` with the item's other keys
 *    aligned under the first one;
 *  - plain scalars, typed by the YAML 1.2 core schema: null (`null`, `Null`, `NULL`, `~`, or
 *    nothing), booleans (`true`, `false` and their capitalised forms), decimal integers,
 *    decimal floats (`1.0`, `-2.5e-3`, `.5`); anything else is a string;
 *  - one-line quoted strings: "..." with the escapes \" \\ \/ \n \t \r, and '...' with ''
 *    for a quote (always strings);
 *  - the empty flow collections `[]` and `{}`;
 *  - comment lines, ` # comments` after a value, blank lines, CRLF line ends, a UTF-8 BOM.
 * Refused, with "NAME:LINE: what": tabs in the indentation, anchors, aliases, tags, block
 * scalars (| and >), flow collections with content, multi-line plain or quoted scalars,
 * document markers (--- and ...), complex and quoted keys, sequence items that are not
 * mappings, a value holding ": " unquoted, duplicate keys, nesting deeper than
 * YAML_MAX_DEPTH, a NUL byte, a top level that is not a mapping, an empty document.
 *
 * Invariants: a document that parsed has a mapping at its root; every node keeps a 1-based
 * line for messages (a mapping's value: its key's line; a sequence item: its dash's line;
 * the root: its first line); a mapping's keys are unique and keep the file's order.
 *
 * Ownership: yaml_parse and yaml_load return a document the caller frees with yaml_free;
 * every node and string it hands out is borrowed from the document and lives until
 * yaml_free. The text given to yaml_parse is copied. */
#ifndef TWIN_YAML_LITE_H
#define TWIN_YAML_LITE_H

#include <stddef.h>
#include <stdint.h>

#define YAML_MAX_DEPTH 64
#define YAML_MAX_BYTES ((size_t)16 << 20)   /* a configuration file, not a data set */

typedef enum {
    YAML_NULL = 0, YAML_BOOL, YAML_INT, YAML_FLOAT, YAML_STR, YAML_MAP, YAML_SEQ,
} yaml_type_t;

typedef struct yaml_doc yaml_doc_t;
typedef struct yaml_node yaml_node_t;

/* Parses len bytes of text; name is used in messages ("NAME:LINE: ..."). 0 with *out set,
 * or -1 with the message in err and *out NULL. */
int yaml_parse(const char *text, size_t len, const char *name, yaml_doc_t **out, char *err,
               size_t errlen);
/* Reads and parses the file at path (named by path in messages). 0, or -1 as yaml_parse
 * ("PATH: No such file or directory" when it cannot be read). */
int yaml_load(const char *path, yaml_doc_t **out, char *err, size_t errlen);
void yaml_free(yaml_doc_t *d);

const yaml_node_t *yaml_root(const yaml_doc_t *d);
const char *yaml_name(const yaml_doc_t *d);

yaml_type_t yaml_type(const yaml_node_t *n);
/* "null", "boolean", "integer", "float", "string", "mapping", "sequence" */
const char *yaml_type_name(yaml_type_t t);
int yaml_line(const yaml_node_t *n);

/* Entries of a mapping or items of a sequence (0 for a scalar). */
size_t yaml_len(const yaml_node_t *n);
/* A mapping's value for key, or NULL when absent (or n is not a mapping). */
const yaml_node_t *yaml_get(const yaml_node_t *n, const char *key);
/* Entry i of a mapping (its key in *key when key is not NULL) or item i of a sequence;
 * NULL past the end. */
const yaml_node_t *yaml_at(const yaml_node_t *n, size_t i, const char **key);

/* A scalar's text as written (quotes and escapes resolved); NULL for a mapping, a
 * sequence or null. */
const char *yaml_str(const yaml_node_t *n);
/* An integer's value (0 for any other type). */
int64_t yaml_int(const yaml_node_t *n);
/* An integer's or a float's value (NAN for any other type). */
double yaml_num(const yaml_node_t *n);
/* A boolean's value (0 for any other type). */
int yaml_bool(const yaml_node_t *n);

#endif
