/* cmd_bench: `twinserve bench`, the real forward pass on any backend against the device's
 * own roofs (backend.h: b->roofs, measured by the same process before the timing).
 *
 * Decode (--batch): each batch size runs B sequences that each decode one token per step
 * at a context of --ctx tokens (the KV pool is zeroed, not prefilled: attention reads as
 * many positions as a real decode would, and its values do not change the timing). Per
 * batch size: tokens/s, the weight-read bandwidth it implies (weight bytes x steps / time),
 * and the fractions of the memory roof (that bandwidth over the measured read bandwidth)
 * and of the compute roof (GEMM rate / (2 x params) tokens/s). Beside them, the bytes a
 * step really has to read (every weight but an untied embedding table, of which it
 * gathers B rows, plus the KV cache it attends over) as a fraction of the bandwidth: for
 * an untied model or a large batch x context that is the truer figure.
 *
 * Prefill (--prefill N): one step of N new tokens of one sequence (the whole prompt as one
 * chunk), timed --steps times after one warm-up; best and median. Its work is counted as
 * the matrix products the step performs: 2 x N x (the layers' matrix parameters) + 2 x
 * dim x vocab (the LM head, for the one sampled row) + attention 2 x 2 x N^2/2 x n_heads x
 * head_dim x n_layers (QK^T and PV over the causal half); the rate over the measured GEMM
 * rate is its fraction of the compute roof. The usual 2 x params x N + attention (which
 * counts the embedding table and the LM head for every token) is reported beside it.
 *
 * Dummy models are opened shape-only (model.h: MODEL_SHAPE_ONLY): the backend generates
 * the weights where they live, so dummy:llama-3-8b never exists on the host. Weight bytes
 * are the bytes the products read (forward.h, fwd_weight_bytes): params x the backend's
 * weight element size, or a GGUF's stored types where the CPU keeps them (--weights). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/report.h"
#include "traces/stats.h"
#include "cli/cli.h"
#include "cli/cli_util.h"
#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/roofs.h"

#define MAX_BATCHES 16
#define BLOCK_SIZE 16
#define ROOF_REPS 5

static void usage(FILE *out) {
    fprintf(out,
            "usage: twinserve bench --model FILE|dummy:PRESET [--batch 1,8,32] [--ctx N]\n"
            "                       [--prefill N] [--steps N] [--backend cpu|cuda]\n"
            "                       [--dtype bf16|f16|f32] [--weights native|f32] [--threads N]\n"
            "                       [--kv-type f32|f16] [--seed S] [--json]\n"
            "Decode tokens/s per batch size at a context of --ctx tokens (default 128; at\n"
            "least 2, as the two warm-up steps decode the positions just before it), the\n"
            "weight-read bandwidth that implies, and the device's memory read bandwidth and\n"
            "GEMM rate of the weight type (fp32 sgemm on the CPU) measured by this command,\n"
            "with the roofs they give.\n"
            "--prefill N times one step of N new tokens of one sequence (best and median of\n"
            "--steps runs after a warm-up; decode runs too only when --batch is also given).\n"
            "Its work is the products it performs: 2 N x layer matrix params + 2 dim x vocab\n"
            "(LM head, one row) + attention 2 x 2 x N^2/2 x n_heads x head_dim x n_layers;\n"
            "the usual 2 x params x N + attention is printed beside it.\n"
            "--threads N: CPU threads (default 0: all cores).\n"
            "--dtype: the GPU's weight type (default bf16); the CPU backend is fp32 only.\n"
            "--weights native (default): a GGUF's F16/BF16/Q8_0/Q4_0 matrices stay in their\n"
            "type on the CPU (weight bytes, bytes/weight and the memory roof are that type's;\n"
            "Q8_0/Q4_0 products quantise the activations per block of 32, as llama.cpp's);\n"
            "f32: dequantised at load, fp32 activations.\n"
            "--kv-type f16: the CPU's KV cache in IEEE half (default f32); the KV bytes a\n"
            "step reads (read_GB/s) are then half.\n");
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

/* --dtype's spellings to bk_opts_t.dtype's ("bf16", "f16", "f32"); NULL if unknown. */
static const char *norm_dtype(const char *s) {
    if (!strcmp(s, "bf16")) return "bf16";
    if (!strcmp(s, "f16") || !strcmp(s, "fp16")) return "f16";
    if (!strcmp(s, "f32") || !strcmp(s, "fp32")) return "f32";
    return NULL;
}

