/* engine_setup: the engine's model, backend, draft, KV pool and step buffers, and the run's
 * config JSON (engine_internal.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "sim/cost_file.h"
#include "traces/json.h"

int engine_grow_i32(engine_t *e, int32_t **p, int64_t n) {
    int32_t *v = realloc(*p, sizeof **p * (size_t)(n > 0 ? n : 1));
    if (!v) return FAIL(e, "out of memory (step batch)");
    *p = v;
    return 0;
}

/* KV blocks that fit in `bytes`: a core block holds the target's KV and the draft model's
 * for its block_size tokens (draft.h), as the simulator's sim_kv_blocks counts them. */
static int32_t kv_blocks_for(engine_t *e, const model_config_t *c, int32_t bs, double bytes) {
    if (!e->draft) return fwd_kv_blocks_for(e->bk, c, bs, bytes);
    bk_kv_shape_t s = { c->n_layers, 1, bs, c->n_kv_heads, c->head_dim };
    double per = (double)e->bk->kv_block_bytes(e->bk, &s) +
                 (double)draft_kv_block_bytes(e->draft);
    double n = bytes > 0 && per > 0 ? floor(bytes / per) : 0;
    return n > 2147483647.0 ? 2147483647 : (int32_t)n;
}

/* --draft FILE|dummy:PRESET: the draft model on a second instance of the target's backend
 * (NULL or "ngram": the n-gram proposer, no model). */
static int open_draft(engine_t *e, const bk_opts_t *bo) {
    const engine_opts_t *o = e->o;
    if (!o->draft || !strcmp(o->draft, "ngram")) return 0;
    char err[1200];
    draft_opts_t d = { .spec = o->draft, .backend = e->bk->name, .bk = *bo, .seed = o->seed,
                       .vocab = e->vocab, .max_model_len = e->max_model_len,
                       .max_tokens = o->max_tokens, .max_seqs = o->max_seqs,
                       .block_size = o->block_size };
    if (draft_open(&d, &e->draft, err, sizeof err) != 0) return FAIL(e, "%s", err);
    return 0;
}

/* The run's hardware: "cpu (Q8_0 weights, f16 KV)". The weights are the stored type the
 * products read (--weights native) once the forward pass exists, else the backend's own;
 * the KV type shows when it is not the default. */
static void describe_hw(const engine_t *e, const engine_opts_t *o, char *hw_desc,
                        size_t hw_len) {
    const char *wt = e->fwd && fwd_weight_type(e->fwd) ? fwd_weight_type(e->fwd)
                                                       : e->bk->weight_type;
    snprintf(hw_desc, hw_len, "%s (%s weights%s)", e->bk->name, wt,
             o->kv_type && !strcmp(o->kv_type, "f16") ? ", f16 KV" : "");
}

/* --policy-cost: the cost model a policy's s:step_cost reads (one device: a linear file is
 * fitted at one degree, as the engine runs). */
static int engine_load_policy_cost(engine_t *e) {
    char err[1024];
    cost_file_t *cf = malloc(sizeof *cf);
    int rc = -1;
    if (!cf) return FAIL(e, "out of memory (--policy-cost)");
    if (cost_file_read(e->o->policy_cost, cf, err, sizeof err) != 0)
        FAIL(e, "--policy-cost: %s", err);
    else if (!(e->policy_cost = cost_file_model(cf, 1, err, sizeof err)))
        FAIL(e, "--policy-cost %s: %s", e->o->policy_cost, err);
    else
        rc = 0;
    free(cf);
    return rc;
}

