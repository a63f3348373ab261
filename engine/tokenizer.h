/* tokenizer: the sentencepiece-style BPE of llama2.c and of GGUF files with
 * tokenizer.ggml.model = "llama": a vocabulary of pieces with merge scores, byte fallback
 * (<0xNN> pieces), BOS = 1, EOS = 2.
 *
 * Encoding (as llama2.c): optional BOS, a dummy-prefix space when the text is non-empty,
 * UTF-8 code points looked up as pieces (bytes + 3 when a code point is unknown), then
 * greedy merges of the adjacent pair whose merged piece has the highest score.
 * Decoding: a piece, with the leading space dropped after BOS and <0xNN> turned into the
 * raw byte. GGUF pieces spell the space as U+2581; they are stored with a plain space so
 * both sources behave identically.
 *
 * Ownership: tok_t owns its pieces; tok_decode returns a pointer into the tokenizer or into
 * a small per-tokenizer buffer, valid until the next tok_decode call. */
#ifndef TWIN_TOKENIZER_H
#define TWIN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tok tok_t;

#define TOK_BOS 1
#define TOK_EOS 2

/* tok512.bin-style file (llama2.c): int32 max_token_length, then per piece float score,
 * int32 len, bytes. vocab is the model's vocabulary size. 0 or -1 with a message. */
int tok_load_llama2c(const char *path, int32_t vocab, tok_t **out, char *err, size_t errlen);
/* The tokenizer embedded in a GGUF file's metadata. */
int tok_load_gguf(const char *path, tok_t **out, char *err, size_t errlen);
void tok_free(tok_t *t);
/* A model's tokenizer: `given` (a llama2.c tokenizer file) when not NULL; else a GGUF
 * model's own (format "gguf"), or tok<VOCAB>.bin then tokenizer.bin beside a llama2.c
 * checkpoint (format "llama2c"); checked against the model's vocabulary. Other formats
 * (dummy weights) have none: 0 with *out NULL. -1 with a message naming the model. */
int tok_load_for_model(const char *model, const char *format, int32_t vocab, const char *given,
                       tok_t **out, char *err, size_t errlen);

int32_t tok_vocab(const tok_t *t);
/* Piece `id` (0 <= id < tok_vocab) as stored: spaces as spaces, not U+2581; its score and
 * whether it is special (not text). For writers that carry a tokenizer over. */
const char *tok_piece(const tok_t *t, int32_t id, uint32_t *len, float *score, int *special);

/* Encodes text into ids[cap]; *n set to the count. -1 with a message when cap is too small
 * or the text is not valid to encode. */
int tok_encode(tok_t *t, const char *text, int bos, int eos, int32_t *ids, int32_t cap,
               int32_t *n, char *err, size_t errlen);
/* The text of token `id` following token `prev` (see above); "" for an out-of-range id. */
const char *tok_decode(tok_t *t, int32_t prev, int32_t id);

#endif
