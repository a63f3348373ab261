/* profile: the file format of timed forward passes, the input `twinserve calibrate` fits the
 * simulator's cost models to (`twinserve profile` writes it from our engine; anyone may write
 * one from another engine: vLLM, SGLang...). No engine dependency: the simulator side owns
 * the format. docs/fidelity.md documents it for users.
 *
 * The file is plain CSV behind a header block:
 *
 *     # twinserve profile 1                    magic + format version (line 1, exactly)
 *     # key = value                            header lines, any number, any order
 *     kind,dec_seqs,...,median_s,...           the column names (in any order)
 *     decode,8,512,0,0,0,8,8,8,4104,4104,5,0.0123,...   one row per measured point
 *
 * Header keys known to the reader (every other key is kept, in order, as provenance):
 *   model, backend, weight_type, threads, date, version, command   provenance
 *   n_layers, d_model, n_heads, n_kv_heads, head_dim, d_ff, vocab, max_seq,
 *   tied_embeddings, dtype_bytes       the model's shape: exactly a preset file's keys
 *                                      (sim/presets.c); all present -> has_shape, checked
 *                                      with preset_model_validate. dtype_bytes is the
 *                                      weight element size of the backend's weight type.
 *   mem_bw_gbs, gemm_gflops            the device's roofs measured before the points (GB/s,
 *   mem_bw_gbs_end, gemm_gflops_end    GFLOP/s) and after them, so that drift is visible
 *   warmup, reps                       un-timed passes per point; timed passes per point
 *   host                               "measured: ..." or "not measured: WHY"
 *   note                               free text (skipped points ...), repeatable
 *
 * Columns. REQUIRED: tokens, seqs, sampled, kv_tokens, attn_pairs (the pass's features,
 * sim/cost.h: cost_features_t) and median_s. Optional: kind (default "step"); the shape
 * dec_seqs, dec_ctx (dec_seqs decodes, each 1 token after dec_ctx cached ones, each sampled)
 * and chunk_tokens, chunk_ctx, chunk_sampled (one prompt chunk after chunk_ctx cached
 * tokens, chunk_sampled rows sampled); reps; mean_s, min_s, max_s, p10_s, p90_s (p10/p90:
 * numpy's linear percentiles over the reps). An empty field is an absent value. Unknown
 * columns are ignored. kind=host rows are samples of the engine's CPU-side time before a
 * pass (schema 3's steps.host_s; seqs = the pass's sequences, the other features the mean of
 * the group, rounded); every other kind times a forward pass.
 *
 * Invariants checked by the reader (each error "FILE:LINE: what"): the magic line and
 * version; header lines `# key = value`; shape keys positive integers (tied_embeddings 0 or
 * 1); every required column; every row as many fields as the column line; numbers finite
 * and >= 0; 1 <= seqs <= tokens, sampled <= tokens, kv_tokens >= tokens, attn_pairs >=
 * tokens; median_s > 0; when all five shape columns hold values, the features equal those
 * cost_features_add gives for that shape; at least one row.
 *
 * Ownership: profile_read fills a profile_t the caller owns (profile_free releases what it
 * allocated; it is safe on a zeroed or partly read profile). The writers borrow their
 * arguments for the call. */
#ifndef TWIN_PROFILE_H
#define TWIN_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/cost.h"
#include "sim/presets.h"

#define PROFILE_MAGIC "# twinserve profile"
#define PROFILE_VERSION 1

typedef struct {
    char kind[16];                    /* "decode", "prefill", "mixed", "host", "step"... */
    int32_t dec_seqs, dec_ctx, chunk_tokens, chunk_ctx, chunk_sampled; /* -1 when absent */
    cost_features_t f;
    int32_t reps;                     /* -1 when absent */
    double median_s, mean_s, min_s, max_s, p10_s, p90_s; /* NAN when absent, but median_s */
    int64_t line;                     /* source line, for messages (0: not from a file) */
} profile_point_t;

typedef struct {
    char *key, *value;                /* owned by the profile */
    int64_t line;
} profile_kv_t;

typedef struct {
    char model[256], backend[32], weight_type[16], date[40], version[32]; /* "" absent */
    int threads;                      /* -1 when absent */
    preset_model_t shape;             /* named "profile" */
    int has_shape;
    double mem_bw, gemm_flops, mem_bw_end, gemm_flops_end;   /* bytes/s, FLOP/s; NAN absent */
    int warmup, reps;                 /* -1 when absent */
    char host_note[256];              /* "" or why the host rows are missing */
    profile_kv_t *hdr;                /* every header line but the magic, file order */
    size_t n_hdr;
    profile_point_t *pts;             /* every row, file order */
    size_t n;
} profile_t;

/* An empty profile: every optional field absent, no header lines, no points. */
void profile_init(profile_t *p);
void profile_free(profile_t *p);

/* 0, or -1 with "FILE:LINE: what" in err (p is then freed and empty). */
int profile_read(const char *path, profile_t *p, char *err, size_t errlen);
/* Reads an open stream (left open); name stands for the file in messages. */
int profile_read_file(FILE *f, const char *name, profile_t *p, char *err, size_t errlen);

/* Appends a header line (key and value copied; a line break in the value becomes a space).
 * The known keys go through the struct's fields instead: profile_write_header writes those
 * from the fields and then every profile_kv_t whose key is not one of them, so that a
 * profile read and written again keeps its notes and foreign provenance. 0, or -1 when out
 * of memory. */
int profile_add_header(profile_t *p, const char *key, const char *value);
/* The last value of key in the header lines, or NULL. */
const char *profile_header_get(const profile_t *p, const char *key);
/* Appends a point (copied). 0, or -1 when out of memory. */
int profile_add_point(profile_t *p, const profile_point_t *pt);

/* A point with every optional field absent and the features f. */
void profile_point_init(profile_point_t *pt, const char *kind, const cost_features_t *f);
/* The features of a point's shape columns (dec_seqs decodes at dec_ctx, each sampled, plus
 * the chunk), through cost_features_add. 0, or -1 when a shape column is absent. */
int profile_point_shape_features(const profile_point_t *pt, cost_features_t *f);

/* The header block and the column line. command: the command line, or NULL (then the
 * `command` key is left out). 0, or -1 on a write error. */
int profile_write_header(FILE *f, const profile_t *p, const char *command);
/* One data row; absent values are written as empty fields. 0, or -1 on a write error. */
int profile_write_point(FILE *f, const profile_point_t *pt);

#endif
