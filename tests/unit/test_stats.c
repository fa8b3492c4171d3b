/* stats: vLLM's bucket bounds, Prometheus `le` placement at exact bounds, histogram_quantile
 * against hand-computed values, the ring's order across wrap-around, rates over a window, and
 * snapshots that stay consistent while four threads record and read at once. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "stats.h"

static stats_snapshot_t *snap_new(void) {
    stats_snapshot_t *s = malloc(sizeof *s);
    assert_non_null(s);
    return s;
}

static stats_request_t request(double seconds) {
    return (stats_request_t){.finish_reason = 0,
                             .queue_s = seconds,
                             .ttft_s = seconds,
                             .tpot_s = seconds,
                             .e2e_s = seconds};
}

static void test_bounds(void **state) {
    (void)state;
    stats_t *st = stats_create();
    stats_snapshot_t *s = snap_new();
    stats_snapshot(st, s);
    assert_int_equal(s->ttft.n_bounds, 22);
    assert_true(s->ttft.bounds[0] == 0.001 && s->ttft.bounds[8] == 0.25);
    assert_true(s->ttft.bounds[20] == 640.0 && s->ttft.bounds[21] == 2560.0);
    assert_int_equal(s->tpot.n_bounds, 19);
    assert_int_equal(s->itl.n_bounds, 19);
    assert_true(s->itl.bounds[0] == 0.01 && s->itl.bounds[3] == 0.075);
    assert_true(s->itl.bounds[18] == 80.0);
    assert_int_equal(s->e2e.n_bounds, 21);
    assert_int_equal(s->queue.n_bounds, 21);
    assert_true(s->queue.bounds[0] == 0.3 && s->queue.bounds[2] == 0.8);
    assert_true(s->queue.bounds[19] == 1920.0 && s->queue.bounds[20] == 7680.0);
    const stats_hist_t *all[] = {&s->ttft, &s->tpot, &s->itl, &s->e2e, &s->queue};
    for (int h = 0; h < 5; h++) {
        for (int i = 1; i < all[h]->n_bounds; i++)
            assert_true(all[h]->bounds[i] > all[h]->bounds[i - 1]);
        assert_true(all[h]->count == 0);
    }
    assert_int_equal(s->n_steps, 0);
    free(s);
    stats_destroy(st);
    stats_destroy(NULL);
}

static void test_bucket_placement(void **state) {
    (void)state;
    stats_t *st = stats_create();
    /* ttft bounds: 0.001, 0.005, ..., 640, 2560 */
    const double values[] = {0.0, 0.001, 0.0010001, 0.005, 2560.0, 2560.5, 1e9};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        stats_request_t r = request(-1);
        r.ttft_s = values[i];
        stats_record_request(st, &r);
    }
    stats_request_t none = request(-1);
    none.ttft_s = NAN;
    stats_record_request(st, &none);
    stats_record_itl(st, 0.01);  /* exactly the first bound */
    stats_record_itl(st, 80.0);  /* exactly the last */
    stats_record_itl(st, 80.01); /* +Inf */
    stats_record_itl(st, -0.5);  /* not measured */
    stats_snapshot_t *s = snap_new();
    stats_snapshot(st, s);
    const stats_hist_t *h = &s->ttft;
    assert_true(h->counts[0] == 2);  /* 0 and 0.001: le 0.001 */
    assert_true(h->counts[1] == 2);  /* 0.0010001 and 0.005 */
    assert_true(h->counts[21] == 1); /* 2560 */
    assert_true(h->counts[22] == 2); /* +Inf */
    assert_true(h->count == 7);
    assert_true(fabs(h->sum - (0.001 + 0.0010001 + 0.005 + 2560.0 + 2560.5 + 1e9)) < 1e-3);
    uint64_t total = 0;
    for (int i = 0; i <= h->n_bounds; i++)
        total += h->counts[i];
    assert_true(total == h->count);
    assert_true(s->itl.counts[0] == 1 && s->itl.counts[18] == 1 && s->itl.counts[19] == 1);
    assert_true(s->itl.count == 3);
    /* The other histograms of those requests saw only -1 and NaN. */
    assert_true(s->e2e.count == 0 && s->queue.count == 0 && s->tpot.count == 0);
    assert_true(s->requests_finished[0] == 8);
    free(s);
    stats_destroy(st);
}

