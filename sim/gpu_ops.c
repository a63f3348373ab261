/* gpu_ops: see gpu_ops.h. The built-in rates are sim/costs/GPU.ops, embedded by the
 * Makefile as ops_builtins[] (build/gen/ops_builtin.c). */
#include "sim/gpu_ops.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim/errf.h"

typedef struct {
    const char *name, *text;
} ops_builtin_t;
extern const ops_builtin_t ops_builtins[];

const char *const gpu_op_names[GPU_OP_KINDS] = {"gemm", "norm", "rope", "act", "add", "emb"};
static const char *const ar_keys[3][2] = {
    {"ar_latency_s_tp2", "ar_s_per_byte_tp2"},
    {"ar_latency_s_tp4", "ar_s_per_byte_tp4"},
    {"ar_latency_s_tp8", "ar_s_per_byte_tp8"},
};

#define OP(f) offsetof(gpu_ops_t, f)
static const kv_spec_t keys[] = {
    {"hw", KV_TEXT, OP(hw), 1},
    {"source", KV_TEXT, OP(source), 0},
    {"fitted_at", KV_TEXT, OP(fitted_at), 0},
    {"ar_latency_s_tp2", KV_DOUBLE, OP(ar_latency_s[0]), 0},
    {"ar_s_per_byte_tp2", KV_DOUBLE, OP(ar_s_per_byte[0]), 0},
    {"ar_latency_s_tp4", KV_DOUBLE, OP(ar_latency_s[1]), 0},
    {"ar_s_per_byte_tp4", KV_DOUBLE, OP(ar_s_per_byte[1]), 0},
    {"ar_latency_s_tp8", KV_DOUBLE, OP(ar_latency_s[2]), 0},
    {"ar_s_per_byte_tp8", KV_DOUBLE, OP(ar_s_per_byte[2]), 0},
};
#define N_KEYS ((int)(sizeof keys / sizeof keys[0]))

typedef struct {
    gpu_ops_t *ops;
    int n_rows, n[2][GPU_OP_KINDS], have_kind, have_format;
} ctx_t;

/* format, kind, rows, KIND_t0, KIND_s, cv_KIND = median, p90 */
static int other_key(void *ud, const char *key, const char *val, char *msg, size_t len) {
    ctx_t *x = ud;
    if (!strcmp(key, "format")) {
        x->have_format = 1;
        return strcmp(val, "1") ? errf(msg, len, "format %s: only format 1 is known", val) : 1;
    }
    if (!strcmp(key, "kind")) {
        x->have_kind = 1;
        return strcmp(val, "ops") ? errf(msg, len, "kind '%s': an operator-rate file is kind "
                                          "ops", val) : 1;
    }
    if (!strcmp(key, "rows"))
        return kvfile_parse_list(key, val, x->ops->rows, &x->n_rows, GPU_OPS_MAX, msg, len) ? -1 : 1;
    for (int k = 0; k < GPU_OP_KINDS; k++) {
        char a[32], b[32], c[32];
        snprintf(a, sizeof a, "%s_t0", gpu_op_names[k]);
        snprintf(b, sizeof b, "%s_s", gpu_op_names[k]);
        snprintf(c, sizeof c, "cv_%s", gpu_op_names[k]);
        if (!strcmp(key, a))
            return kvfile_parse_list(key, val, x->ops->t0[k], &x->n[0][k], GPU_OPS_MAX, msg, len) ? -1 : 1;
        if (!strcmp(key, b))
            return kvfile_parse_list(key, val, x->ops->s[k], &x->n[1][k], GPU_OPS_MAX, msg, len) ? -1 : 1;
        if (!strcmp(key, c)) {
            double v[2];
            int n;
            if (kvfile_parse_list(key, val, v, &n, 2, msg, len)) return -1;
            if (n != 2) return errf(msg, len, "%s: expected median, p90", key);
            x->ops->cv_median[k] = v[0], x->ops->cv_p90[k] = v[1];
            return 1;
        }
    }
    if (!strcmp(key, "cv_layer")) {
        double v[2];
        int n;
        if (kvfile_parse_list(key, val, v, &n, 2, msg, len)) return -1;
        if (n != 2) return errf(msg, len, "%s: expected median, p90", key);
        x->ops->cv_median[GPU_OP_KINDS] = v[0], x->ops->cv_p90[GPU_OP_KINDS] = v[1];
        return 1;
    }
    return 0;
}

