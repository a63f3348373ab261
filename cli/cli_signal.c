/* cli_signal: see cli_signal.h. */
#include "cli/cli_signal.h"

#include <string.h>

volatile sig_atomic_t cli_signal_caught;

static void on_signal(int sig) {
    if (cli_signal_caught) { /* the second one: the user does not want to wait */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    cli_signal_caught = sig;
}

void cli_signal_guard(void (*h)(int)) {
    static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = h;
        /* a sweep's parent waiting for its children, a trace being read: carry on */
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

void cli_signal_watch(void) {
    cli_signal_caught = 0;
    cli_signal_guard(on_signal);
}

void cli_signal_unwatch(void) { cli_signal_guard(SIG_DFL); }

int cli_signal_exit_code(int sig) { return 128 + sig; }
