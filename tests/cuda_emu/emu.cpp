// emu.cpp: the scheduler of the host CUDA emulator (emu.h says what it emulates and what
// not). One launch runs its blocks one after another in a shuffled order; a block's
// threads are fibers that run until they reach a sync point. When no fiber can run, the
// scheduler releases a barrier that every thread of the block reached, or a random subset
// of the warps whose live lanes all wait at the same warp sync, and dies on anything else
// (a barrier some thread never reaches, a warp sync with exited lanes, a deadlock).
#include "emu.h"
#include "mma.h"

#include <algorithm>
#include <map>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#ifdef EMU_ASM_SWITCH
// emu_switch(save, to): pushes the callee-saved registers and the SSE/x87 control words,
// stores the stack pointer in *save, loads `to`, pops the same frame from there, returns
// into the other context. A new fiber's stack holds such a frame whose return address is
// fiber_entry.
extern "C" void emu_switch(void **save, void *to);
asm(R"(
    .text
    .globl emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");
#endif

namespace nvcuda {
namespace wmma {
int perm[3][256];
}
}  // namespace nvcuda

namespace emu {
Fiber *cur;
static Ctx sched;
#ifdef EMU_ASAN
static void *sched_fake;
static const void *sched_bottom;
static size_t sched_size;
#endif
dim3 g_blockIdx, g_blockDim, g_gridDim;
unsigned long long slots[32][32];
float mA[32][256], mB[32][256], mC[32][256];
std::mt19937 rng(12345);
cudaError_t last_err = cudaSuccess;
void *smem;
long long launches, blocks_run, switches, block_serial;
static std::map<const void *, int> attrs;
static const std::function<void()> *body_ptr;
static std::vector<std::pair<void *, long long>> poisoned;   // static shared: last block

[[noreturn]] void die(const char *msg) {
    fprintf(stderr, "EMU FATAL: %s (block %u,%u,%u thread %d line %d)\n", msg, g_blockIdx.x,
            g_blockIdx.y, g_blockIdx.z, cur ? cur->lin : -1, cur ? cur->line : -1);
    fflush(stderr);
    abort();
}

void reseed(unsigned seed) { rng.seed(seed); }

void shared_poison(void *p, size_t bytes) {
    for (auto &e : poisoned)
        if (e.first == p) {
            if (e.second != block_serial) {
                memset(p, 0xff, bytes);
                e.second = block_serial;
            }
            return;
        }
    memset(p, 0xff, bytes);
    poisoned.push_back({p, block_serial});
}

cudaError_t set_attr(const void *k, int v) {
    if (v < 0 || v > 232448) return cudaErrorInvalidValue;   // sm_90: 227 KB per block
    attrs[k] = v;
    return cudaSuccess;
}

cudaError_t malloc_(void **p, size_t n) {
    *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    if (!*p) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, n);
    return cudaSuccess;
}

cudaError_t free_(void *p) {
    free(p);
    return cudaSuccess;
}

// cp.async: per thread of the block, its pending copies (source bytes read at issue) and
// the group each belongs to; groups are numbered by the thread's commits
struct CpCopy {
    void *dst;
    unsigned char data[16];
    unsigned bytes;
    long long group;
};
static std::vector<CpCopy> cp_pending[1024];
static long long cp_groups[1024];

void cp_async(void *dst, const void *src, unsigned bytes) {
    if (bytes != 4 && bytes != 8 && bytes != 16) die("cp.async of other than 4, 8 or 16 bytes");
    if (((uintptr_t)dst | (uintptr_t)src) % bytes) die("misaligned cp.async");
    CpCopy c;
    c.dst = dst;
    memcpy(c.data, src, bytes);
    c.bytes = bytes;
    c.group = cp_groups[cur->lin];   // the open group
    cp_pending[cur->lin].push_back(c);
}

void cp_commit() { cp_groups[cur->lin]++; }

void cp_wait(int n) {
    std::vector<CpCopy> &q = cp_pending[cur->lin];
    const long long done = cp_groups[cur->lin] - n;   // groups below this have landed
    size_t keep = 0;
    for (size_t i = 0; i < q.size(); i++) {
        if (q[i].group < done) memcpy(q[i].dst, q[i].data, q[i].bytes);
        else q[keep++] = q[i];
    }
    q.resize(keep);
}

static const size_t STK = 256 * 1024;
static char *stacks[1024];   // reused across launches (a plain array: no destructor, so
                              // the leak checker still sees them at exit)

// scheduler -> fiber f, until f yields
static void resume(Fiber &f) {
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&sched_fake, f.stack, STK);
#endif
#ifdef EMU_ASM_SWITCH
    emu_switch(&sched.sp, f.ctx.sp);
#else
    swapcontext(&sched.uc, &f.ctx.uc);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(sched_fake, nullptr, nullptr);
#endif
}

