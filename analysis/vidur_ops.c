/* vidur_ops: see vidur_ops.h. */
#include "analysis/vidur_ops.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "traces/stats.h"
#include "analysis/vidur_internal.h"
#include "sim/errf.h"
#include "sim/nnls.h"

/* The profile's operators: column, kind, and which size of the layer they have. */
enum { SZ_QKV, SZ_O, SZ_UP, SZ_DOWN, SZ_D, SZ_ROPE, SZ_FF };
static const struct { const char *col; int kind, size, per_layer; } prof_ops[] = {
    {"attn_pre_proj", GPU_OP_GEMM, SZ_QKV, 1}, {"attn_post_proj", GPU_OP_GEMM, SZ_O, 1},
    {"mlp_up_proj", GPU_OP_GEMM, SZ_UP, 1}, {"mlp_down_proj", GPU_OP_GEMM, SZ_DOWN, 1},
    {"input_layernorm", GPU_OP_NORM, SZ_D, 1}, {"post_attention_layernorm", GPU_OP_NORM, SZ_D, 1},
    {"attn_rope", GPU_OP_ROPE, SZ_ROPE, 1}, {"mlp_act", GPU_OP_ACT, SZ_FF, 1},
    {"add", GPU_OP_ADD, SZ_D, 2}, {"emb", GPU_OP_EMB, SZ_D, 0},
};
#define N_PROF ((int)(sizeof prof_ops / sizeof prof_ops[0]))
#define MAX_CALLS (VIDUR_OPS_MAX_MODELS * 4 * N_PROF)

typedef struct {
    int model, tp, kind, per_layer;
    double size;
    int n;                     /* its own token counts */
    double x[GPU_OPS_MAX], t[GPU_OPS_MAX];   /* seconds */
    double at[GPU_OPS_MAX];    /* on the shared grid */
} call_t;

typedef struct {
    call_t *c;
    int n;
} calls_t;

static int read_model(const char *path, int model, calls_t *cs, char *err, size_t errlen) {
    csvtab_t t;
    static vidur_grid_t g;
    static double y[VIDUR_MAX_POINTS];
    int rc = -1, xcol, tpcol, cols[N_PROF], hc, kc, dc, fc, gc;
    if (csvtab_read(path, &t, err, errlen) != 0) return -1;
    if ((xcol = csvtab_need(&t, "num_tokens", err, errlen)) < 0 ||
        (tpcol = csvtab_need(&t, "num_tensor_parallel_workers", err, errlen)) < 0 ||
        (hc = csvtab_need(&t, "n_head", err, errlen)) < 0 ||
        (kc = csvtab_need(&t, "n_kv_head", err, errlen)) < 0 ||
        (dc = csvtab_need(&t, "n_embd", err, errlen)) < 0 ||
        (fc = csvtab_need(&t, "n_expanded_embd", err, errlen)) < 0 ||
        (gc = csvtab_need(&t, "use_gated_mlp", err, errlen)) < 0)
        goto done;
    /* an operator a model does not have is not in its file (Phi-2, with attention and
     * MLP in parallel, has one norm a layer) */
    for (int i = 0; i < N_PROF; i++) {
        char name[96];
        snprintf(name, sizeof name, "time_stats.%s.median", prof_ops[i].col);
        cols[i] = csvtab_col(&t, name);
    }
    if (cols[0] < 0 && csvtab_need(&t, "time_stats.attn_pre_proj.median", err, errlen) < 0)
        goto done;
    double h, kv, d, ff;
    if (t.n_rows < 1 || csvtab_num(&t, 0, hc, &h, err, errlen) ||
        csvtab_num(&t, 0, kc, &kv, err, errlen) || csvtab_num(&t, 0, dc, &d, err, errlen) ||
        csvtab_num(&t, 0, fc, &ff, err, errlen)) {
        if (t.n_rows < 1) errf(err, errlen, "%s: no rows", path);
        goto done;
    }
    const int gated = !strcmp(csvtab_cell(&t, 0, gc), "True");
    const double hd = d / h;
    for (int tpi = 1; tpi <= 8; tpi *= 2) {
        const double tp = tpi;
        const double heads = h / tp, kvd = kv >= tp ? kv / tp : 1.0;
        const double size[] = {
            [SZ_QKV] = d * (heads + 2.0 * kvd) * hd, [SZ_O] = heads * hd * d,
            [SZ_UP] = d * ff / tp * (gated ? 2.0 : 1.0), [SZ_DOWN] = ff / tp * d,
            [SZ_D] = d, [SZ_ROPE] = (heads + kvd) * hd, [SZ_FF] = ff / tp,
        };
        for (int i = 0; i < N_PROF; i++) {
            if (cols[i] < 0) continue;
            if (vidur_collect(&t, xcol, cols[i], &tpcol, &tp, 1, &g, y, err, errlen)) goto done;
            if (g.n == 0) break;           /* this degree was not profiled */
            if (cs->n == MAX_CALLS) {
                errf(err, errlen, "more than %d operator calls", MAX_CALLS);
                goto done;
            }
            if (g.n > GPU_OPS_MAX) {
                errf(err, errlen, "%s: more than %d token counts", path, GPU_OPS_MAX);
                goto done;
            }
            call_t *c = &cs->c[cs->n++];
            c->model = model, c->tp = tpi, c->kind = prof_ops[i].kind;
            c->per_layer = prof_ops[i].per_layer, c->size = size[prof_ops[i].size];
            c->n = g.n;
            for (int k = 0; k < g.n; k++) c->x[k] = g.x[k], c->t[k] = y[k] * 1e-3;
        }
    }
    rc = 0;
done:
    csvtab_free(&t);
    return rc;
}

