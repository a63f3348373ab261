/* cost_file: see cost_file.h. */
#include "sim/cost_file.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/errf.h"
#include "traces/json.h"

/* What a file is, read before its kind is known. */
typedef struct {
    int32_t format;
    char kind[KV_TEXT_CAP];
} head_t;

/* The keys of cost_file_t itself; which are required depends on the kind (checked after). */
#define CF(f) offsetof(cost_file_t, f)
static const kv_spec_t own_keys[] = {
    {"fitted_for", KV_TEXT, CF(fitted_for), 0}, {"source", KV_TEXT, CF(source), 0},
    {"fitted_at", KV_TEXT, CF(fitted_at), 0}, {"version", KV_TEXT, CF(version), 0},
    {"hw", KV_TEXT, CF(hw_preset), 0},
    /* kind = linear */
    {"step_s", KV_DOUBLE, CF(lin.step_s), 0}, {"seq_s", KV_DOUBLE, CF(lin.seq_s), 0},
    {"sampled_s", KV_DOUBLE, CF(lin.sampled_s), 0},
    {"kv_token_s", KV_DOUBLE, CF(lin.kv_token_s), 0},
    {"attn_pair_s", KV_DOUBLE, CF(lin.attn_pair_s), 0},
    {"layer_params", KV_DOUBLE, CF(lin.layer_params), 0},
    {"lm_params", KV_DOUBLE, CF(lin.lm_params), 0},
    {"host_step_s", KV_DOUBLE, CF(lin.host_step_s), 0},
    {"host_seq_s", KV_DOUBLE, CF(lin.host_seq_s), 0},
    {"host_token_s", KV_DOUBLE, CF(lin.host_token_s), 0},
    {"tp", KV_INT, CF(lin.tp), 0},
    {"allreduce_latency_s", KV_DOUBLE, CF(lin.allreduce_latency_s), 0},
    {"allreduce_s_per_byte", KV_DOUBLE, CF(lin.allreduce_s_per_byte), 0},
    {"moe_eff", KV_DOUBLE, CF(lin.moe_eff), 0},
    {"fit_points", KV_DOUBLE, CF(fit_points), 0},
    {"fit_median_err", KV_DOUBLE, CF(fit_median_err), 0},
    {"cv_median_err", KV_DOUBLE, CF(cv_median_err), 0},
    {"cv_p90_err", KV_DOUBLE, CF(cv_p90_err), 0},
    {"range_tokens", KV_DOUBLE, CF(range_tokens), 0},
    {"range_seqs", KV_DOUBLE, CF(range_seqs), 0},
    {"range_kv_tokens", KV_DOUBLE, CF(range_kv_tokens), 0},
    {"range_attn_pairs", KV_DOUBLE, CF(range_attn_pairs), 0},
    /* kind = roofline */
    {"flops_eff", KV_DOUBLE, CF(roof.flops_eff), 0}, {"bw_eff", KV_DOUBLE, CF(roof.bw_eff), 0},
    {"attn_eff", KV_DOUBLE, CF(roof.attn_eff), 0},
    {"overhead_s", KV_DOUBLE, CF(roof.overhead_s), 0},
};
#define N_OWN ((int)(sizeof own_keys / sizeof own_keys[0]))
static const char *const linear_required[] = {
    "step_s", "seq_s", "sampled_s", "kv_token_s", "attn_pair_s",
};
static const char *const roofline_required[] = {"flops_eff", "bw_eff", "attn_eff", "overhead_s"};
static const char *const linear_only[] = {
    "step_s", "seq_s", "sampled_s", "kv_token_s", "attn_pair_s", "layer_params", "lm_params",
    "host_step_s", "host_seq_s", "host_token_s", "tp", "allreduce_latency_s",
    "allreduce_s_per_byte", "moe_eff",
};
static const char *const roofline_only[] = {"flops_eff", "bw_eff", "attn_eff", "overhead_s"};

/* Keys no table holds: format, kind and the two knot lists. */
typedef struct {
    cost_file_t *cf;
    head_t head;
    int n_rows, n_s, n_kv, n_kv_s, n_moe, n_moe_s;
    int have_format, have_kind;
} read_ctx_t;

