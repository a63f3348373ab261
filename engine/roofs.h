/* roofs: the machine's own ceilings, measured in the process that is being judged against
 * them: memory read bandwidth (every core, vectorised sums over a buffer far larger than
 * the caches, on transparent huge pages like the CPU backend's weights) and the fp32 GEMM rate (OpenBLAS sgemm, every core). `twinserve bench` prints
 * decode throughput as fractions of both.
 *
 * Both return the best of several repetitions (the ceiling, not the mean), or a negative
 * value with a message in err when the buffers cannot be allocated. */
#ifndef TWIN_ROOFS_H
#define TWIN_ROOFS_H

#include <stddef.h>

/* Bytes per second reading `bytes` (0 = 512 MiB) with n_threads threads (0 = all cores). */
double roofs_mem_read_bw(size_t bytes, int n_threads, int reps, char *err, size_t errlen);

/* A read-bandwidth probe kept between measurements (its buffer written once), so that a
 * benchmark can read memory beside what it times, in the same phase of a shared
 * machine's load (cmd_bench pairs each quarter of a decode run with the passes before and
 * after it): bytes (0 = 512 MiB) split over n_threads (0 = all cores). NULL with a message. */
typedef struct roofs_probe roofs_probe_t;
roofs_probe_t *roofs_probe_new(size_t bytes, int n_threads, char *err, size_t errlen);
/* Bytes per second of one pass over the buffer, or -1 with a message. */
double roofs_probe_pass(roofs_probe_t *p, char *err, size_t errlen);
void roofs_probe_free(roofs_probe_t *p);

/* FLOP/s of a square n x n x n sgemm (0 = 2048) on OpenBLAS's threads, which are then
 * stopped (OpenBLAS starts them again at its next call), so that none spins on a core
 * that the next measurement needs. */
double roofs_sgemm_flops(int n, int reps, char *err, size_t errlen);

/* Monotonic seconds. */
double roofs_now(void);

#endif
