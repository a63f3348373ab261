/* generate: see generate.h. */
#include "engine/generate.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend.h"
#include "engine/draft.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/spec.h"
#include "engine/tokenizer.h"
#include "traces/rng.h"

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void gen_opts_defaults(gen_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->n = 256;
    o->top_p = 1.0f;
    o->backend = "cpu";
}

/* A piece, skipping lone non-printable bytes (as llama2.c's safe print does). */
static void put_piece(FILE *out, tok_t *t, int32_t prev, int32_t id) {
    if (!t) {
        fprintf(out, "%d ", id);
        return;
    }
    const char *p = tok_decode(t, prev, id);
    if (!p || !*p) return;
    if (p[1] == '\0' && !isprint((unsigned char)p[0]) && !isspace((unsigned char)p[0])) return;
    fputs(p, out);
}

/* Everything a speculative step loop needs of gen_run's state. */
typedef struct {
    const gen_opts_t *o;
    FILE *out;
    tok_t *tok;
    fwd_t *fwd;
    draft_t *draft;          /* NULL: n-gram drafts */
    int32_t k, ctx, nb;
    int32_t *ids, *pos, *table, *gen;
    bk_sample_t sp;
} gen_spec_t;

/* The speculative loop (generate.h): drafts, one target pass over the last token and the
 * drafts, verification, then the emitted tokens in order. *n: tokens in ids. 0 or -1. */
static int spec_loop(const gen_spec_t *g, int32_t *n_io, gen_stats_t *st, char *err,
                     size_t errlen) {
    const gen_opts_t *o = g->o;
    int32_t n = *n_io, start = 0, k = g->k, rc = -1;
    bk_sample_t *sps = malloc(sizeof *sps * (size_t)(k + 1));
    int32_t *rows = malloc(sizeof *rows * (size_t)(k + 1));
    int32_t *next = malloc(sizeof *next * (size_t)(k + 1));
    if (!sps || !rows || !next) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    while (st->generated < o->n && n < g->ctx) {
        /* no drafts past the last token wanted or the context */
        int32_t kk = k, left = o->n - st->generated - 1;
        if (kk > left) kk = left;
        if (kk > g->ctx - n - 1) kk = g->ctx - n - 1;
        for (int32_t j = 0; j <= kk; j++) {
            sps[j] = g->sp;
            sps[j].idx = st->generated + j;
            rows[j] = n - 1 - start + j;
        }
        double w = wall();
        draft_seq_t s = { .req_id = 0, .toks = g->ids, .start = start, .end = n, .k = kk,
                          .prefill = start == 0, .blocks = g->table, .num_blocks = g->nb,
                          .sample = sps };
        if (g->draft && draft_step(g->draft, &s, 1) != 0) {
            snprintf(err, errlen, "%s", draft_errmsg(g->draft));
            goto done;
        }
        if (!g->draft && kk > 0) spec_propose_ngram(g->ids, n, kk, g->ids + n);
        int32_t len = n + kk - start, seq_start[2] = { 0, len }, seq_len = n + kk;
        int32_t bt[2] = { 0, g->nb };
        for (int32_t i = 0; i < len; i++) g->pos[i] = start + i;
        bk_batch_t b = { .n_tokens = len, .n_seqs = 1, .tokens = g->ids + start, .pos = g->pos,
                         .seq_start = seq_start, .seq_len = &seq_len, .bt_start = bt,
                         .block_table = g->table, .n_sample = kk + 1, .sample_rows = rows,
                         .sample = sps };
        if (fwd_step(g->fwd, &b, next) != 0) {
            snprintf(err, errlen, "%s", fwd_errmsg(g->fwd));
            goto done;
        }
        const int32_t *emit = next;
        int32_t a = g->draft && kk > 0 ? draft_verify(g->draft, 0, g->fwd, 0, next, sps, &emit)
                                       : spec_accept(g->ids + n, next, kk);
        if (a < 0) {
            snprintf(err, errlen, "%s", draft_errmsg(g->draft));
            goto done;
        }
        if (start == 0) st->prefill_s = wall() - w;
        else st->decode_s += wall() - w;
        st->spec_steps += kk > 0;
        st->spec_proposed += kk;
        st->spec_accepted += a;
        for (int32_t j = 0; j <= a; j++) {
            if (emit[j] == TOK_BOS || emit[j] == TOK_EOS) {
                rc = 0;
                goto done;
            }
            put_piece(g->out, g->tok, g->ids[n - 1], emit[j]);
            g->gen[st->generated++] = emit[j];
            g->ids[n++] = emit[j];
            if (st->generated >= o->n || n >= g->ctx) break;
        }
        fflush(g->out);
        start = n - 1;
    }
    rc = 0;
done:
    *n_io = n;
    free(sps), free(rows), free(next);
    return rc;
}

