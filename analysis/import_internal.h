/* import_internal: what the importer's files share (import.c: the CSV reader and the
 * recording; import_vllm.c: vLLM's benchmark JSON; import_ip.c with import_ip_stages.c:
 * an inference-perf experiment folder). Nothing outside analysis/import*.c includes this
 * header.
 *
 * Invariants: a reader fills an import_data_t completely and checked (every request valid
 * on its own), or fails with a message naming the place; times are kept relative to each
 * request's arrival (ttft, e2e, token offsets), and arrivals on the source's clock, so the
 * recording step alone decides the run's time origin.
 *
 * Ownership: the data owns every request's token array and error text, the metadata JSON
 * and the strings a reader adds for the recording (model, members, summary, stem);
 * import_data_free releases them. */
#ifndef TWIN_IMPORT_INTERNAL_H
#define TWIN_IMPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "analysis/import.h"

typedef struct {
    int32_t id;
    double arrival;            /* source clock; unused when arrivals are unknown */
    int32_t prompt, output;    /* output: tokens generated (0 allowed for a failure) */
    double ttft, e2e;          /* from the arrival; unused for a failed request */
    double *tok;               /* n_tok token (or chunk) times from the arrival, owned */
    int32_t n_tok;
    char *error;               /* owned; NULL when the request finished */
} import_req_t;

typedef struct {
    import_req_t *req;
    size_t n, cap;
    int arrivals_known;
    double duration_s;         /* vLLM's benchmark duration; NAN for CSV */
    char *meta_json;           /* vLLM: a JSON object of the result's scalars; owned */
    /* What a reader that learns them from its input sets (inference-perf); NULL / 0 keep
     * the options' */
    char *model;               /* recorded as runs.model and config "model"; owned */
    int32_t tp;                /* config "tp" */
    char *members;             /* JSON members ("a":1,"b":{...}) added to the config; owned */
    char *summary;             /* clauses for the import's summary line; owned */
    char *stem;                /* the default run name's stem (else the file's); owned */
} import_data_t;

void import_data_free(import_data_t *d);

/* Appends a zeroed request (id = its index); NULL when out of memory. */
import_req_t *import_data_add(import_data_t *d);

/* Sets req->error to a copy of text; -1 when out of memory. */
int import_req_fail(import_req_t *req, const char *text);

/* The vLLM reader (import_vllm.c). 0, or -1 with "PATH: ..." in err. */
int import_read_vllm(const char *path, import_data_t *d, char *err, size_t errlen);

/* The inference-perf folder reader (import_ip.c): o->path is the folder; o->model and
 * o->tp are checked against it. 0, or -1 with "DIR...: ..." in err. */
int import_read_ip(const import_opts_t *o, import_data_t *d, char *err, size_t errlen);

#endif
