// test_cuda_emu_ops: cuda_ops.cu's kernels (conversions, dummy weights, embedding,
// RMSNorm with and without the residual and with out aliasing the residual, RoPE with the
// K/V write into the paged pool (one block per token, and a token's heads over several
// blocks), SiLU-mul (16-byte vectors and scalars, in place too, bit for bit the same
// formula), add in every kind combination, row gather) run
// under the host CUDA emulator (emu.h) in f32, bf16 and f16, against plain references in
// this file (double arithmetic on the same rounded inputs; exact copies compared bit for
// bit; RoPE also bit for bit against the CPU's float formula, on host sincos). Outputs
// start NaN, so an element a kernel skips shows; the pool's other slots must stay NaN.
// Why: no GPU in CI. Not checked: speed, device math's own rounding (device sincos may
// differ from the host's in the last double bit, very rarely a float bit).
#include "emu.h"
#include "gen_ops.inc"

#include "drv.h"

template <typename T> static ck_dtype_t dt_of();
template <> ck_dtype_t dt_of<float>() { return CK_F32; }
template <> ck_dtype_t dt_of<__nv_bfloat16>() { return CK_BF16; }
template <> ck_dtype_t dt_of<__half>() { return CK_F16; }


// rounded random values of T in [-s, s)
template <typename T> static void fill(Buf<T> &b, float s = 1.f) {
    for (size_t i = 0; i < b.n; i++) b[i] = cvt<T>(s * urand());
}

// element counts: below one block, ragged, and (f32 once) past the 4096-block grid cap so
// the grid-stride loops wrap
static const size_t sizes[] = {1, 255, 1000, 4097, 70001};

template <typename T> static void t_convert(Cases &cs) {
    ck_dtype_t t = dt_of<T>();
    for (size_t n : sizes) {
        Buf<float> src(n), back(n);
        Buf<T> dst(n);
        for (size_t i = 0; i < n; i++) src[i] = 3.f * urand();
        src[0] = n > 1 ? 1e-40f : src[0];   // a denormal
        cs.check(ck_from_f32(0, t, dst.p, src.p, n) == cudaSuccess, "from_f32 launch");
        bool ok = true;
        for (size_t i = 0; i < n; i++) ok &= same_bits(dst[i], cvt<T>(src[i]));
        cs.check(ok, fmt("from_f32 %s n %zu", dt_name(t), n));
        cs.check(ck_to_f32(0, t, back.p, dst.p, n) == cudaSuccess, "to_f32 launch");
        ok = true;
        for (size_t i = 0; i < n; i++) ok &= same_bits(back[i], fl(dst[i]));
        cs.check(ok, fmt("to_f32 %s n %zu", dt_name(t), n));
    }
    cs.check(ck_from_f32(0, t, NULL, NULL, 0) == cudaSuccess, "from_f32 n 0");
}

template <typename T> static void t_dummy(Cases &cs) {
    ck_dtype_t t = dt_of<T>();
    const uint64_t seeds[] = {0, 7, 0xdeadbeefcafeull};
    for (uint64_t seed : seeds)
        for (size_t n : {(size_t)1, (size_t)3000}) {
            uint64_t tensor = DUMMY_T_LAYER(seed % 5, DUMMY_K_W2), off = seed * 977 % 100003;
            Buf<T> dst(n);
            cs.check(ck_gen_dummy(0, t, dst.p, n, seed, tensor, off) == cudaSuccess, "gen_dummy");
            bool ok = true;
            for (size_t i = 0; i < n; i++)
                ok &= same_bits(dst[i], cvt<T>(dummy_weight(seed, tensor, off + i)));
            cs.check(ok, fmt("gen_dummy %s seed %llu n %zu", dt_name(t),
                             (unsigned long long)seed, n));
        }
}

