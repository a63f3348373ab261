/* cuda_attention: attention over the paged KV pool (cuda_kernels.h, "attention").
 *
 * out[t][h] = softmax_j(q[t][h] . K[j] / sqrt(hd)) . V[j], j = 0..pos[t] of t's sequence,
 * K/V of kv head h / group read through the sequence's block table; the CPU reference is
 * engine/cpu/backend_cpu.c (cpu_attention). fp32 arithmetic; q, out and the pool are of
 * kv->dtype. Scores are kept in the exp2 domain (q scaled by log2(e) / sqrt(hd)), so every
 * exponential is one exp2f; the running max m and sum l of each online softmax are in
 * that domain too, the decode partials included.
 *
 * The planner (host, no CUDA call) splits a step's tokens in two lists:
 *  - decode: every token of a sequence with at most CK_DEC_MAX_Q new tokens (decodes and
 *    speculative verifies). One block per (token, kv head, context split); its warps walk
 *    the slice's positions in lane groups (a group of lp lanes holds one position's row,
 *    16 bytes a lane where head_dim allows), and each K/V row loaded serves every query
 *    head of the group (GQA). Flash-decoding: with few decode tokens the context is cut in
 *    dec_splits slices whose partials (unnormalised O, m, l) a combine kernel merges.
 *  - prefill: tiles of up to CK_PF_TILE_Q = 64 consecutive tokens of one sequence, one
 *    block per (query head, tile). The block walks the tile's causal context in tiles of
 *    64 positions staged in shared memory (each K/V row is read once per block and used by
 *    all 64 queries), with an online softmax per query row. bf16/f16: tensor cores
 *    (nvcuda::wmma 16x16x16, fp32 accumulate; P rounded to the element type, as flash
 *    attention does); fp32: a register-tiled FMA kernel. The wmma kernel double-buffers
 *    its K/V tiles (the next one copied by cp.async while this one is computed on) where
 *    the rows are 16-byte chunks and the second buffer costs no resident block (head dims
 *    128 and 256 on sm_90; TWIN_CUDA_PF_DB=0/1 forces either). Tile loops have a
 *    compile-time trip count. The query heads of one kv head are neighbouring blocks
 *    (blockIdx.x), so a K/V tile they share comes from L2 after the first; one block
 *    serving them all would need the group's Q and score tiles in shared memory (some
 *    140 KB at 4 heads of 128) or its accumulators in registers, and is not done.
 * Correct by construction rather than by layout knowledge: the wmma accumulators are only
 * touched element-wise through a map of their rows that the kernel reads at run time (a
 * fragment loaded from a matrix of row numbers), never through an assumed layout.
 *
 * Invariants the kernels rely on: positions of a sequence's tokens are consecutive, so a
 * tile's context ends at the last token's pos + 1; every decode split that starts before
 * a token's context end holds at least one position (so its m is finite); the first
 * context tile of a prefill holds position 0, visible to every query (so m is finite after
 * it). Head dims: even, 2..256 (cudaErrorInvalidValue otherwise); 16-byte accesses when
 * head_dim x element size is a multiple of 16 and the pool, q and out are 16-byte
 * aligned, element pairs otherwise. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine/cuda/cuda_elem.cuh"
#include "engine/cuda/cuda_kernels.h"

/* Flash-decoding split rule (ck_attn_plan). A decode block is one (token, kv head, context
 * split); the plan aims at DEC_BLOCKS_PER_SM blocks on every multiprocessor of the device
 * (b->n_sm, read from the device by the backend; the H200 has 132), so that each SM has a
 * second block to switch to while the first waits on memory. A split holds at least
 * DEC_MIN_ITERS iterations of the block's main loop (each iteration loads
 * dec_positions_per_iter positions), rounded up to whole KV blocks: shorter splits would
 * spend their time in setup and in the partials (hd + 2 floats per query head and split).
 * Llama-3-8B at batch 1 and 1k context: 8 kv heads x 32 splits of 32 positions, 256 blocks
 * of 2 iterations. dec_splits is 1 once the batch's blocks alone reach the target.
 * The context is first rounded up to DEC_CTX_BUCKET positions, so a run of decode steps
 * keeps one plan (the same grid and split length) while its contexts grow: that is what
 * lets a captured CUDA graph of the step be replayed (backend_cuda.cu); splits past a
 * token's context hold no position and exit at once. */