/* "1, 2, 4" -> v[*n]; -1 with a message. */
static int parse_list(const char *key, const char *val, double *v, int *n, char *msg,
                      size_t len) {
    return kvfile_parse_list(key, val, v, n, COST_MAX_KNOTS, msg, len);
}

/* The client-side terms, read here rather than through a kv_spec so that a negative one is
 * refused with its line. */
static const struct { const char *key; size_t off; } client_keys[] = {
    {"client_request_s", CF(client_request_s)},
    {"client_prompt_token_s", CF(client_prompt_token_s)},
    {"client_token_s", CF(client_token_s)},
};

static int other_key(void *ud, const char *key, const char *val, char *msg, size_t len) {
    read_ctx_t *x = ud;
    for (size_t i = 0; i < sizeof client_keys / sizeof *client_keys; i++) {
        if (strcmp(key, client_keys[i].key)) continue;
        char *end;
        errno = 0;
        double v = strtod(val, &end);
        if (end == val || *end || errno || !isfinite(v) || v < 0)
            return errf(msg, len, "%s must be a number of seconds >= 0 (got '%s')", key, val);
        *(double *)((char *)x->cf + client_keys[i].off) = v;
        return 1;
    }
    if (!strcmp(key, "format")) {
        char *end;
        long v = strtol(val, &end, 10);
        if (*end || end == val) return errf(msg, len, "format '%s' is not an integer", val);
        x->head.format = (int32_t)v;
        x->have_format = 1;
        return 1;
    }
    if (!strcmp(key, "kind")) {
        snprintf(x->head.kind, sizeof x->head.kind, "%s", val);
        x->have_kind = 1;
        return 1;
    }
    if (!strcmp(key, "gemm_rows"))
        return parse_list(key, val, x->cf->lin.knot_rows, &x->n_rows, msg, len) ? -1 : 1;
    if (!strcmp(key, "gemm_s_per_param"))
        return parse_list(key, val, x->cf->lin.knot_s, &x->n_s, msg, len) ? -1 : 1;
    if (!strcmp(key, "kv_knots"))
        return parse_list(key, val, x->cf->lin.kv_knots, &x->n_kv, msg, len) ? -1 : 1;
    if (!strcmp(key, "kv_extra_s"))
        return parse_list(key, val, x->cf->lin.kv_extra_s, &x->n_kv_s, msg, len) ? -1 : 1;
    if (!strcmp(key, "moe_rows"))
        return parse_list(key, val, x->cf->lin.moe_knot_rows, &x->n_moe, msg, len) ? -1 : 1;
    if (!strcmp(key, "moe_s_per_param"))
        return parse_list(key, val, x->cf->lin.moe_knot_s, &x->n_moe_s, msg, len) ? -1 : 1;
    return 0;
}

static int seen_any(const kv_table_t *t, const char *const *keys, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (kvfile_seen(t, keys[i])) return (int)i;
    return -1;
}

/* The calibrations shipped in the binary: sim/costs/NAME.cost, embedded by the Makefile
 * (build/gen/costs_builtin.c), ending with {NULL, NULL}. */
typedef struct {
    const char *name, *text;
} cost_builtin_t;
extern const cost_builtin_t cost_builtins[];

#define COST_BUILTIN_PREFIX "builtin:"

static const char *builtin_text(const char *name) {
    for (const cost_builtin_t *b = cost_builtins; b->name; b++)
        if (!strcmp(b->name, name)) return b->text;
    return NULL;
}

int cost_file_builtin_count(void) {
    int n = 0;
    while (cost_builtins[n].name) n++;
    return n;
}

const char *cost_file_builtin_name(int i) {
    return i >= 0 && i < cost_file_builtin_count() ? cost_builtins[i].name : NULL;
}

int cost_file_builtin(const char *model, const char *hw, int32_t tp, char *out, size_t outlen) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s.tp%d", model, hw, (int)tp);
    if (!builtin_text(name)) return -1;
    snprintf(out, outlen, COST_BUILTIN_PREFIX "%s", name);
    return 0;
}

/* The layers' shape: what a profile's operators see (not the vocabulary, the LM head's,
 * nor the context length or the name). */
