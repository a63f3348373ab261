/* Check suite for policies/kv.c: the block manager. */
#include <check.h>
#include <stdlib.h>

#include "policies/kv.h"
#include "tests/testutil.h"

START_TEST(alloc_release_counts) {
    kv_t *kv = kv_new(10, 16);
    ck_assert_ptr_nonnull(kv);
    int32_t ids[10];
    ck_assert_int_eq(kv_alloc(kv, 3, ids), 0);
    ck_assert_int_eq(ids[0], 0);
    ck_assert_int_eq(ids[1], 1);
    ck_assert_int_eq(ids[2], 2);
    ck_assert_int_eq(kv_num_free(kv), 7);
    ck_assert_int_eq(kv_num_used(kv), 3);
    ck_assert_int_eq(kv_release(kv, ids, 3), 0);
    ck_assert_int_eq(kv_num_free(kv), 10);
    kv_free(kv);
}
END_TEST

START_TEST(alloc_is_all_or_nothing) {
    kv_t *kv = kv_new(4, 16);
    int32_t ids[8];
    ck_assert_int_eq(kv_alloc(kv, 3, ids), 0);
    ck_assert_int_eq(kv_alloc(kv, 2, ids + 3), -1);
    ck_assert_int_eq(kv_num_free(kv), 1);
    ck_assert_int_eq(kv_alloc(kv, 1, ids + 3), 0);
    ck_assert_int_eq(kv_num_free(kv), 0);
    ck_assert_int_eq(kv_alloc(kv, 1, ids + 4), -1);
    kv_free(kv);
}
END_TEST

START_TEST(refcounts_share_blocks) {
    kv_t *kv = kv_new(4, 16);
    int32_t ids[2];
    ck_assert_int_eq(kv_alloc(kv, 2, ids), 0);
    ck_assert_int_eq(kv_retain(kv, ids, 2), 0);
    ck_assert_int_eq(kv_refcount(kv, ids[0]), 2);
    ck_assert_int_eq(kv_release(kv, ids, 2), 0);
    ck_assert_int_eq(kv_num_free(kv), 2); /* still held once */
    ck_assert_int_eq(kv_release(kv, ids, 2), 0);
    ck_assert_int_eq(kv_num_free(kv), 4);
    kv_free(kv);
}
END_TEST

START_TEST(bad_ids_are_reported_and_change_nothing) {
    kv_t *kv = kv_new(4, 16);
    int32_t ids[2], bad[2] = { 0, 9 };
    ck_assert_int_eq(kv_alloc(kv, 2, ids), 0);
    ck_assert_int_eq(kv_release(kv, bad, 2), -1);
    ck_assert_int_eq(kv_refcount(kv, 0), 1);
    int32_t freeblk = 3;
    ck_assert_int_eq(kv_release(kv, &freeblk, 1), -1); /* never allocated */
    ck_assert_int_eq(kv_retain(kv, &freeblk, 1), -1);
    int32_t dup[2] = { ids[0], ids[0] };
    ck_assert_int_eq(kv_release(kv, dup, 2), -1);      /* second copy would go negative */
    ck_assert_int_eq(kv_num_free(kv), 3);
    ck_assert_int_eq(kv_refcount(kv, 77), -1);
    kv_free(kv);
}
END_TEST

START_TEST(blocks_for_rounds_up) {
    ck_assert_int_eq(kv_blocks_for(0, 16), 0);
    ck_assert_int_eq(kv_blocks_for(1, 16), 1);
    ck_assert_int_eq(kv_blocks_for(16, 16), 1);
    ck_assert_int_eq(kv_blocks_for(17, 16), 2);
    ck_assert_ptr_null(kv_new(-1, 16));
    ck_assert_ptr_null(kv_new(4, 0));
}
END_TEST

START_TEST(free_stack_survives_churn) {
    /* Random alloc/release keeps used + free == total and never hands out a held block. */
    kv_t *kv = kv_new(64, 16);
    int32_t held[64], nheld = 0;
    unsigned seed = 7;
    for (int it = 0; it < 20000; it++) {
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) % 2 && nheld < 64) {
            int32_t id;
            ck_assert_int_eq(kv_alloc(kv, 1, &id), 0);
            for (int i = 0; i < nheld; i++) ck_assert_int_ne(held[i], id);
            held[nheld++] = id;
        } else if (nheld > 0) {
            int i = (int)((seed >> 8) % (unsigned)nheld);
            ck_assert_int_eq(kv_release(kv, &held[i], 1), 0);
            held[i] = held[--nheld];
        }
        ck_assert_int_eq(kv_num_used(kv), nheld);
    }
    kv_free(kv);
}
END_TEST


