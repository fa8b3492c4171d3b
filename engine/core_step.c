/*
 * core_step: one synchronous step of the engine thread (core.c's loop: plan, lay out, forward,
 * sample, emit; speculative drafts and their verification through spec.h) and what the
 * asynchronous path (core_async.c) shares with it: emitting a sampled token, failing a step,
 * forking choices at their fork point, the step's stats record.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core_int.h"
#include "grow.h"
#include "output.h"
#include "spec.h"

bool core_nothing_planned(core_t *e, const sched_out_t *out) {
    e->stalled = out->n_preempted == 0;
    e->extra_preempted += out->n_preempted;
    return false;
}

const char *core_lay_out(core_t *e, const sched_out_t *out, double t0, be_batch_t *b,
                         batch_counts_t *counts, float **logits) {
    *logits = NULL;
    if (batch_build(&e->batch, out, t0, b, counts) < 0) return "building the batch";
    if (counts->prefix_queried > 0)
        stats_add_prefix(e->stats, counts->prefix_queried, counts->prefix_hit);
    if (e->be->ops->sample || b->n_logits == 0) return NULL;
    size_t need = (size_t)b->n_logits * (size_t)e->cfg->vocab_size;
    if (grow_array((void **)&e->logits, &e->cap_logits, need, sizeof *e->logits) < 0)
        return "allocating logits";
    *logits = e->logits;
    return NULL;
}

/* Every request with a sequence in the failed step ends with the error. */
void core_fail_step(core_t *e, const sched_out_t *out, const char *what, const char *msg) {
    spec_drop(e);
    fprintf(stderr, "tachyon: engine: %s failed: %s\n", what, msg);
    char buf[sizeof(((err_t *)0)->msg) + 32];
    snprintf(buf, sizeof buf, "%s failed: %s", what, msg);
    for (int i = 0; i < out->n; i++) {
        eng_req_t *req = choice_of(out->seqs[i])->req;
        if (req->n_finished < req->n) output_end_request(e, req, ENGINE_FINISH_ERROR, buf);
    }
}

/* A scripted request's next token replaces the sampled one; the model's EOS ends the script. */
static void script_token(const core_t *e, const eng_choice_t *q, sampler_result_t *r) {
    int n_out = q->b.s.n_tokens - q->b.s.n_prompt;
    r->token = n_out < q->req->n_scripted ? q->req->scripted[n_out] : e->stop_ids[0];
}

void core_emit_token(core_t *e, eng_choice_t *q, sampler_result_t *r, double now) {
    /* forks first: a choice 0 that ends on its first token still shares its prompt */
    if (q->b.choice == 0 && q->req->n_started < q->req->n) output_fork_choices(e, q->req);
    if (q->req->scripted) script_token(e, q, r);
    if (!q->finished) output_on_token(e, q, r, now);
}

/* Samples every row: on the device when the backend can, else on the host from the logits. */
static int sample_rows(core_t *e, const be_batch_t *b, err_t *err) {
    step_batch_t *sb = &e->batch;
    if (e->be->ops->sample)
        return e->be->ops->sample(e->be, sb->rows, b->n_logits, sb->results, err);
    core_host_sample(e, b->n_logits, sb->results);
    return 0;
}

void core_host_sample(core_t *e, int n_rows, sampler_result_t *out) {
    size_t vocab = (size_t)e->cfg->vocab_size;
    for (int l = 0; l < n_rows; l++)
        sampler_sample(e->smp, e->logits + (size_t)l * vocab, &e->batch.rows[l], &out[l]);
}

/* Forks the choices of requests whose choice 0 reached its fork point in this step. */
void core_fork_at_points(core_t *e, const sched_out_t *out) {
    for (int i = 0; i < out->n; i++) {
        sched_seq_t *seq = out->seqs[i];
        if (!seq->fork_pending || seq->n_computed != sched_fork_point(seq, e->f.block_size))
            continue;
        seq->fork_pending = false;
        output_fork_choices(e, choice_of(seq)->req);
    }
}

bool core_step(core_t *e, stats_step_t *st) {
    double t0 = engine_now();
    sched_out_t out;
    sched_seq_t *failed;
    e->spec_step_accepted = 0;
    spec_draft(e);
    while (sched_schedule(e->sched, &out, &failed) < 0) {
        spec_drop(e);
        output_end_request(e, choice_of(failed)->req, ENGINE_FINISH_ERROR, "out of memory");
    }
    spec_plan(e, &out);
    if (out.n == 0) return core_nothing_planned(e, &out);
    be_batch_t b;
    batch_counts_t counts = {0};
    err_t err = {{0}};
    double tf0 = 0, tf1 = 0;
    float *logits = NULL;
    const char *failing = core_lay_out(e, &out, t0, &b, &counts, &logits);
    if (failing) {
        core_fail_step(e, &out, failing, "out of memory");
        goto record;
    }
    /* The backend's time: the forward pass and the sampling math (on the device, or the host
     * sampler for backends without one); the rest of the step is the engine's own cost. */
    tf0 = engine_now();
    int rc = backend_forward(e->be, &b, logits, &err);
    if (rc < 0) {
        tf1 = engine_now();
        core_fail_step(e, &out, "the forward pass", err.msg);
        goto record;
    }
    rc = b.n_logits > 0 ? sample_rows(e, &b, &err) : 0;
    tf1 = engine_now();
    if (rc < 0) {
        core_fail_step(e, &out, "sampling", err.msg);
        goto record;
    }
    const bool *emit = spec_verify(e, &out, &b); /* NULL: every row */
    sched_advance(e->sched, &out);
    if (e->has_state) core_fork_at_points(e, &out);
    stats_add_generation_tokens(e->stats,
                                (uint64_t)(b.n_logits - counts.draft + e->spec_step_accepted));
    double now = engine_now();
    for (int l = 0; l < b.n_logits; l++) {
        if (emit && !emit[l]) continue;
        core_emit_token(e, choice_of(out.seqs[e->batch.logit_seq[l]]), &e->batch.results[l], now);
    }
    if (e->f.speculative_method == SPEC_MTP) { /* the head's passes count as the backend's */
        double tm0 = engine_now();
        spec_mtp(e, &out, &b);
        tf1 += engine_now() - tm0;
    }
record:
    core_step_stats(e, st, t0, tf1 - tf0, &out, &counts);
    return true;
}

void core_step_stats(core_t *e, stats_step_t *st, double t0, double backend_s,
                     const sched_out_t *out, const batch_counts_t *counts) {
    output_flush_itl(e);
    *st = (stats_step_t){.t = t0, /* the start, until record_step */
                         .forward_ms = (float)(backend_s * 1e3),
                         .running = out->n,
                         .waiting = sched_num_waiting(e->sched),
                         .kv_used = kv_used(e->kv),
                         .kv_total = e->num_blocks,
                         .state_used = e->num_slots - kv_state_available(e->kv),
                         .state_total = e->num_slots,
                         .prefill_tokens = counts->prefill,
                         .decode_tokens = counts->decode,
                         .draft_tokens = counts->draft,
                         .accepted = e->spec_step_accepted,
                         .preempted = out->n_preempted + e->extra_preempted};
    e->extra_preempted = 0;
}
