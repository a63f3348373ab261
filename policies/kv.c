/* kv: see kv.h. A free stack plus a reference count per block: O(1) per block. */
#include "policies/kv.h"

#include <stdlib.h>

struct kv {
    int32_t num_blocks;
    int32_t block_size;
    int32_t num_free;
    int32_t *free_stack; /* [num_blocks], top at num_free - 1 */
    int32_t *ref;        /* [num_blocks] */
};

kv_t *kv_new(int32_t num_blocks, int32_t block_size) {
    if (num_blocks < 0 || block_size < 1) return NULL;
    kv_t *kv = calloc(1, sizeof *kv);
    if (!kv) goto fail;
    kv->free_stack = malloc(sizeof(int32_t) * (size_t)(num_blocks ? num_blocks : 1));
    kv->ref = calloc((size_t)(num_blocks ? num_blocks : 1), sizeof(int32_t));
    if (!kv->free_stack || !kv->ref) goto fail;
    kv->num_blocks = num_blocks;
    kv->block_size = block_size;
    kv->num_free = num_blocks;
    /* Lowest ids on top, so a fresh cache hands out 0, 1, 2, ... */
    for (int32_t i = 0; i < num_blocks; i++) kv->free_stack[i] = num_blocks - 1 - i;
    return kv;
fail:
    kv_free(kv);
    return NULL;
}

void kv_free(kv_t *kv) {
    if (!kv) return;
    free(kv->free_stack);
    free(kv->ref);
    free(kv);
}

int32_t kv_num_blocks(const kv_t *kv) { return kv->num_blocks; }
int32_t kv_block_size(const kv_t *kv) { return kv->block_size; }
int32_t kv_num_free(const kv_t *kv) { return kv->num_free; }
int32_t kv_num_used(const kv_t *kv) { return kv->num_blocks - kv->num_free; }

int kv_alloc(kv_t *kv, int32_t n, int32_t *ids) {
    if (n < 0 || n > kv->num_free) return -1;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = kv->free_stack[--kv->num_free];
        kv->ref[id] = 1;
        ids[i] = id;
    }
    return 0;
}

static int kv_valid_used(const kv_t *kv, const int32_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= kv->num_blocks || kv->ref[ids[i]] <= 0) return 0;
    return 1;
}

int kv_retain(kv_t *kv, const int32_t *ids, int32_t n) {
    if (!kv_valid_used(kv, ids, n)) return -1;
    for (int32_t i = 0; i < n; i++) kv->ref[ids[i]]++;
    return 0;
}

int kv_release(kv_t *kv, const int32_t *ids, int32_t n) {
    /* Validate first so a bad id changes nothing. An id repeated within one call can still
     * drive its count below zero: that is caught in the loop (earlier copies stay released). */
    if (!kv_valid_used(kv, ids, n)) return -1;
    for (int32_t i = 0; i < n; i++) {
        if (kv->ref[ids[i]] <= 0) return -1;
        if (--kv->ref[ids[i]] == 0) kv->free_stack[kv->num_free++] = ids[i];
    }
    return 0;
}

int32_t kv_refcount(const kv_t *kv, int32_t id) {
    return (id < 0 || id >= kv->num_blocks) ? -1 : kv->ref[id];
}