#define DEC_BLOCKS_PER_SM 2
#define DEC_MIN_ITERS 2
#define DEC_CTX_BUCKET 256
#define DEC_MAX_SPLITS 1024
#define DEC_WARPS 4
#define DEC_UNROLL 2 /* positions in flight per lane group */
#define PF_T 64      /* prefill: queries per tile and positions per context tile */
#define LOG2E 1.4426950408889634

static_assert(CK_PF_TILE_Q == PF_T, "the prefill kernels hold a whole tile");

/* ---- the plan (host) ------------------------------------------------------------------ */

/* Lanes that hold one position's row in the decode kernel: c chunks of a row, one chunk a
 * lane, in a power of two of lanes (<= 32) so that the score reduction is a butterfly. */
static int dec_lanes(int c) {
    int lp = 1;
    while (lp < c && lp < 32) lp <<= 1;
    return lp;
}

/* Positions one iteration of the decode kernel's loop loads, with 16-byte chunks where the
 * row allows (as run() chooses them for aligned buffers). */
static int64_t dec_positions_per_iter(int32_t hd, int32_t esize) {
    const int e = hd * esize % 16 == 0 ? 16 / esize : 2;
    return (int64_t)DEC_WARPS * (32 / dec_lanes(hd / e)) * DEC_UNROLL;
}

extern "C" size_t ck_attn_plan_cap(const bk_batch_t *bt) {
    if (!bt || bt->n_tokens <= 0) return 0;
    size_t n = (size_t)bt->n_tokens, s = bt->n_seqs > 0 ? (size_t)bt->n_seqs : 0;
    /* decode tokens + 3 per tile; a sequence of q tokens makes at most q / 64 + 1 tiles */
    return n + 3 * (n / CK_PF_TILE_Q + s);
}

extern "C" size_t ck_attn_plan(const bk_batch_t *bt, const ck_kv_t *kv, int32_t *ints,
                               ck_batch_t *b, size_t *dec_off, size_t *pf_off) {
    size_t k = 0;
    int64_t ctx = 1; /* the longest decode context */
    const int32_t dec_max_q = b->invariant ? INT32_MAX : CK_DEC_MAX_Q;
    for (int32_t s = 0; s < bt->n_seqs; s++) {
        int32_t lo = bt->seq_start[s], hi = bt->seq_start[s + 1];
        if (hi - lo > dec_max_q) continue;
        for (int32_t i = lo; i < hi; i++) {
            ints[k++] = i;
            if ((int64_t)bt->pos[i] + 1 > ctx) ctx = (int64_t)bt->pos[i] + 1;
        }
    }
    *dec_off = 0;
    *pf_off = k;
    b->n_dec = (int32_t)k;
    for (int32_t s = 0; s < bt->n_seqs; s++) {
        int32_t lo = bt->seq_start[s], hi = bt->seq_start[s + 1];
        if (hi - lo <= dec_max_q) continue;
        for (int32_t f = lo; f < hi; f += CK_PF_TILE_Q) {
            ints[k++] = s;
            ints[k++] = f;
            ints[k++] = hi - f < CK_PF_TILE_Q ? hi - f : CK_PF_TILE_Q;
        }
    }
    b->n_pf = (int32_t)((k - *pf_off) / 3);
    const int64_t bs = kv && kv->block_size > 0 ? kv->block_size : 16;
    const int64_t n_kv = kv && kv->n_kv_heads > 0 ? kv->n_kv_heads : 1;
    const int64_t hd = kv && kv->head_dim > 0 ? kv->head_dim : 128;
    const int64_t esize = kv && kv->head_dim > 0 ? (int64_t)ck_dtype_size(kv->dtype) : 2;
    const int64_t n_sm = b->n_sm > 0 ? b->n_sm : 132, n_dec = b->n_dec;
    const int64_t bucket = (DEC_CTX_BUCKET + bs - 1) / bs * bs;
    ctx = (ctx + bucket - 1) / bucket * bucket;
    int64_t min_len = DEC_MIN_ITERS * dec_positions_per_iter((int32_t)hd, (int32_t)esize);
    min_len = (min_len + bs - 1) / bs * bs;
    const int64_t per_split = n_dec * n_kv; /* blocks of one split index */
    int64_t splits = per_split > 0 ? (DEC_BLOCKS_PER_SM * n_sm + per_split - 1) / per_split : 1;
    const int64_t by_len = (ctx + min_len - 1) / min_len;
    if (splits > by_len) splits = by_len;
    if (splits > DEC_MAX_SPLITS) splits = DEC_MAX_SPLITS;
    if (splits < 1) splits = 1;
    int64_t len = b->invariant ? CK_INV_SPLIT : (ctx + splits - 1) / splits;
    len = (len + bs - 1) / bs * bs;
    b->dec_split_len = (int32_t)len;
    b->dec_splits = (int32_t)((ctx + len - 1) / len); /* none left empty by the rounding */
    return k;
}