static int same_layers(const preset_model_t *a, const preset_model_t *b) {
    return a->n_layers == b->n_layers && a->d_model == b->d_model &&
           a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads &&
           a->head_dim == b->head_dim && a->d_ff == b->d_ff &&
           a->n_experts == b->n_experts && a->experts_per_tok == b->experts_per_tok &&
           a->moe_d_ff == b->moe_d_ff && a->dtype_bytes == b->dtype_bytes &&
           a->weight_bits == b->weight_bits && a->weight_group == b->weight_group &&
           a->act_bits == b->act_bits && a->kv_dtype_bytes == b->kv_dtype_bytes;
    /* a sliding window is priced as full attention (preset_model_priced): a calibration
     * holds for the model with or without it */
}

int cost_file_builtin_by_shape(const preset_model_t *m, const char *hw, int32_t tp, char *out,
                               size_t outlen) {
    if (preset_model_find(m->name) && cost_file_builtin(m->name, hw, tp, out, outlen) == 0)
        return 0;
    char suffix[128], e[256];
    snprintf(suffix, sizeof suffix, ".%s.tp%d", hw, (int)tp);
    static cost_file_t cf;   /* large; a lookup at setup, not per step */
    for (const cost_builtin_t *b = cost_builtins; b->name; b++) {
        size_t n = strlen(b->name), k = strlen(suffix);
        if (n <= k || strcmp(b->name + n - k, suffix) != 0) continue;
        char path[320];
        snprintf(path, sizeof path, COST_BUILTIN_PREFIX "%s", b->name);
        if (cost_file_read(path, &cf, e, sizeof e) == 0 && same_layers(&cf.model, m)) {
            snprintf(out, outlen, "%s", path);
            return 0;
        }
    }
    return -1;
}

void cost_file_adopt_shape(cost_file_t *cf, const preset_model_t *m) {
    cf->model = *m;
    cf->lin.layer_params = preset_model_layer_matrix_params(m);
    cf->lin.lm_params = preset_model_lm_params(m);
}

static double rel_diff(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-300); }

