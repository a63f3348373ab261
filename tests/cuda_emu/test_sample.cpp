// test_cuda_emu_sample: cuda_sample.cu's ck_sample, host code and kernels (greedy_kernel,
// select_kernel's candidate path, prep_kernel and sorted_kernel around the sort), run under
// the host CUDA emulator (emu.h) with cub_emu.h standing in for CUB's segmented radix sort,
// against the reference engine/sampler.c: every id must equal sampler_pick's (sampler_argmax
// for all-greedy batches). Rows mix greedy, temperature, top-k (below and above the
// candidate cap), top-p, ties, -0/+0, -inf and flat rows; a second sampler with
// TWIN_CUDA_SAMPLE_SORT=1 sends every sampled row down the sort path. The sort's buffers
// exist only once a row needed the sort, sized for the rows that did.
// Why: no GPU in CI. Not checked: CUB itself, device exp's last-ulp differences (the file's
// header comment bounds their effect), speed.
#include "emu.h"
#include "gen_sample.inc"

extern "C" {
#include "engine/sampler.h"
}

#include "drv.h"

static uint64_t rs = 0x1234567887654321ULL;
static uint64_t rnd64() { return rs = dummy_mix64(rs + 0x9e3779b97f4a7c15ULL); }
static double rnd01() { return (double)(rnd64() >> 11) * (1.0 / 9007199254740992.0); }
static double gauss() { return sqrt(-2 * log(1 - rnd01())) * cos(6.283185307179586 * rnd01()); }

static void fill_row(float *l, int32_t vocab, int mode) {
    for (int32_t j = 0; j < vocab; j++) {
        double x = gauss();
        switch (mode) {
        case 0: break;
        case 1: x = 4 * x + (rnd64() % 200 == 0 ? 15 : 0); break;   // spread, a few spikes
        case 2: x = floor(2 * x) / 2; break;                         // many ties
        case 3: x = 0.25; break;                                     // all equal
        case 4: x = rnd64() % 20 == 0 ? -INFINITY : 3 * x; break;
        default: x = 0; break;                                       // -0 and +0
        }
        l[j] = (float)x;
        if (l[j] == 0 && (rnd64() & 1)) l[j] = -0.0f;
    }
}

static int n_sorted, n_sampled;   // rows that took the sort path / sampled rows

// one batch of n rows through ck_sample; 0 mismatches expected
static int batch(ck_sampler_t *s, int32_t vocab, int n, bool greedy_only, const char *tag) {
    Buf<float> lg((size_t)n * vocab);
    std::vector<bk_sample_t> p(n);
    const float temps[] = {0, 1e-4f, 0.05f, 0.7f, 1, 1.5f, 50, 1e30f};
    const float tops[] = {0, 0.3f, 0.9f, 0.99999f, 1, 2};
    for (int r = 0; r < n; r++) {
        fill_row(lg.p + (size_t)r * vocab, vocab, (int)(rnd64() % 6));
        const int32_t ks[] = {0, 0, 1, 2, 40, 4097, vocab - 1, vocab + 3};
        p[r] = bk_sample_t{greedy_only ? 0.f : temps[rnd64() % 8], ks[rnd64() % 8],
                           tops[rnd64() % 6], rnd64(), (int32_t)(rnd64() % 100000)};
    }
    Buf<int32_t> ids(n);
    char err[200];
    cudaError_t e = ck_sample(s, 0, ids.p, lg.p, n, vocab, p.data(), p.data(), err, sizeof err);
    if (e != cudaSuccess) {
        printf("FAIL %s vocab %d: ck_sample error %d (%s)\n", tag, vocab, (int)e, err);
        return n;
    }
    // the sampler's own record of the rows select_kernel sent to the sort (this file
    // includes cuda_sample.cu, so its struct is visible)
    int m = 0;
    for (int r = 0; r < n; r++) m += is_sampled(p[r], vocab);
    if (m) {
        n_sampled += m;
        n_sorted += *s->n_flag_host < m ? *s->n_flag_host : m;
    }
    std::vector<float> probs(vocab);
    std::vector<int32_t> idx(vocab);
    int bad = 0;
    for (int r = 0; r < n; r++) {
        const float *row = lg.p + (size_t)r * vocab;
        int32_t want = greedy_only ? sampler_argmax(row, vocab)
                                   : sampler_pick(row, vocab, &p[r], probs.data(), idx.data());
        if (ids[r] != want && bad++ < 5)
            printf("FAIL %s vocab %d row %d (T %g k %d p %g): id %d, reference %d\n", tag, vocab,
                   r, p[r].temperature, p[r].top_k, p[r].top_p, ids[r], want);
    }
    return bad;
}

