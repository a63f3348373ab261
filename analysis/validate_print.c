/* validate_print: validate's report as text and as JSON (contract: validate.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analysis/band.h"
#include "traces/summary.h"
#include "analysis/validate.h"
#include "traces/json.h"

static const char *fmt_val(char *buf, size_t len, double v, int is_time) {
    if (isnan(v)) snprintf(buf, len, "-");
    else if (is_time) summary_fmt_time(buf, len, v);
    else snprintf(buf, len, "%.4g", v);
    return buf;
}

static void json_num(FILE *f, const char *key, double v, const char *after) {
    report_json_key_num(f, key, v, after);
}

static void json_band(FILE *f, const validate_metric_t *m) {
    json_num(f, "band_lo", m->band_lo, ", ");
    json_num(f, "band_hi", m->band_hi, ", ");
    fprintf(f, "\"inside\": %s, ", m->inside ? "true" : "false");
}

/* The band's range and whether the measured value fell inside. */
static void band_cell(FILE *f, const validate_metric_t *m, int is_time) {
    char lo[40], hi[40], range[96];
    snprintf(range, sizeof range, "%s .. %s", fmt_val(lo, sizeof lo, m->band_lo, is_time),
             fmt_val(hi, sizeof hi, m->band_hi, is_time));
    fprintf(f, "   %25s %-6s", range, !isfinite(m->measured) ? "" : m->inside ? "in" : "OUT");
}

static void print_band(FILE *f, const validate_result_t *r) {
    fprintf(f, "\nband: every step's time -%.1f%% .. +%.1f%% (%s); runs %s, %s\n",
            100 * r->band_err, 100 * r->band_err, r->band_src, r->band_runs[0], r->band_runs[1]);
    if (r->band_n)
        fprintf(f, "  measured inside the band: %d of %d headline metrics\n", r->band_in,
                r->band_n);
    if (r->stage_band_n)
        fprintf(f, "  measured inside the band: %d of %d stage metrics (stages not "
                   "overloaded)\n", r->stage_band_in, r->stage_band_n);
    char line[256];
    band_verdict(r->band_el, 0, line, sizeof line);
    if (line[0]) fprintf(f, "%s\n", line);
}

/* How far the arrival seed alone moves the predictions: the widest relative range. */
static void print_seed_spread(FILE *f, const validate_result_t *r) {
    const validate_metric_t *w = NULL;
    double widest = -1;
    for (int i = 0; i < r->n; i++) {
        const validate_metric_t *m = &r->m[i];
        double mid = 0.5 * (m->pred_lo + m->pred_hi);
        double rel = m->headline && mid > 0 ? (m->pred_hi - m->pred_lo) / mid : NAN;
        if (isfinite(rel) && rel > widest) widest = rel, w = m;
    }
    fprintf(f, "arrival seeds: %d replays of the regenerated arrivals (seeds from the run's); "
               "an error inside a metric's range is the seed's, not the model's", r->n_seeds);
    if (w) fprintf(f, "; the widest is %s, %.1f%% of its middle", w->name, 100 * widest);
    fputc('\n', f);
}