int cost_file_read(const char *path, cost_file_t *cf, char *err, size_t errlen) {
    memset(cf, 0, sizeof *cf);
    cf->fit_points = cf->fit_median_err = cf->cv_median_err = cf->cv_p90_err = NAN;
    cf->range_tokens = cf->range_seqs = cf->range_kv_tokens = cf->range_attn_pairs = NAN;
    cost_roofline_defaults(&cf->roof);
    snprintf(cf->path, sizeof cf->path, "%s", path);
    /* the hardware keys are required of roofline files only: checked below */
    kv_spec_t hw_keys[16];
    int n_hw = 0;
    for (int i = 0; i < preset_hw_n_keys && n_hw < 16; i++) {
        if (!strcmp(preset_hw_keys[i].key, "name")) continue;   /* the model's name */
        hw_keys[n_hw] = preset_hw_keys[i];
        hw_keys[n_hw++].required = 0;
    }
    int seen_model[32], seen_own[N_OWN], seen_hw[16];
    kv_table_t t[3] = {
        {preset_model_keys, preset_model_n_keys, &cf->model, seen_model},
        {own_keys, N_OWN, cf, seen_own},
        {hw_keys, n_hw, &cf->hw, seen_hw},
    };
    read_ctx_t x = {.cf = cf};
    if (!strncmp(path, COST_BUILTIN_PREFIX, strlen(COST_BUILTIN_PREFIX))) {
        const char *text = builtin_text(path + strlen(COST_BUILTIN_PREFIX));
        if (!text)
            return errf(err, errlen, "%s: no such shipped calibration (`twinserve presets` "
                        "lists them)", path);
        if (kvfile_read_text(path, text, t, 3, other_key, &x, err, errlen) != 0) return -1;
    } else if (kvfile_read(path, t, 3, other_key, &x, err, errlen) != 0) {
        return -1;
    }
    if (!x.have_format) return errf(err, errlen, "%s: missing required key 'format'", path);
    if (x.head.format != 1)
        return errf(err, errlen, "%s: format %d is not one this twinserve reads (1)", path,
                    (int)x.head.format);
    if (!x.have_kind) return errf(err, errlen, "%s: missing required key 'kind'", path);
    if (!strcmp(x.head.kind, "linear")) cf->kind = COST_FILE_LINEAR;
    else if (!strcmp(x.head.kind, "roofline")) cf->kind = COST_FILE_ROOFLINE;
    else
        return errf(err, errlen, "%s: kind '%s' is not linear or roofline", path, x.head.kind);
    if (!kvfile_seen(&t[0], "name")) snprintf(cf->model.name, sizeof cf->model.name, "cost-file");
    if (preset_model_complete(&cf->model, &t[0], path, err, errlen) != 0) return -1;

    int lin = cf->kind == COST_FILE_LINEAR, i;
    const char *const *req = lin ? linear_required : roofline_required;
    size_t n_req = lin ? sizeof linear_required / sizeof *linear_required
                       : sizeof roofline_required / sizeof *roofline_required;
    for (size_t k = 0; k < n_req; k++)
        if (!kvfile_seen(&t[1], req[k]))
            return errf(err, errlen, "%s: missing required key '%s' (kind %s)", path, req[k],
                        x.head.kind);
    if (lin) {
        if ((i = seen_any(&t[1], roofline_only, sizeof roofline_only / sizeof *roofline_only)) >= 0)
            return errf(err, errlen, "%s: key '%s' belongs to a roofline cost file, this one "
                        "is kind linear", path, roofline_only[i]);
        for (int k = 0; k < n_hw; k++)
            if (seen_hw[k])
                return errf(err, errlen, "%s: key '%s' belongs to a roofline cost file, this "
                            "one is kind linear", path, hw_keys[k].key);
        if (x.n_rows == 0) return errf(err, errlen, "%s: missing required key 'gemm_rows'", path);
        if (x.n_s == 0)
            return errf(err, errlen, "%s: missing required key 'gemm_s_per_param'", path);
        if (x.n_rows != x.n_s)
            return errf(err, errlen, "%s: gemm_rows has %d knots but gemm_s_per_param %d", path,
                        x.n_rows, x.n_s);
        cf->lin.n_knots = x.n_rows;
        if (x.n_kv != x.n_kv_s)
            return errf(err, errlen, "%s: kv_knots has %d knots but kv_extra_s %d", path, x.n_kv,
                        x.n_kv_s);
        cf->lin.n_kv_knots = x.n_kv;
        if (x.n_moe != x.n_moe_s)
            return errf(err, errlen, "%s: moe_rows has %d knots but moe_s_per_param %d", path,
                        x.n_moe, x.n_moe_s);
        if (x.n_moe && !preset_model_is_moe(&cf->model))
            return errf(err, errlen, "%s: moe_rows is for a mixture of experts, but the model "
                        "shape has no experts (n_experts)", path);
        cf->lin.n_moe_knots = x.n_moe;
        double lp = preset_model_layer_matrix_params(&cf->model);
        double hp = preset_model_lm_params(&cf->model);
        if (kvfile_seen(&t[1], "layer_params") && rel_diff(cf->lin.layer_params, lp) > 1e-9)
            return errf(err, errlen, "%s: layer_params %.17g does not match the model shape's "
                        "%.17g", path, cf->lin.layer_params, lp);
        if (kvfile_seen(&t[1], "lm_params") && rel_diff(cf->lin.lm_params, hp) > 1e-9)
            return errf(err, errlen, "%s: lm_params %.17g does not match the model shape's "
                        "%.17g", path, cf->lin.lm_params, hp);
        cf->lin.layer_params = lp;
        cf->lin.lm_params = hp;
        if (!kvfile_seen(&t[1], "tp")) cf->lin.tp = 1;
        if (cf->lin.tp < 1)
            return errf(err, errlen, "%s: tp must be a tensor-parallel degree >= 1 (got %d)",
                        path, (int)cf->lin.tp);
        if (cf->lin.tp > 1) {
            static const char *const comm[] = {"allreduce_latency_s", "allreduce_s_per_byte"};
            for (int k = 0; k < 2; k++)
                if (!kvfile_seen(&t[1], comm[k]))
                    return errf(err, errlen, "%s: tp = %d needs '%s' (the all-reduces between "
                                "the devices)", path, (int)cf->lin.tp, comm[k]);
        }
        if (cf->lin.tp > 1) {   /* the all-reduces' shape, from the model's */
            cf->lin.allreduces = 2.0 * cf->model.n_layers;
            cf->lin.ar_bytes_per_token = (double)cf->model.d_model * cf->model.dtype_bytes;
        }
        cost_file_moe_shape(&cf->model, &cf->lin);
        char m[256];
        if (cost_linear_check(&cf->lin, m, sizeof m) != 0)
            return errf(err, errlen, "%s: %s", path, m);
    } else {
        if ((i = seen_any(&t[1], linear_only, sizeof linear_only / sizeof *linear_only)) >= 0 ||
            x.n_rows || x.n_s || x.n_kv || x.n_kv_s || x.n_moe || x.n_moe_s)
            return errf(err, errlen, "%s: key '%s' belongs to a linear cost file, this one is "
                        "kind roofline", path,
                        i >= 0 ? linear_only[i] : x.n_rows || x.n_s ? "gemm_rows" : "kv_knots");
        static const char *const hw_required[] = {"mem_bw", "flops", "mem_bytes"};
        for (size_t k = 0; k < sizeof hw_required / sizeof *hw_required; k++)
            if (!kvfile_seen(&t[2], hw_required[k]))
                return errf(err, errlen, "%s: missing required key '%s' (kind roofline)", path,
                            hw_required[k]);
        snprintf(cf->hw.name, sizeof cf->hw.name, "%s", cf->model.name);
        char m[256];
        if (cost_roofline_check(&cf->model, &cf->hw, &cf->roof, m, sizeof m) != 0)
            return errf(err, errlen, "%s: %s", path, m);
    }
    const struct { const char *key; double v; } info[] = {
        {"fit_points", cf->fit_points}, {"fit_median_err", cf->fit_median_err},
        {"cv_median_err", cf->cv_median_err}, {"cv_p90_err", cf->cv_p90_err},
        {"range_tokens", cf->range_tokens}, {"range_seqs", cf->range_seqs},
        {"range_kv_tokens", cf->range_kv_tokens}, {"range_attn_pairs", cf->range_attn_pairs},
    };
    for (size_t k = 0; k < sizeof info / sizeof *info; k++)
        if (!isnan(info[k].v) && info[k].v < 0)
            return errf(err, errlen, "%s: %s must be >= 0 (got %g)", path, info[k].key,
                        info[k].v);
    return 0;
}

