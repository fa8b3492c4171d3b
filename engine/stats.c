#include "stats.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's bucket bounds (vllm/v1/metrics/loggers.py, as listed in
 * shared/reference/server-and-bench.md section 2), so that dashboards built for vLLM read ours
 * unchanged. The per-token latency buckets serve both TPOT and inter-token latency. */
static const double TTFT_BOUNDS[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                     0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                     20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double TOKEN_BOUNDS[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                      0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
/* vLLM's vllm:iteration_tokens_total buckets (tokens per engine step). */
static const double ITERATION_BOUNDS[] = {1,   8,    16,   32,   64,   128,  256,
                                          512, 1024, 2048, 4096, 8192, 16384};
static const double REQUEST_BOUNDS[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                        5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                        60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The expert-load window: per-second buckets of routed tokens, summed into head.experts.window
 * as they come and subtracted as they expire. */
typedef struct expert_ring {
    uint32_t bucket[STATS_EXPERT_WINDOW][STATS_EXPERT_CELLS];
    int64_t second[STATS_EXPERT_WINDOW]; /* the second a bucket holds; -1: empty */
    uint64_t last[STATS_EXPERT_CELLS];   /* the totals of the previous record */
    double t0;                           /* when tracking started */
} expert_ring_t;

struct stats {
    pthread_mutex_t mu;
    expert_ring_t *experts; /* NULL unless an MoE model is tracked */
    /* Everything in snapshot form, except that steps_ring is written round: slot `next` takes
     * the next step, and the snapshot rotates its copy oldest first after letting go of the
     * lock. n_steps counts the steps held (<= STATS_RING). */
    stats_snapshot_t head;
    int next;
};

static void hist_init(stats_hist_t *h, const double *bounds, int n) {
    memset(h, 0, sizeof *h);
    h->n_bounds = n;
    memcpy(h->bounds, bounds, (size_t)n * sizeof bounds[0]);
}

/* Prometheus `le` semantics: v goes to the first bucket whose bound is >= v. */
/* Records `n` observations of the value v. */
static void hist_observe_n(stats_hist_t *h, double v, uint64_t n) {
    if (!(v >= 0)) return;        /* negative: not measured; NaN: never a latency */
    int lo = 0, hi = h->n_bounds; /* answer in [lo, hi]; hi = n_bounds is +Inf */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v <= h->bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    h->counts[lo] += n;
    h->count += n;
    h->sum += v * (double)n;
}

static void hist_observe(stats_hist_t *h, double v) {
    hist_observe_n(h, v, 1);
}

stats_t *stats_create(void) {
    stats_t *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    if (pthread_mutex_init(&st->mu, NULL) != 0) {
        free(st);
        return NULL;
    }
    hist_init(&st->head.ttft, TTFT_BOUNDS, N_OF(TTFT_BOUNDS));
    hist_init(&st->head.tpot, TOKEN_BOUNDS, N_OF(TOKEN_BOUNDS));
    hist_init(&st->head.itl, TOKEN_BOUNDS, N_OF(TOKEN_BOUNDS));
    hist_init(&st->head.e2e, REQUEST_BOUNDS, N_OF(REQUEST_BOUNDS));
    hist_init(&st->head.queue, REQUEST_BOUNDS, N_OF(REQUEST_BOUNDS));
    hist_init(&st->head.prefill_time, REQUEST_BOUNDS, N_OF(REQUEST_BOUNDS));
    hist_init(&st->head.decode_time, REQUEST_BOUNDS, N_OF(REQUEST_BOUNDS));
    hist_init(&st->head.inference_time, REQUEST_BOUNDS, N_OF(REQUEST_BOUNDS));
    hist_init(&st->head.iteration_tokens, ITERATION_BOUNDS, N_OF(ITERATION_BOUNDS));
    return st;
}

void stats_destroy(stats_t *st) {
    if (!st) return;
    pthread_mutex_destroy(&st->mu);
    free(st->experts);
    free(st);
}

void stats_record_step(stats_t *st, const stats_step_t *step) {
    pthread_mutex_lock(&st->mu);
    stats_snapshot_t *h = &st->head;
    h->steps_ring[st->next] = *step;
    st->next = (st->next + 1) % STATS_RING;
    if (h->n_steps < STATS_RING) h->n_steps++;
    h->running = step->running;
    h->waiting = step->waiting;
    h->kv_used = step->kv_used;
    h->kv_total = step->kv_total;
    h->state_used = step->state_used;
    h->state_total = step->state_total;
    h->steps++;
    if (step->preempted > 0) h->preemptions += (uint64_t)step->preempted;
    int tokens = step->prefill_tokens + step->decode_tokens;
    if (tokens > 0) hist_observe(&h->iteration_tokens, tokens);
    pthread_mutex_unlock(&st->mu);
}

void stats_set_kv(stats_t *st, int used, int total) {
    pthread_mutex_lock(&st->mu);
    st->head.kv_used = used;
    st->head.kv_total = total;
    pthread_mutex_unlock(&st->mu);
}

void stats_record_request(stats_t *st, const stats_request_t *req) {
    pthread_mutex_lock(&st->mu);
    stats_snapshot_t *h = &st->head;
    if (req->finish_reason >= 0 && req->finish_reason < N_OF(h->requests_finished))
        h->requests_finished[req->finish_reason]++;
    hist_observe(&h->queue, req->queue_s);
    hist_observe(&h->ttft, req->ttft_s);
    hist_observe(&h->tpot, req->tpot_s);
    hist_observe(&h->e2e, req->e2e_s);
    if (req->ttft_s >= 0 && req->queue_s >= 0)
        hist_observe(&h->prefill_time, req->ttft_s - req->queue_s);
    if (req->e2e_s >= 0 && req->ttft_s >= 0)
        hist_observe(&h->decode_time, req->e2e_s - req->ttft_s);
    if (req->e2e_s >= 0 && req->queue_s >= 0)
        hist_observe(&h->inference_time, req->e2e_s - req->queue_s);
    if (h->n_recent == STATS_RECENT) /* full: the oldest goes */
        memmove(h->recent, h->recent + 1, (STATS_RECENT - 1) * sizeof h->recent[0]);
    else
        h->n_recent++;
    stats_finished_t *f = &h->recent[h->n_recent - 1];
    snprintf(f->id, sizeof f->id, "%s", req->id ? req->id : "");
    f->choice = req->choice;
    f->finish_reason = req->finish_reason;
    f->prompt_tokens = req->prompt_tokens;
    f->generated = req->generation_tokens;
    f->ttft_s = req->ttft_s;
    f->e2e_s = req->e2e_s;
    f->t = req->t;
    pthread_mutex_unlock(&st->mu);
}

void stats_record_itl(stats_t *st, double itl_s) {
    stats_record_itl_n(st, itl_s, 1);
}

void stats_record_itl_n(stats_t *st, double itl_s, uint64_t n) {
    pthread_mutex_lock(&st->mu);
    hist_observe_n(&st->head.itl, itl_s, n);
    pthread_mutex_unlock(&st->mu);
}

void stats_record_active(stats_t *st, const stats_active_t *a, int n, int n_total, double t) {
    if (n > STATS_MAX_ACTIVE) n = STATS_MAX_ACTIVE;
    pthread_mutex_lock(&st->mu);
    memcpy(st->head.active, a, (size_t)n * sizeof *a);
    st->head.n_active = n;
    st->head.n_active_total = n_total;
    st->head.active_t = t;
    pthread_mutex_unlock(&st->mu);
}

void stats_add_submitted(stats_t *st, uint64_t n) {
    pthread_mutex_lock(&st->mu);
    st->head.requests_submitted += n;
    pthread_mutex_unlock(&st->mu);
}

void stats_add_prompt_tokens(stats_t *st, uint64_t prompt) {
    pthread_mutex_lock(&st->mu);
    st->head.prompt_tokens += prompt;
    pthread_mutex_unlock(&st->mu);
}

void stats_add_generation_tokens(stats_t *st, uint64_t sampled) {
    pthread_mutex_lock(&st->mu);
    st->head.generation_tokens += sampled;
    pthread_mutex_unlock(&st->mu);
}

void stats_add_ahead(stats_t *st, uint64_t steps, uint64_t tokens) {
    pthread_mutex_lock(&st->mu);
    st->head.steps_ahead += steps;
    st->head.tokens_ahead += tokens;
    pthread_mutex_unlock(&st->mu);
}

void stats_add_prefix(stats_t *st, uint64_t queried, uint64_t hit) {
    pthread_mutex_lock(&st->mu);
    st->head.prefix_queries += queried;
    st->head.prefix_hits += hit;
    pthread_mutex_unlock(&st->mu);
}

int stats_experts_init(stats_t *st, int n_layers, int n_experts, const int *layers, double t) {
    if (n_layers < 1 || n_experts < 1 || n_layers > STATS_EXPERT_LAYERS ||
        (int64_t)n_layers * n_experts > STATS_EXPERT_CELLS)
        return -1;
    expert_ring_t *r = calloc(1, sizeof *r);
    if (!r) return -1;
    for (int i = 0; i < STATS_EXPERT_WINDOW; i++)
        r->second[i] = -1;
    r->t0 = t;
    pthread_mutex_lock(&st->mu);
    free(st->experts);
    st->experts = r;
    stats_experts_t *x = &st->head.experts;
    memset(x, 0, sizeof *x);
    x->n_layers = n_layers;
    x->n_experts = n_experts;
    for (int i = 0; i < n_layers; i++)
        x->layer[i] = (int16_t)layers[i];
    x->t = t;
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* Drops the buckets that have left the window by second `sec` (under mu). */
static void expire_experts(expert_ring_t *r, stats_experts_t *x, int64_t sec) {
    int cells = x->n_layers * x->n_experts;
    for (int b = 0; b < STATS_EXPERT_WINDOW; b++)
        if (r->second[b] >= 0 && r->second[b] <= sec - STATS_EXPERT_WINDOW) {
            for (int c = 0; c < cells; c++)
                x->window[c] -= r->bucket[b][c];
            memset(r->bucket[b], 0, (size_t)cells * sizeof r->bucket[b][0]);
            r->second[b] = -1;
        }
}

void stats_age_experts(stats_t *st, double now) {
    pthread_mutex_lock(&st->mu);
    if (st->experts) expire_experts(st->experts, &st->head.experts, (int64_t)floor(now));
    pthread_mutex_unlock(&st->mu);
}

void stats_record_experts(stats_t *st, const uint64_t *total, double t) {
    pthread_mutex_lock(&st->mu);
    expert_ring_t *r = st->experts;
    stats_experts_t *x = &st->head.experts;
    if (!r) {
        pthread_mutex_unlock(&st->mu);
        return;
    }
    int cells = x->n_layers * x->n_experts;
    int64_t sec = (int64_t)floor(t);
    expire_experts(r, x, sec);
    int b = (int)(sec % STATS_EXPERT_WINDOW);
    r->second[b] = sec;
    for (int c = 0; c < cells; c++) {
        uint32_t d = (uint32_t)(total[c] - r->last[c]);
        r->bucket[b][c] += d;
        x->window[c] += d;
        x->total[c] = r->last[c] = total[c];
    }
    double span = t - r->t0;
    x->window_s = span < STATS_EXPERT_WINDOW ? span : STATS_EXPERT_WINDOW;
    x->t = t;
    pthread_mutex_unlock(&st->mu);
}

static void reverse(stats_step_t *a, int n) {
    for (int i = 0, j = n - 1; i < j; i++, j--) {
        stats_step_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void stats_snapshot(stats_t *st, stats_snapshot_t *out) {
    pthread_mutex_lock(&st->mu);
    *out = st->head;
    int next = st->next;
    pthread_mutex_unlock(&st->mu);
    /* A full ring's oldest step sits at `next`: rotate left by next (three reversals, in
     * place), outside the lock. A ring not yet full starts at slot 0 already. */
    if (out->n_steps == STATS_RING && next != 0) {
        reverse(out->steps_ring, next);
        reverse(out->steps_ring + next, STATS_RING - next);
        reverse(out->steps_ring, STATS_RING);
    }
}

double stats_hist_quantile(const stats_hist_t *h, double q) {
    if (h->count == 0 || !(q >= 0 && q <= 1)) return NAN;
    double rank = q * (double)h->count;
    uint64_t below = 0; /* observations in the buckets before b */
    int b = 0;
    /* The first finite bucket whose cumulative count reaches rank; a non-empty one, so that
     * q = 0 lands where the smallest observation is instead of dividing 0 by 0. */
    for (; b < h->n_bounds; b++) {
        uint64_t cum = below + h->counts[b];
        if (h->counts[b] > 0 && (double)cum >= rank) break;
        below = cum;
    }
    if (b == h->n_bounds) return h->n_bounds > 0 ? h->bounds[h->n_bounds - 1] : NAN;
    double start = b > 0 ? h->bounds[b - 1] : 0.0;
    double end = h->bounds[b];
    if (b == 0 && end <= 0) return end;
    return start + (end - start) * ((rank - (double)below) / (double)h->counts[b]);
}

void stats_add_spec(stats_t *st, uint64_t drafts, uint64_t draft_tokens, uint64_t accepted,
                    const uint64_t *accepted_per_pos, int n_pos) {
    if (n_pos > STATS_SPEC_POS) n_pos = STATS_SPEC_POS;
    pthread_mutex_lock(&st->mu);
    st->head.spec_drafts += drafts;
    st->head.spec_draft_tokens += draft_tokens;
    st->head.spec_accepted_tokens += accepted;
    for (int j = 0; j < n_pos; j++)
        st->head.spec_accepted_per_pos[j] += accepted_per_pos[j];
    if (n_pos > st->head.spec_k) st->head.spec_k = n_pos;
    pthread_mutex_unlock(&st->mu);
}

double stats_spec_acceptance_rate(const stats_snapshot_t *s) {
    if (s->spec_draft_tokens == 0) return NAN;
    return (double)s->spec_accepted_tokens / (double)s->spec_draft_tokens;
}

double stats_spec_mean_length(const stats_snapshot_t *s) {
    if (s->spec_drafts == 0) return NAN;
    return 1.0 + (double)s->spec_accepted_tokens / (double)s->spec_drafts;
}

void stats_rates(const stats_snapshot_t *s, double window_s, double *prompt_tps, double *gen_tps) {
    *prompt_tps = 0;
    *gen_tps = 0;
    if (s->n_steps == 0 || !(window_s > 0)) return;
    double last = s->steps_ring[s->n_steps - 1].t;
    double from = last - window_s;
    int i = 0;
    while (i < s->n_steps && s->steps_ring[i].t <= from)
        i++;
    double span = window_s;
    if (i == 0 && s->n_steps == STATS_RING) {
        /* The ring starts inside the window and steps before it were dropped: measure from the
         * oldest step's end, so its own tokens (done before then) are left out too. */
        span = last - s->steps_ring[0].t;
        i = 1;
        if (!(span > 0)) return;
    }
    uint64_t prompt = 0, gen = 0;
    for (; i < s->n_steps; i++) {
        if (s->steps_ring[i].prefill_tokens > 0)
            prompt += (uint64_t)s->steps_ring[i].prefill_tokens;
        if (s->steps_ring[i].decode_tokens > 0) gen += (uint64_t)s->steps_ring[i].decode_tokens;
        if (s->steps_ring[i].accepted > 0) gen += (uint64_t)s->steps_ring[i].accepted;
    }
    *prompt_tps = (double)prompt / span;
    *gen_tps = (double)gen / span;
}
