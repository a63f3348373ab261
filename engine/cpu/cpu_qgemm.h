/* cpu_qgemm: the CPU backend's matrices in a stored type (F16, BF16, Q8_0, Q4_0; ggml's
 * type ids, engine/dequant.h): their packed layout; for F16/BF16 the AVX-512 product,
 * which converts in registers (the AVX2 one is cpu_gemm_avx2.c), and the portable
 * conversion of a run of k steps of one panel into the fp32 packed layout (cpu_gemm.h).
 * Q8_0 and Q4_0 are multiplied by integer dot products (cpu_qdot.h).
 *
 * Layout: panels of CGEMM_PANEL = 16 rows, as the fp32 packing, rows past n zero. A panel
 * holds the 16 rows k-major:
 *  - F16 / BF16: element (r, kk) at halfword kk * 16 + r, so a step is one contiguous run;
 *  - Q8_0: per block of 32 steps, 16 fp16 scales (row r's at r) then 512 bytes: step
 *    4 g + i of row r at byte 32 + 64 g + 4 r + i, as q + 128 (unsigned: vpdpbusd's
 *    operand; 544 bytes per block, 1.0625 bytes a weight);
 *  - Q4_0: per block, 16 fp16 scales then 256 bytes: byte 32 + 64 v + 4 r + i holds step
 *    4 v + i of row r in its low nibble and step 16 + 4 v + i in its high one (ggml's
 *    halves of a block): 288 bytes per block (0.5625 a weight).
 * So in the block types a 64-byte vector is 16 rows x 4 consecutive steps (cpu_qdot.h).
 * A panel's bytes are a multiple of 4, so rows [r0, r0 + r) of a stored matrix (r0, r
 * multiples of 16) are the stored matrix of those rows at float offset
 * cqg_elems(type, r0, k): the backend's rule for slices and concatenations.
 * Block types need k a multiple of 32 (GGUF's rows are whole blocks).
 *
 * Kernels: AVX-512 or AVX2 (+F16C) where the CPU has them (cpu_gemm's choice, which
 * cgemm_force switches), a portable one otherwise; all give the same floats
 * (conversion is exact).
 *
 * Ownership: pure functions over caller buffers. */
#ifndef TWIN_CPU_QGEMM_H
#define TWIN_CPU_QGEMM_H

#include <stddef.h>
#include <stdint.h>

/* 1 when the type has a stored layout here */
int cqg_supported(uint32_t type);
/* floats a stored [n][k] matrix of the type occupies; 0 when unsupported or k is not a
 * whole number of the type's blocks */
size_t cqg_elems(uint32_t type, int32_t n, int32_t k);
/* dst [cqg_elems] = src [n][k] row-major in the type's ggml bytes, packed */
void cqg_pack(void *dst, const void *src, uint32_t type, int32_t n, int32_t k);
/* dst [k1 - k0][16] fp32 = steps [k0, k1) of panel p of a stored matrix with k columns,
 * in portable C: the portable product's conversion (AVX2 and AVX-512 convert in
 * registers) and the tests'. */
void cqg_dequant(float *dst, const void *wq, uint32_t type, int32_t k, int32_t p, int32_t k0,
                 int32_t k1);
/* the product kernels' instruction levels (cpu_gemm.c chooses one) */
enum { CQG_PORTABLE = 0, CQG_AVX2 = 1, CQG_AVX512 = 2 };
/* y [m][n] = x [m][k] times an F16/BF16 matrix, output columns of panels [p_lo, p_hi),
 * with AVX-512 (the caller has checked), the weights converted in registers; the same
 * floats as the fp32 kernel on the dequantised matrix. x given packed in row blocks as
 * the fp32 kernel packs it (cpu_gemm.c's pack_blocks): ceil(m / CQG_ROWS_MAX) blocks,
 * block b rows [m b / blocks, m (b + 1) / blocks) (integer division) at xp + m0 k, its
 * element (i, kk) at kk (m1 - m0) + i. */
#define CQG_ROWS_MAX 12
void cqg_panels_avx512(float *y, const float *xp, const void *wq, uint32_t type, int32_t m,
                       int32_t n, int32_t k, int32_t p_lo, int32_t p_hi);
/* dst [k] = row r of a stored matrix (tests) */
void cqg_unpack_row(float *dst, const void *wq, uint32_t type, int32_t k, int32_t r);

#endif
