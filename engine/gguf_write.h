/* gguf_write: a writer for GGUF v3 files (the format engine/gguf.h reads): metadata
 * key/values (scalars, strings, arrays of numbers or strings, or a key copied from a file
 * being read), tensor infos and the data section, every tensor at a multiple of
 * GGUF_W_ALIGN bytes (general.alignment is not written: 32 is the format's default).
 *
 * Invariants: keys are written in the order added, tensors likewise; a tensor's shape is
 * {ne0, ne1} (ne1 = 0: a vector) or {ne0, ne1, ne2} (gguf_w_tensor3: a mixture of experts'
 * stacked matrices, ne2 outermost), ne0 contiguous, and its bytes are dq_bytes(type,
 * ne0 * ne1 * ne2) (engine/dequant.h). Errors (a duplicate tensor name, a key that cannot be
 * copied, a failed write) are kept: every later call is a no-op, and gguf_w_write reports
 * the first one.
 *
 * Ownership: gguf_w_new returns a writer owned by the caller (gguf_w_free). Keys and
 * names are copied; tensor data is borrowed until gguf_w_write returns. */
#ifndef TWIN_GGUF_WRITE_H
#define TWIN_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf.h"

#define GGUF_W_ALIGN 32

typedef struct gguf_writer gguf_writer_t;

gguf_writer_t *gguf_w_new(void);
void gguf_w_free(gguf_writer_t *w);
/* the first error ("" when none) */
const char *gguf_w_errmsg(const gguf_writer_t *w);

void gguf_w_u32(gguf_writer_t *w, const char *key, uint32_t v);
void gguf_w_f32(gguf_writer_t *w, const char *key, float v);
void gguf_w_str(gguf_writer_t *w, const char *key, const char *s);
/* an array of n strings (p[i], len[i] bytes) */
void gguf_w_arr_str(gguf_writer_t *w, const char *key, const char *const *p,
                    const uint32_t *len, uint64_t n);
/* an array of n numbers of GGUF type `type` (GGUF_F32, GGUF_I32, ...), little-endian */
void gguf_w_arr_num(gguf_writer_t *w, const char *key, uint32_t type, const void *data,
                    uint64_t n);
/* kv as read by engine/gguf.h (nested arrays are refused) */
void gguf_w_copy(gguf_writer_t *w, const gguf_kv_t *kv);

void gguf_w_tensor(gguf_writer_t *w, const char *name, uint64_t ne0, uint64_t ne1,
                   uint32_t type, const void *data);
/* a 3-D tensor (ne2 > 0; ne2 = 0 is gguf_w_tensor) */
void gguf_w_tensor3(gguf_writer_t *w, const char *name, uint64_t ne0, uint64_t ne1,
                    uint64_t ne2, uint32_t type, const void *data);

/* Writes the file (replacing path). 0, or -1 with the message in gguf_w_errmsg. */
int gguf_w_write(gguf_writer_t *w, const char *path);

#endif
