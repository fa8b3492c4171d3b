/*
 * core_async: asynchronous scheduling (--async-scheduling; vLLM's async scheduling, SGLang's
 * overlap scheduler). A step is planned, laid out and launched while the previous one still runs
 * on the device, and the previous step's samples are emitted while this one runs: the host's
 * work of a step (scheduling, batch layout, detokenizing, stop strings, stream events) overlaps
 * the device's instead of leaving it idle between steps.
 *
 * One call of core_async_step, with step P in flight (launched by the last call):
 *   1. every sequence that got a logit row in P, and surely needs another step, gets a
 *      placeholder as its last token: -(1 + r) for P's row r;
 *   2. the next step N is planned (the scheduler sees the placeholder as a token to compute),
 *      laid out and its forward launched; the device puts P's sampled ids in place of the
 *      placeholders (backend_ops_t.sample_begin), or with host sampling the engine does it
 *      before the forward;
 *   3. P's samples are taken (sample_end), then N's sampling is queued (sample_begin) or done
 *      on the host;
 *   4. P's tokens are emitted as a synchronous step emits them, each placeholder replaced by
 *      its real token first (no placeholder outlives the call). This may end sequences that N
 *      also computes: their rows of N are dropped when N completes;
 *   5. N's tokens are recorded as computed (sched_advance: the prefix cache hashes real ids).
 *
 * A sequence gets no placeholder, and so sits out step N, when P's token could change what is
 * sampled next or how (penalties read the output; a scripted reply replaces the sample; choices
 * still to fork), and when P's token ends it for sure (max_tokens, max-model-len). The outputs
 * are a synchronous engine's: the same tokens at the same rng positions (a sampler row's
 * n_output counts the placeholder, as it counts the token it stands for), the same events; what
 * it costs is one computed token, dropped, for a sequence that P ends on an EOS or a stop
 * string. A request that ends while a step in flight names it is freed once that step completes
 * (eng_req_t.free_after). The in-flight step completes (core_async_drain) before flags change,
 * the pool is rebuilt or the engine closes, and whenever the scheduler runs out of work.
 *
 * Engine thread only.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core_int.h"
#include "grow.h"
#include "output.h"

bool core_async_active(const core_t *e) {
    /* speculative steps verify drafts whose tokens the host needs first */
    if (e->f.async_scheduling == ASYNC_OFF || e->f.num_speculative_tokens > 0) return false;
    if (e->be->ops->sample_begin && e->be->ops->sample_end) return true;
    return e->f.async_scheduling == ASYNC_ON && !e->be->ops->sample;
}

void core_async_free(core_t *e) {
    for (int i = 0; i < 2; i++) {
        async_step_t *a = &e->async[i];
        free(a->seqs);
        free(a->logit_seq);
        free(a->results);
        memset(a, 0, sizeof *a);
    }
}

/* The step in flight, or NULL. */
static async_step_t *in_flight(core_t *e) {
    async_step_t *a = &e->async[e->async_cur];
    return a->active ? a : NULL;
}

/* Whether P's token, the choice's next, can be a placeholder in the next step's input. */
static bool can_go_ahead(const core_t *e, const eng_choice_t *q) {
    const sched_seq_t *s = &q->b.s;
    const eng_req_t *req = q->req;
    const sampling_params_t *sp = &req->sp;
    if (q->finished || s->state != SCHED_SEQ_RUNNING || s->fork_pending || req->scripted ||
        req->n_started < req->n)
        return false;
    if (sp->presence_penalty != 0.0f || sp->frequency_penalty != 0.0f ||
        sp->repetition_penalty != 1.0f)
        return false;
    int n_out = s->n_tokens - s->n_prompt + 1; /* with P's token */
    return s->n_tokens + 1 < e->mml && n_out < req->max_tokens;
}

static void drop_placeholder(eng_choice_t *q) {
    if (!q->placeholder) return;
    q->placeholder = false;
    q->b.s.n_tokens--;
}

/* Every placeholder the call made for a's rows goes (an early return). */
static void drop_placeholders(async_step_t *a) {
    for (int l = 0; l < a->n_logits; l++)
        drop_placeholder(choice_of(a->seqs[a->logit_seq[l]]));
}

/* Emits a's tokens (its samples are in a->results) and retires it. */
static void emit(core_t *e, async_step_t *a) {
    double now = engine_now();
    uint64_t emitted = 0;
    for (int l = 0; l < a->n_logits; l++) {
        eng_choice_t *q = choice_of(a->seqs[a->logit_seq[l]]);
        drop_placeholder(q);
        if (q->finished) continue; /* ended since a was launched: its row is dropped */
        core_emit_token(e, q, &a->results[l], now);
        emitted++;
    }
    stats_add_generation_tokens(e->stats, emitted);
    a->active = false;
    e->n_completed++;
}

/* Ends the requests of a's sequences with the error (a's samples are lost). */
static void fail(core_t *e, async_step_t *a, const char *what, const char *msg) {
    drop_placeholders(a);
    sched_out_t out = {.n = a->n, .seqs = a->seqs};
    core_fail_step(e, &out, what, msg);
    a->active = false;
    e->n_completed++;
}