/* ------------------------------------------------------------------ writing */

static void put_num(FILE *f, const char *key, double v) {
    if (!isnan(v)) fprintf(f, "%s = %.17g\n", key, v);
}

static void put_list(FILE *f, const char *key, const double *v, int32_t n) {
    fprintf(f, "%s = ", key);
    for (int32_t k = 0; k < n; k++) fprintf(f, "%s%.17g", k ? ", " : "", v[k]);
    fputc('\n', f);
}

static void put_text(FILE *f, const char *key, const char *v) {
    /* '#' starts a comment in this syntax and a newline ends the value: keep both out */
    if (!v || !*v) return;
    fprintf(f, "%s = ", key);
    for (const char *p = v; *p; p++) fputc(*p == '#' || *p == '\n' || *p == '\r' ? ' ' : *p, f);
    fputc('\n', f);
}

static void write_body(FILE *f, const cost_file_t *cf, const char *comment) {
    if (comment) {
        kvfile_put_comment(f, comment);
    }
    fprintf(f, "format = 1\nkind = %s\n", cf->kind == COST_FILE_LINEAR ? "linear" : "roofline");
    put_text(f, "fitted_for", cf->fitted_for);
    put_text(f, "source", cf->source);
    put_text(f, "fitted_at", cf->fitted_at);
    put_text(f, "version", cf->version);
    put_text(f, "hw", cf->hw_preset);
    const preset_model_t *m = &cf->model;
    fprintf(f, "\n# the model's shape\n");
    put_text(f, "name", m->name);
    fprintf(f, "n_layers = %d\nd_model = %d\nn_heads = %d\nn_kv_heads = %d\nhead_dim = %d\n"
               "d_ff = %d\nvocab = %d\nmax_seq = %d\ntied_embeddings = %d\ndtype_bytes = %d\n",
            m->n_layers, m->d_model, m->n_heads, m->n_kv_heads, m->head_dim, m->d_ff, m->vocab,
            m->max_seq, m->tied_embeddings, m->dtype_bytes);
    if (preset_model_is_moe(m))
        fprintf(f, "n_experts = %d\nexperts_per_tok = %d\nmoe_d_ff = %d\n", m->n_experts,
                m->experts_per_tok, m->moe_d_ff);
    if (m->n_dense_layers > 0) fprintf(f, "n_dense_layers = %d\n", m->n_dense_layers);
    if (m->shared_d_ff > 0) fprintf(f, "shared_d_ff = %d\n", m->shared_d_ff);
    if (m->kv_lora_rank > 0)
        fprintf(f, "kv_lora_rank = %d\nq_lora_rank = %d\nqk_nope_head_dim = %d\n"
                   "qk_rope_head_dim = %d\nv_head_dim = %d\n", m->kv_lora_rank, m->q_lora_rank,
                m->qk_nope_head_dim, m->qk_rope_head_dim, m->v_head_dim);
    if (m->sliding_window > 0)
        fprintf(f, "sliding_window = %d\nn_window_layers = %d\n", m->sliding_window,
                m->n_window_layers);
    if (m->weight_bits > 0)
        fprintf(f, "weight_bits = %d\nweight_group = %d\nscale_bits = %d\nact_bits = %d\n",
                m->weight_bits, m->weight_group, m->scale_bits, m->act_bits);
    if (m->kv_dtype_bytes > 0) fprintf(f, "kv_dtype_bytes = %d\n", m->kv_dtype_bytes);
    if (cf->kind == COST_FILE_LINEAR) {
        const cost_linear_params_t *p = &cf->lin;
        fprintf(f, "\n# the forward pass (seconds; sim/cost.h has the formula)\n");
        put_num(f, "step_s", p->step_s);
        put_num(f, "seq_s", p->seq_s);
        put_num(f, "sampled_s", p->sampled_s);
        put_num(f, "kv_token_s", p->kv_token_s);
        put_num(f, "attn_pair_s", p->attn_pair_s);
        put_num(f, "layer_params", p->layer_params);
        put_num(f, "lm_params", p->lm_params);
        put_list(f, "gemm_rows", p->knot_rows, p->n_knots);
        put_list(f, "gemm_s_per_param", p->knot_s, p->n_knots);
        if (p->n_kv_knots > 0) {
            put_list(f, "kv_knots", p->kv_knots, p->n_kv_knots);
            put_list(f, "kv_extra_s", p->kv_extra_s, p->n_kv_knots);
        }
        if (p->moe_layers > 0 && (p->n_moe_knots > 0 || p->moe_eff > 0)) {
            fprintf(f, "\n# the experts' products (sim/cost.h: moe)\n");
            if (p->moe_eff > 0) put_num(f, "moe_eff", p->moe_eff);
            if (p->n_moe_knots > 0) {
                put_list(f, "moe_rows", p->moe_knot_rows, p->n_moe_knots);
                put_list(f, "moe_s_per_param", p->moe_knot_s, p->n_moe_knots);
            }
        }
        if (p->tp > 1) {
            fprintf(f, "\n# tensor parallelism: the times above are one device's; each pass "
                       "adds 2 all-reduces per layer\n");
            fprintf(f, "tp = %d\n", (int)p->tp);
            put_num(f, "allreduce_latency_s", p->allreduce_latency_s);
            put_num(f, "allreduce_s_per_byte", p->allreduce_s_per_byte);
        }
        fprintf(f, "\n# the CPU-side time before each pass (seconds)\n");
        put_num(f, "host_step_s", p->host_step_s);
        put_num(f, "host_seq_s", p->host_seq_s);
        put_num(f, "host_token_s", p->host_token_s);
    } else {
        fprintf(f, "\n# the hardware and the roofline's efficiencies\n");
        put_num(f, "mem_bw", cf->hw.mem_bw);
        put_num(f, "flops", cf->hw.flops);
        put_num(f, "mem_bytes", cf->hw.mem_bytes);
        put_num(f, "link_bw", cf->hw.link_bw);
        if (cf->hw.link_latency > 0) put_num(f, "link_latency", cf->hw.link_latency);
        put_num(f, "flops_eff", cf->roof.flops_eff);
        put_num(f, "bw_eff", cf->roof.bw_eff);
        put_num(f, "attn_eff", cf->roof.attn_eff);
        put_num(f, "overhead_s", cf->roof.overhead_s);
    }
    if (!isnan(cf->fit_points) || !isnan(cf->range_tokens))
        fprintf(f, "\n# the fit (relative errors) and the largest fitted point\n");
    put_num(f, "fit_points", cf->fit_points);
    put_num(f, "fit_median_err", cf->fit_median_err);
    put_num(f, "cv_median_err", cf->cv_median_err);
    put_num(f, "cv_p90_err", cf->cv_p90_err);
    put_num(f, "range_tokens", cf->range_tokens);
    put_num(f, "range_seqs", cf->range_seqs);
    put_num(f, "range_kv_tokens", cf->range_kv_tokens);
    put_num(f, "range_attn_pairs", cf->range_attn_pairs);
    if (cf->client_request_s > 0 || cf->client_prompt_token_s > 0 || cf->client_token_s > 0) {
        fprintf(f, "\n# client-side terms (seconds): what a streaming client measures beyond "
                   "the server\n");
        for (size_t i = 0; i < sizeof client_keys / sizeof *client_keys; i++) {
            double v = *(const double *)((const char *)cf + client_keys[i].off);
            if (v > 0) put_num(f, client_keys[i].key, v);
        }
    }
}

