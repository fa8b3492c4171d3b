/*
 * output: a step's sampled tokens to events (output.h).
 */
#include "output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy_small.h"

// ---------------------------------------------------------------------------------------------
// Events

/* Puts a stream with new events (or a lost FINISH to tell) in the step's list to publish. */
static inline void mark_pending(core_t *e, engine_stream_t *s) {
    if (s->pending) return;
    s->pending = true;
    s->next_pending = e->to_publish;
    e->to_publish = s;
}

/* Opens an event of choice q (see stream_open_event) and lists its stream for publication. */
static inline char *open_event(core_t *e, eng_choice_t *q, engine_event_type_t type,
                               const sampler_result_t *r, size_t text_max, evrec_t **out) {
    eng_req_t *req = q->req;
    char *p =
        stream_open_event(req->stream, q->b.choice, type, r, req->sp.logprobs >= 0, text_max, out);
    if (p) mark_pending(e, req->stream);
    return p;
}

/* An event with the step's token (r, may be NULL) and the text[0..len). */
static evrec_t *write_event(core_t *e, eng_choice_t *q, engine_event_type_t type,
                            const sampler_result_t *r, const char *text, size_t len) {
    evrec_t *rec;
    char *p = open_event(e, q, type, r, len, &rec);
    if (!p) return NULL;
    copy_small(p, text, len);
    stream_close_event(q->req->stream, rec, p, len);
    return rec;
}

/* One fence for all streams orders every publication before every look at a stream's waiters
 * (engine_stream_wait registers itself and looks again after a fence of its own, so no wakeup
 * is lost). */
void output_flush(core_t *e) {
    for (engine_stream_t *s = e->to_publish; s; s = s->next_pending)
        stream_publish(s);
    atomic_thread_fence(memory_order_seq_cst);
    while (e->to_publish) {
        engine_stream_t *s = e->to_publish;
        e->to_publish = s->next_pending;
        s->pending = false;
        stream_notify(s);
    }
}

// ---------------------------------------------------------------------------------------------
// Finishing and forking

void output_finish_choice(core_t *e, eng_choice_t *q, engine_finish_reason_t reason,
                          const sampler_result_t *r, int32_t stop_token, int stop_idx,
                          const char *error) {
    eng_req_t *req = q->req;
    if (q->finished) return;
    q->finished = true;
    if (q->started) sched_remove(e->sched, &q->b.s);
    batch_forget(&e->batch, &q->b);
    if (q->ts && stop_idx < 0) {
        size_t len = 0;
        tok_stream_finish(q->ts, q->pend + q->n_pend, q->cap_pend - q->n_pend, &len);
        q->n_pend += len;
    }
    double now = engine_now();
    const sched_seq_t *s = &q->b.s;
    int n_out = s->n_tokens - s->n_prompt;
    if (n_out < 0) n_out = 0;
    const sched_seq_t *first = &req->choices[0].b.s;
    stats_request_t sr = {
        .id = req->id,
        .choice = q->b.choice,
        .finish_reason = (int)reason,
        .prompt_tokens = first->n_prompt,
        .generation_tokens = n_out,
        .cached_tokens = first->cached_tokens,
        .queue_s = q->b.t_sched > 0 ? q->b.t_sched - req->arrival : -1,
        .ttft_s = q->t_first > 0 ? q->t_first - req->arrival : -1,
        .tpot_s = n_out > 1 ? (q->t_last - q->t_first) / (n_out - 1) : -1,
        .e2e_s = now - req->arrival,
        .t = now,
    };
    stats_record_request(e->stats, &sr);
    evrec_t *rec = NULL;
    if (!req->reader_decodes) {
        rec = write_event(e, q, ENGINE_EV_FINISH, r, q->pend ? q->pend : "", q->n_pend);
    } else if (open_event(e, q, ENGINE_EV_FINISH, r, READER_TEXT_ROOM - 1, &rec)) {
        /* the reader ends its detokenizer, after the token's text unless a stop id matched
         * that the output leaves out */
        bool token_text = r && (stop_token < 0 || req->sp.include_stop_str_in_output);
        rec->flags |= EVR_DECODE_FLUSH | (token_text ? EVR_DECODE_TOKEN : 0);
    }
    if (rec) {
        *stream_finish_fields(req->stream, rec) =
            (evfinish_t){.reason = (int32_t)reason,
                         .stop_token = stop_token,
                         .stop_str = stop_idx >= 0 ? strdup(req->sp.stop[stop_idx]) : NULL,
                         .error = error ? strdup(error) : NULL,
                         .prompt_tokens = sr.prompt_tokens,
                         .completion_tokens = n_out,
                         .cached_tokens = sr.cached_tokens,
                         .ttft_s = sr.ttft_s,
                         .e2e_s = sr.e2e_s};
    } else {
        /* the reader must still learn that the choice ended */
        req->stream->lost_finish++;
        mark_pending(e, req->stream);
        fprintf(stderr, "tachyon: engine: out of memory, a finish event was lost\n");
    }
    q->n_pend = 0;
    if (req->queued) {
        req->queued = false;
        atomic_fetch_sub(&e->n_queued, 1);
    }
    if (++req->n_finished == req->n) {
        req->stream->req = NULL;
        if (req->prev)
            req->prev->next = req->next;
        else if (e->live == req)
            e->live = req->next;
        if (req->next) req->next->prev = req->prev;
        req->next = req->prev = NULL;
        req->next_done = e->done;
        req->free_after = e->n_launched; /* what a step in flight names stays until it ends */
        e->done = req;
    }
}

