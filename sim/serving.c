/* serving: see serving.h. The built-in profiles are the files sim/serving/NAME.serving,
 * embedded by the Makefile as serving_builtins[] (build/gen/serving_builtin.c). */
#include "sim/serving.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "sim/errf.h"
#include "traces/json.h"

typedef struct {
    const char *name, *text;
} serving_builtin_t;
extern const serving_builtin_t serving_builtins[];

#define SV(f) offsetof(serving_t, f)
static const kv_spec_t keys[] = {
    {"name", KV_NAME, SV(name), 0},
    {"engine", KV_TEXT, SV(engine), 0},
    {"source", KV_TEXT, SV(source), 0},
    {"fitted_at", KV_TEXT, SV(fitted_at), 0},
    {"async_scheduling", KV_INT, SV(async_scheduling), 1},
    {"cpu_step_s", KV_DOUBLE, SV(cpu_step_s), 1},
    {"cpu_seq_s", KV_DOUBLE, SV(cpu_seq_s), 1},
    {"cpu_token_s", KV_DOUBLE, SV(cpu_token_s), 1},
    {"cuda_graphs", KV_INT, SV(cuda_graphs), 1},
    {"graph_max_tokens", KV_INT, SV(graph_max_tokens), 0},
    {"launch_s", KV_DOUBLE, SV(launch_s), 1},
    {"kernels_per_layer", KV_DOUBLE, SV(kernels_per_layer), 1},
    {"attn_kv_bw_eff", KV_DOUBLE, SV(attn_kv_bw_eff), 1},
    {"moe_gemm_eff", KV_DOUBLE, SV(moe_gemm_eff), 1},
    {"ar_latency_s_tp2", KV_DOUBLE, SV(ar_latency_s[0]), 1},
    {"ar_s_per_byte_tp2", KV_DOUBLE, SV(ar_s_per_byte[0]), 1},
    {"ar_latency_s_tp4", KV_DOUBLE, SV(ar_latency_s[1]), 1},
    {"ar_s_per_byte_tp4", KV_DOUBLE, SV(ar_s_per_byte[1]), 1},
    {"ar_latency_s_tp8", KV_DOUBLE, SV(ar_latency_s[2]), 1},
    {"ar_s_per_byte_tp8", KV_DOUBLE, SV(ar_s_per_byte[2]), 1},
    {"request_s", KV_DOUBLE, SV(request_s), 1},
    {"prompt_token_s", KV_DOUBLE, SV(prompt_token_s), 1},
    {"token_s", KV_DOUBLE, SV(token_s), 1},
    {"nontorch_bytes", KV_DOUBLE, SV(nontorch_bytes), 1},
    {"nccl_bytes", KV_DOUBLE, SV(nccl_bytes), 1},
    {"sampler_bytes_per_row", KV_DOUBLE, SV(sampler_bytes_per_row), 1},
    {"fit_runs", KV_DOUBLE, SV(fit_runs), 0},
    {"fit_mape", KV_DOUBLE, SV(fit_mape), 0},
    {"cv_mape", KV_DOUBLE, SV(cv_mape), 0},
    {"step_cv_err", KV_DOUBLE, SV(step_cv_err), 0},
};
#define N_KEYS ((int)(sizeof keys / sizeof keys[0]))
static const int ar_degrees[SERVING_AR_DEGREES] = {2, 4, 8};

void serving_none(serving_t *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "none");
    snprintf(out->engine, sizeof out->engine, "none (the bare GPU)");
    out->attn_kv_bw_eff = out->moe_gemm_eff = NAN;   /* the cost model's own */
    out->fit_runs = out->fit_mape = out->cv_mape = out->step_cv_err = NAN;
}

static int other_key(void *ud, const char *key, const char *val, char *msg, size_t len) {
    (void)ud;
    if (!strcmp(key, "format")) {
        if (strcmp(val, "1") != 0)
            return errf(msg, len, "format %s: only serving profile format 1 is known", val);
        return 1;
    }
    return 0;
}

