/* cuda_graph: CUDA graphs of whole decode steps (cuda_kernels.h, "step graphs").
 *
 * Why: a decode step of an 8B model is some 330 small launches; one after another each
 * leaves a gap of 1-2 us on the GPU while the host issues the next, which at batch 1 is
 * a tenth of the step. A graph of the step is launched with one call and its kernels
 * follow each other without those gaps.
 *
 * How: the backend does not launch a decode step's ops as they come; it records them
 * (backend_cuda.cu) and hands the whole step to ck_graph_run with a key: the bytes of
 * everything the launches depend on (every op's arguments, the step's device pointers and
 * host scalars). The key is the batch's shape in full: two steps with equal keys launch
 * the same kernels with the same arguments, and differ only in what the step's metadata
 * upload wrote into device memory before the graph runs. So:
 *  - a key seen for the first time: the ops run as plain launches, and the key's hash is
 *    remembered (a shape that never comes back costs no capture);
 *  - seen once before: the ops are captured into a graph (stream capture, thread-local
 *    mode, so nothing else in the process is disturbed), instantiated, kept under the
 *    key, and launched;
 *  - held: the graph is launched.
 * At most CK_GRAPH_CAP graphs are held; the least recently launched goes first. A capture
 * that fails (an op the driver refuses to capture) turns graphs off for good and the
 * step runs as plain launches: the outputs are the same either way, only the gaps differ.
 *
 * Ownership: ck_graphs_t owns its graphs and keys; ck_graphs_free destroys them (after the
 * caller has synchronised the stream). Host code only; every CUDA error is returned with
 * the call's name in `what`. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_kernels.h"
#include "traces/rng.h"

#define CK_GRAPH_CAP 32 /* graphs held */
#define CK_SEEN_CAP 256 /* hashes of keys seen once */

/* a held graph and its key */
struct ck_graph_entry {
    cudaGraphExec_t exec;
    void *key;
    size_t key_bytes;
    uint64_t hash, last_use;
};
typedef ck_graph_entry entry;

namespace {

uint64_t mix(uint64_t z) { return rng_splitmix64(&z); }

/* 8 bytes at a time: a step's key is tens of KB, hashed every step */
uint64_t hash_of(const void *key, size_t n) {
    const unsigned char *p = (const unsigned char *)key;
    uint64_t h = mix(n), w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = mix(h ^ w) + i;
    }
    w = 0;
    memcpy(&w, p + i, n - i);
    return mix(h ^ w);
}

} // namespace

struct ck_graphs {
    entry held[CK_GRAPH_CAP];
    int n_held;
    uint64_t seen[CK_SEEN_CAP];
    int n_seen, seen_next;
    uint64_t clock;
    int off;              /* a capture failed: plain launches from now on */
    ck_graph_stats_t stats;
};

extern "C" ck_graphs_t *ck_graphs_new(void) { return (ck_graphs_t *)calloc(1, sizeof(ck_graphs_t)); }

static void drop(entry *e) {
    if (e->exec) cudaGraphExecDestroy(e->exec);
    free(e->key);
    memset(e, 0, sizeof *e);
}

extern "C" void ck_graphs_free(ck_graphs_t *g) {
    if (!g) return;
    for (int i = 0; i < g->n_held; i++) drop(&g->held[i]);
    free(g);
}

extern "C" const ck_graph_stats_t *ck_graphs_stats(const ck_graphs_t *g) { return &g->stats; }

static entry *find(ck_graphs_t *g, const void *key, size_t n, uint64_t h) {
    for (int i = 0; i < g->n_held; i++) {
        entry *e = &g->held[i];
        if (e->hash == h && e->key_bytes == n && !memcmp(e->key, key, n)) return e;
    }
    return NULL;
}

/* the key's hash was seen before; remembers it otherwise */
static int seen_before(ck_graphs_t *g, uint64_t h) {
    for (int i = 0; i < g->n_seen; i++)
        if (g->seen[i] == h) return 1;
    g->seen[g->seen_next] = h;
    g->seen_next = (g->seen_next + 1) % CK_SEEN_CAP;
    if (g->n_seen < CK_SEEN_CAP) g->n_seen++;
    return 0;
}

/* a free slot, the least recently used one's when all are taken */
static entry *slot(ck_graphs_t *g) {
    if (g->n_held < CK_GRAPH_CAP) return &g->held[g->n_held++];
    entry *old = &g->held[0];
    for (int i = 1; i < CK_GRAPH_CAP; i++)
        if (g->held[i].last_use < old->last_use) old = &g->held[i];
    drop(old);
    g->stats.evicted++;
    return old;
}

extern "C" cudaError_t ck_graph_run(ck_graphs_t *g, cudaStream_t st, const void *key,
                                    size_t key_bytes, cudaError_t (*ops)(void *ctx), void *ctx,
                                    const char **what) {
    *what = "";
    if (g->off) {
        g->stats.eager++;
        return ops(ctx);
    }
    const uint64_t h = hash_of(key, key_bytes);
    entry *e = find(g, key, key_bytes, h);
    cudaError_t err;
    if (!e) {
        if (!seen_before(g, h)) {
            g->stats.eager++;
            return ops(ctx);
        }
        void *copy = malloc(key_bytes);
        if (!copy) {
            g->stats.eager++;
            return ops(ctx);
        }
        memcpy(copy, key, key_bytes);
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        if ((err = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal)) != cudaSuccess) {
            free(copy);
            *what = "cudaStreamBeginCapture";
            return err;
        }
        cudaError_t op_err = ops(ctx);
        err = cudaStreamEndCapture(st, &graph); /* ends the capture even after a failure */
        if (op_err == cudaSuccess && err == cudaSuccess)
            err = cudaGraphInstantiate(&exec, graph, 0);
        if (graph) cudaGraphDestroy(graph);
        if (op_err != cudaSuccess || err != cudaSuccess) {
            /* nothing ran during the capture: run the step as plain launches, and stay
             * with them (a launch error shows again there, with its own message) */
            free(copy);
            cudaGetLastError();
            g->off = 1;
            g->stats.failed++;
            g->stats.eager++;
            return ops(ctx);
        }
        e = slot(g);
        e->exec = exec;
        e->key = copy;
        e->key_bytes = key_bytes;
        e->hash = h;
        g->stats.captured++;
    } else {
        g->stats.replayed++;
    }
    e->last_use = ++g->clock;
    if ((err = cudaGraphLaunch(e->exec, st)) != cudaSuccess) *what = "cudaGraphLaunch";
    return err;
}