void yield_to_scheduler() {
    Fiber *f = cur;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(f->state == DONE ? nullptr : &f->fake_stack, sched_bottom,
                                   sched_size);
#endif
#ifdef EMU_ASM_SWITCH
    emu_switch(&f->ctx.sp, sched.sp);
#else
    swapcontext(&f->ctx.uc, &sched.uc);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, &sched_bottom, &sched_size);
#endif
}

static void fiber_entry() {
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
    (*body_ptr)();
    cur->state = DONE;
    yield_to_scheduler();   // never resumed
    abort();
}

static void fiber_init(Fiber &f) {
#ifdef EMU_ASM_SWITCH
    uintptr_t top = ((uintptr_t)f.stack + STK) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;                      // fiber_entry's return address: never used
    *--sp = (void *)fiber_entry;          // popped by emu_switch's ret
    for (int i = 0; i < 6; i++) *--sp = nullptr;   // rbp rbx r12 r13 r14 r15
    --sp;
    uint32_t csr = 0x1f80;                // SSE: round to nearest, exceptions masked
    uint16_t cw = 0x037f;                 // x87: the same, double extended
    memcpy(sp, &csr, 4);
    memcpy((char *)sp + 4, &cw, 2);
    f.ctx.sp = sp;
#else
    getcontext(&f.ctx.uc);
    f.ctx.uc.uc_stack.ss_sp = f.stack;
    f.ctx.uc.uc_stack.ss_size = STK;
    f.ctx.uc.uc_link = nullptr;
    makecontext(&f.ctx.uc, fiber_entry, 0);
#endif
    f.fake_stack = nullptr;
}

struct Init {
    Init() {
        std::mt19937 r(777);
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < 256; i++) nvcuda::wmma::perm[k][i] = i;
            std::shuffle(nvcuda::wmma::perm[k], nvcuda::wmma::perm[k] + 256, r);
        }
        const char *s = getenv("EMU_SEED");
        if (s && *s) rng.seed((unsigned)strtoul(s, nullptr, 0));
    }
} init_;

