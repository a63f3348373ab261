/* profile (engine side): see profile.h. */
#include "engine/profile.h"

#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "traces/stats.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/roofs.h"
#include "traces/rng.h"
#include "sim/errf.h"
#include "traces/recorder.h"

#define BLOCK 16          /* KV block size, the engine's default */
#define ROOF_REPS 5
#define MAX_CTX 4

/* One grid point: dec_seqs decodes at dec_ctx, plus a chunk of chunk_tokens after
 * chunk_ctx cached tokens (chunk_sampled rows sampled). Sizes derived from those. */
typedef struct {
    const char *kind;
    int32_t dec_seqs, dec_ctx, chunk_tokens, chunk_ctx, chunk_sampled;
    int32_t tokens, seqs, n_sample, blocks;
    int reps;             /* timed passes this point gets */
    double warm_s;        /* its warm-up pass */
    double *t;            /* [reps] seconds */
    int skip;             /* does not fit the KV budget */
} gpoint_t;

typedef struct {
    gpoint_t *p;
    int n, cap;
} grid_t;

/* The host-side batch of a point, sized for the largest one. */
typedef struct {
    int32_t *tokens, *pos, *seq_start, *seq_len, *bt_start, *table, *rows, *ids;
    bk_sample_t *smp;
} batch_buf_t;

static void note(const profile_opts_t *o, profile_t *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note(const profile_opts_t *o, profile_t *out, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (o->notes) fprintf(o->notes, "twinserve profile: note: %s\n", msg);
    profile_add_header(out, "note", msg);   /* out of memory: the stderr line still says it */
}

void profile_opts_defaults(profile_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->backend = "cpu";
    o->reps = 5;
    o->max_seqs = 64;
    o->max_tokens = 2048;
    o->grid = PROFILE_GRID_DEFAULT;
    o->version = "dev";
}

/* ---- the grid ------------------------------------------------------------------------- */

static int32_t blocks_for(int32_t positions) { return (positions + BLOCK - 1) / BLOCK; }

/* Adds a point when it fits the model and the step limits (silently otherwise: the grid's
 * sizes are generated up to those limits, the edges are expected). */
static int grid_add(grid_t *g, const char *kind, int32_t B, int32_t dctx, int32_t n,
                    int32_t cctx, int32_t csamp, int32_t max_seq, int32_t max_seqs,
                    int32_t max_tokens) {
    int32_t seqs = B + (n > 0), tokens = B + n;
    if (seqs < 1 || seqs > max_seqs || tokens > max_tokens) return 0;
    if ((B > 0 && dctx + 1 > max_seq) || (n > 0 && cctx + n > max_seq)) return 0;
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        gpoint_t *p = realloc(g->p, (size_t)cap * sizeof *p);
        if (!p) return -1;
        g->p = p;
        g->cap = cap;
    }
    g->p[g->n++] = (gpoint_t){
        .kind = kind, .dec_seqs = B, .dec_ctx = B ? dctx : 0, .chunk_tokens = n,
        .chunk_ctx = n ? cctx : 0, .chunk_sampled = n ? csamp : 0, .tokens = tokens,
        .seqs = seqs, .n_sample = B + (n ? csamp : 0),
        .blocks = B * blocks_for(dctx + 1) + (n ? blocks_for(cctx + n) : 0),
    };
    return 0;
}

/* Four contexts log-spaced from 16 to S - 16, multiples of 16 (fewer for a short model). */
static int grid_contexts(int32_t S, int32_t *ctx) {
    double lo = 16, hi = (double)((S - 16) / 16 * 16);
    int n = 0;
    if (hi <= lo) {
        ctx[n++] = S > 2 ? S / 2 : 1;
        return n;
    }
    for (int i = 0; i < MAX_CTX; i++) {
        int32_t c = (int32_t)(lround(lo * pow(hi / lo, i / (double)(MAX_CTX - 1)) / 16) * 16);
        if (c < 16) c = 16;
        if (n == 0 || c > ctx[n - 1]) ctx[n++] = c;
    }
    return n;
}

