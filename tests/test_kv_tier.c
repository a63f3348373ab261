/* test_kv_tier: the KV tiers below HBM (policies/kv_tier.h): parsing with the kinds'
 * defaults and its refusals, the order check, LRU demotion by hand, block conservation
 * under random writes and hits (a property over seeds), the reload time by hand, and the
 * scheduler core reloading a prefix its HBM cache had evicted: a three-request schedule by
 * hand. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/kv_tier.h"
#include "policies/sched.h"
#include "tests/sched_fixture.h"
#include "tests/testutil.h"

START_TEST(parse_defaults_and_overrides) {
    kv_tier_spec_t s;
    char err[256];
    ck_assert_msg(kv_tier_parse("dram:256GB", 2e6, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(s.kind, "dram");
    ck_assert_int_eq(s.capacity_blocks, 128000);
    ck_assert(s.read_bps == 50e9 && s.write_bps == 50e9 && s.latency_s == 10e-6 && s.overlap);
    ck_assert(kv_tier_parse("ssd:2TB", 2e6, &s, err, sizeof err) == 0);
    ck_assert(s.read_bps == 7e9 && s.write_bps == 3.5e9 && !s.overlap);
    ck_assert_int_eq(s.capacity_blocks, 1000000);
    ck_assert(kv_tier_parse("pool:10TiB", 1 << 20, &s, err, sizeof err) == 0);
    ck_assert_int_eq(s.capacity_blocks, 10LL * 1024 * 1024);
    ck_assert(kv_tier_parse("dram:1GB:read=25GB/s,write=20GB/s,lat=2us,overlap=0", 1e6, &s, err,
                            sizeof err) == 0);
    ck_assert(s.read_bps == 25e9 && s.write_bps == 20e9 && fabs(s.latency_s - 2e-6) < 1e-15 &&
              !s.overlap);
    ck_assert_int_eq(s.capacity_blocks, 1000);
}
END_TEST

START_TEST(parse_refusals_name_the_item) {
    kv_tier_spec_t s;
    char err[256];
    ck_assert_int_eq(kv_tier_parse("hbm:1GB", 1e6, &s, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "unknown kind 'hbm' (dram, ssd or pool)"));
    ck_assert_int_eq(kv_tier_parse("dram", 1e6, &s, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "give KIND:SIZE"));
    ck_assert_int_eq(kv_tier_parse("dram:-5GB", 1e6, &s, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "size '-5GB' is not a positive size"));
    ck_assert_int_eq(kv_tier_parse("dram:1KB", 1e6, &s, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "holds no block"));
    ck_assert_int_eq(kv_tier_parse("dram:1GB:read=0GB/s", 1e6, &s, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "bad value '0GB/s' for read"));
    ck_assert_int_eq(kv_tier_parse("dram:1GB:speed=9", 1e6, &s, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "unknown setting 'speed'"));
    ck_assert_int_eq(kv_tier_parse("ssd:1GB:lat=5", 1e6, &s, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "bad value '5' for lat"));
    /* order: fastest down, the pool last */
    kv_tier_spec_t two[2];
    ck_assert(kv_tier_parse("ssd:1GB", 1e6, &two[0], err, sizeof err) == 0);
    ck_assert(kv_tier_parse("dram:1GB", 1e6, &two[1], err, sizeof err) == 0);
    ck_assert_int_eq(kv_tier_check(two, 2, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "KV tier 2 (dram): DRAM below SSD"));
    ck_assert(kv_tier_parse("pool:1GB", 1e6, &two[0], err, sizeof err) == 0);
    ck_assert(kv_tier_parse("ssd:1GB", 1e6, &two[1], err, sizeof err) == 0);
    ck_assert_int_eq(kv_tier_check(two, 2, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "below the shared pool"));
    two[0].read_bps = 0;
    ck_assert_int_eq(kv_tier_check(two, 1, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "read bandwidth must be > 0"));
}
END_TEST

