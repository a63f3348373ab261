/* cuda_prefill: the prefill attention kernels of cuda_attention.cu (its header comment
 * says what they compute and how): the cp.async helpers, the tile loader, the tensor-core
 * kernel (bf16/f16, single- or double-buffered K/V tiles) and the fp32 FMA kernel.
 *
 * Included by cuda_attention.cu alone, inside its anonymous namespace, after att_args,
 * kv_row, smem4 and PF_T; its launches stay in the .cu file (the host emulator's gen.py
 * rewrites launches in the .cu it is given, and this file only holds device code). */
#ifndef TWIN_CUDA_PREFILL_CUH
#define TWIN_CUDA_PREFILL_CUH

/* ---- prefill ------------------------------------------------------------------------------ */

/* cp.async (sm_80 on): 16 bytes from global to shared memory without a trip through
 * registers, in flight until the thread waits for its group; the emulator (emu.h) lands
 * the copy only at that wait, so a tile read too early shows there. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src)
                 : "memory");
#elif defined(TWIN_CUDA_EMU)
    emu::cp_async(dst, src, 16);
#else
    *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
#endif
}
__device__ __forceinline__ void cp_commit() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#elif defined(TWIN_CUDA_EMU)
    emu::cp_commit();
#endif
}
/* every committed group of this thread but the newest N has landed */
template <int N> __device__ __forceinline__ void cp_wait() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#elif defined(TWIN_CUDA_EMU)
    emu::cp_wait(N);
#endif
}

/* Copies PF_T rows of hd elements into dst [PF_T][LD] (and, when dst2, the rows at src +
 * off2 into dst2), zero-filling the columns hd .. HDP and the rows without a source.
 * rowptr(r): the source of row r, or NULL. NT threads (blockDim.x), so the loop's trip
 * count is a constant. ASYNC (vec16 only): the rows' chunks go by cp.async, the zeros by
 * plain stores; the caller commits and waits. */
template <typename T, int HDP, int LD, int NT, bool ASYNC = false, typename F>
__device__ __forceinline__ void load_tile(T *dst, T *dst2, size_t off2, int hd, int vec16,
                                          F rowptr) {
    constexpr int EPC = 16 / sizeof(T), CPR = HDP / EPC, ITERS = (PF_T * CPR + NT - 1) / NT;
    static_assert(HDP % EPC == 0 && (LD * sizeof(T)) % 16 == 0, "16-byte rows");
#pragma unroll 4
    for (int it = 0; it < ITERS; it++) {
        const int idx = it * NT + (int)threadIdx.x;
        if ((PF_T * CPR) % NT && idx >= PF_T * CPR) break;
        int r = idx / CPR, c = (idx - r * CPR) * EPC;
        const T *src = rowptr(r);
        T *d = dst + r * LD + c, *d2 = dst2 ? dst2 + r * LD + c : nullptr;
        if (ASYNC && src && c < hd) {
            cp_async16(d, src + c);
            if (d2) cp_async16(d2, src + off2 + c);
        } else if (vec16 || ASYNC) { /* hd is a multiple of EPC: a chunk is all in or all out */
            uint4 v = make_uint4(0, 0, 0, 0), v2 = v;
            if (src && c < hd) {
                v = *reinterpret_cast<const uint4 *>(src + c);
                if (d2) v2 = *reinterpret_cast<const uint4 *>(src + off2 + c);
            }
            *reinterpret_cast<uint4 *>(d) = v;
            if (d2) *reinterpret_cast<uint4 *>(d2) = v2;
        } else {
#pragma unroll
            for (int e = 0; e < EPC; e++) {
                bool in = src && c + e < hd;
                d[e] = in ? src[c + e] : from_f<T>(0.f);
                if (d2) d2[e] = in ? src[off2 + c + e] : from_f<T>(0.f);
            }
        }
    }
}

template <typename T> struct pf_tile_t {
    int h, first, n, kend;
    const int32_t *table;
    const T *kbase;
};

/* grid (n_heads, n_pf): the heaviest tiles (last in the plan's order) start first */
template <typename T> __device__ __forceinline__ pf_tile_t<T> pf_setup(const att_args<T> &a) {
    const int32_t *pt = a.pf_tile + 3 * (size_t)(gridDim.y - 1 - blockIdx.y);
    const int h = blockIdx.x, first = pt[1], n = pt[2];
    return pf_tile_t<T>{h, first, n, a.pos[first + n - 1] + 1, a.block_table + a.bt_start[pt[0]],
                        a.pool + (size_t)(h / a.group) * a.head_stride};
}

