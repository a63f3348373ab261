/* cmd_profile: `twinserve profile`, timed forward passes of the engine over a grid of batch
 * shapes, written as a profile file (sim/profile.h; the grid: engine/profile.h) that
 * `twinserve calibrate` fits the simulator's cost models to.
 *
 * The file is written under a temporary name in the output's directory, created before the
 * grid runs (so an unwritable directory fails in a second, not after minutes), and renamed
 * at the end: a failed or interrupted profile never leaves a truncated file under the
 * requested name (SIGINT, SIGTERM and SIGHUP remove the temporary file, then end the
 * process as the signal would). */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_signal.h"
#include "cli/cli_util.h"
#include "engine/profile.h"

#define DEFAULT_POLICY "policies/continuous.lua"

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve profile --model FILE|dummy:PRESET --out FILE [options]\n"
        "\n"
        "Times real forward passes of the engine over a grid of batch shapes (decodes at\n"
        "several contexts, prompt chunks with and without prior context, mixed steps) and\n"
        "writes a profile: a plain CSV with a '# key = value' header block (model shape,\n"
        "backend, the device's roofs before and after) that `twinserve calibrate` reads.\n"
        "docs/fidelity.md documents the format. Each point gets one warm-up pass, then the\n"
        "reps run in round robin; a row holds the point's features (sim/cost.h) and the\n"
        "median, mean, min, max, p10 and p90 of its passes. A host phase then replays a\n"
        "saturated trace through the engine to measure the CPU-side time before each pass\n"
        "(kind=host rows).\n"
        "\n"
        "  --model FILE|dummy:P  llama2.c .bin, GGUF, or seeded random weights of preset P\n"
        "  --out FILE            the profile to write\n"
        "  --backend NAME        cpu (default) or cuda\n"
        "  --dtype T             GPU weight type: bf16|f16|f32\n"
        "  --threads N           CPU threads (default 0: all cores)\n"
        "  --kv-type f32|f16     CPU: the KV cache's elements (f32); profile the engine as\n"
        "                        it will run (written as the kv_type header line)\n"
        "  --reps N              timed passes per point (5; points whose warm-up takes over\n"
        "                        %.2f s get fewer, at least %d: see the reps column)\n"
        "  --max-seqs N          the largest decode batch (64, the engine's default)\n"
        "  --max-tokens N        the largest step in tokens (2048, the engine's default)\n"
        "  --grid default|quick  the full grid (minutes), or a few points (tests)\n"
        "  --seed S              dummy weights, the host phase's trace (0)\n"
        "  --host-policy FILE    the host phase's policy (default: %s in the\n"
        "                        current directory, else beside the binary)\n"
        "  --no-host             skip the host phase\n"
        "  -q, --quiet           no progress line or summary\n"
        "\n"
        "Exit status: 0 written, 1 the profile failed (nothing written under --out),\n"
        "2 usage error.\n", PROFILE_BIG_S, PROFILE_MIN_REPS, DEFAULT_POLICY);
}

enum {
    O_MODEL = 256, O_OUT, O_BACKEND, O_DTYPE, O_THREADS, O_REPS, O_MAXSEQ, O_MAXTOK, O_GRID,
    O_SEED, O_HOSTPOL, O_NOHOST, O_KVTYPE, O_HELP
};