static int build_grid(const profile_opts_t *o, int32_t S, grid_t *g) {
    int32_t M = o->max_seqs, T = o->max_tokens;
#define ADD(kind, B, dc, n, cc, cs) \
    if (grid_add(g, kind, B, dc, n, cc, cs, S, M, T)) return -1
    if (o->grid == PROFILE_GRID_QUICK) {
        static const int32_t qb[] = {1, 4}, qc[] = {16, 40};
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) ADD("decode", qb[j], qc[i], 0, 0, 0);
        ADD("prefill", 0, 0, 16, 0, 1);
        ADD("prefill", 0, 0, 48, 0, 1);
        ADD("prefill", 0, 0, 16, 24, 0);
        ADD("mixed", 3, 20, 16, 0, 1);
        return 0;
    }
    int32_t ctx[MAX_CTX];
    int nc = grid_contexts(S, ctx);
    for (int i = 0; i < nc; i++) {
        int32_t B = 1;
        for (; B <= M; B *= 2) ADD("decode", B, ctx[i], 0, 0, 0);
        if (B / 2 != M) ADD("decode", M, ctx[i], 0, 0, 0);
    }
    /* Whole prompts at context 0, then middle chunks after the third context (one prior
     * context: a second one, tried, cost a quarter of the grid's time on this machine and
     * added little the decodes at four contexts do not already pin down). */
    int32_t top = T < S ? T : S, pc = ctx[nc > 2 ? 2 : nc - 1];
    for (int k = 0; k < 2; k++) {
        int32_t c = k ? pc : 0, n = 16;
        for (; n <= top && n + c <= S; n *= 2) ADD("prefill", 0, 0, n, c, k == 0);
        if (k == 0 && n / 2 != top) ADD("prefill", 0, 0, top, 0, 1);
    }
    /* Decodes beside a whole prompt (sampled) or, for the middle size, beside a middle
     * chunk (not sampled): chunked prefill's steps, and the points where sampled rows
     * differ from sequences, so that calibrate can tell the sampler's time per row from
     * the time per sequence. */
    static const int32_t mb[] = {1, 8, 32}, mn[] = {32, 128, 512};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) ADD("mixed", mb[i], pc, mn[j], j == 1 ? pc / 2 : 0, j != 1);
#undef ADD
    return 0;
}

/* ---- timing --------------------------------------------------------------------------- */

static void buf_free(batch_buf_t *x) {
    free(x->tokens), free(x->pos), free(x->seq_start), free(x->seq_len), free(x->bt_start);
    free(x->table), free(x->rows), free(x->ids), free(x->smp);
}

static int buf_alloc(batch_buf_t *x, int32_t tokens, int32_t seqs, int32_t blocks) {
    size_t t = (size_t)tokens, s = (size_t)seqs + 1;
    x->tokens = calloc(t, sizeof(int32_t));
    x->pos = calloc(t, sizeof(int32_t));
    x->rows = calloc(t, sizeof(int32_t));
    x->ids = calloc(t, sizeof(int32_t));
    x->smp = calloc(t, sizeof(bk_sample_t));
    x->seq_start = calloc(s, sizeof(int32_t));
    x->seq_len = calloc(s, sizeof(int32_t));
    x->bt_start = calloc(s, sizeof(int32_t));
    x->table = calloc((size_t)blocks + 1, sizeof(int32_t));
    return x->tokens && x->pos && x->rows && x->ids && x->smp && x->seq_start && x->seq_len &&
           x->bt_start && x->table ? 0 : -1;
}

/* Appends one sequence of n tokens after ctx cached ones to the batch, its blocks the next
 * unused ids (every sequence of a point has its own), its last `sampled` rows sampled. */