/* Tensor-core prefill, T = bf16 | f16. 4 warps; warp w owns query rows 16w .. 16w + 15.
 * Per context tile: S = Q K^T (wmma, fp32) to shared memory; the warp's softmax (two
 * lanes per row, 32 columns each) writes P (type T) and each row's correction; O (wmma
 * accumulators in registers, NF of them) is rescaled through the row map and O += P V.
 * DB (16-byte rows only): the K/V tiles are double-buffered, the next one copied with
 * cp.async while this one is computed on (a second K/V buffer after sL). */
template <typename T, int HDP, bool DB>
__global__ void __launch_bounds__(128) pf_wmma_kernel(att_args<T> a) {
    using namespace nvcuda;
    constexpr int LDT = HDP + 8, LDS = PF_T + 4, LDP = PF_T + 8, NF = HDP / 16;
    constexpr int NS = HDP > 128 ? 2 : 4;
    typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_t;
    T *sQ = reinterpret_cast<T *>(smem4), *sK0 = sQ + PF_T * LDT, *sV0 = sK0 + PF_T * LDT;
    float *sS = reinterpret_cast<float *>(sV0 + PF_T * LDT);
    T *sP = reinterpret_cast<T *>(sS + PF_T * LDS);
    float *sCorr = reinterpret_cast<float *>(sP + PF_T * LDP), *sL = sCorr + PF_T;
    T *sK1 = reinterpret_cast<T *>(sL + PF_T), *sV1 = sK1 + PF_T * LDT; /* DB only */
    const pf_tile_t<T> p = pf_setup(a);
    if (p.n < 1 || p.n > PF_T) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = lane >> 1, half = lane & 1, qi = 16 * warp + r; /* the softmax's row */
    const int qp = a.pos[p.first + min(qi, p.n - 1)]; /* rows past n copy the last one */
    float *sSw = sS + 16 * warp * LDS;

    /* The accumulator's row map: a fragment loaded from rows filled with their index.
     * Loaded (wmma.load.c) and computed (mma D) accumulators share one layout, since D
     * feeds back as C and store(load(X)) = X; so rid[e] is the row of o[f].x[e]. */
    for (int i = lane; i < 256; i += 32) sSw[(i >> 4) * LDS + (i & 15)] = (float)(i >> 4);
    __syncwarp();
    acc_t fr;
    wmma::load_matrix_sync(fr, sSw, LDS, wmma::mem_row_major);
    int rid[acc_t::num_elements];
#pragma unroll
    for (int e = 0; e < acc_t::num_elements; e++) rid[e] = (int)fr.x[e];
    __syncwarp();

    const T *qbase = a.q + (size_t)p.h * a.hd;
    load_tile<T, HDP, LDT, 128>(sQ, (T *)nullptr, 0, a.hd, a.vec16, [&](int i) -> const T * {
        return i < p.n ? qbase + (size_t)(p.first + i) * a.n_heads * a.hd : nullptr;
    });
    acc_t o[NF];
#pragma unroll
    for (int f = 0; f < NF; f++) wmma::fill_fragment(o[f], 0.f);
    float m_run = -INFINITY, l_run = 0.f;

    /* the K/V rows of the context tile at c (NULL past the context's end) */
    auto kv_src = [&](int c) {
        return [&, c](int i) -> const T * {
            return c + i < p.kend ? kv_row(a, p.kbase, p.table, c + i) : nullptr;
        };
    };
    if (DB) {
        load_tile<T, HDP, LDT, 128, true>(sK0, sV0, a.which_stride, a.hd, 1, kv_src(0));
        cp_commit();
    }
    for (int c0 = 0, it = 0; c0 < p.kend; c0 += PF_T, it++) {
        T *sK = DB && (it & 1) ? sK1 : sK0, *sV = DB && (it & 1) ? sV1 : sV0;
        if (DB) {
            /* the other buffers were last read in the previous tile, before its final
             * barrier; the group just committed is the next tile, so waiting for all but
             * the newest group waits for this one */
            if (c0 + PF_T < p.kend)
                load_tile<T, HDP, LDT, 128, true>(it & 1 ? sK0 : sK1, it & 1 ? sV0 : sV1,
                                                  a.which_stride, a.hd, 1, kv_src(c0 + PF_T));
            cp_commit();
            cp_wait<1>();
        } else {
            load_tile<T, HDP, LDT, 128>(sK, sV, a.which_stride, a.hd, a.vec16, kv_src(c0));
        }
        __syncthreads();
        /* S in NS column fragments a pass: large head dims keep fewer live accumulators */
#pragma unroll
        for (int n0 = 0; n0 < 4; n0 += NS) {
            acc_t sf[NS];
#pragma unroll
            for (int n = 0; n < NS; n++) wmma::fill_fragment(sf[n], 0.f);
#pragma unroll
            for (int k = 0; k < NF; k++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa;
                wmma::load_matrix_sync(qa, sQ + 16 * warp * LDT + 16 * k, LDT);
#pragma unroll
                for (int n = 0; n < NS; n++) {
                    /* K^T as a column-major k x n matrix: element (d, j) at sK[j][d] */
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kb;
                    wmma::load_matrix_sync(kb, sK + 16 * (n0 + n) * LDT + 16 * k, LDT);
                    wmma::mma_sync(sf[n], qa, kb, sf[n]);
                }
            }
#pragma unroll
            for (int n = 0; n < NS; n++)
                wmma::store_matrix_sync(sSw + 16 * (n0 + n), sf[n], LDS, wmma::mem_row_major);
        }
        __syncwarp();
        /* masked (later) positions get -inf, so exp2 gives them weight 0 */
        const float *srow = sSw + r * LDS + half * 32;
        const int vis = qp - c0 - half * 32; /* columns cc <= vis are visible */
        float mx = -INFINITY;
#pragma unroll
        for (int cc = 0; cc < 32; cc++) mx = fmaxf(mx, cc <= vis ? srow[cc] : -INFINITY);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)) * a.qscale;
        const float mn = fmaxf(m_run, mx); /* finite: tile 0 shows position 0 to every row */
        const float corr = exp2f(m_run - mn);
        float sum = 0.f;
