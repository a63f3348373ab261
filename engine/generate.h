/* generate: one prompt through the forward pass, token by token, as llama2.c's `run` does:
 * the prompt (BOS first) in one prefill step, then one decode step per new token, printing
 * each piece as it comes. Stops after n new tokens, at the context length, or when the model
 * emits BOS or EOS (which delimit stories in the TinyStories models).
 *
 * The tokenizer: --tokenizer FILE (llama2.c format), else the GGUF file's own, else a
 * tok<VOCAB>.bin or tokenizer.bin next to a llama2.c checkpoint. dummy:PRESET models have
 * none: ids are printed instead of text.
 *
 * Speculative decoding (--draft): each step first proposes up to spec_k tokens, with a
 * draft model (engine/draft.h: a second model sharing the vocabulary) or the n-gram
 * proposer ("ngram"), then the target computes them all in one pass and keeps what
 * verification accepts (engine/spec.h): greedy output is the same token for token as
 * without a draft; sampled output is distributed as the target's.
 *
 * Ownership: gen_run borrows the options; out receives the text. */
#ifndef TWIN_GENERATE_H
#define TWIN_GENERATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *model;
    const char *tokenizer;   /* NULL: see above */
    const char *prompt;      /* NULL or "": BOS alone */
    int32_t n;               /* new tokens (256) */
    float temperature;       /* 0: greedy */
    int32_t top_k;
    float top_p;
    uint64_t seed;
    const char *backend;
    int n_threads;
    const char *dtype;
    const char *weights;     /* bk_opts_t.weights: "native" (NULL) or "f32" */
    const char *kv_type;     /* bk_opts_t.kv_type: "f32" (NULL) or "f16" */
    const char *draft;       /* NULL: no speculation; FILE|dummy:PRESET|"ngram" */
    int32_t spec_k;          /* drafts per step with a draft (GEN_SPEC_K when 0) */
    int print_ids;           /* 1: print token ids, not text (always so without a tokenizer) */
} gen_opts_t;

#define GEN_SPEC_K 4

typedef struct {
    int32_t prompt_tokens;
    int32_t generated;
    double load_s, prefill_s, decode_s;
    int32_t *ids;            /* the generated ids (malloc'd; the caller frees), may be NULL */
    char weights[16];        /* what the products read: a stored type ("Q8_0"), or the
                              * backend's weight type ("f32") */
    int64_t spec_steps, spec_proposed, spec_accepted;   /* with a draft */
} gen_stats_t;

void gen_opts_defaults(gen_opts_t *o);

/* 0, or -1 with a message in err. st->ids is set on success. */
int gen_run(const gen_opts_t *o, FILE *out, gen_stats_t *st, char *err, size_t errlen);

#endif