typedef struct {
    const cost_file_t *cf;
    const char *comment;
} write_ud_t;

static void write_cb(FILE *f, const void *ud) {
    const write_ud_t *w = ud;
    write_body(f, w->cf, w->comment);
}

int cost_file_write(const char *path, const cost_file_t *cf, const char *comment, char *err,
                    size_t errlen) {
    write_ud_t w = { cf, comment };
    return kvfile_write(path, write_cb, &w, err, errlen);
}

/* ------------------------------------------------------------------ using */

cost_model_t *cost_file_model(const cost_file_t *cf, int32_t tp, char *err, size_t errlen) {
    cost_model_t *m = NULL;
    char msg[256];
    if (cf->kind == COST_FILE_LINEAR) {
        int32_t fitted = cf->lin.tp > 1 ? cf->lin.tp : 1;
        if (tp != fitted) {
            errf(err, errlen, "%s: a linear cost model is fitted at one tensor-parallel degree "
                 "(%d); --tp %d needs a model fitted at tp %d", cf->path, (int)fitted, (int)tp,
                 (int)tp);
            return NULL;
        }
        if (cost_linear_check(&cf->lin, msg, sizeof msg) != 0) {
            errf(err, errlen, "%s: %s", cf->path, msg);
            return NULL;
        }
        m = cost_linear_new(&cf->lin);
    } else {
        cost_roofline_params_t p = cf->roof;
        p.tp = tp;
        if (cost_roofline_check(&cf->model, &cf->hw, &p, msg, sizeof msg) != 0) {
            errf(err, errlen, "%s: %s", cf->path, msg);
            return NULL;
        }
        m = cost_roofline_new(&cf->model, &cf->hw, &p);
    }
    if (!m) errf(err, errlen, "out of memory (cost model)");
    return m;
}