/* A weight type as people write it: f32 -> fp32, f16 -> fp16. */
static const char *type_label(const char *wt) {
    if (!strcmp(wt, "f32")) return "fp32";
    if (!strcmp(wt, "f16")) return "fp16";
    return wt;
}

typedef struct {
    int32_t batch;
    double tok_s, step_ms, weight_gbs, frac_mem, frac_compute;
    double read_bytes;   /* bytes a step reads, mean over the timed steps */
    double read_gbs, frac_read;
    double frac_paired, bw_paired;   /* against passes beside the run (0: not paired) */
} bench_row_t;

typedef struct {
    int32_t n;           /* tokens */
    int32_t runs;
    double best_ms, median_ms, tok_s, tok_s_best;
    double flops, flops_params;          /* per step: as performed; 2 x params x N + attn */
    double tflops, frac_gemm, frac_gemm_best;
} prefill_t;

/* What a measurement run knows about the model and the device. */
typedef struct {
    const char *spec, *backend, *wtype, *gemm_label, *kv_type;
    int threads;
    model_config_t c;
    double params, wbytes, esize, bw, gemm;
    int32_t ctx, steps;
} bench_ctx_t;

/* The median of v [n], which it sorts (traces/stats.h). */
static double median_of(double *v, int n) {
    stats_sort(v, (size_t)n);
    return stats_percentile_sorted(v, (size_t)n, 50);
}

/* Read-bandwidth passes paired with a decode run (the CPU backend): a shared machine's
 * bandwidth moves by 2x over seconds (a 113 MB read ran at 43-53 GB/s, then at 74-110,
 * in one minute here), so a roof measured once beside a run can be another phase's. The
 * run is cut into PAIRS parts with a pass before each part and after the last; each part
 * is set against the mean of the passes around it. */
#define PAIRS 4
#define PROBE_BYTES ((size_t)256 << 20)

typedef struct {
    roofs_probe_t *probe;   /* NULL: no pairing */
    double wbytes;          /* weight bytes a step reads */
    double frac, bw;        /* out: median of the parts' weight bandwidth over the passes'
                             * mean, median pass; 0 when unpaired */
} pairing_t;

/* Times `steps` decode steps of B sequences; 0 with *secs (decode time alone), or -1
 * (message printed). */