static void add_seq(bk_batch_t *b, batch_buf_t *x, int32_t n, int32_t ctx, int32_t sampled,
                    int32_t vocab) {
    int32_t s = b->n_seqs, t0 = b->n_tokens, nb = blocks_for(ctx + n);
    for (int32_t i = 0; i < n; i++) {
        x->tokens[t0 + i] = (int32_t)(((int64_t)(t0 + i) * 7919 + 1) % vocab);
        x->pos[t0 + i] = ctx + i;
    }
    for (int32_t i = 0; i < nb; i++) x->table[x->bt_start[s] + i] = x->bt_start[s] + i;
    x->seq_start[s + 1] = t0 + n;
    x->seq_len[s] = ctx + n;
    x->bt_start[s + 1] = x->bt_start[s] + nb;
    for (int32_t i = n - sampled; i < n; i++) {
        x->rows[b->n_sample] = t0 + i;
        x->smp[b->n_sample] = (bk_sample_t){0, 0, 1, (uint64_t)s, 0};
        b->n_sample++;
    }
    b->n_tokens += n;
    b->n_seqs++;
}

/* The point's batch as cmd_bench builds its own: decodes first, then the chunk. */
static void point_batch(const gpoint_t *p, batch_buf_t *x, int32_t vocab, bk_batch_t *b) {
    *b = (bk_batch_t){ .tokens = x->tokens, .pos = x->pos, .seq_start = x->seq_start,
                       .seq_len = x->seq_len, .bt_start = x->bt_start,
                       .block_table = x->table, .sample_rows = x->rows, .sample = x->smp };
    x->seq_start[0] = x->bt_start[0] = 0;
    for (int32_t s = 0; s < p->dec_seqs; s++) add_seq(b, x, 1, p->dec_ctx, 1, vocab);
    if (p->chunk_tokens) add_seq(b, x, p->chunk_tokens, p->chunk_ctx, p->chunk_sampled, vocab);
}

typedef struct {
    const profile_opts_t *o;
    double t0, last, left_s;   /* left_s: estimated seconds of passes still to run */
    int64_t done, total;
} progress_t;

static void progress(progress_t *pg, const char *phase, int final) {
    if (!pg->o->progress) return;
    double now = roofs_now();
    if (!final && now - pg->last < 0.2) return;
    pg->last = now;
    fprintf(stderr, "\r[profile] %s  pass %lld/%lld  elapsed %.0fs  ETA %.0fs   %s", phase,
            (long long)pg->done, (long long)pg->total, now - pg->t0,
            pg->left_s > 0 ? pg->left_s : 0.0, final ? "\n" : "");
}

/* One timed pass of point p; 0 with *secs, or -1 with the message. */
static int run_point(fwd_t *f, const gpoint_t *p, batch_buf_t *x, int32_t vocab, double *secs,
                     char *err, size_t errlen) {
    bk_batch_t b;
    point_batch(p, x, vocab, &b);
    double t0 = roofs_now();
    if (fwd_step(f, &b, x->ids))
        return errf(err, errlen, "%s point (%d decodes at %d, chunk %d at %d): %s", p->kind,
                    p->dec_seqs, p->dec_ctx, p->chunk_tokens, p->chunk_ctx, fwd_errmsg(f));
    *secs = roofs_now() - t0;
    return 0;
}

