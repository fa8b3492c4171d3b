/*
 * stream_int: the engine thread's side of a stream (engine-internal; readers use stream.h).
 *
 * A stream is a single-producer queue of 16-byte event records with an arena for their
 * payloads, in segments. The engine thread opens an event in the stream's last segment (no lock,
 * and no allocation once a stream is steady: used segments are reused), writes its text, closes
 * it, and at the end of the step publishes every stream it wrote with one fence, then notifies
 * each: a reader blocked in engine_stream_wait wakes and the request's wake hook runs.
 *
 *     engine_stream_t *s = stream_create(n, wake, wake_ctx, reader_tok, skip_special);
 *     stream_attach(s, on_cancel, eng);    // the reader's cancels reach the engine from now on
 *     evrec_t *rec;
 *     char *text = stream_open_event(s, choice, ENGINE_EV_DELTA, &result, false, len, &rec);
 *     memcpy(text, delta, len);
 *     stream_close_event(s, rec, text, len);
 *     stream_publish(s); atomic_thread_fence(memory_order_seq_cst); stream_notify(s);
 *     ...
 *     stream_detach(s); stream_unref(s);   // the request is over for the engine
 *
 * Without stop strings the reader detokenizes (reader_tok): the engine queues the token id and
 * marks the record EVR_DECODE_TOKEN (and, on a FINISH, EVR_DECODE_FLUSH), leaving
 * READER_TEXT_ROOM bytes the reader fills.
 */
#ifndef TACHYON_STREAM_INT_H
#define TACHYON_STREAM_INT_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "copy_small.h"
#include "sampler.h"
#include "stream.h"
#include "tokenizer.h"

struct eng_req;

/* An event as the engine thread writes it: 16 bytes, which the reader expands into an
 * engine_event_t, so that a step writes a quarter of a cache line per delta rather than two
 * lines. Its payload lies in the segment's arena at `off`: n_lp logprob entries, then the token
 * id (EVR_TOKEN), then the text: text_len bytes and a NUL, or, when the reader decodes,
 * READER_TEXT_ROOM bytes it may fill; then for a FINISH an evfinish_t (at the next multiple of
 * 8). */
typedef struct evrec {
    uint32_t off, text_len;
    int32_t choice;
    uint8_t type, flags; /* evrec_flag_t */
    uint16_t n_lp;       /* 1 + n_top with logprobs, else 0 */
} evrec_t;

typedef enum evrec_flag {
    EVR_TOKEN = 1,        /* carries the step's token id */
    EVR_DECODE_TOKEN = 2, /* the reader appends the token's text (its detokenizer) */
    EVR_DECODE_FLUSH = 4, /* the reader appends its detokenizer's unfinished bytes (a FINISH) */
    EVR_READER_TEXT = EVR_DECODE_TOKEN | EVR_DECODE_FLUSH, /* the text is the reader's */
} evrec_flag_t;

/* Text room the engine leaves in a record the reader decodes: most tokens' text fits, the rest
 * gets an allocation of its own. */
#define READER_TEXT_ROOM 16

/* What a FINISH adds (engine_event_t's fields of the same names; the strings are malloc'd and
 * go to the event that takes them). */
typedef struct evfinish {
    char *stop_str, *error;
    double ttft_s, e2e_s;
    int32_t reason, stop_token;
    int prompt_tokens, completion_tokens, cached_tokens;
} evfinish_t;

/* A segment of a stream's event queue: event records and an arena for their payloads (token
 * ids, logprobs, text), in one allocation. The engine thread writes and publishes; the reader takes
 * events in order and moves on to the next segment once this one is used up and the engine has
 * moved on too.
 *
 * `refs` counts three kinds of holders: the stream (1, until it is freed), the reader's
 * position (SEG_BIAS until it moves past; it then gives back SEG_BIAS - n, n being the final
 * event count, which leaves exactly one per event it took) and each taken event (1, given back
 * by engine_event_clear; engine_event_t.mem_ points to the segment). At 1 only the stream
 * holds it, and the engine thread reuses it for new events: a steady stream allocates nothing.
 * At 0 (events cleared after the stream was freed) it is freed. The engine thread only ever
 * reads `refs`, so there is no atomic write per event on a line the reader writes. */