extern "C" size_t ck_attn_scratch_floats(const ck_batch_t *b, int32_t n_heads,
                                         int32_t head_dim) {
    if (!b || b->n_dec <= 0 || b->dec_splits <= 1 || n_heads <= 0 || head_dim <= 0) return 0;
    /* O [n_dec][n_heads][splits][hd], then (m, l) [n_dec][n_heads][splits] */
    return (size_t)b->n_dec * n_heads * b->dec_splits * ((size_t)head_dim + 2);
}

/* ---- device helpers --------------------------------------------------------------------- */

namespace {

/* E elements of T as one load of 4, 8 or 16 bytes */
template <int BYTES> struct raw_of;
template <> struct raw_of<4> { typedef unsigned int type; };
template <> struct raw_of<8> { typedef uint2 type; };
template <> struct raw_of<16> { typedef uint4 type; };

template <typename T, int E> struct vec {
    typedef typename raw_of<E * sizeof(T)>::type raw;
    __device__ static __forceinline__ raw load(const T *p) {
        return *reinterpret_cast<const raw *>(p);
    }
    __device__ static __forceinline__ void unpack(raw r, float *f) {
        union {
            raw r;
            T v[E];
        } u;
        u.r = r;
#pragma unroll
        for (int e = 0; e < E; e++) f[e] = to_f(u.v[e]);
    }
};

/* dynamic shared memory of every kernel here; 128-byte aligned for the wmma tiles */
extern __shared__ __align__(128) float4 smem4[];

template <typename T> struct att_args {
    const T *pool; /* this layer's part of the pool */
    const T *q;
    T *out;
    float *part; /* decode partials (splits > 1) */
    const int32_t *dec_tok, *pos, *tok_seq, *bt_start, *block_table, *pf_tile;
    size_t blk_stride, which_stride, head_stride; /* elements, within the layer */
    int32_t n_heads, group, hd, bs;
    int32_t n_dec, splits, split_len;
    int32_t lp, hchunks; /* decode: lanes per position, blocks per kv head's group */
    int32_t vec16;       /* 16-byte accesses allowed */
    float qscale;        /* log2(e) / sqrt(hd) */
};

template <typename T>
__device__ __forceinline__ const T *kv_row(const att_args<T> &a, const T *head_base,
                                           const int32_t *table, int32_t j) {
    return head_base + (size_t)table[j / a.bs] * a.blk_stride + (size_t)(j % a.bs) * a.hd;
}

/* ---- decode ------------------------------------------------------------------------------ */

/* grid (n_dec, n_kv x hchunks, splits), DEC_WARPS warps. Heads h0 .. h0 + gn - 1 (gn <= G)
 * of kv head kh; G register slots, the unused ones compute on zeros. Lane group grp of a
 * warp holds the position jb + grp (+ u x ng), lane c0 of the group the chunks c0 + i x lp
 * (i < NC) of E elements: lp is a power of two, so the score reduction is an xor
 * butterfly inside the group. The loop bound is uniform over the warp (shuffles inside);
 * positions past the slice are loaded from a valid row and skipped. */
template <typename T, int E, int NC, int G>
__global__ void __launch_bounds__(DEC_WARPS * 32) dec_kernel(att_args<T> a) {
    typedef vec<T, E> V;
    typedef typename V::raw R;
    float *so = reinterpret_cast<float *>(smem4); /* [DEC_WARPS][G][hd] */
    float *sm = so + DEC_WARPS * G * a.hd;        /* [DEC_WARPS][G] */
    float *sl = sm + DEC_WARPS * G;               /* [DEC_WARPS][G] */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int di = blockIdx.x, sp = blockIdx.z, kh = blockIdx.y / a.hchunks;
    const int h0 = kh * a.group + (blockIdx.y % a.hchunks) * G;
    const int gn = min(G, (kh + 1) * a.group - h0);
    const int t = a.dec_tok[di], ctx = a.pos[t] + 1, lo = sp * a.split_len;
    if (lo >= ctx) return; /* the whole block: the combine skips this split */
    const int hi = min(ctx, lo + a.split_len);
    const int lp = a.lp, ppw = 32 / lp, grp = lane / lp, c0 = lane % lp, C = a.hd / E;
    const int ng = DEC_WARPS * ppw;
    const int32_t *table = a.block_table + a.bt_start[a.tok_seq[t]];
    const T *kbase = a.pool + (size_t)kh * a.head_stride;

    float qf[G][NC][E], acc[G][NC][E], m[G], l[G];
    const T *qt = a.q + ((size_t)t * a.n_heads + h0) * a.hd;
#pragma unroll
    for (int h = 0; h < G; h++) {
        m[h] = -INFINITY;
        l[h] = 0.f;
#pragma unroll
        for (int i = 0; i < NC; i++) {
            int c = c0 + i * lp;
#pragma unroll
            for (int e = 0; e < E; e++) qf[h][i][e] = acc[h][i][e] = 0.f;
            if (h < gn && c < C) {
                V::unpack(V::load(qt + (size_t)h * a.hd + c * E), qf[h][i]);
#pragma unroll
                for (int e = 0; e < E; e++) qf[h][i][e] *= a.qscale;
            }
        }
    }

    /* The block ids of the next iteration's positions are loaded while this iteration's
     * K/V loads are in flight, so a K/V load never waits on its table lookup. */
    int32_t blk[DEC_UNROLL];
#pragma unroll
    for (int u = 0; u < DEC_UNROLL; u++) {
        const int j = lo + warp * ppw + grp + u * ng;
        blk[u] = table[(j < hi ? j : lo) / a.bs];
    }
    for (int jb = lo + warp * ppw; jb < hi; jb += ng * DEC_UNROLL) {
        R kr[DEC_UNROLL][NC], vr[DEC_UNROLL][NC];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int j = jb + grp + u * ng;
            const T *kp = kbase + (size_t)blk[u] * a.blk_stride +
                          (size_t)((j < hi ? j : lo) % a.bs) * a.hd;
#pragma unroll
            for (int i = 0; i < NC; i++) {
                int c = c0 + i * lp;
                kr[u][i] = c < C ? V::load(kp + c * E) : R{};
                vr[u][i] = c < C ? V::load(kp + a.which_stride + c * E) : R{};
            }
        }
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int j = jb + ng * DEC_UNROLL + grp + u * ng;
            blk[u] = table[(j < hi ? j : lo) / a.bs];
        }
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            float s[G];
#pragma unroll
            for (int h = 0; h < G; h++) s[h] = 0.f;
#pragma unroll
            for (int i = 0; i < NC; i++) {
                float kf[E];
                V::unpack(kr[u][i], kf);
#pragma unroll
                for (int h = 0; h < G; h++)
#pragma unroll
                    for (int e = 0; e < E; e++) s[h] = fmaf(qf[h][i][e], kf[e], s[h]);
            }
#pragma unroll
            for (int h = 0; h < G; h++)
                for (int o = lp >> 1; o > 0; o >>= 1)
                    s[h] += __shfl_xor_sync(0xffffffffu, s[h], o);
            if (jb + grp + u * ng >= hi) continue; /* uniform in the group, after the shuffles */
            float cr[G], pw[G];
#pragma unroll
            for (int h = 0; h < G; h++) {
                float mn = fmaxf(m[h], s[h]);
                cr[h] = exp2f(m[h] - mn); /* m = -inf (first position): 0 */
                pw[h] = exp2f(s[h] - mn);
                l[h] = l[h] * cr[h] + pw[h];
                m[h] = mn;
            }
#pragma unroll
            for (int i = 0; i < NC; i++) {
                float vf[E];
                V::unpack(vr[u][i], vf);
#pragma unroll
                for (int h = 0; h < G; h++)
#pragma unroll
                    for (int e = 0; e < E; e++)
                        acc[h][i][e] = fmaf(pw[h], vf[e], acc[h][i][e] * cr[h]);
            }
        }
    }

    /* merge the lane groups of the warp (lanes with the same c0), then the warps */
    for (int o = lp; o < 32; o <<= 1) {
#pragma unroll
        for (int h = 0; h < G; h++) {
            float mo = __shfl_xor_sync(0xffffffffu, m[h], o);
            float lo_ = __shfl_xor_sync(0xffffffffu, l[h], o);
            float mn = fmaxf(m[h], mo);
            float fs = mn == -INFINITY ? 0.f : exp2f(m[h] - mn);
            float fo = mn == -INFINITY ? 0.f : exp2f(mo - mn);
            l[h] = l[h] * fs + lo_ * fo;
            m[h] = mn;
#pragma unroll
            for (int i = 0; i < NC; i++)
#pragma unroll
                for (int e = 0; e < E; e++)
                    acc[h][i][e] = acc[h][i][e] * fs +
                                   __shfl_xor_sync(0xffffffffu, acc[h][i][e], o) * fo;
        }
    }
    if (grp == 0) {
#pragma unroll
        for (int h = 0; h < G; h++) {
#pragma unroll
            for (int i = 0; i < NC; i++) {
                int c = c0 + i * lp;
                if (c < C)
#pragma unroll
                    for (int e = 0; e < E; e++)
                        so[(warp * G + h) * a.hd + c * E + e] = acc[h][i][e];
            }
            if (c0 == 0) {
                sm[warp * G + h] = m[h];
                sl[warp * G + h] = l[h];
            }
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < gn * a.hd; idx += blockDim.x) {
        int h = idx / a.hd, d = idx - h * a.hd;
        float M = -INFINITY, L = 0.f, O = 0.f;
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, sm[w * G + h]);
        for (int w = 0; w < DEC_WARPS; w++) {
            float mw = sm[w * G + h];
            float f = mw == -INFINITY ? 0.f : exp2f(mw - M); /* warps without positions */
            L += f * sl[w * G + h];
            O += f * so[(w * G + h) * a.hd + d];
        }
        size_t row = (size_t)t * a.n_heads + h0 + h;
        if (a.splits == 1) {
            a.out[row * a.hd + d] = from_f<T>(O / L);
        } else {
            size_t pr = ((size_t)di * a.n_heads + h0 + h) * a.splits + sp;
            a.part[pr * a.hd + d] = O;
            if (d == 0) {
                float *ml = a.part + (size_t)a.n_dec * a.n_heads * a.splits * a.hd + 2 * pr;
                ml[0] = M;
                ml[1] = L;
            }
        }
    }
}