/* Warm-up of every point, then the reps in round robin. */
static int time_grid(const profile_opts_t *o, fwd_t *f, grid_t *g, batch_buf_t *x,
                     int32_t vocab, char *err, size_t errlen) {
    progress_t pg = { .o = o, .t0 = roofs_now() };
    int live = 0;
    for (int i = 0; i < g->n; i++) live += !g->p[i].skip;
    pg.total = (int64_t)live * (1 + o->reps);
    double warm_sum = 0;
    for (int i = 0, w = 0; i < g->n; i++) {
        gpoint_t *p = &g->p[i];
        if (p->skip) continue;
        if (run_point(f, p, x, vocab, &p->warm_s, err, errlen)) return -1;
        warm_sum += p->warm_s;
        w++;
        pg.done++;
        pg.left_s = warm_sum / w * (double)(pg.total - pg.done);
        progress(&pg, "warm-up", 0);
    }
    pg.total = pg.done;
    pg.left_s = 0;
    int max_reps = 0;
    for (int i = 0; i < g->n; i++) {
        gpoint_t *p = &g->p[i];
        if (p->skip) continue;
        p->reps = o->reps;
        if (p->warm_s > PROFILE_BIG_S && p->reps > PROFILE_MIN_REPS) {
            int r = (int)ceil(o->reps * PROFILE_BIG_S / p->warm_s);
            p->reps = r > PROFILE_MIN_REPS ? r : PROFILE_MIN_REPS;
        }
        if (!(p->t = calloc((size_t)p->reps, sizeof *p->t)))
            return errf(err, errlen, "out of memory");
        pg.total += p->reps;
        pg.left_s += p->reps * p->warm_s;
        max_reps = p->reps > max_reps ? p->reps : max_reps;
    }
    char phase[32];
    for (int r = 0; r < max_reps; r++) {
        snprintf(phase, sizeof phase, "rep %d/%d", r + 1, max_reps);
        for (int i = 0; i < g->n; i++) {
            gpoint_t *p = &g->p[i];
            if (p->skip || r >= p->reps) continue;
            double pre;
            if (p->warm_s < PROFILE_PREPASS_S && run_point(f, p, x, vocab, &pre, err, errlen))
                return -1;
            if (run_point(f, p, x, vocab, &p->t[r], err, errlen)) return -1;
            pg.done++;
            pg.left_s -= p->warm_s;
            progress(&pg, phase, 0);
        }
    }
    progress(&pg, "done", 1);
    return 0;
}

/* The point's row: features from the batch itself (fwd_batch_features), stats of its reps. */
static int point_row(const gpoint_t *p, batch_buf_t *x, int32_t vocab, profile_t *out) {
    bk_batch_t b;
    cost_features_t feat;
    point_batch(p, x, vocab, &b);
    fwd_batch_features(&b, &feat);
    profile_point_t pt;
    profile_point_init(&pt, p->kind, &feat);
    pt.dec_seqs = p->dec_seqs;
    pt.dec_ctx = p->dec_ctx;
    pt.chunk_tokens = p->chunk_tokens;
    pt.chunk_ctx = p->chunk_ctx;
    pt.chunk_sampled = p->chunk_sampled;
    pt.reps = p->reps;
    stats_sort(p->t, (size_t)p->reps);
    pt.median_s = stats_percentile_sorted(p->t, (size_t)p->reps, 50);
    pt.mean_s = stats_mean(p->t, (size_t)p->reps);
    pt.min_s = p->t[0];
    pt.max_s = p->t[p->reps - 1];
    pt.p10_s = stats_percentile_sorted(p->t, (size_t)p->reps, 10);
    pt.p90_s = stats_percentile_sorted(p->t, (size_t)p->reps, 90);
    return profile_add_point(out, &pt);
}

/* ---- host phase ----------------------------------------------------------------------- */

/* One kind=host row: the steps of one pass_seqs, their host_s sorted in hs[n]. */
static int host_row(profile_t *out, int64_t seqs, double *hs, size_t n, const double *sum) {
    cost_features_t f = { .tokens = llround(sum[0] / (double)n), .seqs = seqs,
                          .sampled = llround(sum[1] / (double)n),
                          .kv_tokens = llround(sum[2] / (double)n),
                          .attn_pairs = llround(sum[3] / (double)n) };
    profile_point_t pt;
    profile_point_init(&pt, "host", &f);
    pt.reps = (int32_t)n;
    stats_sort(hs, n);
    pt.median_s = stats_percentile_sorted(hs, n, 50);
    pt.mean_s = stats_mean(hs, n);
    pt.min_s = hs[0];
    pt.max_s = hs[n - 1];
    pt.p10_s = stats_percentile_sorted(hs, n, 10);
    pt.p90_s = stats_percentile_sorted(hs, n, 90);
    if (!(pt.median_s > 0)) return 0;   /* a clock too coarse to see it: nothing to fit */
    return profile_add_point(out, &pt);
}