void validate_print(FILE *f, const validate_result_t *r) {
    char a[40], b[40], lo[40], hi[40];
    fprintf(f, "validate: %s run %s (id %lld) against simulated run %s (id %lld)\n",
            r->measured ? "measured" : "engine", r->engine_name, (long long)r->engine_id,
            r->sim_name, (long long)r->sim_id);
    fprintf(f, "cost model: %s\n", r->cost_desc);
    if (r->note[0]) fprintf(f, "replay: %s\n", r->note);
    if (r->n_runs > 1)
        fprintf(f, "engine noise: %d measured runs of the same workload (the run and %d "
                   "repeats)\n", r->n_runs, r->n_runs - 1);
    fprintf(f, "\n%-14s %12s %12s %9s", "metric", "measured", "predicted", "error");
    if (r->band_on) fprintf(f, "   %25s %-6s", "band", "");
    if (r->n_seeds > 1) fprintf(f, "   %25s", "over the arrival seeds");
    if (r->n_runs > 1) fprintf(f, "   %25s %8s  %s", "engine min .. max", "spread", "verdict");
    fputc('\n', f);
    for (int i = 0; i < r->n; i++) {
        const validate_metric_t *m = &r->m[i];
        fprintf(f, "%-14s %12s %12s ", m->name, fmt_val(a, sizeof a, m->measured, m->is_time),
                fmt_val(b, sizeof b, m->predicted, m->is_time));
        if (isfinite(m->err)) fprintf(f, "%+8.1f%%", 100 * m->err);
        else fprintf(f, "%9s", "-");
        if (r->band_on) band_cell(f, m, m->is_time);
        if (r->n_seeds > 1) {
            char range[96];
            snprintf(range, sizeof range, "%s .. %s", fmt_val(lo, sizeof lo, m->pred_lo, m->is_time),
                     fmt_val(hi, sizeof hi, m->pred_hi, m->is_time));
            fprintf(f, "   %25s", range);
        }
        if (r->n_runs > 1 && isfinite(m->spread)) {
            int within = m->predicted >= m->lo && m->predicted <= m->hi;
            char range[96];
            snprintf(range, sizeof range, "%s .. %s", fmt_val(lo, sizeof lo, m->lo, m->is_time),
                     fmt_val(hi, sizeof hi, m->hi, m->is_time));
            fprintf(f, "   %25s %7.1f%%  %s", range, 100 * m->spread,
                    within ? "within noise" : "model error");
        }
        fputc('\n', f);
    }
    if (r->measured)
        fprintf(f, "\nper step: none: a measured run records requests, not the server's "
                   "steps\n");
    else if (!r->pass.n)
        fprintf(f, "\nper step: none (see the replay line above)\n");
    else
        fprintf(f, "\nper step, the cost model on each engine step's recorded work "
                   "(|predicted - measured| / measured):\n");
    const struct { const char *label; const validate_steps_t *s; } rows[] = {
        {"forward pass", &r->pass}, {"  decode-only", &r->pass_decode},
        {"  with prompt", &r->pass_prompt}, {"host time", &r->host},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        const validate_steps_t *s = rows[i].s;
        if (!s->n) continue;
        fprintf(f, "  %-14s %7zu steps  median %6.2f%%  p90 %6.2f%%  bias %+6.2f%%\n",
                rows[i].label, s->n, 100 * s->median, 100 * s->p90, 100 * s->bias);
    }
    if (!r->host.n && !r->measured && r->pass.n)
        fprintf(f, "  host time: not modelled by this cost model\n");
    fprintf(f, "\nMAPE %.2f%% over %d headline metrics (p50, p90, p99 of TTFT, TPOT and E2E; "
               "output throughput)\n", 100 * r->mape, r->mape_n);
    if (r->n_seeds > 1) print_seed_spread(f, r);
    validate_print_stages(f, r);
    if (r->band_on) print_band(f, r);
}


void validate_print_stages(FILE *f, const validate_result_t *r) {
    char a[40], b[40];
    if (!r->n_stages) return;
    fprintf(f, "\nby load stage (the client's own TPOT and ITL: inference-perf counts two "
               "messages a token):\n");
    for (int i = 0; i < r->n_stages; i++) {
        const validate_stage_t *g = &r->stages[i];
        fprintf(f, "stage %d: %.4g req/s x %.4g s, requests %lld-%lld: finished %lld measured, "
                   "%lld predicted; failed %lld, %lld%s\n", g->stage, g->rate, g->duration_s,
                (long long)g->first, (long long)(g->first + g->count - 1),
                (long long)g->finished_meas, (long long)g->finished_pred,
                (long long)g->failed_meas, (long long)g->failed_pred,
                g->overloaded ? "  OVERLOADED (reported apart: latencies censored by the "
                                "client's timeout)" : "");
        for (int k = 0; k < g->n; k++) {
            const validate_metric_t *m = &g->m[k];
            fprintf(f, "  %-16s %12s %12s ", m->name, fmt_val(a, sizeof a, m->measured, 1),
                    fmt_val(b, sizeof b, m->predicted, 1));
            if (isfinite(m->err)) fprintf(f, "%+8.1f%%", 100 * m->err);
            else fprintf(f, "%9s", "-");
            if (r->band_on) band_cell(f, m, 1);
            fputc('\n', f);
        }
        if (g->mape_n) fprintf(f, "  stage MAPE %.2f%% over %d metrics\n", 100 * g->mape, g->mape_n);
    }
    if (isfinite(r->stage_mape))
        fprintf(f, "\nstage MAPE %.2f%% over %d metrics of the stages not overloaded\n",
                100 * r->stage_mape, r->stage_mape_n);
}

