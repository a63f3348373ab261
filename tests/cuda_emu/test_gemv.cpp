// test_cuda_emu_gemv: cuda_gemv.cu's product y[m][n] = x[m][k] . w[n][k]^T run under the
// host CUDA emulator (emu.h): f32/bf16/f16, y in fp32 and in the element type; m = 1..8
// (one launch) and above (chunks of CK_GEMV_MAX_M rows plus a rest); k below, at and past
// the unrolled stride (32 lanes x 4 loads x the vector width), not a multiple of it, and
// not a multiple of the vector (the partial vector); 16-byte aligned operands (vector
// loads) and misaligned ones (the scalar path); n not a multiple of the 8 rows of a block
// (whole warps return early). Reference: double products of the same rounded inputs.
// Also: a row's result is bit-identical whatever m and the alignment (the batch-invariant
// mode relies on it), and what ck_gemv refuses. Why: no GPU in CI. Not checked: bandwidth,
// the device's FMA contraction (the emulator does not fuse).
#include "emu.h"
#include "gen_gemv.inc"

#include "drv.h"


// y for x rows [m][k] at element offset xo (misaligned when xo is not a multiple of the
// vector) and w at offset wo; checks it against the reference; returns y
template <typename T, typename Y>
static std::vector<float> run(Cases &cs, ck_dtype_t t, int m, int n, int k, int xo = 0,
                              int wo = 0, uint32_t seed = 0) {
    std::mt19937 g(seed ? seed : R());
    auto u = [&]() { return std::uniform_real_distribution<float>(-1.f, 1.f)(g); };
    Buf<T> xb((size_t)m * k + xo), wb((size_t)n * k + wo);
    Buf<Y> y((size_t)m * n);
    T *x = xb.p + xo, *w = wb.p + wo;
    for (size_t i = 0; i < (size_t)n * k; i++) w[i] = cvt<T>(u());
    for (size_t i = 0; i < (size_t)m * k; i++) x[i] = cvt<T>(u());
    int yf = std::is_same<Y, float>::value;
    std::string what = fmt("gemv %s y_f32 %d m %d n %d k %d x+%d w+%d", dt_name(t), yf, m, n,
                           k, xo, wo);
    cudaError_t e = ck_gemv(0, t, y.p, yf, x, w, m, n, k);
    std::vector<float> out((size_t)m * n);
    if (e != cudaSuccess) {
        cs.check(false, what + fmt(": error %d", (int)e));
        return out;
    }
    Err er;
    for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++) {
            double s = 0;
            for (int j = 0; j < k; j++)
                s += (double)fl(x[(size_t)r * k + j]) * fl(w[(size_t)c * k + j]);
            er.add(fl(y[(size_t)r * n + c]), s);
            out[(size_t)r * n + c] = fl(y[(size_t)r * n + c]);
        }
    cs.check(er.rel() < (yf ? 1e-5 : tol_of(t)), what + fmt(": err %.1e", er.rel()));
    return out;
}

template <typename T> static void per_type(Cases &cs, ck_dtype_t t) {
    const int V = t == CK_F32 ? 4 : 8, stride = 32 * 4 * V;   // the unrolled body's k step
    const int ks[] = {V, 5 * V, stride, 2 * stride + 37 * V, 3 * stride - V};
    for (int m = 1; m <= CK_GEMV_MAX_M; m++)
        for (int yf = 0; yf < 2; yf++) {
            int k = ks[(m + yf) % 5], n = m % 2 ? 13 : 24;   // ragged and whole blocks
            if (yf) run<T, float>(cs, t, m, n, k);
            else run<T, T>(cs, t, m, n, k);
        }
    for (int k : ks) run<T, float>(cs, t, 3, 9, k);
    // more rows than one launch takes; k not a multiple of the vector; misaligned operands
    run<T, float>(cs, t, 19, 11, 2 * stride + 8 * V);
    run<T, T>(cs, t, 16, 9, stride);
    run<T, float>(cs, t, 5, 10, 3 * V + 1);
    run<T, T>(cs, t, 2, 7, 1);
    run<T, float>(cs, t, 4, 9, stride + 2 * V, 1, 0);
    run<T, T>(cs, t, 9, 9, stride + 2 * V, 0, 3);
}