static stats_hist_t hist(int n_bounds, const double *bounds, const uint64_t *counts) {
    stats_hist_t h = {.n_bounds = n_bounds};
    for (int i = 0; i < n_bounds; i++)
        h.bounds[i] = bounds[i];
    for (int i = 0; i <= n_bounds; i++) {
        h.counts[i] = counts[i];
        h.count += counts[i];
    }
    return h;
}

static void test_quantile(void **state) {
    (void)state;
    const double b[] = {1, 2, 4};
    /* 1 in [0,1], 2 in (1,2], 1 in (2,4]: rank = 4q */
    const uint64_t c[] = {1, 2, 1, 0};
    stats_hist_t h = hist(3, b, c);
    assert_float_equal(stats_hist_quantile(&h, 0.1), 0.4, 1e-12);  /* rank .4 of 1 in [0,1] */
    assert_float_equal(stats_hist_quantile(&h, 0.25), 1.0, 1e-12); /* rank 1: top of bucket 0 */
    assert_float_equal(stats_hist_quantile(&h, 0.5), 1.5, 1e-12);  /* 1 of 2 in (1,2] */
    assert_float_equal(stats_hist_quantile(&h, 0.75), 2.0, 1e-12);
    assert_float_equal(stats_hist_quantile(&h, 0.9), 3.2, 1e-12); /* 2 + 2 * 0.6 */
    assert_float_equal(stats_hist_quantile(&h, 1.0), 4.0, 1e-12);
    assert_float_equal(stats_hist_quantile(&h, 0.0), 0.0, 1e-12);
    assert_true(isnan(stats_hist_quantile(&h, -0.1)));
    assert_true(isnan(stats_hist_quantile(&h, 1.1)));
    assert_true(isnan(stats_hist_quantile(&h, NAN)));

    /* In the +Inf bucket: the highest finite bound. */
    const uint64_t inf[] = {1, 0, 0, 3};
    h = hist(3, b, inf);
    assert_float_equal(stats_hist_quantile(&h, 0.5), 4.0, 1e-12);
    assert_float_equal(stats_hist_quantile(&h, 0.2), 0.8, 1e-12);

    /* q = 0 with empty leading buckets: where the smallest observation's bucket starts. */
    const uint64_t late[] = {0, 0, 4, 0};
    h = hist(3, b, late);
    assert_float_equal(stats_hist_quantile(&h, 0.0), 2.0, 1e-12);
    assert_float_equal(stats_hist_quantile(&h, 0.5), 3.0, 1e-12);

    const uint64_t empty[] = {0, 0, 0, 0};
    h = hist(3, b, empty);
    assert_true(isnan(stats_hist_quantile(&h, 0.5)));

    /* Recorded through the store: ten TTFTs of 50 ms lie in (0.04, 0.06]. */
    stats_t *st = stats_create();
    for (int i = 0; i < 10; i++) {
        stats_request_t r = request(0.05);
        stats_record_request(st, &r);
    }
    stats_snapshot_t *s = snap_new();
    stats_snapshot(st, s);
    assert_float_equal(stats_hist_quantile(&s->ttft, 0.5), 0.05, 1e-12);
    assert_float_equal(stats_hist_quantile(&s->ttft, 0.9), 0.058, 1e-12);
    /* e2e bounds start at 0.3: 0.05 is in [0, 0.3], rank 5 of 10 */
    assert_float_equal(stats_hist_quantile(&s->e2e, 0.5), 0.15, 1e-12);
    assert_float_equal(s->ttft.sum, 0.5, 1e-12);
    free(s);
    stats_destroy(st);
}

static void record_steps(stats_t *st, int first, int n) {
    for (int i = first; i < first + n; i++) {
        stats_step_t step = {.t = i * 0.125,
                             .running = i,
                             .prefill_tokens = 10,
                             .decode_tokens = 5,
                             .kv_used = i % 7,
                             .kv_total = 100};
        stats_record_step(st, &step);
    }
}

