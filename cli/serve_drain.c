/* serve_drain: see serve_drain.h. */
#include "cli/serve_drain.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_signal.h"

#define DRAIN_POLL_S 0.1          /* how often the idle watcher looks at its quit flag */
#define DRAIN_STEP_S 0.02         /* the draining watcher's check of what is in flight */

static volatile sig_atomic_t drain_flag;
static int drain_pipe[2] = { -1, -1 };  /* the handler's signal numbers to the watcher */

struct serve_drain {
    live_t *live;
    serve_http_t *http;
    double grace_s;
    int quiet;
    atomic_int quit;
    pthread_t th;
    serve_drain_result_t res;
    double t_signal;
};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Any thread (the BLAS library's own included): async-signal-safe, never blocks. */
static void on_handler(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (drain_pipe[1] >= 0 && write(drain_pipe[1], &b, 1) < 0) {
        /* the pipe is full of earlier signals: this one adds nothing */
    }
    errno = saved;
}

const volatile sig_atomic_t *serve_drain_flag(void) { return &drain_flag; }

static int64_t in_flight(live_t *l) {
    live_stats_t s;
    live_metrics(l, &s);
    return s.in_flight;
}

/* The engine must stop now: the flag, and a nudge so that an idle engine sees it. */
static void stop_engine(serve_drain_t *d) {
    drain_flag = d->res.sig;
    live_nudge(d->live);
}

/* A signal arrived (the n-th). */
static void on_signal(serve_drain_t *d, int sig, int n, int *draining) {
    const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
    if (n >= 3) { /* the user does not want to wait at all */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    if (n == 2) {
        if (drain_flag) return; /* already stopping */
        d->res.forced = 1;
        d->res.left = in_flight(d->live);
        *draining = 0;
        if (!d->quiet)
            fprintf(stderr, "twinserve serve: %s again: stopping now, %lld requests in flight "
                    "aborted\n", name, (long long)d->res.left);
        stop_engine(d);
        return;
    }
    d->res.sig = sig;
    cli_signal_caught = sig;
    d->t_signal = mono_s();
    d->res.in_flight_at_signal = in_flight(d->live);
    if (d->grace_s <= 0) { /* --grace 0: stop at once */
        d->res.left = d->res.in_flight_at_signal;
        d->res.expired = d->res.left > 0;
        stop_engine(d);
        return;
    }
    live_drain(d->live, "the server is shutting down (draining): it takes no new requests");
    serve_http_drain(d->http);
    *draining = 1;
    if (!d->quiet)
        fprintf(stderr, "twinserve serve: %s: draining: new connections refused, %lld requests "
                "in flight given up to %g s to finish (a second signal stops at once)\n", name,
                (long long)d->res.in_flight_at_signal, d->grace_s);
}

static void *watch(void *arg) {
    serve_drain_t *d = arg;
    int n = 0, draining = 0;
    while (!atomic_load(&d->quit)) {
        struct pollfd p = { .fd = drain_pipe[0], .events = POLLIN };
        unsigned char sigs[16];
        if (poll(&p, 1, draining ? 0 : (int)(DRAIN_POLL_S * 1000)) > 0) {
            ssize_t k = read(drain_pipe[0], sigs, sizeof sigs);
            for (ssize_t i = 0; i < k; i++) on_signal(d, sigs[i], ++n, &draining);
        }
        if (!draining) continue;
        if (live_wait_idle(d->live, DRAIN_STEP_S)) {
            d->res.drained = 1;
            d->res.drain_s = mono_s() - d->t_signal;
            draining = 0;
            stop_engine(d);
        } else if (mono_s() - d->t_signal >= d->grace_s) {
            d->res.expired = 1;
            d->res.left = in_flight(d->live);
            draining = 0;
            if (!d->quiet)
                fprintf(stderr, "twinserve serve: the grace period of %g s ended with %lld "
                        "requests in flight: they are aborted\n", d->grace_s,
                        (long long)d->res.left);
            stop_engine(d);
        }
    }
    return NULL;
}

int serve_drain_start(live_t *live, serve_http_t *http, double grace_s, int quiet,
                      serve_drain_t **out) {
    *out = NULL;
    serve_drain_t *d = calloc(1, sizeof *d);
    if (!d) return -1;
    d->live = live;
    d->http = http;
    d->grace_s = grace_s;
    d->quiet = quiet;
    atomic_init(&d->quit, 0);
    drain_flag = 0;
    cli_signal_caught = 0;
    if (pipe2(drain_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        drain_pipe[0] = drain_pipe[1] = -1;
        free(d);
        return -1;
    }
    if (pthread_create(&d->th, NULL, watch, d) != 0) {
        close(drain_pipe[0]);
        close(drain_pipe[1]);
        drain_pipe[0] = drain_pipe[1] = -1;
        free(d);
        return -1;
    }
    cli_signal_guard(on_handler);
    *out = d;
    return 0;
}

void serve_drain_stop(serve_drain_t *d, serve_drain_result_t *res) {
    if (!d) return;
    atomic_store(&d->quit, 1);
    pthread_join(d->th, NULL);
    cli_signal_guard(SIG_DFL);
    close(drain_pipe[0]);
    close(drain_pipe[1]);
    drain_pipe[0] = drain_pipe[1] = -1;
    if (d->res.sig && !d->res.drained && d->t_signal > 0)
        d->res.drain_s = mono_s() - d->t_signal;
    if (res) *res = d->res;
    free(d);
}
