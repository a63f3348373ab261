/* plot_replicas: a cluster run's per-replica load over time (replicas_SLUG): for each
 * replica, the requests it holds (arrived, not yet finished or rejected), from the
 * requests table's replica column (schema 6). Up to PLOT_REPLICA_LINES replicas: one step
 * function each, overlaid (a balanced router keeps the curves together; a skewed one shows
 * one replica's queue growing). More: a heatmap, replica by time bin, of each replica's
 * time-weighted mean held per bin, above the spread across replicas per bin (least, mean,
 * most held), so 16 or 64 replicas stay readable and an idle or overloaded one stands out
 * as a row. Runs of one replica draw nothing. */
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/plot_internal.h"

/* Each replica's arrivals (+1) and departures (-1) in time order; a request that never
 * ended (aborted without a finish) stays until the run's last event. A disaggregated
 * request (prefill_replica set) is held by its prefill replica from arrival until its KV
 * lands on the decode replica (first token + kv_transfer_s: its blocks stay on the prefill
 * side until then), and by the decode replica from then until it finishes. */
static const char SQL_EVENTS[] =
    "SELECT r, t, d FROM ("
    "  SELECT coalesce(prefill_replica, replica) AS r, arrival_s AS t, 1 AS d FROM requests"
    "    WHERE run_id = ?1 AND replica IS NOT NULL AND arrival_s IS NOT NULL"
    "  UNION ALL SELECT coalesce(prefill_replica, replica),"
    "    CASE WHEN prefill_replica IS NOT NULL AND kv_transfer_s IS NOT NULL"
    "      THEN first_token_s + kv_transfer_s"
    "      ELSE coalesce(finish_s, CASE WHEN status = 'rejected' THEN arrival_s END) END, -1"
    "    FROM requests WHERE run_id = ?1 AND replica IS NOT NULL AND arrival_s IS NOT NULL"
    "  UNION ALL SELECT replica, first_token_s + kv_transfer_s, 1 FROM requests"
    "    WHERE run_id = ?1 AND prefill_replica IS NOT NULL AND kv_transfer_s IS NOT NULL"
    "  UNION ALL SELECT replica, finish_s, -1 FROM requests WHERE run_id = ?1"
    "    AND prefill_replica IS NOT NULL AND kv_transfer_s IS NOT NULL) "
    "WHERE t IS NOT NULL ORDER BY r, t, d";
static const char SQL_N[] =
    "SELECT max(ifnull(max(replica), -1), ifnull(max(prefill_replica), -1)) + 1 FROM requests "
    "WHERE run_id = ?1";

enum { PLOT_REPLICA_LINES = 4 };

/* One change of a replica's load: after it, the replica holds `held` requests. */
typedef struct {
    int r;
    double t;
    long held;
} load_ev_t;

/* Run k's events, by replica then time, into *ev (malloc'd), and its replicas into *n. */
static int read_events(plot_t *p, size_t k, load_ev_t **ev, size_t *nev, int *n) {
    sqlite3_stmt *st = NULL;
    size_t cap = 0;
    int rc = -1, cur = -1, step;
    long held = 0;
    *ev = NULL, *nev = 0, *n = 0;
    if (sqlite3_prepare_v2(p->db, SQL_N, -1, &st, NULL) != SQLITE_OK) goto sqlerr;
    sqlite3_bind_int64(st, 1, p->runs[k].id);
    if (sqlite3_step(st) == SQLITE_ROW) *n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (*n <= 1) return 0;
    if (sqlite3_prepare_v2(p->db, SQL_EVENTS, -1, &st, NULL) != SQLITE_OK) goto sqlerr;
    sqlite3_bind_int64(st, 1, p->runs[k].id);
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int r = sqlite3_column_int(st, 0);
        if (r != cur) held = 0, cur = r;
        held += sqlite3_column_int(st, 2);
        if (*nev == cap) {
            cap = cap ? 2 * cap : 1024;
            load_ev_t *grown = realloc(*ev, cap * sizeof *grown);
            if (!grown) {
                plot_fail(p, "out of memory");
                goto done;
            }
            *ev = grown;
        }
        (*ev)[(*nev)++] = (load_ev_t){ r, sqlite3_column_double(st, 1), held };
    }
    if (step != SQLITE_DONE) goto sqlerr;
    rc = 0;
    goto done;
sqlerr:
    plot_fail(p, "per-replica load of run %s: %s", p->runs[k].name, sqlite3_errmsg(p->db));
done:
    sqlite3_finalize(st);
    if (rc) {
        free(*ev);
        *ev = NULL, *nev = 0;
    }
    return rc;
}

/* replicas_SLUG.dat: one gnuplot index (block) per replica, "t held" rows, starting at 0 0
 * (also for replicas without requests). */