static void json_num(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.17g", key, v);
}

void cost_file_json(FILE *f, const cost_file_t *cf) {
    fprintf(f, "{\"model\":\"%s\",\"file\":",
            cf->kind == COST_FILE_LINEAR ? "linear" : "roofline");
    json_write_str(f, cf->path);
    fputs(",\"fitted_for\":", f);
    json_write_str(f, cf->fitted_for);
    fputs(",\"source\":", f);
    json_write_str(f, cf->source);
    if (cf->hw_preset[0]) {
        fputs(",\"hw\":", f);
        json_write_str(f, cf->hw_preset);
    }
    if (cf->kind == COST_FILE_LINEAR) {
        const cost_linear_params_t *p = &cf->lin;
        json_num(f, "step_s", p->step_s);
        json_num(f, "seq_s", p->seq_s);
        json_num(f, "sampled_s", p->sampled_s);
        json_num(f, "kv_token_s", p->kv_token_s);
        json_num(f, "attn_pair_s", p->attn_pair_s);
        json_num(f, "host_step_s", p->host_step_s);
        json_num(f, "host_seq_s", p->host_seq_s);
        json_num(f, "host_token_s", p->host_token_s);
        fprintf(f, ",\"tp\":%d", p->tp > 1 ? (int)p->tp : 1);
        if (p->tp > 1) {
            json_num(f, "allreduce_latency_s", p->allreduce_latency_s);
            json_num(f, "allreduce_s_per_byte", p->allreduce_s_per_byte);
        }
        fputs(",\"gemm_rows\":[", f);
        for (int32_t k = 0; k < p->n_knots; k++) fprintf(f, "%s%.17g", k ? "," : "", p->knot_rows[k]);
        fputs("],\"gemm_s_per_param\":[", f);
        for (int32_t k = 0; k < p->n_knots; k++) fprintf(f, "%s%.17g", k ? "," : "", p->knot_s[k]);
        fputs("],\"kv_knots\":[", f);
        for (int32_t k = 0; k < p->n_kv_knots; k++)
            fprintf(f, "%s%.17g", k ? "," : "", p->kv_knots[k]);
        fputs("],\"kv_extra_s\":[", f);
        for (int32_t k = 0; k < p->n_kv_knots; k++)
            fprintf(f, "%s%.17g", k ? "," : "", p->kv_extra_s[k]);
        fputc(']', f);
    } else {
        json_num(f, "mem_bw", cf->hw.mem_bw);
        json_num(f, "flops", cf->hw.flops);
        json_num(f, "flops_eff", cf->roof.flops_eff);
        json_num(f, "bw_eff", cf->roof.bw_eff);
        json_num(f, "attn_eff", cf->roof.attn_eff);
        json_num(f, "overhead_s", cf->roof.overhead_s);
    }
    json_num(f, "cv_median_err", cf->cv_median_err);
    json_num(f, "cv_p90_err", cf->cv_p90_err);
    fputc('}', f);
}

