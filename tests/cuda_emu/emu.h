// emu: a host emulator of the CUDA execution model, so that the kernels of engine/cuda/
// run on the CPU in CI (no GPU there, nor in most development sessions).
//
// What it emulates: every thread of a block is a fiber (ucontext) with its own stack;
// fibers switch only at sync points (__syncthreads, __syncwarp, warp shuffles, wmma mma),
// and the order in which the runnable fibers of a block run, and in which ready warps are
// released, is randomised (seeded, EMU_SEED in the environment), so a missing barrier
// shows up as a wrong result. Blocks of a grid run one after another, in a shuffled
// order. Dynamic shared memory is a fresh NaN-filled buffer per block; static __shared__
// variables (rewritten to `static` by gen.py) are NaN-poisoned by the first thread of each
// block that reaches their declaration. Checked as errors (the process aborts with a
// message): a __syncthreads that some live threads never reach (an early return before a
// barrier, a barrier inside divergent code), a warp sync or shuffle with exited lanes or
// lanes at different code lines, partial shuffle masks, deadlocks, launch configurations
// CUDA refuses (threads per block, grid limits, dynamic shared memory over the limit the
// kernel opted into with cudaFuncSetAttribute). Warps that return as a whole before any
// barrier are fine, as on the device. Atomics are plain read-modify-writes: fibers never
// switch inside one. __float2bfloat16_rn and the other conversions are the host versions
// of cuda_bf16.h / cuda_fp16.h; math (expf, exp2f, sincos) is the host libm.
//
// What it does NOT emulate: the memory model beyond barriers (no stale caches, no
// reordering: a racy read that happens to run after the write passes), timing, occupancy,
// register limits, bank conflicts, real wmma fragment layouts (mma.h scrambles
// them instead, so code that assumes a layout breaks), device math's ulp differences,
// and concurrency between blocks (a grid that relies on two blocks running at once would
// deadlock on a GPU too, but here it runs). Kernels do not see __CUDA_ARCH__; they see
// TWIN_CUDA_EMU, and call emu::cp_async / cp_commit / cp_wait where the device would
// run cp.async: a copy reads its source when issued and lands in shared memory only when
// its thread waits for its group (cp.async.wait_group N: every committed group but the
// newest N), so a read of the tile before the wait, or without the barrier after it,
// sees the old contents (NaN in a fresh block).
//
// Why: the CUDA backend was written on machines without a GPU; this runs its kernels
// against plain C references on every `make check` where the CUDA headers exist.
#pragma once
#define TWIN_CUDA_EMU 1
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <ucontext.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <functional>
#include <random>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#undef __global__
#undef __device__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __shared__
#define __forceinline__ inline
#define __launch_bounds__(...)

namespace emu {
enum { RUN = 0, WWAIT = 1, BWAIT = 2, DONE = 3 };
// A fiber's saved context: on x86-64 a stack pointer (switch_to in emu.cpp saves the
// callee-saved registers on the stack; swapcontext costs a system call per switch), a
// ucontext elsewhere or with EMU_UCONTEXT defined.
#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
#define EMU_ASM_SWITCH 1
struct Ctx {
    void *sp;
};
#else
struct Ctx {
    ucontext_t uc;
};
#endif
struct Fiber {
    Ctx ctx;
    void *fake_stack;   // AddressSanitizer's fiber bookkeeping
    char *stack;
    dim3 tid;
    int lin, state, line;
};
extern Fiber *cur;
extern dim3 g_blockIdx, g_blockDim, g_gridDim;
extern unsigned long long slots[32][32];   // per warp shuffle slots
extern float mA[32][256], mB[32][256], mC[32][256];   // per warp wmma operands
extern std::mt19937 rng;
extern cudaError_t last_err;
extern void *smem;                          // this block's dynamic shared memory
extern long long launches, blocks_run, switches, block_serial;
[[noreturn]] void die(const char *msg);
void shared_poison(void *p, size_t bytes);
void reseed(unsigned seed);
void yield_to_scheduler();   // the current fiber stops until the scheduler resumes it

inline void wait_warp(int line) {
    cur->state = WWAIT;
    cur->line = line;
    yield_to_scheduler();
}
inline void wait_block(int line) {
    cur->state = BWAIT;
    cur->line = line;
    yield_to_scheduler();
}

// A shuffle: every lane publishes, the warp meets, every lane reads its source, the warp
// meets again (so no lane overwrites its slot before all have read).
template <typename T> T shfl_src(int line, unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of a value over 8 bytes");
    if (mask != 0xffffffffu) die("partial shuffle mask");
    int w = cur->lin >> 5, l = cur->lin & 31;
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof v);
    slots[w][l] = b;
    wait_warp(line);
    T r;
    memcpy(&r, &slots[w][src & 31], sizeof r);
    wait_warp(line);
    return r;
}
template <typename T> T shfl_xor(int line, unsigned mask, T v, int off, int width = 32) {
    if (width != 32) die("shuffle width other than 32");
    if (off <= 0 || off >= 32) die("bad shuffle offset");
    return shfl_src(line, mask, v, (cur->lin & 31) ^ off);
}
template <typename T> T shfl_up(int line, unsigned mask, T v, unsigned d, int width = 32) {
    if (width != 32) die("shuffle width other than 32");
    int l = cur->lin & 31;
    return shfl_src(line, mask, v, l >= (int)d ? l - (int)d : l);
}
template <typename T> T shfl_down(int line, unsigned mask, T v, unsigned d, int width = 32) {
    if (width != 32) die("shuffle width other than 32");
    int l = cur->lin & 31;
    return shfl_src(line, mask, v, l + (int)d < 32 ? l + (int)d : l);
}
template <typename T> T shfl_idx(int line, unsigned mask, T v, int src, int width = 32) {
    if (width != 32) die("shuffle width other than 32");
    return shfl_src(line, mask, v, src);
}