#pragma unroll
        for (int cc = 0; cc < 32; cc++) {
            T pv = from_f<T>(cc <= vis ? exp2f(srow[cc] * a.qscale - mn) : 0.f);
            sP[qi * LDP + half * 32 + cc] = pv;
            sum += to_f(pv); /* the weights the product uses, rounded */
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l_run = l_run * corr + sum;
        m_run = mn;
        if (!half) sCorr[qi] = corr;
        __syncwarp();
        float ce[acc_t::num_elements];
#pragma unroll
        for (int e = 0; e < acc_t::num_elements; e++) ce[e] = sCorr[16 * warp + rid[e]];
#pragma unroll
        for (int f = 0; f < NF; f++)
#pragma unroll
            for (int e = 0; e < acc_t::num_elements; e++) o[f].x[e] *= ce[e];
#pragma unroll
        for (int k = 0; k < PF_T / 16; k++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa;
            wmma::load_matrix_sync(pa, sP + 16 * warp * LDP + 16 * k, LDP);
#pragma unroll
            for (int f = 0; f < NF; f++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
                wmma::load_matrix_sync(vb, sV + 16 * k * LDT + 16 * f, LDT);
                wmma::mma_sync(o[f], pa, vb, o[f]);
            }
        }
        __syncthreads(); /* sK and sV are refilled next */
    }

    if (!half) sL[qi] = l_run;
    __syncwarp();
#pragma unroll
    for (int f0 = 0; f0 < NF; f0 += 4) { /* 64 columns at a time through the warp's sS */
#pragma unroll
        for (int ff = 0; ff < 4; ff++)
            if (f0 + ff < NF)
                wmma::store_matrix_sync(sSw + 16 * ff, o[f0 + ff], LDS, wmma::mem_row_major);
        __syncwarp();
        const int cols = min(4, NF - f0) * 16;
        for (int i = lane; i < 16 * 64; i += 32) {
            int rr = i >> 6, cc = i & 63, d = 16 * f0 + cc, row = 16 * warp + rr;
            if (row < p.n && cc < cols && d < a.hd)
                a.out[((size_t)(p.first + row) * a.n_heads + p.h) * a.hd + d] =
                    from_f<T>(sSw[rr * LDS + cc] / sL[row]);
        }
        __syncwarp();
    }
}

/* FMA prefill, fp32. 256 threads as 16 x 16 (ty, tx): thread rows 4ty .. 4ty + 3; score
 * columns tx + 16jj; output columns 64jd + 4tx .. + 3. A row's 16 threads are one half
 * warp, so its max is an xor butterfly over tx; its sum stays per thread until the end.
 * P is stored transposed so that a thread reads its 4 rows' weights as one float4. */