static int write_dat(plot_t *p, const char *file, const load_ev_t *ev, size_t nev, int n) {
    FILE *f = plot_open(p, file);
    if (!f) return -1;
    size_t e = 0;
    for (int r = 0; r < n; r++) {
        fprintf(f, "%s# replica %d\n0 0\n", r ? "\n\n" : "", r);
        for (; e < nev && ev[e].r == r; e++) fprintf(f, "%.9g %ld\n", ev[e].t, ev[e].held);
    }
    return plot_close(p, f, file);
}

/* replicas_SLUG_bins.dat, block 0: "t replica mean_held" per bin and replica (the grid of
 * the heatmap, t the bin's centre); block 1: "t least mean most" across replicas per bin.
 * Bins: PLOT_MAX_BINS equal ones from 0 to the last event, *bin_s wide. */
static int write_bins(plot_t *p, const char *file, const load_ev_t *ev, size_t nev, int n,
                      double *bin_s) {
    double t1 = 0;
    for (size_t e = 0; e < nev; e++) t1 = fmax(t1, ev[e].t);
    if (!(t1 > 0)) t1 = 1;
    int nb = PLOT_MAX_BINS;
    double w = t1 / nb;
    double *acc = calloc((size_t)n * (size_t)nb, sizeof *acc);   /* [r][bin]: held x s */
    if (!acc) return plot_fail(p, "out of memory");
    /* replica r holds ev[e].held from ev[e].t to its next event (or t1) */
    for (size_t e = 0; e < nev; e++) {
        double a = ev[e].t, b = e + 1 < nev && ev[e + 1].r == ev[e].r ? ev[e + 1].t : t1;
        for (int bin = (int)(a / w); bin < nb && bin * w < b; bin++) {
            double lo = fmax(a, bin * w), hi = fmin(b, (bin + 1) * w);
            if (hi > lo && bin >= 0) acc[(size_t)ev[e].r * nb + bin] += ev[e].held * (hi - lo);
        }
    }
    FILE *f = plot_open(p, file);
    if (!f) {
        free(acc);
        return -1;
    }
    fprintf(f, "# requests held, time-weighted mean per %.6g s bin\n# t_s replica held\n", w);
    for (int r = 0; r < n; r++) {
        for (int bin = 0; bin < nb; bin++)
            fprintf(f, "%.9g %d %.4g\n", (bin + 0.5) * w, r, acc[(size_t)r * nb + bin] / w);
        fputc('\n', f);
    }
    fprintf(f, "\n# across the replicas\n# t_s least mean most\n");
    for (int bin = 0; bin < nb; bin++) {
        double lo = INFINITY, hi = 0, sum = 0;
        for (int r = 0; r < n; r++) {
            double v = acc[(size_t)r * nb + bin] / w;
            lo = fmin(lo, v), hi = fmax(hi, v), sum += v;
        }
        fprintf(f, "%.9g %.4g %.4g %.4g\n", (bin + 0.5) * w, lo, sum / n, hi);
    }
    free(acc);
    *bin_s = w;
    return plot_close(p, f, file);
}

/* "replica I", with its role when it is not mixed (the replicas table; a run recorded
 * without one, e.g. upgraded from schema 5, has none). */
static void replica_title(plot_t *p, size_t k, int i, char *out, size_t len) {
    sqlite3_stmt *st = NULL;
    const char *role = NULL;
    if (sqlite3_prepare_v2(p->db, "SELECT role FROM replicas WHERE run_id = ?1 AND replica = ?2",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, p->runs[k].id);
        sqlite3_bind_int(st, 2, i);
        if (sqlite3_step(st) == SQLITE_ROW) role = (const char *)sqlite3_column_text(st, 0);
    }
    if (role && strcmp(role, "mixed") != 0) snprintf(out, len, "replica %d (%s)", i, role);
    else snprintf(out, len, "replica %d", i);
    sqlite3_finalize(st);
}

/* Up to PLOT_REPLICA_LINES replicas: one step curve each. */
static void script_lines(plot_t *p, size_t k, FILE *f, const char *dat, int n, int h,
                         const plot_key_t *key) {
    char title[48];
    fprintf(f, "set xlabel \"time since the run's start (s)\"\n"
               "set ylabel \"requests held by the replica\"\nset yrange [0:*]\n"
               "set offsets 0, 0, graph 0.05, 0\n");
    plot_gp_key(f, key, "left top", h);
    fprintf(f, "plot \\\n");
    for (int i = 0; i < n; i++) {
        replica_title(p, k, i, title, sizeof title);
        fprintf(f, "%s    \"%s\" index %d using 1:2 with steps lw 1.5", i ? ", \\\n" : "", dat, i);
        plot_gp_style(f, (size_t)i);
        fprintf(f, " title ");
        plot_gp_str(f, title);
    }
    fprintf(f, "\n");
}

