/* test_profile: the profile file format (sim/profile.h) and the grid runner
 * (engine/profile.h).
 *
 * Format: a written profile reads back field for field and writes again byte for byte; a
 * profile from another tool (columns in another order, unknown columns and keys, CRLF,
 * no optional columns) reads; every kind of damage gives "FILE:LINE: what" naming the
 * line and the problem; a seeded fuzz run of byte mutations ends in a valid profile or such
 * a message, never a crash. Runner: a quick grid on dummy:stories260k whose rows' features
 * equal a hand computation (a decode, a chunk after context, a mixed step), whose host rows
 * are there when the policy is found, and which the reader takes back. */
#include <math.h>

#include "engine/profile.h"
#include "traces/rng.h"
#include "sim/profile.h"
#include "tests/testutil.h"

/* ---- helpers -------------------------------------------------------------------------- */

static int read_text(const char *text, profile_t *p, char *err, size_t errlen) {
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    ck_assert_ptr_nonnull(f);
    int rc = profile_read_file(f, "t.csv", p, err, errlen);
    fclose(f);
    return rc;
}

/* The whole output of the writers for p, in a malloc'd string. */
static char *write_text(const profile_t *p, const char *command) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(profile_write_header(f, p, command), 0);
    for (size_t i = 0; i < p->n; i++) ck_assert_int_eq(profile_write_point(f, &p->pts[i]), 0);
    fclose(f);
    return buf;
}

#define HEAD "# twinserve profile 1\n"
#define COLS "kind,dec_seqs,dec_ctx,chunk_tokens,chunk_ctx,chunk_sampled,tokens,seqs,sampled," \
             "kv_tokens,attn_pairs,reps,median_s,mean_s,min_s,max_s,p10_s,p90_s\n"
#define DEC_ROW "decode,8,512,0,0,0,8,8,8,4104,4104,5,0.0123,0.0124,0.012,0.013,0.0121,0.0129\n"

static void sample_profile(profile_t *p) {
    profile_init(p);
    snprintf(p->model, sizeof p->model, "dummy:smollm2-135m");
    snprintf(p->backend, sizeof p->backend, "cpu");
    snprintf(p->weight_type, sizeof p->weight_type, "f32");
    snprintf(p->date, sizeof p->date, "2026-12-01T15:00:00Z");
    snprintf(p->version, sizeof p->version, "0.1.0");
    p->threads = 2;
    p->shape = *preset_model_find("smollm2-135m");
    memset(p->shape.name, 0, sizeof p->shape.name);   /* memcmp below compares every byte */
    snprintf(p->shape.name, sizeof p->shape.name, "profile");
    p->shape.dtype_bytes = 4;
    p->has_shape = 1;
    p->mem_bw = 30.3e9;
    p->gemm_flops = 305e9;
    p->mem_bw_end = 29.9e9;
    p->gemm_flops_end = 301.25e9;
    p->warmup = 1;
    p->reps = 5;
    ck_assert_int_eq(profile_add_header(p, "note", "skipped decode B=64:\nKV over budget"), 0);
    ck_assert_int_eq(profile_add_header(p, "gpu_clock_mhz", "1980"), 0);
    ck_assert_int_eq(profile_add_header(p, "host", "measured: 12 steps"), 0);
    struct { const char *kind; int32_t b, dc, n, cc, cs; } sh[] = {
        {"decode", 8, 512, 0, 0, 0}, {"prefill", 0, 0, 256, 0, 1}, {"prefill", 0, 0, 64, 1024, 0},
        {"mixed", 8, 1024, 128, 0, 1},
    };
    for (int i = 0; i < 4; i++) {
        profile_point_t pt;
        profile_point_init(&pt, sh[i].kind, NULL);
        pt.dec_seqs = sh[i].b, pt.dec_ctx = sh[i].dc, pt.chunk_tokens = sh[i].n;
        pt.chunk_ctx = sh[i].cc, pt.chunk_sampled = sh[i].cs;
        ck_assert_int_eq(profile_point_shape_features(&pt, &pt.f), 0);
        pt.reps = 5;
        pt.median_s = 0.001 * (i + 1), pt.mean_s = 0.0011 * (i + 1), pt.min_s = 0.0009 * (i + 1);
        pt.max_s = 0.002 * (i + 1), pt.p10_s = 0.00095 * (i + 1), pt.p90_s = 0.0015 * (i + 1);
        ck_assert_int_eq(profile_add_point(p, &pt), 0);
    }
    cost_features_t hf = {.tokens = 40, .seqs = 12, .sampled = 12, .kv_tokens = 3000, .attn_pairs = 3500};
    profile_point_t hp;
    profile_point_init(&hp, "host", &hf);
    hp.reps = 12;
    hp.median_s = 4.5e-5;   /* the rest absent */
    ck_assert_int_eq(profile_add_point(p, &hp), 0);
}