/* grid (n_dec, n_heads): merges the splits that hold positions of the token's context */
template <typename T> __global__ void __launch_bounds__(256) dec_combine(att_args<T> a) {
    const int di = blockIdx.x, h = blockIdx.y, t = a.dec_tok[di];
    const int ns = (int)(((int64_t)a.pos[t] + a.split_len) / a.split_len);
    size_t pr = ((size_t)di * a.n_heads + h) * a.splits;
    const float *po = a.part + pr * a.hd;
    const float *ml = a.part + (size_t)a.n_dec * a.n_heads * a.splits * a.hd + 2 * pr;
    float M = -INFINITY, L = 0.f;
    for (int s = 0; s < ns; s++) M = fmaxf(M, ml[2 * s]);
    for (int s = 0; s < ns; s++) L += exp2f(ml[2 * s] - M) * ml[2 * s + 1];
    T *out = a.out + ((size_t)t * a.n_heads + h) * a.hd;
    for (int d = threadIdx.x; d < a.hd; d += blockDim.x) {
        float O = 0.f;
        for (int s = 0; s < ns; s++) O += exp2f(ml[2 * s] - M) * po[(size_t)s * a.hd + d];
        out[d] = from_f<T>(O / L);
    }
}

/* ---- prefill (cuda_prefill.cuh) ------------------------------------------------------------ */

