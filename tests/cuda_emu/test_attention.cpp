// test_cuda_emu_attention: cuda_attention.cu's planner and kernels (decode with GQA and
// flash-decoding splits, the split combine, wmma and FMA prefill tiles) run under the
// host CUDA emulator (emu.h) against a double-precision reference, on shapes chosen to
// reach every kernel variant: head dims 2..256 (pairs and 16-byte paths, misaligned q),
// GQA groups 1..16, block sizes 1..256, decode splits, prefill tiles over a cached prefix
// plus a chunk; and the batch-invariant plan (b.invariant), where a sequence's output must
// be bit-identical alone and in a batch. The pool outside the batch's positions is NaN,
// so a stray read shows.
// Why: no GPU in CI; this is the check that the kernels compute attention at all.
// Not checked here: speed, the device's own rounding (see emu.h). `test_cuda_emu_attention
// N SEED` runs N random shapes instead (the emulator's schedule: EMU_SEED).
#include "emu.h"
#include "mma.h"
#include "gen_attention.inc"

#include "drv.h"

struct Seq { int cached, q; };
struct Cfg {
    const char *name;
    ck_dtype_t dt;
    int hd, n_heads, n_kv, bs;
    std::vector<Seq> seqs;
    int q_misalign;  // element offset of q and out (forces the pair path)
    float qs = 2.5f;
    int invariant = 0;      // the batch-invariant plan (b.invariant)
    std::vector<float> *keep = nullptr;   // receives the output when set
};

// 0 when the case passes; prints a line when it fails (or always, when verbose)
template <typename T> static int run_cfg(const Cfg &c, bool verbose) {
    const int n_layers = 2, layer = 1, hd = c.hd, bs = c.bs, nkv = c.n_kv, nh = c.n_heads;
    int ns = (int)c.seqs.size();
    std::vector<int32_t> seq_start(ns + 1), seq_len(ns), bt_start(ns + 1), pos, tok_seq;
    int nblk_total = 0;
    for (int s = 0; s < ns; s++) {
        seq_start[s] = (int)pos.size();
        for (int i = 0; i < c.seqs[s].q; i++) {
            pos.push_back(c.seqs[s].cached + i);
            tok_seq.push_back(s);
        }
        seq_len[s] = c.seqs[s].cached + c.seqs[s].q;
        bt_start[s] = nblk_total;
        nblk_total += (seq_len[s] + bs - 1) / bs;
    }
    seq_start[ns] = (int)pos.size();
    bt_start[ns] = nblk_total;
    int nt = (int)pos.size();
    int n_blocks = nblk_total + 3;
    std::vector<int32_t> perm(n_blocks);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), R);
    std::vector<int32_t> table(perm.begin(), perm.begin() + nblk_total);

    ck_kv_t kv;
    kv.dtype = c.dt;
    kv.n_layers = n_layers;
    kv.n_blocks = n_blocks;
    kv.block_size = bs;
    kv.n_kv_heads = nkv;
    kv.head_dim = hd;
    size_t pool_elems = ck_kv_at(&kv, n_layers, 0, 0, 0, 0);
    Buf<T> pool(pool_elems);
    for (size_t i = 0; i < pool_elems; i++) pool[i] = cvt<T>(NAN);
    // the real K/V of each sequence's positions (rounded); everything else stays NaN
    std::vector<std::vector<float>> K(ns), V(ns);
    // each sequence's K, V and q come from its own stream (seeded by its shape alone),
    // so a sequence's data is the same alone and within any batch
    std::vector<std::mt19937> gs;
    for (int s = 0; s < ns; s++) gs.emplace_back(7919u * c.seqs[s].cached + c.seqs[s].q);
    auto urand = [&](int s) { return std::uniform_real_distribution<float>(-1.f, 1.f)(gs[s]); };
    for (int s = 0; s < ns; s++) {
        K[s].resize((size_t)seq_len[s] * nkv * hd);
        V[s].resize(K[s].size());
        for (int j = 0; j < seq_len[s]; j++)
            for (int h = 0; h < nkv; h++)
                for (int d = 0; d < hd; d++) {
                    size_t at = ((size_t)j * nkv + h) * hd + d;
                    T kx = cvt<T>(urand(s)), vx = cvt<T>(urand(s));
                    K[s][at] = fl(kx);
                    V[s][at] = fl(vx);
                    int32_t blk = table[bt_start[s] + j / bs];
                    pool[ck_kv_at(&kv, layer, blk, 0, h, j % bs) + d] = kx;
                    pool[ck_kv_at(&kv, layer, blk, 1, h, j % bs) + d] = vx;
                }
    }
    kv.base = pool.p;
    size_t qn = (size_t)nt * nh * hd;
    Buf<T> qraw(qn + c.q_misalign), oraw(qn + c.q_misalign);
    T *q = qraw.p + c.q_misalign, *out = oraw.p + c.q_misalign;
    for (size_t i = 0; i < qn; i++)
        q[i] = cvt<T>(c.qs * urand(tok_seq[i / ((size_t)nh * hd)])), out[i] = cvt<T>(NAN);

    bk_batch_t bt;
    memset(&bt, 0, sizeof bt);
    bt.n_tokens = nt;
    bt.n_seqs = ns;
    bt.pos = pos.data();
    bt.seq_start = seq_start.data();
    bt.seq_len = seq_len.data();
    bt.bt_start = bt_start.data();
    bt.block_table = table.data();
    ck_batch_t b;
    memset(&b, 0, sizeof b);
    b.n_tokens = nt;
    b.n_seqs = ns;
