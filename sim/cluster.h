/* cluster: a --cluster file, the replica groups of a simulated cluster and its router.
 *
 *     [cluster]                        # optional
 *     router = policies/routers/prefix_affinity.lua
 *     set.prefix_weight = 3            # the router's params (as --set router.KEY=VALUE)
 *     link_latency_s = 0.00005         # KV transfers between replicas (disaggregation)
 *     link_bandwidth_gbps = 50         # GB/s per link
 *     links = pair                     # pair: a link per prefill->decode pair; shared: one
 *
 *     [group big]                      # one or more groups, each NAME unique
 *     count = 4                        # replicas in the group (required, >= 1)
 *     role = mixed                     # mixed (default), prefill or decode
 *     model = llama-3-8b               # default: --model
 *     hw = h100                        # default: --hw
 *     tp = 1                           # default: --tp
 *     parallel = tp=8,ep=8             # or a parallel spec (sim/parallel.h); not with tp
 *     policy = policies/continuous.lua # default: --policy
 *     set.max_seqs = 128               # the group's policy params
 *     kv_blocks = 20000                # default: from hw and gpu_util
 *     gpu_util = 0.9                   # default: --gpu-util
 *
 * Replicas are numbered in file order, group by group. Errors name the file and line:
 * an unknown section or key, a key repeated in a section, a bad value, a group without
 * count, a duplicate group name, a prefill group without a decode group (or the other way
 * round: a role without replicas), mixed replicas beside prefill/decode ones.
 *
 * Ownership: sim_cluster_read fills a caller's struct; sim_cluster_free frees what it
 * holds (the sets' strings). */
#ifndef TWIN_SIM_CLUSTER_H
#define TWIN_SIM_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "sim/kvfile.h"

enum { SIM_ROLE_MIXED = 0, SIM_ROLE_PREFILL = 1, SIM_ROLE_DECODE = 2 };

typedef struct {
    char name[KV_NAME_CAP];
    int line;                 /* of its [group NAME] line */
    int32_t count, role, tp, kv_blocks;   /* tp, kv_blocks 0: the options' */
    double gpu_util;          /* 0: the options' */
    char model[KV_TEXT_CAP], hw[KV_TEXT_CAP], policy[KV_TEXT_CAP]; /* "": the options' */
    char **sets;              /* "KEY=VALUE" */
    int n_sets;
    char parallel[KV_TEXT_CAP]; /* "": tp (or the options') */
} sim_group_t;

typedef struct {
    char path[KV_TEXT_CAP];
    sim_group_t *groups;
    int n_groups;
    char router[KV_TEXT_CAP]; /* "": none given */
    char **router_sets;
    int n_router_sets;
    double link_latency_s;    /* default 0 */
    double link_bandwidth;    /* bytes/s; default 50 GB/s */
    int link_shared;          /* 1: one link for every transfer; 0 (default): per pair */
    int32_t replicas;         /* sum of the groups' counts */
    int disaggregated;        /* has prefill and decode groups */
} sim_cluster_t;

/* 0, or -1 with a message naming the file (and line) in err; c is freed on failure. */
int sim_cluster_read(const char *path, sim_cluster_t *c, char *err, size_t errlen);
void sim_cluster_free(sim_cluster_t *c);
/* "mixed", "prefill", "decode" */
const char *sim_role_name(int32_t role);

#endif