template <typename T> static void t_embed(Cases &cs) {
    ck_dtype_t t = dt_of<T>();
    for (int dim : {1, 33, 64, 1500}) {
        const int vocab = 50, nt = 7;
        Buf<T> table((size_t)vocab * dim);
        fill(table);
        std::vector<int32_t> tok(nt);
        for (int i = 0; i < nt; i++) tok[i] = irand(0, vocab - 1);
        tok[nt - 1] = tok[0];
        Buf<float> x((size_t)nt * dim);
        ck_batch_t b;
        memset(&b, 0, sizeof b);
        b.n_tokens = nt;
        b.tokens = tok.data();
        cs.check(ck_embed(0, t, x.p, table.p, dim, &b) == cudaSuccess, "embed launch");
        bool ok = true;
        for (int i = 0; i < nt; i++)
            for (int j = 0; j < dim; j++)
                ok &= same_bits(x[(size_t)i * dim + j], fl(table[(size_t)tok[i] * dim + j]));
        cs.check(ok, fmt("embed %s dim %d", dt_name(t), dim));
    }
}

// res_mode: 0 none, 1 separate residual, 2 out aliases the residual
template <typename T> static void t_rmsnorm(Cases &cs) {
    ck_dtype_t t = dt_of<T>();
    for (int dim : {1, 31, 64, 1000, 2050})
        for (int res_mode = 0; res_mode < 3; res_mode++) {
            const int m = 3;
            const float eps = 1e-5f;
            size_t n = (size_t)m * dim;
            Buf<float> x(n), x0(n);
            Buf<T> res(n), w(dim), out(n);
            for (size_t i = 0; i < n; i++) x0[i] = x[i] = 2.f * urand();
            fill(res);
            fill(w);
            std::vector<float> r0(n);
            for (size_t i = 0; i < n; i++) r0[i] = fl(res[i]);
            T *o = res_mode == 2 ? res.p : out.p;
            cudaError_t e = ck_rmsnorm(0, t, o, x.p, res_mode ? res.p : NULL, w.p, m, dim, eps);
            cs.check(e == cudaSuccess, "rmsnorm launch");
            Err ex, eo;
            for (int r = 0; r < m; r++) {
                double ss = 0;
                std::vector<double> v(dim);
                for (int j = 0; j < dim; j++) {
                    size_t i = (size_t)r * dim + j;
                    v[j] = res_mode ? (double)(x0[i] + r0[i]) : x0[i];
                    ss += v[j] * v[j];
                    ex.add(x[i], v[j]);
                }
                double sc = 1.0 / sqrt(ss / dim + eps);
                for (int j = 0; j < dim; j++)
                    eo.add(fl(o[(size_t)r * dim + j]), v[j] * sc * fl(w[j]));
            }
            cs.check(ex.err == 0 && eo.rel() < tol_of(t),
                     fmt("rmsnorm %s dim %d residual mode %d: x err %.1e out err %.1e",
                         dt_name(t), dim, res_mode, ex.err, eo.rel()));
        }
    Buf<float> x(4);
    Buf<T> w(4);
    cs.check(ck_rmsnorm(0, t, w.p, x.p, NULL, w.p, 0, 4, 1e-5f) == cudaErrorInvalidValue,
             "rmsnorm m 0 refused");
}

struct RopeCase { int nh, nkv, hd, bs; };