/* Takes the samples of the step in flight, P (on the device: sample_end). */
static int take_samples(core_t *e, async_step_t *p) {
    if (!p->on_device) return 0;
    err_t err = {{0}};
    if (e->be->ops->sample_end(e->be, p->results, &err) == 0) return 0;
    fail(e, p, "sampling", err.msg);
    return -1;
}

void core_async_drain(core_t *e) {
    async_step_t *p = in_flight(e);
    if (p && take_samples(e, p) == 0) emit(e, p);
}

/* The next step failed before it was launched: its requests end with the error; the step in
 * flight, P, completes without its placeholders. */
static void fail_launch(core_t *e, async_step_t *p, const sched_out_t *out, const char *what,
                        const char *msg) {
    if (p) drop_placeholders(p);
    core_fail_step(e, out, what, msg);
    core_async_drain(e);
}

/* Copies the plan and the logit rows' owners into a (the scheduler's and the batch's arrays are
 * reused by the next step). -1 when out of memory. */
static int keep_plan(core_t *e, async_step_t *a, const sched_out_t *out, int n_logits) {
    if (GROW(a->seqs, a->cap_seqs, out->n) < 0 ||
        GROW(a->logit_seq, a->cap_logit_seq, n_logits) < 0 ||
        GROW(a->results, a->cap_results, n_logits) < 0)
        return -1;
    a->n = out->n;
    memcpy(a->seqs, out->seqs, (size_t)out->n * sizeof *a->seqs);
    a->n_logits = n_logits;
    if (n_logits > 0) /* (a prefill chunk's step has none: no array yet) */
        memcpy(a->logit_seq, e->batch.logit_seq, (size_t)n_logits * sizeof *a->logit_seq);
    return 0;
}

bool core_async_step(core_t *e, stats_step_t *st) {
    double t0 = engine_now();
    async_step_t *p = in_flight(e);
    async_step_t *n = &e->async[1 - e->async_cur];
    const bool on_device = e->be->ops->sample_begin != NULL;

    /* 1. placeholders for P's tokens */
    if (p)
        for (int l = 0; l < p->n_logits; l++) {
            eng_choice_t *q = choice_of(p->seqs[p->logit_seq[l]]);
            if (can_go_ahead(e, q) && sched_seq_append(&q->b.s, -1 - l) == 0) q->placeholder = true;
        }

    /* 2. plan, lay out and launch N */
    sched_out_t out;
    sched_seq_t *failed;
    while (sched_schedule(e->sched, &out, &failed) < 0) {
        eng_req_t *req = choice_of(failed)->req;
        for (int c = 0; c < req->n_started; c++)
            drop_placeholder(&req->choices[c]);
        output_end_request(e, req, ENGINE_FINISH_ERROR, "out of memory");
    }
    if (out.n == 0) {
        if (!p) return core_nothing_planned(e, &out);
        if (take_samples(e, p) == 0) emit(e, p);
        e->extra_preempted += out.n_preempted;
        output_flush_itl(e);
        return false; /* P's tokens are new work: not stalled */
    }
    be_batch_t b;
    batch_counts_t counts = {0};
    err_t err = {{0}};
    double tf = 0;
    int placeholders = 0;
    float *logits = NULL;
    const char *failing = core_lay_out(e, &out, t0, &b, &counts, &logits);
    if (!failing && keep_plan(e, n, &out, b.n_logits) < 0) failing = "building the batch";
    if (failing) {
        fail_launch(e, p, &out, failing, "out of memory");
        goto record;
    }
    for (int t = 0; t < b.n_tokens; t++) {
        int32_t id = b.token_ids[t];
        if (id >= 0) continue;
        placeholders++;
        if (!on_device) e->batch.tokens[t] = p->results[-1 - id].token; /* sampled at launch */
    }
    b.n_placeholder_rows = on_device && placeholders ? p->n_logits : 0; /* none: no scan there */
    double tf0 = engine_now();
    int rc = backend_forward(e->be, &b, logits, &err);
    tf += engine_now() - tf0;
    if (rc < 0) {
        fail_launch(e, p, &out, "the forward pass", err.msg);
        goto record;
    }

    /* 3. P's samples, then N's sampling */
    tf0 = engine_now();
    rc = p ? take_samples(e, p) : 0;
    if (rc == 0 && on_device)
        rc = e->be->ops->sample_begin(e->be, e->batch.rows, b.n_logits, &err);
    else if (rc == 0)
        core_host_sample(e, b.n_logits, n->results);
    tf += engine_now() - tf0;
    if (rc < 0) {
        if (p && p->active) { /* P's samples came, N's sampling failed */
            emit(e, p);
        }
        core_fail_step(e, &out, "sampling", err.msg[0] ? err.msg : "the previous step failed");
        goto record;
    }
    n->on_device = on_device;
    n->active = true;
    e->n_launched++;

    /* 4. P's tokens */
    if (p) emit(e, p);
    e->async_cur = (int)(n - e->async);

    /* 5. N's tokens computed */
    sched_advance(e->sched, &out);
    if (e->has_state) core_fork_at_points(e, &out);
    stats_add_ahead(e->stats, p ? 1 : 0, (uint64_t)placeholders);
    if (!sched_has_work(e->sched)) core_async_drain(e); /* nothing left to overlap with */
record:
    e->spec_step_accepted = 0;
    core_step_stats(e, st, t0, tf, &out, &counts);
    return true;
}
