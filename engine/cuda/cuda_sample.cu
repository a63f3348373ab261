/* cuda_sample: the device sampler (cuda_kernels.h, "sampling"): one token id per row of
 * fp32 logits, the id engine/sampler.c (sampler_pick) draws from the same row and params.
 *
 * Semantics (the reference's): temperature <= 0 (or NaN) or vocab <= 1: argmax, lowest id
 * on ties. Otherwise: ids sorted by logit descending, ascending id on ties; the first
 * top_k kept; probs[j] = (float)exp(((double)logit - top) * (1 / T)) in that order (double,
 * rounded to float, as the reference); total = their sum (double); top_p < 1 keeps the
 * shortest prefix whose running sum reaches top_p * total and renormalises over it; the
 * draw is the first kept id whose running sum exceeds sampler_uniform(seed, idx) * total
 * (the last kept one if none does). Running sums are block-wide scans here, not the
 * reference's sequential loop: they may differ in the last bits (~1e-16 relative), which
 * changes a draw only if r falls that close to a boundary. CUDA's double exp is within 1
 * ulp, so a probability can differ from glibc's by one float ulp in a ~2^-29 case.
 *
 * Order keys: order_key maps a logit to an unsigned key ordered as the floats, with -0
 * canonicalised to +0 (the reference finds them equal and orders them by id) and NaN
 * below -inf (any deterministic rule would do: NaN rows never crash). The "composite"
 * (key << 32 | ~id) is unique per token: its max is the reference's argmax, its
 * descending order the reference's sorted order.
 *
 * Three paths, cheapest first:
 *  - greedy rows (and top_k = 1, greedy in the reference too, NaN aside): one block per
 *    row, a block-wide max of the composite over float4 loads.
 *  - candidates (select_kernel, one block per row): only a prefix of the sorted order can
 *    matter, and a prefix of a sorted order is the same whatever lies beyond it. The block
 *    finds the max, then puts each token in one of NBIN bins by d = (logit - top) / T
 *    (bin = floor(3 sqrt(-d)): fine near the top, the last bin holds d <= -106.8 where
 *    probs are exactly 0), counting in per-thread shared-memory histograms (no atomics:
 *    real logits crowd a few bins), and sums the probs (fixed tree: deterministic).
 *    choose_bin picks the fewest bins that surely hold the answer: with top_k (<= CAP),
 *    those whose cumulative count reaches top_k; without, those whose mass, bounded from
 *    below by total minus (count x the largest prob) of every other bin, reaches what the
 *    draw needs (top_p * total, or u * total) with a margin far above rounding. If they
 *    hold at most CAP tokens, the block gathers them into shared memory, sorts them
 *    (bitonic, unique composites) and finishes there.
 *  - sort (flat rows: huge temperature, equal logits, a draw deep in the tail, top_k >
 *    CAP, non-finite max): select_kernel flags such rows (a slot each from a device
 *    counter); the host reads the count back (one small copy and a wait: only the device
 *    knows which rows the candidates settled) and, only when some row is flagged, sorts
 *    the flagged rows with cub::DeviceSegmentedRadixSort (stable, so equal keys keep
 *    ascending id), in chunks of at most CHUNK_ELEMS keys, then one block per row finishes
 *    on the sorted arrays. So a step whose rows all settle allocates and launches no sort,
 *    and a step of greedy rows launches one kernel and waits for nothing.
 * TWIN_CUDA_SAMPLE_SORT=1 in the environment sends every sampled row down the sort path
 * (to test it, or to rule the candidate path out).
 *
 * Finishing (finish): up to three early-exit block scans in double over the sorted prefix
 * (the total when not known, the top-p cut, the draw), recomputing the probs rather than
 * storing them. Element j's running sum is carry + (warp prefix + in-warp prefix), and
 * the carry into the next tile is that same expression for the tile's last element, so a
 * total taken from a scan is bit-identical to its last running sum: r = u * total < total
 * (u <= 1 - 2^-53) then always falls inside, as in the reference. The in-tile sums depend
 * only on earlier elements, so a prefix scans the same as the whole.
 *
 * Scratch (ck_sampler_t, grown with cudaMalloc, never shrunk, freed by ck_sampler_free;
 * cudaFree synchronises with pending work before a buffer is replaced): the flag counter
 * (and its pinned host copy), per sampled row a slot; and, from the first flagged row on,
 * a chunk's segment offsets, two key and two id buffers of chunk x vocab for the sort's
 * DoubleBuffers (up to 512 MiB) and CUB's temp storage. All launches on the given stream.
 *
 * Without a GPU, tests/cuda_emu/test_sample.cpp runs these kernels under the host emulator
 * against sampler_pick, on both paths. */
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cub/device/device_segmented_radix_sort.cuh>

