/* cmd_bench: `twinserve bench`, decode throughput of the real forward pass against the
 * machine's own roofs (engine/roofs.h), all measured by the same process.
 *
 * Each batch size runs B sequences that each decode one token per step at a context of
 * --ctx tokens (the KV pool is zeroed, not prefilled: attention reads as many positions as a
 * real decode would, and its values do not change the timing). Per batch size: tokens/s,
 * the weight-read bandwidth it implies (weight bytes x steps / time), and the fractions of
 * the memory roof (that bandwidth over the measured read bandwidth) and of the compute roof
 * (sgemm rate / (2 x params) tokens/s). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/report.h"
#include "cli/cli.h"
#include "cli/cli_util.h"
#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/roofs.h"

#define MAX_BATCHES 16
#define BLOCK_SIZE 16

static void usage(FILE *out) {
    fprintf(out,
            "usage: twinserve bench --model FILE|dummy:PRESET [--batch 1,8,32] [--ctx N]\n"
            "                       [--steps N] [--threads N] [--backend cpu] [--seed S] [--json]\n"
            "Decode tokens/s per batch size at a context of --ctx tokens (default 128), the\n"
            "weight-read bandwidth that implies, and the machine's memory read bandwidth and\n"
            "fp32 sgemm rate measured by this command, with the roofs they give.\n");
}

static int parse_batches(const char *s, int32_t *out, int *n) {
    char buf[256];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_BATCHES || !cli_int(tok, 1, 65536, &out[*n])) return -1;
        (*n)++;
    }
    return *n > 0 ? 0 : -1;
}

typedef struct {
    int32_t batch;
    double tok_s, step_ms, weight_gbs, frac_mem, frac_compute;
} bench_row_t;

/* Times `steps` decode steps of B sequences; 0 with *secs, or -1 (message printed). */
static int time_batch(fwd_t *f, int32_t B, int32_t ctx, int32_t steps, int32_t per_seq,
                      double *secs) {
    int rc = -1;
    const model_config_t *c = fwd_config(f);
    int32_t *tokens = calloc((size_t)B, sizeof *tokens), *pos = calloc((size_t)B, sizeof *pos);
    int32_t *seq_start = calloc((size_t)B + 1, sizeof *seq_start);
    int32_t *seq_len = calloc((size_t)B, sizeof *seq_len);
    int32_t *bt_start = calloc((size_t)B + 1, sizeof *bt_start);
    int32_t *table = calloc((size_t)B * per_seq, sizeof *table);
    int32_t *rows = calloc((size_t)B, sizeof *rows), *ids = calloc((size_t)B, sizeof *ids);
    bk_sample_t *smp = calloc((size_t)B, sizeof *smp);
    if (!tokens || !pos || !seq_start || !seq_len || !bt_start || !table || !rows || !ids ||
        !smp) {
        fprintf(stderr, "twinserve bench: out of memory\n");
        goto done;
    }
    for (int32_t s = 0; s <= B; s++) {
        seq_start[s] = s;
        bt_start[s] = s * per_seq;
    }
    for (int32_t i = 0; i < B * per_seq; i++) table[i] = i;
    for (int32_t s = 0; s < B; s++) {
        rows[s] = s;
        smp[s] = (bk_sample_t){0, 0, 1, (uint64_t)s, 0};
        tokens[s] = (s * 7919 + 1) % c->vocab;
    }
    bk_batch_t bt = {B, B, tokens, pos, seq_start, seq_len, bt_start, table, B, rows, smp};
    double t0 = 0;
    const int warm = 2;
    for (int32_t step = -warm; step < steps; step++) {
        if (step == 0) t0 = roofs_now();
        for (int32_t s = 0; s < B; s++) {
            pos[s] = ctx + step;
            seq_len[s] = pos[s] + 1;
            smp[s].idx = step + warm;
        }
        if (fwd_step(f, &bt, ids)) {
            fprintf(stderr, "twinserve bench: batch %d: %s\n", B, fwd_errmsg(f));
            goto done;
        }
        for (int32_t s = 0; s < B; s++) tokens[s] = ids[s];
    }
    *secs = roofs_now() - t0;
    rc = 0;
done:
    free(tokens);
    free(pos);
    free(seq_start);
    free(seq_len);
    free(bt_start);
    free(table);
    free(rows);
    free(ids);
    free(smp);
    return rc;
}

