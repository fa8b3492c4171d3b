/*
 * stream: the single-producer event queue of one request (stream.h for readers, stream_int.h
 * for the engine thread).
 */
#include "stream_int.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copy_small.h"

#define SEG_BIAS  (1 << 30)
#define SEG_FRESH (SEG_BIAS + 1)

const char *engine_finish_reason_name(engine_finish_reason_t r) {
    switch (r) {
        case ENGINE_FINISH_STOP:
            return "stop";
        case ENGINE_FINISH_LENGTH:
            return "length";
        case ENGINE_FINISH_ABORT:
            return "abort";
        case ENGINE_FINISH_ERROR:
            return "error";
    }
    return "unknown";
}

enum { SEG_FIRST = 8, SEG_MAX = 64, ARENA_PER_EVENT = 64 };

static evseg_t *seg_create(int cap, size_t arena) {
    evseg_t *g =
        aligned_alloc(64, (SEG_HEAD + (size_t)cap * sizeof(evrec_t) + arena + 63) & ~(size_t)63);
    if (!g) return NULL;
    atomic_init(&g->refs, SEG_FRESH);
    atomic_init(&g->n_pub, 0);
    atomic_init(&g->next, NULL);
    g->pnext = NULL;
    g->cap = cap;
    g->n_written = 0;
    g->arena_cap = arena;
    g->arena_used = 0;
    g->arena = (char *)(SEG_RECS(g) + cap);
    return g;
}

static void seg_unref(evseg_t *g, int n) {
    if (atomic_fetch_sub(&g->refs, n) == n) free(g);
}

/* Where a record's text starts in its segment's arena. */
static char *rec_text(const evseg_t *g, const evrec_t *rec) {
    return g->arena + rec->off + (size_t)rec->n_lp * sizeof(engine_token_logprob_t) +
           (rec->flags & EVR_TOKEN ? sizeof(int32_t) : 0);
}

/* A FINISH record's evfinish_t: after the text room (text_len bytes and a NUL, or
 * READER_TEXT_ROOM when the reader decodes), at a multiple of 8. */
static evfinish_t *rec_finish(const evseg_t *g, const evrec_t *rec) {
    size_t room = rec->flags & EVR_READER_TEXT ? READER_TEXT_ROOM : (size_t)rec->text_len + 1;
    return (evfinish_t *)(((uintptr_t)rec_text(g, rec) + room + 7) & ~(uintptr_t)7);
}

/* The reader's part of a record it decodes: the token's text and/or the detokenizer's
 * unfinished bytes, in the record's room when they fit, else in an allocation of the event's
 * own (ev->text_mem_). Under s->mu. */
static void decode_text(engine_stream_t *s, const evrec_t *rec, engine_event_t *ev) {
    tok_stream_t *ts = s->ts[rec->choice];
    size_t len = 0, n = 0;
    if ((rec->flags & EVR_DECODE_TOKEN) &&
        tok_stream_push(ts, ev->token_ids[0], s->scratch, s->cap_scratch, &n) == 0)
        len = n;
    if ((rec->flags & EVR_DECODE_FLUSH) &&
        tok_stream_finish(ts, s->scratch + len, s->cap_scratch - len, &n) == 0)
        len += n;
    char *text = ev->text;
    if (len >= READER_TEXT_ROOM) {
        if (!(text = ev->text_mem_ = malloc(len + 1))) {
            fprintf(stderr, "tachyon: engine: out of memory, a delta's text was lost\n");
            ev->text[0] = '\0';
            return;
        }
        ev->text = text;
    }
    copy_small(text, s->scratch, len);
    text[len] = '\0';
    ev->text_len = len;
}

/* The event a record stands for; it holds a reference to the segment (ev->mem_), and takes the
 * FINISH's strings. The text is decoded when the reader detokenizes the stream and `decode`
 * is set (not for events that are only cleared). */
