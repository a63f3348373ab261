// test_cuda_emu_graph: cuda_graph.cu's step-graph cache (ck_graph_run) on the host, with the
// CUDA graph calls replaced by a fake that records what a capture would hold: a "launch" is
// a number appended to the device log, a capture collects the step's launches instead of
// running them, and launching a graph replays what it collected. Checked: a key seen once
// runs as plain launches, the second time it is captured and launched, then replayed; keys
// that differ in one byte or in length are different steps; the 32 graphs held keep the
// most recently used ones; a capture the driver refuses runs the step as plain launches
// and turns graphs off for good; an error of the step's own launches comes back with no
// call named; the counters add up.
// Why: on a GPU the graphs are checked only by their outputs (test_backend_cuda); this
// pins down when the cache captures, replays and drops, everywhere `make check` runs.
#include "emu.h"

#include <map>

// ---- the fake graph API (before the generated copy of cuda_graph.cu) -------------------
struct FakeGraph {
    std::vector<int> launches;
};
static std::vector<int> device_log;   // what ran on the "device", in order
static FakeGraph *capturing;          // the capture in progress
static bool refuse_capture;           // EndCapture fails (an op the driver refuses)
static int live_execs;                // instantiated and not yet destroyed

static void fake_launch(int id) {
    if (capturing) capturing->launches.push_back(id);
    else device_log.push_back(id);
}
static cudaError_t fake_begin(cudaStream_t) {
    if (capturing) return cudaErrorIllegalState;
    capturing = new FakeGraph;
    return cudaSuccess;
}
static cudaError_t fake_end(cudaStream_t, cudaGraph_t *g) {
    FakeGraph *c = capturing;
    capturing = nullptr;
    if (refuse_capture) {
        delete c;
        *g = nullptr;
        return cudaErrorStreamCaptureUnsupported;
    }
    *g = (cudaGraph_t)c;
    return cudaSuccess;
}
static cudaError_t fake_instantiate(cudaGraphExec_t *e, cudaGraph_t g) {
    *e = (cudaGraphExec_t) new FakeGraph(*(FakeGraph *)g);
    live_execs++;
    return cudaSuccess;
}
static cudaError_t fake_graph_destroy(cudaGraph_t g) {
    delete (FakeGraph *)g;
    return cudaSuccess;
}
static cudaError_t fake_exec_destroy(cudaGraphExec_t e) {
    delete (FakeGraph *)e;
    live_execs--;
    return cudaSuccess;
}
static cudaError_t fake_graph_launch(cudaGraphExec_t e, cudaStream_t) {
    for (int id : ((FakeGraph *)e)->launches) device_log.push_back(id);
    return cudaSuccess;
}
#define cudaStreamBeginCapture(st, mode) fake_begin(st)
#define cudaStreamEndCapture(st, g) fake_end(st, g)
#define cudaGraphInstantiate(e, g, flags) fake_instantiate(e, g)
#define cudaGraphDestroy(g) fake_graph_destroy(g)
#define cudaGraphExecDestroy(e) fake_exec_destroy(e)
#define cudaGraphLaunch(e, st) fake_graph_launch(e, st)

#include "gen_graph.inc"

#include "drv.h"

// a step: launches `base`, `base + 1`, `base + 2`; fails when told
struct Step {
    int base, calls = 0;
    bool fail = false;
};
static cudaError_t step_ops(void *ctx) {
    Step *s = (Step *)ctx;
    s->calls++;
    if (s->fail) return cudaErrorLaunchFailure;
    for (int i = 0; i < 3; i++) fake_launch(s->base + i);
    return cudaSuccess;
}

// runs the step under `key` and checks that its three launches reached the device once
static void run_step(ck_graphs_t *g, const std::vector<char> &key, int base) {
    Step s{base};
    device_log.clear();
    const char *what = "?";
    ck_assert_int_eq(ck_graph_run(g, 0, key.data(), key.size(), step_ops, &s, &what),
                     cudaSuccess);
    ck_assert_str_eq(what, "");
    ck_assert_int_eq((int)device_log.size(), 3);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(device_log[i], base + i);
    ck_assert_ptr_null(capturing);
}

static std::vector<char> key_of(int n, int bytes = 100) {
    std::vector<char> k(bytes, 7);
    memcpy(k.data(), &n, sizeof n);
    return k;
}