#include "engine/cuda/cuda_prefill.cuh"

/* ---- launches ------------------------------------------------------------------------------- */

/* Opts a kernel into more than 48 KB of dynamic shared memory, once per instantiation
 * (the backend drives one device). */
template <typename K> cudaError_t smem_attr(K kern, size_t bytes, int *done) {
    if (bytes <= 48 * 1024 || *done) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)bytes);
    if (e == cudaSuccess) *done = 1;
    return e;
}

template <typename T, int E, int NC, int G>
void launch_dec(const att_args<T> &a, dim3 grid, cudaStream_t st) {
    size_t smem = (size_t)DEC_WARPS * G * ((size_t)a.hd + 2) * sizeof(float);
    dec_kernel<T, E, NC, G><<<grid, DEC_WARPS * 32, smem, st>>>(a);
}

template <typename T, int E, int NC>
void launch_dec_g(const att_args<T> &a, int gt, dim3 grid, cudaStream_t st) {
    switch (gt) {
    case 1: launch_dec<T, E, NC, 1>(a, grid, st); break;
    case 2: launch_dec<T, E, NC, 2>(a, grid, st); break;
    case 4: launch_dec<T, E, NC, 4>(a, grid, st); break;
    default: launch_dec<T, E, NC, 8>(a, grid, st); break;
    }
}