/* More: the heatmap (replica by time) above, the spread across replicas below. */
static void script_heat(plot_t *p, size_t k, FILE *f, const char *bins, int n, double bin_s) {
    char title[48];
    fprintf(f, "set multiplot layout 2,1 margins 0.08,0.85,0.09,0.9 spacing 0,0.05\n"
               "set xrange [0:%.9g]\nset format x \"\"\n"
               "set ylabel \"replica\"\nset yrange [-0.5:%d.5]\n"
               "set cblabel \"requests held (mean per %.3g s)\"\nset cbrange [0:*]\n"
               "# viridis: perceptually even, readable in grey\n"
               "set palette defined (0 \"#440154\", 0.25 \"#3b528b\", 0.5 \"#21918c\", "
               "0.75 \"#5ec962\", 1 \"#fde725\")\n"
               "set colorbox vertical user origin screen 0.865, screen 0.52 size screen 0.018, "
               "screen 0.38\nunset key\nset grid noxtics noytics\n",
            bin_s * PLOT_MAX_BINS, n - 1, bin_s);
    /* every replica labelled up to 32 of them (with its role when not mixed) */
    if (n <= 32) {
        fprintf(f, "set ytics (");
        for (int i = 0; i < n; i++) {
            replica_title(p, k, i, title, sizeof title);
            fprintf(f, "%s", i ? ", " : "");
            plot_gp_str(f, title + strlen("replica "));
            fprintf(f, " %d", i);
        }
        fprintf(f, ") font \",%d\"\n", n > 16 ? 7 : 9);
    }
    fprintf(f, "plot \"%s\" index 0 using 1:2:3 with image\n", bins);
    fprintf(f, "unset colorbox\nset grid xtics ytics\nset ytics autofreq font \",10\"\n"
               "set format x \"%% h\"\nset xlabel \"time since the run's start (s)\"\n"
               "set ylabel \"requests held\\nacross the %d replicas\"\nset yrange [0:*]\n"
               "set offsets 0, 0, graph 0.05, 0\n"
               "set key at screen 0.855, graph 1 left top Left reverse\n"
               "plot \"%s\" index 1 using 1:2:4 with filledcurves lc rgb \"#c6dbef\" "
               "title \"least to most\", \\\n"
               "    \"%s\" index 1 using 1:3 with lines lw 2 lc rgb \"#08519c\" "
               "title \"mean\"\nunset multiplot\n", n, bins, bins);
}

static int plot_one(plot_t *p, size_t k) {
    char dat[PLOT_FIG_LEN + 8], bins[PLOT_FIG_LEN + 16], fig[PLOT_FIG_LEN],
        gp[PLOT_FIG_LEN + 8];
    load_ev_t *ev = NULL;
    size_t nev;
    int n, rc = -1;
    double bin_s = 0;
    FILE *f = NULL;
    snprintf(fig, sizeof fig, "replicas_%s", p->runs[k].slug);
    snprintf(dat, sizeof dat, "%s.dat", fig);
    snprintf(bins, sizeof bins, "%s_bins.dat", fig);
    snprintf(gp, sizeof gp, "%s.gp", fig);
    if (read_events(p, k, &ev, &nev, &n)) return -1;
    if (n <= 1) return 0;
    int heat = n > PLOT_REPLICA_LINES;
    if (write_dat(p, dat, ev, nev, n) || (heat && write_bins(p, bins, ev, nev, n, &bin_s)))
        goto done;
    plot_key_t key = plot_key_fit(heat ? 0 : (size_t)n, 11, 1000, 8);
    int h = heat ? 760 : 520 + key.px, w = heat ? 1100 : 1000;
    if (!(f = plot_open(p, gp))) goto done;
    plot_gp_header(f, fig, w, h);
    fprintf(f, "set title \"%d replicas: requests each holds (arrived, not finished) over "
               "time\\n\" . ", n);
    plot_gp_str(f, p->runs[k].name);
    fprintf(f, " noenhanced\n");
    if (heat) {
        /* the multiplot's own title: the first panel's would sit inside the layout */
        fprintf(f, "unset title\nset label 1 \"%d replicas: requests each holds (arrived, "
                   "not finished) over time\\n\" . ", n);
        plot_gp_str(f, p->runs[k].name);
        fprintf(f, " at screen 0.5, screen 0.965 center\n");
        script_heat(p, k, f, bins, n, bin_s);
    } else {
        script_lines(p, k, f, dat, n, h, &key);
    }
    rc = plot_close(p, f, gp);
    f = NULL;
    if (rc == 0) rc = plot_add_fig(p, fig);
done:
    if (f) fclose(f);
    free(ev);
    return rc;
}

int plot_replicas(plot_t *p) {
    for (size_t i = 0; i < p->n; i++)
        if (plot_one(p, i)) return -1;
    return 0;
}
