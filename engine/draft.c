/* draft: see draft.h.
 *
 * On the CPU the draft's backend runs on the calling thread alone: the engine keeps the
 * target's worker threads spinning between steps (engine.h, idle_sleep), so a second pool of
 * workers would fight them for the cores, and a draft is small enough that its passes are
 * latency-bound anyway. On a GPU the second instance shares the device. */
#include "engine/draft.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/spec.h"

/* Catch-up room in the draft's first pass beyond the target's step budget: a speculating
 * request is usually 1 or 2 positions behind. A pass over more is split (draft_step). */
#define DRAFT_LAG_ROOM 2

struct draft {
    backend_t *bk;
    fwd_t *fwd;
    model_config_t cfg;
    char source[512];
    char errmsg[1024];
    int32_t vocab, max_tokens, max_sample, block_size;
    int32_t *pos;              /* per request id: positions with valid draft KV; -1 unseen */
    int64_t pos_cap;
    /* a pass's batch */
    int32_t *tokens, *bpos, *sample_rows, *ids, *row_seq;
    bk_sample_t *bsample;
    int32_t *seq_start, *seq_len, *bt_start, *block_table;
    int32_t seq_cap;
    int64_t bt_cap;
    /* the step */
    const draft_seq_t *seqs;
    int32_t n;
    int32_t *cur;              /* per sequence: the next position of the first pass */
    int64_t *q_at;             /* per sequence: its first q row, -1 when greedy or idle */
    int32_t step_cap;
    double *q;                 /* [rows][vocab] the draft's distributions of sampled drafts */
    size_t q_rows;
    /* draft_plan's sequences and their drafts' sampling */
    draft_seq_t *pseqs;
    bk_sample_t *psample;
    int32_t pseq_cap;
    int64_t psample_cap;
    /* verification scratch */
    float *logits;             /* [max k + 1][vocab] */
    double *p, *resid;
    float *probs;
    int32_t *idx, *out;
    int32_t verify_cap;        /* rows the buffers above hold */
};

static int fail(draft_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(draft_t *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->errmsg, sizeof d->errmsg, fmt, ap);
    va_end(ap);
    return -1;
}

static int grow(draft_t *d, void **p, size_t elem, size_t n) {
    void *v = realloc(*p, elem * (n > 0 ? n : 1));
    if (!v) return fail(d, "draft: out of memory");
    *p = v;
    return 0;
}

