/* test_explain_view: the step recorder behind `twinserve explain` (cli/explain_view.c) fed
 * hand-made steps: which steps --skip-quiet shows and how it counts the others, stopping
 * after max_shown, and the side-by-side printer's width, pairing by time and its "still
 * running" note. The cli/ objects are not in the library, so the module is compiled in. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/explain_view.c"
#include "tests/testutil.h"

enum { MAXR = 4 };

/* A tiny world: requests, a view of them, and one plan at a time. */
typedef struct {
    sched_req_t req[MAXR];
    const sched_req_t *running[MAXR];
    sched_view_t view;
    sched_entry_t entry[MAXR];
    sched_plan_t plan;
    sim_step_info_t si;
    int64_t step;
    double t;
} world_t;

static void world_init(world_t *w, int n, double arrival_gap) {
    memset(w, 0, sizeof *w);
    for (int i = 0; i < n; i++) {
        w->req[i].id = i;
        w->req[i].arrival_s = i * arrival_gap;
        w->req[i].prompt_tokens = 100;
        w->req[i].true_output_tokens = 50;
        w->req[i].state = SCHED_RUNNING;
        w->running[i] = &w->req[i];
    }
    w->view.running = w->running;
    w->view.n_running = n;
}

/* One step of duration dur over the requests in ids (n of them); prefill[i] says whether
 * request ids[i] computes its prompt (then its first token) or decodes. */
static int world_step(world_t *w, explain_rec_t *x, const int *ids, const int *prefill, int n,
                      double dur) {
    memset(&w->plan, 0, sizeof w->plan);
    for (int i = 0; i < n; i++) {
        sched_req_t *r = &w->req[ids[i]];
        sched_entry_t *e = &w->entry[i];
        memset(e, 0, sizeof *e);
        e->req = r;
        e->req_id = r->id;
        e->is_decode = !prefill[i];
        e->start = prefill[i] ? 0 : r->prompt_tokens + r->generated - 1;
        e->num_tokens = prefill[i] ? r->prompt_tokens : 1;
        e->sample = 1;
        e->num_blocks = 7;
        w->plan.prefill_tokens += prefill[i] ? e->num_tokens : 0;
        w->plan.decode_tokens += prefill[i] ? 0 : 1;
    }
    w->plan.entries = w->entry;
    w->plan.n = n;
    w->plan.num_tokens = w->plan.prefill_tokens + w->plan.decode_tokens;
    w->plan.step = w->step++;
    w->si = (sim_step_info_t){ .plan = &w->plan, .start_s = w->t, .dur_s = dur,
                                .view = &w->view, .kv_used = 10, .kv_total = 100 };
    int rc = explain_on_step(x, &w->si);
    w->t += dur;
    for (int i = 0; i < n; i++) w->req[ids[i]].generated++; /* the commit, after the hook */
    return rc;
}

static void world_finish(world_t *w, explain_rec_t *x, int id) {
    sched_req_t *r = &w->req[id];
    r->state = SCHED_FINISHED;
    r->first_token_s = r->arrival_s + 0.01;
    r->finish_s = w->t;
    explain_on_final(x, r, NULL);
}

/* The recorder's stream, read back. */
typedef struct {
    char *buf;
    size_t len;
    FILE *f;
} capture_t;

static void capture_open(capture_t *c) {
    c->buf = NULL;
    c->len = 0;
    c->f = open_memstream(&c->buf, &c->len);
    ck_assert_ptr_nonnull(c->f);
}

static const char *capture_text(capture_t *c) {
    fflush(c->f);
    return c->buf;
}

static void capture_close(capture_t *c) {
    fclose(c->f);
    free(c->buf);
}

START_TEST(test_skip_quiet_counts_decode_only_steps)
{
    world_t w;
    world_init(&w, 1, 0);
    capture_t c;
    capture_open(&c);
    explain_rec_t x = { .skip_quiet = 1, .max_shown = 100, .stop_when_full = 1, .stream = c.f };
    int r0[] = { 0 }, pre[] = { 1 }, dec[] = { 0 };
    ck_assert_int_eq(world_step(&w, &x, r0, pre, 1, 0.02), 0);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(world_step(&w, &x, r0, dec, 1, 0.01), 0);
    ck_assert_int_eq(world_step(&w, &x, r0, dec, 1, 0.01), 0);
    world_finish(&w, &x, 0);
    explain_rec_finish(&x);
    const char *out = capture_text(&c);
    ck_assert_msg(strstr(out, "step 0 ") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "... 3 decode-only steps (the same batch") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "step 1 ") == NULL && strstr(out, "step 3 ") == NULL, "%s", out);
    ck_assert_msg(strstr(out, "step 4 ") != NULL, "the finishing step is shown:\n%s", out);
    ck_assert_msg(strstr(out, "FINISHED") > strstr(out, "step 4 "), "%s", out);
    ck_assert_int_eq(x.steps, 5);
    ck_assert_int_eq(x.shown, 2);
    ck_assert_int_eq(x.quiet, 0);
    explain_rec_free(&x);
    capture_close(&c);
}
END_TEST

