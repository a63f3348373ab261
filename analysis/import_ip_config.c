/* import_ip_config: the inference-perf folder's YAML files and the model to record
 * (contract: import_ip_internal.h; the conventions: import_ip.c's top comment).
 *
 * exp-config.yaml is the vLLM server's flags (flat YAML); config.yaml the config
 * inference-perf resolved and ran (real YAML, PyYAML's dump style), which yaml_lite reads.
 * Only what the run records or the checks need is read; other keys are ignored, so a newer
 * inference-perf that adds keys still imports. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/presets.h"
#include "analysis/import_ip_internal.h"

/* aiohttp.ClientTimeout's default total, what a null load.request_timeout leaves in force */
#define IP_AIOHTTP_TIMEOUT_S 300.0

const char *const ip_model_keys[MC_N] = {
    "num_layers", "hidden_dim", "num_heads", "num_kv_heads", "intermediate_dim",
    "num_local_experts", "num_experts_per_tok", "vocab_size",
};

typedef struct {
    yaml_doc_t *doc;
    const char *file;          /* "config.yaml", for messages */
} ydoc_t;

/* ------------------------------------------------------------------ YAML values */

static void describe(const yaml_node_t *x, char *buf, size_t len) {
    yaml_type_t t = yaml_type(x);
    if (t == YAML_STR) snprintf(buf, len, "string '%.60s'", yaml_str(x));
    else if (t == YAML_INT || t == YAML_FLOAT || t == YAML_BOOL)
        snprintf(buf, len, "%s %s", yaml_type_name(t), yaml_str(x));
    else snprintf(buf, len, "%s", yaml_type_name(t));
}

/* The node at the dotted path; NULL when absent, with a message when required (an
 * intermediate that is not a mapping is always an error, *bad set). */
static const yaml_node_t *ynode(ip_t *ip, const ydoc_t *y, const char *path, int required,
                                int *bad) {
    const yaml_node_t *x = yaml_root(y->doc), *parent = NULL;
    char part[128], sofar[256] = "", got[96];
    const char *p = path;
    *bad = 0;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(part, sizeof part, "%.*s", (int)n, p);
        if (yaml_type(x) != YAML_MAP) {
            describe(x, got, sizeof got);
            *bad = 1;
            ip_fail(ip, y->file, yaml_line(x), "key '%s': expected a mapping, got %s", sofar,
                    got);
            return NULL;
        }
        parent = x;
        x = yaml_get(x, part);
        snprintf(sofar + strlen(sofar), sizeof sofar - strlen(sofar), "%s%s",
                 sofar[0] ? "." : "", part);
        if (!x) {
            if (required) {
                *bad = 1;
                ip_fail(ip, y->file, parent == yaml_root(y->doc) ? 0 : yaml_line(parent),
                        "key '%s' is missing", path);
            }
            return NULL;
        }
        p += n + (dot != NULL);
    }
    return x;
}

static int ywrong(ip_t *ip, const ydoc_t *y, const char *label, const yaml_node_t *x,
                  const char *want) {
    char got[96];
    describe(x, got, sizeof got);
    return ip_fail(ip, y->file, yaml_line(x), "key '%s': expected %s, got %s", label, want, got);
}

static int yint(ip_t *ip, const ydoc_t *y, const char *path, int64_t min, int64_t *out) {
    int bad;
    char want[64];
    const yaml_node_t *x = ynode(ip, y, path, 1, &bad);
    if (!x) return -1;
    snprintf(want, sizeof want, "a whole number >= %lld", (long long)min);
    if (yaml_type(x) != YAML_INT || yaml_int(x) < min) return ywrong(ip, y, path, x, want);
    *out = yaml_int(x);
    return 0;
}

/* A number > 0 (an integer or a float) at x, named label. */
static int ypos(ip_t *ip, const ydoc_t *y, const char *label, const yaml_node_t *x,
                double *out) {
    if (!(yaml_num(x) > 0)) return ywrong(ip, y, label, x, "a number > 0");
    *out = yaml_num(x);
    return 0;
}

static int ystr(ip_t *ip, const ydoc_t *y, const char *path, char *buf, size_t len) {
    int bad;
    const yaml_node_t *x = ynode(ip, y, path, 1, &bad);
    if (!x) return -1;
    if (yaml_type(x) != YAML_STR || !*yaml_str(x))
        return ywrong(ip, y, path, x, "a non-empty string");
    if (strlen(yaml_str(x)) >= len)
        return ip_fail(ip, y->file, yaml_line(x), "key '%s': longer than %zu bytes", path,
                       len - 1);
    snprintf(buf, len, "%s", yaml_str(x));
    return 0;
}