void validate_json(FILE *f, const validate_result_t *r) {
    fputs("{\"engine_run\": ", f);
    json_write_str(f, r->engine_name);
    fprintf(f, ", \"engine_run_id\": %lld, \"sim_run\": ", (long long)r->engine_id);
    json_write_str(f, r->sim_name);
    fprintf(f, ", \"sim_run_id\": %lld, \"run_kind\": \"%s\", \"replay\": ", (long long)r->sim_id,
            r->measured ? "measured" : "engine");
    if (r->note[0]) json_write_str(f, r->note);
    else fputs("null", f);
    fputs(", \"cost_model\": ", f);
    json_write_str(f, r->cost_desc);
    fprintf(f, ", \"measured_runs\": %d, \"arrival_seeds\": %d, \"metrics\": [", r->n_runs,
            r->n_seeds);
    for (int i = 0; i < r->n; i++) {
        const validate_metric_t *m = &r->m[i];
        fputs(i ? ", {\"name\": " : "{\"name\": ", f);
        json_write_str(f, m->name);
        fprintf(f, ", \"headline\": %s, ", m->headline ? "true" : "false");
        json_num(f, "measured", m->measured, ", ");
        json_num(f, "predicted", m->predicted, ", ");
        json_num(f, "error", m->err, ", ");
        json_num(f, "measured_min", m->lo, ", ");
        json_num(f, "measured_max", m->hi, ", ");
        if (r->band_on) json_band(f, m);
        if (r->n_seeds > 1) {
            json_num(f, "seeds_min", m->pred_lo, ", ");
            json_num(f, "seeds_max", m->pred_hi, ", ");
        }
        json_num(f, "spread", m->spread, "}");
    }
    fputs("], \"steps\": {", f);
    const struct { const char *key; const validate_steps_t *s; } rows[] = {
        {"pass", &r->pass}, {"pass_decode", &r->pass_decode},
        {"pass_prompt", &r->pass_prompt}, {"host", &r->host},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        fprintf(f, "%s\"%s\": {\"n\": %zu, ", i ? ", " : "", rows[i].key, rows[i].s->n);
        json_num(f, "median_abs_error", rows[i].s->median, ", ");
        json_num(f, "p90_abs_error", rows[i].s->p90, ", ");
        json_num(f, "bias", rows[i].s->bias, "}");
    }
    fputs("}, ", f);
    json_num(f, "mape", r->mape, ", ");
    fprintf(f, "\"mape_metrics\": %d, \"stages\": [", r->mape_n);
    for (int i = 0; i < r->n_stages; i++) {
        const validate_stage_t *g = &r->stages[i];
        fprintf(f, "%s{\"stage\": %d, ", i ? ", " : "", g->stage);
        json_num(f, "rate", g->rate, ", ");
        json_num(f, "duration_s", g->duration_s, ", ");
        fprintf(f, "\"first\": %lld, \"count\": %lld, \"finished_measured\": %lld, "
                   "\"finished_predicted\": %lld, \"failed_measured\": %lld, "
                   "\"failed_predicted\": %lld, \"overloaded\": %s, \"metrics\": [",
                (long long)g->first, (long long)g->count, (long long)g->finished_meas,
                (long long)g->finished_pred, (long long)g->failed_meas,
                (long long)g->failed_pred, g->overloaded ? "true" : "false");
        for (int k = 0; k < g->n; k++) {
            const validate_metric_t *m = &g->m[k];
            fputs(k ? ", {\"name\": " : "{\"name\": ", f);
            json_write_str(f, m->name);
            fputs(", ", f);
            json_num(f, "measured", m->measured, ", ");
            json_num(f, "predicted", m->predicted, ", ");
            if (r->band_on) json_band(f, m);
            json_num(f, "error", m->err, "}");
        }
        fputs("], ", f);
        json_num(f, "mape", g->mape, "}");
    }
    fputs("], ", f);
    if (r->band_on) {
        fputs("\"band\": {", f);
        json_num(f, "err", r->band_err, ", ");
        fputs("\"source\": ", f);
        json_write_str(f, r->band_src);
        fputs(", \"runs\": [", f);
        json_write_str(f, r->band_runs[0]);
        fputs(", ", f);
        json_write_str(f, r->band_runs[1]);
        fprintf(f, "], \"inside\": %d, \"of\": %d, \"stage_inside\": %d, \"stage_of\": %d, ",
                r->band_in, r->band_n, r->stage_band_in, r->stage_band_n);
        json_num(f, "e2e_elasticity", r->band_el, ", ");
        fprintf(f, "\"knee\": \"%s\"}, ", r->band_knee == 2 ? "at" : r->band_knee ? "near" : "no");
    }
    json_num(f, "stage_mape", r->stage_mape, "}\n");
}