static kv_tiers_t *two_tiers(int64_t dram, int64_t ssd) {
    kv_tier_spec_t sp[2] = {{"dram", dram, 50e9, 50e9, 1e-5, 1}, {"ssd", ssd, 7e9, 3.5e9, 1e-4, 0}};
    kv_tiers_t *t = kv_tiers_new(sp, 2);
    ck_assert_ptr_nonnull(t);
    return t;
}

START_TEST(lru_demotion_by_hand) {
    kv_tiers_t *t = two_tiers(2, 3);
    for (uint64_t k = 1; k <= 3; k++) kv_tiers_put(t, k);   /* dram {2,3}, ssd {1} */
    ck_assert_int_eq(kv_tiers_find(t, 1), 1);
    ck_assert_int_eq(kv_tiers_find(t, 2), 0);
    ck_assert_int_eq(kv_tiers_find(t, 3), 0);
    kv_tiers_put(t, 4);                                     /* dram {3,4}, ssd {1,2} */
    ck_assert_int_eq(kv_tiers_find(t, 2), 1);
    kv_tiers_hit(t, 0, 3);                                  /* 3 recently used */
    kv_tiers_put(t, 5);                                     /* dram evicts 4: {3,5}; ssd {1,2,4} */
    ck_assert_int_eq(kv_tiers_find(t, 4), 1);
    ck_assert_int_eq(kv_tiers_find(t, 3), 0);
    kv_tiers_put(t, 6);                        /* dram evicts 3 to ssd, which drops 1 */
    ck_assert_int_eq(kv_tiers_find(t, 1), -1);
    ck_assert_int_eq(kv_tiers_find(t, 3), 1);
    kv_tiers_put(t, 2);                        /* held in ssd: refreshed there, not written */
    ck_assert_int_eq(kv_tiers_find(t, 2), 1);
    const kv_tier_stats_t *d = kv_tiers_stats(t, 0), *s = kv_tiers_stats(t, 1);
    ck_assert_int_eq(d->held, 2);
    ck_assert_int_eq(s->held, 3);
    ck_assert_int_eq(d->writes, 6);
    ck_assert_int_eq(d->evictions, 4);
    ck_assert_int_eq(s->writes, 4);
    ck_assert_int_eq(s->evictions, 1);
    ck_assert_int_eq(d->hits, 1);
    int32_t n[KV_TIER_MAX] = {3, 2};
    double ov, ser;
    kv_tier_reload_s(t, n, 1e6, &ov, &ser);
    ck_assert_double_eq_tol(ov, 1e-5 + 3e6 / 50e9, 1e-15);
    ck_assert_double_eq_tol(ser, 1e-4 + 2e6 / 7e9, 1e-15);
    kv_tiers_free(t);
}
END_TEST

/* Random writes and hits never break conservation: every key in at most one tier, each
 * tier within its capacity, held equal to the keys found there. */
START_TEST(conservation_under_random_traffic) {
    for (uint32_t seed = 1; seed <= 20; seed++) {
        kv_tiers_t *t = two_tiers(7 + seed % 5, 11 + seed % 7);
        uint64_t x = seed * 0x9E3779B97F4A7C15ull;
        enum { KEYS = 40 };
        for (int i = 0; i < 3000; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            uint64_t key = 1 + x % KEYS;
            if (x % 3 == 0) {
                int at = kv_tiers_find(t, key);
                if (at >= 0) kv_tiers_hit(t, at, key);
            } else {
                kv_tiers_put(t, key);
            }
            if (i % 97 == 0) {
                int64_t seen[2] = {0, 0};
                for (uint64_t k = 1; k <= KEYS; k++) {
                    int at = kv_tiers_find(t, k);
                    if (at >= 0) seen[at]++;
                }
                for (int j = 0; j < 2; j++) {
                    const kv_tier_stats_t *st = kv_tiers_stats(t, j);
                    ck_assert_int_eq(st->held, seen[j]);
                    ck_assert_int_le(st->held, kv_tiers_spec(t, j)->capacity_blocks);
                }
            }
        }
        kv_tiers_free(t);
    }
}
END_TEST

static void add_h(sched_t *s, int32_t id, int32_t prompt, const int64_t *h, int32_t nh) {
    sched_new_req_t r = {.id = id, .prompt_tokens = prompt, .output_tokens = 1,
                         .hash_ids = h, .n_hash = nh, .hash_block = 64};
    ck_assert_int_eq(sched_add(s, &r, 0), 0);
}