int serving_validate(const serving_t *s, char *err, size_t errlen) {
    if (!s->active) return 0;
    if (s->async_scheduling != 0 && s->async_scheduling != 1)
        return errf(err, errlen, "async_scheduling must be 0 or 1 (got %d)",
                    (int)s->async_scheduling);
    if (s->cuda_graphs != 0 && s->cuda_graphs != 1)
        return errf(err, errlen, "cuda_graphs must be 0 or 1 (got %d)", (int)s->cuda_graphs);
    if (s->graph_max_tokens < 0)
        return errf(err, errlen, "graph_max_tokens must be >= 0 (got %d)",
                    (int)s->graph_max_tokens);
    const struct { const char *key; double v; } t[] = {
        {"cpu_step_s", s->cpu_step_s}, {"cpu_seq_s", s->cpu_seq_s},
        {"cpu_token_s", s->cpu_token_s}, {"launch_s", s->launch_s},
        {"kernels_per_layer", s->kernels_per_layer}, {"request_s", s->request_s},
        {"prompt_token_s", s->prompt_token_s}, {"token_s", s->token_s},
        {"nontorch_bytes", s->nontorch_bytes}, {"nccl_bytes", s->nccl_bytes},
        {"sampler_bytes_per_row", s->sampler_bytes_per_row},
        {"ar_latency_s_tp2", s->ar_latency_s[0]}, {"ar_s_per_byte_tp2", s->ar_s_per_byte[0]},
        {"ar_latency_s_tp4", s->ar_latency_s[1]}, {"ar_s_per_byte_tp4", s->ar_s_per_byte[1]},
        {"ar_latency_s_tp8", s->ar_latency_s[2]}, {"ar_s_per_byte_tp8", s->ar_s_per_byte[2]},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (!isfinite(t[i].v) || t[i].v < 0)
            return errf(err, errlen, "%s must be a finite number >= 0 (got %g)", t[i].key,
                        t[i].v);
    const struct { const char *key; double v; } e[] = {
        {"attn_kv_bw_eff", s->attn_kv_bw_eff}, {"moe_gemm_eff", s->moe_gemm_eff},
    };
    for (size_t i = 0; i < sizeof e / sizeof *e; i++)
        if (!isfinite(e[i].v) || e[i].v <= 0 || e[i].v > 1)
            return errf(err, errlen, "%s must be in (0, 1] (got %g)", e[i].key, e[i].v);
    return 0;
}

static int read_text(const char *what, const char *text, const char *path, serving_t *out,
                     char *err, size_t errlen) {
    serving_t s;
    int seen[N_KEYS];
    memset(&s, 0, sizeof s);
    s.fit_runs = s.fit_mape = s.cv_mape = s.step_cv_err = NAN;
    kv_table_t t = {keys, N_KEYS, &s, seen};
    int rc = text ? kvfile_read_text(what, text, &t, 1, other_key, NULL, err, errlen)
                  : kvfile_read(what, &t, 1, other_key, NULL, err, errlen);
    if (rc != 0) return -1;
    s.active = 1;
    if (!kvfile_seen(&t, "name")) {
        const char *b = strrchr(what, '/');
        b = b ? b + 1 : what;
        const char *dot = strrchr(b, '.');
        size_t n = dot && dot != b ? (size_t)(dot - b) : strlen(b);
        if (n >= sizeof s.name) n = sizeof s.name - 1;
        memcpy(s.name, b, n);
        s.name[n] = '\0';
    }
    snprintf(s.path, sizeof s.path, "%s", path);
    char m[256];
    if (serving_validate(&s, m, sizeof m) != 0) return errf(err, errlen, "%s: %s", what, m);
    *out = s;
    return 0;
}

void serving_list_builtins(char *out, size_t cap) {
    size_t used = 0;
    out[0] = '\0';
    for (const serving_builtin_t *b = serving_builtins; b->name; b++) {
        int w = snprintf(out + used, cap - used, "%s, ", b->name);
        if (w < 0 || (size_t)w >= cap - used) return;
        used += (size_t)w;
    }
    snprintf(out + used, cap - used, "none");
}

int serving_get(const char *name, serving_t *out, char *err, size_t errlen) {
    char names[256], path[1100];
    if (!name || !*name) return errf(err, errlen, "no serving profile named");
    const char *n = !strncmp(name, "builtin:", 8) ? name + 8 : name;
    if (!strcasecmp(n, "none")) {
        serving_none(out);
        return 0;
    }
    for (const serving_builtin_t *b = serving_builtins; b->name; b++) {
        if (strcasecmp(b->name, n) != 0) continue;
        snprintf(path, sizeof path, "builtin:%s", b->name);
        return read_text(path, b->text, path, out, err, errlen);
    }
    if (!strchr(name, '/') && access(name, R_OK) != 0) {
        serving_list_builtins(names, sizeof names);
        return errf(err, errlen, "unknown serving profile '%s'; built-in profiles: %s (or "
                    "give a profile file)", name, names);
    }
    return read_text(name, NULL, name, out, err, errlen);
}

/* ------------------------------------------------------------------ writing */

static void put_text(FILE *f, const char *key, const char *v) {
    if (!v || !*v) return;
    fprintf(f, "%s = ", key);
    for (const char *p = v; *p; p++) fputc(*p == '#' || *p == '\n' || *p == '\r' ? ' ' : *p, f);
    fputc('\n', f);
}

static void body(FILE *f, const serving_t *s, const char *comment) {
    kvfile_put_comment(f, comment);
    fprintf(f, "format = 1\n");
    put_text(f, "name", s->name);
    put_text(f, "engine", s->engine);
    put_text(f, "source", s->source);
    put_text(f, "fitted_at", s->fitted_at);
    for (int i = 0; i < N_KEYS; i++) {
        const kv_spec_t *k = &keys[i];
        const char *p = (const char *)s + k->offset;
        if (k->type == KV_INT) fprintf(f, "%s = %d\n", k->key, *(const int32_t *)p);
        else if (k->type == KV_DOUBLE && !isnan(*(const double *)p))
            fprintf(f, "%s = %.17g\n", k->key, *(const double *)p);
    }
}

typedef struct {
    const serving_t *s;
    const char *comment;
} write_ud_t;

static void write_cb(FILE *f, const void *ud) {
    const write_ud_t *w = ud;
    body(f, w->s, w->comment);
}

int serving_write(const char *path, const serving_t *s, const char *comment, char *err,
                  size_t errlen) {
    write_ud_t w = { s, comment };
    return kvfile_write(path, write_cb, &w, err, errlen);
}

void serving_json(FILE *f, const serving_t *s) {
    fputs("{\"name\":", f);
    json_write_str(f, s->name);
    fputs(",\"path\":", f);
    json_write_str(f, s->path);
    fputs(",\"engine\":", f);
    json_write_str(f, s->engine);
    if (!s->active) {
        fputc('}', f);
        return;
    }
    fputs(",\"source\":", f);
    json_write_str(f, s->source);
    for (int i = 0; i < N_KEYS; i++) {
        const kv_spec_t *k = &keys[i];
        const char *p = (const char *)s + k->offset;
        if (k->type == KV_INT) fprintf(f, ",\"%s\":%d", k->key, *(const int32_t *)p);
        else if (k->type == KV_DOUBLE && isfinite(*(const double *)p))
            fprintf(f, ",\"%s\":%.10g", k->key, *(const double *)p);
    }
    fputc('}', f);
}

/* ------------------------------------------------------------------ the terms */

int32_t serving_graph_max(const serving_t *s, int32_t max_seqs, int32_t max_tokens) {
    if (!s->active || !s->cuda_graphs) return 0;
    /* vLLM's default (config/vllm.py, _set_cudagraph_sizes): min(2 x max_num_seqs, 512),
     * never above max_num_batched_tokens */
    int64_t g = s->graph_max_tokens > 0 ? s->graph_max_tokens : 2 * (int64_t)max_seqs;
    if (s->graph_max_tokens <= 0 && g > 512) g = 512;
    if (max_tokens > 0 && g > max_tokens) g = max_tokens;
    return (int32_t)g;
}

int32_t serving_padded_tokens(int32_t tokens, int32_t graph_max) {
    if (tokens <= 0 || graph_max <= 0 || tokens > graph_max) return tokens;
    /* the default capture sizes: 1, 2, 4, then every 8 up to 256, then every 16 */
    int32_t p;
    if (tokens <= 2) p = tokens;
    else if (tokens <= 4) p = 4;
    else if (tokens < 256) p = (tokens + 7) / 8 * 8;
    else p = 256 + (tokens - 256 + 15) / 16 * 16;
    return p > graph_max ? graph_max : p;
}

void serving_allreduce(const serving_t *s, int32_t tp, double *latency_s, double *s_per_byte) {
    int k = SERVING_AR_DEGREES - 1;
    for (int i = 0; i < SERVING_AR_DEGREES; i++)
        if (tp <= ar_degrees[i]) {
            k = i;
            break;
        }
    *latency_s = s->ar_latency_s[k];
    *s_per_byte = s->ar_s_per_byte[k];
}

double serving_cpu_time(const serving_t *s, double seqs, double tokens) {
    if (!s->active) return 0;
    return s->cpu_step_s + s->cpu_seq_s * seqs + s->cpu_token_s * tokens;
}

/* ------------------------------------------------------------------ vLLM's KV capacity */

double serving_weight_bytes_per_device(const preset_model_t *m, int32_t tp, int32_t dp) {
    const double t = tp > 0 ? tp : 1, d = m->d_model, b = m->dtype_bytes;
    /* VocabParallelEmbedding pads the vocabulary to a multiple of 64 per device group */
    double pad = 64.0 * t;
    double vocab_dev = ceil((double)m->vocab / pad) * pad / t;
    double embed = vocab_dev * d, head = m->tied_embeddings ? 0.0 : vocab_dev * d;
    double router = (double)preset_model_moe_layers(m) * d * m->n_experts;
    /* the routed experts over the tp x dp GPUs of a stage (sim/parallel.h), the rest over tp */
    double dense = preset_model_layer_matrix_params(m) - router;
    double experts = preset_model_all_expert_params(m) / (dp > 1 ? dp : 1);
    double norms = (2.0 * m->n_layers + 1.0) * d;
    /* the layers' matrices at their weight format (presets.h), the rest at the dtype */
    return (embed + head + router + norms) * b +
           (dense + experts) / t * preset_model_matrix_bytes(m);
}

/* The torch peak of vLLM's profiling pass (gpu_model_runner.py, profile_run: a dummy
 * forward of max_num_batched_tokens tokens, then the sampler over max_num_seqs rows):
 * what is alive at once in the largest operator, per device. */
static double activation_peak(const serving_t *s, const preset_model_t *m, int32_t tp,
                              int32_t max_tokens, int32_t max_seqs) {
    const double T = max_tokens, t = tp > 0 ? tp : 1, d = m->d_model, b = m->dtype_bytes;
    double w_in, w_out, act_in, act_out;
    preset_model_attn_device(m, tp, &w_in, &w_out, &act_in, &act_out);
    double stream = 2.0 * T * d * b;                       /* residual and hidden states */
    double qkv = T * act_in * b;
    double mlp;
    if (preset_model_is_moe(m)) {
        /* fused_moe's three intermediate caches (gate/up, activation, per-expert down
         * outputs before the weighted sum) and the router's fp32 logits */
        const double k = m->experts_per_tok, ff = m->moe_d_ff / t;
        mlp = T * k * (2.0 * ff + ff + d) * b + T * m->n_experts * 4.0;
    } else {
        const double ff = m->d_ff / t;
        mlp = T * (2.0 * ff + ff) * b;                     /* gate/up output and SiLU x up */
    }
    double forward = stream + fmax(qkv, mlp);
    double sampler = (double)max_seqs * m->vocab * s->sampler_bytes_per_row;
    return fmax(forward, sampler);
}

int32_t serving_kv_blocks(const serving_t *s, const preset_model_t *m, const preset_hw_t *hw,
                          int32_t tp, int32_t dp, double gpu_util, int32_t block_size,
                          int32_t max_tokens,
                          int32_t max_seqs, serving_kv_parts_t *parts, char *err,
                          size_t errlen) {
    serving_kv_parts_t p;
    p.total = hw->mem_cuda > 0 ? hw->mem_cuda : hw->mem_bytes;
    p.requested = p.total * gpu_util;
    p.weights = serving_weight_bytes_per_device(m, tp, dp);
    p.activations = activation_peak(s, m, tp, max_tokens, max_seqs);
    p.nontorch = s->nontorch_bytes + (tp > 1 || dp > 1 ? s->nccl_bytes : 0.0);
    p.per_block = (double)block_size * preset_model_kv_bytes_device(m, tp);
    if (parts) *parts = p;
    double avail = p.requested - p.weights - p.activations - p.nontorch;
    double blocks = floor(avail / p.per_block);
    if (blocks < 1)
        return errf(err, errlen, "%s does not fit on %d x %s as vLLM sizes it: %.2f GiB "
                    "requested (%.2f GiB x gpu_util %.2f) - weights %.2f - activations %.2f - "
                    "non-torch %.2f GiB leaves no KV block; use a larger --tp or --hw",
                    m->name, (int)tp, hw->name, p.requested / 1073741824.0,
                    p.total / 1073741824.0, gpu_util, p.weights / 1073741824.0,
                    p.activations / 1073741824.0, p.nontorch / 1073741824.0);
    /* each data-parallel rank its own pool of as many (a block lives on one rank) */
    blocks *= dp > 1 ? dp : 1;
    return blocks > INT32_MAX ? INT32_MAX : (int32_t)blocks;
}