#ifdef CK_INV_SPLIT
    b.invariant = c.invariant;
#else
    if (c.invariant) return 0;   /* a kernel file without the invariant plan */
#endif
    size_t cap = ck_attn_plan_cap(&bt);
    std::vector<int32_t> ints(cap + 1);
    size_t doff, poff;
    size_t k = ck_attn_plan(&bt, &kv, ints.data(), &b, &doff, &poff);
    if (k > cap) {
        printf("FAIL %s: plan of %zu ints over its cap %zu\n", c.name, k, cap);
        return 1;
    }
    b.pos = pos.data();
    b.tok_seq = tok_seq.data();
    b.seq_start = seq_start.data();
    b.bt_start = bt_start.data();
    b.block_table = table.data();
    b.dec_tok = ints.data() + doff;
    b.pf_tile = ints.data() + poff;
    std::vector<float> scratch(ck_attn_scratch_floats(&b, nh, hd) + 1, NAN);
    cudaError_t e = ck_attention(0, &kv, layer, out, q, nh, &b, scratch.data());
    if (e != cudaSuccess) {
        printf("FAIL %s: ck_attention error %d\n", c.name, (int)e);
        return 1;
    }
    // reference: softmax in double over the rounded inputs
    int g = nh / nkv;
    double worst = 0, gerr = 0, gbig = 1e-6;
    for (int t = 0; t < nt; t++) {
        int s = tok_seq[t], ctx = pos[t] + 1;
        for (int h = 0; h < nh; h++) {
            int kh = h / g;
            std::vector<double> sc(ctx), o(hd, 0.0), scale(hd, 0.0);
            double mx = -1e300, sum = 0, big = 1e-6;
            for (int j = 0; j < ctx; j++) {
                double d = 0;
                for (int x = 0; x < hd; x++)
                    d += (double)fl(q[((size_t)t * nh + h) * hd + x]) *
                         K[s][((size_t)j * nkv + kh) * hd + x];
                sc[j] = d / sqrt((double)hd);
                mx = std::max(mx, sc[j]);
            }
            for (int j = 0; j < ctx; j++) sum += sc[j] = exp(sc[j] - mx);
            // the error scale of a weighted sum: sum of |weight x value|
            for (int j = 0; j < ctx; j++)
                for (int x = 0; x < hd; x++) {
                    double v = V[s][((size_t)j * nkv + kh) * hd + x];
                    o[x] += sc[j] / sum * v;
                    scale[x] += sc[j] / sum * fabs(v);
                }
            for (int x = 0; x < hd; x++) big = std::max(big, std::max(fabs(o[x]), scale[x]));
            gbig = std::max(gbig, big);
            for (int x = 0; x < hd; x++) {
                double got = fl(out[((size_t)t * nh + h) * hd + x]);
                double d = fabs(got - o[x]), err = d / big;
                if (!(d <= gerr)) gerr = std::isnan(got) ? INFINITY : d;
                if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;
            }
        }
    }
    if (c.keep) {
        c.keep->resize(qn);
        for (size_t i = 0; i < qn; i++) (*c.keep)[i] = fl(out[i]);
    }
    // fp32: every row within 1e-5 of its own scale; 16-bit: the output within 1e-2 of the
    // output's scale (the project's norm-relative measure), no row over 5e-2
    double tol = tol_of(c.dt);
    gerr /= gbig;
    int bad = c.dt == CK_F32 ? !(worst <= tol) : !(gerr <= tol) || !(worst < 5 * tol);
    if (bad || verbose)
        printf("%s %-34s err %.2e (norm %.1e, tol %.0e) n_dec %d splits %d x %d n_pf %d\n",
               bad ? "FAIL" : "ok  ", c.name, worst, gerr, tol, b.n_dec, b.dec_splits,
               b.dec_split_len, b.n_pf);
    return bad;
}