static int time_batch(fwd_t *f, int32_t B, int32_t ctx, int32_t steps, int32_t per_seq,
                      pairing_t *pr, double *secs) {
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
    double t0 = 0, part_s[PAIRS], bw[PAIRS + 1];
    int parts = pr->probe ? (steps < PAIRS ? steps : PAIRS) : 1, part = 0;
    char err[256];
    const int warm = 2;
    *secs = 0;
    for (int32_t step = -warm; step <= steps; step++) {
        if (step >= 0 && (step == steps || step == (int32_t)((int64_t)steps * part / parts))) {
            /* a part ends (part > 0) and, the run not over, the next begins */
            if (part > 0) *secs += part_s[part - 1] = roofs_now() - t0;
            if (pr->probe && (bw[part] = roofs_probe_pass(pr->probe, err, sizeof err)) < 0) {
                fprintf(stderr, "twinserve bench: %s\n", err);
                goto done;
            }
            if (step == steps) break;
            part++;
            t0 = roofs_now();
        }
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
    pr->frac = pr->bw = 0;
    if (pr->probe) {
        double frac[PAIRS];
        for (int i = 0; i < parts; i++) {
            int32_t n = (int32_t)((int64_t)steps * (i + 1) / parts - (int64_t)steps * i / parts);
            frac[i] = pr->wbytes * n / part_s[i] / ((bw[i] + bw[i + 1]) / 2);
        }
        pr->frac = median_of(frac, parts);
        pr->bw = median_of(bw, parts + 1);
    }
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


/* Times `runs` prefill steps of N tokens of one sequence (positions 0..N-1, blocks
 * 0..ceil(N / BLOCK_SIZE) - 1) after one warm-up; 0 with best and median seconds, or -1
 * (message printed). fwd_step returns the sampled id, so each step is complete when it
 * returns. */
static int time_prefill(fwd_t *f, int32_t N, int32_t runs, double *best, double *median) {
    int rc = -1;
    const model_config_t *c = fwd_config(f);
    int32_t nb = (N + BLOCK_SIZE - 1) / BLOCK_SIZE;
    int32_t *tokens = calloc((size_t)N, sizeof *tokens), *pos = calloc((size_t)N, sizeof *pos);
    int32_t *table = calloc((size_t)nb, sizeof *table);
    double *t = calloc((size_t)runs, sizeof *t);
    if (!tokens || !pos || !table || !t) {
        fprintf(stderr, "twinserve bench: out of memory\n");
        goto done;
    }
    for (int32_t i = 0; i < N; i++) {
        tokens[i] = (int32_t)(((int64_t)i * 7919 + 1) % c->vocab);
        pos[i] = i;
    }
    for (int32_t i = 0; i < nb; i++) table[i] = i;
    int32_t seq_start[2] = {0, N}, seq_len[1] = {N}, bt_start[2] = {0, nb}, row[1] = {N - 1};
    int32_t id;
    bk_sample_t smp = {0, 0, 1, 0, 0};
    bk_batch_t bt = {N, 1, tokens, pos, seq_start, seq_len, bt_start, table, 1, row, &smp};
    for (int32_t r = -1; r < runs; r++) {
        double t0 = roofs_now();
        if (fwd_step(f, &bt, &id)) {
            fprintf(stderr, "twinserve bench: prefill of %d tokens: %s\n", N, fwd_errmsg(f));
            goto done;
        }
        if (r >= 0) t[r] = roofs_now() - t0;
    }
    *median = median_of(t, runs);   /* sorts t */
    *best = t[0];
    rc = 0;
done:
    free(tokens);
    free(pos);
    free(table);
    free(t);
    return rc;
}

/* Matrix parameters of the layers (the projections and the MLP): 2 FLOPs each per token. */
static double layer_matrix_params(const model_config_t *c) {
    preset_model_t p;
    model_preset_shape(c, "bench", 4, &p);
    return preset_model_layer_matrix_params(&p);
}

static double attention_flops(const model_config_t *c, double n) {
    return 2.0 * 2.0 * (n * n / 2) * c->n_heads * c->head_dim * c->n_layers;
}

static void print_json(const bench_ctx_t *x, const bench_row_t *r, int n, const prefill_t *p) {
    double mem_roof = x->bw / x->wbytes, comp_roof = x->gemm / (2 * x->params);
    printf("{\"model\": ");
    report_json_str(stdout, x->spec);   /* a path may hold quotes or backslashes */
    printf(", \"backend\": ");
    report_json_str(stdout, x->backend);
    printf(", \"threads\": %d, \"params\": %.0f, "
           "\"weight_bytes\": %.0f, \"ctx\": %d, \"steps\": %d, \"mem_bw_gbs\": %.2f, "
           "\"sgemm_gflops\": %.2f, \"mem_roof_tok_per_s_batch1\": %.2f, "
           "\"compute_roof_tok_per_s\": %.2f, ", x->threads, x->params, x->wbytes, x->ctx,
           x->steps, x->bw / 1e9, x->gemm / 1e9, mem_roof, comp_roof);
    printf("\"weight_type\": \"%s\", \"weight_elem_bytes\": %.0f, \"bytes_per_weight\": %.4f, "
           "\"kv_type\": \"%s\", \"gemm_label\": \"%s\", \"gemm_gflops\": %.2f, \"results\": [",
           x->wtype, x->esize, x->wbytes / x->params, x->kv_type, x->gemm_label, x->gemm / 1e9);
    for (int i = 0; i < n; i++)
        printf("%s{\"batch\": %d, \"tok_per_s\": %.3f, \"step_ms\": %.3f, \"weight_gbs\": "
               "%.3f, \"frac_mem_roof\": %.4f, \"frac_compute_roof\": %.4f, "
               "\"read_bytes_per_step\": %.0f, \"read_gbs\": %.3f, \"frac_read_bw\": %.4f, "
               "\"frac_mem_roof_paired\": %.4f, \"mem_bw_paired_gbs\": %.2f}",
               i ? ", " : "", r[i].batch, r[i].tok_s, r[i].step_ms, r[i].weight_gbs,
               r[i].frac_mem, r[i].frac_compute, r[i].read_bytes, r[i].read_gbs,
               r[i].frac_read, r[i].frac_paired, r[i].bw_paired / 1e9);
    printf("], \"prefill\": ");
    if (p)
        printf("{\"tokens\": %d, \"runs\": %d, \"best_ms\": %.3f, \"median_ms\": %.3f, "
               "\"tok_per_s\": %.3f, \"tok_per_s_best\": %.3f, \"flops\": %.6g, "
               "\"flops_2pn\": %.6g, \"tflops\": %.3f, \"frac_gemm_roof\": %.4f, "
               "\"frac_gemm_roof_best\": %.4f}",
               p->n, p->runs, p->best_ms, p->median_ms, p->tok_s, p->tok_s_best, p->flops,
               p->flops_params, p->tflops, p->frac_gemm, p->frac_gemm_best);
    else
        printf("null");
    printf("}\n");
}

static void print_text(const bench_ctx_t *x, const bench_row_t *r, int n, const prefill_t *p) {
    const model_config_t *c = &x->c;
    double mem_roof = x->bw / x->wbytes, comp_roof = x->gemm / (2 * x->params);
    printf("model %s: %d layers, dim %d, %.1fM params, %.1f MB of %s weights (%.3f "
           "bytes/weight)\n", x->spec, c->n_layers, c->dim, x->params / 1e6, x->wbytes / 1e6,
           type_label(x->wtype), x->wbytes / x->params);
    if (!strcmp(x->backend, "cpu"))
        printf("backend %s, %d threads, %s KV cache", x->backend, x->threads, x->kv_type);
    else
        printf("backend %s", x->backend);
    if (n)
        printf("; decode at context %d, %d timed steps per batch size\n", x->ctx, x->steps);
    else
        printf("\n");
    printf("memory read bandwidth %.1f GB/s -> memory roof %.1f tok/s at batch 1 "
           "(bandwidth / weight bytes; B x that at batch B)\n", x->bw / 1e9, mem_roof);
    printf("%s %.1f GFLOP/s -> compute roof %.1f tok/s (GEMM rate / (2 x params))\n",
           x->gemm_label, x->gemm / 1e9, comp_roof);
    if (n) {
        printf("%6s %10s %9s %12s %9s %9s %12s %9s %10s %7s\n", "batch", "tok/s", "step_ms",
               "weight_GB/s", "mem_roof", "of_mem", "compute_roof", "of_comp", "read_GB/s",
               "of_bw");
        for (int i = 0; i < n; i++)
            printf("%6d %10.1f %9.2f %12.1f %9.1f %8.1f%% %12.1f %8.1f%% %10.1f %6.1f%%\n",
                   r[i].batch, r[i].tok_s, r[i].step_ms, r[i].weight_gbs,
                   mem_roof * r[i].batch, 100 * r[i].frac_mem, comp_roof,
                   100 * r[i].frac_compute, r[i].read_gbs, 100 * r[i].frac_read);
        printf("(read_GB/s: the bytes a step reads -- weights but an untied embedding table, "
               "plus the KV cache -- per second; of_bw: over the read bandwidth)\n");
        if (r[0].bw_paired > 0) {
            printf("weight GB/s against read passes beside each quarter of the run (median):");
            for (int i = 0; i < n; i++)
                printf("%s batch %d %.1f%% of %.1f GB/s", i ? "," : "", r[i].batch,
                       100 * r[i].frac_paired, r[i].bw_paired / 1e9);
            printf("\n");
        }
    }
    if (p) {
        printf("prefill of %d tokens (one sequence, one step): median %.2f ms, best %.2f ms "
               "over %d runs; %.1f tok/s (median), %.1f (best)\n", p->n, p->median_ms,
               p->best_ms, p->runs, p->tok_s, p->tok_s_best);
        printf("  work %.4g FLOP (products performed; 2 x params x N + attention would be "
               "%.4g): %.2f TFLOP/s = %.1f%% of the %s roof (median), %.1f%% (best)\n",
               p->flops, p->flops_params, p->tflops, 100 * p->frac_gemm, x->gemm_label,
               100 * p->frac_gemm_best);
    }
}

int cmd_bench(int argc, char **argv) {
    const char *spec = NULL, *bname = "cpu", *dtype = NULL, *weights = NULL, *kv_type = NULL;
    int32_t batches[MAX_BATCHES] = {1, 8, 32}, ctx = 128, steps = 16, threads = 0, prefill = 0;
    int nb = 3, json = 0, rc = 1, batch_given = 0;
    uint64_t seed = 1;
    char err[512], label[32];
    model_t *m = NULL;
    backend_t *b = NULL;
    fwd_t *f = NULL;
    pairing_t pr = {0};
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
        else if (!strcmp(a, "--dtype")) ok = (dtype = norm_dtype(v)) != NULL;
        else if (!strcmp(a, "--weights"))
            ok = !strcmp(weights = v, "native") || !strcmp(v, "f32");
        else if (!strcmp(a, "--kv-type")) ok = cli_kv_type_ok(kv_type = v);
        else if (!strcmp(a, "--batch")) {
            ok = parse_batches(v, batches, &nb) == 0;
            batch_given = 1;
        }
        else if (!strcmp(a, "--ctx")) ok = cli_int(v, 2, 1 << 24, &ctx);
        else if (!strcmp(a, "--prefill")) ok = cli_int(v, 1, 1 << 20, &prefill);
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
    if (prefill && !batch_given) nb = 0;   /* --prefill alone: no decode */
    int32_t maxb = 0;
    for (int i = 0; i < nb; i++) maxb = batches[i] > maxb ? batches[i] : maxb;

    if (model_open(spec, seed, MODEL_SHAPE_ONLY | MODEL_LAZY, &m, err, sizeof err)) {
        fprintf(stderr, "twinserve bench: %s\n", err);
        goto done;
    }
    const model_config_t *c = &m->cfg;
    if (nb && ctx + steps + 2 > c->max_seq) {
        fprintf(stderr, "twinserve bench: --ctx %d + %d steps exceeds %s's context of %d\n", ctx,
                steps, spec, c->max_seq);
        goto done;
    }
    if (prefill > c->max_seq) {
        fprintf(stderr, "twinserve bench: --prefill %d exceeds %s's context of %d\n", prefill,
                spec, c->max_seq);
        goto done;
    }
    bk_opts_t bo = {.n_threads = threads, .dtype = dtype, .weights = weights, .kv_type = kv_type};
    if (!(b = backend_new(bname, &bo, err, sizeof err))) {
        fprintf(stderr, "twinserve bench: %s\n", err);
        goto done;
    }
    if (dtype && strcmp(dtype, b->weight_type)) {
        fprintf(stderr, "twinserve bench: --dtype %s: backend %s holds %s weights\n", dtype,
                b->name, b->weight_type);
        goto done;
    }
    int32_t per_seq = (ctx + steps + BLOCK_SIZE) / BLOCK_SIZE + 1;
    int32_t pf_blocks = (prefill + BLOCK_SIZE - 1) / BLOCK_SIZE;
    int32_t max_tok = maxb > prefill ? maxb : prefill;
    int32_t n_blocks = maxb * per_seq > pf_blocks ? maxb * per_seq : pf_blocks;
    fwd_opts_t fo = {max_tok, maxb > 1 ? maxb : 1, n_blocks, BLOCK_SIZE};
    if (fwd_new(b, m, &fo, &f, err, sizeof err)) {
        fprintf(stderr, "twinserve bench: %s\n", err);
        goto done;
    }
    bench_ctx_t x = {0};
    x.c = *fwd_config(f);
    x.spec = spec;
    x.backend = bname;
    /* a stored type when the products read one (bytes and roofs are then that type's) */
    x.wtype = fwd_weight_type(f) ? fwd_weight_type(f) : b->weight_type;
    x.kv_type = kv_type ? kv_type : !strcmp(b->name, "cpu") ? "f32" : b->weight_type;
    x.threads = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    x.params = model_params(&x.c);
    x.esize = (double)b->elem_size(b, BK_WEIGHT);
    x.wbytes = fwd_weight_bytes(f);
    x.ctx = ctx;
    x.steps = steps;
    model_free(m);   /* the backend holds the weights; a file's host copy would crowd RAM */
    m = NULL;
    if (!strcmp(b->name, "cpu") && !strcmp(b->weight_type, "f32"))
        snprintf(label, sizeof label, "fp32 sgemm");
    else
        snprintf(label, sizeof label, "%s GEMM", type_label(b->weight_type));
    x.gemm_label = label;

    if (b->roofs(b, ROOF_REPS, &x.bw, &x.gemm) || x.bw <= 0 || x.gemm <= 0) {
        fprintf(stderr, "twinserve bench: measuring backend %s's roofs: %s\n", b->name,
                b->errmsg);
        goto done;
    }
    /* Bytes read per decode step: the weights, except that an untied embedding table is
     * only gathered (B rows); the KV cache of every sequence up to its position, all layers
     * (kv_block_bytes / block_size per position). */
    bk_kv_shape_t kvs = {x.c.n_layers, 1, BLOCK_SIZE, x.c.n_kv_heads, x.c.head_dim};
    double kv_pos = (double)b->kv_block_bytes(b, &kvs) / BLOCK_SIZE;
    double emb_bytes = (double)x.c.vocab * x.c.dim * x.esize;
    double w_read = x.wbytes - (x.c.tied ? 0 : emb_bytes);
    /* mean context read per step: positions 0..ctx+step over steps 0..steps-1 */
    double mean_ctx = ctx + 1 + (steps - 1) / 2.0;
    bench_row_t rows[MAX_BATCHES];
    pr.wbytes = x.wbytes;
    if (nb && !strcmp(b->name, "cpu")) {
        char perr[256];
        if (!(pr.probe = roofs_probe_new(PROBE_BYTES, x.threads, perr, sizeof perr))) {
            fprintf(stderr, "twinserve bench: %s\n", perr);
            goto done;
        }
    }
    for (int i = 0; i < nb; i++) {
        double secs;
        if (time_batch(f, batches[i], ctx, steps, per_seq, &pr, &secs)) goto done;
        bench_row_t *r = &rows[i];
        r->frac_paired = pr.frac;
        r->bw_paired = pr.bw;
        int32_t B = batches[i];
        r->batch = B;
        r->tok_s = (double)B * steps / secs;
        r->step_ms = secs / steps * 1e3;
        r->weight_gbs = x.wbytes * steps / secs / 1e9;
        r->frac_mem = r->weight_gbs * 1e9 / x.bw;
        r->frac_compute = r->tok_s / (x.gemm / (2 * x.params));
        r->read_bytes = w_read + (x.c.tied ? 0 : (double)B * x.c.dim * x.esize) +
                        (double)B * mean_ctx * kv_pos;
        r->read_gbs = r->read_bytes * steps / secs / 1e9;
        r->frac_read = r->read_gbs * 1e9 / x.bw;
    }
    prefill_t pf = {0}, *pp = NULL;
    if (prefill) {
        double best, med;
        if (time_prefill(f, prefill, steps, &best, &med)) goto done;
        pf.n = prefill;
        pf.runs = steps;
        pf.best_ms = best * 1e3;
        pf.median_ms = med * 1e3;
        pf.tok_s = prefill / med;
        pf.tok_s_best = prefill / best;
        double attn = attention_flops(&x.c, prefill);
        pf.flops = 2.0 * prefill * layer_matrix_params(&x.c) + 2.0 * x.c.dim * x.c.vocab + attn;
        pf.flops_params = 2.0 * prefill * x.params + attn;
        pf.tflops = pf.flops / med / 1e12;
        pf.frac_gemm = pf.flops / med / x.gemm;
        pf.frac_gemm_best = pf.flops / best / x.gemm;
        pp = &pf;
    }
    if (json) print_json(&x, rows, nb, pp);
    else print_text(&x, rows, nb, pp);
    /* how the backend ran the steps (CUDA: decode steps as graphs or not), on stderr so
     * that --json's output stays one object */
    if (b->counters) fprintf(stderr, "bench: backend %s: %s\n", b->name, b->counters(b));
    rc = 0;
done:
    roofs_probe_free(pr.probe);
    fwd_free(f);
    if (b) b->destroy(b);
    model_free(m);
    return rc;
}