static int check(const gpu_ops_t *o, const char *path, char *err, size_t errlen) {
    if (o->n < 2) return errf(err, errlen, "%s: rows needs at least 2 token counts", path);
    for (int i = 0; i < o->n; i++)
        if (!isfinite(o->rows[i]) || o->rows[i] < 1 || (i && !(o->rows[i] > o->rows[i - 1])))
            return errf(err, errlen, "%s: rows must be ascending token counts >= 1 (item %d)",
                        path, i + 1);
    for (int k = 0; k < GPU_OP_KINDS; k++)
        for (int i = 0; i < o->n; i++) {
            const double a = o->t0[k][i], b = o->s[k][i];
            if (!isfinite(a) || a < 0 || !isfinite(b) || b < 0 ||
                (i && (a < o->t0[k][i - 1] || b < o->s[k][i - 1])))
                return errf(err, errlen, "%s: %s_t0 and %s_s must be finite, >= 0 and "
                            "non-decreasing in the rows (item %d)", path, gpu_op_names[k],
                            gpu_op_names[k], i + 1);
        }
    for (int j = 0; j < 3; j++)
        if (!isfinite(o->ar_latency_s[j]) || o->ar_latency_s[j] < 0 ||
            !isfinite(o->ar_s_per_byte[j]) || o->ar_s_per_byte[j] < 0)
            return errf(err, errlen, "%s: %s and %s must be >= 0", path, ar_keys[j][0],
                        ar_keys[j][1]);
    return 0;
}

static int read_any(const char *what, const char *text, gpu_ops_t *o, char *err,
                    size_t errlen) {
    int seen[N_KEYS];
    memset(o, 0, sizeof *o);
    for (int k = 0; k <= GPU_OP_KINDS; k++) o->cv_median[k] = o->cv_p90[k] = NAN;
    snprintf(o->path, sizeof o->path, "%s", what);
    ctx_t x = {.ops = o};
    kv_table_t t = {keys, N_KEYS, o, seen};
    int rc = text ? kvfile_read_text(what, text, &t, 1, other_key, &x, err, errlen)
                  : kvfile_read(what, &t, 1, other_key, &x, err, errlen);
    if (rc) return -1;
    if (!x.have_format || !x.have_kind)
        return errf(err, errlen, "%s: an operator-rate file starts with format = 1 and kind = "
                    "ops", what);
    o->n = x.n_rows;
    for (int k = 0; k < GPU_OP_KINDS; k++)
        if (x.n[0][k] != o->n || x.n[1][k] != o->n)
            return errf(err, errlen, "%s: %s_t0 and %s_s need one value per token count (%d)",
                        what, gpu_op_names[k], gpu_op_names[k], o->n);
    return check(o, what, err, errlen);
}

int gpu_ops_read(const char *path, gpu_ops_t *ops, char *err, size_t errlen) {
    if (!strncmp(path, "builtin:", 8)) {
        for (const ops_builtin_t *b = ops_builtins; b->name; b++)
            if (!strcmp(b->name, path + 8)) return read_any(path, b->text, ops, err, errlen);
        return errf(err, errlen, "%s: no such shipped operator rates", path);
    }
    return read_any(path, NULL, ops, err, errlen);
}

int gpu_ops_builtin(const char *hw, gpu_ops_t *ops) {
    char path[128], e[256];
    snprintf(path, sizeof path, "builtin:%s", hw);
    return gpu_ops_read(path, ops, e, sizeof e);
}