// the batch-invariant property: row r's result does not depend on m, on r's place in the
// batch, or on the alignment (vector or scalar loads)
template <typename T> static void invariance(Cases &cs, ck_dtype_t t) {
    const int V = t == CK_F32 ? 4 : 8, k = 32 * 4 * V + 5 * V, n = 10;
    Buf<T> x((size_t)20 * k + 1), w((size_t)n * k + 1), xs((size_t)k + 1);
    for (size_t i = 0; i < x.n; i++) x[i] = cvt<T>(urand());
    for (size_t i = 0; i < w.n; i++) w[i] = cvt<T>(urand());
    Buf<float> y20((size_t)20 * n), y1(n);
    bool ok = ck_gemv(0, t, y20.p, 1, x.p, w.p, 20, n, k) == cudaSuccess;
    for (int r : {0, 7, 8, 19}) {
        // row r alone, at an aligned and at a misaligned address (scalar loads)
        for (int mis = 0; mis < 2; mis++) {
            memcpy((void *)(xs.p + mis), x.p + (size_t)r * k, (size_t)k * sizeof(T));
            const T *wp = w.p;
            if (mis) {
                memmove((void *)(w.p + 1), w.p, (size_t)n * k * sizeof(T));
                wp = w.p + 1;
            }
            ok &= ck_gemv(0, t, y1.p, 1, xs.p + mis, wp, 1, n, k) == cudaSuccess;
            if (mis) memmove((void *)w.p, w.p + 1, (size_t)n * k * sizeof(T));
            for (int c = 0; c < n; c++) ok &= same_bits(y1[c], y20[(size_t)r * n + c]);
        }
    }
    cs.check(ok, fmt("gemv %s: a row's result depends on the batch or the alignment", dt_name(t)));
}

START_TEST(products) {
    Cases cs;
    per_type<float>(cs, CK_F32);
    per_type<__nv_bfloat16>(cs, CK_BF16);
    per_type<__half>(cs, CK_F16);
    printf("products: %d cases, %d failed\n", cs.n, cs.bad);
    ck_assert_int_eq(cs.bad, 0);
}
END_TEST

START_TEST(batch_invariance) {
    Cases cs;
    invariance<float>(cs, CK_F32);
    invariance<__nv_bfloat16>(cs, CK_BF16);
    invariance<__half>(cs, CK_F16);
    ck_assert_int_eq(cs.bad, 0);
}
END_TEST

START_TEST(preconditions) {
    Buf<float> x(64), w(64), y(64);
    ck_assert(ck_gemv_ok(CK_F32, x.p, w.p, 1, 4));
    ck_assert(ck_gemv_ok(CK_BF16, x.p, w.p, 8, 16));
    ck_assert(!ck_gemv_ok(CK_F32, x.p, w.p, 0, 4));
    ck_assert(!ck_gemv_ok(CK_F32, x.p, w.p, 9, 4));
    ck_assert(!ck_gemv_ok(CK_F32, x.p, w.p, 1, 6));
    ck_assert(!ck_gemv_ok(CK_BF16, x.p, w.p, 1, 12));
    ck_assert(!ck_gemv_ok(CK_F32, x.p + 1, w.p, 1, 4));
    ck_assert(!ck_gemv_ok(CK_F32, x.p, w.p + 2, 1, 4));
    ck_assert_int_eq(ck_gemv(0, CK_F32, y.p, 1, x.p, w.p, 1, 0, 4), cudaErrorInvalidValue);
    ck_assert_int_eq(ck_gemv(0, CK_F32, y.p, 1, x.p, w.p, 0, 4, 4), cudaErrorInvalidValue);
    ck_assert_int_eq(ck_gemv(0, CK_F32, y.p, 1, x.p, w.p, 1, 4, 0), cudaErrorInvalidValue);
    ck_assert_int_eq(ck_gemv(0, (ck_dtype_t)7, y.p, 1, x.p, w.p, 1, 4, 8), cudaErrorInvalidValue);
}
END_TEST

int main() { return run_suite("cuda_emu_gemv", {products, batch_invariance, preconditions}); }