/* Every mlp.csv under compute/GPU, in name order (so that runs agree). */
static int read_all(const char *dir, const char *gpu, vidur_ops_result_t *r, calls_t *cs,
                    char *err, size_t errlen) {
    char base[1100];
    snprintf(base, sizeof base, "%s/compute/%s", dir, gpu);
    char names[VIDUR_OPS_MAX_MODELS][96];
    int n = 0;
    DIR *d = opendir(base);
    if (!d) return errf(err, errlen, "%s: no such directory (is --vidur the profiles/vidur "
                        "folder?)", base);
    struct dirent *o;
    while ((o = readdir(d))) {
        if (o->d_name[0] == '.') continue;
        char od[1400];
        snprintf(od, sizeof od, "%s/%s", base, o->d_name);
        DIR *d2 = opendir(od);
        if (!d2) continue;
        struct dirent *mm;
        while ((mm = readdir(d2)) && n < VIDUR_OPS_MAX_MODELS) {
            if (mm->d_name[0] == '.') continue;
            snprintf(names[n++], sizeof names[0], "%.40s/%.50s", o->d_name, mm->d_name);
        }
        closedir(d2);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    if (n < 2) return errf(err, errlen, "%s: %d model profiles (the rates need at least 2)", base, n);
    for (int i = 0; i < n; i++) {
        char path[1700];
        snprintf(path, sizeof path, "%s/%s/mlp.csv", base, names[i]);
        if (read_model(path, i, cs, err, errlen)) return -1;
        snprintf(r->models[i], sizeof r->models[0], "%s", names[i]);
    }
    r->n_models = n;
    return 0;
}

/* The token counts every call was profiled at, into ops->rows; each call's times there. */
static int share_grid(calls_t *cs, gpu_ops_t *ops, char *err, size_t errlen) {
    ops->n = 0;
    const call_t *c0 = &cs->c[0];
    for (int k = 0; k < c0->n; k++) {
        int everywhere = 1;
        for (int i = 1; i < cs->n && everywhere; i++) {
            int found = 0;
            for (int j = 0; j < cs->c[i].n && !found; j++) found = cs->c[i].x[j] == c0->x[k];
            everywhere = found;
        }
        if (everywhere) ops->rows[ops->n++] = c0->x[k];
    }
    if (ops->n < 8) return errf(err, errlen, "the profiles share only %d token counts", ops->n);
    for (int i = 0; i < cs->n; i++) {
        call_t *c = &cs->c[i];
        for (int k = 0, j = 0; k < ops->n; k++) {
            while (c->x[j] != ops->rows[k]) j++;
            c->at[k] = c->t[j];
        }
    }
    return 0;
}

/* Pool-adjacent-violators: v made non-decreasing, least squares. */
static void monotone(double *v, int n) {
    double *sum = malloc(sizeof *sum * (size_t)n);
    int *len = malloc(sizeof *len * (size_t)n), nb = 0;
    if (!sum || !len) {
        for (int i = 1; i < n; i++) v[i] = fmax(v[i], v[i - 1]);
        free(sum);
        free(len);
        return;
    }
    for (int i = 0; i < n; i++) {
        sum[nb] = v[i], len[nb++] = 1;
        while (nb > 1 && sum[nb - 2] / len[nb - 2] > sum[nb - 1] / len[nb - 1]) {
            sum[nb - 2] += sum[nb - 1], len[nb - 2] += len[nb - 1];
            nb--;
        }
    }
    for (int b = 0, k = 0; b < nb; b++)
        for (int j = 0; j < len[b]; j++) v[k++] = sum[b] / len[b];
    free(sum);
    free(len);
}

/* The rates of every kind from the calls of every model but `skip` (-1: all). */
static int fit(const calls_t *cs, int skip, gpu_ops_t *ops, char *err, size_t errlen) {
    for (int kind = 0; kind < GPU_OP_KINDS; kind++) {
        for (int k = 0; k < ops->n; k++) {
            double G[4] = {0}, c[2] = {0}, s[2], v[2];
            int m = 0;
            for (int i = 0; i < cs->n; i++) {
                const call_t *x = &cs->c[i];
                if (x->kind != kind || x->model == skip || !(x->at[k] > 0)) continue;
                double r[2] = {1 / x->at[k], x->size / x->at[k]};
                for (int a = 0; a < 2; a++) {
                    c[a] += r[a];
                    for (int b = 0; b < 2; b++) G[a * 2 + b] += r[a] * r[b];
                }
                m++;
            }
            if (m < 2) return errf(err, errlen, "%d %s calls at %g tokens (need 2)", m,
                                   gpu_op_names[kind], ops->rows[k]);
            nnls_scale(G, c, 2, s);
            if (nnls_solve(G, c, 2, v, err, errlen) < 0) return -1;
            ops->t0[kind][k] = v[0] * s[0];
            ops->s[kind][k] = v[1] * s[1];
        }
        monotone(ops->t0[kind], ops->n);
        monotone(ops->s[kind], ops->n);
    }
    return 0;
}

static double predict(const gpu_ops_t *o, const call_t *c, int k) {
    return o->t0[c->kind][k] + c->size * o->s[c->kind][k];
}

/* Relative errors of the calls of model `only` (-1: all) under o: per kind into e[kind]
 * (counts ne), whole layers (per degree and token count) into e[GPU_OP_KINDS]. */
static void errors(const calls_t *cs, int only, const gpu_ops_t *o, double **e, size_t *ne) {
    for (int i = 0; i < cs->n; i++) {
        const call_t *c = &cs->c[i];
        if (only >= 0 && c->model != only) continue;
        for (int k = 0; k < o->n; k++)
            if (c->at[k] > 0) e[c->kind][ne[c->kind]++] = fabs(predict(o, c, k) / c->at[k] - 1);
    }
    for (int model = 0; model < VIDUR_OPS_MAX_MODELS; model++) {
        if (only >= 0 && model != only) continue;
        for (int tp = 1; tp <= 8; tp *= 2)
            for (int k = 0; k < o->n; k++) {
                double meas = 0, pred = 0;
                int any = 0;
                for (int i = 0; i < cs->n; i++) {
                    const call_t *c = &cs->c[i];
                    if (c->model != model || c->tp != tp || !c->per_layer) continue;
                    meas += c->per_layer * c->at[k];
                    pred += c->per_layer * predict(o, c, k);
                    any = 1;
                }
                if (any && meas > 0) e[GPU_OP_KINDS][ne[GPU_OP_KINDS]++] = fabs(pred / meas - 1);
            }
    }
}

static int fit_network(const char *dir, const char *gpu, gpu_ops_t *ops, char *err,
                       size_t errlen) {
    char path[1200];
    snprintf(path, sizeof path, "%s/network/%s_dgx/all_reduce.csv", dir, gpu);
    csvtab_t t;
    static vidur_grid_t g;
    static double y[VIDUR_MAX_POINTS];
    int rc = -1, xcol, ycol, where[2];
    if (csvtab_read(path, &t, err, errlen) != 0) return -1;
    if ((xcol = csvtab_need(&t, "size", err, errlen)) < 0 ||
        (ycol = csvtab_need(&t, "time_stats.all_reduce.median", err, errlen)) < 0 ||
        (where[0] = csvtab_need(&t, "num_workers", err, errlen)) < 0 ||
        (where[1] = csvtab_need(&t, "devices_per_node", err, errlen)) < 0)
        goto done;
    for (int j = 0; j < 3; j++) {
        const double w = 2 << j, eq[2] = {w, w};
        if (vidur_collect(&t, xcol, ycol, where, eq, 2, &g, y, err, errlen)) goto done;
        int n = 0;
        while (n < g.n && g.x[n] <= 64.0 * 1048576) n++;
        for (int i = 0; i < n; i++) y[i] *= 1e-3;
        vidur_line_t l = {0, 0};
        if (n >= 4 && vidur_line_fit(g.x, y, NULL, n, &l, err, errlen)) goto done;
        ops->ar_latency_s[j] = l.a;
        ops->ar_s_per_byte[j] = l.b;
    }
    rc = 0;
done:
    csvtab_free(&t);
    return rc;
}

int vidur_ops_fit(const char *dir, const char *hw, vidur_ops_result_t *r, char *err,
                  size_t errlen) {
    memset(r, 0, sizeof *r);
    gpu_ops_t *o = &r->ops;
    const char *gpu = vidur_gpu_dir(hw);
    if (!gpu) return errf(err, errlen, "--hw %s: Vidur's profiles cover a100-80g and h100", hw);
    calls_t cs = {calloc(MAX_CALLS, sizeof(call_t)), 0};
    double *e[GPU_OP_KINDS + 1] = {0};
    size_t ne[GPU_OP_KINDS + 1] = {0};
    gpu_ops_t *held = malloc(sizeof *held);
    int rc = -1;
    if (!cs.c || !held) {
        errf(err, errlen, "out of memory (operator rates)");
        goto done;
    }
    if (read_all(dir, gpu, r, &cs, err, errlen) || share_grid(&cs, o, err, errlen)) goto done;
    for (int k = 0; k <= GPU_OP_KINDS; k++)
        if (!(e[k] = malloc(sizeof *e[k] * (size_t)(cs.n * o->n + 1)))) {
            errf(err, errlen, "out of memory (operator rates)");
            goto done;
        }
    for (int i = 0; i < cs.n; i++) r->calls[cs.c[i].kind]++;
    /* held out, one model at a time */
    for (int j = 0; j < r->n_models; j++) {
        *held = *o;
        if (fit(&cs, j, held, err, errlen)) goto done;
        size_t before = ne[GPU_OP_KINDS];
        errors(&cs, j, held, e, ne);
        r->cv_layer_by_model[j] = stats_percentile(e[GPU_OP_KINDS] + before,
                                                   ne[GPU_OP_KINDS] - before, 50);
    }
    for (int k = 0; k <= GPU_OP_KINDS; k++) {
        o->cv_median[k] = ne[k] ? stats_percentile(e[k], ne[k], 50) : NAN;
        o->cv_p90[k] = ne[k] ? stats_percentile(e[k], ne[k], 90) : NAN;
        ne[k] = 0;
    }
    if (fit(&cs, -1, o, err, errlen)) goto done;
    errors(&cs, -1, o, e, ne);
    for (int k = 0; k <= GPU_OP_KINDS; k++)
        r->fit_median[k] = ne[k] ? stats_percentile(e[k], ne[k], 50) : NAN;
    if (fit_network(dir, gpu, o, err, errlen)) goto done;
    snprintf(o->hw, sizeof o->hw, "%s", hw);
    snprintf(o->source, sizeof o->source, "vidur/compute/%s (%d models x TP 1, 2, 4, 8, %d "
             "token counts) + network/%s_dgx/all_reduce.csv", gpu, r->n_models, o->n, gpu);
    const char *sde = getenv("SOURCE_DATE_EPOCH");   /* reproducible shipped files */
    time_t now = sde && *sde ? (time_t)strtoll(sde, NULL, 10) : time(NULL);
    strftime(o->fitted_at, sizeof o->fitted_at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    rc = 0;
done:
    for (int k = 0; k <= GPU_OP_KINDS; k++) free(e[k]);
    free(cs.c);
    free(held);
    return rc;
}

void vidur_ops_report(FILE *f, const vidur_ops_result_t *r) {
    const gpu_ops_t *o = &r->ops;
    fprintf(f, "operator rates of %s from %d Vidur profiles (%s)\n", o->hw, r->n_models, o->source);
    for (int i = 0; i < r->n_models; i++)
        fprintf(f, "  %-44s layer held out: median error %.1f%%\n", r->models[i],
                100 * r->cv_layer_by_model[i]);
    fprintf(f, "\nt = t0(M) + size x s(M) at each of %d token counts; errors |predicted - "
               "measured| / measured,\nin sample and with the call's model left out of the "
               "fit:\n", o->n);
    fprintf(f, "  %-8s %7s %9s %9s %9s\n", "kind", "calls", "fit p50", "cv p50", "cv p90");
    for (int k = 0; k <= GPU_OP_KINDS; k++)
        fprintf(f, "  %-8s %7d %8.1f%% %8.1f%% %8.1f%%\n", k < GPU_OP_KINDS ? gpu_op_names[k] : "layer",
                k < GPU_OP_KINDS ? r->calls[k] : 0, 100 * r->fit_median[k], 100 * o->cv_median[k],
                100 * o->cv_p90[k]);
    const double s1 = o->s[GPU_OP_GEMM][0], sn = o->s[GPU_OP_GEMM][o->n - 1];
    fprintf(f, "\nproducts: %.0f GB/s of 2-byte weights at %g row, %.0f TFLOP/s at %g rows; a "
               "call's fixed cost %.1f-%.1f us\n", 2 / s1 * 1e-9, o->rows[0],
            2 * o->rows[o->n - 1] / sn * 1e-12, o->rows[o->n - 1], o->t0[GPU_OP_GEMM][0] * 1e6,
            o->t0[GPU_OP_GEMM][o->n - 1] * 1e6);
    for (int j = 0; j < 3; j++)
        fprintf(f, "NCCL all-reduce, %d GPUs: %.1f us + %.1f GB/s\n", 2 << j,
                o->ar_latency_s[j] * 1e6, o->ar_s_per_byte[j] > 0 ? 1e-9 / o->ar_s_per_byte[j] : 0);
}