void cost_file_attn_shape(const preset_model_t *m, cost_linear_params_t *p) {
    const int32_t tp = p->tp > 1 ? p->tp : 1;
    p->window_share = m->sliding_window > 0 && m->n_layers > 0
                          ? (double)m->n_window_layers / m->n_layers : 0;
    p->mla_pf_pair_scale = p->mla_expand_params = 0;
    if (m->kv_lora_rank > 0) {
        p->mla_pf_pair_scale = preset_model_mla_prefill_pair_flops(m, tp) /
                               preset_model_attn_pair_flops(m, tp);
        p->mla_expand_params = m->n_layers * preset_model_mla_expand_params(m, tp);
    }
}

void cost_file_moe_shape(const preset_model_t *m, cost_linear_params_t *p) {
    if (!preset_model_is_moe(m)) {
        p->moe_layers = p->moe_experts = p->moe_top_k = p->moe_expert_params = 0;
        return;
    }
    p->moe_layers = preset_model_moe_layers(m);
    p->moe_experts = m->n_experts;
    p->moe_top_k = m->experts_per_tok;
    p->moe_expert_params = preset_model_expert_params(m) / (p->tp > 1 ? p->tp : 1);
}

int cost_file_same_shape(const preset_model_t *a, const preset_model_t *b, char *err,
                         size_t errlen) {
    const struct { const char *key; int32_t x, y; } f[] = {
        {"n_layers", a->n_layers, b->n_layers}, {"d_model", a->d_model, b->d_model},
        {"n_heads", a->n_heads, b->n_heads}, {"n_kv_heads", a->n_kv_heads, b->n_kv_heads},
        {"head_dim", a->head_dim, b->head_dim}, {"d_ff", a->d_ff, b->d_ff},
        {"vocab", a->vocab, b->vocab}, {"tied_embeddings", a->tied_embeddings, b->tied_embeddings},
        {"n_experts", a->n_experts, b->n_experts},
        {"experts_per_tok", a->experts_per_tok, b->experts_per_tok},
        {"moe_d_ff", a->moe_d_ff, b->moe_d_ff},
        {"weight_bits", a->weight_bits, b->weight_bits},
        {"act_bits", a->act_bits, b->act_bits},
        {"kv_dtype_bytes", a->kv_dtype_bytes, b->kv_dtype_bytes},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (f[i].x != f[i].y)
            return errf(err, errlen, "%s %d vs %d", f[i].key, (int)f[i].x, (int)f[i].y);
    return 0;
}