void launch_impl(dim3 grid, dim3 block, size_t smem_bytes, const void *kid,
                 const std::function<void()> &body) {
    launches++;
    unsigned n = block.x * block.y * block.z;
    if (n == 0 || n > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
        last_err = cudaErrorInvalidConfiguration;
        return;
    }
    size_t lim = 48 * 1024;
    if (attrs.count(kid)) lim = std::max(lim, (size_t)attrs[kid]);
    if (smem_bytes > lim) {
        fprintf(stderr, "EMU: launch with %zu bytes of dynamic shared memory over the limit %zu\n",
                smem_bytes, lim);
        last_err = cudaErrorInvalidValue;
        return;
    }
    body_ptr = &body;
    g_blockDim = block;
    g_gridDim = grid;
    std::vector<Fiber> F(n);
    for (unsigned i = 0; i < n; i++) {
        if (!stacks[i] && !(stacks[i] = (char *)malloc(STK))) die("out of memory for stacks");
        F[i].stack = stacks[i];
    }
    std::vector<unsigned long long> order;
    for (unsigned long long b = 0; b < (unsigned long long)grid.x * grid.y * grid.z; b++)
        order.push_back(b);
    std::shuffle(order.begin(), order.end(), rng);
    unsigned char *buf = (unsigned char *)aligned_alloc(128, (smem_bytes + 127) / 128 * 128 + 128);
    std::vector<unsigned> run, ready;
    for (unsigned long long bid : order) {
        blocks_run++;
        block_serial++;
        g_blockIdx = dim3((unsigned)(bid % grid.x), (unsigned)(bid / grid.x % grid.y),
                          (unsigned)(bid / ((unsigned long long)grid.x * grid.y)));
        memset(buf, 0xff, smem_bytes);   // NaN everywhere
        smem = buf;
        for (unsigned i = 0; i < n; i++) {
            Fiber &f = F[i];
            cp_pending[i].clear();   // a copy never waited for never lands
            cp_groups[i] = 0;
            f.lin = i;
            f.tid = dim3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
            f.state = RUN;
            f.line = 0;
            fiber_init(f);
        }
        for (;;) {
            run.clear();
            for (unsigned i = 0; i < n; i++)
                if (F[i].state == RUN) run.push_back(i);
            if (!run.empty()) {
                std::shuffle(run.begin(), run.end(), rng);
                for (unsigned i : run) {
                    cur = &F[i];
                    switches++;
                    resume(F[i]);
                }
                continue;
            }
            unsigned live = 0, bw = 0;
            for (auto &f : F) {
                live += f.state != DONE;
                bw += f.state == BWAIT;
            }
            if (!live) break;
            bool progress = false;
            if (bw == live) {
                // every live thread waits at a barrier: all threads must be there
                if (live != n) {
                    for (auto &f : F)
                        if (f.state == BWAIT) cur = &f;
                    fprintf(stderr, "EMU: %u of %u threads exited before a __syncthreads\n",
                            n - live, n);
                    die("__syncthreads not reached by every thread (some exited)");
                }
                int line = F[0].line;
                for (auto &f : F)
                    if (f.line != line) {
                        cur = &f;
                        die("__syncthreads at different lines");
                    }
                for (auto &f : F) f.state = RUN;
                progress = true;
            } else {
                // release each ready warp with probability 1/2 (at least one), so that
                // warps drift apart and inter-warp races show
                ready.clear();
                for (unsigned w = 0; w * 32 < n; w++) {
                    unsigned lo = w * 32, hi = std::min(n, lo + 32), lv = 0, ww = 0;
                    for (unsigned i = lo; i < hi; i++) {
                        lv += F[i].state != DONE;
                        ww += F[i].state == WWAIT;
                    }
                    if (!ww || ww != lv) continue;
                    if (lv != hi - lo) {
                        cur = &F[lo];
                        die("warp sync or shuffle with exited lanes");
                    }
                    for (unsigned i = lo; i < hi; i++)
                        if (F[i].line != F[lo].line) {
                            cur = &F[i];
                            die("warp sync or shuffle at different lines");
                        }
                    ready.push_back(w);
                }
                std::shuffle(ready.begin(), ready.end(), rng);
                for (size_t k = 0; k < ready.size(); k++) {
                    if (k > 0 && (rng() & 1)) continue;
                    unsigned lo = ready[k] * 32, hi = std::min(n, lo + 32);
                    for (unsigned i = lo; i < hi; i++) F[i].state = RUN;
                    progress = true;
                }
            }
            if (!progress) {
                for (auto &f : F)
                    if (f.state != DONE)
                        fprintf(stderr, "  thread %d state %d line %d\n", f.lin, f.state, f.line);
                die("deadlock (a barrier that not every live thread reaches)");
            }
        }
    }
    free(buf);
    cur = nullptr;
}
}  // namespace emu