START_TEST(prefix_cache_keeps_idle_blocks_until_evicted) {
    kv_t *kv = kv_new(4, 16);
    ck_assert_int_eq(kv_enable_cache(kv), 0);
    int32_t a[2], b[2];
    ck_assert_int_eq(kv_alloc(kv, 2, a), 0);
    ck_assert_int_eq(kv_cache_insert(kv, 111, a[0]), 0);
    ck_assert_int_eq(kv_cache_insert(kv, 222, a[1]), 0);
    ck_assert_int_eq(kv_cache_insert(kv, 111, a[1]), -1); /* a[1] has a key already */
    ck_assert_int_eq(kv_cache_lookup(kv, 111), a[0]);
    ck_assert_int_eq(kv_cache_lookup(kv, 333), -1);
    ck_assert_int_eq(kv_num_cached(kv), 2);
    /* released: idle, still findable, and counted as free */
    ck_assert_int_eq(kv_release(kv, a, 2), 0);
    ck_assert_int_eq(kv_num_free(kv), 4);
    ck_assert_int_eq(kv_num_used(kv), 0);
    ck_assert_int_eq(kv_cache_is_idle(kv, a[0]), 1);
    ck_assert_int_eq(kv_cache_lookup(kv, 222), a[1]);
    /* taken back by another request */
    ck_assert_int_eq(kv_cache_acquire(kv, a[1]), 0);
    ck_assert_int_eq(kv_num_used(kv), 1);
    ck_assert_int_eq(kv_cache_is_idle(kv, a[1]), 0);
    /* allocation drains the free stack first, then evicts the oldest idle block */
    ck_assert_int_eq(kv_alloc(kv, 2, b), 0);
    ck_assert_int_eq(kv_cache_lookup(kv, 111), a[0]);
    ck_assert_int_eq(kv_alloc(kv, 1, b), 0);
    ck_assert_int_eq(b[0], a[0]);                    /* evicted and reused */
    ck_assert_int_eq(kv_cache_lookup(kv, 111), -1);  /* its key is gone */
    ck_assert_int_eq(kv_num_cached(kv), 1);
    ck_assert_int_eq(kv_alloc(kv, 1, b), -1);        /* all four held */
    /* a held keyed block released twice over its count is still refused */
    int32_t dup[2] = { a[1], a[1] };
    ck_assert_int_eq(kv_release(kv, dup, 2), -1);
    kv_free(kv);
}
END_TEST

START_TEST(cache_churn_keeps_counts) {
    /* Random keyed and unkeyed allocations, releases and re-acquisitions: free + used is
     * always the total, and a looked-up block always carries its key. */
    kv_t *kv = kv_new(32, 16);
    ck_assert_int_eq(kv_enable_cache(kv), 0);
    int32_t held[64];
    int nheld = 0;
    unsigned seed = 11;
    for (int it = 0; it < 50000; it++) {
        seed = seed * 1103515245u + 12345u;
        unsigned x = (seed >> 16) % 10;
        uint64_t key = (seed >> 8) % 40;
        if (x < 4 && nheld < 64) {
            int32_t id = kv_cache_lookup(kv, key);
            if (id >= 0) {
                ck_assert_int_eq(kv_cache_acquire(kv, id), 0);
                held[nheld++] = id;
            } else if (kv_alloc(kv, 1, &id) == 0) {
                if (x < 2) ck_assert_int_ge(kv_cache_insert(kv, key, id), 0);
                held[nheld++] = id;
            }
        } else if (nheld > 0) {
            int i = (int)((seed >> 4) % (unsigned)nheld);
            ck_assert_int_eq(kv_release(kv, &held[i], 1), 0);
            held[i] = held[--nheld];
        }
        int32_t refs = 0;
        for (int32_t b = 0; b < 32; b++) refs += kv_refcount(kv, b) > 0;
        ck_assert_int_eq(kv_num_used(kv), refs);
        ck_assert_int_eq(kv_num_free(kv) + kv_num_used(kv), 32);
    }
    kv_free(kv);
}
END_TEST

int main(void) {
    Suite *s = suite_create("kv");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, alloc_release_counts);
    tcase_add_test(tc, alloc_is_all_or_nothing);
    tcase_add_test(tc, refcounts_share_blocks);
    tcase_add_test(tc, bad_ids_are_reported_and_change_nothing);
    tcase_add_test(tc, blocks_for_rounds_up);
    tcase_add_test(tc, free_stack_survives_churn);
    tcase_add_test(tc, prefix_cache_keeps_idle_blocks_until_evicted);
    tcase_add_test(tc, cache_churn_keeps_counts);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}