static int run_any(const Cfg &c, bool verbose = false) {
    switch (c.dt) {
    case CK_F32: return run_cfg<float>(c, verbose);
    case CK_BF16: return run_cfg<__nv_bfloat16>(c, verbose);
    default: return run_cfg<__half>(c, verbose);
    }
}

static const std::vector<Seq> mix = {{0, 1}, {16, 1}, {299, 1}, {40, 5}, {50, 70}, {0, 9}};
static const std::vector<Seq> pf = {{0, 130}, {64, 64}, {3, 20}};
static const std::vector<Seq> dec_long = {{900, 1}, {5, 1}, {1000, 3}};

static int run_list(const std::vector<Cfg> &cfgs) {
    int fails = 0;
    for (const Cfg &c : cfgs) fails += run_any(c);
    printf("%d cases, %d failed\n", (int)cfgs.size(), fails);
    return fails;
}

START_TEST(decode_and_mixed) {
    // decode lanes per position (hd 8 .. 256), GQA groups 1, 2, 3, 4, 5, 8, 12, block
    // sizes 1 .. 256, misaligned q (pairs path), flash-decoding splits
    std::vector<Cfg> cfgs = {
        {"f32 hd8 8/4 bs16 mix", CK_F32, 8, 8, 4, 16, mix, 0},
        {"bf16 hd8 8/4 bs16 mix", CK_BF16, 8, 8, 4, 16, mix, 0},
        {"bf16 hd64 9/3 bs16 mix", CK_BF16, 64, 9, 3, 16, mix, 0},
        {"f16 hd64 9/3 bs16 mix", CK_F16, 64, 9, 3, 16, mix, 0},
        {"bf16 hd128 8/1 bs16 mix", CK_BF16, 128, 8, 1, 16, mix, 0},
        {"f32 hd128 2/2 bs16 mix", CK_F32, 128, 2, 2, 16, mix, 0},
        {"f32 hd6 12/1 bs7 mix", CK_F32, 6, 12, 1, 7, mix, 0},
        {"f32 hd64 4/2 bs1 mix", CK_F32, 64, 4, 2, 1, mix, 0},
        {"bf16 hd64 4/4 bs256 mix", CK_BF16, 64, 4, 4, 256, mix, 0},
        {"bf16 hd64 6/2 misaligned mix", CK_BF16, 64, 6, 2, 16, mix, 2},
        {"f32 hd64 6/2 misaligned mix", CK_F32, 64, 6, 2, 16, mix, 2},
        {"bf16 hd64 8/2 dec splits", CK_BF16, 64, 8, 2, 16, dec_long, 0},
        {"f32 hd32 4/1 dec splits bs5", CK_F32, 32, 4, 1, 5, dec_long, 0},
        {"f16 hd128 40/5 dec splits bs1", CK_F16, 128, 40, 5, 1, dec_long, 0},
        {"f32 hd256 2/1 mix", CK_F32, 256, 2, 1, 16, mix, 0},
        {"bf16 hd256 2/1 mix", CK_BF16, 256, 2, 1, 16, mix, 0},
        {"bf16 hd2 2/1 bs3 mix", CK_BF16, 2, 2, 1, 3, mix, 0},
        {"bf16 hd64 4/2 200 decodes", CK_BF16, 64, 4, 2, 16, std::vector<Seq>(200, Seq{20, 1}), 0},
        {"bf16 hd64 4/2 mix big scores", CK_BF16, 64, 4, 2, 16, mix, 0, 60.f},
        {"f32 hd32 4/2 mix big scores", CK_F32, 32, 4, 2, 16, mix, 0, 60.f},
    };
    ck_assert_int_eq(run_list(cfgs), 0);
}
END_TEST