struct evseg {
    /* written by readers */
    atomic_int refs;
    /* written by the engine thread when it publishes, read by the reader */
    alignas(64) atomic_int n_pub; /* events published */
    _Atomic(struct evseg *) next; /* published once every event here is */
    /* the engine thread's own (the reader finds the records at SEG_RECS) */
    alignas(64) struct evseg *pnext; /* the next one, published or not */
    int cap, n_written;              /* slots; slots filled */
    size_t arena_cap, arena_used;    /* bytes; bytes taken */
    char *arena;                     /* [arena_cap] after the events */
};
typedef struct evseg evseg_t;

#define SEG_HEAD    ((sizeof(evseg_t) + 63) & ~(size_t)63)
#define SEG_RECS(g) ((evrec_t *)((char *)(g) + SEG_HEAD)) /* [cap] */

/* Called (under the stream's lock, which is taken before any engine lock) when the reader
 * cancels an attached stream: the engine queues the notice, which holds a reference to the
 * stream that the engine gives back with stream_unref once it has read it. */
typedef void (*stream_cancel_fn)(void *ctx, engine_stream_t *s);

/* Fields are grouped by the thread that writes them, a cache line each, so that the engine
 * thread and a reader polling in a loop do not keep taking lines from each other. */
struct engine_stream {
    /* engine thread (the only producer) */
    struct evseg *oldest; /* the stream's segments, oldest first, linked up to ptail */
    struct evseg *ptail;  /* the segment being written */
    struct evseg *pub;    /* the oldest segment with unpublished events */
    int lost_finish;      /* FINISH events that could not be queued (out of memory), not told */
    bool pending;         /* in the engine's list of streams to publish this step */
    engine_stream_t *next_pending;
    struct eng_req *req; /* the engine's request while it is live */
    void (*wake)(void *ctx);
    void *wake_ctx;
    /* reader, under mu (so that two readers cannot race, though one at a time is the rule) */
    alignas(64) pthread_mutex_t mu;
    pthread_cond_t cv;
    struct evseg *chead;
    int cidx, n_finish_read;
    /* Requests without stop strings are detokenized here, by the reader: a detokenizer per
     * choice and a scratch buffer of cap_scratch bytes; NULL when the engine writes the text. */
    tok_stream_t **ts;
    char *scratch;
    size_t cap_scratch;
    bool cancel_requested;        /* under mu */
    stream_cancel_fn on_cancel;   /* under mu: set while the engine serves the stream */
    void *cancel_ctx;             /* under mu */
    engine_stream_t *next_cancel; /* the engine's list of cancel notices (its lock) */
    /* shared */
    alignas(64) int n_choices; /* set at creation */
    atomic_int waiters;        /* readers blocked in engine_stream_wait */
    atomic_int n_finish_lost;
    atomic_bool released;
    atomic_int in_wake; /* wake calls in progress (release waits for them) */
    atomic_int refs;    /* the reader, the engine, and a queued cancel notice */
};

/* A stream for n_choices choices, held by its reader and the engine; with reader_tok, a
 * detokenizer per choice for its reader (skip_special as the request says). NULL when out of
 * memory. */
engine_stream_t *stream_create(int n_choices, void (*wake)(void *ctx), void *wake_ctx,
                               const tokenizer_t *reader_tok, bool skip_special);

/* Frees a stream that was never handed to a reader (its submission failed). */
void stream_discard(engine_stream_t *s);

/* Cancels by the reader call fn(ctx, s) from now on, until stream_detach. */
void stream_attach(engine_stream_t *s, stream_cancel_fn fn, void *ctx);
void stream_detach(engine_stream_t *s);

/* Gives back one holder's reference; frees the stream with the last (events never taken are
 * cleared; segments still holding taken events go with the last engine_event_clear). */
void stream_unref(engine_stream_t *s);

/* The slow path of stream_open_event: the last segment is full, so the event goes into a reused
 * or new one. NULL when out of memory. */
evrec_t *stream_slot_next(engine_stream_t *s, size_t payload, char **mem);