int engine_setup(engine_t *e, char *hw_desc, size_t hw_len) {
    const engine_opts_t *o = e->o;
    char err[1024];
    if (o->block_size < 1 || o->max_tokens < 1 || o->max_seqs < 1)
        return FAIL(e, "--block-size, --max-tokens and --max-seqs must be >= 1");
    if (o->policy_cost && engine_load_policy_cost(e) != 0) return -1;
    if (model_open(o->model, o->seed, MODEL_SHAPE_ONLY | MODEL_LAZY, &e->model, err,
                   sizeof err) != 0)
        return FAIL(e, "--model: %s", err);
    const model_config_t *c = &e->model->cfg;
    e->vocab = c->vocab;
    e->max_model_len = o->max_model_len > 0 ? o->max_model_len : c->max_seq;
    if (e->max_model_len > c->max_seq)
        return FAIL(e, "--max-model-len %d exceeds the model's context length %d (%s)",
                    e->max_model_len, c->max_seq, o->model);

    bk_opts_t bo = { .n_threads = o->n_threads, .dtype = o->dtype, .weights = o->weights,
                     .kv_type = o->kv_type, .batch_invariant = o->batch_invariant };
    e->bk = backend_new(o->backend ? o->backend : "cpu", &bo, err, sizeof err);
    if (!e->bk) return FAIL(e, "--backend: %s", err);
    describe_hw(e, o, hw_desc, hw_len);
    if (open_draft(e, &bo)) return -1;

    /* KV: every block the core hands out, plus padding's scratch (one full context). On a
     * GPU, by default, whatever --gpu-util of the device's memory leaves after the weights
     * and activations (vLLM's gpu_memory_utilization); the pool is then reserved after
     * fwd_new, when that is known. */
    int32_t bs = o->block_size;
    e->scratch_n = (e->max_model_len + bs - 1) / bs;
    double util = o->gpu_util;
    int by_util = o->kv_blocks <= 0 && o->kv_mem_gb <= 0 &&
                  (util > 0 || strcmp(e->bk->name, "cuda") == 0);
    if (by_util && util <= 0) util = ENGINE_GPU_UTIL;
    int32_t blocks = o->kv_blocks;
    if (!by_util && blocks <= 0) {
        size_t free_b = 0, total_b = 0;
        double bytes = o->kv_mem_gb * 1e9;
        if (bytes <= 0) {
            /* Enough for max_seqs full contexts, within a quarter of the free memory. */
            int64_t full = (int64_t)e->scratch_n * o->max_seqs;
            if (e->bk->mem_info(e->bk, &free_b, &total_b) != 0)
                return FAIL(e, "backend memory: %s", e->bk->errmsg);
            int32_t cap = kv_blocks_for(e, c, bs, 0.25 * (double)free_b);
            blocks = full < cap ? (int32_t)full : cap;
        } else {
            blocks = kv_blocks_for(e, c, bs, bytes);
        }
        if (blocks < 1) return FAIL(e, "no room for a KV cache (check --kv-mem / --kv-blocks)");
    }
    double logits_rows = ENGINE_LOGITS_BYTES / (4.0 * c->vocab);
    e->max_sample = logits_rows < o->max_tokens ? (int32_t)logits_rows : o->max_tokens;
    if (e->max_sample < 1) e->max_sample = 1;
    fwd_opts_t fo = { .max_tokens = o->max_tokens, .max_sample = e->max_sample,
                      .n_blocks = 0, .block_size = bs };
    if (fwd_new(e->bk, e->model, &fo, &e->fwd, err, sizeof err) != 0)
        return FAIL(e, "%s", err);
    describe_hw(e, o, hw_desc, hw_len);   /* now with the stored type the products read */
    if (by_util) {
        size_t free_b = 0, total_b = 0;
        if (e->bk->mem_info(e->bk, &free_b, &total_b) != 0)
            return FAIL(e, "backend memory: %s", e->bk->errmsg);
        double budget = (double)free_b - (1.0 - util) * (double)total_b;
        int32_t all = kv_blocks_for(e, c, bs, budget);
        if (all <= e->scratch_n)
            return FAIL(e, "--gpu-util %.2f leaves %.2f GB of the %.1f GB on %s for the KV "
                        "cache after the weights and activations: too little (raise "
                        "--gpu-util or set --kv-blocks)", util, budget / 1e9,
                        (double)total_b / 1e9, e->bk->name);
        blocks = all - e->scratch_n;
    }
    /* Block ids are int32 and padding's scratch blocks come after the core's. */
    if (blocks > INT32_MAX - e->scratch_n)
        return FAIL(e, "a KV pool of %d blocks (plus %d scratch blocks for padding) exceeds the "
                    "engine's %d block ids: lower --kv-blocks or --kv-mem", blocks, e->scratch_n,
                    INT32_MAX);
    e->num_blocks = blocks;
    e->scratch_base = blocks;
    if (fwd_kv_init(e->fwd, blocks + e->scratch_n) != 0)
        return FAIL(e, "%s: %s", e->model->source, fwd_errmsg(e->fwd));
    if (e->draft && draft_kv_init(e->draft, blocks + e->scratch_n) != 0)
        return FAIL(e, "--draft: %s", draft_errmsg(e->draft));
    /* The backend holds its own copy of the weights now: free the host copy. */
    snprintf(e->model_source, sizeof e->model_source, "%s", e->model->source);
    model_preset_shape(&e->model->cfg, "engine", (int32_t)e->bk->elem_size(e->bk, BK_WEIGHT),
                       &e->shape);
    e->has_shape = 1;
    model_free(e->model);
    e->model = NULL;

    e->seq_cap = o->max_seqs + 1;
    if (engine_grow_i32(e, &e->tokens, o->max_tokens) || engine_grow_i32(e, &e->pos, o->max_tokens) ||
        engine_grow_i32(e, &e->sample_rows, o->max_tokens) || engine_grow_i32(e, &e->ids, o->max_tokens) ||
        engine_grow_i32(e, &e->scratch_table, e->scratch_n))
        return -1;
    e->sample = malloc(sizeof *e->sample * (size_t)o->max_tokens);
    if (!e->sample) return FAIL(e, "out of memory (step batch)");
    for (int32_t i = 0; i < e->scratch_n; i++) e->scratch_table[i] = e->scratch_base + i;
    return 0;
}