/* The run's steps but step 0 (it pays for the first arrivals and warms the caches), grouped
 * by pass_seqs into kind=host rows. */
static int host_rows(const char *db, int64_t run_id, profile_t *rows, profile_stats_t *st,
                     char *err, size_t errlen) {
    int rc = -1;
    sqlite3 *h = NULL;
    sqlite3_stmt *q = NULL;
    double *hs = NULL, sum[4] = {0};
    size_t n = 0, cap = 0;
    int64_t cur = -1;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(h, "SELECT pass_seqs, host_s, tokens, sampled, kv_tokens, attn_pairs "
                              "FROM steps WHERE run_id = ? AND step > 0 AND host_s IS NOT NULL "
                              "AND pass_seqs > 0 ORDER BY pass_seqs, step", -1, &q, NULL)
            != SQLITE_OK) {
        errf(err, errlen, "host phase: reading its steps from %s: %s", db, sqlite3_errmsg(h));
        goto done;
    }
    sqlite3_bind_int64(q, 1, run_id);
    int s;
    while ((s = sqlite3_step(q)) == SQLITE_ROW || cur >= 0) {
        int64_t seqs = s == SQLITE_ROW ? sqlite3_column_int64(q, 0) : -1;
        if (seqs != cur && n > 0) {   /* the group of cur is complete */
            if (host_row(rows, cur, hs, n, sum)) {
                errf(err, errlen, "out of memory");
                goto done;
            }
            st->host_rows++;
            n = 0;
            memset(sum, 0, sizeof sum);
        }
        cur = seqs;
        if (s != SQLITE_ROW) break;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            double *nh = realloc(hs, cap * sizeof *nh);
            if (!nh) {
                errf(err, errlen, "out of memory");
                goto done;
            }
            hs = nh;
        }
        hs[n++] = sqlite3_column_double(q, 1);
        for (int i = 0; i < 4; i++) sum[i] += (double)sqlite3_column_int64(q, 2 + i);
        st->host_steps++;
    }
    if (s != SQLITE_DONE && s != SQLITE_ROW) {
        errf(err, errlen, "host phase: reading its steps from %s: %s", db, sqlite3_errmsg(h));
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(q);
    sqlite3_close(h);
    free(hs);
    return rc;
}

/* A saturated replay on the engine (a temporary trace and database, removed) whose steps'
 * host_s become kind=host rows in `rows`; the header's host line goes to out. */
