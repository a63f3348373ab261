/* quant_accuracy: what the CPU backend's stored-type products cost in accuracy, next-token
 * distributions compared on one text (issue #16).
 *
 * A reference model (REF, e.g. stories260K.bin, or an F32 GGUF) writes N tokens greedily
 * from BOS; then that text goes, in one prefill with every position's logits, through
 *   ref     REF (fp32),
 *   f32     QUANT with --weights f32 (its weights dequantised, fp32 activations),
 *   native  QUANT with --weights native (Q8_0/Q4_0: activations quantised per block of 32,
 *           engine/cpu/cpu_qdot.h; F16/BF16: fp32 activations, so native = f32),
 * and per pair the mean KL divergence of the next-token distributions (nats, natural
 * softmax of the logits) and the share of positions whose argmax agrees. "ref -> f32" is
 * what quantising the weights costs, "f32 -> native" what quantising the activations adds.
 * KV_TYPE (f32 or f16) is QUANT's KV cache (bk_opts_t.kv_type; REF's stays f32): with
 * QUANT = REF and f16, "ref -> f32" is what rounding K and V to halves costs.
 *
 *   usage: build/bench/quant_accuracy REF QUANT [N (256)] [THREADS (0: all)] [KV_TYPE (f32)]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

#define BS 16

typedef struct {
    model_t *m;
    backend_t *b;
    fwd_t *f;
} net_t;

static void net_free(net_t *n) {
    fwd_free(n->f);
    if (n->b) n->b->destroy(n->b);
    model_free(n->m);
}

static int net_open(net_t *n, const char *spec, const char *weights, const char *kv_type,
                    int threads, int32_t len, char *err, size_t errlen) {
    memset(n, 0, sizeof *n);
    if (model_open(spec, 0, MODEL_LAZY, &n->m, err, errlen)) return -1;
    bk_opts_t bo = {.n_threads = threads, .weights = weights, .kv_type = kv_type};
    if (!(n->b = backend_new("cpu", &bo, err, errlen))) return -1;
    int32_t nb = (len + BS - 1) / BS;
    fwd_opts_t fo = {.max_tokens = len, .max_sample = len, .n_blocks = nb, .block_size = BS};
    if (fwd_new(n->b, n->m, &fo, &n->f, err, errlen)) return -1;
    return 0;
}

/* One step of tokens ids[first, len) at their positions, with the earlier ones' KV in
 * place; every row sampled (greedy: next [len - first] gets their argmax ids), and, out
 * not NULL, every row's logits [len - first][vocab] into out. */
static int run(net_t *n, const int32_t *ids, int32_t len, int32_t first, float *out,
               int32_t *next, char *err, size_t errlen) {
    int32_t nb = (len + BS - 1) / BS, seq_start[2] = {0, len - first}, seq_len = len;
    int32_t bt[2] = {0, nb}, *table = malloc(sizeof *table * (size_t)nb);
    int32_t *pos = malloc(sizeof *pos * (size_t)len), *rows = malloc(sizeof *rows * (size_t)len);
    bk_sample_t *sp = calloc((size_t)len, sizeof *sp);
    int rc = -1;
    if (!table || !pos || !rows || !sp) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < nb; i++) table[i] = i;
    for (int32_t i = 0; i < len - first; i++) sp[i].top_p = 1.0f;   /* greedy */
    for (int32_t i = first; i < len; i++) {
        pos[i - first] = i;
        rows[i - first] = i - first;
    }
    bk_batch_t b = {.n_tokens = len - first, .n_seqs = 1, .tokens = ids + first, .pos = pos,
                    .seq_start = seq_start, .seq_len = &seq_len, .bt_start = bt,
                    .block_table = table, .n_sample = len - first, .sample_rows = rows,
                    .sample = sp};
    if (fwd_step(n->f, &b, next) || (out && fwd_logits(n->f, out))) {
        snprintf(err, errlen, "%s", fwd_errmsg(n->f));
        goto done;
    }
    rc = 0;
done:
    free(table), free(pos), free(rows), free(sp);
    return rc;
}

/* log-softmax of v [n] into lp */
static void log_softmax(const float *v, int32_t n, double *lp) {
    double mx = v[0], s = 0;
    for (int32_t i = 1; i < n; i++) mx = v[i] > mx ? v[i] : mx;
    for (int32_t i = 0; i < n; i++) s += exp(v[i] - mx);
    double l = mx + log(s);
    for (int32_t i = 0; i < n; i++) lp[i] = v[i] - l;
}

