/* model_llama2c: Karpathy's llama2.c checkpoint (the legacy "version 0" export).
 *
 * Layout: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
 * a negative vocab_size means an unshared classifier), then fp32 tensors in exactly the
 * order of model_alloc's arena up to final_norm, two legacy RoPE tables (freq_cis real and
 * imaginary, seq_len * head_dim / 2 floats each, skipped: the engine computes RoPE), and
 * the classifier [vocab][dim] when unshared. The file size is checked against every tensor
 * before anything is read, so a short file names the first tensor it cuts. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model.h"

/* The first tensor whose bytes extend past `size`, for the truncation message. */
static void missing_tensor(const model_config_t *c, uint64_t size, char *buf, size_t len) {
    static const char *names[9] = {"rms_att", "wq", "wk", "wv", "wo",
                                   "rms_ffn", "w1", "w2", "w3"};
    uint64_t d = (uint64_t)c->dim, q = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
    uint64_t kv = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim, h = (uint64_t)c->hidden_dim;
    uint64_t sz[9] = {d, q * d, kv * d, kv * d, d * q, d, h * d, d * h, h * d};
    uint64_t off = 28, n = (uint64_t)c->vocab * d * 4;
    if (off + n > size) {
        snprintf(buf, len, "token_embedding (bytes %llu..%llu)", (unsigned long long)off,
                 (unsigned long long)(off + n));
        return;
    }
    off += n;
    for (int k = 0; k < 9; k++) {
        n = sz[k] * (uint64_t)c->n_layers * 4;
        if (off + n > size) {
            snprintf(buf, len, "%s of %d layers (bytes %llu..%llu)", names[k], (int)c->n_layers,
                     (unsigned long long)off, (unsigned long long)(off + n));
            return;
        }
        off += n;
    }
    const char *rest[3] = {"rms_final", "the RoPE tables", "wcls"};
    uint64_t rn[3] = {d * 4, (uint64_t)c->max_seq * (uint64_t)c->head_dim * 4,
                      (uint64_t)c->vocab * d * 4};
    for (int k = 0; k < 3; k++) {
        if (off + rn[k] > size) {
            snprintf(buf, len, "%s (bytes %llu..%llu)", rest[k], (unsigned long long)off,
                     (unsigned long long)(off + rn[k]));
            return;
        }
        off += rn[k];
    }
    snprintf(buf, len, "nothing");
}

int model_load_llama2c(const char *path, model_t **out, char *err, size_t errlen) {
    int rc = -1;
    model_t *m = NULL;
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open model file: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    int32_t h[7];
    if (fread(h, sizeof(int32_t), 7, f) != 7) {
        snprintf(err, errlen,
                 "%s: %lld bytes, too short for a llama2.c header (28 bytes) or a GGUF file",
                 path, (long long)st.st_size);
        goto done;
    }
    model_config_t c = {
        .dim = h[0], .hidden_dim = h[1], .n_layers = h[2], .n_heads = h[3],
        .n_kv_heads = h[4], .vocab = h[5] < 0 ? (h[5] == INT32_MIN ? 0 : -h[5]) : h[5],
        .max_seq = h[6], .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = h[5] > 0,
    };
    char what[600];
    snprintf(what, sizeof what, "%s (llama2.c header)", path);
    /* Sizes first (a placeholder head_dim), so that a file of another kind reads as
     * "out of range" rather than as a divisibility puzzle. */
    c.head_dim = 2;
    if (model_config_check(&c, what, err, errlen) != 0) goto done;
    if (c.dim % c.n_heads != 0) {
        snprintf(err, errlen, "%s: dim = %d is not a multiple of n_heads = %d", what,
                 (int)c.dim, (int)c.n_heads);
        goto done;
    }
    c.head_dim = c.dim / c.n_heads;
    if (model_config_check(&c, what, err, errlen) != 0) goto done;

    uint64_t body = (uint64_t)model_body_floats(&c) * 4;
    uint64_t rope = (uint64_t)c.max_seq * (uint64_t)c.head_dim * 4;
    uint64_t cls = c.tied ? 0 : (uint64_t)c.vocab * (uint64_t)c.dim * 4;
    uint64_t need = 28 + body + rope + cls;
    if ((uint64_t)st.st_size < need) {
        char miss[160];
        missing_tensor(&c, (uint64_t)st.st_size, miss, sizeof miss);
        snprintf(err, errlen,
                 "%s: truncated: the header (dim %d, %d layers, vocab %d) needs %llu bytes, "
                 "the file has %lld; missing from %s",
                 path, (int)c.dim, (int)c.n_layers, (int)c.vocab, (unsigned long long)need,
                 (long long)st.st_size, miss);
        goto done;
    }
    if (model_alloc(&c, path, "llama2c", &m, err, errlen) != 0) goto done;
    size_t nbody = model_body_floats(&c);
    if (fread(m->tok_emb, sizeof(float), nbody, f) != nbody ||
        (!c.tied && (fseeko(f, (off_t)(28 + body + rope), SEEK_SET) != 0 ||
                     fread(m->lm_head, 4, (size_t)c.vocab * (size_t)c.dim, f) !=
                         (size_t)c.vocab * (size_t)c.dim))) {
        snprintf(err, errlen, "%s: read error: %s", path,
                 ferror(f) ? strerror(errno) : "short read");
        goto done;
    }
    *out = m;
    m = NULL;
    rc = 0;
done:
    model_free(m);
    fclose(f);
    return rc;
}
