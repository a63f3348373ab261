/* cli_signal: SIGINT, SIGTERM and SIGHUP for the commands that run for long (sim, engine,
 * sweep, explain --db, profile), in one place so that every command treats them alike.
 *
 * Two ways to take a signal:
 *  - cli_signal_watch: the first signal only sets cli_signal_caught (its number), which the
 *    run loops poll at a step boundary (sim_opts_t/engine_opts_t.interrupt) so that the run
 *    ends cleanly: recorded as failed "interrupted by SIGINT at t=...", unfinished requests
 *    aborted, the writer flushed; the command then exits with cli_signal_exit_code (128 +
 *    the signal, as a shell reports a process the signal killed). A second signal while
 *    the first is being handled takes the default action at once (the database stays
 *    valid: SQLite's transactions roll back what was not committed).
 *  - cli_signal_guard: a handler of the caller's (profile removes its temporary file and
 *    dies by the signal), or SIG_DFL to undo either.
 *
 * Invariants: a signal the parent had ignored (nohup, a shell's background job) stays
 * ignored; the handlers only touch a volatile sig_atomic_t and call async-signal-safe
 * functions (signal, raise).
 *
 * Ownership: process-wide state; not for threads other than the main one to install. */
#ifndef TWIN_CLI_SIGNAL_H
#define TWIN_CLI_SIGNAL_H

#include <signal.h>

/* 0 until the first watched signal arrives; then that signal's number. */
extern volatile sig_atomic_t cli_signal_caught;

/* Installs h (a handler, or SIG_DFL) for SIGINT, SIGTERM and SIGHUP, except where the
 * signal is ignored. */
void cli_signal_guard(void (*h)(int));

/* Clears cli_signal_caught and installs the flag-setting handler (above). */
void cli_signal_watch(void);

/* Back to the default actions (the flag keeps its value). */
void cli_signal_unwatch(void);

/* The exit status for a run ended by signal sig: 128 + sig (130 SIGINT, 143 SIGTERM). */
int cli_signal_exit_code(int sig);

#endif
