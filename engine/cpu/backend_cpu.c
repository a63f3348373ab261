/* backend_cpu: see backend_cpu.h. Ops read the batch that `prepare` copied; every op
 * checks its sizes against that batch so that a forward-pass bug gives a message rather
 * than a stray write. */
#include "engine/cpu/backend_cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/cpu/cpu_gemm.h"
#include "engine/cpu/cpu_pool.h"
#include "engine/cpu/cpu_qdot.h"
#include "engine/cpu/cpu_qgemm.h"
#include "engine/dequant.h"
#include "engine/dummy_weight.h"
#include "engine/roofs.h"
#include "engine/sampler.h"

/* Below this many items per thread an element-wise op stays on the calling thread. */
#define GRAIN_ELEMS 32768
#define HUGE_PAGE ((size_t)2 << 20)
#define ATTN_MAX_PARTS 256   /* parts an attention op is cut into, at most (threads) */

typedef struct {
    int n_threads;
    cpool_t *pool;
    void **allocs;              /* every live buffer, so destroy frees what callers leak */
    size_t n_allocs, cap_allocs;

    void *kv;                   /* [layer][block][K|V][kv_head][slot][hd] elements */
    bk_kv_shape_t kvs;
    size_t kv_layer;            /* elements per layer */
    int kv_f16;                 /* elements are IEEE halves (bk_opts_t.kv_type f16), else fp32 */

    /* the prepared batch, copied (the caller's arrays are borrowed during prepare only) */
    int32_t n_tokens, n_seqs, n_sample, max_ctx;
    int32_t *tokens, *pos, *tok_seq, *seq_start, *bt_start, *block_table, *sample_rows;
    bk_sample_t *sample;
    size_t cap_tok, cap_seq, cap_bt, cap_sample;

    float *scratch;             /* attention scores / sampler buffers, per thread */
    size_t scratch_per_thread;
    void *xq;                   /* a product's quantised activations (cpu_qdot.h), shared */
    size_t xq_bytes;

    float *inv_freq;            /* RoPE frequencies for (rope_hd, rope_theta) */
    int32_t rope_hd;
    float rope_theta;
} cpu_t;

#define CPU(b) ((cpu_t *)(b)->impl)

/* ---- memory ---------------------------------------------------------------------------- */

static int cpu_mem_info(backend_t *b, size_t *free_bytes, size_t *total_bytes) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) {
        long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
        long psz = sysconf(_SC_PAGESIZE);
        if (pages <= 0 || psz <= 0) return bk_fail(b, "cpu: cannot read the memory size");
        *total_bytes = (size_t)pages * (size_t)psz;
        *free_bytes = (size_t)(avail > 0 ? avail : 0) * (size_t)psz;
        return 0;
    }
    char line[256];
    unsigned long long total = 0, avail = 0, v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &v) == 1) total = v * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) avail = v * 1024;
    }
    fclose(f);
    if (!total) return bk_fail(b, "cpu: /proc/meminfo has no MemTotal");
    *total_bytes = (size_t)total;
    *free_bytes = (size_t)avail;
    return 0;
}

static size_t cpu_elem_size(backend_t *b, bk_kind_t kind) {
    (void)b;
    (void)kind;
    return 4;   /* fp32 weights and activations, int32 metadata */
}