START_TEST(prefill_tiles) {
    // wmma tiles (hd 16 .. 256 paddings) and the fp32 FMA kernel, over a cached prefix
    // plus a chunk, several tiles per sequence; the wmma kernel single-buffered
    // (TWIN_CUDA_PF_DB=0) and with its K/V tiles double-buffered by cp.async (=1; the
    // emulator lands a copy only when its thread waits for it); misaligned q: the
    // single-buffered kernel whatever the switch says
    std::vector<Cfg> cfgs = {
        {"f16 hd128 8/1 bs16 pf", CK_F16, 128, 8, 1, 16, pf, 0},
        {"bf16 hd80 5/5 mix", CK_BF16, 80, 5, 5, 16, mix, 0},
        {"f16 hd96 6/3 pf", CK_F16, 96, 6, 3, 16, pf, 0},
        {"f32 hd200 3/3 pf", CK_F32, 200, 3, 3, 16, pf, 0},
        {"bf16 hd200 3/1 mix", CK_BF16, 200, 3, 1, 16, mix, 0},
        {"f32 hd34 6/2 mix", CK_F32, 34, 6, 2, 16, mix, 0},
        {"bf16 hd160 4/2 mix", CK_BF16, 160, 4, 2, 16, mix, 0},
        {"f16 hd192 4/4 pf", CK_F16, 192, 4, 4, 16, pf, 0},
        {"bf16 hd16 2/1 bs1 pf", CK_BF16, 16, 2, 1, 1, pf, 0},
        {"f32 hd8 2/2 bs1 pf", CK_F32, 8, 2, 2, 1, pf, 0},
        {"f16 hd64 4/2 mix big scores", CK_F16, 64, 4, 2, 16, mix, 0, 60.f},
        {"bf16 hd128 8/2 bs16 pf", CK_BF16, 128, 8, 2, 16, pf, 0},
        {"bf16 hd64 4/2 misaligned pf", CK_BF16, 64, 4, 2, 16, pf, 2},
    };
    for (const char *db : {"0", "1"}) {
        setenv("TWIN_CUDA_PF_DB", db, 1);
        printf("TWIN_CUDA_PF_DB=%s: ", db);
        ck_assert_int_eq(run_list(cfgs), 0);
    }
    unsetenv("TWIN_CUDA_PF_DB");
}
END_TEST

START_TEST(invariant_plan) {
    // b.invariant: every token through the decode kernel with a fixed split length; a
    // sequence's output must then be bit-identical alone and in any batch
    const std::vector<Seq> big = {{0, 1}, {600, 1}, {40, 5}, {50, 70}, {0, 9}};
    int fails = 0, n = 0;
    for (ck_dtype_t dt : {CK_F32, CK_BF16, CK_F16})
        for (int hd : {8, 64, 128}) {
            std::vector<float> all, alone;
            std::string name = fmt("invariant %s hd%d 8/2", dt_name(dt), hd);
            Cfg c = {name.c_str(), dt, hd, 8, 2, 16, big, 0};
            c.invariant = 1;
            c.keep = &all;
            fails += run_any(c);
            for (int s = 0; s < (int)big.size(); s++) {
                Cfg one = c;
                one.seqs = {big[s]};
                one.keep = &alone;
                fails += run_any(one);
                size_t at = 0;   // the sequence's first token in the batch
                for (int i = 0; i < s; i++) at += (size_t)big[i].q * 8 * hd;
                bool same = alone.size() <= all.size() - at;
                for (size_t i = 0; same && i < alone.size(); i++) same = same_bits(alone[i], all[at + i]);
                n++;
                if (!same) {
                    fails++;
                    printf("FAIL %s: sequence %d alone differs from its batch\n", name.c_str(), s);
                }
            }
        }
    printf("invariant plan: %d batch comparisons, %d failures\n", n, fails);
    ck_assert_int_eq(fails, 0);
}
END_TEST

