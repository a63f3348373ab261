/* test_roofs: the machine's ceilings (engine/roofs.h). The read probe reads what it wrote
 * and gives a positive, finite rate on every pass; a buffer too small for its threads is
 * refused with a message; the sgemm rate is positive, and OpenBLAS's threads are stopped
 * after it (none left spinning on a core that the next measurement needs) and start
 * again at the next call. Rates are never compared with a target: the machines are
 * shared, and a speed target is a benchmark's business (bench/). */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/roofs.h"

/* OpenBLAS's (roofs.c stops its threads with the first); NULL with another BLAS. The
 * threads are OpenBLAS's own only in its pthreads build (parallel = 1; OpenMP's stay in
 * libgomp's pool). */
extern int blas_thread_shutdown_(void) __attribute__((weak));
extern int openblas_get_parallel(void) __attribute__((weak));

static int threads_now(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

START_TEST(read_probe_passes) {
    char err[256] = "";
    roofs_probe_t *p = roofs_probe_new((size_t)16 << 20, 2, err, sizeof err);
    ck_assert_msg(p != NULL, "%s", err);
    for (int i = 0; i < 3; i++) {
        double bw = roofs_probe_pass(p, err, sizeof err);
        ck_assert_msg(bw > 0 && isfinite(bw), "pass %d: %g (%s)", i, bw, err);
    }
    roofs_probe_free(p);
    double bw = roofs_mem_read_bw((size_t)8 << 20, 1, 2, err, sizeof err);
    ck_assert_msg(bw > 0 && isfinite(bw), "roofs_mem_read_bw: %g (%s)", bw, err);
}
END_TEST

START_TEST(too_small_a_probe_is_refused) {
    char err[256] = "";
    ck_assert_ptr_null(roofs_probe_new(100, 4, err, sizeof err));
    ck_assert_msg(strstr(err, "100 bytes is too small a buffer for 4 threads") != NULL, "%s",
                  err);
    ck_assert_double_lt(roofs_mem_read_bw(100, 4, 1, err, sizeof err), 0);
}
END_TEST

START_TEST(sgemm_rate_and_blas_threads) {
    char err[256] = "";
    int own = blas_thread_shutdown_ && openblas_get_parallel && openblas_get_parallel() == 1;
    int before = threads_now();
    for (int call = 0; call < 2; call++) {   /* the second call starts the threads again */
        double fl = roofs_sgemm_flops(192, 2, err, sizeof err);
        ck_assert_msg(fl > 0 && isfinite(fl), "call %d: %g (%s)", call, fl, err);
        if (!own) continue;
        ck_assert_msg(threads_now() == before,
                      "call %d: %d threads after the sgemm, %d before: BLAS threads left running",
                      call, threads_now(), before);
    }
    if (!own)
        fprintf(stderr, "SKIP: this BLAS is not OpenBLAS's pthreads build: whether its threads "
                        "are stopped is not checked\n");
}
END_TEST

int main(void) {
    Suite *s = suite_create("roofs");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, read_probe_passes);
    tcase_add_test(tc, too_small_a_probe_is_refused);
    tcase_add_test(tc, sgemm_rate_and_blas_threads);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
