/* cluster: see cluster.h. The file is read with kvfile's section reader; the keys are
 * dispatched here by the current section. */
#include "sim/cluster.h"
#include "sim/parallel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    sim_cluster_t *c;
    sim_group_t *g;           /* the current group; NULL in [cluster] */
    int in_section;
} reader_t;

const char *sim_role_name(int32_t role) {
    return role == SIM_ROLE_PREFILL ? "prefill" : role == SIM_ROLE_DECODE ? "decode" : "mixed";
}

static int msgf(char *msg, size_t len, const char *fmt, const char *a, const char *b) {
    snprintf(msg, len, fmt, a, b);
    return -1;
}

static int section(void *ud, const char *header, int line, char *msg, size_t len) {
    reader_t *rd = ud;
    sim_cluster_t *c = rd->c;
    rd->in_section = 1;
    if (!strcmp(header, "cluster")) {
        rd->g = NULL;
        return 0;
    }
    if (!strcmp(header, "group"))
        return msgf(msg, len, "a group needs a name of 1 to 47 characters: [group NAME]", "", "");
    if (strncmp(header, "group", 5) != 0 || (header[5] != ' ' && header[5] != '\t'))
        return msgf(msg, len, "unknown section [%s] (expected [cluster] or [group NAME])",
                    header, "");
    const char *name = header + 6;
    while (*name == ' ' || *name == '\t') name++;
    if (!*name || strlen(name) >= KV_NAME_CAP)
        return msgf(msg, len, "a group needs a name of 1 to 47 characters: [group NAME]", "", "");
    for (int i = 0; i < c->n_groups; i++)
        if (!strcmp(c->groups[i].name, name))
            return msgf(msg, len, "group '%s' is given twice", name, "");
    sim_group_t *v = realloc(c->groups, sizeof *v * (size_t)(c->n_groups + 1));
    if (!v) return msgf(msg, len, "out of memory", "", "");
    c->groups = v;
    rd->g = &c->groups[c->n_groups++];
    memset(rd->g, 0, sizeof *rd->g);
    snprintf(rd->g->name, sizeof rd->g->name, "%s", name);
    rd->g->line = line;
    return 0;
}

static int add_set(char ***v, int *n, const char *key, const char *val, char *msg, size_t len) {
    size_t sz = strlen(key) + strlen(val) + 2;
    char **nv = realloc(*v, sizeof *nv * (size_t)(*n + 1));
    char *s = malloc(sz);
    if (nv) *v = nv;
    if (!nv || !s) {
        free(s);
        return msgf(msg, len, "out of memory", "", "");
    }
    snprintf(s, sz, "%s=%s", key, val);
    (*v)[(*n)++] = s;
    return 1;
}

static int num(const char *key, const char *val, double lo, double hi, int whole, double *out,
               char *msg, size_t len) {
    char *end = NULL;
    errno = 0;
    double v = strtod(val, &end);
    if (end == val || *end || errno || !isfinite(v) || v < lo || v > hi ||
        (whole && v != floor(v))) {
        char what[96];
        snprintf(what, sizeof what, whole ? "an integer in [%g, %g]" : "a number in [%g, %g]",
                 lo, hi);
        snprintf(msg, len, "%s must be %s, got '%s'", key, what, val);
        return -1;
    }
    *out = v;
    return 1;
}

static int text(char *dst, const char *key, const char *val, char *msg, size_t len) {
    if (strlen(val) >= KV_TEXT_CAP) return msgf(msg, len, "%s '%s' is too long", key, val);
    snprintf(dst, KV_TEXT_CAP, "%s", val);
    return 1;
}

