/* validate_band: validate with a prediction band (contract: validate.h, validate_band; the
 * band itself: band.h). The nominal replay is validate_run's; the two sides are the same
 * replay with every step's time moved by the band's width, compared the same way, and each
 * metric's band is the range of the three predictions. */
#include <math.h>
#include <string.h>

#include "analysis/band.h"
#include "analysis/validate.h"

static const validate_metric_t *find(const validate_metric_t *m, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(m[i].name, name)) return &m[i];
    return NULL;
}

static void widen(validate_metric_t *m, const validate_metric_t *side) {
    if (!side || !isfinite(side->predicted)) return;
    m->band_lo = fmin(m->band_lo, side->predicted);
    m->band_hi = fmax(m->band_hi, side->predicted);
}

/* In the band: the measured value inside it, or with repeats (the measurement's own spread,
 * lo .. hi over the measured runs) the two ranges overlapping. */
static void settle(validate_metric_t *m, int counted, int *in, int *n) {
    int spread = isfinite(m->lo) && isfinite(m->hi);
    m->inside = spread ? m->lo <= m->band_hi && m->hi >= m->band_lo
                       : m->measured >= m->band_lo && m->measured <= m->band_hi;
    if (!counted || !isfinite(m->measured) || !isfinite(m->predicted)) return;
    *in += m->inside;
    (*n)++;
}

/* The side's predictions into r's bands, metric by metric (the same names). */
static void merge(validate_result_t *r, const validate_result_t *side) {
    for (int i = 0; i < r->n; i++) widen(&r->m[i], find(side->m, side->n, r->m[i].name));
    for (int s = 0; s < r->n_stages && s < side->n_stages; s++)
        for (int k = 0; k < r->stages[s].n; k++)
            widen(&r->stages[s].m[k],
                  find(side->stages[s].m, side->stages[s].n, r->stages[s].m[k].name));
}

int validate_band(const validate_opts_t *o, validate_result_t *r, char *err, size_t errlen) {
    static validate_result_t side[2];
    if (validate_run(o, r, err, errlen) != 0) return -1;
    if (!o->band) return 0;
    if (band_pick(o->band_err, r->band_stated, r->band_stated_src, &r->band_err, r->band_src,
                  sizeof r->band_src, err, errlen) != 0)
        return -1;
    for (int i = 0; i < r->n; i++) r->m[i].band_lo = r->m[i].band_hi = r->m[i].predicted;
    for (int s = 0; s < r->n_stages; s++)
        for (int k = 0; k < r->stages[s].n; k++)
            r->stages[s].m[k].band_lo = r->stages[s].m[k].band_hi = r->stages[s].m[k].predicted;
    for (int k = 0; k < 2; k++) {
        int sgn = k ? 1 : -1;
        validate_opts_t so = *o;
        so.repeat = 0;       /* the measured side's noise is the nominal run's repeats */
        so.band = 0;
        so.cost_scale = (o->cost_scale > 0 ? o->cost_scale : 1) * (1 + sgn * r->band_err);
        if (band_side_name(o->db_path, r->sim_name, sgn, r->band_runs[k], sizeof r->band_runs[k],
                           err, errlen) != 0)
            return -1;
        so.name = r->band_runs[k];
        so.progress = 0;
        char e[4096];
        if (validate_run(&so, &side[k], e, sizeof e) != 0) {
            snprintf(err, errlen, "the band's %s side (%s): %s", k ? "high" : "low",
                     r->band_runs[k], e);
            return -1;
        }
        merge(r, &side[k]);
    }
    r->band_on = 1;
    r->band_in = r->band_n = r->stage_band_in = r->stage_band_n = 0;
    for (int i = 0; i < r->n; i++) settle(&r->m[i], r->m[i].headline, &r->band_in, &r->band_n);
    for (int s = 0; s < r->n_stages; s++)
        for (int k = 0; k < r->stages[s].n; k++)
            settle(&r->stages[s].m[k], !r->stages[s].overloaded, &r->stage_band_in,
                   &r->stage_band_n);
    const validate_metric_t *lo = find(side[0].m, side[0].n, "E2E mean");
    const validate_metric_t *hi = find(side[1].m, side[1].n, "E2E mean");
    r->band_el = lo && hi ? band_elasticity(lo->predicted, hi->predicted, r->band_err) : NAN;
    char line[256];
    r->band_knee = band_verdict(r->band_el, 0, line, sizeof line);
    return 0;
}