static int32_t argmax(const float *v, int32_t n) {
    int32_t r = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[r]) r = i;
    return r;
}

static void compare(const char *name, const float *a, const float *b, int32_t len,
                    int32_t vocab, double *la, double *lb) {
    double kl = 0, klmax = 0;
    int32_t agree = 0;
    for (int32_t t = 0; t < len; t++) {
        const float *x = a + (size_t)t * vocab, *y = b + (size_t)t * vocab;
        log_softmax(x, vocab, la);
        log_softmax(y, vocab, lb);
        double d = 0;
        for (int32_t i = 0; i < vocab; i++) d += exp(la[i]) * (la[i] - lb[i]);
        kl += d;
        klmax = d > klmax ? d : klmax;
        agree += argmax(x, vocab) == argmax(y, vocab);
    }
    printf("%-16s mean KL %.3e nats (max %.3e), argmax agrees at %d of %d positions (%.1f%%)\n",
           name, kl / len, klmax, agree, len, 100.0 * agree / len);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s REF QUANT [N] [THREADS]\n", argv[0]);
        return 2;
    }
    int32_t n = argc > 3 ? atoi(argv[3]) : 256;
    int threads = argc > 4 ? atoi(argv[4]) : 0;
    const char *kv = argc > 5 ? argv[5] : "f32";
    char err[1024];
    net_t ref, f32, nat;
    memset(&ref, 0, sizeof ref);
    memset(&f32, 0, sizeof f32);
    memset(&nat, 0, sizeof nat);
    int rc = 1;
    float *lr = NULL, *lf = NULL, *ln = NULL;
    double *da = NULL, *db = NULL;
    int32_t *ids = NULL;
    if (n < 2 || net_open(&ref, argv[1], NULL, NULL, threads, n, err, sizeof err) ||
        net_open(&f32, argv[2], "f32", kv, threads, n, err, sizeof err) ||
        net_open(&nat, argv[2], "native", kv, threads, n, err, sizeof err)) {
        fprintf(stderr, "quant_accuracy: %s\n", n < 2 ? "N must be >= 2" : err);
        goto done;
    }
    int32_t vocab = ref.m->cfg.vocab;
    if (f32.m->cfg.vocab != vocab || f32.m->cfg.dim != ref.m->cfg.dim) {
        fprintf(stderr, "quant_accuracy: %s and %s differ in shape\n", argv[1], argv[2]);
        goto done;
    }
    ids = malloc(sizeof *ids * (size_t)n);
    lr = malloc(sizeof *lr * (size_t)n * vocab);
    lf = malloc(sizeof *lf * (size_t)n * vocab);
    ln = malloc(sizeof *ln * (size_t)n * vocab);
    da = malloc(sizeof *da * (size_t)vocab);
    db = malloc(sizeof *db * (size_t)vocab);
    if (!ids || !lr || !lf || !ln || !da || !db) {
        fprintf(stderr, "quant_accuracy: out of memory\n");
        goto done;
    }
    /* the text: REF's greedy continuation of BOS, one token per step */
    ids[0] = TOK_BOS;
    for (int32_t i = 1; i < n; i++) {
        int32_t next;
        if (run(&ref, ids, i, i - 1, NULL, &next, err, sizeof err)) goto fail;
        ids[i] = next;
    }
    int32_t *scratch = malloc(sizeof *scratch * (size_t)n);
    if (!scratch) goto done;
    /* every position's logits, in one prefill of the text per network (a fresh KV: the
     * positions are rewritten from 0) */
    if (run(&ref, ids, n, 0, lr, scratch, err, sizeof err) ||
        run(&f32, ids, n, 0, lf, scratch, err, sizeof err) ||
        run(&nat, ids, n, 0, ln, scratch, err, sizeof err)) {
        free(scratch);
        goto fail;
    }
    free(scratch);
    printf("quant_accuracy: %d positions of %s's greedy text; QUANT = %s (%s weights, %s KV)\n",
           n, argv[1], argv[2], fwd_weight_type(nat.f) ? fwd_weight_type(nat.f) : "f32", kv);
    compare("ref -> f32", lr, lf, n, vocab, da, db);
    compare("ref -> native", lr, ln, n, vocab, da, db);
    compare("f32 -> native", lf, ln, n, vocab, da, db);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "quant_accuracy: %s\n", err);
done:
    free(ids), free(lr), free(lf), free(ln), free(da), free(db);
    net_free(&nat);
    net_free(&f32);
    net_free(&ref);
    return rc;
}