static void expand(engine_stream_t *s, evseg_t *g, const evrec_t *rec, engine_event_t *ev,
                   bool decode) {
    char *p = g->arena + rec->off; /* logprobs, then the token id, then the text */
    *ev = (engine_event_t){.type = (engine_event_type_t)rec->type,
                           .choice = rec->choice,
                           .text = rec_text(g, rec),
                           .text_len = rec->text_len,
                           .stop_token = -1,
                           .mem_ = g};
    if (rec->n_lp) {
        ev->logprobs = (engine_token_logprob_t *)p;
        ev->n_top = rec->n_lp - 1;
    }
    if (rec->flags & EVR_TOKEN) {
        ev->token_ids = (int32_t *)(p + (size_t)rec->n_lp * sizeof(engine_token_logprob_t));
        ev->n_tokens = 1;
    }
    if (rec->type == ENGINE_EV_FINISH) {
        evfinish_t *f = rec_finish(g, rec);
        ev->reason = (engine_finish_reason_t)f->reason;
        ev->stop_token = f->stop_token;
        ev->stop_str = f->stop_str;
        ev->error = f->error;
        ev->prompt_tokens = f->prompt_tokens;
        ev->completion_tokens = f->completion_tokens;
        ev->cached_tokens = f->cached_tokens;
        ev->ttft_s = f->ttft_s;
        ev->e2e_s = f->e2e_s;
        f->stop_str = f->error = NULL;
    }
    if (decode && (rec->flags & EVR_READER_TEXT)) decode_text(s, rec, ev);
}

void engine_event_clear(engine_event_t *ev) {
    if (!ev) return;
    if (ev->mem_) seg_unref(ev->mem_, 1);
    free(ev->text_mem_);
    free(ev->stop_str);
    free(ev->error);
    memset(ev, 0, sizeof *ev);
}

/* Frees the stream when its last holder lets go; events never taken are cleared, and
 * segments still holding taken events are left to the last engine_event_clear. */