/* A boolean; absent (when !required) or null gives dflt. */
static int ybool(ip_t *ip, const ydoc_t *y, const char *path, int required, int dflt,
                 int *out) {
    int bad;
    const yaml_node_t *x = ynode(ip, y, path, required, &bad);
    *out = dflt;
    if (!x) return bad ? -1 : 0;
    if (yaml_type(x) == YAML_NULL && !required) return 0;
    if (yaml_type(x) != YAML_BOOL) return ywrong(ip, y, path, x, "true or false");
    *out = yaml_bool(x);
    return 0;
}

/* Absent or null: 0; anything else: 1 (-1 on a bad path). */
static int yset(ip_t *ip, const ydoc_t *y, const char *path, const yaml_node_t **x) {
    int bad;
    *x = ynode(ip, y, path, 0, &bad);
    if (bad) return -1;
    return *x && yaml_type(*x) != YAML_NULL;
}

static int yopen(ip_t *ip, const char *file, ydoc_t *y) {
    char path[4096];
    y->file = file;
    y->doc = NULL;
    snprintf(path, sizeof path, "%s/%s", ip->dir, file);
    if (access(path, F_OK) != 0 && errno == ENOENT)
        return ip_fail(ip, NULL, 0, "%s is missing", file);
    return yaml_load(path, &y->doc, ip->err, ip->errlen);
}

/* ------------------------------------------------------------------ the YAML files */

static int read_exp_config(ip_t *ip, ip_exp_t *e) {
    ydoc_t y;
    char app[64];
    int rc = -1, bad;
    if (yopen(ip, "exp-config.yaml", &y) != 0) return -1;
    if (ystr(ip, &y, "model", e->model_id, sizeof e->model_id) != 0 ||
        yint(ip, &y, "tensor_parallelism", 1, &e->tp) != 0 ||
        yint(ip, &y, "max_model_len", 1, &e->max_model_len) != 0 ||
        yint(ip, &y, "max_num_batched_tokens", 1, &e->max_batched) != 0 ||
        yint(ip, &y, "max_num_seqs", 1, &e->max_seqs) != 0 ||
        ystr(ip, &y, "app", app, sizeof app) != 0)
        goto done;
    if (strcmp(app, "inference-perf") != 0) {
        ip_fail(ip, y.file, yaml_line(ynode(ip, &y, "app", 1, &bad)), "app is '%s': not an "
                "inference-perf experiment", app);
        goto done;
    }
    rc = 0;
done:
    yaml_free(y.doc);
    return rc;
}

static int read_stages_yaml(ip_t *ip, const ydoc_t *y, ip_exp_t *e) {
    int bad;
    char label[64];
    const yaml_node_t *s = ynode(ip, y, "load.stages", 1, &bad);
    if (!s) return -1;
    if (yaml_type(s) != YAML_SEQ || yaml_len(s) == 0)
        return ywrong(ip, y, "load.stages", s, "a sequence of stages (- rate: R, duration: S)");
    e->n_stages = yaml_len(s);
    if (!(e->stages = calloc(e->n_stages, sizeof *e->stages)))
        return ip_fail(ip, NULL, 0, "out of memory");
    for (size_t k = 0; k < e->n_stages; k++) {
        const yaml_node_t *item = yaml_at(s, k, NULL);
        static const char *const keys[2] = {"rate", "duration"};
        double *dst[2] = {&e->stages[k].rate, &e->stages[k].duration};
        e->stages[k].line = yaml_line(item);
        for (int w = 0; w < 2; w++) {
            const yaml_node_t *x = yaml_get(item, keys[w]);
            snprintf(label, sizeof label, "load.stages[%zu].%s", k, keys[w]);
            if (!x) return ip_fail(ip, y->file, yaml_line(item), "key '%s' is missing", label);
            if (ypos(ip, y, label, x, dst[w]) != 0) return -1;
        }
    }
    return 0;
}