/* ---- format --------------------------------------------------------------------------- */

START_TEST(test_shape_features_by_hand) {
    profile_point_t pt;
    cost_features_t f;
    profile_point_init(&pt, "mixed", NULL);
    ck_assert_int_eq(profile_point_shape_features(&pt, &f), -1);   /* shape absent */
    pt.dec_seqs = 3, pt.dec_ctx = 20, pt.chunk_tokens = 16, pt.chunk_ctx = 5;
    pt.chunk_sampled = 1;
    ck_assert_int_eq(profile_point_shape_features(&pt, &f), 0);
    /* 3 decodes: 1 token after 20 -> kv 21, pairs 21 each; chunk: 16 after 5 -> kv 21,
     * pairs 16 * 5 + 16 * 17 / 2 = 216 */
    ck_assert_int_eq(f.tokens, 19);
    ck_assert_int_eq(f.seqs, 4);
    ck_assert_int_eq(f.sampled, 4);
    ck_assert_int_eq(f.kv_tokens, 63 + 21);
    ck_assert_int_eq(f.attn_pairs, 63 + 216);
}
END_TEST

START_TEST(test_round_trip) {
    profile_t p, q;
    char err[512];
    sample_profile(&p);
    char *a = write_text(&p, "twinserve profile --model x");
    ck_assert_msg(read_text(a, &q, err, sizeof err) == 0, "%s\n%s", err, a);
    ck_assert_str_eq(q.model, p.model);
    ck_assert_str_eq(q.backend, "cpu");
    ck_assert_str_eq(q.weight_type, "f32");
    ck_assert_str_eq(q.date, p.date);
    ck_assert_str_eq(q.version, "0.1.0");
    ck_assert_int_eq(q.threads, 2);
    ck_assert_int_eq(q.has_shape, 1);
    ck_assert_str_eq(q.shape.name, "profile");
    ck_assert_int_eq(memcmp(&q.shape, &p.shape, sizeof q.shape), 0);
    ck_assert_double_eq_tol(q.mem_bw, 30.3e9, 1);
    ck_assert_double_eq_tol(q.gemm_flops_end, 301.25e9, 1);
    ck_assert_int_eq(q.warmup, 1);
    ck_assert_int_eq(q.reps, 5);
    ck_assert_str_eq(q.host_note, "");
    ck_assert_str_eq(profile_header_get(&q, "note"), "skipped decode B=64: KV over budget");
    ck_assert_str_eq(profile_header_get(&q, "gpu_clock_mhz"), "1980");
    ck_assert_str_eq(profile_header_get(&q, "command"), "twinserve profile --model x");
    ck_assert_uint_eq(q.n, p.n);
    for (size_t i = 0; i < p.n; i++) {
        const profile_point_t *x = &p.pts[i], *y = &q.pts[i];
        ck_assert_str_eq(y->kind, x->kind);
        /* the five sums a profile records (the windowed and prefill-only ones are not) */
        ck_assert(y->f.tokens == x->f.tokens && y->f.seqs == x->f.seqs &&
                  y->f.sampled == x->f.sampled && y->f.kv_tokens == x->f.kv_tokens &&
                  y->f.attn_pairs == x->f.attn_pairs);
        ck_assert(y->dec_seqs == x->dec_seqs && y->dec_ctx == x->dec_ctx &&
                  y->chunk_tokens == x->chunk_tokens && y->chunk_ctx == x->chunk_ctx &&
                  y->chunk_sampled == x->chunk_sampled && y->reps == x->reps);
        ck_assert_double_eq_tol(y->median_s, x->median_s, 1e-15);
        ck_assert_int_eq(isnan(y->p90_s), isnan(x->p90_s));
        if (!isnan(x->p90_s)) ck_assert_double_eq_tol(y->p90_s, x->p90_s, 1e-15);
        ck_assert_int_eq(y->line, 29 + (int64_t)i);   /* magic + 26 header lines + columns */
    }
    ck_assert_int_eq(q.pts[4].dec_seqs, -1);
    ck_assert(isnan(q.pts[4].mean_s));
    /* Written again (the command now from the header lines): the same bytes. */
    char *b = write_text(&q, NULL);
    ck_assert_str_eq(b, a);
    free(a);
    free(b);
    profile_free(&p);
    profile_free(&q);
    profile_free(&q);   /* safe twice */
}
END_TEST

