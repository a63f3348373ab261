/* test_tokenizer: the llama2.c and GGUF vocabularies of stories260K give identical ids;
 * encoding matches a naive transcription of llama2.c's loop (read straight from tok512.bin);
 * decode(encode(x)) == x, UTF-8 and bytes outside the vocabulary included; errors. */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/tokenizer.h"
#include "tests/testutil.h"

static const char *texts[] = {
    "Once upon a time, there was a little girl named Lily. She loved to play outside.",
    "h\xc3\xa9llo w\xc3\xb6rld \xe2\x98\x83 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82",
    "\x01\x7f tabs\tand\nnewlines  double  spaces \xff\xfe invalid UTF-8 \x80",
    " leading space",
    "trailing space ",
    "a",
    "<s> </s> <unk> <0x41>",
    "",
};
#define N_TEXTS (sizeof texts / sizeof texts[0])

static int load_both(tok_t **a, tok_t **b) {
    char pt[512], pg[512], err[512];
    if (!testutil_data_path("models/tok512.bin", pt, sizeof pt) ||
        !testutil_data_path("models/stories260K.gguf", pg, sizeof pg))
        return 0;
    ck_assert_msg(tok_load_llama2c(pt, 512, a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(tok_load_gguf(pg, b, err, sizeof err) == 0, "%s", err);
    return 1;
}

static void decode_all(tok_t *t, const int32_t *ids, int32_t n, char *out, size_t cap) {
    out[0] = '\0';
    for (int32_t i = 0; i < n; i++) {
        const char *p = tok_decode(t, i ? ids[i - 1] : -1, ids[i]);
        ck_assert(strlen(out) + strlen(p) < cap);
        strcat(out, p);
    }
}

START_TEST(test_sources_agree_and_roundtrip) {
    tok_t *a, *b;
    if (!load_both(&a, &b)) return;
    ck_assert_int_eq(tok_vocab(a), 512);
    ck_assert_int_eq(tok_vocab(b), 512);
    char err[256], out[1024];
    for (size_t k = 0; k < N_TEXTS; k++) {
        int32_t ia[512], ib[512], na, nb;
        ck_assert_msg(tok_encode(a, texts[k], 1, 0, ia, 512, &na, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(tok_encode(b, texts[k], 1, 0, ib, 512, &nb, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(na == nb && memcmp(ia, ib, (size_t)na * 4) == 0, "text %zu differs", k);
        ck_assert_int_eq(ia[0], TOK_BOS);
        ck_assert(na <= (int32_t)strlen(texts[k]) + 2);
        decode_all(a, ia, na, out, sizeof out);
        ck_assert_msg(strcmp(out, texts[k]) == 0, "text %zu: \"%s\"", k, out);
        decode_all(b, ib, nb, out, sizeof out);
        ck_assert_msg(strcmp(out, texts[k]) == 0, "text %zu (gguf): \"%s\"", k, out);
    }
    tok_free(a);
    tok_free(b);
}
END_TEST

/* ---- llama2.c's encoder, transcribed naively: linear lookups, full rescans ---- */

typedef struct {
    int n;
    char *piece[512];
    int len[512];
    float score[512];
} ref_t;

static int ref_load(ref_t *r, const char *path) {
    FILE *f = fopen(path, "rb");
    int32_t max_len;
    if (!f || fread(&max_len, 4, 1, f) != 1) return -1;
    for (r->n = 0; r->n < 512; r->n++) {
        int32_t len;
        if (fread(&r->score[r->n], 4, 1, f) != 1 || fread(&len, 4, 1, f) != 1) return -1;
        r->piece[r->n] = calloc((size_t)len + 1, 1);
        r->len[r->n] = len;
        if (fread(r->piece[r->n], 1, (size_t)len, f) != (size_t)len) return -1;
    }
    fclose(f);
    return 0;
}

static int ref_lookup(const ref_t *r, const char *s, int len) {
    for (int i = 3; i < r->n; i++) /* 0..2 are <unk>, BOS and EOS */
        if (r->len[i] == len && memcmp(r->piece[i], s, (size_t)len) == 0) return i;
    return -1;
}

static int ref_encode(const ref_t *r, const char *text, int *tok) {
    int n = 0;
    char buf[64], cat[256];
    if (*text) tok[n++] = ref_lookup(r, " ", 1);
    for (const char *c = text; *c;) {
        int l = 1;
        while (l < 4 && (c[l] & 0xC0) == 0x80) l++;
        memcpy(buf, c, (size_t)l);
        int id = ref_lookup(r, buf, l);
        if (id >= 0) tok[n++] = id;
        else
            for (int i = 0; i < l; i++) tok[n++] = (unsigned char)buf[i] + 3;
        c += l;
    }
    for (;;) {
        float best = -1e10f;
        int bi = -1, bid = -1;
        for (int i = 0; i + 1 < n; i++) {
            int la = r->len[tok[i]], lb = r->len[tok[i + 1]];
            memcpy(cat, r->piece[tok[i]], (size_t)la);
            memcpy(cat + la, r->piece[tok[i + 1]], (size_t)lb);
            int id = ref_lookup(r, cat, la + lb);
            if (id >= 0 && r->score[id] > best) best = r->score[id], bi = i, bid = id;
        }
        if (bi < 0) break;
        tok[bi] = bid;
        memmove(tok + bi + 1, tok + bi + 2, (size_t)(n - bi - 2) * sizeof *tok);
        n--;
    }
    return n;
}

START_TEST(test_matches_reference) {
    char pt[512], err[256];
    if (!testutil_data_path("models/tok512.bin", pt, sizeof pt)) return;
    static ref_t r;
    ck_assert_int_eq(ref_load(&r, pt), 0);
    tok_t *t;
    ck_assert_msg(tok_load_llama2c(pt, 512, &t, err, sizeof err) == 0, "%s", err);
    char longer[4096] = "";
    for (int k = 0; k < 20; k++) strcat(longer, texts[k % 4]);
    for (size_t k = 0; k <= N_TEXTS; k++) {
        const char *s = k < N_TEXTS ? texts[k] : longer;
        static int want[8192];
        static int32_t got[8192];
        int nw = ref_encode(&r, s, want);
        int32_t ng;
        ck_assert_msg(tok_encode(t, s, 0, 0, got, 8192, &ng, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(ng, nw);
        for (int i = 0; i < nw; i++) ck_assert_int_eq(got[i], want[i]);
    }
    /* The story's opening, piece by piece. */
    int32_t ids[32], n;
    ck_assert(tok_encode(t, "Once upon a time", 1, 1, ids, 32, &n, err, sizeof err) == 0);
    char out[256] = "";
    for (int32_t i = 1; i < n; i++) {
        strcat(out, "|");
        strcat(out, tok_decode(t, ids[i - 1], ids[i]));
    }
    ck_assert_str_eq(out, "|Once| upon| a| time|");
    ck_assert_int_eq(ids[n - 1], TOK_EOS);
    for (int i = 0; i < r.n; i++) free(r.piece[i]);
    tok_free(t);
}
END_TEST

START_TEST(test_encode_edges) {
    tok_t *a, *b;
    if (!load_both(&a, &b)) return;
    char err[256];
    int32_t ids[64], n;
    ck_assert_int_eq(tok_encode(a, "", 1, 1, ids, 64, &n, err, sizeof err), 0);
    ck_assert(n == 2 && ids[0] == TOK_BOS && ids[1] == TOK_EOS);
    ck_assert_int_eq(tok_encode(a, "", 0, 0, ids, 64, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(tok_encode(a, "Once upon a time", 1, 0, ids, 3, &n, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "do not fit in 3"), "%s", err);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(tok_encode(a, NULL, 1, 0, ids, 64, &n, err, sizeof err), -1);
    /* Decoding: out of range and special ids give "", byte pieces the raw byte, the space
     * after BOS is dropped. */
    ck_assert_str_eq(tok_decode(a, 5, -1), "");
    ck_assert_str_eq(tok_decode(a, 5, 512), "");
    ck_assert_str_eq(tok_decode(b, 5, 512), "");
    for (int id = 0; id <= 2; id++) {
        ck_assert_str_eq(tok_decode(a, 5, id), "");
        ck_assert_str_eq(tok_decode(b, 5, id), "");
    }
    ck_assert_str_eq(tok_decode(a, 5, 'A' + 3), "A");
    ck_assert_str_eq(tok_decode(b, 5, 'A' + 3), "A");
    ck_assert_str_eq(tok_decode(a, 5, 259), " t");
    ck_assert_str_eq(tok_decode(b, TOK_BOS, 259), "t");
    /* A long text encodes quickly (merges update only the neighbours of a merge). */
    static char big[200001];
    for (int i = 0; i < 200000; i++) big[i] = "Once upon a time, there was a dog. "[i % 35];
    static int32_t many[200002];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(tok_encode(a, big, 1, 0, many, 200002, &n, err, sizeof err), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    fprintf(stderr, "encoded 200000 bytes into %d tokens in %.3f s\n", (int)n, s);
    ck_assert(n > 20000 && n < 100000);
    tok_free(a);
    tok_free(b);
}
END_TEST

START_TEST(test_load_errors) {
    char pt[512], path[256], err[512];
    tok_t *t = (tok_t *)1;
    ck_assert_int_eq(tok_load_llama2c("/nonexistent/tok.bin", 512, &t, err, sizeof err), -1);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err, "/nonexistent/tok.bin"), "%s", err);
    ck_assert_int_eq(tok_load_gguf("/nonexistent/m.gguf", &t, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/nonexistent/m.gguf"), "%s", err);
    ck_assert_int_eq(tok_load_llama2c("/nonexistent/tok.bin", 0, &t, err, sizeof err), -1);
    if (!testutil_data_path("models/tok512.bin", pt, sizeof pt)) return;
    /* A vocabulary larger than the file holds. */
    ck_assert_int_eq(tok_load_llama2c(pt, 600, &t, err, sizeof err), -1);
    ck_assert_msg(strstr(err, pt) && strstr(err, "truncated at piece 512"), "%s", err);
    /* Cut files and an absurd piece length. */
    FILE *f = fopen(pt, "rb");
    static char data[8192];
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    testutil_tmpfile(path, sizeof path, ".bin");
    size_t cuts[] = {0, 2, 4, 10, 3000, n - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        f = fopen(path, "wb");
        fwrite(data, 1, cuts[k], f);
        fclose(f);
        ck_assert_int_eq(tok_load_llama2c(path, 512, &t, err, sizeof err), -1);
        ck_assert_msg(strstr(err, path), "cut %zu: %s", cuts[k], err);
    }
    int32_t huge = 1 << 30;
    memcpy(data + 8, &huge, 4); /* piece 0's length */
    f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    ck_assert_int_eq(tok_load_llama2c(path, 512, &t, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "piece 0") && strstr(err, "absurd"), "%s", err);
    unlink(path);
}
END_TEST

static Suite *tokenizer_suite(void) {
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_sources_agree_and_roundtrip);
    tcase_add_test(tc, test_matches_reference);
    tcase_add_test(tc, test_encode_edges);
    tcase_add_test(tc, test_load_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return testutil_run(tokenizer_suite());
}