static void put_list(FILE *f, const char *key, const double *v, int n) {
    fprintf(f, "%s = ", key);
    for (int i = 0; i < n; i++) fprintf(f, "%s%.9g", i ? ", " : "", v[i]);
    fputc('\n', f);
}

typedef struct {
    const gpu_ops_t *o;
    const char *comment;
} write_ud_t;

static void write_cb(FILE *f, const void *ud) {
    const write_ud_t *w = ud;
    const gpu_ops_t *o = w->o;
    kvfile_put_comment(f, w->comment);
    fprintf(f, "format = 1\nkind = ops\nhw = %s\n", o->hw);
    if (o->source[0]) fprintf(f, "source = %s\n", o->source);
    if (o->fitted_at[0]) fprintf(f, "fitted_at = %s\n", o->fitted_at);
    for (int j = 0; j < 3; j++) {
        fprintf(f, "%s = %.9g\n", ar_keys[j][0], o->ar_latency_s[j]);
        fprintf(f, "%s = %.9g\n", ar_keys[j][1], o->ar_s_per_byte[j]);
    }
    for (int k = 0; k <= GPU_OP_KINDS; k++)
        if (isfinite(o->cv_median[k]))
            fprintf(f, "cv_%s = %.4g, %.4g\n", k < GPU_OP_KINDS ? gpu_op_names[k] : "layer",
                    o->cv_median[k], o->cv_p90[k]);
    put_list(f, "rows", o->rows, o->n);
    for (int k = 0; k < GPU_OP_KINDS; k++) {
        char key[32];
        snprintf(key, sizeof key, "%s_t0", gpu_op_names[k]);
        put_list(f, key, o->t0[k], o->n);
        snprintf(key, sizeof key, "%s_s", gpu_op_names[k]);
        put_list(f, key, o->s[k], o->n);
    }
}

int gpu_ops_write(const char *path, const gpu_ops_t *o, const char *comment, char *err,
                  size_t errlen) {
    write_ud_t w = { o, comment };
    return kvfile_write(path, write_cb, &w, err, errlen);
}

/* ------------------------------------------------------------------ the rates */

/* Curve v over the token counts at M: linear between them, flat below the first,
 * proportional beyond the last when `scale` (a rate per row that grows with the rows). */
static double at(const gpu_ops_t *o, const double *v, double m, int scale) {
    const int n = o->n;
    if (m <= o->rows[0]) return v[0];
    if (m >= o->rows[n - 1]) return scale ? v[n - 1] * m / o->rows[n - 1] : v[n - 1];
    int lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (o->rows[mid] <= m) lo = mid;
        else hi = mid;
    }
    double a = (m - o->rows[lo]) / (o->rows[hi] - o->rows[lo]);
    return (1 - a) * v[lo] + a * v[hi];
}

double gpu_ops_time(const gpu_ops_t *o, int kind, double rows, double size) {
    if (!(rows > 0)) return 0;
    return at(o, o->t0[kind], rows, 0) + size * at(o, o->s[kind], rows, 1);
}

double gpu_ops_gemm_s(const gpu_ops_t *o, double rows) {
    return rows > 0 ? at(o, o->s[GPU_OP_GEMM], rows, 1) : 0;
}

/* ------------------------------------------------------------------ a model's cost file */