char *engine_config_json(const engine_t *e) {
    const engine_opts_t *o = e->o;
    char *config = NULL;
    size_t config_len = 0;
    FILE *cf = open_memstream(&config, &config_len);
    if (!cf) return NULL;
    fprintf(cf, "{\"num_blocks\":%d,\"block_size\":%d,\"max_tokens\":%d,\"max_seqs\":%d,"
                "\"max_model_len\":%d,\"watermark\":%.17g,\"backend\":\"%s\",\"threads\":%d,"
                "\"weight_type\":\"%s\",\"weight_bytes\":%d,\"dtype\":",
            e->num_blocks, o->block_size, o->max_tokens, o->max_seqs, e->max_model_len,
            o->watermark, e->bk ? e->bk->name : (o->backend ? o->backend : "cpu"), o->n_threads,
            e->fwd && fwd_weight_type(e->fwd) ? fwd_weight_type(e->fwd)
                                            : e->bk ? e->bk->weight_type : "",
            e->bk ? (int)e->bk->elem_size(e->bk, BK_WEIGHT) : 0);
    json_write_str(cf, o->dtype ? o->dtype : "");
    /* native: the products read a GGUF's stored types where the backend can (weight_type) */
    fprintf(cf, ",\"weights\":\"%s\"", o->weights ? o->weights : "native");
    fprintf(cf, ",\"kv_type\":\"%s\"", o->kv_type ? o->kv_type : "f32");
    if (o->policy_cost) {
        fputs(",\"policy_cost\":", cf);
        json_write_str(cf, o->policy_cost);
    }
    /* What policies were shown of output lengths (validate replays it, report shows it). */
    fprintf(cf, ",\"oracle_lengths\":%s", o->oracle_lengths ? "true" : "false");
    fprintf(cf, ",\"clip_to_context\":%s", o->clip_to_context ? "true" : "false");
    fprintf(cf, ",\"prefix_caching\":%s", o->prefix_caching ? "true" : "false");
    if (o->max_output_tokens > 0) fprintf(cf, ",\"max_output_tokens\":%d", o->max_output_tokens);
    fprintf(cf, ",\"batch_invariant\":%s,\"temperature\":%.9g,\"top_k\":%d,\"top_p\":%.9g,"
                "\"max_prompt\":%d,\"max_output\":%d,\"save_tokens\":%s,\"idle\":\"%s\","
                "\"proposer\":\"%s\",\"model_spec\":",
            o->batch_invariant ? "true" : "false", o->temperature, o->top_k, o->top_p,
            o->trace_opts.max_prompt, o->trace_opts.max_output,
            o->save_tokens ? "true" : "false", o->idle_sleep ? "sleep" : "spin",
            e->draft ? "draft" : "ngram");
    json_write_str(cf, o->model ? o->model : "");
    if (e->draft) {
        fputs(",\"draft_spec\":", cf);
        json_write_str(cf, o->draft);
        fputs(",\"draft_model\":", cf);
        json_write_str(cf, draft_source(e->draft));
        preset_model_t ds;
        draft_shape(e->draft, &ds);
        fputs(",\"draft_shape\":", cf);
        preset_model_json(cf, &ds);
    }
    if (e->has_shape) {
        fputs(",\"shape\":", cf);
        preset_model_json(cf, &e->shape);
    }
    fputc(',', cf);
    replay_json_path(cf, "policy_file", o->policy_path);
    /* a live run's trace is the file its server writes when it stops (live_write_trace) */
    if (!o->live || o->trace_path) {
        fputc(',', cf);
        replay_trace_json(cf, o->trace_path, &o->trace_opts);
    }
    if (o->config_extra) fprintf(cf, ",%s", o->config_extra);
    fputc('}', cf);
    if (fclose(cf) != 0) {
        free(config);
        return NULL;
    }
    return config;
}
