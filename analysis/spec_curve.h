/* spec_curve: an engine run's speculative acceptance per draft position, as the engine
 * recorded it in the run's config ("spec_curve": {"proposed", "reached", "accepted"},
 * engine/spec.h), read back for `calibrate`, which prints it with the alpha it implies for
 * the simulator's speculative.lua (each reached draft accepted with probability alpha, the
 * same at every position: the pooled ratio is its maximum-likelihood value).
 *
 * Invariants: read-only; a run without speculation has no curve (speccurve_load returns 0).
 * Ownership: plain values. */
#ifndef TWIN_SPEC_CURVE_H
#define TWIN_SPEC_CURVE_H

#include <stdint.h>
#include <stdio.h>

#include "engine/spec.h"

typedef struct {
    spec_curve_t curve;                 /* the counts, as the engine kept them */
    char proposer[32];                  /* "draft" | "ngram" */
    char draft[512];                    /* the draft model as given (proposer draft) */
} speccurve_t;

/* 1 with the curve of run (a name or id; NULL the latest) in db_path, 0 when the run has
 * none, -1 with a message. */
int speccurve_load(const char *db_path, const char *run, speccurve_t *c, char *err,
                   size_t errlen);

/* The curve as a table, the alpha, and the tokens per verification measured vs what the
 * geometric model gives at that alpha. */
void speccurve_print(FILE *f, const speccurve_t *c);

#endif