static int read_config(ip_t *ip, ip_exp_t *e) {
    ydoc_t y;
    char type[64];
    const yaml_node_t *x;
    int rc = -1, r;
    if (yopen(ip, "config.yaml", &y) != 0) return -1;
    if (ystr(ip, &y, "api.type", e->api, sizeof e->api) != 0 ||
        ybool(ip, &y, "api.streaming", 1, 0, &e->streaming) != 0 ||
        ystr(ip, &y, "data.type", type, sizeof type) != 0)
        goto done;
    if (strcmp(type, "shared_prefix") != 0) {
        ip_fail(ip, y.file, 0, "data.type is '%s': only the shared_prefix workload is read "
                "(its prompt cycle is part of what is recorded)", type);
        goto done;
    }
    if (yint(ip, &y, "data.shared_prefix.num_groups", 1, &e->groups) != 0 ||
        yint(ip, &y, "data.shared_prefix.num_prompts_per_group", 1, &e->per_group) != 0 ||
        yint(ip, &y, "data.shared_prefix.system_prompt_len", 0, &e->sys_len) != 0 ||
        yint(ip, &y, "data.shared_prefix.question_len", 1, &e->q_len) != 0 ||
        yint(ip, &y, "data.shared_prefix.output_len", 1, &e->out_len) != 0 ||
        ybool(ip, &y, "server.ignore_eos", 0, 0, &e->ignore_eos) != 0 ||
        ystr(ip, &y, "server.type", e->engine, sizeof e->engine) != 0 ||
        ystr(ip, &y, "server.model_name", e->server_model, sizeof e->server_model) != 0)
        goto done;
    int multi;
    if (ybool(ip, &y, "data.shared_prefix.enable_multi_turn_chat", 0, 0, &multi) != 0)
        goto done;
    if (multi) {
        ip_fail(ip, y.file, 0, "data.shared_prefix.enable_multi_turn_chat is true: each "
                "user's prompts grow round by round, so request i does not resend prompt i "
                "mod N (not supported)");
        goto done;
    }
    if ((r = yset(ip, &y, "data.shared_prefix.output_distribution", &x)) < 0) goto done;
    if (r && e->ignore_eos) {
        ip_fail(ip, y.file, yaml_line(x), "data.shared_prefix.output_distribution is set: "
                "each prompt's output length is drawn, and the folder does not record them "
                "(not supported with server.ignore_eos)");
        goto done;
    }
    if (read_stages_yaml(ip, &y, e) != 0) goto done;
    if ((r = yset(ip, &y, "load.request_timeout", &x)) < 0) goto done;
    e->timeout_given = r;
    e->timeout_s = IP_AIOHTTP_TIMEOUT_S;
    if (r && ypos(ip, &y, "load.request_timeout", x, &e->timeout_s) != 0) goto done;
    rc = 0;
done:
    yaml_free(y.doc);
    return rc;
}

/* ------------------------------------------------------------------ the model */

static int check_shape(ip_t *ip, const ip_exp_t *e, const preset_model_t *m, const char *whose) {
    int moe = m->n_experts > 0;
    const struct { int64_t want; const char *field; } p[MC_N] = {
        {m->n_layers, "n_layers"}, {m->d_model, "d_model"}, {m->n_heads, "n_heads"},
        {m->n_kv_heads, "n_kv_heads"}, {moe ? m->moe_d_ff : m->d_ff, moe ? "moe_d_ff" : "d_ff"},
        {m->n_experts, "n_experts"}, {m->experts_per_tok, "experts_per_tok"},
        {m->vocab, "vocab"},
    };
    for (int k = 0; k < MC_N; k++)
        if (e->shape[k] != p[k].want)
            return ip_fail(ip, "replay.json", 0, "model_config.%s %lld does not match %s %lld "
                           "of %s: give --model with the measured shape", ip_model_keys[k],
                           (long long)e->shape[k], p[k].field, (long long)p[k].want, whose);
    return 0;
}

/* The built-in preset the Hugging Face id names, or NULL. */
static const preset_model_t *preset_of(const char *hf) {
    char name[256];
    const char *base = strrchr(hf, '/');
    snprintf(name, sizeof name, "%s", base ? base + 1 : hf);
    for (char *c = name; *c; c++) *c = (char)tolower((unsigned char)*c);
    for (;;) {
        const preset_model_t *m = preset_model_find(name);
        char *dash = strrchr(name, '-');
        if (m) return m;
        if (!dash || dash == name) return NULL;
        *dash = '\0';
    }
}

int ip_resolve_model(ip_t *ip, const import_opts_t *o, ip_exp_t *e) {
    char what[600], err[1024];
    if (o->model) {
        preset_model_t m;
        snprintf(e->model, sizeof e->model, "%s", o->model);
        if (!preset_model_find(o->model) && access(o->model, R_OK) != 0) {
            snprintf(e->model_note, sizeof e->model_note, "model %s (--model; not a preset, "
                     "its shape not checked)", o->model);
            return 0;
        }
        if (preset_model_get(o->model, &m, err, sizeof err) != 0)
            return ip_fail(ip, NULL, 0, "--model %s: %s", o->model, err);
        snprintf(what, sizeof what, "--model %s", o->model);
        snprintf(e->model_note, sizeof e->model_note, "model %s (--model; the shape of %s "
                 "checked)", o->model, e->model_id);
        return check_shape(ip, e, &m, what);
    }
    const preset_model_t *m = preset_of(e->model_id);
    if (!m) {
        snprintf(e->model, sizeof e->model, "%s", e->model_id);
        snprintf(e->model_note, sizeof e->model_note, "model %s (no preset of that name: "
                 "validate will need --model PRESET)", e->model_id);
        return 0;
    }
    snprintf(e->model, sizeof e->model, "%s", m->name);
    snprintf(e->model_note, sizeof e->model_note, "model %s (%s, shape checked)", m->name,
             e->model_id);
    snprintf(what, sizeof what, "preset %s (named by %s)", m->name, e->model_id);
    return check_shape(ip, e, m, what);
}

int ip_read_yaml(ip_t *ip, ip_exp_t *e) {
    return read_exp_config(ip, e) != 0 || read_config(ip, e) != 0 ? -1 : 0;
}