int gpu_ops_linear(const gpu_ops_t *o, const preset_model_t *m, const preset_hw_t *hw,
                   int32_t tp, cost_file_t *cf, char *err, size_t errlen) {
    if (tp < 1 || m->n_heads % tp != 0)
        return errf(err, errlen, "tp %d does not divide %s's %d attention heads", (int)tp,
                    m->name, (int)m->n_heads);
    if (m->weight_bits > 0 || m->kv_dtype_bytes > 0)
        return errf(err, errlen, "the operator rates are bf16 measurements (Vidur's profiles) "
                    "and %.60s runs %s weights with %d-byte KV", m->name,
                    preset_model_format_name(m), (int)preset_model_kv_elem_bytes(m));
    int ar = tp <= 1 ? -1 : tp <= 2 ? 0 : tp <= 4 ? 1 : 2;
    if (ar >= 0 && !(o->ar_s_per_byte[ar] > 0))
        return errf(err, errlen, "%s: no all-reduce rate for tp %d", o->path, (int)tp);
    memset(cf, 0, sizeof *cf);
    cf->fit_points = cf->fit_median_err = cf->cv_median_err = cf->cv_p90_err = NAN;
    cf->range_tokens = cf->range_seqs = cf->range_kv_tokens = cf->range_attn_pairs = NAN;
    cost_roofline_defaults(&cf->roof);
    cf->kind = COST_FILE_LINEAR;
    cf->model = *m;
    const double t = tp, d = m->d_model, hd = m->head_dim, L = m->n_layers;
    const double heads = m->n_heads / t, kv = m->n_kv_heads >= tp ? m->n_kv_heads / t : 1.0;
    double p_in, p_o, act_in, act_out;
    preset_model_attn_device(m, tp, &p_in, &p_o, &act_in, &act_out);
    /* the input products one by one: a fused QKV, or MLA's q_a, kv_a (replicated), q_b and
     * kv_b (sharded), each its own call; with their norms and the RoPE width */
    double prods[4] = {p_in, 0, 0, 0}, norms_w[2] = {0, 0}, rope_w = (heads + kv) * hd;
    int n_prods = 1;
    if (m->kv_lora_rank > 0) {
        const double qk = m->qk_nope_head_dim + (double)m->qk_rope_head_dim;
        const double lat = m->kv_lora_rank + (double)m->qk_rope_head_dim;
        const double q_rank = m->q_lora_rank > 0 ? m->q_lora_rank : d;
        prods[0] = d * lat;
        prods[1] = q_rank * heads * qk;
        prods[2] = (double)m->kv_lora_rank * heads * (m->qk_nope_head_dim + (double)m->v_head_dim);
        prods[3] = m->q_lora_rank > 0 ? d * m->q_lora_rank : 0;
        n_prods = m->q_lora_rank > 0 ? 4 : 3;
        norms_w[0] = m->kv_lora_rank;
        norms_w[1] = m->q_lora_rank;
        rope_w = (heads + 1.0) * m->qk_rope_head_dim;
    }
    const int moe = preset_model_is_moe(m);
    const double ff = m->d_ff / t, eff = m->moe_d_ff / t, sff = m->shared_d_ff / t;
    const double moe_layers = preset_model_moe_layers(m), dense_layers = L - moe_layers;
    cost_linear_params_t *p = &cf->lin;
    p->layer_params = preset_model_layer_matrix_params(m);
    p->lm_params = preset_model_lm_params(m);
    p->tp = tp;
    p->n_knots = o->n;
    for (int i = 0; i < o->n; i++) {
        const double M = o->rows[i];
        double layer = gpu_ops_time(o, GPU_OP_GEMM, M, p_o) +
                       2.0 * gpu_ops_time(o, GPU_OP_NORM, M, d) +
                       gpu_ops_time(o, GPU_OP_ROPE, M, rope_w) +
                       2.0 * gpu_ops_time(o, GPU_OP_ADD, M, d);
        for (int k = 0; k < n_prods; k++) layer += gpu_ops_time(o, GPU_OP_GEMM, M, prods[k]);
        for (int k = 0; k < 2; k++)
            if (norms_w[k] > 0) layer += gpu_ops_time(o, GPU_OP_NORM, M, norms_w[k]);
        /* a dense SwiGLU: gate/up, down, the activation */
        double dense = gpu_ops_time(o, GPU_OP_GEMM, M, 2.0 * d * ff) +
                       gpu_ops_time(o, GPU_OP_GEMM, M, ff * d) + gpu_ops_time(o, GPU_OP_ACT, M, ff);
        double sparse = 0;
        if (moe) {
            /* the router, the fused kernel's two launches (gate/up, down; their products
             * are the moe term) and the activation over every token's k expert rows; a
             * shared expert is a dense SwiGLU every token passes */
            sparse = gpu_ops_time(o, GPU_OP_GEMM, M, d * m->n_experts) +
                     2.0 * at(o, o->t0[GPU_OP_GEMM], M, 0) +
                     gpu_ops_time(o, GPU_OP_ACT, M * m->experts_per_tok, eff);
            if (sff > 0)
                sparse += gpu_ops_time(o, GPU_OP_GEMM, M, 2.0 * d * sff) +
                          gpu_ops_time(o, GPU_OP_GEMM, M, sff * d) +
                          gpu_ops_time(o, GPU_OP_ACT, M, sff);
        }
        double pass = L * layer + dense_layers * dense + moe_layers * sparse +
                      gpu_ops_time(o, GPU_OP_EMB, M, d) + gpu_ops_time(o, GPU_OP_NORM, M, d);
        p->knot_rows[i] = M;
        p->knot_s[i] = pass / p->layer_params;
        if (i && p->knot_s[i] < p->knot_s[i - 1]) p->knot_s[i] = p->knot_s[i - 1];
    }
    if (moe) {
        cost_file_moe_shape(m, p);
        p->n_moe_knots = o->n;
        for (int i = 0; i < o->n; i++) {
            p->moe_knot_rows[i] = o->rows[i];
            p->moe_knot_s[i] = o->s[GPU_OP_GEMM][i];
        }
    }
    /* attention on the roofline, as vidur.c: K/V at the products' one-row read rate (a
     * large matrix's bytes over its time per parameter), FLOPs at GPU_ATTN_EFF, two
     * kernels per layer (the K/V write, the attention) at the smallest call's cost */
    const double read_bw = m->dtype_bytes / o->s[GPU_OP_GEMM][0];
    double floor_s = INFINITY;
    for (int k = 0; k < GPU_OP_KINDS; k++) floor_s = fmin(floor_s, o->t0[k][0] + o->s[k][0]);
    p->kv_token_s = preset_model_kv_bytes_device(m, tp) / read_bw;
    p->attn_pair_s = L * preset_model_attn_pair_flops(m, tp) / (hw->flops * GPU_ATTN_EFF);
    p->step_s = L * 2.0 * floor_s;
    double net_lat, net_spb;
    int multi = preset_hw_multinode_allreduce(hw, tp, &net_lat, &net_spb, err, errlen);
    if (multi < 0) return -1;
    if (ar >= 0) {
        /* NCCL within one node as profiled; across nodes the network's ring */
        p->allreduce_latency_s = multi ? net_lat : o->ar_latency_s[ar];
        p->allreduce_s_per_byte = multi ? net_spb : o->ar_s_per_byte[ar];
        p->allreduces = 2.0 * L;
        p->ar_bytes_per_token = d * m->dtype_bytes;
    }
    cf->range_tokens = o->rows[o->n - 1];
    snprintf(cf->hw_preset, sizeof cf->hw_preset, "%s", o->hw);
    snprintf(cf->fitted_for, sizeof cf->fitted_for, "%.48s on %.40s, tp %d (Vidur's operator "
             "rates by shape: no profile of this model; attention on the roofline)", m->name,
             o->hw, (int)tp);
    snprintf(cf->source, sizeof cf->source, "%.200s", o->path);
    snprintf(cf->fitted_at, sizeof cf->fitted_at, "%s", o->fitted_at);
    cf->cv_median_err = o->cv_median[GPU_OP_KINDS];
    cf->cv_p90_err = o->cv_p90[GPU_OP_KINDS];
    char e2[256];
    if (cost_linear_check(p, e2, sizeof e2) != 0)
        return errf(err, errlen, "the cost model built from %s is not valid: %s", o->path, e2);
    return 0;
}