int gen_run(const gen_opts_t *o, FILE *out, gen_stats_t *st, char *err, size_t errlen) {
    model_t *m = NULL;
    tok_t *tok = NULL;
    backend_t *bk = NULL;
    fwd_t *fwd = NULL;
    draft_t *draft = NULL;
    int32_t *ids = NULL, *table = NULL, *pos = NULL, *gen = NULL;
    int rc = -1;
    memset(st, 0, sizeof *st);
    double t0 = wall();

    if (model_open(o->model, o->seed, MODEL_SHAPE_ONLY | MODEL_LAZY, &m, err, errlen) != 0)
        goto done;
    if (tok_load_for_model(o->model, m->format, m->cfg.vocab, o->tokenizer, &tok, err,
                           errlen) != 0)
        goto done;
    const model_config_t *c = &m->cfg;
    int32_t ctx = c->max_seq, bs = 16;
    /* Room for any encoding of the prompt (at most one token per byte, plus BOS and the
     * dummy prefix), so that a long prompt is measured before it is refused. */
    size_t cap = (size_t)ctx + (o->prompt ? strlen(o->prompt) + 2 : 0);
    if (cap > INT32_MAX) {
        snprintf(err, errlen, "the prompt is too long");
        goto done;
    }
    ids = malloc(sizeof *ids * cap);
    pos = malloc(sizeof *pos * (size_t)ctx);
    gen = malloc(sizeof *gen * (size_t)(o->n > 0 ? o->n : 1));
    if (!ids || !pos || !gen) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    int32_t n_prompt = 0;
    if (o->prompt && *o->prompt) {
        if (!tok) {
            snprintf(err, errlen, "%s has no tokenizer: a --prompt needs text pieces", o->model);
            goto done;
        }
        if (tok_encode(tok, o->prompt, 1, 0, ids, (int32_t)cap, &n_prompt, err, errlen) != 0)
            goto done;
    } else {
        ids[n_prompt++] = TOK_BOS;
    }
    if (n_prompt >= ctx) {
        snprintf(err, errlen, "the prompt is %d tokens; %s's context is %d (room for at least "
                 "one new token is needed)", n_prompt, o->model, ctx);
        goto done;
    }
    /* The forward pass is sized for this run, not the model's whole context: the largest
     * step is the prompt, and positions end at the prompt plus the new tokens (a 128k
     * context's KV pool would otherwise be allocated, and zeroed, for a short story). */
    int32_t k = o->draft ? (o->spec_k > 0 ? o->spec_k : GEN_SPEC_K) : 0;
    int32_t last = n_prompt + (o->n > 0 ? o->n : 1) + k;   /* drafts past the last token */
    int32_t nb = ((last < ctx ? last : ctx) + bs - 1) / bs;
    if (!(table = malloc(sizeof *table * (size_t)nb))) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < nb; i++) table[i] = i;
    bk_opts_t bo = { .n_threads = o->n_threads, .dtype = o->dtype, .weights = o->weights,
                     .kv_type = o->kv_type };
    if (!(bk = backend_new(o->backend ? o->backend : "cpu", &bo, err, errlen))) goto done;
    fwd_opts_t fo = { .max_tokens = n_prompt > k + 1 ? n_prompt : k + 1, .max_sample = k + 1,
                      .n_blocks = nb, .block_size = bs };
    if (fwd_new(bk, m, &fo, &fwd, err, errlen) != 0) goto done;
    if (o->draft && strcmp(o->draft, "ngram")) {
        draft_opts_t dopt = { .spec = o->draft, .backend = bk->name, .bk = bo, .seed = o->seed,
                              .vocab = c->vocab, .max_model_len = last < ctx ? last : ctx,
                              .max_tokens = fo.max_tokens, .max_seqs = 1, .block_size = bs };
        if (draft_open(&dopt, &draft, err, errlen) != 0) goto done;
        if (draft_kv_init(draft, nb) != 0) {
            snprintf(err, errlen, "%s", draft_errmsg(draft));
            goto done;
        }
    }
    snprintf(st->weights, sizeof st->weights, "%s",
             fwd_weight_type(fwd) ? fwd_weight_type(fwd) : bk->weight_type);
    st->load_s = wall() - t0;
    st->prompt_tokens = n_prompt;

    rng_t r;
    rng_seed3(&r, o->seed, 0, 0x73616d706c65ULL);
    bk_sample_t sp = { .temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p,
                       .seed = rng_u64(&r) };
    /* --ids: the token ids, whatever the tokenizer (the prompt was encoded with it) */
    tok_t *show = o->print_ids ? NULL : tok;
    for (int32_t i = 1; i < n_prompt; i++) put_piece(out, show, ids[i - 1], ids[i]);
    fflush(out);
    int32_t n = n_prompt, start = 0;
    gen_spec_t g = { o, out, show, fwd, draft, k, ctx, nb, ids, pos, table, gen, sp };
    if (k > 0 && spec_loop(&g, &n, st, err, errlen) != 0) goto done;
    while (k == 0 && st->generated < o->n && n < ctx) {
        int32_t len = n - start, seq_start[2] = { 0, len }, seq_len = n, bt[2] = { 0, nb };
        int32_t row = len - 1, next;
        for (int32_t i = 0; i < len; i++) pos[i] = start + i;
        sp.idx = st->generated;
        bk_batch_t b = { .n_tokens = len, .n_seqs = 1, .tokens = ids + start, .pos = pos,
                         .seq_start = seq_start, .seq_len = &seq_len, .bt_start = bt,
                         .block_table = table, .n_sample = 1, .sample_rows = &row,
                         .sample = &sp };
        double w = wall();
        if (fwd_step(fwd, &b, &next) != 0) {
            snprintf(err, errlen, "%s", fwd_errmsg(fwd));
            goto done;
        }
        if (start == 0) st->prefill_s = wall() - w;
        else st->decode_s += wall() - w;
        if (next == TOK_BOS || next == TOK_EOS) break;
        put_piece(out, show, ids[n - 1], next);
        fflush(out);
        gen[st->generated++] = next;
        ids[n++] = next;
        start = n - 1;
    }
    /* Flushed here: the caller's statistics go to stderr, and must not land on the text's
     * last line when both streams share a pipe. */
    fputc('\n', out);
    fflush(out);
    st->ids = gen;
    gen = NULL;
    rc = 0;
done:
    fwd_free(fwd);
    draft_free(draft);
    if (bk) bk->destroy(bk);
    tok_free(tok);
    model_free(m);
    free(ids), free(pos), free(table), free(gen);
    return rc;
}