static void test_ring_order(void **state) {
    (void)state;
    stats_t *st = stats_create();
    stats_snapshot_t *s = snap_new();
    record_steps(st, 0, 5);
    stats_snapshot(st, s);
    assert_int_equal(s->n_steps, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(s->steps_ring[i].running, i);

    /* Exactly full: the write position is back at slot 0. */
    record_steps(st, 5, STATS_RING - 5);
    stats_snapshot(st, s);
    assert_int_equal(s->n_steps, STATS_RING);
    for (int i = 0; i < STATS_RING; i++)
        assert_int_equal(s->steps_ring[i].running, i);

    /* Wrapped by 100 + 1: the oldest kept is step 101. */
    record_steps(st, STATS_RING, 101);
    stats_snapshot(st, s);
    assert_int_equal(s->n_steps, STATS_RING);
    assert_true(s->steps == (uint64_t)STATS_RING + 101);
    for (int i = 0; i < STATS_RING; i++)
        assert_int_equal(s->steps_ring[i].running, 101 + i);
    /* Gauges are the newest step's. */
    int last = STATS_RING + 100;
    assert_int_equal(s->running, last);
    assert_int_equal(s->kv_used, last % 7);
    assert_int_equal(s->kv_total, 100);
    free(s);
    stats_destroy(st);
}

static void test_counters(void **state) {
    (void)state;
    stats_t *st = stats_create();
    stats_add_submitted(st, 3);
    stats_add_submitted(st, 2);
    stats_add_prompt_tokens(st, 100);
    stats_add_generation_tokens(st, 7);
    stats_add_generation_tokens(st, 1);
    stats_add_prefix(st, 64, 48);
    stats_step_t step = {.t = 1, .running = 2, .waiting = 9, .preempted = 3};
    stats_record_step(st, &step);
    step.preempted = 1;
    step.waiting = 4;
    stats_record_step(st, &step);
    stats_request_t r = request(1.0);
    r.finish_reason = 1;
    stats_record_request(st, &r);
    r.finish_reason = 3;
    stats_record_request(st, &r);
    r.finish_reason = 4; /* not a reason: no counter moves, the latencies still count */
    stats_record_request(st, &r);
    stats_snapshot_t *s = snap_new();
    stats_snapshot(st, s);
    assert_true(s->requests_submitted == 5);
    assert_true(s->prompt_tokens == 100);
    assert_true(s->generation_tokens == 8);
    assert_true(s->prefix_queries == 64 && s->prefix_hits == 48);
    assert_true(s->steps == 2 && s->preemptions == 4);
    assert_int_equal(s->waiting, 4);
    assert_true(s->requests_finished[0] == 0 && s->requests_finished[1] == 1);
    assert_true(s->requests_finished[2] == 0 && s->requests_finished[3] == 1);
    assert_true(s->e2e.count == 3);
    assert_true(s->e2e.counts[3] == 3); /* 1.0 is le 1.0, the fourth bound */
    free(s);
    stats_destroy(st);
}

static void test_rates(void **state) {
    (void)state;
    stats_t *st = stats_create();
    stats_snapshot_t *s = snap_new();
    double p, g;
    stats_snapshot(st, s);
    stats_rates(s, 1.0, &p, &g);
    assert_true(p == 0 && g == 0);

    /* Steps every 1/8 s up to t = 10, each 10 prompt and 5 decode tokens. (9, 10] holds 8. */
    record_steps(st, 1, 80);
    stats_snapshot(st, s);
    stats_rates(s, 1.0, &p, &g);
    assert_float_equal(p, 80.0, 1e-9);
    assert_float_equal(g, 40.0, 1e-9);
    stats_rates(s, 0.5, &p, &g); /* (9.5, 10]: 4 steps */
    assert_float_equal(p, 80.0, 1e-9);
    assert_float_equal(g, 40.0, 1e-9);
    stats_rates(s, 20.0, &p, &g); /* all 80 steps over 20 s: the engine was idle before */
    assert_float_equal(p, 40.0, 1e-9);
    assert_float_equal(g, 20.0, 1e-9);
    stats_rates(s, 0, &p, &g);
    assert_true(p == 0 && g == 0);

    /* A full ring with a window reaching past it: over the span the ring holds. */
    record_steps(st, 81, STATS_RING);
    stats_snapshot(st, s);
    stats_rates(s, 1e9, &p, &g);
    assert_float_equal(p, 80.0, 1e-9);
    assert_float_equal(g, 40.0, 1e-9);
    free(s);
    stats_destroy(st);
}

/* Two threads record, two take snapshots, for about a second. Writer w's steps carry
 * running = w and waiting = its sequence number; each step preempts one sequence and each
 * request is one of every request histogram, so a consistent snapshot has preemptions == steps
 * and as many TTFTs as finished requests, and each writer's steps in order in the ring. */
typedef struct {
    stats_t *st;
    int id;
    atomic_int *stop;
    long recorded;
    long snapshots;
    int bad;
} worker_t;

static void *writer(void *arg) {
    worker_t *w = arg;
    while (!*w->stop) {
        stats_step_t step = {.t = (double)w->recorded,
                             .running = w->id,
                             .waiting = (int)w->recorded,
                             .preempted = 1,
                             .decode_tokens = 2};
        stats_record_step(w->st, &step);
        stats_request_t r = request(0.001 * (double)(w->recorded % 5000));
        r.finish_reason = w->id;
        stats_record_request(w->st, &r);
        stats_record_itl(w->st, 0.02);
        stats_add_generation_tokens(w->st, 1);
        w->recorded++;
    }
    return NULL;
}

static void *reader(void *arg) {
    worker_t *w = arg;
    stats_snapshot_t *s = malloc(sizeof *s);
    if (!s) {
        w->bad++;
        return NULL;
    }
    while (!*w->stop) {
        stats_snapshot(w->st, s);
        w->snapshots++;
        uint64_t finished = s->requests_finished[0] + s->requests_finished[1];
        if (s->preemptions != s->steps) w->bad++;
        if (s->n_steps != (s->steps < STATS_RING ? (int)s->steps : STATS_RING)) w->bad++;
        /* One record call moves these together; itl and generation_tokens are separate calls
         * and are only checked once the writers are done. */
        if (s->ttft.count != finished || s->e2e.count != finished) w->bad++;
        uint64_t sum = 0;
        for (int i = 0; i <= s->e2e.n_bounds; i++)
            sum += s->e2e.counts[i];
        if (sum != s->e2e.count) w->bad++;
        int last_seq[2] = {-1, -1};
        for (int i = 0; i < s->n_steps; i++) {
            int id = s->steps_ring[i].running, seq = s->steps_ring[i].waiting;
            if (id < 0 || id > 1 || seq <= last_seq[id]) {
                w->bad++;
                break;
            }
            last_seq[id] = seq;
        }
    }
    free(s);
    return NULL;
}

static void test_concurrent(void **state) {
    (void)state;
    stats_t *st = stats_create();
    atomic_int stop = 0;
    worker_t w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker_t){.st = st, .id = i % 2, .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, i < 2 ? writer : reader, &w[i]), 0);
    }
    struct timespec second = {.tv_sec = 1};
    nanosleep(&second, NULL);
    stop = 1;
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);

    long total = w[0].recorded + w[1].recorded;
    assert_true(total > STATS_RING); /* the ring wrapped while readers read */
    assert_true(w[2].snapshots > 0 && w[3].snapshots > 0);
    assert_int_equal(w[2].bad + w[3].bad, 0);
    stats_snapshot_t *s = snap_new();
    stats_snapshot(st, s);
    assert_true(s->steps == (uint64_t)total);
    assert_true(s->preemptions == (uint64_t)total);
    assert_true(s->requests_finished[0] == (uint64_t)w[0].recorded);
    assert_true(s->requests_finished[1] == (uint64_t)w[1].recorded);
    assert_true(s->ttft.count == (uint64_t)total && s->itl.count == (uint64_t)total);
    assert_true(s->generation_tokens == (uint64_t)total);
    assert_int_equal(s->n_steps, STATS_RING);
    free(s);
    stats_destroy(st);
}

