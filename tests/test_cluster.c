/* test_cluster: --cluster files (sim/cluster.h): groups in file order with their
 * overrides, the router and its params, link figures; every mistake names the file and
 * line: unknown sections and keys, keys before a section, repeated keys, bad values, a
 * group without count, a duplicate group, a role without its partner, mixed beside
 * disaggregated. */
#include "sim/cluster.h"
#include "tests/testutil.h"

static char path[256];

static int read_src(const char *src, sim_cluster_t *c, char *err, size_t len) {
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".conf", src));
    return sim_cluster_read(path, c, err, len);
}

START_TEST(reads_groups) {
    sim_cluster_t c;
    char err[512];
    int rc = read_src("# a comment\n[cluster]\nrouter = r.lua\nset.w = 3\nset.k = x\n"
                      "link_latency_s = 0.001\nlink_bandwidth_gbps = 25\nlinks = shared\n\n"
                      "[group pre]\ncount = 2\nrole = prefill\nmodel = llama-3-8b\nhw = h100\n"
                      "tp = 2\npolicy = p.lua\nset.chunk = 256\nkv_blocks = 999\n"
                      "gpu_util = 0.8\n[ group dec ]\ncount = 3\nrole = decode\n",
                      &c, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(c.n_groups, 2);
    ck_assert_int_eq(c.replicas, 5);
    ck_assert_int_eq(c.disaggregated, 1);
    ck_assert_str_eq(c.router, "r.lua");
    ck_assert_int_eq(c.n_router_sets, 2);
    ck_assert_str_eq(c.router_sets[0], "w=3");
    ck_assert_str_eq(c.router_sets[1], "k=x");
    ck_assert_double_eq_tol(c.link_latency_s, 0.001, 1e-15);
    ck_assert_double_eq_tol(c.link_bandwidth, 25e9, 1e-3);
    ck_assert_int_eq(c.link_shared, 1);
    const sim_group_t *g = &c.groups[0];
    ck_assert_str_eq(g->name, "pre");
    ck_assert_int_eq(g->line, 10);
    ck_assert_int_eq(g->count, 2);
    ck_assert_int_eq(g->role, SIM_ROLE_PREFILL);
    ck_assert_str_eq(g->model, "llama-3-8b");
    ck_assert_str_eq(g->hw, "h100");
    ck_assert_int_eq(g->tp, 2);
    ck_assert_str_eq(g->policy, "p.lua");
    ck_assert_int_eq(g->n_sets, 1);
    ck_assert_str_eq(g->sets[0], "chunk=256");
    ck_assert_int_eq(g->kv_blocks, 999);
    ck_assert_double_eq_tol(g->gpu_util, 0.8, 1e-15);
    g = &c.groups[1];
    ck_assert_str_eq(g->name, "dec");
    ck_assert_int_eq(g->role, SIM_ROLE_DECODE);
    ck_assert_str_eq(g->model, "");
    ck_assert_int_eq(g->tp, 0);
    sim_cluster_free(&c);

    rc = read_src("[group only]\ncount = 4\n", &c, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(c.replicas, 4);
    ck_assert_int_eq(c.disaggregated, 0);
    ck_assert_int_eq(c.groups[0].role, SIM_ROLE_MIXED);
    ck_assert_int_eq(c.link_shared, 0); /* a link per prefill->decode pair by default */
    ck_assert_str_eq(c.router, "");
    ck_assert_double_eq_tol(c.link_bandwidth, 50e9, 1e-3);
    sim_cluster_free(&c);
}
END_TEST

/* the file is refused with "PATH:LINE: want" (line 0: "PATH: want") */
static void refused(const char *src, int line, const char *want) {
    sim_cluster_t c;
    char err[512], full[768];
    ck_assert_int_eq(read_src(src, &c, err, sizeof err), -1);
    if (line) snprintf(full, sizeof full, "%s:%d: %s", path, line, want);
    else snprintf(full, sizeof full, "%s: %s", path, want);
    ck_assert_msg(strstr(err, full) != NULL, "'%s' lacks '%s'", err, full);
    ck_assert_ptr_null(c.groups);
}

START_TEST(mistakes_name_file_and_line) {
    refused("[cluster]\nroutr = x\n[group a]\ncount = 1\n", 2, "unknown key 'routr' in [cluster]");
    refused("[group a]\ncount = 1\nmodle = x\n", 3, "unknown key 'modle' in [group a]");
    refused("count = 1\n", 1, "'count' before any section");
    refused("[groups a]\ncount = 1\n", 1, "unknown section [groups a]");
    refused("[group]\ncount = 1\n", 1, "a group needs a name");
    refused("[group a]\ncount = 1\n[group a]\ncount = 2\n", 3, "group 'a' is given twice");
    refused("[group a]\ncount = 1\ncount = 2\n", 3, "duplicate key 'count'");
    refused("[group a]\ncount = 0\n", 2, "count must be an integer in [1,");
    refused("[group a]\ncount = 1.5\n", 2, "count must be an integer");
    refused("[group a]\ncount = 1\nrole = both\n", 3, "role must be mixed, prefill or decode");
    refused("[group a]\ncount = 1\ngpu_util = 2\n", 3, "gpu_util must be a number in [0.01, 1]");
    refused("[cluster]\nlink_bandwidth_gbps = 0\n[group a]\ncount = 1\n", 2,
            "link_bandwidth_gbps must be");
    refused("[group a]\nrole = mixed\n", 1, "group 'a' has no count");
    refused("[cluster]\nrouter = r.lua\n", 0, "no [group NAME] section");
    refused("[group a]\ncount = 2\n[group p]\ncount = 1\nrole = prefill\n", 3,
            "group 'p' has role prefill, but no group has role decode");
    refused("[group d]\ncount = 2\nrole = decode\n", 1,
            "group 'd' has role decode, but no group has role prefill");
    refused("[group m]\ncount = 1\n[group p]\ncount = 1\nrole = prefill\n[group d]\ncount = 1\n"
            "role = decode\n", 1, "group 'm' is mixed beside prefill and decode groups");
    refused("[group a]\ncount 1\n", 2, "expected 'key = value'");
    refused("[cluster]\nlinks = mesh\n[group a]\ncount = 1\n", 2,
            "links must be pair (one link per prefill->decode pair) or shared");
    sim_cluster_t c;
    char err[512];
    ck_assert_int_eq(sim_cluster_read("/nonexistent/c.conf", &c, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/c.conf: cannot open"));
}
END_TEST

int main(void) {
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, reads_groups);
    tcase_add_test(tc, mistakes_name_file_and_line);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}