template <int HDP> __global__ void __launch_bounds__(256) pf_fma_kernel(att_args<float> a) {
    constexpr int LD = HDP + 4, LDPT = PF_T + 4, NDJ = HDP / 64;
    float *sQ = reinterpret_cast<float *>(smem4), *sK = sQ + PF_T * LD, *sV = sK + PF_T * LD;
    float *sPT = sV + PF_T * LD;
    const pf_tile_t<float> p = pf_setup(a);
    if (p.n < 1 || p.n > PF_T) return;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4, hd4 = (a.hd + 3) & ~3;
    const float *qbase = a.q + (size_t)p.h * a.hd;
    load_tile<float, HDP, LD, 256>(sQ, (float *)nullptr, 0, a.hd, a.vec16, [&](int i) -> const float * {
        return i < p.n ? qbase + (size_t)(p.first + i) * a.n_heads * a.hd : nullptr;
    });
    int qp[4];
    float m[4], l[4], o[4][NDJ][4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        qp[i] = a.pos[p.first + min(4 * ty + i, p.n - 1)];
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int jd = 0; jd < NDJ; jd++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[i][jd][e] = 0.f;
    }

    for (int c0 = 0; c0 < p.kend; c0 += PF_T) {
        load_tile<float, HDP, LD, 256>(sK, sV, a.which_stride, a.hd, a.vec16,
                                  [&](int i) -> const float * {
                                      return c0 + i < p.kend
                                                 ? kv_row(a, p.kbase, p.table, c0 + i)
                                                 : nullptr;
                                  });
        __syncthreads();
        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int jj = 0; jj < 4; jj++) s[i][jj] = 0.f;
        for (int d = 0; d < hd4; d += 4) {
            float4 q4[4], k4[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                q4[i] = *reinterpret_cast<const float4 *>(sQ + (4 * ty + i) * LD + d);
                k4[i] = *reinterpret_cast<const float4 *>(sK + (tx + 16 * i) * LD + d);
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int jj = 0; jj < 4; jj++)
                    s[i][jj] = fmaf(q4[i].x, k4[jj].x,
                               fmaf(q4[i].y, k4[jj].y,
                               fmaf(q4[i].z, k4[jj].z, fmaf(q4[i].w, k4[jj].w, s[i][jj]))));
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                s[i][jj] = c0 + tx + 16 * jj <= qp[i] ? s[i][jj] * a.qscale : -INFINITY;
                mx = fmaxf(mx, s[i][jj]);
            }
#pragma unroll
            for (int off = 1; off < 16; off <<= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float mn = fmaxf(m[i], mx); /* finite: see pf_wmma_kernel */
            const float corr = exp2f(m[i] - mn);
            m[i] = mn;
            l[i] *= corr;
#pragma unroll
            for (int jd = 0; jd < NDJ; jd++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[i][jd][e] *= corr;
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                float pv = exp2f(s[i][jj] - mn);
                l[i] += pv;
                sPT[(tx + 16 * jj) * LDPT + 4 * ty + i] = pv;
            }
        }
        __syncthreads();
        const int cn = min(PF_T, p.kend - c0);
        for (int c = 0; c < cn; c++) {
            float4 p4 = *reinterpret_cast<const float4 *>(sPT + c * LDPT + 4 * ty);
            float pr[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
            for (int jd = 0; jd < NDJ; jd++) {
                float4 v4 = *reinterpret_cast<const float4 *>(sV + c * LD + 64 * jd + 4 * tx);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    o[i][jd][0] = fmaf(pr[i], v4.x, o[i][jd][0]);
                    o[i][jd][1] = fmaf(pr[i], v4.y, o[i][jd][1]);
                    o[i][jd][2] = fmaf(pr[i], v4.z, o[i][jd][2]);
                    o[i][jd][3] = fmaf(pr[i], v4.w, o[i][jd][3]);
                }
            }
        }
        __syncthreads(); /* sK, sV and sPT are refilled next */
    }

#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int off = 1; off < 16; off <<= 1) l[i] += __shfl_xor_sync(0xffffffffu, l[i], off);
        int row = 4 * ty + i;
        if (row >= p.n) continue;
        float *dst = a.out + ((size_t)(p.first + row) * a.n_heads + p.h) * a.hd;
#pragma unroll
        for (int jd = 0; jd < NDJ; jd++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int d = 64 * jd + 4 * tx + e;
                if (d < a.hd) dst[d] = o[i][jd][e] / l[i];
            }
    }
}

#endif