void output_end_request(core_t *e, eng_req_t *req, engine_finish_reason_t reason,
                        const char *error) {
    for (int c = 0; c < req->n; c++)
        output_finish_choice(e, &req->choices[c], reason, NULL, -1, -1, error);
}

void output_fork_choices(core_t *e, eng_req_t *req) {
    sched_seq_t *parent = &req->choices[0].b.s;
    for (int c = 1; c < req->n; c++) {
        eng_choice_t *q = &req->choices[c];
        q->b.s.priority = parent->priority;
        q->b.s.arrival = parent->arrival;
        q->b.s.order = parent->order + (uint64_t)c;
        if (sched_fork(e->sched, parent, &q->b.s) < 0) {
            output_finish_choice(e, q, ENGINE_FINISH_ERROR, NULL, -1, -1, "out of memory");
            continue;
        }
        q->started = true;
        err_t err = {{0}};
        if (q->b.s.has_state &&
            e->be->ops->state_copy(e->be, parent->state_slot, q->b.s.state_slot, &err) < 0)
            output_finish_choice(e, q, ENGINE_FINISH_ERROR, NULL, -1, -1, err.msg);
    }
    req->n_started = req->n;
}

// ---------------------------------------------------------------------------------------------
// Stop strings

size_t output_held_back(const sampling_params_t *sp, const char *text, size_t n) {
    size_t h = 0;
    for (int i = 0; i < sp->n_stop; i++) {
        size_t len = strlen(sp->stop[i]);
        size_t k = len - 1 < n ? len - 1 : n;
        for (; k > h; k--)
            if (memcmp(text + n - k, sp->stop[i], k) == 0) break;
        if (k > h) h = k;
    }
    while (h > 0 && h < n && ((unsigned char)text[n - h] & 0xC0) == 0x80)
        h++;
    return h;
}

int output_find_stop(const sampling_params_t *sp, const char *text, size_t n, size_t *at) {
    int best = -1;
    for (int i = 0; i < sp->n_stop; i++) {
        const char *m = memmem(text, n, sp->stop[i], strlen(sp->stop[i]));
        if (m && (best < 0 || (size_t)(m - text) < *at)) {
            best = i;
            *at = (size_t)(m - text);
        }
    }
    return best;
}