/* n equal latencies recorded at once count as n observations. */
static void test_itl_batched(void **state) {
    stats_t *st = stats_create();
    stats_record_itl_n(st, 0.02, 5);
    stats_record_itl(st, 0.02);
    stats_record_itl_n(st, 0.5, 2);
    static stats_snapshot_t snap;
    stats_snapshot(st, &snap);
    assert_int_equal(snap.itl.count, 8);
    assert_true(fabs(snap.itl.sum - (6 * 0.02 + 2 * 0.5)) < 1e-12);
    uint64_t in_first = 0;
    for (int i = 0; i < snap.itl.n_bounds && snap.itl.bounds[i] < 0.03; i++)
        in_first += snap.itl.counts[i];
    assert_int_equal(in_first, 6);
    stats_destroy(st);
}

/* Expert load: totals as recorded, the window the per-second buckets of the last
 * STATS_EXPERT_WINDOW seconds; models too large to track are refused. */
static void test_expert_load(void **state) {
    stats_t *st = stats_create();
    assert_non_null(st);
    static stats_snapshot_t snap;
    stats_snapshot(st, &snap);
    assert_int_equal(snap.experts.n_layers, 0); /* dense until told otherwise */
    const int layers[2] = {1, 3};
    assert_int_equal(stats_experts_init(st, 200, 200, layers, 100.0), -1); /* 40000 cells */
    assert_int_equal(stats_experts_init(st, 2, 3, layers, 100.0), 0);
    /* one token per second to expert 0 of row 0, two per second to expert 2 of row 1 */
    uint64_t total[6] = {0};
    for (int i = 0; i < 25; i++) {
        total[0] += 1;
        total[5] += 2;
        stats_record_experts(st, total, 100.5 + i);
    }
    stats_snapshot(st, &snap);
    const stats_experts_t *x = &snap.experts;
    assert_int_equal(x->n_layers, 2);
    assert_int_equal(x->n_experts, 3);
    assert_int_equal(x->layer[1], 3);
    assert_int_equal(x->total[0], 25);
    assert_int_equal(x->total[5], 50);
    assert_int_equal(x->window[0], STATS_EXPERT_WINDOW); /* the records of the last 10 s */
    assert_int_equal(x->window[5], 2 * STATS_EXPERT_WINDOW);
    assert_int_equal(x->window[1] + x->window[2] + x->window[3] + x->window[4], 0);
    assert_true(x->window_s == STATS_EXPERT_WINDOW);
    assert_true(x->t == 124.5);
    /* several records within one second share its bucket; a gap longer than the window
     * empties it */
    total[0] += 5;
    stats_record_experts(st, total, 124.9);
    stats_snapshot(st, &snap);
    assert_int_equal(snap.experts.window[0], STATS_EXPERT_WINDOW + 5);
    stats_record_experts(st, total, 200.0);
    stats_snapshot(st, &snap);
    assert_int_equal(snap.experts.window[0], 0);
    assert_int_equal(snap.experts.total[0], 30);
    /* nothing recorded while idle: aging at a later time empties what left the window */
    total[0] += 4;
    stats_record_experts(st, total, 201.2);
    stats_age_experts(st, 205.0); /* 201's bucket still in the window */
    stats_snapshot(st, &snap);
    assert_int_equal(snap.experts.window[0], 4);
    stats_age_experts(st, 211.5); /* 201 <= 211 - 10: gone */
    stats_snapshot(st, &snap);
    assert_int_equal(snap.experts.window[0], 0);
    assert_int_equal(snap.experts.total[0], 34);
    stats_destroy(st);
}

