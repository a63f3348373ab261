/* trace_reuse: a trace's own prefix reuse, the share of prompt blocks a request could take
 * from an earlier request's KV given an unlimited cache (what `trace info` reports; the
 * bound a prefix-caching run's hit rate approaches).
 *
 * Invariants:
 *  - A request's prompt blocks are its trace hash ids (trace_req_t: Mooncake's, 512 tokens
 *    each, the last one partial; a plain trace's one prefix group of prefix_tokens). Each
 *    id names its whole prefix (Mooncake's ids chain), so the blocks a request can reuse
 *    are its leading ids already seen in an earlier request, up to its first new one: a
 *    cache keys blocks by their prefix (policies/prefix.h) and stops at the first miss.
 *  - Reused tokens are those blocks' tokens, at most the prompt's; requests without ids
 *    count their prompt tokens and no block.
 *  - Memory grows with the distinct ids (a hash set, 8 bytes a slot at most 50% full).
 *
 * Ownership: trace_reuse_new's object belongs to the caller (trace_reuse_free); the
 * requests are read during the call only. */
#ifndef TWIN_TRACE_REUSE_H
#define TWIN_TRACE_REUSE_H

#include <stdint.h>

#include "traces/trace.h"

typedef struct trace_reuse trace_reuse_t;

typedef struct {
    int64_t requests, hashed_requests;   /* added, and of them with hash ids */
    int64_t blocks, reused_blocks;       /* hash ids, and those an earlier request held */
    int64_t prompt_tokens, reused_tokens;
} trace_reuse_stats_t;

/* NULL when out of memory. */
trace_reuse_t *trace_reuse_new(void);
/* Counts r's reusable leading blocks against the requests added before it, then adds its
 * ids. 0, or -1 when out of memory (the stats then stop at the previous request). */
int trace_reuse_add(trace_reuse_t *u, const trace_req_t *r);
void trace_reuse_stats(const trace_reuse_t *u, trace_reuse_stats_t *out);
void trace_reuse_free(trace_reuse_t *u);

#endif
