/* sweep_jobs: `sweep --emit-jobs`, the sweep's points written as `twinserve sim` commands
 * for GNU parallel and Slurm (sweep.h, sweep_emit_jobs). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analysis/sweep.h"
#include "analysis/sweep_internal.h"
#include "traces/recorder.h"

/* s as one shell word: bare when it holds only characters no shell treats specially,
 * else in single quotes ('\'' for a quote). */
static void shell_word(FILE *f, const char *s) {
    const char *safe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=,:@+-";
    if (*s && strspn(s, safe) == strlen(s)) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputs("'\\''", f);
        else fputc(*s, f);
    }
    fputc('\'', f);
}

static int make_dir(const char *path, char *err, size_t errlen) {
    if (mkdir(path, 0777) == 0 || errno == EEXIST) return 0;
    snprintf(err, errlen, "--emit-jobs: cannot create %s: %s", path, strerror(errno));
    return -1;
}

static FILE *open_out(const char *dir, const char *name, char *path, size_t len, char *err,
                      size_t errlen) {
    snprintf(path, len, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) snprintf(err, errlen, "--emit-jobs: cannot write %s: %s", path, strerror(errno));
    return f;
}

/* Task i of the array runs line i + 1 of jobs.txt; its output goes to log/. */
static void write_slurm(FILE *f, const char *dir, const char *prefix, int n) {
    char name[64];
    size_t k = 0;
    for (const char *c = prefix; *c && k + 1 < sizeof name; c++)
        name[k++] = strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-",
                           *c) ? *c : '_';
    name[k] = 0;
    /* sbatch splits a directive's line at blanks unless quoted. */
    const char *q = strpbrk(dir, " \t") ? "\"" : "";
    fprintf(f, "#!/bin/bash\n"
               "# twinserve sweep %s: %d jobs, one per task of this Slurm job array\n"
               "# (written by `twinserve sweep --emit-jobs`; submit with: sbatch %s/slurm.sh).\n"
               "# Task i runs line i + 1 of jobs.txt. Add #SBATCH lines for your cluster\n"
               "# (--partition, --time, --mem) next to these, before `set`; in --output %%A\n"
               "# is the array job and %%a the task.\n"
               "#SBATCH --job-name=%s\n"
               "#SBATCH --array=0-%d\n"
               "#SBATCH --ntasks=1\n"
               "#SBATCH --cpus-per-task=1\n"
               "#SBATCH --output=%s%s/log/%%A_%%a.out%s\n"
               "set -eu\n"
               "jobs=", prefix, n, dir, name, n - 1, q, dir, q);
    shell_word(f, dir);
    fprintf(f, "/jobs.txt\n"
               "task=${SLURM_ARRAY_TASK_ID:?not in a Slurm array job: submit with sbatch, or "
               "set SLURM_ARRAY_TASK_ID=0..%d}\n"
               "line=$(sed -n \"$((task + 1))p\" \"$jobs\")\n"
               "if [ -z \"$line\" ]; then\n"
               "    echo \"twinserve sweep job: $jobs has no line $((task + 1)) (task $task)\" >&2\n"
               "    exit 2\n"
               "fi\n"
               "echo \"task $task: $line\"\n"
               "exec bash -c \"$line\"\n", n - 1);
}

/* run.txt: the exact commands, with this sweep's paths. */
static void write_howto(FILE *f, const sweep_t *sw, const sweep_jobs_t *jobs, const char *dir,
                        const char *prefix, int nrates, int n) {
    const char *db = sw->sim.db_path, *bin = jobs->bin;
    fprintf(f, "sweep %s: %d job%s (%d rate%s", prefix, n, n == 1 ? "" : "s", nrates,
            nrates == 1 ? "" : "s");
    if (sw->n_seeds > 0) fprintf(f, " x %d seeds", sw->n_seeds);
    fprintf(f, "), one `twinserve sim` command a line of\n"
               "%s/jobs.txt, each writing its own database %s/out/pK.db.\n"
               "A machine with the same twinserve binary and files at the same paths runs any.\n\n"
               "Run them, one of:\n"
               "  here, 4 at a time (GNU parallel):\n"
               "    parallel -j 4 --joblog %s/joblog < %s/jobs.txt\n"
               "  over ssh on the hosts in HOSTS (one a line, e.g. 8/user@node1 for 8 jobs there;\n"
               "  %s must be on a filesystem they share, or copy out/ back before merging):\n"
               "    parallel --sshloginfile HOSTS --joblog %s/joblog < %s/jobs.txt\n"
               "  Slurm, a job array of %d tasks (logs in %s/log/):\n"
               "    sbatch %s/slurm.sh\n"
               "  Failed jobs again (GNU parallel):\n"
               "    parallel --resume-failed --joblog %s/joblog < %s/jobs.txt\n\n"
               "Then merge the results (in this order, the run ids a sweep here would give):\n"
               "    %s merge %s %s/out/*.db\n"
               "and read them as any sweep's:\n"
               "    %s runs %s\n"
               "    %s plot %s --runs %s --out plots/\n",
            dir, dir, dir, dir, dir, dir, dir, n, dir, dir, dir, dir, bin, db, dir, bin, db, bin,
            db, prefix);
    if (sw->n_seeds > 0)
        fprintf(f, "    %s compare %s --runs %s@Rrps,%s@R2rps   (each rate an experiment)\n",
                bin, db, prefix, prefix);
}