template <typename T> static void t_rope(Cases &cs) {
    ck_dtype_t t = dt_of<T>();
    const RopeCase rc[] = {{8, 8, 8, 16}, {8, 2, 64, 1}, {12, 1, 128, 16}, {4, 4, 64, 16},
                           {2, 1, 6, 3}};
    // n_sm 1: one block per token; 0 (132) and 7: a token's heads over several blocks
    for (int n_sm : {1, 0, 7})
    for (const RopeCase &c : rc) {
        // three sequences: a fresh prefill, a decode deep in its context, a chunk
        const int cached[] = {0, 37, 5}, newt[] = {5, 1, 4};
        const int ns = 3, n_layers = 2, layer = 1;
        std::vector<int32_t> pos, tok_seq, bt_start(ns + 1), table;
        int nblk = 0;
        for (int s = 0; s < ns; s++) {
            bt_start[s] = nblk;
            for (int i = 0; i < newt[s]; i++) pos.push_back(cached[s] + i), tok_seq.push_back(s);
            nblk += (cached[s] + newt[s] + c.bs - 1) / c.bs;
        }
        bt_start[ns] = nblk;
        int n_blocks = nblk + 2;
        std::vector<int32_t> perm(n_blocks);
        for (int i = 0; i < n_blocks; i++) perm[i] = i;
        std::shuffle(perm.begin(), perm.end(), R);
        table.assign(perm.begin(), perm.begin() + nblk);
        int nt = (int)pos.size();
        ck_kv_t kv;
        memset(&kv, 0, sizeof kv);
        kv.dtype = t, kv.n_layers = n_layers, kv.n_blocks = n_blocks, kv.block_size = c.bs;
        kv.n_kv_heads = c.nkv, kv.head_dim = c.hd;
        size_t pool_n = ck_kv_at(&kv, n_layers, 0, 0, 0, 0);
        Buf<T> pool(pool_n);
        kv.base = pool.p;
        size_t qd = (size_t)c.nh * c.hd, kvd = (size_t)c.nkv * c.hd;
        Buf<T> q(nt * qd), k(nt * kvd), v(nt * kvd);
        fill(q, 2.f);
        fill(k, 2.f);
        fill(v, 2.f);
        std::vector<float> q0(q.n), k0(k.n);
        for (size_t i = 0; i < q.n; i++) q0[i] = fl(q[i]);
        for (size_t i = 0; i < k.n; i++) k0[i] = fl(k[i]);
        std::vector<float> inv(c.hd / 2);
        for (int f = 0; f < c.hd / 2; f++) inv[f] = (float)pow(10000.0, -2.0 * f / c.hd);
        ck_batch_t b;
        memset(&b, 0, sizeof b);
        b.n_tokens = nt, b.n_seqs = ns, b.pos = pos.data(), b.tok_seq = tok_seq.data();
        b.bt_start = bt_start.data(), b.block_table = table.data(), b.n_sm = n_sm;
        cs.check(ck_rope_kv(0, &kv, layer, q.p, k.p, v.p, c.nh, inv.data(), &b) == cudaSuccess,
                 "rope_kv launch");
        Err eq, ek;
        size_t inexact = 0;
        bool pool_ok = true;
        std::vector<char> written(pool_n, 0);
        for (int ti = 0; ti < nt; ti++) {
            int p = pos[ti], s = tok_seq[ti];
            for (int h = 0; h < c.nh + c.nkv; h++)
                for (int f = 0; f < c.hd / 2; f++) {
                    double a = (double)p * inv[f], cc = cos(a), sn = sin(a);
                    bool isq = h < c.nh;
                    size_t at = isq ? ti * qd + (size_t)h * c.hd : ti * kvd + (size_t)(h - c.nh) * c.hd;
                    const float *src = isq ? q0.data() : k0.data();
                    T *got = isq ? q.p : k.p;
                    double x0 = src[at + 2 * f], x1 = src[at + 2 * f + 1];
                    Err &e = isq ? eq : ek;
                    e.add(fl(got[at + 2 * f]), x0 * cc - x1 * sn);
                    e.add(fl(got[at + 2 * f + 1]), x0 * sn + x1 * cc);
                    // the CPU's float formula (angles rounded to float, products rounded
                    // before the sum): the kernel must match it bit for bit
                    float c32 = (float)cc, s32 = (float)sn, a0 = (float)x0, a1 = (float)x1;
                    inexact += !same_bits(got[at + 2 * f], cvt<T>(a0 * c32 - a1 * s32)) ||
                               !same_bits(got[at + 2 * f + 1], cvt<T>(a0 * s32 + a1 * c32));
                }
            int blk = table[bt_start[s] + p / c.bs], slot = p % c.bs;
            for (int h = 0; h < c.nkv; h++)
                for (int d = 0; d < c.hd; d++) {
                    size_t ko = ck_kv_at(&kv, layer, blk, 0, h, slot) + d;
                    size_t vo = ck_kv_at(&kv, layer, blk, 1, h, slot) + d;
                    size_t i = ti * kvd + (size_t)h * c.hd + d;
                    pool_ok &= same_bits(pool[ko], k[i]) && same_bits(pool[vo], v[i]);
                    written[ko] = written[vo] = 1;
                }
        }
        size_t stray = 0;
        for (size_t i = 0; i < pool_n; i++)
            if (!written[i]) stray += !same_bits(pool[i], cvt<T>(NAN)) && !std::isnan(fl(pool[i]));
        cs.check(eq.rel() < tol_of(t) && ek.rel() < tol_of(t) && pool_ok && !stray && !inexact,
                 fmt("rope_kv %s %d/%d hd %d bs %d sms %d: q err %.1e k err %.1e, %zu not "
                     "as the CPU rounds, pool %s, %zu stray", dt_name(t), c.nh, c.nkv, c.hd,
                     c.bs, n_sm,
                     eq.rel(), ek.rel(), inexact, pool_ok ? "ok" : "WRONG", stray));
    }
    ck_kv_t kv;
    memset(&kv, 0, sizeof kv);
    kv.dtype = t, kv.n_layers = 1, kv.head_dim = 5, kv.n_kv_heads = 1, kv.block_size = 1;
    ck_batch_t b;
    memset(&b, 0, sizeof b);
    b.n_tokens = 1;
    cs.check(ck_rope_kv(0, &kv, 0, NULL, NULL, NULL, 1, NULL, &b) == cudaErrorInvalidValue,
             "rope_kv odd head_dim refused");
}

