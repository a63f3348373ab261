// mma.h: the emulated nvcuda::wmma of the host CUDA emulator (emu.h), 16x16x16 fragments
// only, fp32 accumulators. Each fragment kind (matrix_a, matrix_b, accumulator) maps its
// 8 elements per lane to matrix positions through a fixed random permutation, not the
// hardware's layout (which is unspecified): code that touches fragment elements by a
// guessed position gets wrong results here. mma_sync gathers the warp's fragments, meets
// the warp, multiplies in fp32 (products of the rounded inputs, in k order), meets again.
// Not emulated: the hardware's accumulation order and rounding inside an mma, other
// shapes, tf32/int types. Checked: 32-byte aligned pointers, ldm a multiple of 16 bytes.
#pragma once
#include "emu.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

extern int perm[3][256];   // perm[kind][lane * 8 + i] = row * 16 + col

template <typename K> struct kind_of;
template <> struct kind_of<matrix_a> { enum { v = 0 }; };
template <> struct kind_of<matrix_b> { enum { v = 1 }; };
template <> struct kind_of<accumulator> { enum { v = 2 }; };

template <typename Use, int M, int N, int K, typename T, typename L = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "16x16x16 only");
    enum { num_elements = 8 };
    T x[8];
    static int idx(int i) { return perm[kind_of<Use>::v][(emu::cur->lin & 31) * 8 + i]; }
};

template <typename Use, typename T, typename L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
    constexpr bool rm = std::is_same<L, row_major>::value;
    if (ldm % (16 / sizeof(T))) emu::die("wmma ldm not a multiple of 16 bytes");
    if ((uintptr_t)p % 32) emu::die("wmma pointer not 256-bit aligned");
    for (int i = 0; i < 8; i++) {
        int e = f.idx(i), r = e >> 4, c = e & 15;
        f.x[i] = rm ? p[r * ldm + c] : p[r + c * ldm];
    }
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t l) {
    if (ldm % 4) emu::die("wmma ldm");
    if ((uintptr_t)p % 32) emu::die("wmma pointer not 256-bit aligned");
    for (int i = 0; i < 8; i++) {
        int e = f.idx(i), r = e >> 4, c = e & 15;
        f.x[i] = l == mem_row_major ? p[r * ldm + c] : p[r + c * ldm];
    }
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t l) {
    if (ldm % 4) emu::die("wmma ldm");
    if ((uintptr_t)p % 32) emu::die("wmma pointer not 256-bit aligned");
    for (int i = 0; i < 8; i++) {
        int e = f.idx(i), r = e >> 4, c = e & 15;
        (l == mem_row_major ? p[r * ldm + c] : p[r + c * ldm]) = f.x[i];
    }
}
template <typename F, typename T> void fill_fragment(F &f, T v) {
    for (int i = 0; i < 8; i++) f.x[i] = v;
}
template <typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
              const fragment<matrix_a, 16, 16, 16, T, LA> &a,
              const fragment<matrix_b, 16, 16, 16, T, LB> &b,
              const fragment<accumulator, 16, 16, 16, float> &c) {
    int w = emu::cur->lin >> 5;
    for (int i = 0; i < 8; i++) {
        emu::mA[w][a.idx(i)] = (float)a.x[i];
        emu::mB[w][b.idx(i)] = (float)b.x[i];
        emu::mC[w][c.idx(i)] = c.x[i];
    }
    emu::wait_warp(-1);
    float out[8];
    for (int i = 0; i < 8; i++) {
        int e = d.idx(i), r = e >> 4, cc = e & 15;
        float s = emu::mC[w][e];
        for (int k = 0; k < 16; k++) s += emu::mA[w][r * 16 + k] * emu::mB[w][k * 16 + cc];
        out[i] = s;
    }
    emu::wait_warp(-2);
    for (int i = 0; i < 8; i++) d.x[i] = out[i];
}
}  // namespace wmma
}  // namespace nvcuda