/* Speculative decoding's counters: drafts, draft tokens, accepted ones per position; the rate and
 * the mean acceptance length; accepted drafts count in the generation rate. */
static void test_spec_counters(void **state) {
    (void)state;
    stats_t *st = stats_create();
    stats_snapshot_t *s = snap_new();
    stats_snapshot(st, s);
    assert_true(isnan(stats_spec_acceptance_rate(s)) && isnan(stats_spec_mean_length(s)));
    const uint64_t pos1[] = {3, 2, 1}, pos2[] = {1};
    stats_add_spec(st, 4, 12, 6, pos1, 3); /* 4 sequences verified 3 drafts each */
    stats_add_spec(st, 2, 2, 1, pos2, 1);
    stats_step_t step = {.t = 1, .decode_tokens = 4, .draft_tokens = 12, .accepted = 6};
    stats_record_step(st, &step);
    step.t = 2;
    stats_record_step(st, &step);
    stats_snapshot(st, s);
    assert_true(s->spec_drafts == 6 && s->spec_draft_tokens == 14 && s->spec_accepted_tokens == 7);
    assert_true(s->spec_accepted_per_pos[0] == 4 && s->spec_accepted_per_pos[1] == 2 &&
                s->spec_accepted_per_pos[2] == 1 && s->spec_accepted_per_pos[3] == 0);
    assert_int_equal(s->spec_k, 3);
    assert_true(fabs(stats_spec_acceptance_rate(s) - 0.5) < 1e-12);
    assert_true(fabs(stats_spec_mean_length(s) - (1.0 + 7.0 / 6.0)) < 1e-12);
    double prompt, gen;
    stats_rates(s, 0.5, &prompt, &gen);
    assert_true(fabs(gen - 10 / 0.5) < 1e-9); /* the last step: 4 decodes + 6 accepted */
    free(s);
    stats_destroy(st);
}