int draft_open(const draft_opts_t *o, draft_t **out, char *err, size_t errlen) {
    *out = NULL;
    model_t *m = NULL;
    draft_t *d = calloc(1, sizeof *d);
    char why[1024];
    if (!d) {
        snprintf(err, errlen, "--draft: out of memory");
        return -1;
    }
    if (model_open(o->spec, o->seed, MODEL_SHAPE_ONLY | MODEL_LAZY, &m, why, sizeof why) != 0) {
        snprintf(err, errlen, "--draft: %s", why);
        goto fail;
    }
    if (m->cfg.vocab != o->vocab) {
        snprintf(err, errlen, "--draft %s: its vocabulary has %d ids, the target model's %d: a "
                 "draft model must share the target's tokenizer", o->spec, m->cfg.vocab,
                 o->vocab);
        goto fail;
    }
    if (m->cfg.max_seq < o->max_model_len) {
        snprintf(err, errlen, "--draft %s: its context of %d tokens is shorter than the run's "
                 "%d (lower --max-model-len)", o->spec, m->cfg.max_seq, o->max_model_len);
        goto fail;
    }
    bk_opts_t bo = o->bk;
    if (!strcmp(o->backend, "cpu")) bo.n_threads = 1;
    if (!(d->bk = backend_new(o->backend, &bo, why, sizeof why))) {
        snprintf(err, errlen, "--draft: backend: %s", why);
        goto fail;
    }
    d->cfg = m->cfg;
    d->vocab = m->cfg.vocab;
    d->block_size = o->block_size;
    d->max_tokens = o->max_tokens + DRAFT_LAG_ROOM * o->max_seqs;
    d->max_sample = o->max_seqs < d->max_tokens ? o->max_seqs : d->max_tokens;
    snprintf(d->source, sizeof d->source, "%s", m->source);
    fwd_opts_t fo = { .max_tokens = d->max_tokens, .max_sample = d->max_sample, .n_blocks = 0,
                      .block_size = o->block_size };
    if (fwd_new(d->bk, m, &fo, &d->fwd, why, sizeof why) != 0) {
        snprintf(err, errlen, "--draft: %s", why);
        goto fail;
    }
    size_t T = (size_t)d->max_tokens, S = (size_t)d->max_sample;
    if (grow(d, (void **)&d->tokens, sizeof(int32_t), T) ||
        grow(d, (void **)&d->bpos, sizeof(int32_t), T) ||
        grow(d, (void **)&d->sample_rows, sizeof(int32_t), S) ||
        grow(d, (void **)&d->ids, sizeof(int32_t), S) ||
        grow(d, (void **)&d->row_seq, sizeof(int32_t), S) ||
        grow(d, (void **)&d->bsample, sizeof(bk_sample_t), S) ||
        grow(d, (void **)&d->probs, sizeof(float), (size_t)d->vocab) ||
        grow(d, (void **)&d->idx, sizeof(int32_t), (size_t)d->vocab) ||
        grow(d, (void **)&d->resid, sizeof(double), (size_t)d->vocab)) {
        snprintf(err, errlen, "--draft: %s", d->errmsg);
        goto fail;
    }
    model_free(m);
    *out = d;
    return 0;
fail:
    model_free(m);
    draft_free(d);
    return -1;
}

void draft_free(draft_t *d) {
    if (!d) return;
    fwd_free(d->fwd);
    if (d->bk) d->bk->destroy(d->bk);
    free(d->pos), free(d->tokens), free(d->bpos), free(d->sample_rows), free(d->ids);
    free(d->row_seq), free(d->bsample), free(d->seq_start), free(d->seq_len);
    free(d->bt_start), free(d->block_table), free(d->cur), free(d->q_at), free(d->q);
    free(d->logits), free(d->p), free(d->resid), free(d->probs), free(d->idx), free(d->out);
    free(d->pseqs), free(d->psample);
    free(d);
}

const char *draft_errmsg(const draft_t *d) { return d->errmsg; }
const char *draft_source(const draft_t *d) { return d->source; }

void draft_shape(draft_t *d, preset_model_t *out) {
    model_preset_shape(&d->cfg, "draft", (int32_t)d->bk->elem_size(d->bk, BK_WEIGHT), out);
}

size_t draft_kv_block_bytes(draft_t *d) {
    bk_kv_shape_t s = { d->cfg.n_layers, 1, d->block_size, d->cfg.n_kv_heads, d->cfg.head_dim };
    return d->bk->kv_block_bytes(d->bk, &s);
}

int draft_kv_init(draft_t *d, int32_t n_blocks) {
    if (fwd_kv_init(d->fwd, n_blocks) != 0)
        return fail(d, "draft %s: %s", d->source, fwd_errmsg(d->fwd));
    return 0;
}

static int reserve_seqs(draft_t *d, int32_t n, int64_t n_bt) {
    if (n > d->seq_cap) {
        int32_t cap = n * 2;
        if (grow(d, (void **)&d->seq_start, sizeof(int32_t), (size_t)cap + 1) ||
            grow(d, (void **)&d->seq_len, sizeof(int32_t), (size_t)cap) ||
            grow(d, (void **)&d->bt_start, sizeof(int32_t), (size_t)cap + 1))
            return -1;
        d->seq_cap = cap;
    }
    if (n_bt > d->bt_cap) {
        if (grow(d, (void **)&d->block_table, sizeof(int32_t), (size_t)n_bt * 2)) return -1;
        d->bt_cap = n_bt * 2;
    }
    return 0;
}