static void *cpu_alloc(backend_t *b, bk_kind_t kind, size_t n) {
    cpu_t *c = CPU(b);
    if (n == 0) n = 1;
    if (n > SIZE_MAX / 8) {
        bk_fail(b, "cpu: allocation of %zu elements is too large", n);
        return NULL;
    }
    size_t bytes = (n * cpu_elem_size(b, kind) + 63) & ~(size_t)63, align = 64;
    /* Large buffers (weights, the KV pool) on transparent huge pages: with 4 KB pages a
     * decode step's stream through 0.5 GB of weights takes a TLB miss every 64 lines, and
     * in a VM each page walk is long (measured: batch 1 +35%, batch-32 products +27%). */
    if (bytes >= HUGE_PAGE) {
        align = HUGE_PAGE;
        bytes = (bytes + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
    }
    if (c->n_allocs == c->cap_allocs) {
        size_t cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
        void **a = realloc(c->allocs, cap * sizeof *a);
        if (!a) {
            bk_fail(b, "cpu: out of memory");
            return NULL;
        }
        c->allocs = a;
        c->cap_allocs = cap;
    }
    void *p = aligned_alloc(align, bytes);
    if (!p) {
        bk_fail(b, "cpu: cannot allocate %.1f MB", bytes / 1e6);
        return NULL;
    }
    if (align == HUGE_PAGE) (void)madvise(p, bytes, MADV_HUGEPAGE);   /* a hint: may fail */
    c->allocs[c->n_allocs++] = p;
    return p;
}

static void cpu_release(backend_t *b, void *p) {
    cpu_t *c = CPU(b);
    if (!p) return;
    for (size_t i = c->n_allocs; i-- > 0;) {
        if (c->allocs[i] == p) {
            c->allocs[i] = c->allocs[--c->n_allocs];
            free(p);
            return;
        }
    }
}

static int cpu_upload_weight(backend_t *b, void *dst, const float *src, size_t n) {
    (void)b;
    memcpy(dst, src, n * sizeof(float));
    return 0;
}

static size_t cpu_matrix_elems(backend_t *b, int32_t rows, int32_t cols) {
    (void)b;
    return cgemm_packed_elems(rows, cols);
}

static int cpu_upload_matrix(backend_t *b, void *dst, const float *src, int32_t rows,
                             int32_t cols) {
    if (rows <= 0 || cols <= 0)
        return bk_fail(b, "cpu: upload_matrix: bad shape %d x %d", rows, cols);
    cgemm_pack(dst, src, rows, cols);
    return 0;
}

static size_t cpu_qmatrix_elems(backend_t *b, uint32_t type, int32_t rows, int32_t cols) {
    (void)b;
    return cqg_elems(type, rows, cols);
}

static int cpu_upload_qmatrix(backend_t *b, void *dst, const void *src, uint32_t type,
                              int32_t rows, int32_t cols) {
    if (!cqg_elems(type, rows, cols))
        return bk_fail(b, "cpu: upload_qmatrix: a %d x %d matrix of type %s is not supported",
                       rows, cols, dq_type_name(type));
    cqg_pack(dst, src, type, rows, cols);
    return 0;
}

typedef struct {
    float *p;
    uint64_t key, tensor;
} gen_job_t;

static void gen_range(void *ctx, int64_t lo, int64_t hi, int tid) {
    (void)tid;
    gen_job_t *j = ctx;
    for (int64_t i = lo; i < hi; i++) j->p[i] = dummy_weight_k(j->key, j->tensor, (uint64_t)i);
}

/* Generated on the host a matrix at a time and packed like an upload: the peak is one
 * matrix, never the model. */
static int cpu_gen_matrix(backend_t *b, void *dst, int32_t rows, int32_t cols, uint64_t seed,
                          uint64_t tensor) {
    if (rows <= 0 || cols <= 0)
        return bk_fail(b, "cpu: gen_matrix: bad shape %d x %d", rows, cols);
    size_t n = (size_t)rows * (size_t)cols;
    float *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return bk_fail(b, "cpu: out of memory for a %d x %d matrix", rows, cols);
    gen_job_t j = {tmp, dummy_key(seed), tensor};
    cpool_run(CPU(b)->pool, (int64_t)n, GRAIN_ELEMS, gen_range, &j);
    cgemm_pack(dst, tmp, rows, cols);
    free(tmp);
    return 0;
}

static int cpu_reserve_weights(backend_t *b, size_t n) {
    (void)b;
    (void)n;   /* one allocation per tensor: huge pages already keep them TLB-friendly */
    return 0;
}

static int cpu_upload(backend_t *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    memcpy(dst, src, bytes);
    return 0;
}

static int cpu_download_f32(backend_t *b, float *dst, const void *src, bk_kind_t kind,
                            size_t n) {
    (void)b;
    (void)kind;
    memcpy(dst, src, n * sizeof(float));
    return 0;
}

static size_t kv_elem_bytes(const cpu_t *c) { return c->kv_f16 ? 2 : sizeof(float); }

static size_t cpu_kv_block_bytes(backend_t *b, const bk_kv_shape_t *s) {
    return (size_t)s->n_layers * 2 * (size_t)s->block_size * (size_t)s->n_kv_heads *
           (size_t)s->head_dim * kv_elem_bytes(CPU(b));
}

static int cpu_kv_init(backend_t *b, const bk_kv_shape_t *s) {
    cpu_t *c = CPU(b);
    if (bk_check_kv_shape(b, s)) return -1;
    /* K and V: an even count of elements, so whole floats with halves too */
    size_t bytes = cpu_kv_block_bytes(b, s) * (size_t)s->n_blocks;
    cpu_release(b, c->kv);
    c->kv = cpu_alloc(b, BK_F32, bytes / sizeof(float));
    if (!c->kv) return -1;
    /* Zeroed so that timing runs that only set positions read finite numbers, and so the
     * pages are touched now rather than inside the first timed step. */
    memset(c->kv, 0, bytes);
    c->kvs = *s;
    c->kv_layer = bytes / kv_elem_bytes(c) / (size_t)s->n_layers;
    return 0;
}

/* ---- the step's batch -------------------------------------------------------------------- */

/* Grows each array of a group to n elements; the group's capacity moves only when all did. */
static int grow_group(void **arrs[], int k, size_t elem, size_t *cap, size_t n) {
    if (n <= *cap) return 0;
    for (int i = 0; i < k; i++) {
        void *q = realloc(*arrs[i], n * elem);
        if (!q) return -1;
        *arrs[i] = q;
    }
    *cap = n;
    return 0;
}

static int cpu_prepare(backend_t *b, const bk_batch_t *bt) {
    cpu_t *c = CPU(b);
    size_t nt = (size_t)bt->n_tokens, ns = (size_t)bt->n_seqs;
    size_t nb = (size_t)bt->bt_start[bt->n_seqs], nsm = (size_t)bt->n_sample;
    void **tok[] = {(void **)&c->tokens, (void **)&c->pos, (void **)&c->tok_seq};
    void **seq[] = {(void **)&c->seq_start, (void **)&c->bt_start};
    void **tab[] = {(void **)&c->block_table};
    void **smp[] = {(void **)&c->sample_rows};
    size_t smp_cap = c->cap_sample;
    if (grow_group(tok, 3, sizeof(int32_t), &c->cap_tok, nt) ||
        grow_group(seq, 2, sizeof(int32_t), &c->cap_seq, ns + 1) ||
        grow_group(tab, 1, sizeof(int32_t), &c->cap_bt, nb) ||
        grow_group(smp, 1, sizeof(int32_t), &smp_cap, nsm))
        return bk_fail(b, "cpu: out of memory preparing a batch of %zu tokens", nt);
    if (nsm > c->cap_sample) {
        bk_sample_t *sp = realloc(c->sample, nsm * sizeof *sp);
        if (!sp) return bk_fail(b, "cpu: out of memory preparing a batch of %zu tokens", nt);
        c->sample = sp;
        c->cap_sample = nsm;
    }
    memcpy(c->tokens, bt->tokens, nt * sizeof(int32_t));
    memcpy(c->pos, bt->pos, nt * sizeof(int32_t));
    memcpy(c->seq_start, bt->seq_start, (ns + 1) * sizeof(int32_t));
    memcpy(c->bt_start, bt->bt_start, (ns + 1) * sizeof(int32_t));
    if (nb) memcpy(c->block_table, bt->block_table, nb * sizeof(int32_t));
    if (nsm) {
        memcpy(c->sample_rows, bt->sample_rows, nsm * sizeof(int32_t));
        memcpy(c->sample, bt->sample, nsm * sizeof(bk_sample_t));
    }
    c->max_ctx = 1;
    for (size_t s = 0; s < ns; s++)
        for (int32_t i = bt->seq_start[s]; i < bt->seq_start[s + 1]; i++) {
            c->tok_seq[i] = (int32_t)s;
            if (bt->pos[i] + 1 > c->max_ctx) c->max_ctx = bt->pos[i] + 1;
        }
    c->n_tokens = bt->n_tokens;
    c->n_seqs = bt->n_seqs;
    c->n_sample = bt->n_sample;
    return 0;
}

/* Per-thread scratch of at least `floats` floats. */
static float *scratch(backend_t *b, size_t floats) {
    cpu_t *c = CPU(b);
    if (floats > c->scratch_per_thread) {
        free(c->scratch);
        c->scratch = aligned_alloc(64, ((floats * sizeof(float) + 63) & ~(size_t)63) *
                                           (size_t)c->n_threads);
        c->scratch_per_thread = c->scratch ? (floats + 15) & ~(size_t)15 : 0;
        if (!c->scratch) bk_fail(b, "cpu: out of memory for %zu floats of scratch", floats);
    }
    return c->scratch;
}

/* ---- ops ----------------------------------------------------------------------------------- */

static int cpu_embed(backend_t *b, void *x, const void *table, int32_t dim) {
    cpu_t *c = CPU(b);
    for (int32_t i = 0; i < c->n_tokens; i++)
        cgemm_unpack_row((float *)x + (size_t)i * dim, table, dim, c->tokens[i]);
    return 0;
}

static int cpu_gather_rows(backend_t *b, void *out, const void *x, bk_kind_t kind,
                           int32_t dim) {
    cpu_t *c = CPU(b);
    (void)kind;   /* every kind is 4 bytes here */
    for (int32_t j = 0; j < c->n_sample; j++)
        memmove((float *)out + (size_t)j * dim,
                (const float *)x + (size_t)c->sample_rows[j] * dim, (size_t)dim * sizeof(float));
    return 0;
}

static int cpu_gather_idx(backend_t *b, void *out, const void *x, int32_t dim,
                          const int32_t *rows, int32_t n) {
    (void)b;
    for (int32_t i = 0; i < n; i++)
        memcpy((float *)out + (size_t)i * dim, (const float *)x + (size_t)rows[i] * dim,
               (size_t)dim * sizeof(float));
    return 0;
}

static int cpu_moe_combine(backend_t *b, void *out, const void *y, const void *base,
                           const int32_t *src, const float *w, int32_t n, int32_t k,
                           int32_t dim) {
    (void)b;
    for (int32_t t = 0; t < n; t++) {
        float *o = (float *)out + (size_t)t * dim;
        if (base) memcpy(o, (const float *)base + (size_t)t * dim, (size_t)dim * sizeof *o);
        else memset(o, 0, (size_t)dim * sizeof *o);
        for (int32_t j = 0; j < k; j++) {
            const float *r = (const float *)y + (size_t)src[(size_t)t * k + j] * dim;
            float wj = w[(size_t)t * k + j];
            for (int32_t i = 0; i < dim; i++) o[i] += wj * r[i];
        }
    }
    return 0;
}

typedef struct {
    cpu_t *c;
    float *y;
    const float *x;
    const void *w;
    uint32_t type;          /* DQ_F32: the packed fp32 layout; else a stored type */
    int32_t m, n, k;
    cqd_act_t act;          /* Q8_0 / Q4_0: x quantised */
    int level;              /* their kernels */
} mm_job_t;

static int int_dot(uint32_t type) { return type == DQ_Q8_0 || type == DQ_Q4_0; }

static void mm_panels(void *ctx, int64_t lo, int64_t hi, int tid) {
    mm_job_t *j = ctx;
    float *s = j->c->scratch + (size_t)tid * j->c->scratch_per_thread;
    if (j->type == DQ_F32)
        cgemm_panels(j->y, j->x, j->w, j->m, j->n, j->k, (int32_t)lo, (int32_t)hi, s);
    else if (int_dot(j->type))
        cqd_panels(j->y, &j->act, j->w, j->type, j->n, (int32_t)lo, (int32_t)hi, j->level);
    else
        cgemm_qpanels(j->y, j->x, j->w, j->type, j->m, j->n, j->k, (int32_t)lo, (int32_t)hi, s);
}

static void mm_quantize(void *ctx, int64_t lo, int64_t hi, int tid) {
    (void)tid;
    mm_job_t *j = ctx;
    cqd_quantize(&j->act, j->x, (int32_t)lo, (int32_t)hi, j->level);
}

/* Splits the panels over the pool; each thread streams its share of the weights once and
 * runs every row of x against it. Q8_0 and Q4_0 first quantise x per block (cpu_qdot.h),
 * once for all threads. */
static int matmul_typed(backend_t *b, void *y, const void *x, const void *w, uint32_t type,
                        int32_t m, int32_t n, int32_t k) {
    cpu_t *c = CPU(b);
    if (m <= 0 || n <= 0 || k <= 0)
        return bk_fail(b, "cpu: matmul: bad shape m %d n %d k %d", m, n, k);
    if (type != DQ_F32 && !cqg_elems(type, n, k))
        return bk_fail(b, "cpu: matmul: a %d x %d matrix of type %s is not supported", n, k,
                       dq_type_name(type));
    mm_job_t j = {c, y, x, w, type, m, n, k, {0}, 0};
    if (int_dot(type)) {
        size_t need = cqd_act_bytes(m, k);
        if (need > c->xq_bytes) {
            free(c->xq);
            c->xq_bytes = 0;
            if (!(c->xq = aligned_alloc(64, (need + 63) & ~(size_t)63)))
                return bk_fail(b, "cpu: out of memory for %zu bytes of quantised activations",
                               need);
            c->xq_bytes = need;
        }
        cqd_act_bind(&j.act, c->xq, m, k);
        j.level = cgemm_qdot_level();
        cpool_run(c->pool, m, GRAIN_ELEMS / k + 1, mm_quantize, &j);
    } else if (!scratch(b, type == DQ_F32 ? (size_t)m * k : cgemm_qscratch(m, k))) {
        return -1;
    }
    int64_t panels = (n + CGEMM_PANEL - 1) / CGEMM_PANEL;
    int64_t per_panel = (int64_t)CGEMM_PANEL * k * m;
    cpool_run(c->pool, panels, 4 * GRAIN_ELEMS / per_panel + 1, mm_panels, &j);
    return 0;
}

static int cpu_matmul(backend_t *b, void *y, bk_kind_t y_kind, const void *x, const void *w,
                      int32_t m, int32_t n, int32_t k) {
    (void)y_kind;   /* activations are fp32 already */
    return matmul_typed(b, y, x, w, DQ_F32, m, n, k);
}

static int cpu_matmul_q(backend_t *b, void *y, bk_kind_t y_kind, const void *x, const void *w,
                        uint32_t type, int32_t m, int32_t n, int32_t k) {
    (void)y_kind;
    return matmul_typed(b, y, x, w, type, m, n, k);
}

typedef struct {
    float *out, *x;
    const float *res, *w;
    int32_t dim;
    float eps;
} norm_job_t;

static void norm_rows(void *ctx, int64_t lo, int64_t hi, int tid) {
    (void)tid;
    norm_job_t *j = ctx;
    for (int64_t r = lo; r < hi; r++) {
        float *x = j->x + r * j->dim, *out = j->out + r * j->dim;
        cgemm_rmsnorm(out, x, j->res ? j->res + r * j->dim : NULL, j->w, j->dim, j->eps);
    }
}

static int cpu_rmsnorm(backend_t *b, void *out, void *x, const void *residual, const void *w,
                       int32_t m, int32_t dim, float eps) {
    norm_job_t j = {out, x, residual, w, dim, eps};
    cpool_run(CPU(b)->pool, m, GRAIN_ELEMS / 4 / (dim > 0 ? dim : 1) + 1, norm_rows, &j);
    return 0;
}

/* One head's slot: a block holds each head's slots contiguously, so attention over a
 * block streams block_size x head_dim elements in order. */
static void *kv_at(cpu_t *c, int32_t layer, int32_t block, int32_t which, int32_t head,
                   int32_t slot) {
    const bk_kv_shape_t *s = &c->kvs;
    return (char *)c->kv +
           ((size_t)layer * c->kv_layer +
            ((((size_t)block * 2 + which) * s->n_kv_heads + head) * s->block_size + slot) *
                s->head_dim) * kv_elem_bytes(c);
}

int backend_cpu_kv_read(backend_t *b, int32_t layer, int32_t block, int32_t which,
                        int32_t head, int32_t slot, float *out) {
    cpu_t *c = CPU(b);
    if (!c->kv || layer < 0 || layer >= c->kvs.n_layers || block < 0 ||
        block >= c->kvs.n_blocks || which < 0 || which > 1 || head < 0 ||
        head >= c->kvs.n_kv_heads || slot < 0 || slot >= c->kvs.block_size)
        return -1;
    const void *row = kv_at(c, layer, block, which, head, slot);
    for (int32_t d = 0; d < c->kvs.head_dim; d++)
        out[d] = c->kv_f16 ? dq_f16_to_f32(((const uint16_t *)row)[d]) : ((const float *)row)[d];
    return 0;
}

/* Stores one K or V vector of hd elements in its slot, in the pool's element type. */
static void kv_store(cpu_t *c, void *slot, const float *src, int32_t hd) {
    if (c->kv_f16) cgemm_to_f16(slot, src, hd);
    else memcpy(slot, src, (size_t)hd * sizeof(float));
}

static int check_kv(backend_t *b, const char *op, int32_t layer, int32_t n_heads,
                    int32_t n_kv_heads, int32_t head_dim) {
    cpu_t *c = CPU(b);
    return bk_check_kv_use(b, c->kv ? &c->kvs : NULL, op, layer, n_heads, n_kv_heads, head_dim);
}

#define ROPE_MAX_PAIRS 512   /* head_dim up to 1024 keeps its angles on the stack */

static void rotate(float *v, const float *cs, const float *sn, int32_t pairs) {
    for (int32_t i = 0; i < pairs; i++) {
        float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * cs[i] - x1 * sn[i];
        v[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
    }
}

typedef struct {
    cpu_t *c;
    float *q, *k;
    const float *v;
    int32_t layer, n_heads, n_kv, hd;
} rope_job_t;

/* Per token: the angles once, every head rotated with them, K and V stored in the slot. */
static void rope_tokens(void *ctx, int64_t lo, int64_t hi, int tid) {
    (void)tid;
    rope_job_t *j = ctx;
    cpu_t *c = j->c;
    int32_t hd = j->hd, pairs = hd / 2;
    size_t qd = (size_t)j->n_heads * hd, kvd = (size_t)j->n_kv * hd;
    float cs[ROPE_MAX_PAIRS], sn[ROPE_MAX_PAIRS];
    for (int64_t i = lo; i < hi; i++) {
        int32_t p = c->pos[i], s = c->tok_seq[i];
        for (int32_t f = 0; f < pairs; f++) {
            double a = (double)p * c->inv_freq[f];
            cs[f] = (float)cos(a);
            sn[f] = (float)sin(a);
        }
        for (int32_t h = 0; h < j->n_heads; h++) rotate(j->q + i * qd + (size_t)h * hd, cs, sn, pairs);
        float *ki = j->k + i * kvd;
        for (int32_t h = 0; h < j->n_kv; h++) rotate(ki + (size_t)h * hd, cs, sn, pairs);
        int32_t blk = c->block_table[c->bt_start[s] + p / c->kvs.block_size];
        int32_t slot = p % c->kvs.block_size;
        for (int32_t h = 0; h < j->n_kv; h++) {
            kv_store(c, kv_at(c, j->layer, blk, 0, h, slot), ki + (size_t)h * hd, hd);
            kv_store(c, kv_at(c, j->layer, blk, 1, h, slot), j->v + i * kvd + (size_t)h * hd, hd);
        }
    }
}

static int cpu_rope_kv(backend_t *b, void *q, void *k, const void *v, int32_t layer,
                       int32_t n_heads, int32_t n_kv_heads, int32_t head_dim, float theta) {
    cpu_t *c = CPU(b);
    if (check_kv(b, "rope_kv", layer, n_heads, n_kv_heads, head_dim)) return -1;
    if (head_dim / 2 > ROPE_MAX_PAIRS)
        return bk_fail(b, "cpu: rope_kv: head_dim %d is above the supported %d", head_dim,
                       2 * ROPE_MAX_PAIRS);
    if (c->rope_hd != head_dim || c->rope_theta != theta) {
        float *f = realloc(c->inv_freq, (size_t)head_dim / 2 * sizeof *f);
        if (!f) return bk_fail(b, "cpu: out of memory");
        bk_rope_inv_freq(f, head_dim, theta);
        c->inv_freq = f;
        c->rope_hd = head_dim;
        c->rope_theta = theta;
    }
    rope_job_t j = {c, q, k, v, layer, n_heads, n_kv_heads, head_dim};
    int64_t per_token = (int64_t)(n_heads + 2 * n_kv_heads) * head_dim;
    cpool_run(c->pool, c->n_tokens, GRAIN_ELEMS / 4 / per_token + 1, rope_tokens, &j);
    return 0;
}

typedef struct {
    cpu_t *c;
    float *out;
    const float *q;
    int32_t layer, n_heads, n_kv, hd, group;
    size_t ctx_stride;   /* scratch floats per query head */
    const int64_t *cut;  /* part p of the pool's job is items [cut[p], cut[p + 1]) */
} attn_job_t;

/* Items are (token, kv head): the group's query heads share each read of K and V. The
 * pool runs parts [lo, hi) of the job, each a contiguous run of items (cpu_attention). */
static void attn_items(void *ctx, int64_t lo, int64_t hi, int tid) {
    attn_job_t *j = ctx;
    cpu_t *c = j->c;
    int32_t hd = j->hd, g = j->group, bs = c->kvs.block_size;
    float *sc = c->scratch + (size_t)tid * c->scratch_per_thread;
    const void **krow = (const void **)(sc + (size_t)g * j->ctx_stride);
    const void **vrow = krow + j->ctx_stride;
    size_t row_bytes = (size_t)hd * kv_elem_bytes(c);
    float scale = 1.0f / sqrtf((float)hd);
    size_t qd = (size_t)j->n_heads * hd;
    for (int64_t it = j->cut[lo]; it < j->cut[hi]; it++) {
        int32_t i = (int32_t)(it / j->n_kv), h = (int32_t)(it % j->n_kv);
        int32_t s = c->tok_seq[i], n = c->pos[i] + 1;
        const int32_t *table = c->block_table + c->bt_start[s];
        /* a block's slots are hd elements apart: one kv_at per block, no division per
         * position (two divisions by the run-time block size per position had cost
         * about as much as the attention's arithmetic at batch 1) */
        for (int32_t t0 = 0; t0 < n; t0 += bs) {
            const char *kb = kv_at(c, j->layer, table[t0 / bs], 0, h, 0);
            const char *vb = kv_at(c, j->layer, table[t0 / bs], 1, h, 0);
            for (int32_t u = 0; u < bs && t0 + u < n; u++) {
                krow[t0 + u] = kb + (size_t)u * row_bytes;
                vrow[t0 + u] = vb + (size_t)u * row_bytes;
            }
        }
        size_t off = i * qd + (size_t)h * g * hd;
        cgemm_attn(j->out + off, j->q + off, g, hd, krow, vrow, c->kv_f16, n, scale, sc);
    }
}

static int cpu_attention(backend_t *b, void *out, const void *q, int32_t layer,
                         int32_t n_heads, int32_t n_kv_heads, int32_t head_dim) {
    cpu_t *c = CPU(b);
    if (check_kv(b, "attention", layer, n_heads, n_kv_heads, head_dim)) return -1;
    int32_t g = n_heads / n_kv_heads;
    size_t stride = ((size_t)c->max_ctx + 15) & ~(size_t)15;
    /* scores [g][stride], then K and V row pointers [stride] each */
    if (!scratch(b, stride * ((size_t)g + 2 * sizeof(float *) / sizeof(float)))) return -1;
    /* An item costs as much as its context, so a split by count is not a split by work:
     * in a mixed step the decodes (long contexts) come first and the prompt's tokens
     * (short ones) after, and equal counts gave one thread every decode, twice the time
     * of a balanced split. The items are cut instead into one contiguous part per thread
     * of equal work (a part keeps its tokens in order, so a prompt's tokens share their
     * K/V in cache), and the pool runs the parts. A position costs each of the g query
     * heads its QK and PV multiply-adds (2 hd) plus an exp and the softmax's bookkeeping,
     * worth about 32 more, and its K and V row pointers (16); counting multiply-adds alone
     * undercounted small heads 7-fold (stories260K: hd 8, g 2) and left decodes at a few
     * hundred positions on one thread. The op stays on the caller below GRAIN_ELEMS of
     * work per thread. Results do not depend on the cut: each item is computed alone. */
    int64_t n_items = (int64_t)c->n_tokens * n_kv_heads;
    int64_t per_pos = (int64_t)g * (2 * head_dim + 32) + 16, work = 0;
    for (int32_t i = 0; i < c->n_tokens; i++) work += (int64_t)c->pos[i] + 1;
    work *= n_kv_heads;
    int64_t fit = work / (GRAIN_ELEMS / per_pos + 1);
    int parts = cpool_threads(c->pool);
    if (fit < parts) parts = (int)fit;
    if (parts > n_items) parts = (int)n_items;
    if (parts > ATTN_MAX_PARTS) parts = ATTN_MAX_PARTS;
    if (parts < 1) parts = 1;
    int64_t cut[ATTN_MAX_PARTS + 1], acc = 0, it = 0;
    cut[0] = 0;
    for (int p = 1; p < parts; p++) {
        int64_t want = work * p / parts;
        while (it < n_items && acc < want) acc += (int64_t)c->pos[it++ / n_kv_heads] + 1;
        cut[p] = it;
    }
    cut[parts] = n_items;
    attn_job_t j = {c, out, q, layer, n_heads, n_kv_heads, head_dim, g, stride, cut};
    cpool_run(c->pool, parts, 1, attn_items, &j);
    return 0;
}

typedef struct {
    float *out;
    const float *a, *b;
} ew_job_t;

static void silu_range(void *ctx, int64_t lo, int64_t hi, int tid) {
    (void)tid;
    ew_job_t *j = ctx;
    cgemm_silu_mul(j->out + lo, j->a + lo, j->b + lo, (size_t)(hi - lo));
}

static void add_range(void *ctx, int64_t lo, int64_t hi, int tid) {
    (void)tid;
    ew_job_t *j = ctx;
    for (int64_t i = lo; i < hi; i++) j->out[i] += j->a[i];
}

static int cpu_silu_mul(backend_t *b, void *out, const void *gate, const void *up, size_t n) {
    ew_job_t j = {out, gate, up};
    cpool_run(CPU(b)->pool, (int64_t)n, GRAIN_ELEMS / 4, silu_range, &j);
    return 0;
}

static int cpu_add(backend_t *b, void *x, const void *y, size_t n) {
    ew_job_t j = {x, y, NULL};
    cpool_run(CPU(b)->pool, (int64_t)n, GRAIN_ELEMS, add_range, &j);
    return 0;
}

typedef struct {
    cpu_t *c;
    int32_t *ids;
    const float *logits;
    int32_t vocab;
} sample_job_t;

static void sample_rows(void *ctx, int64_t lo, int64_t hi, int tid) {
    sample_job_t *j = ctx;
    float *probs = j->c->scratch + (size_t)tid * j->c->scratch_per_thread;
    int32_t *idx = (int32_t *)(probs + j->vocab);
    for (int64_t r = lo; r < hi; r++) {
        const float *lg = j->logits + r * j->vocab;
        /* greedy: the reference's argmax, vectorised; random draws: the reference itself */
        j->ids[r] = j->c->sample[r].temperature > 0
                        ? sampler_pick(lg, j->vocab, &j->c->sample[r], probs, idx)
                        : cgemm_argmax(lg, j->vocab);
    }
}

static int cpu_sample(backend_t *b, int32_t *ids_host, const void *logits, bk_kind_t kind,
                      int32_t vocab) {
    cpu_t *c = CPU(b);
    (void)kind;
    if (!scratch(b, 2 * (size_t)vocab)) return -1;
    sample_job_t j = {c, ids_host, logits, vocab};
    int any_random = 0;
    for (int32_t r = 0; r < c->n_sample; r++) any_random |= c->sample[r].temperature > 0;
    /* a random draw sorts the vocabulary: worth a thread per row; an argmax per few rows */
    cpool_run(c->pool, c->n_sample, any_random ? 1 : GRAIN_ELEMS * 4 / vocab + 1, sample_rows, &j);
    return 0;
}

static void cpu_keep_warm(backend_t *b, int on) { cpool_set_spin(CPU(b)->pool, on); }

static int cpu_sync(backend_t *b) {
    (void)b;
    return 0;
}

static int cpu_roofs(backend_t *b, int reps, double *mem_bw, double *gemm_flops) {
    char err[256];
    *mem_bw = roofs_mem_read_bw(0, CPU(b)->n_threads, reps, err, sizeof err);
    if (*mem_bw < 0) return bk_fail(b, "cpu: read bandwidth: %s", err);
    *gemm_flops = roofs_sgemm_flops(0, reps, err, sizeof err);
    if (*gemm_flops < 0) return bk_fail(b, "cpu: sgemm rate: %s", err);
    return 0;
}

static void cpu_destroy(backend_t *b) {
    if (!b) return;
    cpu_t *c = CPU(b);
    if (c) {
        cpool_free(c->pool);
        for (size_t i = 0; i < c->n_allocs; i++) free(c->allocs[i]);
        free(c->allocs);
        free(c->tokens);
        free(c->pos);
        free(c->tok_seq);
        free(c->seq_start);
        free(c->bt_start);
        free(c->block_table);
        free(c->sample_rows);
        free(c->sample);
        free(c->scratch);
        free(c->xq);
        free(c->inv_freq);
        free(c);
    }
    free(b);
}

backend_t *backend_cpu_new(const bk_opts_t *opts, char *err, size_t errlen) {
    backend_t *b = calloc(1, sizeof *b);
    cpu_t *c = calloc(1, sizeof *c);
    if (!b || !c) {
        snprintf(err, errlen, "cpu backend: out of memory");
        goto fail;
    }
    b->impl = c;
    const char *kvt = opts && opts->kv_type ? opts->kv_type : "f32";
    if (strcmp(kvt, "f32") && strcmp(kvt, "f16")) {
        snprintf(err, errlen, "cpu backend: --kv-type '%s' is not f32 or f16", kvt);
        goto fail;
    }
    c->kv_f16 = !strcmp(kvt, "f16");
    int n = opts && opts->n_threads > 0 ? opts->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    c->n_threads = n > 0 ? n : 1;
    c->pool = cpool_new(c->n_threads);
    if (!c->pool) {
        snprintf(err, errlen, "cpu backend: cannot start %d threads", c->n_threads);
        goto fail;
    }
    b->name = "cpu";
    b->weight_type = "f32";
    b->mem_info = cpu_mem_info;
    b->elem_size = cpu_elem_size;
    b->alloc = cpu_alloc;
    b->release = cpu_release;
    b->reserve_weights = cpu_reserve_weights;
    b->upload_weight = cpu_upload_weight;
    b->matrix_row_align = CGEMM_PANEL;
    b->matrix_elems = cpu_matrix_elems;
    b->upload_matrix = cpu_upload_matrix;
    b->gen_matrix = cpu_gen_matrix;
    if (!opts || !opts->weights || strcmp(opts->weights, "f32") != 0) {
        b->qmatrix_elems = cpu_qmatrix_elems;
        b->upload_qmatrix = cpu_upload_qmatrix;
        b->matmul_q = cpu_matmul_q;
    }
    b->upload = cpu_upload;
    b->download_f32 = cpu_download_f32;
    b->kv_init = cpu_kv_init;
    b->kv_block_bytes = cpu_kv_block_bytes;
    b->prepare = cpu_prepare;
    b->embed = cpu_embed;
    b->matmul = cpu_matmul;
    b->rmsnorm = cpu_rmsnorm;
    b->rope_kv = cpu_rope_kv;
    b->attention = cpu_attention;
    b->silu_mul = cpu_silu_mul;
    b->add = cpu_add;
    b->gather_rows = cpu_gather_rows;
    b->gather_idx = cpu_gather_idx;
    b->moe_combine = cpu_moe_combine;
    b->sample = cpu_sample;
    b->sync = cpu_sync;
    b->roofs = cpu_roofs;
    b->keep_warm = cpu_keep_warm;
    b->destroy = cpu_destroy;
    return b;
fail:
    if (b && c) cpu_destroy(b);
    else {
        free(c);
        free(b);
    }
    return NULL;
}