/* Bytes of shared memory that an SM of sm_90 holds for blocks (228 KB, 1 KB of it per
 * block reserved), and the blocks of `smem` bytes that fit. */
#define SM_SMEM_BYTES (228 * 1024)
static int blocks_per_sm(size_t smem) { return (int)(SM_SMEM_BYTES / (smem + 1024)); }

/* The double-buffered kernel where the rows are 16-byte chunks and its second K/V buffer
 * costs no resident block (head dims 128 and 256 on sm_90); TWIN_CUDA_PF_DB=1 or 0 forces
 * either (tests, measurements). */
template <typename T, int HDP> cudaError_t launch_pf_wmma(const att_args<T> &a, dim3 grid,
                                                         cudaStream_t st) {
    static int done[2];
    constexpr int LDT = HDP + 8;
    const size_t smem = 3 * PF_T * LDT * sizeof(T) + PF_T * (PF_T + 4) * sizeof(float) +
                        PF_T * (PF_T + 8) * sizeof(T) + 2 * PF_T * sizeof(float);
    const size_t smem_db = smem + 2 * PF_T * LDT * sizeof(T);
    const char *env = getenv("TWIN_CUDA_PF_DB");
    bool db = env && *env ? atoi(env) != 0 : blocks_per_sm(smem_db) >= blocks_per_sm(smem);
    db = db && a.vec16;
    cudaError_t e;
    if (db) {
        if ((e = smem_attr(pf_wmma_kernel<T, HDP, true>, smem_db, &done[1])) != cudaSuccess)
            return e;
        pf_wmma_kernel<T, HDP, true><<<grid, 128, smem_db, st>>>(a);
    } else {
        if ((e = smem_attr(pf_wmma_kernel<T, HDP, false>, smem, &done[0])) != cudaSuccess)
            return e;
        pf_wmma_kernel<T, HDP, false><<<grid, 128, smem, st>>>(a);
    }
    return cudaSuccess;
}