/* Opens an event of a choice: the step's token when r is not NULL (with its logprobs when
 * `logprobs`), and room for text_max bytes of text, which the caller writes at the returned
 * address before stream_close_event (and room for a FINISH's evfinish_t). Visible at the next
 * stream_publish. NULL when out of memory (the caller decides what is lost). Engine thread.
 * Inline: it runs once per token, mostly with constant arguments. */
static inline char *stream_open_event(engine_stream_t *s, int choice, engine_event_type_t type,
                                      const sampler_result_t *r, bool logprobs, size_t text_max,
                                      evrec_t **out) {
    int n_tok = r ? 1 : 0;
    int n_lp = r && logprobs ? 1 + r->n_top : 0;
    size_t size = (size_t)n_lp * sizeof(engine_token_logprob_t) + (size_t)n_tok * sizeof(int32_t) +
                  text_max + 1;
    if (type == ENGINE_EV_FINISH) size += 7 + sizeof(evfinish_t);
    size = (size + 7) & ~(size_t)7;
    evseg_t *g = s->ptail;
    char *p;
    evrec_t *rec;
    if (g->n_written < g->cap && g->arena_cap - g->arena_used >= size) {
        p = g->arena + g->arena_used;
        g->arena_used += size;
        rec = &SEG_RECS(g)[g->n_written++];
    } else if (!(rec = stream_slot_next(s, size, &p))) {
        *out = NULL;
        return NULL;
    }
    g = s->ptail;
    *rec = (evrec_t){.off = (uint32_t)(p - g->arena),
                     .choice = choice,
                     .type = (uint8_t)type,
                     .flags = n_tok ? EVR_TOKEN : 0,
                     .n_lp = (uint16_t)n_lp};
    if (n_lp) {
        engine_token_logprob_t *lp = (engine_token_logprob_t *)p;
        lp[0] = (engine_token_logprob_t){r->token, r->logprob};
        for (int i = 1; i < n_lp; i++)
            lp[i] = (engine_token_logprob_t){r->top_ids[i - 1], r->top_logprobs[i - 1]};
        p += (size_t)n_lp * sizeof *lp;
    }
    if (n_tok) {
        copy_small(p, &r->token, sizeof r->token);
        p += sizeof r->token;
    }
    *out = rec;
    return p;
}

/* Ends the text of the event just opened at len bytes, giving back the room not used. */
static inline void stream_close_event(engine_stream_t *s, evrec_t *rec, char *text, size_t len) {
    evseg_t *g = s->ptail;
    text[len] = '\0';
    rec->text_len = (uint32_t)len;
    g->arena_used = ((size_t)(text + len + 1 - g->arena) + 7) & ~(size_t)7;
}

/* The evfinish_t of the FINISH event just opened (and closed, unless the reader writes its
 * text), for the caller to fill. */
evfinish_t *stream_finish_fields(engine_stream_t *s, evrec_t *rec);

/* Makes the events written so far visible. Engine thread. */
static inline void stream_publish(engine_stream_t *s) {
    for (evseg_t *g = s->pub; g != s->ptail;) {
        evseg_t *next = g->pnext;
        atomic_store_explicit(&g->n_pub, g->n_written, memory_order_release);
        atomic_store_explicit(&g->next, next, memory_order_release); /* g may be gone now */
        g = next;
    }
    atomic_store_explicit(&s->ptail->n_pub, s->ptail->n_written, memory_order_release);
    s->pub = s->ptail;
    if (s->lost_finish) {
        atomic_fetch_add(&s->n_finish_lost, s->lost_finish);
        s->lost_finish = 0;
    }
}

/* After stream_publish and a full fence: wakes a blocked reader and calls the wake hook
 * (outside any lock of the engine's; never after the reader's engine_stream_release has
 * returned). Engine thread. */
static inline void stream_notify(engine_stream_t *s) {
    if (atomic_load_explicit(&s->waiters, memory_order_relaxed) > 0) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    if (s->wake) {
        atomic_fetch_add(&s->in_wake, 1);
        if (!atomic_load(&s->released)) s->wake(s->wake_ctx);
        atomic_fetch_sub(&s->in_wake, 1);
    }
}

#endif