#define STATS(g) (*ck_graphs_stats(g))

START_TEST(seen_captured_replayed) {
    ck_graphs_t *g = ck_graphs_new();
    std::vector<char> a = key_of(1);
    run_step(g, a, 10);   // first sight: plain launches
    ck_assert_int_eq(STATS(g).eager, 1);
    ck_assert_int_eq(STATS(g).captured, 0);
    run_step(g, a, 10);   // second: captured, then launched
    ck_assert_int_eq(STATS(g).captured, 1);
    ck_assert_int_eq(live_execs, 1);
    for (int i = 0; i < 3; i++) run_step(g, a, 10);   // held: replayed
    ck_assert_int_eq(STATS(g).replayed, 3);
    // the replay launches what was captured, even when the step's ops would now launch
    // something else (the key is what decides that they would not)
    Step s{50};
    device_log.clear();
    const char *what;
    ck_assert_int_eq(ck_graph_run(g, 0, a.data(), a.size(), step_ops, &s, &what), cudaSuccess);
    ck_assert_int_eq(s.calls, 0);
    ck_assert_int_eq(device_log[0], 10);
    // one byte more, or one byte different: another step
    std::vector<char> longer = a, other = a;
    longer.push_back(7);
    other[99] = 8;
    run_step(g, longer, 20);
    run_step(g, other, 30);
    ck_assert_int_eq(STATS(g).eager, 3);
    ck_assert_int_eq(STATS(g).replayed, 4);
    ck_graphs_free(g);
    ck_assert_int_eq(live_execs, 0);
}
END_TEST

START_TEST(least_recently_used_goes_first) {
    ck_graphs_t *g = ck_graphs_new();
    // 33 keys, each captured (seen, then run again): the first one is dropped ...
    for (int k = 0; k < 33; k++) {
        if (k == 32) run_step(g, key_of(0), 100);   // ... unless used again before the 33rd
        run_step(g, key_of(k), 100 + 3 * k);
        run_step(g, key_of(k), 100 + 3 * k);
    }
    ck_assert_int_eq(STATS(g).captured, 33);
    ck_assert_int_eq(STATS(g).evicted, 1);
    ck_assert_int_eq(live_execs, 32);
    long long rep = STATS(g).replayed;
    run_step(g, key_of(0), 100);   // kept: it was used last but one
    ck_assert_int_eq(STATS(g).replayed, rep + 1);
    run_step(g, key_of(1), 103);   // dropped: seen before, so captured again
    ck_assert_int_eq(STATS(g).captured, 34);
    ck_graphs_free(g);
    ck_assert_int_eq(live_execs, 0);
}
END_TEST

START_TEST(refused_capture_turns_graphs_off) {
    ck_graphs_t *g = ck_graphs_new();
    std::vector<char> a = key_of(5);
    run_step(g, a, 40);
    refuse_capture = true;
    run_step(g, a, 40);   // the capture fails: the step still runs, once, as plain launches
    refuse_capture = false;
    ck_assert_int_eq(STATS(g).failed, 1);
    ck_assert_int_eq(STATS(g).captured, 0);
    for (int i = 0; i < 3; i++) run_step(g, a, 40);   // and graphs stay off
    ck_assert_int_eq(STATS(g).captured, 0);
    ck_assert_int_eq(STATS(g).eager, 5);
    ck_assert_int_eq(live_execs, 0);
    ck_graphs_free(g);
}
END_TEST

START_TEST(step_errors_come_back) {
    ck_graphs_t *g = ck_graphs_new();
    std::vector<char> a = key_of(9);
    Step s{0};
    s.fail = true;
    const char *what = "?";
    // plain launches and a capture alike: the step's own error, no call named
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(ck_graph_run(g, 0, a.data(), a.size(), step_ops, &s, &what),
                         cudaErrorLaunchFailure);
        ck_assert_str_eq(what, "");
        ck_assert_ptr_null(capturing);
    }
    ck_assert_int_eq(live_execs, 0);
    ck_graphs_free(g);
}
END_TEST

int main() {
    return run_suite("cuda_emu_graph", {seen_captured_replayed, least_recently_used_goes_first,
                                        refused_capture_turns_graphs_off,
                                        step_errors_come_back});
}
