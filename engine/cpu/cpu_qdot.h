/* cpu_qdot: products of Q8_0 and Q4_0 matrices (cpu_qgemm.h's layout) with activations
 * quantised per block of 32, as integer dot products: llama.cpp's scheme, which the CPU
 * backend uses for these two types (F16/BF16 keep fp32 activations: cpu_qgemm.h).
 *
 * Why: with fp32 activations each weight costs a convert, a scale and an FMA per row, and
 * a batch-1 Q4_0 product ran compute-bound at 41 G weights/s per core, under its memory
 * roof; an int8 dot product (AVX-512 VNNI vpdpbusd: 64 multiply-adds per instruction)
 * leaves the product bound by the bytes it streams, and batched products run 2-3x the
 * fp32 kernel's multiply-adds per cycle.
 *
 * Activations (cqd_act_t): row r of x [m][k], block b (steps 32b .. 32b + 31):
 *   amax = max |x_i|; d = amax / 127; q_i = rint(x_i * (127 / amax)) (ties to even,
 *   clamped to +-127); s = sum q_i. amax < 1e-30 (zeros, or so small that 127 / amax
 *   would overflow): d = 0, q = 0. A NaN or infinity in the
 *   block: d = NaN, q = 0, so that the outputs are NaN as the fp32 product's would be.
 * Product: y[r][c] = sum over blocks b in order of
 *   acc = fmaf((float) isum, dw[c][b] * d[r][b], acc), acc from +0,
 * where isum = sum_i w[c][32b + i] q[r][32b + i] exactly (int32) and dw the block's fp16
 * scale. Every kernel (portable, AVX2, AVX-512 VNNI) and every row count computes exactly
 * this, so results are bit-identical across kernels, batch compositions and thread
 * counts (each output is one row's own sum).
 *
 * Accuracy against the fp32 product of the same weights: the activation's rounding is at
 * most d / 2 per element, so |error| <= sum_b (d[r][b] / 2) sum_i |w_ci| (plus fp32
 * rounding): about 0.4% of the block's largest activation per weight magnitude.
 *
 * Weight bytes (cpu_qgemm.h): per panel of 16 columns, per block, 16 fp16 scales then
 * the weights as unsigned bytes u in VNNI order (4 consecutive steps of a column in one
 * dword): Q8_0 u = q + 128 at 32 + 64 g + 4 c + i for step 4 g + i (g < 8); Q4_0 the nibble
 * n (weight n - 8) of step 4 v + i in the low half of byte 32 + 64 v + 4 c + i and that of
 * step 16 + 4 v + i in its high half (v < 4). So isum = sum u q - o s, o = 128 or 8.
 *
 * Ownership: pure functions over caller buffers. */
#ifndef TWIN_CPU_QDOT_H
#define TWIN_CPU_QDOT_H

#include <stddef.h>
#include <stdint.h>

#define CQD_BLOCK 32

/* Quantised activations of m rows of k inputs (k a multiple of 32): views into one
 * buffer of cqd_act_bytes(m, k) bytes, 64-byte aligned. */
typedef struct {
    int8_t *q;      /* [m][k] */
    float *d;       /* [m][k / 32] */
    int32_t *s;     /* [m][k / 32] */
    int32_t m, k;
} cqd_act_t;

size_t cqd_act_bytes(int32_t m, int32_t k);
/* binds a to buf (cqd_act_bytes(m, k) bytes, 64-byte aligned) */
void cqd_act_bind(cqd_act_t *a, void *buf, int32_t m, int32_t k);

enum { CQD_PORTABLE = 0, CQD_AVX2 = 1, CQD_VNNI = 2 };
/* the integer kernels this CPU can run at most (CQD_VNNI: AVX-512 F/BW/VL + VNNI;
 * CQD_AVX2: AVX2 + FMA + F16C) */
int cqd_cpu_level(void);

/* rows [r0, r1) of x [m][k] into a (a's rows; the caller splits rows over threads) */
void cqd_quantize(cqd_act_t *a, const float *x, int32_t r0, int32_t r1, int level);

/* y [m][n] (row-major) = a's m rows times the stored Q8_0 / Q4_0 matrix wq [n][k], output
 * columns of panels [p_lo, p_hi) only; level no higher than cqd_cpu_level() */
void cqd_panels(float *y, const cqd_act_t *a, const void *wq, uint32_t type, int32_t n,
                int32_t p_lo, int32_t p_hi, int level);

/* the kernels by level, for cqd_panels (same contract) */
void cqd_panels_portable(float *y, const cqd_act_t *a, const void *wq, uint32_t type,
                         int32_t n, int32_t p_lo, int32_t p_hi);
void cqd_panels_avx2(float *y, const cqd_act_t *a, const void *wq, uint32_t type, int32_t n,
                     int32_t p_lo, int32_t p_hi);
void cqd_panels_vnni(float *y, const cqd_act_t *a, const void *wq, uint32_t type, int32_t n,
                     int32_t p_lo, int32_t p_hi);

#endif