/* A: 129 tokens of prefix {1,2,3} (8 full blocks published, 9 held). B: 160 tokens of its
 * own in a cache of 12 blocks takes the 4 free ones and evicts 6 of A's idle blocks into
 * DRAM, the least recently released first: A's blocks 0-5. C: A's prefix again finds
 * blocks 0-5 in DRAM (reloaded into fresh blocks) and 6-7 still in HBM (taken): 128 of its
 * 129 tokens cached, 96 of them reloaded, the last token computed. */
START_TEST(reload_schedule_by_hand) {
    probe_t p = {.fn = fcfs};
    sched_config_t c = cfg(12);
    c.prefix_caching = 1;
    sched_t *s = make(&p, c);
    kv_tiers_t *t = two_tiers(100, 100);
    ck_assert_int_eq(sched_set_tiers(s, t), 0);
    int64_t a[] = {1, 2, 3}, b[] = {7, 8, 9};
    add_h(s, 1, 129, a, 3);
    const sched_plan_t *plan = step(s, 0);
    ck_assert_int_eq(plan->entries[0].num_tokens, 129);
    ck_assert_int_eq(plan->reload_blocks[0], 0);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1), 0);   /* finished: 8 full blocks idle */
    add_h(s, 2, 160, b, 3);
    plan = step(s, 1);                                      /* 10 blocks: 2 free + 8 evicted */
    ck_assert_int_eq(plan->entries[0].num_tokens, 160);
    ck_assert_int_eq(kv_tiers_stats(t, 0)->writes, 6);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 2), 0);
    add_h(s, 3, 129, a, 3);
    plan = step(s, 2);
    ck_assert_int_eq(plan->n, 1);
    ck_assert_int_eq(plan->entries[0].start, 128);
    ck_assert_int_eq(plan->entries[0].num_tokens, 1);
    ck_assert_int_eq(plan->reload_blocks[0], 6);
    ck_assert_int_eq(plan->reload_blocks[1], 0);
    ck_assert_int_eq(sched_find(s, 3)->cached_tokens, 128);
    ck_assert_int_eq(sched_find(s, 3)->reloaded_tokens, 96);
    ck_assert_int_eq(kv_tiers_stats(t, 0)->hits, 6);
    /* C holds A's chain whole: 9 blocks, every one referenced once */
    int32_t nb;
    const int32_t *blk = sched_req_blocks(s, 3, &nb);
    ck_assert_int_eq(nb, 9);
    for (int32_t j = 0; j < nb; j++) ck_assert_int_eq(sched_kv_refcount(s, blk[j]), 1);
    check_invariants(s);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 3), 0);
    /* reloaded blocks are HBM's cache again: a fourth copy hits in HBM, reloads nothing */
    add_h(s, 4, 129, a, 3);
    ck_assert_int_eq(sched_prefix_hit(s, 4), 128);
    plan = step(s, 3);
    ck_assert_int_eq(plan->reload_blocks[0], 0);
    ck_assert_int_eq(plan->entries[0].start, 128);
    check_invariants(s);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 4), 0);
    check_invariants(s);
    sched_free(s);
    kv_tiers_free(t);
    /* tiers without prefix caching are refused */
    probe_t q = {.fn = fcfs};
    sched_t *s2 = make(&q, cfg(12));
    kv_tiers_t *t2 = two_tiers(10, 10);
    ck_assert_int_eq(sched_set_tiers(s2, t2), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s2), "need prefix caching"));
    sched_free(s2);
    kv_tiers_free(t2);
}
END_TEST

int main(void) {
    Suite *su = suite_create("kv_tier");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, parse_defaults_and_overrides);
    tcase_add_test(tc, parse_refusals_name_the_item);
    tcase_add_test(tc, lru_demotion_by_hand);
    tcase_add_test(tc, conservation_under_random_traffic);
    tcase_add_test(tc, reload_schedule_by_hand);
    suite_add_tcase(su, tc);
    return testutil_run(su);
}
