/* quantize: a model (llama2.c .bin, GGUF, or dummy:PRESET) written as a GGUF file whose
 * matrices are all of one type (F32, F16, BF16, Q8_0, Q4_0), for `twinserve quantize`.
 *
 * What is written: general.architecture "llama" and the llama.* hyperparameters the GGUF
 * loader reads (engine/model_gguf.c), general.file_type as llama.cpp numbers it, the
 * tensors under llama.cpp's names; the norms stay F32 (as llama.cpp's quantiser keeps
 * them); a matrix whose rows are not a whole number of 32-element blocks is stored F16
 * when a block type is asked for (counted in the report). The tokenizer is carried over:
 * a GGUF input's tokenizer.* keys verbatim, a .bin input's llama2.c tokenizer (the given
 * file, or tok512.bin beside the model) as tokenizer.ggml.* arrays; a dummy model has none.
 *
 * Values: quantised from the model's fp32 weights (engine/dequant.h dq_quantize), so a
 * quantised input is requantised from its dequantised values (exact for F32 output; for
 * block types it equals the input's blocks when they were made by the same rounding).
 *
 * Ownership: pure with respect to the caller; everything is freed before returning. */
#ifndef TWIN_QUANTIZE_H
#define TWIN_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t type;            /* DQ_* (engine/dequant.h) for every matrix */
    const char *tokenizer;    /* llama2.c tokenizer file; NULL: tok512.bin beside a .bin */
    uint64_t seed;            /* dummy:PRESET weights */
} quant_opts_t;

typedef struct {
    int n_matrices;           /* matrices written */
    int n_fallback;           /* of them stored F16: rows not whole blocks of the type */
    double params;            /* weights written (all tensors) */
    uint64_t bytes;           /* bytes of tensor data written */
    char tokenizer[560];      /* where the tokenizer came from, or "none" */
} quant_report_t;

/* "f32", "f16", "bf16", "q8_0", "q4_0" (any case) -> a DQ_* type; -1 when unknown. */
int quant_type_parse(const char *name, uint32_t *type);

/* Writes `out` from model spec `in`. 0, or -1 with a message naming the file. */
int quant_write(const char *in, const char *out, const quant_opts_t *o, quant_report_t *r,
                char *err, size_t errlen);

#endif