/* Runs the batch laid out in d's arrays: ns sequences, nt tokens, nsm sampled rows. */
static int run_pass(draft_t *d, int32_t ns, int32_t nt, int32_t nsm) {
    d->seq_start[ns] = nt;
    bk_batch_t b = {
        .n_tokens = nt, .n_seqs = ns, .tokens = d->tokens, .pos = d->bpos,
        .seq_start = d->seq_start, .seq_len = d->seq_len, .bt_start = d->bt_start,
        .block_table = d->block_table, .n_sample = nsm, .sample_rows = d->sample_rows,
        .sample = d->bsample,
    };
    if (fwd_step(d->fwd, &b, d->ids) != 0)
        return fail(d, "draft %s: %s", d->source, fwd_errmsg(d->fwd));
    return 0;
}

int draft_warm_up(draft_t *d, const int32_t *table, int32_t n_blocks, int32_t n) {
    if (fwd_warm_up(d->fwd, table, n_blocks, n, n) != 0)
        return fail(d, "draft %s: %s", d->source, fwd_errmsg(d->fwd));
    return 0;
}

/* Adds sequence i's tokens [from, from + len) to the pass being laid out, with a sampled row
 * at its last token when `sample`. */
static void lay_seq(draft_t *d, int32_t i, int32_t from, int32_t len, int sample, int32_t *ns,
                    int32_t *nt, int32_t *nsm, int64_t *nbt) {
    const draft_seq_t *s = &d->seqs[i];
    d->seq_start[*ns] = *nt;
    d->bt_start[*ns] = (int32_t)*nbt;
    for (int32_t j = 0; j < len; j++, (*nt)++) {
        d->tokens[*nt] = s->toks[from + j];
        d->bpos[*nt] = from + j;
    }
    d->seq_len[*ns] = from + len;
    memcpy(d->block_table + *nbt, s->blocks, sizeof(int32_t) * (size_t)s->num_blocks);
    *nbt += s->num_blocks;
    d->bt_start[*ns + 1] = (int32_t)*nbt;
    (*ns)++;
    if (sample) {
        d->sample_rows[*nsm] = *nt - 1;
        d->bsample[*nsm] = (bk_sample_t){ .temperature = 0, .top_p = 1 };
        d->row_seq[(*nsm)++] = i;
    }
}

/* Draft j of sequence i from the last pass's sampled row r: the argmax for a greedy
 * request (the backend's draw), else a draw from q under the request's sampling, q kept. */
static int take_draft(draft_t *d, int32_t i, int32_t j, int32_t r) {
    const draft_seq_t *s = &d->seqs[i];
    int32_t x = d->ids[r];
    if (d->q_at[i] >= 0) {
        if (fwd_logits_rows(d->fwd, r, 1, d->logits) != 0)
            return fail(d, "draft %s: %s", d->source, fwd_errmsg(d->fwd));
        double *q = d->q + (size_t)(d->q_at[i] + j) * (size_t)d->vocab;
        const bk_sample_t *sp = &s->sample[j];
        sampler_dist(d->logits, d->vocab, sp, q, d->probs, d->idx);
        x = sampler_draw(q, d->vocab, sampler_uniform_for(sp->seed, sp->idx, SPEC_U_DRAFT));
    }
    s->toks[s->end + j] = x;
    return 0;
}

