/* sweep_band: --band for sweep and capacity (contract: sweep_band.h). */
#include "analysis/sweep_band.h"

#include <math.h>
#include <string.h>

#include "analysis/band.h"

int sweep_band_width(const sweep_t *sw, const sweep_point_t *pts, size_t n, sweep_band_t *b,
                     char *err, size_t errlen) {
    double stated = NAN;
    char src[200] = "";
    for (size_t i = 0; i < n && !(sw->sim.band_err > 0); i++) {
        if (pts[i].run_id < 0) continue;
        if (band_width_of_run(sw->sim.db_path, pts[i].run_id, &stated, src, sizeof src, err,
                              errlen) != 0)
            return -1;
        break;
    }
    return band_pick(sw->sim.band_err, stated, src, &b->err, b->src, sizeof b->src, err, errlen);
}

/* The side's sweep: the nominal one with its step times scaled and its own name. */
static void side_sweep(const sweep_t *sw, const char *prefix, int k, sweep_band_t *b,
                       sweep_t *out) {
    *out = *sw;
    out->sim.cost_scale = sw->sim.cost_scale * (k ? 1 + b->err : 1 - b->err);
    out->sim.band = 0;
    snprintf(b->prefix[k], sizeof b->prefix[k], "%.180s-band-%s", prefix, k ? "hi" : "lo");
    out->prefix = b->prefix[k];
}

int sweep_band_rates(const sweep_t *sw, const char *prefix, const double *rates, int n,
                     sweep_band_t *b, sweep_point_t *side[2], char *err, size_t errlen) {
    for (int k = 0; k < 2; k++) {
        sweep_t s;
        char name[200];
        side_sweep(sw, prefix, k, b, &s);
        if (sweep_prefix(&s, name, sizeof name, err, errlen) != 0 ||
            sweep_run(&s, name, rates, n, side[k], err, errlen) != 0)
            return -1;
    }
    return 0;
}

int sweep_band_capacity(const sweep_t *sw, const char *prefix, double lo, double hi, double tol,
                        double target, sweep_band_t *b, sweep_capacity_t side[2], char *err,
                        size_t errlen) {
    for (int k = 0; k < 2; k++) {
        sweep_t s;
        char name[200];
        side_sweep(sw, prefix, k, b, &s);
        if (sweep_prefix(&s, name, sizeof name, err, errlen) != 0 ||
            sweep_capacity(&s, name, lo, hi, tol, target, &side[k], err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* "x (a .. b)" of three values, in ms, or "-" where any is missing. */
static void cell(FILE *f, double nom, double a, double c, double scale, const char *fmt) {
    char buf[64];
    if (!isfinite(nom) || !isfinite(a) || !isfinite(c)) {
        fprintf(f, " %24s", "-");
        return;
    }
    double lo = fmin(nom, fmin(a, c)), hi = fmax(nom, fmax(a, c));
    snprintf(buf, sizeof buf, fmt, nom * scale, lo * scale, hi * scale);
    fprintf(f, " %24s", buf);
}

void sweep_band_print_rates(FILE *f, const sweep_point_t *nom, sweep_point_t *const side[2],
                            size_t n, int has_slo, const sweep_band_t *b) {
    fprintf(f, "\nband: every step's time -%.1f%% .. +%.1f%% (%s); sweeps %s, %s\n",
            100 * b->err, 100 * b->err, b->src, b->prefix[0], b->prefix[1]);
    fprintf(f, "%10s", "rate_rps");
    if (has_slo) fprintf(f, " %24s", "attain% (band)");
    fprintf(f, " %24s %24s %24s\n", "ttft_p50 ms (band)", "ttft_p99 ms (band)",
            "e2e_mean ms (band)");
    for (size_t i = 0; i < n; i++) {
        const sweep_point_t *p = &nom[i], *l = &side[0][i], *h = &side[1][i];
        fprintf(f, "%10.4g", p->rate);
        if (!p->ok || !l->ok || !h->ok) {
            fprintf(f, "  (a run of this rate failed: %s)\n", !p->ok ? p->name
                                                              : !l->ok ? l->name : h->name);
            continue;
        }
        if (has_slo)
            cell(f, p->rep.attainment, l->rep.attainment, h->rep.attainment, 100,
                 "%.1f (%.1f .. %.1f)");
        cell(f, p->rep.base.ttft.p50, l->rep.base.ttft.p50, h->rep.base.ttft.p50, 1e3,
             "%.1f (%.1f .. %.1f)");
        cell(f, p->rep.base.ttft.p99, l->rep.base.ttft.p99, h->rep.base.ttft.p99, 1e3,
             "%.1f (%.1f .. %.1f)");
        cell(f, p->rep.base.e2e.mean, l->rep.base.e2e.mean, h->rep.base.e2e.mean, 1e3,
             "%.0f (%.0f .. %.0f)");
        double el;
        int lost = h->rep.base.finished < l->rep.base.finished;
        char line[256];
        band_at_knee(&l->rep.base, &h->rep.base, b->err, &el);
        int v = band_verdict(el, lost, line, sizeof line);
        if (v) fprintf(f, "  %s", v == 2 ? "at a knee" : "near a knee");
        fputc('\n', f);
    }
}

/* One side's capacity as a bound: its rate, or what the search could say. */
static void bound(FILE *f, const sweep_capacity_t *c) {
    if (!c->found_lo) fprintf(f, "below %.4g", c->hi);
    else if (!c->found_hi) fprintf(f, "at least %.4g", c->lo);
    else fprintf(f, "%.4g", c->lo);
}

void sweep_band_print_capacity(FILE *f, const sweep_capacity_t *nom,
                               const sweep_capacity_t side[2], const sweep_band_t *b) {
    fprintf(f, "capacity band: ");
    bound(f, &side[1]);
    fprintf(f, " .. ");
    bound(f, &side[0]);
    fprintf(f, " req/s with every step's time +%.1f%% .. -%.1f%% (%s; nominal ", 100 * b->err,
            100 * b->err, b->src);
    bound(f, nom);
    fprintf(f, "); searches %s, %s\n", b->prefix[1], b->prefix[0]);
}