static const struct option opts[] = {
    { "model", 1, 0, O_MODEL }, { "out", 1, 0, O_OUT }, { "backend", 1, 0, O_BACKEND },
    { "dtype", 1, 0, O_DTYPE }, { "threads", 1, 0, O_THREADS }, { "reps", 1, 0, O_REPS },
    { "max-seqs", 1, 0, O_MAXSEQ }, { "max-tokens", 1, 0, O_MAXTOK }, { "grid", 1, 0, O_GRID },
    { "seed", 1, 0, O_SEED }, { "host-policy", 1, 0, O_HOSTPOL }, { "no-host", 0, 0, O_NOHOST },
    { "kv-type", 1, 0, O_KVTYPE },
    { "quiet", 0, 0, 'q' }, { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
};

/* One option; 1 applied, 0 a bad value. */
static int apply(int c, const char *a, profile_opts_t *o, const char **out) {
    switch (c) {
    case O_MODEL: o->model = a; return 1;
    case O_OUT: *out = a; return *a != '\0';
    case O_BACKEND: o->backend = a; return !strcmp(a, "cpu") || !strcmp(a, "cuda");
    case O_DTYPE: o->dtype = a; return !strcmp(a, "bf16") || !strcmp(a, "f16") || !strcmp(a, "f32");
    case O_THREADS: case O_REPS: {
        int32_t n;
        if (!cli_int(a, c == O_REPS, c == O_REPS ? 1000 : 4096, &n)) return 0;
        *(c == O_REPS ? &o->reps : &o->n_threads) = n;
        return 1;
    }
    case O_MAXSEQ: return cli_int(a, 1, 1 << 16, &o->max_seqs);
    case O_MAXTOK: return cli_int(a, 1, 1 << 20, &o->max_tokens);
    case O_GRID:
        if (!strcmp(a, "default")) o->grid = PROFILE_GRID_DEFAULT;
        else if (!strcmp(a, "quick")) o->grid = PROFILE_GRID_QUICK;
        else return 0;
        return 1;
    case O_SEED: return cli_u64(a, &o->seed);
    case O_HOSTPOL: o->host_policy = a; return *a != '\0';
    case O_KVTYPE: return cli_kv_type_ok(o->kv_type = a);
    }
    return 0;
}

static const char *const expect[] = {
    [O_MODEL - O_MODEL] = "a model file or dummy:PRESET", [O_OUT - O_MODEL] = "a file name",
    [O_BACKEND - O_MODEL] = "cpu or cuda", [O_DTYPE - O_MODEL] = "bf16, f16 or f32",
    [O_THREADS - O_MODEL] = "an integer 0..4096", [O_REPS - O_MODEL] = "an integer 1..1000",
    [O_MAXSEQ - O_MODEL] = "an integer 1..65536", [O_MAXTOK - O_MODEL] = "an integer 1..1048576",
    [O_GRID - O_MODEL] = "default or quick", [O_SEED - O_MODEL] = "a non-negative integer",
    [O_HOSTPOL - O_MODEL] = "a policy file", [O_KVTYPE - O_MODEL] = "f32 or f16",
};

/* ---- the temporary output ------------------------------------------------------------- */

static char tmp_path[PATH_MAX + 32];
static volatile sig_atomic_t tmp_live;

static void on_signal(int sig) {
    if (tmp_live) unlink(tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Creates OUT.tmp-XXXXXX beside out; the fd, or -1 with a message. */
static int open_tmp(const char *out) {
    if (snprintf(tmp_path, sizeof tmp_path, "%s.tmp-XXXXXX", out) >= (int)sizeof tmp_path) {
        fprintf(stderr, "twinserve profile: --out %s: path too long\n", out);
        return -1;
    }
    int fd = mkstemp(tmp_path);
    if (fd < 0) {
        fprintf(stderr, "twinserve profile: --out %s: cannot create a file in its directory: "
                "%s\n", out, strerror(errno));
        return -1;
    }
    mode_t mask = umask(0);   /* mkstemp's 0600 would make the profile private */
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    tmp_live = 1;
    cli_signal_guard(on_signal);
    return fd;
}

static void drop_tmp(void) {
    if (!tmp_live) return;
    cli_signal_guard(SIG_DFL);
    unlink(tmp_path);
    tmp_live = 0;
}

/* ---- policy and command line ---------------------------------------------------------- */

/* The host phase's default policy: DEFAULT_POLICY here, else beside the binary. 1 found (in
 * buf), 0 not (buf says where it looked). */
static int find_policy(char *buf, size_t len) {
    if (access(DEFAULT_POLICY, R_OK) == 0) {
        snprintf(buf, len, "%s", DEFAULT_POLICY);
        return 1;
    }
    char exe[PATH_MAX], cand[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(buf, len, "%s not found in the current directory", DEFAULT_POLICY);
        return 0;
    }
    exe[n] = '\0';
    snprintf(cand, sizeof cand, "%s/../%s", dirname(exe), DEFAULT_POLICY);
    if (access(cand, R_OK) == 0) {
        snprintf(buf, len, "%s", cand);
        return 1;
    }
    snprintf(buf, len, "%s not found in the current directory nor at %.*s", DEFAULT_POLICY,
             (int)(len > 128 ? len - 128 : 0), cand);
    return 0;
}

/* argv as one shell-like line: words with odd characters in single quotes. */
static void command_line(int argc, char **argv, char *buf, size_t len) {
    size_t u = (size_t)snprintf(buf, len, "twinserve");
    for (int i = 0; i < argc && u < len; i++) {
        const char *a = argv[i];
        int plain = *a != '\0';
        for (const char *c = a; *c; c++)
            if (!isalnum((unsigned char)*c) && !strchr("-_./:=,+@", *c)) plain = 0;
        u += (size_t)snprintf(buf + u, len - u, plain ? " %s" : " '%s'", a);
    }
}

/* ---- summary -------------------------------------------------------------------------- */

static void summary(const profile_t *p, const profile_stats_t *st, const char *out, long bytes) {
    int n_dec = 0, n_pf = 0, n_mix = 0;
    for (size_t i = 0; i < p->n; i++) {
        n_dec += !strcmp(p->pts[i].kind, "decode");
        n_pf += !strcmp(p->pts[i].kind, "prefill");
        n_mix += !strcmp(p->pts[i].kind, "mixed");
    }
    printf("profile of %s on %s (%s weights, %d threads)\n", p->model, p->backend,
           p->weight_type, p->threads);
    printf("  %d points timed (decode %d, prefill %d, mixed %d), %d skipped (KV over budget); "
           "%d warm-up + %d reps each\n", st->points, n_dec, n_pf, n_mix, st->skipped,
           p->warmup, p->reps);
    if (st->host_rows)
        printf("  host: %d rows (pass sizes) from %lld replay steps\n", st->host_rows,
               (long long)st->host_steps);
    else
        printf("  host: not measured: %s\n", p->host_note);
    printf("  time: grid %.1f s, host phase %.1f s; KV pool %.2f GB\n", st->grid_s, st->host_s,
           st->kv_gb);
    printf("  roofs (before -> after): memory %.1f -> %.1f GB/s, GEMM %.1f -> %.1f GFLOP/s\n",
           p->mem_bw / 1e9, p->mem_bw_end / 1e9, p->gemm_flops / 1e9, p->gemm_flops_end / 1e9);
    printf("wrote %s (%zu rows, %.1f KB)\n", out, p->n, bytes / 1024.0);
}

/* ---- the command ---------------------------------------------------------------------- */

int cmd_profile(int argc, char **argv) {
    profile_opts_t o;
    profile_opts_defaults(&o);
    o.version = TWIN_VERSION;
    const char *out = NULL;
    int quiet = 0, no_host = 0, c, rc = 2, fd = -1;
    char policy[PATH_MAX + 128], command[4096], err[4096];
    profile_t p;
    profile_stats_t st;
    profile_init(&p);
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "q", opts, NULL)) != -1) {
        if (c == 'q') {
            quiet = 1;
        } else if (c == O_NOHOST) {
            no_host = 1;
        } else if (c == O_HELP) {
            usage(stdout);
            return 0;
        } else if (c == '?' || c == ':') {
            if (optopt >= O_MODEL && optopt < O_NOHOST)
                fprintf(stderr, "twinserve profile: --%s: missing value (%s)\n",
                        opts[optopt - O_MODEL].name, expect[optopt - O_MODEL]);
            else
                fprintf(stderr, "twinserve profile: unknown option '%s' (see --help)\n",
                        argv[optind - 1]);
            return 2;
        } else if (!apply(c, optarg, &o, &out)) {
            fprintf(stderr, "twinserve profile: --%s: bad value '%s' (%s)\n",
                    opts[c - O_MODEL].name, optarg, expect[c - O_MODEL]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "twinserve profile: unexpected argument '%s' (see --help)\n",
                argv[optind]);
        return 2;
    }
    if (!o.model || !out) {
        fprintf(stderr, "twinserve profile: %s is required (see --help)\n",
                !o.model ? "--model FILE|dummy:PRESET" : "--out FILE");
        return 2;
    }
    if (no_host && o.host_policy) {
        fprintf(stderr, "twinserve profile: --no-host and --host-policy contradict each other\n");
        return 2;
    }
    rc = 1;
    if (no_host) {
        o.host_skip = "--no-host";
    } else if (o.host_policy) {
        if (access(o.host_policy, R_OK) != 0) {
            fprintf(stderr, "twinserve profile: --host-policy %s: %s\n", o.host_policy,
                    strerror(errno));
            goto done;
        }
    } else if (find_policy(policy, sizeof policy)) {
        o.host_policy = policy;
    } else {
        fprintf(stderr, "twinserve profile: note: no host phase: %s (give --host-policy "
                "FILE)\n", policy);
        o.host_skip = policy;
    }
    command_line(argc, argv, command, sizeof command);
    if ((fd = open_tmp(out)) < 0) goto done;
    o.progress = !quiet && isatty(2);
    o.notes = stderr;
    if (profile_run(&o, &p, &st, err, sizeof err)) {
        fprintf(stderr, "twinserve profile: %s\n", err);
        goto done;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        fprintf(stderr, "twinserve profile: --out %s: %s\n", out, strerror(errno));
        goto done;
    }
    fd = -1;
    int werr = profile_write_header(f, &p, command);
    for (size_t i = 0; i < p.n && !werr; i++) werr = profile_write_point(f, &p.pts[i]);
    long bytes = ftell(f);
    werr |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    werr |= fclose(f) != 0;
    if (werr) {
        fprintf(stderr, "twinserve profile: writing %s failed: %s\n", out, strerror(errno));
        goto done;
    }
    if (rename(tmp_path, out) != 0) {
        fprintf(stderr, "twinserve profile: --out %s: cannot rename %s to it: %s\n", out,
                tmp_path, strerror(errno));
        goto done;
    }
    tmp_live = 0;
    cli_signal_guard(SIG_DFL);
    if (!quiet) summary(&p, &st, out, bytes);
    rc = 0;
done:
    if (fd >= 0) close(fd);
    drop_tmp();
    profile_free(&p);
    return rc;
}
