/* serve_drain: how `twinserve serve` (cli/cmd_serve.c) stops on SIGTERM, SIGINT or SIGHUP.
 *
 *  - The first signal drains: the HTTP side stops listening (new connections are refused,
 *    serve_http_drain; a request on a connection already open gets 503) and the engine
 *    takes no new submissions (live_drain), while the requests in flight run to their end.
 *    When nothing is left in flight, the engine's interrupt flag is set: the engine, idle,
 *    ends the run as done. If the grace period ends first, the flag is set with requests
 *    in flight: the engine aborts them ("interrupted by SIGTERM at t=T s") and marks the
 *    run failed, as an interrupted run always was. A grace of 0 does that at once (the
 *    behaviour before draining existed).
 *  - A second signal stops at once, as the grace period's end does (the run recorded
 *    failed, in-flight requests aborted); a third takes the signal's default action.
 *  - SIGINT (Ctrl-C) and SIGHUP drain as SIGTERM does: a server told to stop by a terminal
 *    or a supervisor finishes what it was asked first, and a second Ctrl-C is always there.
 *
 * How: the handler (cli_signal_guard's, on whichever thread the signal lands: the BLAS
 * library's threads exist before main, so blocking the signals cannot cover every thread)
 * only writes the signal's number into a pipe; a watcher thread reads it and does the rest.
 * A signal the parent had ignored (nohup, a background job) stays ignored.
 * cli_signal_caught is set to the first signal's number (cli_run_failed's exit status).
 *
 * Ownership: serve_drain_start borrows live and http until serve_drain_stop, which joins
 * the watcher and frees the object. Process-wide: one server per process. */
#ifndef TWIN_SERVE_DRAIN_H
#define TWIN_SERVE_DRAIN_H

#include <signal.h>
#include <stdint.h>

#include "cli/serve_http.h"
#include "engine/live.h"

typedef struct serve_drain serve_drain_t;

typedef struct {
    int sig;                  /* the first signal (0: none came) */
    int drained;              /* everything in flight finished within the grace period */
    int forced;               /* a second signal stopped it */
    int expired;              /* the grace period ended first */
    int64_t left;             /* requests still in flight when it stopped (forced/expired) */
    int64_t in_flight_at_signal;
    double drain_s;           /* seconds from the signal to the engine's stop */
} serve_drain_result_t;

/* Installs the handlers and starts the watcher. grace_s >= 0; quiet: no progress lines on
 * stderr. 0, or -1. */
int serve_drain_start(live_t *live, serve_http_t *http, double grace_s, int quiet,
                      serve_drain_t **out);
/* The engine's interrupt flag (engine_opts_t.interrupt): 0 until the engine must stop,
 * then the first signal's number. */
const volatile sig_atomic_t *serve_drain_flag(void);
/* The engine stopped: joins the watcher, puts the default actions back, fills *res (may be
 * NULL), frees d. */
void serve_drain_stop(serve_drain_t *d, serve_drain_result_t *res);

#endif
