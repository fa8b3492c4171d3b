/*
 * stats_merge: one snapshot from the snapshots of a data-parallel engine's replicas (stats.h).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

static void add_hist(stats_hist_t *to, const stats_hist_t *h) {
    if (to->n_bounds == 0)
        to->n_bounds = h->n_bounds, memcpy(to->bounds, h->bounds, sizeof to->bounds);
    for (int b = 0; b <= STATS_MAX_BUCKETS; b++)
        to->counts[b] += h->counts[b];
    to->count += h->count;
    to->sum += h->sum;
}

static int by_arrival(const void *a, const void *b) {
    double x = ((const stats_active_t *)a)->arrival, y = ((const stats_active_t *)b)->arrival;
    return (x > y) - (x < y);
}

static int by_finish(const void *a, const void *b) {
    double x = ((const stats_finished_t *)a)->t, y = ((const stats_finished_t *)b)->t;
    return (x > y) - (x < y);
}

/* The replicas' step rings merged by time. A merged step is one replica's step, its tokens and
 * times as they were, its gauges the sum of every replica's gauges as of then (each replica's
 * last step before it), so that a chart of running sequences or KV use shows the engine's. */
static void merge_steps(stats_snapshot_t *out, stats_snapshot_t *const *parts, int n) {
    int at[STATS_MERGE_MAX] = {0};
    stats_step_t last[STATS_MERGE_MAX];
    memset(last, 0, sizeof last);
    int total = 0;
    for (int i = 0; i < n; i++)
        total += parts[i]->n_steps;
    int skip = total > STATS_RING ? total - STATS_RING : 0;
    out->n_steps = 0;
    for (int k = 0; k < total; k++) {
        int from = -1;
        for (int i = 0; i < n; i++)
            if (at[i] < parts[i]->n_steps &&
                (from < 0 || parts[i]->steps_ring[at[i]].t < parts[from]->steps_ring[at[from]].t))
                from = i;
        last[from] = parts[from]->steps_ring[at[from]++];
        if (k < skip) continue;
        stats_step_t st = last[from];
        st.running = st.waiting = st.kv_used = st.kv_total = st.state_used = st.state_total = 0;
        for (int i = 0; i < n; i++) {
            /* a replica without a step yet counts its pool from its gauges */
            const stats_step_t *g = &last[i];
            bool none = g->t == 0;
            st.running += g->running;
            st.waiting += g->waiting;
            st.kv_used += g->kv_used;
            st.kv_total += none ? parts[i]->kv_total : g->kv_total;
            st.state_used += g->state_used;
            st.state_total += none ? parts[i]->state_total : g->state_total;
        }
        out->steps_ring[out->n_steps++] = st;
    }
}

void stats_merge(stats_snapshot_t *out, stats_snapshot_t *const *parts, int n) {
    memset(out, 0, sizeof *out);
    if (n > STATS_MERGE_MAX) n = STATS_MERGE_MAX;
    int n_recent = 0;
    for (int i = 0; i < n; i++) {
        const stats_snapshot_t *p = parts[i];
        out->running += p->running;
        out->waiting += p->waiting;
        out->kv_used += p->kv_used;
        out->kv_total += p->kv_total;
        out->state_used += p->state_used;
        out->state_total += p->state_total;
        out->steps += p->steps;
        out->prompt_tokens += p->prompt_tokens;
        out->generation_tokens += p->generation_tokens;
        out->preemptions += p->preemptions;
        out->prefix_queries += p->prefix_queries;
        out->prefix_hits += p->prefix_hits;
        out->steps_ahead += p->steps_ahead;
        out->tokens_ahead += p->tokens_ahead;
        for (int r = 0; r < 4; r++)
            out->requests_finished[r] += p->requests_finished[r];
        out->requests_submitted += p->requests_submitted;
        out->spec_drafts += p->spec_drafts;
        out->spec_draft_tokens += p->spec_draft_tokens;
        out->spec_accepted_tokens += p->spec_accepted_tokens;
        for (int k = 0; k < STATS_SPEC_POS; k++)
            out->spec_accepted_per_pos[k] += p->spec_accepted_per_pos[k];
        if (p->spec_k > out->spec_k) out->spec_k = p->spec_k;
        add_hist(&out->ttft, &p->ttft);
        add_hist(&out->tpot, &p->tpot);
        add_hist(&out->itl, &p->itl);
        add_hist(&out->e2e, &p->e2e);
        add_hist(&out->queue, &p->queue);
        add_hist(&out->prefill_time, &p->prefill_time);
        add_hist(&out->decode_time, &p->decode_time);
        add_hist(&out->inference_time, &p->inference_time);
        add_hist(&out->iteration_tokens, &p->iteration_tokens);
        out->n_active_total += p->n_active_total;
        if (p->active_t > out->active_t) out->active_t = p->active_t;
        n_recent += p->n_recent;
        /* expert load: the same layers and experts on every replica */
        const stats_experts_t *x = &p->experts;
        if (x->n_layers && !out->experts.n_layers) {
            out->experts.n_layers = x->n_layers;
            out->experts.n_experts = x->n_experts;
            memcpy(out->experts.layer, x->layer, sizeof x->layer);
            out->experts.window_s = x->window_s;
        }
        if (x->n_layers == out->experts.n_layers && x->n_experts == out->experts.n_experts) {
            for (int c = 0; c < x->n_layers * x->n_experts; c++) {
                out->experts.total[c] += x->total[c];
                out->experts.window[c] += x->window[c];
            }
            if (x->t > out->experts.t) out->experts.t = x->t;
        }
    }
    /* live choices: every replica's, the oldest STATS_MAX_ACTIVE */
    stats_active_t *live = malloc((size_t)n * STATS_MAX_ACTIVE * sizeof *live);
    if (live) {
        int m = 0;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < parts[i]->n_active; k++)
                live[m++] = parts[i]->active[k];
        qsort(live, (size_t)m, sizeof *live, by_arrival);
        out->n_active = m < STATS_MAX_ACTIVE ? m : STATS_MAX_ACTIVE;
        memcpy(out->active, live, (size_t)out->n_active * sizeof *live);
        free(live);
    }
    /* finished choices: every replica's, the newest STATS_RECENT, oldest first */
    stats_finished_t *all = malloc((size_t)(n_recent ? n_recent : 1) * sizeof *all);
    if (all) {
        int m = 0;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < parts[i]->n_recent; k++)
                all[m++] = parts[i]->recent[k];
        qsort(all, (size_t)m, sizeof *all, by_finish);
        int from = m > STATS_RECENT ? m - STATS_RECENT : 0;
        memcpy(out->recent, all + from, (size_t)(m - from) * sizeof *all);
        out->n_recent = m - from;
        free(all);
    }
    merge_steps(out, parts, n);
}