void stream_unref(engine_stream_t *s) {
    if (atomic_fetch_sub(&s->refs, 1) != 1) return;
    int from = s->cidx;
    for (evseg_t *g = s->chead; g; g = g->pnext, from = 0) { /* the reader's part */
        int n = g->n_written;
        for (int i = from; i < n; i++) {
            engine_event_t ev;
            expand(s, g, &SEG_RECS(g)[i], &ev, false);
            engine_event_clear(&ev);
        }
        atomic_fetch_sub(&g->refs, SEG_BIAS - n);
    }
    for (evseg_t *g = s->oldest, *next; g; g = next) { /* the stream's part */
        next = g->pnext;
        seg_unref(g, 1);
    }
    if (s->ts)
        for (int c = 0; c < s->n_choices; c++)
            tok_stream_destroy(s->ts[c]);
    free(s->ts);
    free(s->scratch);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

engine_stream_t *stream_create(int n_choices, void (*wake)(void *ctx), void *wake_ctx,
                               const tokenizer_t *reader_tok, bool skip_special) {
    engine_stream_t *s = aligned_alloc(alignof(engine_stream_t), sizeof *s);
    if (!s) return NULL;
    memset(s, 0, sizeof *s);
    s->oldest = s->chead = s->ptail = s->pub = seg_create(SEG_FIRST, SEG_FIRST * ARENA_PER_EVENT);
    if (!s->chead) {
        free(s);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->n_choices = n_choices;
    s->wake = wake;
    s->wake_ctx = wake_ctx;
    atomic_init(&s->n_finish_lost, 0);
    atomic_init(&s->waiters, 0);
    atomic_init(&s->released, false);
    atomic_init(&s->in_wake, 0);
    atomic_init(&s->refs, 1);
    if (reader_tok) {
        s->cap_scratch = tok_stream_max_chunk(reader_tok) + 8; /* a push and the finish tail */
        s->scratch = malloc(s->cap_scratch);
        s->ts = calloc((size_t)n_choices, sizeof *s->ts);
        bool ok = s->scratch && s->ts;
        for (int c = 0; ok && c < n_choices; c++)
            ok = (s->ts[c] = tok_stream_create(reader_tok, skip_special)) != NULL;
        if (!ok) {
            stream_unref(s);
            return NULL;
        }
    }
    atomic_init(&s->refs, 2); /* the reader and the engine */
    return s;
}

/* 1 = took an event, 0 = none yet, -1 = over. Under s->mu. */
static int stream_pop(engine_stream_t *s, engine_event_t *ev) {
    for (;;) {
        evseg_t *g = s->chead;
        if (s->cidx < atomic_load_explicit(&g->n_pub, memory_order_acquire)) {
            expand(s, g, &SEG_RECS(g)[s->cidx++], ev, true);
            if (ev->type == ENGINE_EV_FINISH) s->n_finish_read++;
            return 1;
        }
        evseg_t *next = atomic_load_explicit(&g->next, memory_order_acquire);
        if (!next) break;
        /* n_pub was final before next was set: look once more before leaving */
        int n = atomic_load_explicit(&g->n_pub, memory_order_acquire);
        if (s->cidx < n) continue;
        s->chead = next;
        s->cidx = 0;
        atomic_fetch_sub(&g->refs, SEG_BIAS - n); /* never the last: the stream holds it */
    }
    return s->n_finish_read + atomic_load(&s->n_finish_lost) >= s->n_choices ? -1 : 0;
}

int engine_stream_poll(engine_stream_t *s, engine_event_t *ev) {
    pthread_mutex_lock(&s->mu);
    int rc = stream_pop(s, ev);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int engine_stream_wait(engine_stream_t *s, engine_event_t *ev, int timeout_ms) {
    struct timespec deadline;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&s->mu);
    int rc;
    while ((rc = stream_pop(s, ev)) == 0 && timeout_ms != 0) {
        /* Registered before looking again: the engine either sees the waiter (and signals
         * under mu, which this thread holds until it sleeps) or this look sees its events. */
        atomic_fetch_add(&s->waiters, 1);
        atomic_thread_fence(memory_order_seq_cst);
        int w = 0;
        if ((rc = stream_pop(s, ev)) == 0)
            w = timeout_ms < 0 ? pthread_cond_wait(&s->cv, &s->mu)
                               : pthread_cond_timedwait(&s->cv, &s->mu, &deadline);
        atomic_fetch_sub(&s->waiters, 1);
        if (rc != 0) break;
        if (w == ETIMEDOUT) {
            rc = stream_pop(s, ev);
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void engine_stream_cancel(engine_stream_t *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    if (!s->cancel_requested && s->on_cancel) {
        s->cancel_requested = true;
        /* The notice holds a reference: the request may end and the reader release the
         * stream before the engine thread reads it. */
        atomic_fetch_add(&s->refs, 1);
        s->on_cancel(s->cancel_ctx, s);
    }
    pthread_mutex_unlock(&s->mu);
}

void stream_attach(engine_stream_t *s, stream_cancel_fn fn, void *ctx) {
    pthread_mutex_lock(&s->mu);
    s->on_cancel = fn;
    s->cancel_ctx = ctx;
    pthread_mutex_unlock(&s->mu);
}

void stream_detach(engine_stream_t *s) {
    stream_attach(s, NULL, NULL);
}

void stream_discard(engine_stream_t *s) {
    atomic_store(&s->refs, 1);
    stream_unref(s);
}

void engine_stream_release(engine_stream_t *s) {
    if (!s) return;
    engine_stream_cancel(s);
    atomic_store(&s->released, true);
    /* A wake call that started before `released` was set may still run: its context must
     * stay valid until it returns. Wake hooks are short by contract. */
    while (atomic_load(&s->in_wake) > 0)
        sched_yield();
    stream_unref(s);
}

/* The segment to continue in: the oldest one when the reader and every event are done with
 * it (only the stream holds it) and it is large enough, else a new one. NULL when out of
 * memory. Engine thread. */
static evseg_t *next_segment(engine_stream_t *s, int cap, size_t payload) {
    evseg_t *o = s->oldest;
    /* the first, smaller segments go once done with, so the larger ones come up for reuse */
    while (o != s->ptail && o->cap < cap &&
           atomic_load_explicit(&o->refs, memory_order_acquire) == 1) {
        s->oldest = o->pnext;
        free(o);
        o = s->oldest;
    }
    if (o != s->ptail && o->cap >= cap && o->arena_cap >= payload &&
        atomic_load_explicit(&o->refs, memory_order_acquire) == 1) {
        s->oldest = o->pnext;
        atomic_store_explicit(&o->refs, SEG_FRESH, memory_order_relaxed);
        atomic_store_explicit(&o->n_pub, 0, memory_order_relaxed);
        atomic_store_explicit(&o->next, NULL, memory_order_relaxed);
        o->pnext = NULL;
        o->n_written = 0;
        o->arena_used = 0;
        return o;
    }
    size_t arena = (size_t)cap * ARENA_PER_EVENT;
    return seg_create(cap, arena > payload ? arena : payload);
}

evrec_t *stream_slot_next(engine_stream_t *s, size_t payload, char **mem) {
    evseg_t *g = s->ptail;
    evseg_t *n = next_segment(s, g->cap * 2 < SEG_MAX ? g->cap * 2 : SEG_MAX, payload);
    if (!n) return NULL;
    g->pnext = n;
    s->ptail = n;
    *mem = n->arena;
    n->arena_used = payload;
    return &SEG_RECS(n)[n->n_written++];
}

evfinish_t *stream_finish_fields(engine_stream_t *s, evrec_t *rec) {
    evseg_t *g = s->ptail;
    evfinish_t *f = rec_finish(g, rec);
    size_t end = (size_t)((char *)(f + 1) - g->arena);
    if (g->arena_used < end) g->arena_used = end;
    return f;
}