// n elements at an offset of `mis` elements from 16-byte alignment (0: the 16-byte vector
// path when n allows), in place (out = gate, as the forward pass calls it) or not; every
// element must be what the scalar formula gives, bit for bit
template <typename T> static void t_silu(Cases &cs) {
    ck_dtype_t t = dt_of<T>();
    for (size_t n : {(size_t)1, (size_t)777, (size_t)5000, (size_t)8, (size_t)4096})
        for (int mis = 0; mis < 2; mis++)
            for (int in_place = 0; in_place < 2; in_place++) {
                Buf<T> g(n + 1), u(n + 1), o(n + 1);
                fill(g, 8.f);
                fill(u, 2.f);
                T *gp = g.p + mis, *up = u.p + mis, *op = in_place ? gp : o.p + mis;
                std::vector<T> g0(gp, gp + n);
                cs.check(ck_silu_mul(0, t, op, gp, up, n) == cudaSuccess, "silu_mul launch");
                Err e;
                size_t inexact = 0;
                for (size_t i = 0; i < n; i++) {
                    double gg = fl(g0[i]);
                    e.add(fl(op[i]), gg / (1 + exp(-gg)) * fl(up[i]));
                    float gf = fl(g0[i]);
                    inexact += !same_bits(op[i], cvt<T>(gf / (1.0f + expf(-gf)) * fl(up[i])));
                }
                cs.check(e.rel() < tol_of(t) && !inexact,
                         fmt("silu_mul %s n %zu misaligned %d in place %d: err %.1e, %zu "
                             "differ from the scalar formula", dt_name(t), n, mis, in_place,
                             e.rel(), inexact));
            }
}