/* Two replicas' snapshots merged: counters and histograms summed; the step rings interleaved by
 * time, each merged step's gauges the sum of both replicas' latest (a replica before its first
 * step counts its pool); finished choices oldest first; live ones by arrival. */
static void test_merge(void **state) {
    (void)state;
    stats_snapshot_t *p = calloc(3, sizeof *p), *out = &p[2];
    p[0].kv_total = 100, p[1].kv_total = 50;
    p[0].generation_tokens = 7, p[1].generation_tokens = 5;
    p[0].ttft.n_bounds = p[1].ttft.n_bounds = 1;
    p[0].ttft.bounds[0] = p[1].ttft.bounds[0] = 1;
    p[0].ttft.counts[0] = 2, p[1].ttft.counts[1] = 3;
    p[0].ttft.count = 2, p[1].ttft.count = 3;
    /* replica 0 steps at t = 1, 3; replica 1 at t = 2 */
    p[0].steps_ring[0] =
        (stats_step_t){.t = 1, .running = 2, .kv_used = 10, .kv_total = 100, .decode_tokens = 2};
    p[0].steps_ring[1] =
        (stats_step_t){.t = 3, .running = 1, .kv_used = 4, .kv_total = 100, .decode_tokens = 1};
    p[0].n_steps = 2;
    p[1].steps_ring[0] =
        (stats_step_t){.t = 2, .running = 5, .kv_used = 20, .kv_total = 50, .decode_tokens = 5};
    p[1].n_steps = 1;
    p[0].recent[0] = (stats_finished_t){.t = 4, .generated = 1};
    p[1].recent[0] = (stats_finished_t){.t = 2, .generated = 2};
    p[0].n_recent = p[1].n_recent = 1;
    p[0].active[0] = (stats_active_t){.arrival = 9, .generated = 1};
    p[1].active[0] = (stats_active_t){.arrival = 8, .generated = 2};
    p[0].n_active = p[1].n_active = 1;
    p[0].n_active_total = 1, p[1].n_active_total = 3;
    stats_merge(out, (stats_snapshot_t *const[]){&p[0], &p[1]}, 2);
    assert_int_equal(out->kv_total, 150);
    assert_int_equal(out->generation_tokens, 12);
    assert_int_equal(out->ttft.count, 5);
    assert_int_equal(out->ttft.counts[0], 2);
    assert_int_equal(out->ttft.counts[1], 3);
    assert_int_equal(out->n_steps, 3);
    /* t = 1: replica 1 has no step yet: its pool from its gauges */
    assert_true(out->steps_ring[0].t == 1);
    assert_int_equal(out->steps_ring[0].running, 2);
    assert_int_equal(out->steps_ring[0].kv_total, 150);
    assert_int_equal(out->steps_ring[0].decode_tokens, 2);
    /* t = 2: both replicas' latest */
    assert_int_equal(out->steps_ring[1].running, 7);
    assert_int_equal(out->steps_ring[1].kv_used, 30);
    assert_int_equal(out->steps_ring[1].decode_tokens, 5);
    /* t = 3: replica 0's new gauges with replica 1's of t = 2 */
    assert_int_equal(out->steps_ring[2].running, 6);
    assert_int_equal(out->steps_ring[2].kv_used, 24);
    assert_int_equal(out->n_recent, 2);
    assert_int_equal(out->recent[0].generated, 2);
    assert_int_equal(out->recent[1].generated, 1);
    assert_int_equal(out->n_active, 2);
    assert_int_equal(out->n_active_total, 4);
    assert_int_equal(out->active[0].generated, 2);
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_bucket_placement),
        cmocka_unit_test(test_quantile),
        cmocka_unit_test(test_ring_order),
        cmocka_unit_test(test_counters),
        cmocka_unit_test(test_rates),
        cmocka_unit_test(test_concurrent),
        cmocka_unit_test(test_itl_batched),
        cmocka_unit_test(test_expert_load),
        cmocka_unit_test(test_spec_counters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
