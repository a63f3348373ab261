/* model_dummy: seeded random weights in the shape of a simulator preset (vLLM's
 * --load-format dummy), for timing studies where only the shape matters.
 *
 * Values: matrices uniform in [-a, a] with a = 0.02 * sqrt(3) (standard deviation 0.02, the
 * usual initialiser scale, so activations stay finite through many layers); RMSNorm weights
 * 1. The arena is filled in fixed chunks, each with its own xorshift64* stream seeded from
 * (seed, chunk index), so the weights depend only on the seed, never on the thread count.
 * rope_theta is 500000 for llama-3 presets (as those models use), 10000 otherwise. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "engine/model.h"
#include "sim/presets.h"

#define CHUNK_FLOATS ((size_t)1 << 20)
#define MAX_THREADS 16

typedef struct {
    float *base;
    size_t n;             /* floats in the arena */
    uint64_t seed;
    size_t next;          /* next chunk (shared, under lock) */
    pthread_mutex_t lock;
} fill_job_t;

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void fill_chunk(float *p, size_t n, uint64_t state) {
    const float scale = 0.0346410162f / 8388608.0f; /* a / 2^23 */
    if (state == 0) state = 1;
    for (size_t i = 0; i < n; i++) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        uint64_t r = state * 0x2545F4914F6CDD1Dull;
        /* 24 high bits -> [-2^23, 2^23) -> [-a, a) */
        p[i] = (float)((int32_t)(r >> 40) - 8388608) * scale;
    }
}

static void *fill_worker(void *arg) {
    fill_job_t *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        size_t k = j->next++;
        pthread_mutex_unlock(&j->lock);
        size_t off = k * CHUNK_FLOATS;
        if (off >= j->n) break;
        size_t n = j->n - off < CHUNK_FLOATS ? j->n - off : CHUNK_FLOATS;
        fill_chunk(j->base + off, n, splitmix64(j->seed ^ splitmix64(k)));
    }
    return NULL;
}

static void fill_all(float *base, size_t n, uint64_t seed) {
    fill_job_t j = {.base = base, .n = n, .seed = seed, .next = 0};
    pthread_mutex_init(&j.lock, NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t chunks = (n + CHUNK_FLOATS - 1) / CHUNK_FLOATS;
    int nt = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus;
    if ((size_t)nt > chunks) nt = (int)chunks;
    pthread_t th[MAX_THREADS];
    int started = 0;
    for (int i = 1; i < nt; i++)
        if (pthread_create(&th[started], NULL, fill_worker, &j) == 0) started++;
    fill_worker(&j); /* this thread works too; it also finishes alone if none started */
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.lock);
}

int model_load_dummy(const char *preset, uint64_t seed, model_t **out, char *err, size_t errlen) {
    *out = NULL;
    preset_model_t p;
    if (preset_model_get(preset, &p, err, errlen) != 0) return -1;
    model_config_t c = {
        .dim = p.d_model, .n_layers = p.n_layers, .n_heads = p.n_heads,
        .n_kv_heads = p.n_kv_heads, .head_dim = p.head_dim, .hidden_dim = p.d_ff,
        .vocab = p.vocab, .max_seq = p.max_seq,
        .rope_theta = strncasecmp(p.name, "llama-3", 7) == 0 ? 500000.0f : 10000.0f,
        .norm_eps = 1e-5f, .tied = p.tied_embeddings ? 1 : 0,
    };
    char source[512];
    snprintf(source, sizeof source, "dummy:%s", preset);
    model_t *m;
    if (model_alloc(&c, source, "dummy", &m, err, errlen) != 0) return -1;
    size_t n = model_body_floats(&c) + (c.tied ? 0 : (size_t)c.vocab * (size_t)c.dim);
    fill_all(m->tok_emb, n, seed);
    for (int32_t l = 0; l < c.n_layers; l++)
        for (int32_t i = 0; i < c.dim; i++)
            m->layers[l].attn_norm[i] = m->layers[l].ffn_norm[i] = 1.0f;
    for (int32_t i = 0; i < c.dim; i++) m->final_norm[i] = 1.0f;
    *out = m;
    return 0;
}