START_TEST(invalid_arguments) {
    // what ck_attention refuses before any launch
    ck_kv_t kv;
    memset(&kv, 0, sizeof kv);
    ck_batch_t b;
    memset(&b, 0, sizeof b);
    Buf<float> pool(64), q(64), out(64);
    int32_t pos[1] = {0}, bt[1] = {0}, tab[1] = {0}, dec[1] = {0}, seq[1] = {0};
    kv.base = pool.p, kv.dtype = CK_F32, kv.n_layers = 1, kv.n_blocks = 1, kv.block_size = 1;
    kv.n_kv_heads = 1, kv.head_dim = 4;
    b.n_tokens = 1, b.n_seqs = 1, b.n_dec = 1, b.dec_splits = 1;
    b.dec_split_len = 1, b.pos = pos, b.bt_start = bt, b.block_table = tab, b.dec_tok = dec;
    b.tok_seq = seq;
    ck_assert_int_eq(ck_attention(0, &kv, 0, out.p, q.p, 1, &b, NULL), cudaSuccess);
    kv.head_dim = 3;
    ck_assert_int_eq(ck_attention(0, &kv, 0, out.p, q.p, 1, &b, NULL), cudaErrorInvalidValue);
    kv.head_dim = 258;
    ck_assert_int_eq(ck_attention(0, &kv, 0, out.p, q.p, 1, &b, NULL), cudaErrorInvalidValue);
    kv.head_dim = 4;
    ck_assert_int_eq(ck_attention(0, &kv, 0, out.p, q.p, 0, &b, NULL), cudaErrorInvalidValue);
    ck_assert_int_eq(ck_attention(0, &kv, 1, out.p, q.p, 1, &b, NULL), cudaErrorInvalidValue);
    b.dec_splits = 2;
    ck_assert_int_eq(ck_attention(0, &kv, 0, out.p, q.p, 1, &b, NULL), cudaErrorInvalidValue);
}
END_TEST

int main(int argc, char **argv) {
    if (argc > 2) {   // random mode: N SEED
        int n = atoi(argv[1]), fails = 0;
        std::mt19937 g(atoi(argv[2]));
        auto ri = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
        for (int i = 0; i < n; i++) {
            Cfg c;
            c.dt = (ck_dtype_t)ri(0, 2);
            const int hds[] = {2, 4, 6, 8, 10, 16, 24, 32, 34, 48, 64, 72, 80, 96, 112, 120,
                               128, 144, 160, 192, 200, 232, 256};
            c.hd = hds[ri(0, 22)];
            c.n_kv = ri(1, 3);
            const int gs[] = {1, 2, 3, 4, 5, 7, 8, 9, 16};
            c.n_heads = c.n_kv * gs[ri(0, 8)];
            const int bss[] = {1, 2, 3, 5, 16, 16, 16, 32, 64, 256};
            c.bs = bss[ri(0, 9)];
            c.q_misalign = ri(0, 5) == 0 ? 2 : 0;
            int nseq = ri(1, 6);
            for (int k = 0; k < nseq; k++) {
                const int qs[] = {1, 1, 2, 8, 9, 63, 64, 65, 100, 129};
                int q = ri(0, 4) < 2 ? 1 : qs[ri(0, 9)];
                int cached = ri(0, 3) == 0 ? 0 : ri(0, ri(0, 1) ? 40 : 700);
                c.seqs.push_back({cached, q});
            }
            long work = 0;   // cost control for the emulator
            for (auto &q : c.seqs) work += (long)q.q * (q.cached + q.q);
            if (work * c.n_heads * c.hd > 120000000L) { i--; continue; }
            std::string name = fmt("rnd%d %s hd%d %d/%d bs%d mis%d", i, dt_name(c.dt), c.hd,
                                   c.n_heads, c.n_kv, c.bs, c.q_misalign);
            c.name = name.c_str();
            fails += run_any(c, true);
        }
        printf("%d failures\n", fails);
        return fails != 0;
    }
    return run_suite("cuda_emu_attention", {decode_and_mixed, prefill_tiles, invariant_plan,
                                                  invalid_arguments});
}
