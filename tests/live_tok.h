/* live_tok: the tokenizer of the live suites (test_live.c, test_live_pieces.c): a small
 * llama2.c-format file written by the test (the three specials, the 256 byte pieces
 * <0x00>..<0xFF> at ids 3..258, then six words), so nothing needs the shared data. Header
 * only; each suite includes it once. The caller frees the tokenizer (tok_free). */
#ifndef TWIN_TESTS_LIVE_TOK_H
#define TWIN_TESTS_LIVE_TOK_H

#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/tokenizer.h"
#include "tests/testutil.h"

enum { W_ONCE = 259, W_UPON, W_WAS, W_A, W_LILY, W_NAMED, VOCAB };
#define BYTE(b) (3 + (b))

static tok_t *tiny_tokenizer(void) {
    static const char *const words[] = { " Once", " upon", " was", " a", " Lily", " named" };
    char path[256], err[256];
    testutil_tmpfile(path, sizeof path, ".bin");
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    int32_t max_len = 16;
    fwrite(&max_len, 4, 1, f);
    for (int32_t i = 0; i < VOCAB; i++) {
        char piece[16];
        if (i < 3) snprintf(piece, sizeof piece, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else if (i < 259) snprintf(piece, sizeof piece, "<0x%02X>", i - 3);
        else snprintf(piece, sizeof piece, "%s", words[i - 259]);
        float score = (float)-i;
        int32_t len = (int32_t)strlen(piece);
        fwrite(&score, 4, 1, f);
        fwrite(&len, 4, 1, f);
        fwrite(piece, 1, (size_t)len, f);
    }
    fclose(f);
    tok_t *t = NULL;
    ck_assert_msg(tok_load_llama2c(path, VOCAB, &t, err, sizeof err) == 0, "%s", err);
    unlink(path);
    return t;
}

#endif