static int host_phase(const profile_opts_t *o, int32_t S, profile_t *rows, profile_t *out,
                      profile_stats_t *st, char *err, size_t errlen) {
    int rc = -1, fd;
    char trace[64] = "", db[64] = "", msg[2048];
    FILE *tf = NULL;
    int32_t pmax = S / 2 < PROFILE_HOST_PROMPT ? S / 2 : PROFILE_HOST_PROMPT;
    if (pmax > o->max_tokens) pmax = o->max_tokens;
    int32_t pmin = pmax < 16 ? pmax : 16, omax = S - pmax < 64 ? S - pmax : 64;
    int32_t omin = omax < 8 ? omax : 8;
    if (pmin < 1 || omin < 1) {
        snprintf(out->host_note, sizeof out->host_note, "the model's context (%d) is too short "
                 "for a replay", S);
        return 0;
    }
    snprintf(trace, sizeof trace, "/tmp/twinserve-profile-XXXXXX.csv");
    if ((fd = mkstemps(trace, 4)) < 0 || !(tf = fdopen(fd, "w"))) {
        if (fd >= 0) close(fd);
        errf(err, errlen, "host phase: cannot create a temporary trace in /tmp");
        trace[0] = '\0';
        goto done;
    }
    rng_t r;
    rng_seed3(&r, o->seed, 0x686f7374 /* "host" */, 0);
    fprintf(tf, "arrival_s,prompt_tokens,output_tokens\n");
    for (int i = 0; i < PROFILE_HOST_REQUESTS; i++) {
        int32_t p = pmin + (int32_t)(rng_u64(&r) % (uint64_t)(pmax - pmin + 1));
        int32_t n = omin + (int32_t)(rng_u64(&r) % (uint64_t)(omax - omin + 1));
        fprintf(tf, "0,%d,%d\n", p, n);
    }
    int werr = ferror(tf);
    if (fclose(tf) || werr) {
        errf(err, errlen, "host phase: writing the temporary trace %s failed", trace);
        goto done;
    }
    snprintf(db, sizeof db, "/tmp/twinserve-profile-XXXXXX.db");
    if ((fd = mkstemps(db, 3)) < 0) {   /* an empty file is an empty SQLite database */
        errf(err, errlen, "host phase: cannot create a temporary database in /tmp");
        db[0] = '\0';
        goto done;
    }
    close(fd);
    engine_opts_t eo;
    engine_opts_defaults(&eo);
    eo.trace_path = trace;
    eo.policy_path = o->host_policy;
    eo.model = o->model;
    eo.backend = o->backend;
    eo.n_threads = o->n_threads;
    eo.dtype = o->dtype;
    eo.kv_type = o->kv_type;
    eo.db_path = db;
    eo.run_name = "profile-host";
    eo.seed = o->seed;
    eo.max_seqs = o->max_seqs;
    eo.max_tokens = o->max_tokens;
    eo.max_model_len = pmax + omax;   /* a small KV pool: no request is longer */
    eo.progress = o->progress;
    eo.version = o->version;
    engine_result_t res;
    double t0 = roofs_now();
    if (engine_run(&eo, &res, msg, sizeof msg)) {
        errf(err, errlen, "host phase (a replay under %s): %s", o->host_policy, msg);
        goto done;
    }
    st->host_s = roofs_now() - t0;
    if (host_rows(db, res.run_id, rows, st, err, errlen)) goto done;
    if (st->host_rows == 0) {
        snprintf(out->host_note, sizeof out->host_note, "the replay under %s had no steps after "
                 "the first", o->host_policy);
    } else {
        snprintf(msg, sizeof msg, "measured: %lld steps (step 0 left out) of a saturated "
                 "replay of %d requests at time 0 (prompts %d..%d, outputs %d..%d tokens) "
                 "under %s with max_seqs %d; one kind=host row per pass_seqs",
                 (long long)st->host_steps, PROFILE_HOST_REQUESTS, pmin, pmax, omin, omax,
                 o->host_policy, o->max_seqs);
        if (profile_add_header(out, "host", msg)) {
            errf(err, errlen, "out of memory");
            goto done;
        }
    }
    rc = 0;
done:
    if (trace[0]) unlink(trace);
    if (db[0]) rec_remove(db);
    return rc;
}

/* ---- the run -------------------------------------------------------------------------- */

/* The model's own messages usually name it; when not, say which model. */
static int model_fail(const profile_opts_t *o, const char *msg, char *err, size_t errlen) {
    if (strstr(msg, o->model)) return errf(err, errlen, "%s", msg);
    return errf(err, errlen, "model %s: %s", o->model, msg);
}