template <int HDP> cudaError_t launch_pf_fma(const att_args<float> &a, dim3 grid,
                                            cudaStream_t st) {
    static int done;
    size_t smem = (3 * PF_T * (HDP + 4) + PF_T * (PF_T + 4)) * sizeof(float);
    cudaError_t e = smem_attr(pf_fma_kernel<HDP>, smem, &done);
    if (e != cudaSuccess) return e;
    pf_fma_kernel<HDP><<<grid, 256, smem, st>>>(a);
    return cudaSuccess;
}

template <typename T> cudaError_t launch_pf(const att_args<T> &a, dim3 grid, cudaStream_t st) {
    int hd = a.hd;
    return hd <= 16    ? launch_pf_wmma<T, 16>(a, grid, st)
           : hd <= 32  ? launch_pf_wmma<T, 32>(a, grid, st)
           : hd <= 64  ? launch_pf_wmma<T, 64>(a, grid, st)
           : hd <= 80  ? launch_pf_wmma<T, 80>(a, grid, st)
           : hd <= 96  ? launch_pf_wmma<T, 96>(a, grid, st)
           : hd <= 128 ? launch_pf_wmma<T, 128>(a, grid, st)
           : hd <= 192 ? launch_pf_wmma<T, 192>(a, grid, st)
                       : launch_pf_wmma<T, 256>(a, grid, st);
}

template <> cudaError_t launch_pf<float>(const att_args<float> &a, dim3 grid, cudaStream_t st) {
    int hd = a.hd;
    return hd <= 64    ? launch_pf_fma<64>(a, grid, st)
           : hd <= 128 ? launch_pf_fma<128>(a, grid, st)
           : hd <= 192 ? launch_pf_fma<192>(a, grid, st)
                       : launch_pf_fma<256>(a, grid, st);
}