static int key(void *ud, const char *k, const char *val, char *msg, size_t len) {
    reader_t *rd = ud;
    sim_cluster_t *c = rd->c;
    sim_group_t *g = rd->g;
    double d;
    if (!rd->in_section)
        return msgf(msg, len, "'%s' before any section: start with [cluster] or [group NAME]",
                    k, "");
    int is_set = !strncmp(k, "set.", 4) && k[4];
    if (!g) { /* [cluster] */
        if (is_set) return add_set(&c->router_sets, &c->n_router_sets, k + 4, val, msg, len);
        if (!strcmp(k, "router")) return text(c->router, k, val, msg, len);
        if (!strcmp(k, "link_latency_s")) {
            if (num(k, val, 0, 3600, 0, &d, msg, len) < 0) return -1;
            c->link_latency_s = d;
            return 1;
        }
        if (!strcmp(k, "link_bandwidth_gbps")) {
            if (num(k, val, 1e-6, 1e9, 0, &d, msg, len) < 0) return -1;
            c->link_bandwidth = d * 1e9;
            return 1;
        }
        if (!strcmp(k, "links")) {
            if (strcmp(val, "pair") && strcmp(val, "shared"))
                return msgf(msg, len, "links must be pair (one link per prefill->decode "
                            "pair) or shared (one for the cluster), got '%s'", val, "");
            c->link_shared = !strcmp(val, "shared");
            return 1;
        }
        return msgf(msg, len, "unknown key '%s' in [cluster] (router, set.KEY, "
                    "link_latency_s, link_bandwidth_gbps, links)", k, "");
    }
    if (is_set) return add_set(&g->sets, &g->n_sets, k + 4, val, msg, len);
    if (!strcmp(k, "count") || !strcmp(k, "tp") || !strcmp(k, "kv_blocks")) {
        if (num(k, val, 1, INT32_MAX, 1, &d, msg, len) < 0) return -1;
        int32_t *f = !strcmp(k, "count") ? &g->count : !strcmp(k, "tp") ? &g->tp : &g->kv_blocks;
        *f = (int32_t)d;
        return 1;
    }
    if (!strcmp(k, "gpu_util")) {
        if (num(k, val, 0.01, 1, 0, &d, msg, len) < 0) return -1;
        g->gpu_util = d;
        return 1;
    }
    if (!strcmp(k, "role")) {
        if (!strcmp(val, "mixed")) g->role = SIM_ROLE_MIXED;
        else if (!strcmp(val, "prefill")) g->role = SIM_ROLE_PREFILL;
        else if (!strcmp(val, "decode")) g->role = SIM_ROLE_DECODE;
        else return msgf(msg, len, "role must be mixed, prefill or decode, got '%s'", val, "");
        return 1;
    }
    if (!strcmp(k, "model")) return text(g->model, k, val, msg, len);
    if (!strcmp(k, "hw")) return text(g->hw, k, val, msg, len);
    if (!strcmp(k, "policy")) return text(g->policy, k, val, msg, len);
    if (!strcmp(k, "parallel")) {
        par_t p;
        if (par_parse(val, &p, msg, len) != 0) return -1;
        return text(g->parallel, k, val, msg, len);
    }
    snprintf(msg, len, "unknown key '%s' in [group %s] (count, role, model, hw, tp, parallel, "
             "policy, set.KEY, kv_blocks, gpu_util)", k, g->name);
    return -1;
}

/* The groups together: counts given, roles that pair. */
static int check(sim_cluster_t *c, char *err, size_t errlen) {
    const sim_group_t *first[3] = { NULL, NULL, NULL };
    if (c->n_groups == 0) {
        snprintf(err, errlen, "%s: no [group NAME] section: a cluster needs replicas", c->path);
        return -1;
    }
    for (int i = 0; i < c->n_groups; i++) {
        const sim_group_t *g = &c->groups[i];
        if (g->count < 1) {
            snprintf(err, errlen, "%s:%d: group '%s' has no count (its number of replicas)",
                     c->path, g->line, g->name);
            return -1;
        }
        if (g->tp > 0 && g->parallel[0]) {
            snprintf(err, errlen, "%s:%d: group '%s' gives both tp and parallel: put the tensor-"
                     "parallel degree in the spec (parallel = tp=%d,...)", c->path, g->line,
                     g->name, (int)g->tp);
            return -1;
        }
        if (!first[g->role]) first[g->role] = g;
        c->replicas += g->count;
    }
    const sim_group_t *p = first[SIM_ROLE_PREFILL], *d = first[SIM_ROLE_DECODE];
    if ((p != NULL) != (d != NULL)) {
        const sim_group_t *g = p ? p : d;
        snprintf(err, errlen, "%s:%d: group '%s' has role %s, but no group has role %s: a "
                 "disaggregated cluster needs prefill and decode replicas", c->path, g->line,
                 g->name, sim_role_name(g->role), p ? "decode" : "prefill");
        return -1;
    }
    if (p && first[SIM_ROLE_MIXED]) {
        snprintf(err, errlen, "%s:%d: group '%s' is mixed beside prefill and decode groups: a "
                 "cluster is either mixed or disaggregated", c->path,
                 first[SIM_ROLE_MIXED]->line, first[SIM_ROLE_MIXED]->name);
        return -1;
    }
    c->disaggregated = p != NULL;
    return 0;
}

int sim_cluster_read(const char *path, sim_cluster_t *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    c->link_bandwidth = 50e9;
    reader_t rd = { .c = c };
    if (kvfile_read_sections(path, section, key, &rd, err, errlen) != 0 ||
        check(c, err, errlen) != 0) {
        sim_cluster_free(c);
        return -1;
    }
    return 0;
}

static void free_sets(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

void sim_cluster_free(sim_cluster_t *c) {
    for (int i = 0; i < c->n_groups; i++) free_sets(c->groups[i].sets, c->groups[i].n_sets);
    free(c->groups);
    free_sets(c->router_sets, c->n_router_sets);
    c->groups = NULL;
    c->router_sets = NULL;
    c->n_groups = c->n_router_sets = 0;
}