static void header_basics(const profile_opts_t *o, profile_t *out) {
    snprintf(out->model, sizeof out->model, "%s", o->model);
    snprintf(out->version, sizeof out->version, "%s", o->version ? o->version : "dev");
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(out->date, sizeof out->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    out->threads = o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    out->warmup = 1;
    out->reps = o->reps;
}

/* Marks the points whose KV does not fit `cap` blocks; the pool is the largest that does. */
static int32_t fit_points(const profile_opts_t *o, grid_t *g, int32_t cap, double block_bytes,
                          profile_t *out, profile_stats_t *st) {
    int32_t pool = 0;
    for (int i = 0; i < g->n; i++) {
        gpoint_t *p = &g->p[i];
        if (p->blocks > cap) {
            p->skip = 1;
            st->skipped++;
            note(o, out, "skipped %s point (%d decodes at context %d, chunk of %d at context "
                 "%d): its KV (%d blocks, %.2f GB) exceeds the grid's budget of %.2f GB (a "
                 "quarter of the free memory)", p->kind, p->dec_seqs, p->dec_ctx,
                 p->chunk_tokens, p->chunk_ctx, p->blocks, p->blocks * block_bytes / 1e9,
                 cap * block_bytes / 1e9);
        } else if (p->blocks > pool) {
            pool = p->blocks;
        }
    }
    return pool;
}

int profile_run(const profile_opts_t *o, profile_t *out, profile_stats_t *st, char *err,
                size_t errlen) {
    int rc = -1;
    model_t *m = NULL;
    backend_t *b = NULL;
    fwd_t *f = NULL;
    grid_t g = {0};
    batch_buf_t x = {0};
    profile_t hp;   /* the host rows, which go after the grid's */
    char msg[1024];
    memset(st, 0, sizeof *st);
    profile_init(out);
    profile_init(&hp);
    if (!o->model || o->reps < 1 || o->max_seqs < 1 || o->max_tokens < 1) {
        errf(err, errlen, "a model, reps >= 1, max_seqs >= 1 and max_tokens >= 1 are needed");
        goto done;
    }
    header_basics(o, out);
    /* The shape first (instant for dummy models); the host phase's replay loads its own. */
    if (model_open(o->model, o->seed, MODEL_SHAPE_ONLY | MODEL_LAZY, &m, msg, sizeof msg)) {
        model_fail(o, msg, err, errlen);
        goto done;
    }
    model_config_t c = m->cfg;
    /* The backend before the host phase, so that a missing GPU or a wrong --dtype fails
     * at once rather than after the replay (the replay makes its own). */
    bk_opts_t bo = { .n_threads = o->n_threads, .dtype = o->dtype, .kv_type = o->kv_type };
    const char *bname = o->backend ? o->backend : "cpu";
    if (!(b = backend_new(bname, &bo, msg, sizeof msg))) {
        if (strstr(msg, bname)) errf(err, errlen, "%s", msg);   /* it names itself */
        else errf(err, errlen, "backend %s: %s", bname, msg);
        goto done;
    }
    if (o->dtype && strcmp(o->dtype, b->weight_type)) {
        errf(err, errlen, "dtype %s: the %s backend holds %s weights", o->dtype, b->name,
             b->weight_type);
        goto done;
    }
    if (o->host_policy) {
        model_free(m);   /* a file's host copy would sit beside the replay's */
        m = NULL;
        if (o->progress)
            fprintf(stderr, "[profile] host phase: %d requests under %s\n",
                    PROFILE_HOST_REQUESTS, o->host_policy);
        if (host_phase(o, c.max_seq, &hp, out, st, err, errlen)) goto done;
        if (model_open(o->model, o->seed, MODEL_SHAPE_ONLY | MODEL_LAZY, &m, msg, sizeof msg)) {
            model_fail(o, msg, err, errlen);
            goto done;
        }
    } else {
        snprintf(out->host_note, sizeof out->host_note, "%s",
                 o->host_skip ? o->host_skip : "not requested");
    }
    snprintf(out->backend, sizeof out->backend, "%s", b->name);
    snprintf(out->weight_type, sizeof out->weight_type, "%s", b->weight_type);
    /* provenance: what the CPU's attention read (a profile at f32 KV calibrates an
     * f16-KV engine's attention terms high) */
    if (!strcmp(b->name, "cpu") &&
        profile_add_header(out, "kv_type", o->kv_type ? o->kv_type : "f32")) {
        errf(err, errlen, "out of memory");
        goto done;
    }
    model_preset_shape(&c, "profile", (int32_t)b->elem_size(b, BK_WEIGHT), &out->shape);
    out->has_shape = 1;
    if (build_grid(o, c.max_seq, &g)) {
        errf(err, errlen, "out of memory");
        goto done;
    }
    if (g.n == 0) {
        errf(err, errlen, "no grid point fits model %s (context %d) with max_seqs %d and "
             "max_tokens %d", o->model, c.max_seq, o->max_seqs, o->max_tokens);
        goto done;
    }
    int32_t max_tok = 0, max_seqs = 0, max_sample = 0;
    for (int i = 0; i < g.n; i++) {
        max_tok = g.p[i].tokens > max_tok ? g.p[i].tokens : max_tok;
        max_seqs = g.p[i].seqs > max_seqs ? g.p[i].seqs : max_seqs;
        max_sample = g.p[i].n_sample > max_sample ? g.p[i].n_sample : max_sample;
    }
    if (o->progress) fprintf(stderr, "[profile] measuring the roofs (memory, GEMM)\n");
    if (b->roofs(b, ROOF_REPS, &out->mem_bw, &out->gemm_flops) || !(out->mem_bw > 0) ||
        !(out->gemm_flops > 0)) {
        errf(err, errlen, "measuring backend %s's roofs: %s", b->name, b->errmsg);
        goto done;
    }
    fwd_opts_t fo = { max_tok, max_sample > 0 ? max_sample : 1, 0, BLOCK };
    if (fwd_new(b, m, &fo, &f, msg, sizeof msg)) {
        model_fail(o, msg, err, errlen);
        goto done;
    }
    model_free(m);   /* the backend holds the weights now */
    m = NULL;
    size_t free_b = 0, total_b = 0;
    if (b->mem_info(b, &free_b, &total_b)) {
        errf(err, errlen, "backend %s memory: %s", b->name, b->errmsg);
        goto done;
    }
    bk_kv_shape_t kvs = { c.n_layers, 1, BLOCK, c.n_kv_heads, c.head_dim };
    double block_bytes = (double)b->kv_block_bytes(b, &kvs);
    int32_t cap = fwd_kv_blocks_for(b, &c, BLOCK, 0.25 * (double)free_b);
    int32_t pool = fit_points(o, &g, cap, block_bytes, out, st);
    if (pool < 1) {
        errf(err, errlen, "no grid point's KV fits a quarter of the free memory (%.2f GB) "
             "for model %s", 0.25 * (double)free_b / 1e9, o->model);
        goto done;
    }
    st->kv_gb = pool * block_bytes / 1e9;
    if (fwd_kv_init(f, pool)) {
        model_fail(o, fwd_errmsg(f), err, errlen);
        goto done;
    }
    if (buf_alloc(&x, max_tok, max_seqs, pool)) {
        errf(err, errlen, "out of memory");
        goto done;
    }
    double t0 = roofs_now();
    if (time_grid(o, f, &g, &x, c.vocab, err, errlen)) goto done;
    st->grid_s = roofs_now() - t0;
    if (o->progress) fprintf(stderr, "[profile] measuring the roofs again\n");
    if (b->roofs(b, ROOF_REPS, &out->mem_bw_end, &out->gemm_flops_end)) {
        errf(err, errlen, "measuring backend %s's roofs after the grid: %s", b->name,
             b->errmsg);
        goto done;
    }
    int trimmed = 0;
    for (int i = 0; i < g.n; i++) {
        if (g.p[i].skip) continue;
        if (point_row(&g.p[i], &x, c.vocab, out)) {
            errf(err, errlen, "out of memory");
            goto done;
        }
        st->points++;
        trimmed += g.p[i].reps < o->reps;
    }
    for (size_t i = 0; i < hp.n; i++)
        if (profile_add_point(out, &hp.pts[i])) {
            errf(err, errlen, "out of memory");
            goto done;
        }
    if (trimmed)
        note(o, out, "%d points whose warm-up pass took over %.2f s have fewer reps (at least "
             "%d): see the reps column", trimmed, PROFILE_BIG_S, PROFILE_MIN_REPS);
    rc = 0;
done:
    for (int i = 0; i < g.n; i++) free(g.p[i].t);
    free(g.p);
    profile_free(&hp);
    buf_free(&x);
    fwd_free(f);
    if (b) b->destroy(b);
    model_free(m);
    return rc;
}
