/* import_ip_internal: what the three files of the inference-perf folder reader share
 * (import_ip.c: the folder, replay.json's requests, ground_truth.json, the prompt cycle and
 * the run's config; import_ip_config.c: the YAML files and the model; import_ip_stages.c:
 * the JSON helpers, the per-stage summary files and the cross-checks of the optional
 * profile.yaml and summary_lifecycle_metrics.json). Nothing outside analysis/import_ip*.c
 * includes this header. The folder's layout and every
 * convention are in import.h and docs/analysis.md ("inference-perf experiment folders").
 *
 * Invariants: every message names its place as "DIR/FILE:LINE: ..." (YAML),
 * "DIR/FILE: key 'a.b' ..." or "DIR/FILE: requests[12]: ..." (JSON), or "DIR: ..." for the
 * folder; DIR is the folder as given, without a trailing '/'.
 *
 * Ownership: an ip_t owns its in-memory SQLite connection (the JSON functions) and its
 * copy of DIR; an ip_json_t owns its file's text (ip_json_close); an ip_exp_t owns its
 * stages and per-request arrays (import_ip.c frees them). */
#ifndef TWIN_IMPORT_IP_INTERNAL_H
#define TWIN_IMPORT_IP_INTERNAL_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/import.h"
#include "traces/yaml_lite.h"

/* Longer than any per-request file these folders hold (3.5 MB for 16,800 requests). */
#define IP_MAX_BYTES ((size_t)1 << 30)

typedef struct {
    char *dir;                 /* the folder as given, trailing '/' removed; owned */
    sqlite3 *db;               /* ":memory:", for json_each / json_extract; owned */
    char *err;
    size_t errlen;
} ip_t;

typedef struct {
    char name[64];             /* "replay.json" */
    char *text;                /* the file, NUL-terminated; owned */
    size_t len;
} ip_json_t;

/* A JSON value looked up by path: type as json_type names it ("" when absent). */
typedef struct {
    char type[16];
    double num;
    int64_t i;
    char text[256];            /* a string's text, cut to fit */
} ip_val_t;

/* One load stage: config.yaml's rate and duration, the stage file's request count, and
 * the request range [first, first + count) it covers. */
typedef struct {
    double rate, duration;
    int line;                  /* config.yaml's line of the stage, for messages */
    int64_t first, count;      /* from the stage file */
    int64_t successes, failures;
} ip_stage_t;

/* replay.json's model_config, in this order (import_ip_config.c checks it) */
enum { MC_LAYERS, MC_HIDDEN, MC_HEADS, MC_KV_HEADS, MC_FF, MC_EXPERTS, MC_TOPK, MC_VOCAB, MC_N };
extern const char *const ip_model_keys[MC_N];

/* Everything read from the folder, checked. */
typedef struct {
    /* exp-config.yaml */
    char model_id[256];        /* the Hugging Face id */
    int64_t tp, max_model_len, max_batched, max_seqs;
    /* config.yaml */
    char api[64], engine[64], server_model[256];
    int streaming, ignore_eos;
    int64_t groups, per_group, sys_len, q_len, out_len;   /* data.shared_prefix */
    double timeout_s;          /* load.request_timeout, else aiohttp's default */
    int timeout_given;
    ip_stage_t *stages;        /* n_stages, owned */
    size_t n_stages;
    /* replay.json */
    int64_t kv_blocks, block_size, shape[MC_N];
    size_t n;                  /* requests; the arrays below hold n entries, owned */
    double *arrival_us, *ttft, *e2e;
    int32_t *input, *output;
    unsigned char *failed;
    /* derived */
    char model[256];           /* what runs.model records */
    char model_note[640];      /* how it was chosen, for the summary line */
    char experiment[256];      /* the folder's name */
    size_t imputed_near, imputed_mean, n_failed;
    int64_t pairs;             /* pairs (i, i + N) that both recorded a prompt */
    double cycle_check;        /* the share of them with equal prompts; NAN without pairs */
} ip_exp_t;

/* The YAML files (import_ip_config.c): exp-config.yaml and config.yaml into e, checked
 * on their own. 0 or -1. */
int ip_read_yaml(ip_t *ip, ip_exp_t *e);
/* The model to record (--model, else the preset e->model_id names, else the id), its shape
 * checked against replay.json's model_config (e->shape) when it is a preset. 0 or -1. */
int ip_resolve_model(ip_t *ip, const import_opts_t *o, ip_exp_t *e);

/* "DIR/FILE:LINE: msg" (line > 0), "DIR/FILE: msg" (file), "DIR: msg". Returns -1. */
int ip_fail(ip_t *ip, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Reads DIR/name whole and checks it is valid JSON. 0 read; 1 absent and !required;
 * -1 with a message ("DIR: NAME is missing" when required). */
int ip_json_open(ip_t *ip, const char *name, int required, ip_json_t *j);
void ip_json_close(ip_json_t *j);
/* A statement over the file's text: ?1 is bound to it (the caller finalizes). */
sqlite3_stmt *ip_json_prep(ip_t *ip, const ip_json_t *j, const char *sql);
/* The value at JSON path (SQLite syntax, e.g. $.load_summary."requested_rate"). 0 or -1. */
int ip_json_get(ip_t *ip, const ip_json_t *j, const char *path, ip_val_t *v);
int ip_is_number(const char *json_type);
/* A number at path, label naming it in messages: required, finite, > 0 when positive
 * (else >= 0). 0 or -1. */
int ip_json_num(ip_t *ip, const ip_json_t *j, const char *path, const char *label,
                int positive, double *out);
/* A whole number >= min at path. 0 or -1. */
int ip_json_int(ip_t *ip, const ip_json_t *j, const char *path, const char *label,
                int64_t min, int64_t *out);

/* The stage files (import_ip_stages.c): checks that stage_0 .. stage_{n-1} exist (and no
 * stage_n), that their load_summary.requested_rate is config.yaml's rate, that successes
 * and failures add up to load_summary.count, that the counts sum to n_req and that each
 * stage's failures.count is the number of failed[] requests in its range; sets every
 * stage's first, count, successes and failures, and writes the config's member
 * ,"stages":[...] to f. 0 or -1. */
int ip_read_stages(ip_t *ip, ip_stage_t *st, size_t n, const unsigned char *failed,
                   size_t n_req, FILE *f);
/* The optional files: profile.yaml's load.stages must be config.yaml's (rate, duration),
 * summary_lifecycle_metrics.json's load_summary.count must be n_req. 0 or -1. */
int ip_cross_check(ip_t *ip, const ip_stage_t *st, size_t n, size_t n_req);

#endif