static int reserve_step(draft_t *d, const draft_seq_t *seqs, int32_t n, int64_t *n_bt) {
    *n_bt = 0;
    int32_t kmax = 0;
    int64_t max_id = -1;
    size_t rows = 0;
    for (int32_t i = 0; i < n; i++) {
        *n_bt += seqs[i].num_blocks;
        if (seqs[i].k > kmax) kmax = seqs[i].k;
        if (seqs[i].req_id > max_id) max_id = seqs[i].req_id;
        if (seqs[i].k > 0 && seqs[i].sample[0].temperature > 0) rows += (size_t)seqs[i].k;
    }
    if (n > d->step_cap) {
        if (grow(d, (void **)&d->cur, sizeof(int32_t), (size_t)n * 2) ||
            grow(d, (void **)&d->q_at, sizeof(int64_t), (size_t)n * 2))
            return -1;
        d->step_cap = n * 2;
    }
    if (max_id >= d->pos_cap) {
        int64_t cap = d->pos_cap ? d->pos_cap : 1024;
        while (cap <= max_id) cap *= 2;
        if (grow(d, (void **)&d->pos, sizeof(int32_t), (size_t)cap)) return -1;
        for (int64_t i = d->pos_cap; i < cap; i++) d->pos[i] = -1;
        d->pos_cap = cap;
    }
    if (rows > d->q_rows) {
        if (grow(d, (void **)&d->q, sizeof(double) * (size_t)d->vocab, rows)) return -1;
        d->q_rows = rows;
    }
    if (kmax + 1 > d->verify_cap) {
        size_t r = (size_t)kmax + 1, v = (size_t)d->vocab;
        if (grow(d, (void **)&d->logits, sizeof(float) * v, r) ||
            grow(d, (void **)&d->p, sizeof(double) * v, r) ||
            grow(d, (void **)&d->out, sizeof(int32_t), r))
            return -1;
        d->verify_cap = kmax + 1;
    }
    return reserve_seqs(d, n, *n_bt);
}

int draft_step(draft_t *d, const draft_seq_t *seqs, int32_t n) {
    int64_t n_bt;
    d->seqs = seqs;
    d->n = n;
    if (reserve_step(d, seqs, n, &n_bt)) return -1;
    int64_t q_next = 0;
    int32_t kmax = 0;
    for (int32_t i = 0; i < n; i++) {
        const draft_seq_t *s = &seqs[i];
        int32_t have = d->pos[s->req_id];
        d->q_at[i] = -1;
        d->cur[i] = s->end;
        if (!s->prefill && s->k == 0) continue;   /* a plain decode: the draft falls behind */
        if (s->k > 0 && s->start >= s->end)
            return fail(d, "internal: request %d drafts with nothing to compute", s->req_id);
        /* never seen: trust the cached prefix (draft.h); else what the target holds too */
        d->cur[i] = have < 0 || have > s->start ? s->start : have;
        if (s->k > 0 && s->sample[0].temperature > 0) {
            d->q_at[i] = q_next;
            q_next += s->k;
        }
        if (s->k > kmax) kmax = s->k;
    }
    /* the first pass: what each request lacks, and its first draft; split when over budget */
    for (;;) {
        int32_t ns = 0, nt = 0, nsm = 0;
        int64_t nbt = 0;
        for (int32_t i = 0; i < n && nt < d->max_tokens; i++) {
            const draft_seq_t *s = &seqs[i];
            int32_t len = s->end - d->cur[i];
            if (len <= 0) continue;
            if (len > d->max_tokens - nt) len = d->max_tokens - nt;
            int last = d->cur[i] + len == s->end;
            lay_seq(d, i, d->cur[i], len, last && s->k > 0, &ns, &nt, &nsm, &nbt);
            d->cur[i] += len;
        }
        if (nt == 0) break;
        if (run_pass(d, ns, nt, nsm)) return -1;
        for (int32_t r = 0; r < nsm; r++)
            if (take_draft(d, d->row_seq[r], 0, r)) return -1;
    }
    /* then one token per pass for every request that wants another draft */
    for (int32_t j = 1; j < kmax; j++) {
        int32_t ns = 0, nt = 0, nsm = 0;
        int64_t nbt = 0;
        for (int32_t i = 0; i < n; i++)
            if (seqs[i].k > j) lay_seq(d, i, seqs[i].end - 1 + j, 1, 1, &ns, &nt, &nsm, &nbt);
        if (run_pass(d, ns, nt, nsm)) return -1;
        for (int32_t r = 0; r < nsm; r++)
            if (take_draft(d, d->row_seq[r], j, r)) return -1;
    }
    /* every position before end is now the draft's; draft_verify may add accepted drafts */
    for (int32_t i = 0; i < n; i++)
        if (seqs[i].prefill || seqs[i].k > 0) d->pos[seqs[i].req_id] = seqs[i].end;
    return 0;
}