START_TEST(test_foreign_profile) {
    /* Another tool's file: columns reordered, an unknown column, no shape or optional
     * columns, no kind, CRLF line ends, blank lines, unknown keys, a partial shape. */
    const char *text =
        "# twinserve profile 1\r\n# engine = vLLM 0.6.3\r\n#tp=2\r\n# n_layers = 32\r\n\r\n"
        "median_s , attn_pairs,kv_tokens,gpu,sampled,seqs,tokens\r\n"
        "0.0151,4104,4104,h100,8,8,8\r\n\r\n"
        "0.2,131328,512,h100,1,1,512\r\n";
    profile_t p;
    char err[512];
    ck_assert_msg(read_text(text, &p, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(p.n, 2);
    ck_assert_str_eq(p.pts[0].kind, "step");
    ck_assert_int_eq(p.pts[1].f.attn_pairs, 131328);
    ck_assert_int_eq(p.pts[1].f.tokens, 512);
    ck_assert_int_eq(p.pts[1].reps, -1);
    ck_assert_int_eq(p.pts[1].dec_seqs, -1);
    ck_assert(isnan(p.pts[1].p10_s));
    ck_assert_int_eq(p.pts[1].line, 9);
    ck_assert_int_eq(p.has_shape, 0);   /* one shape key of ten */
    ck_assert_int_eq(p.shape.n_layers, 32);
    ck_assert_str_eq(profile_header_get(&p, "engine"), "vLLM 0.6.3");
    ck_assert_str_eq(profile_header_get(&p, "tp"), "2");
    ck_assert_int_eq(p.threads, -1);
    ck_assert(isnan(p.mem_bw));
    profile_free(&p);

    /* host = not measured: the reason comes back as host_note */
    ck_assert(read_text(HEAD "# host = not measured: --no-host\n" COLS DEC_ROW, &p, err,
                        sizeof err) == 0);
    ck_assert_str_eq(p.host_note, "--no-host");
    profile_free(&p);
}
END_TEST

/* Each damaged file and the message it must give (after "t.csv:"). */
static const struct { const char *text, *want; } damage[] = {
    { "", "t.csv:1: empty file: not a twinserve profile" },
    { "kind,tokens\n", "t.csv:1: not a twinserve profile: the first line must be "
                       "'# twinserve profile 1'" },
    { "# twinserve profile 2\n" COLS DEC_ROW, "t.csv:1: unknown profile format version '2'" },
    { "# twinserve profile x\n" COLS DEC_ROW, "t.csv:1: unknown profile format version 'x'" },
    { HEAD "# model dummy:x\n" COLS DEC_ROW,
      "t.csv:2: a header line must be '# key = value', got '# model dummy:x'" },
    { HEAD "# = 3\n" COLS DEC_ROW, "t.csv:2: a header line must be '# key = value'" },
    { HEAD "# n_layers = 0\n" COLS DEC_ROW,
      "t.csv:2: model shape key n_layers: '0' is not a positive integer" },
    { HEAD "# model = a\n# d_ff = 12.5\n" COLS DEC_ROW,
      "t.csv:3: model shape key d_ff: '12.5' is not a positive integer" },
    { HEAD "# tied_embeddings = 2\n" COLS DEC_ROW,
      "t.csv:2: model shape key tied_embeddings: '2' is not 0 or 1" },
    { HEAD "# mem_bw_gbs = fast\n" COLS DEC_ROW,
      "t.csv:2: mem_bw_gbs: 'fast' is not a positive number" },
    { HEAD "# threads = -1\n" COLS DEC_ROW, "t.csv:2: threads: '-1' is not a non-negative" },
    { HEAD "# backend = cpu\n# backend = cuda\n" COLS DEC_ROW,
      "t.csv:3: duplicate header key 'backend' (first on line 2)" },
    { HEAD "# n_layers = 30\n# d_model = 576\n# n_heads = 9\n# n_kv_heads = 2\n"
      "# head_dim = 64\n# d_ff = 1536\n# vocab = 49152\n# max_seq = 2048\n"
      "# tied_embeddings = 1\n# dtype_bytes = 4\n" COLS DEC_ROW,
      "t.csv:11: model shape: profile: n_heads (9) is not a multiple of n_kv_heads (2)" },
    { HEAD "tokens,seqs,sampled,kv_tokens,median_s\n8,8,8,4104,0.01\n",
      "t.csv:2: missing required column 'attn_pairs'" },
    { HEAD "tokens,seqs,sampled,kv_tokens,attn_pairs,tokens,median_s\n",
      "t.csv:2: duplicate column 'tokens'" },
    { HEAD "tokens,,seqs\n", "t.csv:2: column 2 has an empty name" },
    { HEAD COLS DEC_ROW "decode,8,512,0,0,0,8,8,8,4104,4104,5,0.0123,0.0124\n",
      "t.csv:4: 14 fields, the column line has 18 (a truncated or damaged row?)" },
    { HEAD COLS "decode,8,512,0,0,0,8,8,8,4104,4104,5,abc,0.0124,0.012,0.013,0.0121,0.0129\n",
      "t.csv:3: column 'median_s': 'abc' is not a number" },
    { HEAD COLS "decode,8,512,0,0,0,8,8,8,41x4,4104,5,0.01,0.0124,0.012,0.013,0.0121,0.0129\n",
      "t.csv:3: column 'kv_tokens': '41x4' is not an integer" },
    { HEAD COLS "decode,8,512,0,0,0,8,8,8,4104,4104,5,0.01,-0.02,0.012,0.013,0.0121,0.0129\n",
      "t.csv:3: column 'mean_s': negative value -0.02" },
    { HEAD COLS "decode,8,512,0,0,0,-8,8,8,4104,4104,5,0.01,0.01,0.012,0.013,0.0121,0.0129\n",
      "t.csv:3: column 'tokens': negative value -8" },
    { HEAD COLS "decode,8,512,0,0,0,8,8,8,4104,4104,5,0.01,0.01,inf,0.013,0.0121,0.0129\n",
      "t.csv:3: column 'min_s': 'inf' is not a finite number" },
    { HEAD COLS "decode,8,512,0,0,0,8,8,8,4104,4104,5,nan,0.01,0.01,0.013,0.0121,0.0129\n",
      "t.csv:3: column 'median_s': 'nan' is not a finite number" },
    { HEAD COLS "decode,8,512,0,0,0,8,8,8,4104,4104,5,,0.01,0.01,0.013,0.0121,0.0129\n",
      "t.csv:3: column 'median_s' is empty" },
    { HEAD COLS "decode,8,512,0,0,0,8,8,8,4104,99999999999999999999,5,0.01,,,,,\n",
      "t.csv:3: column 'attn_pairs': 99999999999999999999 is out of range" },
    { HEAD COLS "de code,8,512,0,0,0,8,8,8,4104,4104,5,0.0123,,,,,\n",
      "t.csv:3: column 'kind': 'de code' is not a word" },
    { HEAD COLS "step,,,,,,8,0,8,4104,4104,5,0.0123,,,,,\n",
      "t.csv:3: impossible features: seqs 0 < 1" },
    { HEAD COLS "step,,,,,,7,8,7,4104,4104,5,0.0123,,,,,\n",
      "t.csv:3: impossible features: tokens 7 < seqs 8" },
    { HEAD COLS "step,,,,,,8,8,9,4104,4104,5,0.0123,,,,,\n",
      "t.csv:3: impossible features: sampled 9 > tokens 8" },
    { HEAD COLS "step,,,,,,8,8,8,7,4104,5,0.0123,,,,,\n",
      "t.csv:3: impossible features: kv_tokens 7 < tokens 8" },
    { HEAD COLS "step,,,,,,8,8,8,4104,6,5,0.0123,,,,,\n",
      "t.csv:3: impossible features: attn_pairs 6 < tokens 8" },
    { HEAD COLS "step,,,,,,8,8,8,4104,4104,5,0,,,,,\n", "t.csv:3: median_s must be > 0" },
    { HEAD COLS "step,,,,,,8,8,8,4104,4104,0,0.1,,,,,\n", "t.csv:3: reps must be >= 1" },
    { HEAD COLS "decode,8,512,0,0,0,8,8,8,4104,4105,5,0.0123,,,,,\n",
      "t.csv:3: features disagree with the shape columns: attn_pairs is 4105, but 8 decodes "
      "at context 512 plus a chunk of 0 tokens at context 0 (0 sampled) give 4104" },
    { HEAD COLS "prefill,0,0,64,1024,0,64,1,1,1088,67616,5,0.0123,,,,,\n",
      "t.csv:3: features disagree with the shape columns: sampled is 1, but" },
    { HEAD COLS, "t.csv:2: no data rows" },
    { HEAD "# model = x\n", "t.csv:2: no column line" },
    { HEAD COLS DEC_ROW "# note = late\n", "t.csv:4: a '#' line after the column line" },
};

START_TEST(test_damage) {
    profile_t p;
    char err[512];
    const char *text = damage[_i].text;
    int rc = read_text(text, &p, err, sizeof err);
    ck_assert_msg(rc == -1, "case %d read without error:\n%s", _i, text);
    ck_assert_msg(strncmp(err, damage[_i].want, strlen(damage[_i].want)) == 0,
                  "case %d: got '%s', want '%s...'", _i, err, damage[_i].want);
    ck_assert_uint_eq(p.n, 0);   /* freed on failure */
    ck_assert_ptr_null(p.pts);
}
END_TEST

START_TEST(test_missing_file) {
    profile_t p;
    char err[512];
    ck_assert_int_eq(profile_read("/nonexistent/prof.csv", &p, err, sizeof err), -1);
    ck_assert_str_eq(err, "/nonexistent/prof.csv: cannot open: No such file or directory");
    /* a NUL byte: the line, not a crash or a silently shortened row */
    static const char nul[] = HEAD COLS "step,,,,,,8,8,8,4104,4104,5,0.0\0" "123,,,,,\n";
    FILE *f = fmemopen((void *)nul, sizeof nul - 1, "r");
    ck_assert_int_eq(profile_read_file(f, "n.csv", &p, err, sizeof err), -1);
    fclose(f);
    ck_assert_str_eq(err, "n.csv:3: a NUL byte in the line (not a text file?)");
}
END_TEST

static int has_line_ref(const char *err) {
    const char *p = strstr(err, "fz:");
    if (!p) return 0;
    p += 3;
    const char *q = p;
    while (*q >= '0' && *q <= '9') q++;
    return q > p && *q == ':';
}

START_TEST(test_fuzz) {
    static const char bytes[] = "0123456789,.-e#=\n\r abcinf_";
    profile_t base;
    sample_profile(&base);
    char *seed = write_text(&base, "twinserve profile");
    profile_free(&base);
    size_t n0 = strlen(seed);
    char *buf = malloc(n0 + 64);
    ck_assert_ptr_nonnull(buf);
    rng_t r;
    rng_seed(&r, 20261201);
    int errors = 0, clean = 0;
    for (int it = 0; it < 4000; it++) {
        size_t n = n0;
        memcpy(buf, seed, n);
        int muts = 1 + (int)(rng_u64(&r) % 4);
        for (int m = 0; m < muts && n > 0; m++) {
            /* Aim at the rows half of the time: most of the bytes are header. */
            size_t lo = rng_u64(&r) % 2 ? n0 * 3 / 4 : 0;
            size_t at = lo < n ? lo + rng_u64(&r) % (n - lo) : rng_u64(&r) % n;
            char c = rng_u64(&r) % 4 == 0 ? (char)(rng_u64(&r) & 0xff)
                                          : bytes[rng_u64(&r) % (sizeof bytes - 1)];
            switch (rng_u64(&r) % 4) {
            case 0: buf[at] = c; break;
            case 1: memmove(buf + at, buf + at + 1, n - at - 1); n--; break;
            case 2:
                if (n + 1 < n0 + 64) {
                    memmove(buf + at + 1, buf + at, n - at);
                    buf[at] = c;
                    n++;
                }
                break;
            default: n = at; break;
            }
        }
        FILE *f = fmemopen(buf, n, "r");
        ck_assert_ptr_nonnull(f);
        profile_t p;
        char err[512];
        int rc = n ? profile_read_file(f, "fz", &p, err, sizeof err) : -1;
        if (!n) snprintf(err, sizeof err, "fz:1: empty");
        fclose(f);
        if (rc) {
            errors++;
            ck_assert_msg(has_line_ref(err), "iteration %d: message without a line: '%s'", it,
                          err);
        } else {
            clean++;
            ck_assert(p.n >= 1);
            for (size_t i = 0; i < p.n; i++) {   /* what the reader promises */
                const profile_point_t *x = &p.pts[i];
                ck_assert(x->f.seqs >= 1 && x->f.tokens >= x->f.seqs &&
                          x->f.sampled <= x->f.tokens && x->f.kv_tokens >= x->f.tokens &&
                          x->f.attn_pairs >= x->f.tokens && x->median_s > 0);
            }
            profile_free(&p);
        }
    }
    /* Both outcomes must occur, or the mutations are not exercising the reader (the seed
     * gives 3457 and 543). */
    ck_assert_msg(errors > 2000 && clean > 300, "errors %d, clean %d", errors, clean);
    free(buf);
    free(seed);
}
END_TEST

/* ---- the grid runner ------------------------------------------------------------------ */

static const profile_point_t *find_point(const profile_t *p, const char *kind, int32_t b,
                                         int32_t dc, int32_t n, int32_t cc) {
    for (size_t i = 0; i < p->n; i++) {
        const profile_point_t *x = &p->pts[i];
        if (!strcmp(x->kind, kind) && x->dec_seqs == b && x->dec_ctx == dc &&
            x->chunk_tokens == n && x->chunk_ctx == cc)
            return x;
    }
    ck_abort_msg("no %s point (%d decodes at %d, chunk %d at %d)", kind, b, dc, n, cc);
    return NULL;
}

static void assert_features(const profile_point_t *x, int64_t tokens, int64_t seqs,
                            int64_t sampled, int64_t kv, int64_t pairs) {
    ck_assert_msg(x->f.tokens == tokens && x->f.seqs == seqs && x->f.sampled == sampled &&
                  x->f.kv_tokens == kv && x->f.attn_pairs == pairs,
                  "%s point: features %lld %lld %lld %lld %lld, by hand %lld %lld %lld %lld "
                  "%lld", x->kind, (long long)x->f.tokens, (long long)x->f.seqs,
                  (long long)x->f.sampled, (long long)x->f.kv_tokens,
                  (long long)x->f.attn_pairs, (long long)tokens, (long long)seqs,
                  (long long)sampled, (long long)kv, (long long)pairs);
}

START_TEST(test_quick_grid) {
    profile_opts_t o;
    profile_opts_defaults(&o);
    o.model = "dummy:stories260k";
    o.grid = PROFILE_GRID_QUICK;
    o.reps = 3;
    o.n_threads = 2;
    o.version = "test";
    int have_policy = access("policies/continuous.lua", R_OK) == 0;
    if (have_policy) o.host_policy = "policies/continuous.lua";
    else fprintf(stderr, "SKIP: policies/continuous.lua not found (run from the repository "
                         "root): host rows not checked\n");
    profile_t p;
    profile_stats_t st;
    char err[1024];
    ck_assert_msg(profile_run(&o, &p, &st, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.points, 8);
    ck_assert_int_eq(st.skipped, 0);
    /* By hand (sim/cost.h's definitions, not its code): a decode adds 1 token, kv and pairs
     * ctx + 1; a chunk of n after c adds kv c + n and pairs n c + n (n + 1) / 2. */
    assert_features(find_point(&p, "decode", 4, 40, 0, 0), 4, 4, 4, 4 * 41, 4 * 41);
    assert_features(find_point(&p, "prefill", 0, 0, 16, 24), 16, 1, 0, 40, 16 * 24 + 136);
    assert_features(find_point(&p, "prefill", 0, 0, 48, 0), 48, 1, 1, 48, 48 * 49 / 2);
    assert_features(find_point(&p, "mixed", 3, 20, 16, 0), 19, 4, 4, 3 * 21 + 16, 63 + 136);
    for (size_t i = 0; i < p.n; i++) {
        const profile_point_t *x = &p.pts[i];
        if (!strcmp(x->kind, "host")) continue;
        ck_assert_int_eq(x->reps, 3);
        ck_assert(x->min_s > 0 && x->min_s <= x->p10_s && x->p10_s <= x->median_s &&
                  x->median_s <= x->p90_s && x->p90_s <= x->max_s);
        ck_assert(x->mean_s >= x->min_s && x->mean_s <= x->max_s);
    }
    ck_assert_str_eq(p.backend, "cpu");
    ck_assert_int_eq(p.threads, 2);
    ck_assert(p.has_shape && p.shape.n_layers == 5 && p.shape.d_model == 64 &&
              p.shape.dtype_bytes == 4 && p.shape.max_seq == 512);
    ck_assert(p.mem_bw > 0 && p.gemm_flops > 0 && p.mem_bw_end > 0 && p.gemm_flops_end > 0);
    int host = 0;
    int64_t host_steps = 0;
    for (size_t i = 0; i < p.n; i++)
        if (!strcmp(p.pts[i].kind, "host")) {
            host++;
            host_steps += p.pts[i].reps;
            ck_assert(p.pts[i].f.seqs >= 1 && p.pts[i].f.seqs <= 64);
        }
    if (have_policy) {
        ck_assert_int_eq(host, st.host_rows);
        ck_assert_int_gt(host, 0);
        ck_assert_int_eq(host_steps, st.host_steps);
        ck_assert_str_eq(p.host_note, "");
        ck_assert_ptr_nonnull(strstr(profile_header_get(&p, "host"), "measured: "));
    }
    /* What the command writes, the reader takes back (features checked against shapes). */
    char *text = write_text(&p, "twinserve profile --grid quick");
    profile_t q;
    ck_assert_msg(read_text(text, &q, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(q.n, p.n);
    ck_assert_int_eq(memcmp(&q.shape, &p.shape, sizeof q.shape), 0);
    free(text);
    profile_free(&q);
    profile_free(&p);
}
END_TEST

START_TEST(test_no_host_and_errors) {
    profile_opts_t o;
    profile_opts_defaults(&o);
    o.model = "dummy:stories260k";
    o.grid = PROFILE_GRID_QUICK;
    o.reps = 1;
    o.host_skip = "--no-host";
    profile_t p;
    profile_stats_t st;
    char err[1024];
    ck_assert_msg(profile_run(&o, &p, &st, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(p.host_note, "--no-host");
    for (size_t i = 0; i < p.n; i++) ck_assert_str_ne(p.pts[i].kind, "host");
    char *text = write_text(&p, NULL);
    ck_assert_ptr_nonnull(strstr(text, "\n# host = not measured: --no-host\n"));
    profile_free(&p);
    ck_assert(read_text(text, &p, err, sizeof err) == 0);
    ck_assert_str_eq(p.host_note, "--no-host");
    free(text);
    profile_free(&p);

    /* A step limit that leaves the quick grid only its decodes of one sequence. */
    o.max_seqs = 1;
    o.max_tokens = 1;
    ck_assert_msg(profile_run(&o, &p, &st, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.points, 2);
    profile_free(&p);

    o.model = "/nonexistent/model.bin";
    ck_assert_int_eq(profile_run(&o, &p, &st, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/model.bin"));
    profile_free(&p);
    o.model = "dummy:stories260k";
    o.host_policy = "/nonexistent/policy.lua";
    ck_assert_int_eq(profile_run(&o, &p, &st, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/nonexistent/policy.lua") != NULL, "%s", err);
    profile_free(&p);
}
END_TEST

START_TEST(test_real_model_shape) {
    char path[512];
    if (!testutil_data_path("models/stories260K.bin", path, sizeof path)) return;
    profile_opts_t o;
    profile_opts_defaults(&o);
    o.model = path;
    o.grid = PROFILE_GRID_QUICK;
    o.reps = 1;
    profile_t p;
    profile_stats_t st;
    char err[1024];
    ck_assert_msg(profile_run(&o, &p, &st, err, sizeof err) == 0, "%s", err);
    /* the checkpoint's header: dim 64, hidden 172, 5 layers, 8 heads, 4 KV heads, vocab 512 */
    ck_assert(p.has_shape && p.shape.d_model == 64 && p.shape.d_ff == 172 &&
              p.shape.n_layers == 5 && p.shape.n_heads == 8 && p.shape.n_kv_heads == 4 &&
              p.shape.vocab == 512 && p.shape.max_seq == 512 && p.shape.tied_embeddings == 1);
    ck_assert_str_eq(p.model, path);
    profile_free(&p);
}
END_TEST

static Suite *profile_suite(void) {
    Suite *s = suite_create("profile");
    TCase *fmt = tcase_create("format");
    tcase_add_test(fmt, test_shape_features_by_hand);
    tcase_add_test(fmt, test_round_trip);
    tcase_add_test(fmt, test_foreign_profile);
    tcase_add_loop_test(fmt, test_damage, 0, (int)(sizeof damage / sizeof damage[0]));
    tcase_add_test(fmt, test_missing_file);
    suite_add_tcase(s, fmt);
    TCase *fz = tcase_create("fuzz");
    tcase_set_timeout(fz, 60);
    tcase_add_test(fz, test_fuzz);
    suite_add_tcase(s, fz);
    TCase *run = tcase_create("run");
    tcase_set_timeout(run, 120);
    tcase_add_test(run, test_quick_grid);
    tcase_add_test(run, test_no_host_and_errors);
    tcase_add_test(run, test_real_model_shape);
    suite_add_tcase(s, run);
    return s;
}

int main(void) { return testutil_run(profile_suite()); }
