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

/* Bytes per second reading `bytes` (0 = 2 GiB) with n_threads threads (0 = all cores). */
double roofs_mem_read_bw(size_t bytes, int n_threads, int reps, char *err, size_t errlen);

/* FLOP/s of a square n x n x n sgemm (0 = 2048) on OpenBLAS's threads. */
double roofs_sgemm_flops(int n, int reps, char *err, size_t errlen);

/* Monotonic seconds. */
double roofs_now(void);

#endif