void launch_impl(dim3 grid, dim3 block, size_t smem, const void *kid,
                 const std::function<void()> &body);
void cp_async(void *dst, const void *src, unsigned bytes);   // this thread's copy, pending
void cp_commit();                                            // closes this thread's group
void cp_wait(int n);   // lands this thread's committed groups but the newest n
cudaError_t set_attr(const void *k, int v);

// <<<grid, block, smem, stream>>>, as gen.py rewrites it
struct Cfg {
    dim3 g, b;
    size_t smem;
};
inline Cfg cfg(dim3 g, dim3 b, size_t s = 0, cudaStream_t = 0) { return Cfg{g, b, s}; }

// The arguments are converted to the kernel's parameter types once, as a launch does;
// each thread gets its own copies of the by-value parameters.
template <typename... P, typename... A> void launch(void (*k)(P...), Cfg c, A &&...a) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel argument count");
    std::tuple<typename std::decay<P>::type...> args(std::forward<A>(a)...);
    launch_impl(c.g, c.b, c.smem, (const void *)k, [&]() { std::apply(k, args); });
}

// host stand-ins for the runtime calls the kernel files make on the host side
cudaError_t malloc_(void **p, size_t n);
cudaError_t free_(void *p);
}  // namespace emu

#define threadIdx (emu::cur->tid)
#define blockIdx (emu::g_blockIdx)
#define blockDim (emu::g_blockDim)
#define gridDim (emu::g_gridDim)
#define warpSize 32
#define __syncthreads() emu::wait_block(__LINE__)
#define __syncwarp(...) emu::wait_warp(__LINE__)
#define __shfl_xor_sync(...) emu::shfl_xor(__LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) emu::shfl_up(__LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) emu::shfl_down(__LINE__, __VA_ARGS__)
#define __shfl_sync(...) emu::shfl_idx(__LINE__, __VA_ARGS__)
#define cudaFuncSetAttribute(k, attr, v) emu::set_attr((const void *)(k), v)
#define cudaGetLastError() emu_last_error()
#define cudaMalloc(p, n) emu::malloc_((void **)(p), n)
#define cudaFree(p) emu::free_(p)
#define cudaMemsetAsync(p, v, n, st) (memset(p, v, n), cudaSuccess)
// launches complete before they return, so a copy is a memcpy and a wait returns at once
#define cudaMemcpyAsync(d, s, n, kind, st) (memcpy(d, s, n), cudaSuccess)
#define cudaStreamSynchronize(st) ((void)(st), cudaSuccess)
#define cudaMallocHost(p, n) emu::malloc_((void **)(p), n)
#define cudaFreeHost(p) emu::free_(p)
#define cudaGetErrorString(e) "emulated CUDA error"

template <typename T> inline T __ldg(const T *p) { return *p; }
template <typename T> inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> inline T atomicMin(T *p, T v) { T o = *p; if (v < o) *p = v; return o; }
template <typename T> inline T atomicMax(T *p, T v) { T o = *p; if (v > o) *p = v; return o; }
template <typename T> inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <typename T> inline T atomicCAS(T *p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }

// device intrinsics with an explicit rounding: the host's IEEE operations (the build uses
// -ffp-contract=off, so no product is fused into a sum behind the kernel's back)
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned u) { float x; memcpy(&x, &u, 4); return x; }
static inline int __float_as_int(float x) { int u; memcpy(&u, &x, 4); return u; }
static inline float __int_as_float(int u) { float x; memcpy(&x, &u, 4); return x; }

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

inline cudaError_t emu_last_error() {
    cudaError_t e = emu::last_err;
    emu::last_err = cudaSuccess;
    return e;
}