template <typename X, typename Y> static void add_case(Cases &cs, ck_dtype_t t, size_t n) {
    Buf<X> x(n);
    Buf<Y> y(n);
    fill(x, 3.f);
    fill(y, 3.f);
    std::vector<double> ref(n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)fl(x[i]) + fl(y[i]);
    int xf = std::is_same<X, float>::value, yf = std::is_same<Y, float>::value;
    cs.check(ck_add(0, t, x.p, xf, y.p, yf, n) == cudaSuccess, "add launch");
    Err e;
    for (size_t i = 0; i < n; i++) e.add(fl(x[i]), ref[i]);
    double tol = xf ? 1e-6 : tol_of(t);   // an fp32 x holds the sum rounded once
    cs.check(e.rel() < tol, fmt("add %s x_f32 %d y_f32 %d n %zu err %.1e", dt_name(t), xf, yf,
                                n, e.rel()));
}

template <typename T> static void t_add(Cases &cs) {
    ck_dtype_t t = dt_of<T>();
    for (size_t n : {(size_t)3, (size_t)4099}) {
        add_case<float, float>(cs, t, n);
        add_case<float, T>(cs, t, n);
        add_case<T, float>(cs, t, n);
        add_case<T, T>(cs, t, n);
    }
}

static void t_gather(Cases &cs) {
    for (size_t es : {(size_t)4, (size_t)2})
        for (int dim : {1, 3, 64, 301}) {
            const int rows = 9, ns = 4;
            size_t rb = dim * es;
            Buf<unsigned char> x(rows * rb), out(ns * rb);
            for (size_t i = 0; i < x.n; i++) x[i] = (unsigned char)irand(0, 255);
            std::vector<int32_t> sr = {8, 0, 3, 8};
            ck_batch_t b;
            memset(&b, 0, sizeof b);
            b.n_sample = ns;
            b.sample_rows = sr.data();
            cs.check(ck_gather_rows(0, out.p, x.p, dim, es, &b) == cudaSuccess, "gather launch");
            bool ok = true;
            for (int j = 0; j < ns; j++) ok &= !memcmp(out.p + j * rb, x.p + sr[j] * rb, rb);
            cs.check(ok, fmt("gather_rows esize %zu dim %d", es, dim));
            cs.check(ck_gather_rows(0, x.p, x.p, dim, es, &b) == cudaErrorInvalidValue,
                     "gather in place refused");
        }
}

#define PER_TYPE(fn)                                                                     \
    do {                                                                                 \
        Cases cs;                                                                        \
        fn<float>(cs);                                                                   \
        fn<__nv_bfloat16>(cs);                                                           \
        fn<__half>(cs);                                                                  \
        printf("%s: %d cases, %d failed\n", #fn, cs.n, cs.bad);                          \
        ck_assert_int_eq(cs.bad, 0);                                                     \
    } while (0)

START_TEST(convert) { PER_TYPE(t_convert); }
END_TEST
START_TEST(dummy) { PER_TYPE(t_dummy); }
END_TEST
START_TEST(embed) { PER_TYPE(t_embed); }
END_TEST
START_TEST(rmsnorm) { PER_TYPE(t_rmsnorm); }
END_TEST
START_TEST(rope_kv) { PER_TYPE(t_rope); }
END_TEST
START_TEST(silu_mul) { PER_TYPE(t_silu); }
END_TEST
START_TEST(add) { PER_TYPE(t_add); }
END_TEST
START_TEST(gather) {
    Cases cs;
    t_gather(cs);
    printf("t_gather: %d cases, %d failed\n", cs.n, cs.bad);
    ck_assert_int_eq(cs.bad, 0);
}
END_TEST
START_TEST(grid_stride) {
    // past the 4096-block cap: every block loops; fp32 add alone (the emulator is slow)
    Cases cs;
    long long b0 = emu::blocks_run;
    add_case<float, float>(cs, CK_F32, (size_t)4096 * 256 + 1001);
    printf("grid_stride: %lld blocks\n", emu::blocks_run - b0);
    ck_assert_int_eq(cs.bad, 0);
}
END_TEST

int main() {
    return run_suite("cuda_emu_ops", {convert, dummy, embed, rmsnorm, rope_kv, silu_mul, add,
                                      gather, grid_stride});
}