/* The first point's configuration on the trace's first two requests, in a temporary
 * database: a setup the jobs could not run (a bad --set, a missing cost file, a policy that
 * does not load) is refused here, not found N times on the cluster. -1 with its message. */
static int trial_run(const sweep_t *sw, const char *prefix, const sweep_point_t *p, char *err,
                     size_t errlen) {
    const char *tmp = getenv("TMPDIR");
    char dir[1024], db[1100], extra[768];
    snprintf(dir, sizeof dir, "%s/twinjobs-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        snprintf(err, errlen, "cannot create a temporary folder: %s", strerror(errno));
        return -1;
    }
    snprintf(db, sizeof db, "%s/trial.db", dir);
    sim_opts_t o = sw->sim;
    sweep_point_extra(sw, prefix, p, extra, sizeof extra);
    o.db_path = db;
    o.run_name = p->name;
    o.seed = sweep_point_seed(sw, p);
    o.trace_opts.rate_scale = p->scale;
    o.trace_opts.limit = o.trace_opts.limit > 0 && o.trace_opts.limit < 2 ? o.trace_opts.limit : 2;
    o.config_extra = extra;
    o.progress = 0;
    sim_result_t res;
    char why[4096];
    int rc = sim_run(&o, &res, why, sizeof why);
    rec_remove(db);
    rmdir(dir);
    if (rc != 0 && res.setup_failed) {
        snprintf(err, errlen, "--emit-jobs: the jobs could not run: %s", why);
        return -1;
    }
    return 0;
}

int sweep_emit_jobs(const sweep_t *sw, const sweep_jobs_t *jobs, const char *prefix,
                    const double *rates, int nrates, FILE *info, char *err, size_t errlen) {
    int reps = sw->n_seeds > 0 ? sw->n_seeds : 1, n = nrates * reps, rc = -1;
    sweep_point_t *pts = calloc((size_t)n, sizeof *pts);
    char path[4200], extra[768], *dir = NULL;
    FILE *f = NULL;
    if (!pts) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (sweep_init_points(sw, prefix, rates, nrates, pts, err, errlen) ||
        trial_run(sw, prefix, &pts[0], err, errlen) || make_dir(jobs->dir, err, errlen))
        goto done;
    if (!(dir = realpath(jobs->dir, NULL))) {
        snprintf(err, errlen, "--emit-jobs: %s: %s", jobs->dir, strerror(errno));
        goto done;
    }
    snprintf(path, sizeof path, "%s/jobs.txt", dir);
    if (access(path, F_OK) == 0) {
        snprintf(err, errlen, "--emit-jobs: %s already holds a jobs.txt (a sweep emitted "
                 "before): give an empty or new folder", dir);
        goto done;
    }
    snprintf(path, sizeof path, "%s/out", dir);
    if (make_dir(path, err, errlen)) goto done;
    snprintf(path, sizeof path, "%s/log", dir);
    if (make_dir(path, err, errlen)) goto done;
    int width = snprintf(NULL, 0, "%d", n - 1);
    if (width < 3) width = 3;

    if (!(f = open_out(dir, "slurm.sh", path, sizeof path, err, errlen))) goto done;
    write_slurm(f, dir, prefix, n);
    if (fclose(f) != 0 || chmod(path, 0755) != 0) {
        f = NULL;
        snprintf(err, errlen, "--emit-jobs: writing %s: %s", path, strerror(errno));
        goto done;
    }
    if (!(f = open_out(dir, "run.txt", path, sizeof path, err, errlen))) goto done;
    write_howto(f, sw, jobs, dir, prefix, nrates, n);
    if (fclose(f) != 0) {
        f = NULL;
        snprintf(err, errlen, "--emit-jobs: writing %s: %s", path, strerror(errno));
        goto done;
    }
    /* jobs.txt last: its presence says the folder is complete. */
    if (!(f = open_out(dir, "jobs.txt", path, sizeof path, err, errlen))) goto done;
    for (int i = 0; i < n; i++) {
        const sweep_point_t *p = &pts[i];
        char db[4200];
        snprintf(db, sizeof db, "%s/out/p%0*d.db", dir, width, i);
        sweep_point_extra(sw, prefix, p, extra, sizeof extra);
        shell_word(f, jobs->bin);
        fputs(" sim --trace ", f);
        shell_word(f, sw->sim.trace_path);
        fputs(" --policy ", f);
        shell_word(f, sw->sim.policy_path);
        fputs(" --db ", f);
        shell_word(f, db);
        fputs(" --name ", f);
        shell_word(f, p->name);
        /* %.17g: the job replays at the scale a sweep child would, bit for bit. */
        fprintf(f, " --rate-scale %.17g --seed %llu --config-json ", p->scale,
                (unsigned long long)sweep_point_seed(sw, p));
        shell_word(f, extra);
        for (int k = 0; k < jobs->n_args; k++) {
            fputc(' ', f);
            shell_word(f, jobs->args[k]);
        }
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        f = NULL;
        snprintf(err, errlen, "--emit-jobs: writing %s: %s", path, strerror(errno));
        goto done;
    }
    f = NULL;
    if (info) {
        fputc('\n', info);
        write_howto(info, sw, jobs, dir, prefix, nrates, n);
    }
    rc = 0;
done:
    if (f) fclose(f);
    free(dir);
    free(pts);
    return rc;
}