int draft_plan(draft_t *d, const sched_plan_t *p, const draft_src_t *src) {
    int64_t n_spec = 0;
    for (int32_t i = 0; i < p->n; i++) n_spec += p->entries[i].sample ? p->entries[i].num_spec : 0;
    if (p->n > d->pseq_cap) {
        if (grow(d, (void **)&d->pseqs, sizeof *d->pseqs, (size_t)p->n * 2)) return -1;
        d->pseq_cap = p->n * 2;
    }
    if (n_spec > d->psample_cap) {
        if (grow(d, (void **)&d->psample, sizeof *d->psample, (size_t)n_spec * 2)) return -1;
        d->psample_cap = n_spec * 2;
    }
    int64_t off = 0;
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *en = &p->entries[i];
        int32_t known = en->req->prompt_tokens + en->req->generated;
        int32_t k = en->sample ? en->num_spec : 0;
        int32_t *toks = src->tokens(src->ud, en->req_id, (int64_t)known + k + 1);
        if (!toks) {
            d->errmsg[0] = 0;
            return -1;
        }
        for (int32_t j = 0; j < k; j++)
            d->psample[off + j] = src->sample(src->ud, en->req_id, en->req->generated + j);
        d->pseqs[i] = (draft_seq_t){
            .req_id = en->req_id, .toks = toks, .start = en->start,
            .end = en->start + en->num_tokens, .k = k, .prefill = !en->is_decode,
            .blocks = en->blocks, .num_blocks = en->num_blocks, .sample = d->psample + off,
        };
        off += k;
    }
    return draft_step(d, d->pseqs, p->n);
}

int32_t draft_verify(draft_t *d, int32_t i, fwd_t *target, int32_t row0, const int32_t *ids,
                     const bk_sample_t *sample, const int32_t **emitted) {
    if (i < 0 || i >= d->n) return fail(d, "internal: draft_verify of sequence %d of %d", i, d->n);
    const draft_seq_t *s = &d->seqs[i];
    int32_t k = s->k, a, v = d->vocab;
    const int32_t *drafts = s->toks + s->end;
    if (k <= 0) {
        d->out[0] = ids[0];
        *emitted = d->out;
        return 0;
    }
    if (d->q_at[i] >= 0) {
        if (fwd_logits_rows(target, row0, k + 1, d->logits) != 0)
            return fail(d, "verifying drafts: %s", fwd_errmsg(target));
        for (int32_t j = 0; j <= k; j++)
            sampler_dist(d->logits + (size_t)j * v, v, &sample[j], d->p + (size_t)j * v,
                         d->probs, d->idx);
        a = spec_verify(d->p, d->q + (size_t)d->q_at[i] * v, drafts, k, v, sample[0].seed,
                        sample[0].idx, d->out, d->resid);
    } else {
        a = spec_accept(drafts, ids, k);
        memcpy(d->out, ids, sizeof(int32_t) * (size_t)(a + 1));
    }
    /* the draft ran its passes up to position end + k - 2; of those, the accepted drafts'
     * KV holds (sim_draft_advance) */
    int32_t ran = s->end + k - 1, ok = s->end + a;
    d->pos[s->req_id] = ran < ok ? ran : ok;
    *emitted = d->out;
    return a;
}

void draft_forget(draft_t *d, int32_t req_id) {
    if (req_id >= 0 && req_id < d->pos_cap) d->pos[req_id] = -1;
}