// ---------------------------------------------------------------------------------------------
// Tokens

static bool has_id(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

void output_flush_itl(core_t *e) {
    for (int i = 0; i < e->n_itl; i++)
        stats_record_itl_n(e->stats, e->itl_v[i], e->itl_n[i]);
    e->n_itl = 0;
}

static void add_itl(core_t *e, double v) {
    for (int i = e->n_itl - 1; i >= 0; i--)
        if (e->itl_v[i] == v) {
            e->itl_n[i]++;
            return;
        }
    if (e->n_itl == 8) output_flush_itl(e);
    e->itl_v[e->n_itl] = v;
    e->itl_n[e->n_itl++] = 1;
}

void output_on_token(core_t *e, eng_choice_t *q, const sampler_result_t *r, double now) {
    eng_req_t *req = q->req;
    const sampling_params_t *sp = &req->sp;
    sched_seq_t *s = &q->b.s;
    if (sched_seq_append(s, r->token) < 0) {
        output_finish_choice(e, q, ENGINE_FINISH_ERROR, NULL, -1, -1, "out of memory");
        return;
    }
    int n_out = s->n_tokens - s->n_prompt;
    if (n_out == 1) {
        q->t_first = now;
        /* vLLM's prompt_tokens_total: a request's whole prompt, cached part included, counted
         * when its first token comes out */
        if (q->b.choice == 0) stats_add_prompt_tokens(e->stats, (uint64_t)s->n_prompt);
    } else {
        add_itl(e, now - q->t_last);
    }
    q->t_last = now;

    int reason = -1;
    int32_t stop_token = -1;
    if (s->n_tokens >= e->mml || n_out >= req->max_tokens) {
        reason = ENGINE_FINISH_LENGTH;
    } else if (n_out >= sp->min_tokens) {
        if ((!sp->ignore_eos && has_id(e->stop_ids, e->n_stop_ids, r->token)) ||
            has_id(sp->stop_token_ids, sp->n_stop_token_ids, r->token)) {
            reason = ENGINE_FINISH_STOP;
            stop_token = r->token;
        }
    }
    /* Without stop strings the reader detokenizes: the event carries the id. */
    if (reason < 0 && req->reader_decodes) {
        evrec_t *rec;
        if (!open_event(e, q, ENGINE_EV_DELTA, r, READER_TEXT_ROOM - 1, &rec)) {
            fprintf(stderr, "tachyon: engine: out of memory, a delta was lost\n");
            return;
        }
        rec->flags |= EVR_DECODE_TOKEN;
        return;
    }
    int stop_idx = -1;
    if (q->ts) {
        size_t len = 0;
        if (stop_token < 0 || sp->include_stop_str_in_output) {
            tok_stream_push(q->ts, r->token, q->pend + q->n_pend, q->cap_pend - q->n_pend, &len);
            q->n_pend += len;
        }
        size_t at = 0;
        if (len > 0 && n_out > sp->min_tokens && /* q->ts: the request has stop strings */
            (stop_idx = output_find_stop(sp, q->pend, q->n_pend, &at)) >= 0) {
            q->n_pend = at + (sp->include_stop_str_in_output ? strlen(sp->stop[stop_idx]) : 0);
            reason = ENGINE_FINISH_STOP;
            stop_token = -1;
        }
    }
    if (reason >= 0) {
        output_finish_choice(e, q, (engine_finish_reason_t)reason, r, stop_token, stop_idx, NULL);
        return;
    }
    size_t emit = q->n_pend - output_held_back(sp, q->pend, q->n_pend);
    if (!write_event(e, q, ENGINE_EV_DELTA, r, q->pend ? q->pend : "", emit)) {
        fprintf(stderr, "tachyon: engine: out of memory, a delta was lost\n");
        return; /* its text stays pending and goes out with the next one */
    }
    q->n_pend -= emit;
    if (q->n_pend > 0 && emit > 0) memmove(q->pend, q->pend + emit, q->n_pend);
}