template <typename T>
cudaError_t run(cudaStream_t st, const ck_kv_t *kv, int32_t layer, void *out, const void *q,
                int32_t n_heads, const ck_batch_t *b, float *scratch, int vec16) {
    att_args<T> a;
    const int n_kv = kv->n_kv_heads;
    a.head_stride = (size_t)kv->block_size * kv->head_dim;
    a.which_stride = (size_t)n_kv * a.head_stride;
    a.blk_stride = 2 * a.which_stride;
    a.pool = (const T *)kv->base + (size_t)layer * kv->n_blocks * a.blk_stride;
    a.q = (const T *)q;
    a.out = (T *)out;
    a.part = scratch;
    a.dec_tok = b->dec_tok, a.pos = b->pos, a.tok_seq = b->tok_seq;
    a.bt_start = b->bt_start, a.block_table = b->block_table, a.pf_tile = b->pf_tile;
    a.n_heads = n_heads, a.group = n_heads / n_kv, a.hd = kv->head_dim, a.bs = kv->block_size;
    a.n_dec = b->n_dec, a.splits = b->dec_splits, a.split_len = b->dec_split_len;
    a.lp = 1, a.hchunks = 1, a.vec16 = vec16;
    a.qscale = (float)(LOG2E / sqrt((double)kv->head_dim));
    if (b->n_dec > 0) {
        /* E elements per lane access; lp lanes per position (a power of two, <= 32) */
        const int E = vec16 ? 16 / (int)sizeof(T) : 2, C = a.hd / E;
        a.lp = dec_lanes(C);
        const int nc = (C + a.lp - 1) / a.lp;
        const int gt = a.group <= 1 ? 1 : a.group <= 2 ? 2 : a.group <= 4 ? 4 : 8;
        a.hchunks = (a.group + gt - 1) / gt;
        if ((int64_t)n_kv * a.hchunks > 65535) return cudaErrorInvalidValue;
        dim3 grid((unsigned)b->n_dec, (unsigned)(n_kv * a.hchunks), (unsigned)a.splits);
        /* nc: 1, or up to 4 for pairs (hd <= 256), or 2 for fp32 quads with hd > 128 */
        if (E == 2) launch_dec_g<T, 2, 4>(a, gt, grid, st);
        else if (nc == 1) launch_dec_g<T, 16 / sizeof(T), 1>(a, gt, grid, st);
        else launch_dec_g<T, 16 / sizeof(T), sizeof(T) == 4 ? 2 : 1>(a, gt, grid, st);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        if (a.splits > 1) {
            int threads = (a.hd + 31) / 32 * 32;
            dec_combine<T><<<dim3((unsigned)b->n_dec, (unsigned)n_heads),
                             threads > 256 ? 256 : threads, 0, st>>>(a);
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
        }
    }
    if (b->n_pf > 0) {
        cudaError_t e = launch_pf<T>(a, dim3((unsigned)n_heads, (unsigned)b->n_pf), st);
        return e != cudaSuccess ? e : cudaGetLastError();
    }
    return cudaSuccess;
}

} /* namespace */

extern "C" cudaError_t ck_attention(cudaStream_t st, const ck_kv_t *kv, int32_t layer,
                                    void *out, const void *q, int32_t n_heads,
                                    const ck_batch_t *b, float *scratch) {
    if (!kv || !b || b->n_dec < 0 || b->n_pf < 0) return cudaErrorInvalidValue;
    if (b->n_dec == 0 && b->n_pf == 0) return cudaSuccess;
    const int32_t hd = kv->head_dim, n_kv = kv->n_kv_heads, bs = kv->block_size;
    if (!kv->base || !out || !q || !b->pos || !b->bt_start || !b->block_table)
        return cudaErrorInvalidValue;
    if (kv->dtype != CK_F32 && kv->dtype != CK_BF16 && kv->dtype != CK_F16)
        return cudaErrorInvalidValue;
    if (layer < 0 || layer >= kv->n_layers || kv->n_blocks < 1 || bs < 1)
        return cudaErrorInvalidValue;
    if (n_kv < 1 || n_heads < n_kv || n_heads % n_kv || n_heads > 65535 || hd < 2 ||
        hd > 256 || hd % 2)
        return cudaErrorInvalidValue;
    if (b->n_dec > 0 &&
        (!b->dec_tok || !b->tok_seq || b->dec_splits < 1 || b->dec_splits > 65535 ||
         b->dec_split_len < 1 || b->dec_split_len % bs || (b->dec_splits > 1 && !scratch)))
        return cudaErrorInvalidValue;
    if (b->n_pf > 0 && (!b->pf_tile || b->n_pf > 65535)) return cudaErrorInvalidValue;
    const size_t es = ck_dtype_size(kv->dtype);
    const uintptr_t ptrs = (uintptr_t)kv->base | (uintptr_t)q | (uintptr_t)out;
    if (ptrs % (2 * es)) return cudaErrorInvalidValue; /* element pairs at least */
    const int vec16 = ptrs % 16 == 0 && hd * es % 16 == 0;
    switch (kv->dtype) {
    case CK_F32: return run<float>(st, kv, layer, out, q, n_heads, b, scratch, vec16);
    case CK_BF16:
        return run<__nv_bfloat16>(st, kv, layer, out, q, n_heads, b, scratch, vec16);
    default: return run<__half>(st, kv, layer, out, q, n_heads, b, scratch, vec16);
    }
}