START_TEST(test_batch_change_is_an_event)
{
    world_t w;
    world_init(&w, 2, 0);
    capture_t c;
    capture_open(&c);
    explain_rec_t x = { .skip_quiet = 1, .max_shown = 100, .stop_when_full = 1, .stream = c.f };
    int both[] = { 0, 1 }, swapped[] = { 1, 0 }, one[] = { 0 }, dec[] = { 0, 0 };
    world_step(&w, &x, both, dec, 2, 0.01);    /* 0: the first batch: shown */
    world_step(&w, &x, swapped, dec, 2, 0.01); /* 1: the same set in another order: quiet */
    world_step(&w, &x, one, dec, 1, 0.01);     /* 2: r1 left out: shown */
    world_step(&w, &x, one, dec, 1, 0.01);     /* 3: quiet */
    world_step(&w, &x, one, dec, 1, 0.01);     /* 4: quiet, left out at the end */
    explain_rec_finish(&x);
    const char *out = capture_text(&c);
    ck_assert_msg(strstr(out, "step 0 ") && strstr(out, "step 2 "), "%s", out);
    ck_assert_msg(!strstr(out, "step 1 ") && !strstr(out, "step 3 "), "%s", out);
    ck_assert_msg(strstr(out, "... 1 decode-only step (the same batch"), "%s", out);
    ck_assert_msg(strstr(out, "... 2 decode-only steps (the same batch"), "closing gap:\n%s", out);
    ck_assert_int_eq(x.shown, 2);
    explain_rec_free(&x);
    capture_close(&c);
}
END_TEST

START_TEST(test_stops_after_max_shown)
{
    world_t w;
    world_init(&w, 1, 0);
    capture_t c;
    capture_open(&c);
    explain_rec_t x = { .max_shown = 2, .stop_when_full = 1, .stream = c.f };
    int r0[] = { 0 }, dec[] = { 0 };
    ck_assert_int_eq(world_step(&w, &x, r0, dec, 1, 0.01), 0);
    ck_assert_int_eq(world_step(&w, &x, r0, dec, 1, 0.01), 0);
    ck_assert_int_eq(world_step(&w, &x, r0, dec, 1, 0.01), 1); /* the third asks to stop */
    explain_rec_finish(&x);
    ck_assert_int_eq(x.steps, 2);
    ck_assert_int_eq(x.shown, 2);
    explain_rec_free(&x);
    capture_close(&c);

    /* without stop_when_full the run goes on, unrecorded */
    world_init(&w, 1, 0);
    explain_rec_t y = { .max_shown = 1, .narrow = 1 };
    for (int i = 0; i < 4; i++) ck_assert_int_eq(world_step(&w, &y, r0, dec, 1, 0.01), 0);
    explain_rec_finish(&y);
    ck_assert_int_eq(y.n_blocks, 2); /* r0's arrival row and step 0 */
    ck_assert(y.full);
    explain_rec_free(&y);
}
END_TEST

START_TEST(test_side_by_side)
{
    world_t wa, wb;
    world_init(&wa, 1, 0);
    world_init(&wb, 1, 0);
    explain_rec_t a = { .narrow = 1, .max_shown = 100 }, b = { .narrow = 1, .max_shown = 100 };
    int r0[] = { 0 }, pre[] = { 1 }, dec[] = { 0 };
    /* A: one 100 ms prefill, then a decode; B: five 20 ms steps (a slow machine), then a
     * 10 ms one */
    world_step(&wa, &a, r0, pre, 1, 0.100);
    world_step(&wa, &a, r0, dec, 1, 0.010);
    for (int i = 0; i < 5; i++) world_step(&wb, &b, r0, i ? dec : pre, 1, 0.020);
    world_step(&wb, &b, r0, dec, 1, 0.010);
    explain_rec_finish(&a);
    explain_rec_finish(&b);
    capture_t c;
    capture_open(&c);
    explain_print_side_by_side(c.f, &a, &b);
    const char *out = capture_text(&c);
    int lines = 0, still = 0, paired = 0;
    for (const char *p = out; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        ck_assert_msg(len <= 80, "a line of %zu columns:\n%.*s", len, (int)len, p);
        ck_assert_msg(len > EXPLAIN_COL + 1 && p[EXPLAIN_COL + 1] == '|',
                      "the separator is not at column %d:\n%.*s", EXPLAIN_COL + 2, (int)len, p);
        still += strncmp(p, "  (#0 still running)", 20) == 0;
        paired += strncmp(p, "#0 0.0000s", 10) == 0 && strstr(p, "| #0 0.0000s") != NULL;
        lines++;
        p = e ? e + 1 : p + len;
    }
    ck_assert_msg(paired == 1, "steps 0 should share a row:\n%s", out);
    ck_assert_msg(still == 4, "A's step 0 still runs beside B's steps 1-4:\n%s", out);
    /* A's decode and B's start together at 0.100 s */
    ck_assert_msg(strstr(out, "#1 0.1000s") != NULL, "%s", out);
    ck_assert_int_gt(lines, 10);
    capture_close(&c);
    explain_rec_free(&a);
    explain_rec_free(&b);
}
END_TEST

static Suite *explain_view_suite(void)
{
    Suite *s = suite_create("explain_view");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_skip_quiet_counts_decode_only_steps);
    tcase_add_test(tc, test_batch_change_is_an_event);
    tcase_add_test(tc, test_stops_after_max_shown);
    tcase_add_test(tc, test_side_by_side);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return testutil_run(explain_view_suite());
}