#include "engine/cuda/cuda_kernels.h"
#include "engine/sampler_uniform.h"

#define NT 512                /* threads per block, every kernel */
#define NWARP (NT / 32)
#define CAP 4096              /* candidates a block sorts in shared memory */
#define NBIN 32               /* bins of the candidate path (one per lane of a warp) */
#define BIN_SCALE 3.0f        /* bin = floor(BIN_SCALE * sqrt(-d)) */
#define D_ZERO (-110.0)       /* d below this: (float)exp(d) is 0 (exp(-103.98) rounds to 0) */
#define CHUNK_ELEMS (1 << 25) /* keys per sort chunk: 512 MiB of sort buffers at most */
#define MAX_PER_THREAD 60000  /* per-thread histogram counts are 16-bit */

static_assert((CAP & (CAP - 1)) == 0, "the bitonic sort wants a power of two");
static_assert(NBIN * NT * 2 <= CAP * 8, "the histograms live in the candidate buffer");

/* ---- pure functions (host and device: the self-check runs them on the host) ---------- */

__host__ __device__ static inline uint32_t f2u(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
#endif
}

__host__ __device__ static inline float u2f(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, 4);
    return x;
#endif
}

__host__ __device__ static inline uint32_t order_key(float x) {
    if (x != x) return 0;                        /* NaN: below -inf */
    const uint32_t b = x == 0.0f ? 0u : f2u(x); /* -0 -> +0 */
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* the logit of a key (key 0 -> a NaN; a canonicalised -0 comes back as +0) */
__host__ __device__ static inline float key_value(uint32_t k) {
    return u2f((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__host__ __device__ static inline uint64_t composite(uint32_t key, int32_t id) {
    return ((uint64_t)key << 32) | (uint32_t)~(uint32_t)id;
}
__host__ __device__ static inline uint32_t comp_key(uint64_t c) { return (uint32_t)(c >> 32); }
__host__ __device__ static inline int32_t comp_id(uint64_t c) { return (int32_t)~(uint32_t)c; }

/* rows that need more than an argmax; host and device must agree (ck_sample counts them) */
__host__ __device__ static inline int is_sampled(const bk_sample_t &p, int32_t vocab) {
    return p.temperature > 0 && vocab > 1 && p.top_k != 1;
}

/* the reference's exponent and probability: the same operations in the same order (no
 * multiply feeds an add, so no FMA contraction can change them) */
__host__ __device__ static inline double d_of(float x, float top, double inv_t) {
    return ((double)x - (double)top) * inv_t;
}
__host__ __device__ static inline double prob_d(double d) {
    return d < D_ZERO ? 0.0 : (double)(float)exp(d);
}
__host__ __device__ static inline double prob_of(float x, float top, double inv_t) {
    return prob_d(d_of(x, top, inv_t));
}

/* monotone in the logit (ties share a bin), so "bins <= B" is a prefix of the sorted
 * order; NaN and -inf land in the last bin */
__host__ __device__ static inline int bin_of(double d) {
    const float s = sqrtf((float)(-d)) * BIN_SCALE;
    return s < (float)(NBIN - 1) ? (int)s : NBIN - 1;
}

/* an upper bound of the probs in bin b: there -d >= (b / 3)^2 up to three float roundings
 * (< 4e-7 relative), and a prob is exp(d) within 1 ulp then rounded to float; the slacks
 * cover both */
__host__ __device__ static inline double bin_pmax(int b) {
    const double s = b / (double)BIN_SCALE;
    return exp(-s * s * (1 - 1e-6)) * (1 + 1e-6);
}

/* the mass the draw must find inside the candidates: the top-p cut, else r itself */
__host__ __device__ static inline double need_of(const bk_sample_t &p, double total) {
    return p.top_p < 1 ? p.top_p * total : sampler_uniform(p.seed, p.idx) * total;
}

/* The fewest bins (0..B) that surely hold the answer, or -1; *nc: the tokens in them. With
 * top_k, bins whose count reaches top_k (the sorted candidates then start with the top_k);
 * without, bins whose mass, at least total minus an upper bound of the other bins' mass,
 * exceeds need with a margin (1e-9 relative, 1e-12 of the total: the sums behind total and
 * the later scans differ by ~1e-13 at most). */
__host__ __device__ static inline int choose_bin(const int32_t *cnt, int use_k, int32_t k,
                                                 double total, double need, int32_t *nc) {
    int best = -1;
    if (use_k) {
        int32_t cum = 0;
        for (int b = 0; b < NBIN; b++) {
            cum += cnt[b];
            if (cum >= k) { best = b; break; }
        }
    } else {
        const double want = need * (1 + 1e-9) + total * 1e-12;
        double rest = 0;   /* upper bound of the mass in bins > b */
        for (int b = NBIN - 1; b >= 0; b--) {
            if (total - rest >= want) best = b;   /* false for a NaN total */
            rest += cnt[b] * bin_pmax(b);
        }
    }
    int32_t cum = 0;
    for (int b = 0; b <= best; b++) cum += cnt[b];
    *nc = cum;
    return best;
}

/* ---- block-wide building blocks (NT threads) ------------------------------------------ */

struct MaxOp {
    template <class V> __device__ V operator()(V a, V b) const { return a > b ? a : b; }
};
struct MinOp {
    template <class V> __device__ V operator()(V a, V b) const { return a < b ? a : b; }
};
struct SumOp {
    template <class V> __device__ V operator()(V a, V b) const { return a + b; }
};

/* Every thread gets the result; fixed association (butterfly, then warps in order), so a
 * double sum is deterministic. sh: NWARP entries, reusable on return. */
template <class V, class Op> __device__ static V block_reduce(V v, V *sh, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    v = sh[0];
    for (int w = 1; w < NWARP; w++) v = op(v, sh[w]);
    __syncthreads();
    return v;
}

/* Inclusive scan: thread t gets (prefix of the warps before its own) + (inclusive prefix in
 * its warp), each part grouped by positions only, never by later elements. Back-to-back
 * calls are safe: every read of wsum/wexc precedes a barrier the next call's writes follow. */
__device__ static double block_scan(double v, double *wsum, double *wexc) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        const double y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += y;
    }
    if (lane == 31) wsum[w] = v;
    __syncthreads();
    if (w == 0) {
        double s = lane < NWARP ? wsum[lane] : 0.0;
        for (int o = 1; o < 32; o <<= 1) {
            const double y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        const double e = __shfl_up_sync(0xffffffffu, s, 1);
        if (lane < NWARP) wexc[lane] = lane == 0 ? 0.0 : e;
    }
    __syncthreads();
    return wexc[w] + v;
}

/* f(x, j) on every logit of a row, each once, by some thread: a scalar head up to 16-byte
 * alignment, float4 loads, a scalar tail (rows of any vocab, pointers 4-byte aligned) */
template <class F> __device__ static inline void for_row(const float *__restrict__ p,
                                                         int32_t vocab, F &&f) {
    int32_t head = (int32_t)(((16u - ((uint32_t)(uintptr_t)p & 15u)) & 15u) >> 2);
    if (head > vocab) head = vocab;
    const int32_t nv = (vocab - head) >> 2, tail = head + 4 * nv, t = (int32_t)threadIdx.x;
    if (t < head) f(p[t], t);
    const float4 *v = reinterpret_cast<const float4 *>(p + head);
#pragma unroll 4
    for (int32_t i = t; i < nv; i += NT) {
        const float4 q = __ldg(v + i);
        const int32_t j = head + 4 * i;
        f(q.x, j);
        f(q.y, j + 1);
        f(q.z, j + 2);
        f(q.w, j + 3);
    }
    for (int32_t j = tail + t; j < vocab; j += NT) f(p[j], j);
}

/* the max composite of a row: its key is the top logit's, its id the reference's argmax */
__device__ static uint64_t row_max(const float *__restrict__ p, int32_t vocab, uint64_t *sh) {
    uint64_t best = 0;   /* below every token's composite (~id is never 0) */
    for_row(p, vocab, [&](float x, int32_t j) {
        const uint64_t c = composite(order_key(x), j);
        best = c > best ? c : best;
    });
    return block_reduce(best, sh, MaxOp());
}

/* ---- finishing a sorted prefix ---------------------------------------------------------- */

struct ScanShared {
    double wsum[NWARP], wexc[NWARP];
    double run[NT];   /* this tile's running sums */
    int32_t found;
};

struct CandAcc {      /* sorted composites in shared memory */
    const uint64_t *c;
    __device__ uint32_t key(int32_t j) const { return comp_key(c[j]); }
    __device__ int32_t id(int32_t j) const { return comp_id(c[j]); }
};
struct SortedAcc {    /* the sort path's sorted keys and ids */
    const uint32_t *k;
    const int32_t *v;
    __device__ uint32_t key(int32_t j) const { return k[j]; }
    __device__ int32_t id(int32_t j) const { return v[j]; }
};

enum { FIND_NONE, FIND_REACH, FIND_EXCEED };

/* Running sums I_j over elements 0..n-1 in tiles of NT. Returns the first j with
 * !(I_j < thr) (REACH) or thr < I_j (EXCEED), -1 if none (or NONE); *at = I_j there, else
 * I_{n-1}. Block-uniform result; stops after the tile that holds the answer. */
template <class Acc>
__device__ static int32_t scan_find(const Acc &a, int32_t n, float top, double inv_t, int kind,
                                   double thr, ScanShared &sh, double *at) {
    const int32_t t = (int32_t)threadIdx.x;
    if (t == 0) sh.found = INT_MAX;   /* read by others only after the barriers below */
    double carry = 0;
    int32_t found = -1;
    for (int32_t base = 0; base < n; base += NT) {
        const int32_t j = base + t;
        const double pj = j < n ? prob_of(key_value(a.key(j)), top, inv_t) : 0.0;
        const double run = carry + block_scan(pj, sh.wsum, sh.wexc);
        sh.run[t] = run;
        const bool hit = kind == FIND_REACH ? !(run < thr) : kind == FIND_EXCEED && thr < run;
        if (j < n && hit) atomicMin(&sh.found, j);
        __syncthreads();
        const int32_t f = sh.found, last = n - 1 - base < NT - 1 ? n - 1 - base : NT - 1;
        if (f != INT_MAX) found = f;
        /* the carry is the tile's last running sum itself, not a separate total */
        carry = sh.run[found >= 0 ? found - base : last];
        __syncthreads();
        if (found >= 0) break;
    }
    *at = carry;
    return found;
}

/* The reference's filters and draw over the first n sorted tokens (n >= 1). total: their
 * sum when the caller has it (the candidate path without top_k), else scanned here. */
template <class Acc>
__device__ static int32_t finish(const Acc &a, int32_t n, bool have_total, double total,
                                 const bk_sample_t &p, float top, double inv_t, ScanShared &sh) {
    double at;
    if (!have_total) {
        scan_find(a, n, top, inv_t, FIND_NONE, 0.0, sh, &at);
        total = at;
    }
    int32_t keep = n;
    double kept = total;
    if (p.top_p < 1) {
        const double want = p.top_p * total;
        if (!(0.0 < want)) {   /* the reference keeps none, then one (NaN included) */
            keep = 1;
            kept = prob_of(key_value(a.key(0)), top, inv_t);   /* = I_0 exactly */
        } else {
            const int32_t j = scan_find(a, n, top, inv_t, FIND_REACH, want, sh, &at);
            keep = j >= 0 ? j + 1 : n;
            kept = at;
        }
    }
    const double r = sampler_uniform(p.seed, p.idx) * kept;
    const int32_t j = scan_find(a, keep, top, inv_t, FIND_EXCEED, r, sh, &at);
    return a.id(j >= 0 ? j : keep - 1);
}

/* ---- kernels ---------------------------------------------------------------------------- */

__global__ void __launch_bounds__(NT, 4) greedy_kernel(const float *__restrict__ logits,
                                                    int32_t vocab, int32_t *__restrict__ ids) {
    __shared__ uint64_t sh[NWARP];
    const uint64_t best = row_max(logits + (size_t)blockIdx.x * vocab, vocab, sh);
    if (threadIdx.x == 0) ids[blockIdx.x] = comp_id(best);
}

struct SelShared {
    union {
        uint64_t cand[CAP];               /* gathered, then sorted candidates */
        uint16_t hist[NBIN][NT];          /* per-thread bin counts, before */
    } u;
    ScanShared scan;
    uint64_t ru[NWARP];
    double rd[NWARP];
    int32_t cnt[NBIN];
    int32_t bin, nc, ctr;
};

/* One block per row. Greedy rows: the argmax. Sampled rows: the candidate path, or flag the
 * row for the sort path: slot_row[slot] = row, slot taken from *n_flag (zero on entry;
 * the order of the slots varies from run to run, and no row's draw depends on it). */
__global__ void __launch_bounds__(NT, 3)
select_kernel(const float *__restrict__ logits, int32_t vocab,
              const bk_sample_t *__restrict__ params, int32_t *__restrict__ ids, int32_t m,
              int32_t *__restrict__ slot_row, int32_t *__restrict__ n_flag, int force_sort) {
    __shared__ SelShared sh;
    const int32_t row = (int32_t)blockIdx.x, t = (int32_t)threadIdx.x;
    const float *lg = logits + (size_t)row * vocab;
    const uint64_t best = row_max(lg, vocab, sh.ru);
    const bk_sample_t p = params[row];
    if (!is_sampled(p, vocab)) {
        if (t == 0) ids[row] = comp_id(best);
        return;
    }
    const float top = key_value(comp_key(best));
    const double inv_t = 1.0 / p.temperature;
    const int use_k = p.top_k > 0 && p.top_k < vocab;
    bool to_sort = force_sort || !isfinite(top) || (use_k && p.top_k > CAP) ||
                   vocab / NT >= MAX_PER_THREAD;
    if (!to_sort) {
        for (int b = 0; b < NBIN; b++) sh.u.hist[b][t] = 0;
        double part = 0;
        for_row(lg, vocab, [&](float x, int32_t) {
            const double d = d_of(x, top, inv_t);
            sh.u.hist[bin_of(d)][t]++;   /* this thread's own counters: no race */
            if (!use_k) part += prob_d(d);
        });
        const double total = use_k ? 0.0 : block_reduce(part, sh.rd, SumOp());
        __syncthreads();
        for (int b = t >> 5; b < NBIN; b += NWARP) {   /* a warp per bin */
            int32_t c = 0;
            for (int i = t & 31; i < NT; i += 32) c += sh.u.hist[b][i];
            for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
            if ((t & 31) == 0) sh.cnt[b] = c;
        }
        __syncthreads();
        if (t == 0) {
            int32_t nc = 0;
            sh.bin = choose_bin(sh.cnt, use_k, p.top_k, total, need_of(p, total), &nc);
            sh.nc = nc;
            sh.ctr = 0;
        }
        __syncthreads();
        const int bin = sh.bin;
        const int32_t nc = sh.nc;
        if (bin >= 0 && nc <= CAP) {
            for_row(lg, vocab, [&](float x, int32_t j) {
                if (bin_of(d_of(x, top, inv_t)) <= bin) {
                    const int32_t at = atomicAdd(&sh.ctr, 1);
                    if (at < CAP) sh.u.cand[at] = composite(order_key(x), j);
                }
            });
            __syncthreads();
            const int32_t got = sh.ctr < CAP ? sh.ctr : CAP;   /* = nc: the same bins */
            int32_t np = 1;
            while (np < got) np <<= 1;
            for (int32_t i = got + t; i < np; i += NT) sh.u.cand[i] = 0;   /* sorts last */
            __syncthreads();
            for (int32_t k = 2; k <= np; k <<= 1)   /* bitonic, descending */
                for (int32_t s = k >> 1; s > 0; s >>= 1) {
                    for (int32_t i = t; i < np; i += NT) {
                        const int32_t l = i ^ s;   /* pair (i, l) is this thread's alone */
                        if (l > i) {
                            const uint64_t a = sh.u.cand[i], b = sh.u.cand[l];
                            if ((i & k) == 0 ? a < b : a > b) {
                                sh.u.cand[i] = b;
                                sh.u.cand[l] = a;
                            }
                        }
                    }
                    __syncthreads();
                }
            const CandAcc acc{sh.u.cand};
            const int32_t n = use_k ? (p.top_k < got ? p.top_k : got) : got;
            const int32_t id = finish(acc, n, !use_k, total, p, top, inv_t, sh.scan);
            if (t == 0) ids[row] = id;
            return;
        }
    }
    if (t == 0) {
        const int32_t slot = atomicAdd(n_flag, 1);
        if (slot < m) slot_row[slot] = row;
        else ids[row] = comp_id(best); /* params_host disagreed with params_dev: never in a
                                        * correct caller */
    }
}

/* keys and ids of the flagged rows of one chunk (blockIdx.y: the slot in the chunk, its
 * segment the vocab keys from blockIdx.y x vocab) */
__global__ void __launch_bounds__(NT)
prep_kernel(const float *__restrict__ logits, int32_t vocab, const int32_t *__restrict__ slot_row,
            uint32_t *__restrict__ keys, int32_t *__restrict__ vals) {
    const int32_t s = (int32_t)blockIdx.y;
    const float *lg = logits + (size_t)slot_row[s] * vocab;
    const size_t o = (size_t)s * vocab;
    for (int32_t j = (int32_t)(blockIdx.x * NT + threadIdx.x); j < vocab;
         j += (int32_t)(gridDim.x * NT)) {
        keys[o + j] = order_key(lg[j]);
        vals[o + j] = j;
    }
}

/* one block per slot of the chunk: the flagged rows' draws on their sorted keys */
__global__ void __launch_bounds__(NT)
sorted_kernel(const uint32_t *__restrict__ keys, const int32_t *__restrict__ vals,
              int32_t vocab, const int32_t *__restrict__ slot_row,
              const bk_sample_t *__restrict__ params, int32_t *__restrict__ ids) {
    __shared__ ScanShared sh;
    const int32_t s = (int32_t)blockIdx.x;
    const int32_t row = slot_row[s];
    const bk_sample_t p = params[row];
    const size_t o = (size_t)s * vocab;
    const SortedAcc acc{keys + o, vals + o};
    const int32_t n = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
    const int32_t id = finish(acc, n, false, 0.0, p, key_value(keys[o]), 1.0 / p.temperature, sh);
    if (threadIdx.x == 0) ids[row] = id;
}

/* the segment offsets of a chunk: off[i] = i x vocab (segment i is [off[i], off[i + 1])) */
__global__ void offsets_kernel(int32_t *__restrict__ off, int32_t n, int32_t vocab) {
    for (int32_t i = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x); i <= n;
         i += (int32_t)(gridDim.x * blockDim.x))
        off[i] = i * vocab;
}

/* ---- host -------------------------------------------------------------------------------- */

/* ---- host -------------------------------------------------------------------------------- */

struct ck_sampler {
    int32_t *slot_row;   /* [cap_slots]: the flagged rows, in slot order */
    size_t cap_slots;
    int32_t *n_flag;     /* device: rows flagged for the sort (select_kernel's counter) */
    int32_t *n_flag_host; /* pinned: its copy */
    int32_t *off;        /* [cap_off]: a chunk's segment offsets */
    size_t cap_off;
    uint32_t *keys[2];
    int32_t *vals[2];
    size_t cap_elems;    /* of each of keys[0..1], vals[0..1] */
    void *tmp;
    size_t cap_tmp;
    int force_sort;
};

extern "C" ck_sampler_t *ck_sampler_new(void) {
    ck_sampler_t *s = (ck_sampler_t *)calloc(1, sizeof *s);
    const char *e = getenv("TWIN_CUDA_SAMPLE_SORT");
    if (s) s->force_sort = e && atoi(e) != 0;
    return s;
}

static void release(void **p) {
    if (*p) cudaFree(*p);
    *p = NULL;
}

extern "C" void ck_sampler_free(ck_sampler_t *s) {
    if (!s) return;
    release((void **)&s->slot_row);
    release((void **)&s->n_flag);
    if (s->n_flag_host) cudaFreeHost(s->n_flag_host);
    release((void **)&s->off);
    for (int i = 0; i < 2; i++) {
        release((void **)&s->keys[i]);
        release((void **)&s->vals[i]);
    }
    release(&s->tmp);
    free(s);
}

static cudaError_t fail(cudaError_t e, char *err, size_t errlen, const char *what) {
    if (err && errlen) snprintf(err, errlen, "ck_sample: %s: %s", what, cudaGetErrorString(e));
    return e;
}

/* the flag counter and slot arrays for m sampled rows */
static cudaError_t reserve_slots(ck_sampler_t *s, size_t m) {
    cudaError_t e = cudaSuccess;
    if (!s->n_flag && (e = cudaMalloc((void **)&s->n_flag, sizeof(int32_t))) != cudaSuccess)
        return e;
    if (!s->n_flag_host &&
        (e = cudaMallocHost((void **)&s->n_flag_host, sizeof(int32_t))) != cudaSuccess)
        return e;
    if (m > s->cap_slots) {
        release((void **)&s->slot_row);
        s->cap_slots = 0;
        if ((e = cudaMalloc((void **)&s->slot_row, m * sizeof(int32_t))) != cudaSuccess)
            return e;
        s->cap_slots = m;
    }
    return e;
}

/* sort buffers of elems keys for chunks of `chunk` rows: allocated only when a row is
 * flagged, so a sampler that never needs the sort never holds them */
static cudaError_t reserve_sort(ck_sampler_t *s, size_t chunk, size_t elems) {
    cudaError_t e = cudaSuccess;
    if (chunk + 1 > s->cap_off) {
        release((void **)&s->off);
        s->cap_off = 0;
        if ((e = cudaMalloc((void **)&s->off, (chunk + 1) * sizeof(int32_t))) != cudaSuccess)
            return e;
        s->cap_off = chunk + 1;
    }
    if (elems > s->cap_elems) {
        s->cap_elems = 0;
        for (int i = 0; i < 2; i++) {
            release((void **)&s->keys[i]);
            release((void **)&s->vals[i]);
        }
        for (int i = 0; i < 2; i++)
            if ((e = cudaMalloc((void **)&s->keys[i], elems * sizeof(uint32_t))) != cudaSuccess ||
                (e = cudaMalloc((void **)&s->vals[i], elems * sizeof(int32_t))) != cudaSuccess)
                return e;
        s->cap_elems = elems;
    }
    return e;
}

extern "C" cudaError_t ck_sample(ck_sampler_t *s, cudaStream_t st, int32_t *ids,
                                 const float *logits, int32_t n, int32_t vocab,
                                 const bk_sample_t *params_dev, const bk_sample_t *params_host,
                                 char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (n == 0) return cudaSuccess;
    if (!s || !ids || !logits || !params_dev || !params_host || n < 0 || vocab < 1 ||
        ((uintptr_t)logits & 3))
        return fail(cudaErrorInvalidValue, err, errlen, "invalid arguments");
    cudaError_t e;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) m += is_sampled(params_host[i], vocab);
    if (m == 0) {   /* every row greedy: one launch, no scratch, no sync */
        greedy_kernel<<<n, NT, 0, st>>>(logits, vocab, ids);
        e = cudaGetLastError();
        return e == cudaSuccess ? e : fail(e, err, errlen, "greedy launch");
    }
    if ((e = reserve_slots(s, (size_t)m)) != cudaSuccess)
        return fail(e, err, errlen, "scratch allocation");
    if ((e = cudaMemsetAsync(s->n_flag, 0, sizeof(int32_t), st)) != cudaSuccess)
        return fail(e, err, errlen, "clearing the flag count");
    select_kernel<<<n, NT, 0, st>>>(logits, vocab, params_dev, ids, m, s->slot_row, s->n_flag,
                                    s->force_sort);
    if ((e = cudaGetLastError()) != cudaSuccess) return fail(e, err, errlen, "select launch");
    /* Which rows the candidate path could not settle is known only on the device: one
     * small copy and a wait (the step waits for its ids right after anyway), so that the
     * sort and its buffers (up to 512 MiB) are there only when a row needs them. */
    if ((e = cudaMemcpyAsync(s->n_flag_host, s->n_flag, sizeof(int32_t),
                             cudaMemcpyDeviceToHost, st)) != cudaSuccess ||
        (e = cudaStreamSynchronize(st)) != cudaSuccess)
        return fail(e, err, errlen, "reading the flag count");
    const int32_t f = *s->n_flag_host < m ? *s->n_flag_host : m;
    if (f <= 0) return cudaSuccess;
    /* the sort runs in chunks of whole rows: bounded scratch, int offsets for CUB */
    int32_t chunk = vocab >= CHUNK_ELEMS ? 1 : CHUNK_ELEMS / vocab;
    if (chunk > f) chunk = f;
    if (chunk > 65535) chunk = 65535;   /* prep_kernel's grid y */
    if ((e = reserve_sort(s, (size_t)chunk, (size_t)chunk * vocab)) != cudaSuccess)
        return fail(e, err, errlen, "sort buffer allocation");
    offsets_kernel<<<(chunk + NT) / NT, NT, 0, st>>>(s->off, chunk, vocab);
    if ((e = cudaGetLastError()) != cudaSuccess) return fail(e, err, errlen, "offsets launch");
    int gx = (int)(((int64_t)vocab + NT * 8 - 1) / (NT * 8));
    if (gx > 64) gx = 64;
    for (int32_t c0 = 0; c0 < f; c0 += chunk) {
        const int32_t cnt = f - c0 < chunk ? f - c0 : chunk;
        prep_kernel<<<dim3(gx, cnt), NT, 0, st>>>(logits, vocab, s->slot_row + c0, s->keys[0],
                                                  s->vals[0]);
        if ((e = cudaGetLastError()) != cudaSuccess) return fail(e, err, errlen, "prep launch");
        cub::DoubleBuffer<uint32_t> dk(s->keys[0], s->keys[1]);
        cub::DoubleBuffer<int32_t> dv(s->vals[0], s->vals[1]);
        const int items = cnt * vocab;   /* <= max(CHUNK_ELEMS, vocab): fits */
        size_t bytes = 0;
        e = cub::DeviceSegmentedRadixSort::SortPairsDescending(NULL, bytes, dk, dv, items, cnt,
                                                               s->off, s->off + 1, 0, 32, st);
        if (e != cudaSuccess) return fail(e, err, errlen, "sort sizing");
        if (bytes > s->cap_tmp) {
            release(&s->tmp);
            s->cap_tmp = 0;
            if ((e = cudaMalloc(&s->tmp, bytes)) != cudaSuccess)
                return fail(e, err, errlen, "sort scratch allocation");
            s->cap_tmp = bytes;
        }
        e = cub::DeviceSegmentedRadixSort::SortPairsDescending(s->tmp, bytes, dk, dv, items, cnt,
                                                               s->off, s->off + 1, 0, 32, st);
        if (e != cudaSuccess) return fail(e, err, errlen, "segmented sort");
        sorted_kernel<<<cnt, NT, 0, st>>>(dk.Current(), dv.Current(), vocab, s->slot_row + c0,
                                          params_dev, ids);
        if ((e = cudaGetLastError()) != cudaSuccess) return fail(e, err, errlen, "finish launch");
    }
    return cudaSuccess;
}