static void print_results(int json, const char *spec, const char *backend, int threads,
                          const model_config_t *c, double params, double wbytes, double bw,
                          double gemm, int32_t ctx, int32_t steps, const bench_row_t *r, int n) {
    double mem_roof = bw / wbytes, comp_roof = gemm / (2 * params);
    if (json) {
        printf("{\"model\": ");
        report_json_str(stdout, spec);   /* a path may hold quotes or backslashes */
        printf(", \"backend\": ");
        report_json_str(stdout, backend);
        printf(", \"threads\": %d, \"params\": %.0f, "
               "\"weight_bytes\": %.0f, \"ctx\": %d, \"steps\": %d, \"mem_bw_gbs\": %.2f, "
               "\"sgemm_gflops\": %.2f, \"mem_roof_tok_per_s_batch1\": %.2f, "
               "\"compute_roof_tok_per_s\": %.2f, \"results\": [", threads,
               params, wbytes, ctx, steps, bw / 1e9, gemm / 1e9, mem_roof, comp_roof);
        for (int i = 0; i < n; i++)
            printf("%s{\"batch\": %d, \"tok_per_s\": %.3f, \"step_ms\": %.3f, \"weight_gbs\": "
                   "%.3f, \"frac_mem_roof\": %.4f, \"frac_compute_roof\": %.4f}",
                   i ? ", " : "", r[i].batch, r[i].tok_s, r[i].step_ms, r[i].weight_gbs,
                   r[i].frac_mem, r[i].frac_compute);
        printf("]}\n");
        return;
    }
    printf("model %s: %d layers, dim %d, %.1fM params, %.1f MB of %s weights\n", spec,
           c->n_layers, c->dim, params / 1e6, wbytes / 1e6, "fp32");
    printf("backend %s, %d threads; decode at context %d, %d timed steps per batch size\n",
           backend, threads, ctx, steps);
    printf("memory read bandwidth %.1f GB/s -> memory roof %.1f tok/s at batch 1 "
           "(bandwidth / weight bytes; B x that at batch B)\n", bw / 1e9, mem_roof);
    printf("sgemm %.1f GFLOP/s -> compute roof %.1f tok/s (GEMM rate / (2 x params))\n",
           gemm / 1e9, comp_roof);
    printf("%6s %10s %9s %12s %9s %9s %12s %9s\n", "batch", "tok/s", "step_ms", "weight_GB/s",
           "mem_roof", "of_mem", "compute_roof", "of_comp");
    for (int i = 0; i < n; i++) {
        printf("%6d %10.1f %9.2f %12.1f %9.1f %8.1f%% %12.1f %8.1f%%\n", r[i].batch, r[i].tok_s,
               r[i].step_ms, r[i].weight_gbs, mem_roof * r[i].batch, 100 * r[i].frac_mem,
               comp_roof, 100 * r[i].frac_compute);
    }
}

int cmd_bench(int argc, char **argv) {
    const char *spec = NULL, *bname = "cpu";
    int32_t batches[MAX_BATCHES] = {1, 8, 32}, ctx = 128, steps = 16, threads = 0;
    int nb = 3, json = 0, rc = 1;
    uint64_t seed = 1;
    char err[512];
    model_t *m = NULL;
    backend_t *b = NULL;
    fwd_t *f = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (strncmp(a, "--", 2) || !v) {
            fprintf(stderr, "twinserve bench: %s '%s' (see --help)\n",
                    strncmp(a, "--", 2) ? "unexpected argument" : "missing value for", a);
            return 2;
        }
        i++;
        int ok = 1;
        if (!strcmp(a, "--model")) spec = v;
        else if (!strcmp(a, "--backend")) bname = v;
        else if (!strcmp(a, "--batch")) ok = parse_batches(v, batches, &nb) == 0;
        else if (!strcmp(a, "--ctx")) ok = cli_int(v, 0, 1 << 24, &ctx);
        else if (!strcmp(a, "--steps")) ok = cli_int(v, 1, 1 << 20, &steps);
        else if (!strcmp(a, "--threads")) ok = cli_int(v, 0, 1024, &threads);
        else if (!strcmp(a, "--seed")) ok = cli_u64(v, &seed);
        else {
            fprintf(stderr, "twinserve bench: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "twinserve bench: %s: bad value '%s' (see --help)\n", a, v);
            return 2;
        }
    }
    if (!spec) {
        fprintf(stderr, "twinserve bench: --model FILE|dummy:PRESET is required\n");
        return 2;
    }
    int32_t maxb = 0;
    for (int i = 0; i < nb; i++) maxb = batches[i] > maxb ? batches[i] : maxb;

    if (model_load(spec, seed, &m, err, sizeof err)) {
        fprintf(stderr, "twinserve bench: %s\n", err);
        goto done;
    }
    const model_config_t *c = &m->cfg;
    if (ctx + steps + 2 > c->max_seq) {
        fprintf(stderr, "twinserve bench: --ctx %d + %d steps exceeds %s's context of %d\n", ctx,
                steps, spec, c->max_seq);
        goto done;
    }
    bk_opts_t bo = {threads, NULL, 0};
    if (!(b = backend_new(bname, &bo, err, sizeof err))) {
        fprintf(stderr, "twinserve bench: %s\n", err);
        goto done;
    }
    int32_t per_seq = (ctx + steps + BLOCK_SIZE) / BLOCK_SIZE + 1;
    fwd_opts_t fo = {maxb, maxb, maxb * per_seq, BLOCK_SIZE};
    if (fwd_new(b, m, &fo, &f, err, sizeof err)) {
        fprintf(stderr, "twinserve bench: %s\n", err);
        goto done;
    }
    double params = model_params(c), wbytes = params * sizeof(float);
    model_free(m);   /* the backend holds its own copy; the host copy would only crowd RAM */
    m = NULL;

    int nthreads = threads > 0 ? threads : 0;
    double bw = roofs_mem_read_bw(0, nthreads, 5, err, sizeof err);
    double gemm = bw > 0 ? roofs_sgemm_flops(0, 5, err, sizeof err) : -1;
    if (bw <= 0 || gemm <= 0) {
        fprintf(stderr, "twinserve bench: %s\n", err);
        goto done;
    }
    bench_row_t rows[MAX_BATCHES];
    for (int i = 0; i < nb; i++) {
        double secs;
        if (time_batch(f, batches[i], ctx, steps, per_seq, &secs)) goto done;
        bench_row_t *r = &rows[i];
        r->batch = batches[i];
        r->tok_s = (double)batches[i] * steps / secs;
        r->step_ms = secs / steps * 1e3;
        r->weight_gbs = wbytes * steps / secs / 1e9;
        r->frac_mem = r->weight_gbs * 1e9 / bw;
        r->frac_compute = r->tok_s / (gemm / (2 * params));
    }
    model_config_t cfg = *fwd_config(f);
    print_results(json, spec, bname, threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN),
                  &cfg, params, wbytes, bw, gemm, ctx, steps, rows, nb);
    rc = 0;
done:
    fwd_free(f);
    if (b) b->destroy(b);
    model_free(m);
    return rc;
}
