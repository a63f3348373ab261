/* cpu_gemm: the CPU backend's vectorised kernels: y = x w^T over weights packed into
 * panels, and attention over one token's context.
 *
 * Packed layout: a weight matrix w [n][k] (n outputs, k inputs) is stored as ceil(n / 16)
 * panels of CGEMM_PANEL = 16 rows; panel p holds rows 16p .. 16p + 15 k-major, element
 * (r, kk) at p * 16 k + kk * 16 + r % 16, and rows past n are zeros. So rows
 * [r0, r0 + r) of a packed matrix, r0 and r multiples of 16, are the packed matrix of
 * those rows at offset r0 * k; and a panel is one sequential read, which a batch-1
 * product streams at memory bandwidth.
 *
 * Why packed and not OpenBLAS: its sgemm packs the weight matrix on every call, which
 * for a few rows costs more than the product. Packing once at upload lets a register-
 * blocked broadcast kernel (BLAS style, weights as the packed operand) run at m = 1..64
 * and beyond without repacking.
 *
 * cgemm_panels computes the output columns of panels [p_lo, p_hi) only, so the caller can
 * split panels over threads. x [m][k] and y [m][n] row-major fp32, wp packed; scratch:
 * m x k floats of the calling thread's own (x is repacked there). AVX-512
 * when the CPU has it, else AVX2 + FMA (engine/cpu/cpu_gemm_avx2.c), else a portable
 * kernel (chosen at run time: the build uses no -march flag); all read the same layout. */
#ifndef TWIN_CPU_GEMM_H
#define TWIN_CPU_GEMM_H

#include <stddef.h>
#include <stdint.h>

#define CGEMM_PANEL 16

/* The lanes of a 16-float vector that hold elements when `left` remain: all 16, or the
 * low `left` (the kernels' mask for a panel's or a row's last vector). */
static inline uint16_t cgemm_tail16(int64_t left) {
    return left >= 16 ? (uint16_t)0xFFFF : (uint16_t)((1u << left) - 1);
}

/* floats a packed [n][k] matrix occupies */
size_t cgemm_packed_elems(int32_t n, int32_t k);
/* dst [cgemm_packed_elems(n, k)] = w [n][k] row-major, packed (padding zeroed) */
void cgemm_pack(float *dst, const float *w, int32_t n, int32_t k);
/* dst [k] = row r of a packed matrix with k columns */
void cgemm_unpack_row(float *dst, const float *wp, int32_t k, int32_t r);

void cgemm_panels(float *y, const float *x, const float *wp, int32_t m, int32_t n, int32_t k,
                  int32_t p_lo, int32_t p_hi, float *scratch);

/* The same product over an F16 or BF16 matrix (engine/cpu/cpu_qgemm.h; Q8_0 and Q4_0 go
 * through cpu_qdot.h), the weights converted inside the kernel; scratch: cgemm_qscratch(m, k) floats of the
 * calling thread's own (64-byte aligned). */
size_t cgemm_qscratch(int32_t m, int32_t k);
void cgemm_qpanels(float *y, const float *x, const void *wq, uint32_t type, int32_t m,
                   int32_t n, int32_t k, int32_t p_lo, int32_t p_hi, float *scratch);

/* One token's attention for the g query heads that share a KV head: out[r][hd] =
 * softmax(q[r] . K^T * scale) V over n positions, K and V given as row pointers (their
 * places in the paged pool) to hd floats, or with kv_f16 to hd IEEE halves. scores:
 * scratch of g * n floats. */
void cgemm_attn(float *out, const float *q, int32_t g, int32_t hd, const void *const *krow,
                const void *const *vrow, int kv_f16, int32_t n, float scale, float *scores);

/* dst[i] = src[i] as an IEEE half, rounded to nearest even (the KV cache's f16 stores):
 * the AVX-512 and portable paths give the same bits for every non-NaN value. */
void cgemm_to_f16(uint16_t *dst, const float *src, int32_t n);

/* One row's RMS norm: x += res (when res is not NULL), then out[i] = x[i] scale w[i] with
 * scale = 1 / sqrt(sum of x^2 / dim + eps), the sum in double (exact squares, added in 16
 * running sums: the same bits with AVX-512 and without). out may be x. */
void cgemm_rmsnorm(float *out, float *x, const float *res, const float *w, int32_t dim,
                   float eps);

/* out[i] = silu(gate[i]) up[i] = gate[i] / (1 + e^-gate[i]) up[i]; out may be gate. */
void cgemm_silu_mul(float *out, const float *gate, const float *up, size_t n);

/* The index of the largest of v[0..n), the lowest on ties: sampler_argmax's result
 * (engine/sampler.h), vectorised. */
int32_t cgemm_argmax(const float *v, int32_t n);

/* "avx512", "avx2" or "portable": the product kernels this process uses (attention, silu,
 * the RMS norm and argmax: AVX-512 or portable). */
const char *cgemm_kernel(void);
/* Those kernels from now on ("avx512", "avx2", "portable"), so that tests check every
 * path on one machine; NULL: back to detecting the CPU. -1 when the CPU lacks them. Not
 * thread-safe: call it while no product is running. */
int cgemm_force(const char *kernel);
/* on = 1: cgemm_force("portable"); on = 0: cgemm_force(NULL) */
void cgemm_force_portable(int on);
/* The integer-dot-product kernels (cpu_qdot.h) that go with the chosen ones: "avx512"
 * gives CQD_VNNI where the CPU has VNNI (else CQD_AVX2), "avx2" CQD_AVX2, "portable"
 * CQD_PORTABLE. */
int cgemm_qdot_level(void);

#endif