static int sweep(const char *env_sort, bool greedy_only) {
    if (env_sort) setenv("TWIN_CUDA_SAMPLE_SORT", env_sort, 1);
    else unsetenv("TWIN_CUDA_SAMPLE_SORT");
    ck_sampler_t *s = ck_sampler_new();
    int bad = 0, rows = 0;
    n_sorted = n_sampled = 0;
    const char *tag = greedy_only ? "greedy" : env_sort ? "sort path" : "sampled";
    const int32_t vocabs[] = {1, 2, 3, 10, 257, 5000, 9001, 40000, 152064};
    const int rows_of[] = {5, 8, 8, 20, 30, 30, 10, 6, 2};
    for (int i = 0; i < 9; i++) {
        bad += batch(s, vocabs[i], rows_of[i], greedy_only, tag);
        rows += rows_of[i];
    }
    ck_sampler_free(s);
    unsetenv("TWIN_CUDA_SAMPLE_SORT");
    printf("%s: %d rows (%d sampled, %d of them sorted), %d mismatches\n", tag, rows,
           n_sampled, n_sorted, bad);
    return bad;
}

START_TEST(greedy) { ck_assert_int_eq(sweep(NULL, true), 0); }
END_TEST
START_TEST(sampled) { ck_assert_int_eq(sweep(NULL, false), 0); }
END_TEST
START_TEST(sort_path) { ck_assert_int_eq(sweep("1", false), 0); }
END_TEST
// rows [0, n) of mode `mode` at temperature t (top-p 0.9), through ck_sample; the
// mismatches with sampler_pick
static int fixed_batch(ck_sampler_t *s, int32_t vocab, int n, int mode, float t) {
    Buf<float> lg((size_t)n * vocab);
    std::vector<bk_sample_t> p(n);
    for (int r = 0; r < n; r++) {
        fill_row(lg.p + (size_t)r * vocab, vocab, mode);
        p[r] = bk_sample_t{t, 0, 0.9f, rnd64(), r};
    }
    Buf<int32_t> ids(n);
    char err[200];
    if (ck_sample(s, 0, ids.p, lg.p, n, vocab, p.data(), p.data(), err, sizeof err) !=
        cudaSuccess)
        return n;
    std::vector<float> probs(vocab);
    std::vector<int32_t> idx(vocab);
    int bad = 0;
    for (int r = 0; r < n; r++)
        bad += ids[r] != sampler_pick(lg.p + (size_t)r * vocab, vocab, &p[r], probs.data(),
                                      idx.data());
    return bad;
}

START_TEST(sort_buffers_only_when_a_row_needs_them) {
    unsetenv("TWIN_CUDA_SAMPLE_SORT");
    ck_sampler_t *s = ck_sampler_new();
    // greedy rows: no scratch at all
    ck_assert_int_eq(fixed_batch(s, 32000, 4, 0, 0.f), 0);
    ck_assert_uint_eq(s->cap_slots, 0);
    // sampled rows the candidates settle: slots, but no sort buffers
    ck_assert_int_eq(fixed_batch(s, 32000, 4, 1, 0.7f), 0);
    ck_assert_uint_eq(s->cap_slots, 4);
    ck_assert_int_eq(*s->n_flag_host, 0);
    ck_assert_uint_eq(s->cap_elems, 0);
    ck_assert_ptr_null(s->keys[0]);
    // flat rows (equal logits) need the sort: buffers for those rows only
    ck_assert_int_eq(fixed_batch(s, 32000, 3, 3, 1.f), 0);
    ck_assert_int_eq(*s->n_flag_host, 3);
    ck_assert_uint_eq(s->cap_elems, 3 * 32000);
    ck_sampler_free(s);
}
END_TEST

START_TEST(invalid_arguments) {
    ck_sampler_t *s = ck_sampler_new();
    Buf<float> lg(16);
    Buf<int32_t> ids(2);
    bk_sample_t p[2] = {};
    char err[100];
    ck_assert_int_eq(ck_sample(s, 0, ids.p, lg.p, 0, 8, p, p, err, sizeof err), cudaSuccess);
    ck_assert_int_eq(ck_sample(s, 0, ids.p, lg.p, 1, 0, p, p, err, sizeof err),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(ck_sample(s, 0, ids.p, lg.p + 1, 1, 0, p, p, err, sizeof err),
                     cudaErrorInvalidValue);
    ck_sampler_free(s);
}
END_TEST

int main() {
    return run_suite("cuda_emu_sample", {greedy, sampled, sort_path,
                                         sort_buffers_only_when_a_row_needs_them,
                                         invalid_arguments});
}
