/*
 * engine: requests and streams on the caller's side, and the engine thread that owns the
 * scheduler, the KV pool, the backend and the sampler.
 *
 * Other threads reach the engine thread through an inbox under `mu` (submitted requests, cancel
 * notices, flag changes); it answers through the streams. A stream is a single-producer queue:
 * the engine thread writes a step's events into the stream's segment (no lock, no allocation
 * per event), publishes them all at the end of the step with one fence, then wakes readers.
 * Per step the engine does O(scheduled sequences + new tokens + new blocks) work: the batch's
 * block table persists across steps (a sequence keeps its row and only appends).
 */
#include "engine.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "copy_small.h"
#include "kvcache.h"
#include "rng.h"
#include "sampler.h"
#include "scheduler.h"

#define AUTO_POOL_MAX (4ull << 30) /* bytes: the automatic pool is 25% of RAM, at most this */
#define TOKENS_AHEAD  64           /* room for output tokens reserved at submit */

typedef struct eng_req eng_req_t;

/* One choice of a request. */
typedef struct eng_seq {
    sched_seq_t s; /* first: the scheduler's pointers convert back */
    /* What every step reads, together after it */
    eng_req_t *req;
    tok_stream_t *ts; /* the engine's detokenizer (stop strings only; else the reader's) */
    int choice;
    bool started; /* in the scheduler: choice 0 from the inbox, the others from the fork */
    bool finished;
    /* Its row in the batch's block table, kept from step to step (-1: none) and how much of it
     * is written, for the table generation and block generation it was written under. */
    int row, row_blocks;
    uint32_t row_gen, row_bgen;
    int srow; /* the sampler row last written for it (-1: none), valid while it owns it */
    double t_sched, t_first, t_last; /* first scheduled, first and latest token; 0 = not yet */
    size_t n_pend, cap_pend;
    char *pend; /* [cap_pend] decoded text not emitted yet (a possible stop string start) */
} eng_seq_t;

struct eng_req {
    eng_req_t *next, *prev; /* the inbox (next only), then the live list */
    eng_req_t *next_done;
    engine_stream_t *stream;
    sampling_params_t sp; /* resolved */
    int max_tokens;       /* INT_MAX: up to the context limit */
    bool max_tokens_set;  /* given by the request (it must fit max-model-len) */
    bool queued;          /* counted in n_queued until its first admission */
    bool reader_decodes;  /* no stop strings: the stream's reader turns ids into text */
    uint64_t seed;
    int n, n_started, n_finished;
    eng_seq_t *seqs; /* [n] */
    double arrival;
    char *id;
};

/* An event as the engine thread writes it: 16 bytes, which the reader expands into an
 * engine_event_t (stream_pop), so that a step writes a quarter of a cache line per delta rather
 * than two lines. Its payload lies in the segment's arena at `off`: n_lp logprob entries, then
 * the token id (EVR_TOKEN), then the text: text_len bytes and a NUL, or, when the reader
 * decodes, READER_TEXT_ROOM bytes it may fill; then for a FINISH an evfinish_t (at the next
 * multiple of 8). */
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
typedef struct evseg {
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
} evseg_t;

#define SEG_HEAD      ((sizeof(evseg_t) + 63) & ~(size_t)63)
#define SEG_RECS(g) ((evrec_t *)((char *)(g) + SEG_HEAD)) /* [cap] */

#define SEG_BIAS  (1 << 30)
#define SEG_FRESH (SEG_BIAS + 1)

/* Fields are grouped by the thread that writes them, a cache line each, so that the engine
 * thread and a reader polling in a loop do not keep taking lines from each other. */
struct engine_stream {
    /* engine thread (the only producer) */
    evseg_t *oldest; /* the stream's segments, oldest first, linked by pnext up to ptail */
    evseg_t *ptail;  /* the segment being written */
    evseg_t *pub;    /* the oldest segment with unpublished events */
    int lost_finish; /* FINISH events that could not be queued (out of memory), not yet told */
    bool pending;    /* in the engine's list of streams to publish */
    engine_stream_t *next_pending;
    eng_req_t *req; /* the request while it is live */
    void (*wake)(void *ctx);
    void *wake_ctx;
    /* reader, under mu (so that two readers cannot race, though one at a time is the rule) */
    alignas(64) pthread_mutex_t mu;
    pthread_cond_t cv;
    evseg_t *chead;
    int cidx, n_finish_read;
    /* Requests without stop strings are detokenized here, by the reader, off the engine
     * thread (as vLLM's and SGLang's front ends do): a detokenizer per choice and a scratch
     * buffer of cap_scratch bytes; NULL when the engine writes the text. */
    tok_stream_t **ts;
    char *scratch;
    size_t cap_scratch;
    bool cancel_requested;        /* under mu */
    engine_t *eng;                /* under mu: while the engine serves the stream */
    engine_stream_t *next_cancel; /* the engine's cancel list (eng->mu) */
    /* shared */
    alignas(64) int n_choices; /* set at creation */
    atomic_int waiters;        /* readers blocked in engine_stream_wait */
    atomic_int n_finish_lost;
    atomic_bool released;
    atomic_int in_wake; /* wake calls in progress (release waits for them) */
    atomic_int refs;    /* the reader, the engine, and a queued cancel notice */
};

struct engine {
    atomic_bool alive; /* the engine thread is running its loop */
    /* set by engine_open, then read-only */
    model_weights_t *w;
    const model_config_t *cfg;
    tokenizer_t *tok;
    genconfig_t gc;
    int chat_format;
    const backend_ops_t *ops;
    backend_t *be;
    int stop_ids[GENCONFIG_MAX_EOS + 1]; /* tokenizer eos, then generation_config eos ids */
    int n_stop_ids;
    size_t max_chunk; /* tok_stream_max_chunk */
    stats_t *stats;

    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* wakes the engine thread */
    pthread_cond_t flag_cv; /* a rebuild was answered */
    atomic_uint news;       /* bumped (under mu) with every change the engine thread must see */
    flag_values_t flags;    /* current values; rebuild flags once applied */
    uint64_t flags_gen;
    eng_req_t *inbox_head, *inbox_tail;
    engine_stream_t *cancels;
    bool rebuild_pending, rebuild_done;
    flag_values_t rebuild_flags;
    int rebuild_rc;
    err_t rebuild_err;
    bool closing;
    uint64_t n_submitted;
    atomic_int n_queued;     /* requests submitted and not yet admitted */
    pthread_mutex_t flag_mu; /* one flag change at a time */
    pthread_t thread;
    bool thread_started;

    /* engine thread only */
    unsigned news_seen; /* `news` when the engine thread last took it */
    flag_values_t f;    /* applied */
    uint64_t applied_gen;
    int mml, bs, num_blocks;
    kv_pool_t *kv;
    sched_t *sched;
    sampler_t *smp; /* NULL when the backend samples */
    eng_req_t *live;
    stats_active_t active[STATS_MAX_ACTIVE]; /* scratch for record_active */
    double active_t;                         /* when the list was last recorded */
    eng_req_t *done; /* finished requests, freed after their events are pushed */
    bool stalled;    /* the last step had nothing to run: wait for news */
    int extra_preempted;
    stats_step_t last_rec; /* the last step recorded (its gauges) */
    /* The step's inter-token latencies, grouped: every choice that also got a token in the
     * previous step has the same one. [n_itl] (value s, count). */
    double itl_v[8];
    uint64_t itl_n[8];
    int n_itl;
    engine_stream_t *to_publish; /* streams with events written this step */
    /* the batch, grown geometrically and kept */
    int32_t *b_tokens, *b_pos;
    int64_t *b_slots;
    int cap_tok;
    int32_t *b_qstart, *b_ctx, *b_rows, *b_row_seq;
    int cap_seq;
    /* The block table persists: row r holds row_seq[r]'s blocks, so that a sequence keeping
     * its row only adds the blocks it gained. A new stride rewrites every row (table_gen). */
    int32_t *b_tables; /* [cap_seq, stride] */
    size_t cap_tables;
    int stride;
    uint32_t table_gen;
    eng_seq_t **row_seq; /* [cap_seq] */
    int32_t *row_out;    /* [cap_seq] the plan index in each row this step */
    /* Sampler rows persist too: a row still owned by the same choice only needs its output
     * count (and its token pointers when they moved). */
    sampler_row_t *rows;
    eng_seq_t **rows_owner; /* [cap_rows] */
    sampler_result_t *results;
    int cap_rows;
    float *logits;
    size_t cap_logits;
};

double engine_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

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

void engine_opts_init(engine_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->model.model = MDIR_EMBEDDED;
    o->model.format = LOAD_AUTO;
    o->backend = "cpu";
    flags_init(&o->flags);
}

static int grow(void **arr, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t n = *cap > 0 ? *cap : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * size);
    if (!p) return -1;
    *arr = p;
    *cap = n;
    return 0;
}

static int grow_int(void **arr, int *cap, int need, size_t size) {
    size_t c = (size_t)*cap;
    if (grow(arr, &c, (size_t)need, size) < 0) return -1;
    *cap = (int)c;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Streams

/* Wakes the engine thread for a change made under e->mu (which the caller holds). */
static void tell_engine(engine_t *e) {
    atomic_fetch_add_explicit(&e->news, 1, memory_order_relaxed);
    pthread_cond_signal(&e->cv);
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
static void stream_unref(engine_stream_t *s) {
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

/* A stream for n_choices choices; with reader_tok, a detokenizer per choice for its reader
 * (skip_special as the request says). NULL when out of memory. */
static engine_stream_t *stream_create(const engine_request_t *r, int n_choices,
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
    s->wake = r->wake;
    s->wake_ctx = r->wake_ctx;
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
    engine_t *e = s->eng;
    if (!s->cancel_requested && e) {
        s->cancel_requested = true;
        /* The notice holds a reference: the request may end and the reader release the
         * stream before the engine thread reads it. Lock order: stream, then engine. */
        atomic_fetch_add(&s->refs, 1);
        pthread_mutex_lock(&e->mu);
        s->next_cancel = e->cancels;
        e->cancels = s;
        tell_engine(e);
        pthread_mutex_unlock(&e->mu);
    }
    pthread_mutex_unlock(&s->mu);
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

/* Room for one more event with `payload` bytes in the stream's last segment, moving on to
 * another segment when it is full. The event is written but not visible until stream_publish.
 * NULL when out of memory. Engine thread. */
static evrec_t *stream_slot(engine_stream_t *s, size_t payload, char **mem) {
    payload = (payload + 7) & ~(size_t)7;
    evseg_t *g = s->ptail;
    if (g->n_written == g->cap || g->arena_cap - g->arena_used < payload) {
        evseg_t *n = next_segment(s, g->cap * 2 < SEG_MAX ? g->cap * 2 : SEG_MAX, payload);
        if (!n) return NULL;
        g->pnext = n;
        s->ptail = g = n;
    }
    *mem = g->arena + g->arena_used;
    g->arena_used += payload;
    return &SEG_RECS(g)[g->n_written++];
}

/* Makes the events written so far visible. Engine thread. */
static void stream_publish(engine_stream_t *s) {
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
 * (outside any lock, since it may call engine_stream_poll; never after the reader's
 * engine_stream_release has returned). Engine thread. */
static void stream_notify(engine_stream_t *s) {
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

// ---------------------------------------------------------------------------------------------
// Flags and defaults

static void defaults_from(const engine_t *e, const flag_values_t *f, sampling_params_t *d) {
    sampling_params_init(d);
    const genconfig_t *g = &e->gc;
    if (!f->generation_config_vllm) {
        if (g->has_temperature) d->temperature = (float)g->temperature;
        if (g->has_top_k) d->top_k = g->top_k;
        if (g->has_top_p) d->top_p = (float)g->top_p;
        if (g->has_min_p) d->min_p = (float)g->min_p;
        if (g->has_repetition_penalty) d->repetition_penalty = (float)g->repetition_penalty;
        if (g->has_max_new_tokens) d->max_tokens = g->max_new_tokens;
    }
    if (!isnan(f->default_temperature)) d->temperature = f->default_temperature;
    if (!isnan(f->default_top_p)) d->top_p = f->default_top_p;
    if (!isnan(f->default_min_p)) d->min_p = f->default_min_p;
    if (!isnan(f->default_repetition_penalty))
        d->repetition_penalty = f->default_repetition_penalty;
    if (f->default_top_k != SAMPLING_UNSET_I) d->top_k = f->default_top_k;
}

void engine_default_sampling(const engine_t *eng, sampling_params_t *out) {
    engine_t *e = (engine_t *)eng;
    pthread_mutex_lock(&e->mu);
    flag_values_t f = e->flags;
    pthread_mutex_unlock(&e->mu);
    defaults_from(e, &f, out);
}

/* Checks rebuild flags that do not need the engine thread. Normalises max-model-len 0 to the
 * model's context. */
static uint64_t auto_pool_bytes(void);

/* The pool's bytes under flags f: kv-cache-memory, else what the backend can give (the cuda
 * backend: gpu-memory-utilization of the device after weights and workspaces), else 25% of
 * RAM. */
static uint64_t pool_bytes(const engine_t *e, const flag_values_t *f) {
    if (f->kv_cache_memory) return f->kv_cache_memory;
    if (e->be->ops->kv_pool_bytes)
        return e->be->ops->kv_pool_bytes(e->be, f->gpu_memory_utilization);
    return auto_pool_bytes();
}

/* The options a backend takes from the flags. */
static void backend_options_from_flags(backend_options_t *bo, const flag_values_t *f) {
    bo->gpu_memory_utilization = f->gpu_memory_utilization;
    bo->max_num_batched_tokens = f->max_num_batched_tokens;
    bo->max_num_seqs = f->max_num_seqs;
    bo->cuda_graphs = f->cuda_graphs;
    bo->kv_cache_dtype = f->kv_cache_dtype;
}

/* Hands the backend the flags (engine thread only: a backend is not thread-safe). */
static void configure_backend(engine_t *e, const flag_values_t *f) {
    if (!e->be->ops->configure) return;
    backend_options_t bo = {0};
    backend_options_from_flags(&bo, f);
    e->be->ops->configure(e->be, &bo);
}

static int check_rebuild_flags(const engine_t *e, flag_values_t *f, err_t *err) {
    int model_len = e->cfg->max_position_embeddings;
    if (f->max_model_len == 0) {
        /* auto: the model's context, or as much of it as the pool can give one sequence (a
         * 40k-token Qwen3 context does not fit the CPU's default pool for the bigger presets) */
        f->max_model_len = model_len;
        size_t per_block = e->be->ops->kv_block_bytes(e->be, f->block_size);
        uint64_t bytes = pool_bytes(e, f);
        uint64_t fit = per_block ? bytes / per_block * (uint64_t)f->block_size : 0;
        if (fit >= (uint64_t)f->block_size && fit < (uint64_t)model_len) {
            f->max_model_len = (int)fit;
            fprintf(stderr,
                    "tachyon: max-model-len %d: the KV pool (%llu MiB) holds %llu tokens, less "
                    "than the model's context of %d (raise kv-cache-memory for more)\n",
                    f->max_model_len, (unsigned long long)(bytes >> 20), (unsigned long long)fit,
                    model_len);
        }
    }
    if (f->max_model_len > model_len)
        return err_set(err,
                       "max-model-len %d is more than the model's max_position_embeddings (%d)",
                       f->max_model_len, model_len);
    if (f->kv_cache_dtype == KV_DTYPE_FP8 && strcmp(e->ops->name, "cuda") != 0)
        return err_set(err, "kv-cache-dtype fp8 needs the cuda backend (this engine runs on %s)",
                       e->ops->name);
    return 0;
}

static uint64_t auto_pool_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : AUTO_POOL_MAX * 4;
    uint64_t b = ram / 4;
    return b < AUTO_POOL_MAX ? b : AUTO_POOL_MAX;
}

/* Blocks the pool gets under flags f (max_model_len normalised), or -1 with a message when one
 * max-model-len sequence would not fit. */
static int pool_blocks(const engine_t *e, const flag_values_t *f, err_t *err) {
    uint64_t bytes = pool_bytes(e, f);
    size_t per_block = e->be->ops->kv_block_bytes(e->be, f->block_size);
    if (per_block == 0) return err_set(err, "%s backend: a KV block takes 0 bytes", e->ops->name);
    uint64_t nb = bytes / per_block;
    if (nb > INT_MAX / 2) nb = INT_MAX / 2;
    uint64_t need = ((uint64_t)f->max_model_len + (uint64_t)f->block_size - 1) / f->block_size;
    if (nb < need)
        return err_set(err,
                       "the KV pool (%llu MiB: %llu blocks of %d tokens) cannot hold one "
                       "max-model-len sequence of %d tokens (%llu blocks, %llu MiB): raise "
                       "kv-cache-memory or lower max-model-len",
                       (unsigned long long)(bytes >> 20), (unsigned long long)nb, f->block_size,
                       f->max_model_len, (unsigned long long)need,
                       (unsigned long long)((need * per_block + (1 << 20) - 1) >> 20));
    return (int)nb;
}

static sched_config_t sched_config_of(const flag_values_t *f) {
    return (sched_config_t){.max_num_seqs = f->max_num_seqs,
                            .max_num_batched_tokens = f->max_num_batched_tokens,
                            .chunked_prefill = f->enable_chunked_prefill,
                            .policy = f->scheduling_policy};
}

// ---------------------------------------------------------------------------------------------
// Events (engine thread)

/* Puts a stream with new events (or a lost FINISH to tell) in the step's list to publish. */
static inline void mark_pending(engine_t *e, engine_stream_t *s) {
    if (s->pending) return;
    s->pending = true;
    s->next_pending = e->to_publish;
    e->to_publish = s;
}

/* Opens an event of choice q in its stream: the step's token when r is not NULL (with its
 * logprobs when the request asked for them) and room for up to text_max bytes of text, which
 * the caller writes at the returned address before close_event (and room for a FINISH's
 * evfinish_t). Published at the end of the step. NULL when out of memory (the caller decides
 * what is lost). */
static inline char *open_event(engine_t *e, eng_seq_t *q, engine_event_type_t type,
                               const sampler_result_t *r, size_t text_max, evrec_t **out) {
    eng_req_t *req = q->req;
    engine_stream_t *s = req->stream;
    int n_tok = r ? 1 : 0;
    int n_lp = r && req->sp.logprobs >= 0 ? 1 + r->n_top : 0;
    size_t size = (size_t)n_lp * sizeof(engine_token_logprob_t) +
                  (size_t)n_tok * sizeof(int32_t) + text_max + 1;
    if (type == ENGINE_EV_FINISH) size += 7 + sizeof(evfinish_t);
    char *p;
    evrec_t *rec = stream_slot(s, size, &p);
    if (!rec) return NULL;
    evseg_t *g = s->ptail;
    *rec = (evrec_t){.off = (uint32_t)(p - g->arena),
                     .choice = q->choice,
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
    mark_pending(e, s);
    *out = rec;
    return p;
}

/* Ends the text of the event just opened (at `text`, in the stream's last segment) at len
 * bytes and gives the room the segment's arena did not use back. */
static inline void close_event(engine_stream_t *s, evrec_t *rec, char *text, size_t len) {
    evseg_t *g = s->ptail;
    text[len] = '\0';
    rec->text_len = (uint32_t)len;
    g->arena_used = ((size_t)(text + len + 1 - g->arena) + 7) & ~(size_t)7;
}

/* An event with the step's token (r, may be NULL) and the text[0..len). */
static evrec_t *write_event(engine_t *e, eng_seq_t *q, engine_event_type_t type,
                            const sampler_result_t *r, const char *text, size_t len) {
    evrec_t *rec;
    char *p = open_event(e, q, type, r, len, &rec);
    if (!p) return NULL;
    copy_small(p, text, len);
    close_event(q->req->stream, rec, p, len);
    return rec;
}

/* Publishes the step's events, then notifies. One fence for all streams orders every
 * publication before every look at a stream's waiters (engine_stream_wait registers itself and
 * looks again after a fence of its own, so no wakeup is lost). */
static void flush_events(engine_t *e) {
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
// Requests (engine thread)

static eng_seq_t *seq_of(sched_seq_t *s) {
    return (eng_seq_t *)s;
}

static void free_request(eng_req_t *req) {
    for (int c = 0; c < req->n; c++) {
        tok_stream_destroy(req->seqs[c].ts);
        free(req->seqs[c].pend);
        sched_seq_free(&req->seqs[c].s);
    }
    free(req->seqs);
    sampling_params_free(&req->sp);
    free(req->id);
    free(req);
}

/* Ends one choice: frees its blocks, records it and queues its FINISH with the step's token
 * (r, may be NULL) and the text still held back (already cut at a stop string, if one matched;
 * otherwise the detokenizer's tail is added). */
static void finish_choice(engine_t *e, eng_seq_t *q, engine_finish_reason_t reason,
                          const sampler_result_t *r, int32_t stop_token, int stop_idx,
                          const char *error) {
    eng_req_t *req = q->req;
    if (q->finished) return;
    q->finished = true;
    if (q->started) sched_remove(e->sched, &q->s);
    if (q->row >= 0 && e->row_seq[q->row] == q) e->row_seq[q->row] = NULL;
    if (q->srow >= 0 && e->rows_owner[q->srow] == q) e->rows_owner[q->srow] = NULL;
    if (q->ts && stop_idx < 0) {
        size_t len = 0;
        tok_stream_finish(q->ts, q->pend + q->n_pend, q->cap_pend - q->n_pend, &len);
        q->n_pend += len;
    }
    double now = engine_now();
    int n_out = q->s.n_tokens - q->s.n_prompt;
    if (n_out < 0) n_out = 0;
    stats_request_t sr = {
        .finish_reason = (int)reason,
        .prompt_tokens = req->seqs[0].s.n_prompt,
        .generation_tokens = n_out,
        .cached_tokens = req->seqs[0].s.cached_tokens,
        .queue_s = q->t_sched > 0 ? q->t_sched - req->arrival : -1,
        .ttft_s = q->t_first > 0 ? q->t_first - req->arrival : -1,
        .tpot_s = n_out > 1 ? (q->t_last - q->t_first) / (n_out - 1) : -1,
        .e2e_s = now - req->arrival,
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
        evseg_t *g = req->stream->ptail;
        evfinish_t *f = rec_finish(g, rec);
        size_t end = (size_t)((char *)(f + 1) - g->arena);
        if (g->arena_used < end) g->arena_used = end;
        *f = (evfinish_t){.reason = (int32_t)reason,
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
        e->done = req;
    }
}

/* Finishes every unfinished choice (cancel, error, close). */
static void end_request(engine_t *e, eng_req_t *req, engine_finish_reason_t reason,
                        const char *error) {
    for (int c = 0; c < req->n; c++)
        finish_choice(e, &req->seqs[c], reason, NULL, -1, -1, error);
}

/* Detaches the streams of finished requests (after their events were pushed) and frees them. */
static void free_done(engine_t *e) {
    while (e->done) {
        eng_req_t *req = e->done;
        e->done = req->next_done;
        engine_stream_t *s = req->stream;
        pthread_mutex_lock(&s->mu);
        s->eng = NULL;
        pthread_mutex_unlock(&s->mu);
        stream_unref(s);
        free_request(req);
    }
}

static void take_inbox(engine_t *e, eng_req_t *list) {
    while (list) {
        eng_req_t *req = list;
        list = req->next;
        req->next = e->live;
        req->prev = NULL;
        if (e->live) e->live->prev = req;
        e->live = req;
        req->stream->req = req;
        /* max-model-len may have shrunk since the request was checked */
        int n_prompt = req->seqs[0].s.n_prompt;
        char msg[160];
        if (n_prompt >= e->mml || (req->max_tokens_set && n_prompt + req->max_tokens > e->mml)) {
            snprintf(msg, sizeof msg,
                     "the request no longer fits max-model-len %d (prompt %d tokens)", e->mml,
                     n_prompt);
            end_request(e, req, ENGINE_FINISH_ERROR, msg);
            continue;
        }
        if (sched_add(e->sched, &req->seqs[0].s) < 0) {
            end_request(e, req, ENGINE_FINISH_ERROR, "out of memory");
            continue;
        }
        req->seqs[0].started = true;
        req->n_started = 1;
    }
}

static void take_cancels(engine_t *e, engine_stream_t *list) {
    while (list) {
        engine_stream_t *s = list;
        list = s->next_cancel;
        if (s->req) end_request(e, s->req, ENGINE_FINISH_ABORT, NULL);
        stream_unref(s);
    }
}

/* Starts choices 1..n-1 from choice 0, whose prompt is now computed. */
static void fork_choices(engine_t *e, eng_req_t *req) {
    eng_seq_t *parent = &req->seqs[0];
    for (int c = 1; c < req->n; c++) {
        eng_seq_t *q = &req->seqs[c];
        q->s.priority = parent->s.priority;
        q->s.arrival = parent->s.arrival;
        q->s.order = parent->s.order + (uint64_t)c;
        if (sched_fork(e->sched, &parent->s, &q->s) < 0) {
            finish_choice(e, q, ENGINE_FINISH_ERROR, NULL, -1, -1, "out of memory");
            continue;
        }
        q->started = true;
    }
    req->n_started = req->n;
}

// ---------------------------------------------------------------------------------------------
// Stop strings

/* Bytes at the end of pend[0..n) to hold back: the longest suffix that is a proper prefix of a
 * stop string (it may still grow into one), moved back to a character boundary. */
static size_t held_back(const sampling_params_t *sp, const char *pend, size_t n) {
    size_t h = 0;
    for (int i = 0; i < sp->n_stop; i++) {
        size_t len = strlen(sp->stop[i]);
        size_t k = len - 1 < n ? len - 1 : n;
        for (; k > h; k--)
            if (memcmp(pend + n - k, sp->stop[i], k) == 0) break;
        if (k > h) h = k;
    }
    while (h > 0 && h < n && ((unsigned char)pend[n - h] & 0xC0) == 0x80)
        h++;
    return h;
}

/* The earliest stop string in pend[0..n) (the first listed on a tie): its index, or -1. */
static int find_stop(const sampling_params_t *sp, const char *pend, size_t n, size_t *at) {
    int best = -1;
    for (int i = 0; i < sp->n_stop; i++) {
        const char *m = memmem(pend, n, sp->stop[i], strlen(sp->stop[i]));
        if (m && (best < 0 || (size_t)(m - pend) < *at)) {
            best = i;
            *at = (size_t)(m - pend);
        }
    }
    return best;
}

static bool has_id(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static void flush_itl(engine_t *e) {
    for (int i = 0; i < e->n_itl; i++)
        stats_record_itl_n(e->stats, e->itl_v[i], e->itl_n[i]);
    e->n_itl = 0;
}

static void add_itl(engine_t *e, double v) {
    for (int i = e->n_itl - 1; i >= 0; i--)
        if (e->itl_v[i] == v) {
            e->itl_n[i]++;
            return;
        }
    if (e->n_itl == 8) flush_itl(e);
    e->itl_v[e->n_itl] = v;
    e->itl_n[e->n_itl++] = 1;
}

/* Appends a sampled token to its choice, checks the stop conditions in vLLM's order (length,
 * then past min_tokens EOS and stop ids, then stop strings) and queues what it produced. */
static void on_token(engine_t *e, eng_seq_t *q, const sampler_result_t *r, double now) {
    eng_req_t *req = q->req;
    const sampling_params_t *sp = &req->sp;
    if (sched_seq_append(&q->s, r->token) < 0) {
        finish_choice(e, q, ENGINE_FINISH_ERROR, NULL, -1, -1, "out of memory");
        return;
    }
    int n_out = q->s.n_tokens - q->s.n_prompt;
    if (n_out == 1) {
        q->t_first = now;
        /* vLLM's prompt_tokens_total: a request's whole prompt, cached part included, counted
         * when its first token comes out */
        if (q->choice == 0) stats_add_prompt_tokens(e->stats, (uint64_t)q->s.n_prompt);
    } else {
        add_itl(e, now - q->t_last);
    }
    q->t_last = now;

    int reason = -1;
    int32_t stop_token = -1;
    if (q->s.n_tokens >= e->mml || n_out >= req->max_tokens) {
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
            (stop_idx = find_stop(sp, q->pend, q->n_pend, &at)) >= 0) {
            q->n_pend = at + (sp->include_stop_str_in_output ? strlen(sp->stop[stop_idx]) : 0);
            reason = ENGINE_FINISH_STOP;
            stop_token = -1;
        }
    }
    if (reason >= 0) {
        finish_choice(e, q, (engine_finish_reason_t)reason, r, stop_token, stop_idx, NULL);
        return;
    }
    size_t emit = q->n_pend - held_back(sp, q->pend, q->n_pend);
    if (!write_event(e, q, ENGINE_EV_DELTA, r, q->pend ? q->pend : "", emit)) {
        fprintf(stderr, "tachyon: engine: out of memory, a delta was lost\n");
        return; /* its text stays pending and goes out with the next one */
    }
    q->n_pend -= emit;
    if (q->n_pend > 0 && emit > 0) memmove(q->pend, q->pend + emit, q->n_pend);
}

// ---------------------------------------------------------------------------------------------
// One step (engine thread)

static int reserve_batch(engine_t *e, int n_tokens, int n_seqs, size_t n_table) {
    if (n_tokens > e->cap_tok) {
        int cap = e->cap_tok;
        if (grow_int((void **)&e->b_tokens, &cap, n_tokens, sizeof *e->b_tokens) < 0) return -1;
        cap = e->cap_tok;
        if (grow_int((void **)&e->b_pos, &cap, n_tokens, sizeof *e->b_pos) < 0) return -1;
        cap = e->cap_tok;
        if (grow_int((void **)&e->b_slots, &cap, n_tokens, sizeof *e->b_slots) < 0) return -1;
        e->cap_tok = cap;
    }
    if (n_seqs + 1 > e->cap_seq) {
        int need = n_seqs + 1, cap = e->cap_seq;
        if (grow_int((void **)&e->b_qstart, &cap, need, sizeof(int32_t)) < 0) return -1;
        cap = e->cap_seq;
        if (grow_int((void **)&e->b_ctx, &cap, need, sizeof(int32_t)) < 0) return -1;
        cap = e->cap_seq;
        if (grow_int((void **)&e->b_rows, &cap, need, sizeof(int32_t)) < 0) return -1;
        cap = e->cap_seq;
        if (grow_int((void **)&e->b_row_seq, &cap, need, sizeof(int32_t)) < 0) return -1;
        cap = e->cap_seq;
        if (grow_int((void **)&e->row_out, &cap, need, sizeof(int32_t)) < 0) return -1;
        cap = e->cap_seq;
        if (grow_int((void **)&e->row_seq, &cap, need, sizeof(eng_seq_t *)) < 0) return -1;
        for (int r = e->cap_seq; r < cap; r++)
            e->row_seq[r] = NULL;
        e->cap_seq = cap;
    }
    if (n_seqs > e->cap_rows) {
        int cap = e->cap_rows;
        if (grow_int((void **)&e->rows, &cap, n_seqs, sizeof *e->rows) < 0) return -1;
        cap = e->cap_rows;
        if (grow_int((void **)&e->rows_owner, &cap, n_seqs, sizeof *e->rows_owner) < 0)
            return -1;
        cap = e->cap_rows;
        if (grow_int((void **)&e->results, &cap, n_seqs, sizeof *e->results) < 0) return -1;
        for (int r = e->cap_rows; r < cap; r++)
            e->rows_owner[r] = NULL;
        e->cap_rows = cap;
    }
    /* rows keep their offsets when the table grows with an unchanged stride */
    return grow((void **)&e->b_tables, &e->cap_tables, n_table, sizeof *e->b_tables);
}

typedef struct step_counts {
    int prefill, decode;
} step_counts_t;

/* Gives each planned sequence a row of the batch: the one it had last step when it is still
 * in range and its table there is still valid, else a free one (written from scratch). In a
 * steady batch every sequence keeps its row. Fills row_out. */
static void assign_rows(engine_t *e, const sched_out_t *out) {
    int n = out->n;
    sched_seq_t *const *seqs = out->seqs;
    int32_t *restrict row_out = e->row_out;
    eng_seq_t **restrict row_seq = e->row_seq;
    uint32_t table_gen = e->table_gen;
    memset(row_out, 0xff, (size_t)n * sizeof *row_out); /* -1: free */
    int unplaced = 0;
    for (int i = 0; i < n; i++) {
        eng_seq_t *q = seq_of(seqs[i]);
        int r = q->row;
        if (r >= 0 && r < n && row_seq[r] == q && q->row_gen == table_gen &&
            q->row_bgen == q->s.blocks_gen) {
            row_out[r] = i;
        } else {
            q->row = -1;
            unplaced++;
        }
    }
    for (int i = 0, free_row = 0; unplaced > 0; i++) {
        eng_seq_t *q = seq_of(seqs[i]);
        if (q->row >= 0) continue;
        while (row_out[free_row] >= 0)
            free_row++;
        row_out[free_row] = i;
        row_seq[free_row] = q;
        q->row = free_row;
        q->row_blocks = 0;
        q->row_gen = table_gen;
        q->row_bgen = q->s.blocks_gen;
        unplaced--;
    }
}

/* The KV slot of position pos in a block table of nb blocks. Positions in the last block need
 * no division (a decode's always is). */
static inline int64_t slot_of(const int32_t *blocks, int nb, int bs, int pos) {
    int last = (nb - 1) * bs;
    return pos >= last ? (int64_t)blocks[nb - 1] * bs + (pos - last)
                       : (int64_t)blocks[pos / bs] * bs + pos % bs;
}

/* A choice's first scheduling: its queue time ends, and choice 0 counts its prefix-cache
 * lookup. */
static void first_scheduled(engine_t *e, eng_seq_t *q, double now, uint64_t *queried,
                            uint64_t *hit) {
    q->t_sched = now;
    if (q->choice != 0) return;
    *queried += (uint64_t)q->s.prefix_queried;
    *hit += (uint64_t)q->s.cached_tokens;
    if (q->req->queued) {
        q->req->queued = false;
        atomic_fetch_sub(&e->n_queued, 1);
    }
}

/* Lays the plan out as the backend's varlen batch, in row order, with the sampler row of each
 * row that gets logits (host bookkeeping), and notes first schedulings (at t0). One pass over
 * the sequences; cost O(sequences + new tokens + new blocks). */
static int build_batch(engine_t *e, const sched_out_t *out, double t0, be_batch_t *b,
                       step_counts_t *c) {
    int bs = e->bs, n = out->n;
    if (out->max_blocks > e->stride) {
        int need = out->max_blocks;
        e->stride = need < 8 ? 16 : 2 * need; /* rarely: the longest sequence doubled */
        e->table_gen++;
    }
    int rows = n + 1 > e->cap_seq ? n + 1 : e->cap_seq;
    if (reserve_batch(e, out->n_tokens, n, (size_t)rows * (size_t)e->stride) < 0) return -1;
    assign_rows(e, out);
    /* Locals, restrict: the stores below alias nothing else, so nothing is reloaded per row. */
    sched_seq_t *const *seqs = out->seqs;
    const int *n_new_of = out->n_new;
    const int32_t *row_out = e->row_out;
    int32_t *restrict tokens = e->b_tokens, *restrict positions = e->b_pos;
    int64_t *restrict slots = e->b_slots;
    int32_t *restrict qstart = e->b_qstart, *restrict ctx = e->b_ctx;
    int32_t *restrict logit_rows = e->b_rows, *restrict logit_seq = e->b_row_seq;
    int32_t *restrict tables = e->b_tables;
    size_t stride = (size_t)e->stride;
    sampler_row_t *restrict srows = e->rows;
    eng_seq_t **restrict srows_owner = e->rows_owner;
    const int32_t *eos = e->stop_ids;
    int n_eos = e->n_stop_ids;
    uint64_t queried = 0, hit = 0;
    int t = 0, n_logits = 0, decode = 0, prefill = 0;
    for (int r = 0; r < n; r++) {
        int i = row_out[r];
        eng_seq_t *q = seq_of(seqs[i]);
        const sched_seq_t *s = &q->s;
        if (q->t_sched == 0) first_scheduled(e, q, t0, &queried, &hit);
        int c0 = s->n_computed, n_new = n_new_of[i], nb = s->n_blocks;
        const int32_t *blocks = s->blocks, *seq_tokens = s->tokens;
        qstart[r] = t;
        if (n_new == 1) { /* a decode (or a prompt's last token): no loop to set up */
            tokens[t] = seq_tokens[c0];
            positions[t] = c0;
            slots[t++] = slot_of(blocks, nb, bs, c0);
            bool is_decode = c0 == s->n_tokens - 1 && c0 >= s->n_prompt;
            decode += is_decode;
            prefill += !is_decode;
        } else {
            prefill += n_new;
            for (int pos = c0; pos < c0 + n_new; pos++, t++) {
                tokens[t] = seq_tokens[pos];
                positions[t] = pos;
                slots[t] = slot_of(blocks, nb, bs, pos);
            }
        }
        ctx[r] = c0 + n_new;
        int32_t *row = tables + (size_t)r * stride;
        for (int k = q->row_blocks; k < nb; k++) /* usually none, or one */
            row[k] = blocks[k];
        q->row_blocks = nb;
        if (c0 + n_new == s->n_tokens) {
            int l = n_logits++;
            logit_rows[l] = t - 1;
            logit_seq[l] = i;
            /* q->srow first: a new choice may sit where a finished one was freed */
            if (q->srow == l && srows_owner[l] == q && srows[l].prompt == seq_tokens) {
                srows[l].n_output = s->n_tokens - s->n_prompt;
            } else {
                if (q->srow >= 0 && srows_owner[q->srow] == q)
                    srows_owner[q->srow] = NULL; /* one row per choice, cleared when it ends */
                eng_req_t *req = q->req;
                srows[l] = (sampler_row_t){.params = &req->sp,
                                           .prompt = seq_tokens,
                                           .n_prompt = s->n_prompt,
                                           .output = seq_tokens + s->n_prompt,
                                           .n_output = s->n_tokens - s->n_prompt,
                                           .eos_ids = eos,
                                           .n_eos = n_eos,
                                           .seed = req->seed,
                                           .choice = q->choice};
                srows_owner[l] = q;
                q->srow = l;
            }
        }
    }
    if (queried > 0) stats_add_prefix(e->stats, queried, hit);
    qstart[n] = t;
    c->decode = decode;
    c->prefill = prefill;
    *b = (be_batch_t){.n_tokens = t,
                      .n_seqs = n,
                      .token_ids = tokens,
                      .positions = positions,
                      .slot_mapping = slots,
                      .query_start = qstart,
                      .context_len = ctx,
                      .block_tables = tables,
                      .block_table_stride = (int)stride,
                      .n_logits = n_logits,
                      .logit_rows = logit_rows};
    return 0;
}

/* Every request with a sequence in the failed step ends with the error. */
static void fail_step(engine_t *e, const sched_out_t *out, const char *what, const char *msg) {
    fprintf(stderr, "tachyon: engine: %s failed: %s\n", what, msg);
    char buf[sizeof(((err_t *)0)->msg) + 32];
    snprintf(buf, sizeof buf, "%s failed: %s", what, msg);
    for (int i = 0; i < out->n; i++) {
        eng_req_t *req = seq_of(out->seqs[i])->req;
        if (req->n_finished < req->n) end_request(e, req, ENGINE_FINISH_ERROR, buf);
    }
}

/* Samples every row: on the device when the backend can, else on the host from the logits. */
static int sample_rows(engine_t *e, const be_batch_t *b, err_t *err) {
    if (e->be->ops->sample) return e->be->ops->sample(e->be, e->rows, b->n_logits, e->results, err);
    size_t vocab = (size_t)e->cfg->vocab_size;
    for (int l = 0; l < b->n_logits; l++)
        sampler_sample(e->smp, e->logits + (size_t)l * vocab, &e->rows[l], &e->results[l]);
    return 0;
}

/* Runs one step; fills *st (but for its end time and duration) and returns true when one ran. */
static bool step(engine_t *e, stats_step_t *st) {
    double t0 = engine_now();
    sched_out_t out;
    sched_seq_t *failed;
    while (sched_schedule(e->sched, &out, &failed) < 0)
        end_request(e, seq_of(failed)->req, ENGINE_FINISH_ERROR, "out of memory");
    if (out.n == 0) {
        e->stalled = out.n_preempted == 0;
        e->extra_preempted += out.n_preempted;
        return false;
    }
    be_batch_t b;
    step_counts_t counts = {0};
    err_t err = {{0}};
    double tf0 = 0, tf1 = 0;
    if (build_batch(e, &out, t0, &b, &counts) < 0) {
        fail_step(e, &out, "building the batch", "out of memory");
        goto record;
    }
    float *logits = NULL;
    if (!e->be->ops->sample && b.n_logits > 0) {
        size_t need = (size_t)b.n_logits * (size_t)e->cfg->vocab_size;
        if (grow((void **)&e->logits, &e->cap_logits, need, sizeof *e->logits) < 0) {
            fail_step(e, &out, "allocating logits", "out of memory");
            goto record;
        }
        logits = e->logits;
    }
    /* The backend's time: the forward pass and the sampling math (on the device, or the host
     * sampler for backends without one); the rest of the step is the engine's own cost. */
    tf0 = engine_now();
    int rc = backend_forward(e->be, &b, logits, &err);
    if (rc < 0) {
        tf1 = engine_now();
        fail_step(e, &out, "the forward pass", err.msg);
        goto record;
    }
    rc = b.n_logits > 0 ? sample_rows(e, &b, &err) : 0;
    tf1 = engine_now();
    if (rc < 0) {
        fail_step(e, &out, "sampling", err.msg);
        goto record;
    }
    sched_advance(e->sched, &out);
    stats_add_generation_tokens(e->stats, (uint64_t)b.n_logits);
    double now = engine_now();
    for (int l = 0; l < b.n_logits; l++) {
        eng_seq_t *q = seq_of(out.seqs[e->b_row_seq[l]]);
        /* forks first: a choice 0 that ends on its first token still shares its prompt */
        if (q->choice == 0 && q->req->n_started < q->req->n) fork_choices(e, q->req);
        if (!q->finished) on_token(e, q, &e->results[l], now);
    }
record:
    flush_itl(e);
    *st = (stats_step_t){.t = t0, /* the start, until record_step */
                         .forward_ms = (float)((tf1 - tf0) * 1e3),
                         .running = out.n,
                         .waiting = sched_num_waiting(e->sched),
                         .kv_used = kv_used(e->kv),
                         .kv_total = e->num_blocks,
                         .prefill_tokens = counts.prefill,
                         .decode_tokens = counts.decode,
                         .preempted = out.n_preempted + e->extra_preempted};
    e->extra_preempted = 0;
    return true;
}

/* Records a step that started at st->t and ends now. */
static void record_step(engine_t *e, stats_step_t *st) {
    double t1 = engine_now();
    st->step_ms = (float)((t1 - st->t) * 1e3);
    st->t = t1;
    stats_record_step(e->stats, st);
    e->last_rec = *st;
}

/* Lists the live choices for the console, oldest first, at most every 100 ms (and whenever the
 * engine goes idle, so an empty list shows at once): cheap next to a step at any batch size. */
static void record_active(engine_t *e, bool force) {
    double now = engine_now();
    if (!force && now - e->active_t < 0.1) return;
    e->active_t = now;
    int n = 0, total = 0;
    eng_req_t *oldest = e->live;
    while (oldest && oldest->next)
        oldest = oldest->next; /* the live list is newest first */
    for (eng_req_t *req = oldest; req; req = req->prev) {
        for (int c = 0; c < req->n_started; c++) {
            const eng_seq_t *q = &req->seqs[c];
            if (q->finished) continue;
            total++;
            if (n == STATS_MAX_ACTIVE) continue;
            stats_active_t *a = &e->active[n++];
            const sched_seq_t *s = &q->s;
            a->choice = q->choice;
            snprintf(a->id, sizeof a->id, "%s", req->id ? req->id : "");
            a->prompt_tokens = s->n_prompt;
            a->generated = s->n_tokens - s->n_prompt;
            a->cached_tokens = s->cached_tokens;
            a->arrival = req->arrival;
            a->first_token = q->t_first;
            a->preemptions = s->n_preemptions;
            if (s->state == SCHED_SEQ_RUNNING)
                a->state = s->n_computed < s->n_tokens - 1 ? STATS_REQ_PREFILL : STATS_REQ_DECODE;
            else
                a->state = s->admitted ? STATS_REQ_PREEMPTED : STATS_REQ_WAITING;
        }
    }
    stats_record_active(e->stats, e->active, n, total, now);
}

/* Before the engine sleeps: a record of the state it sleeps in (no batch), when the last
 * record shows another (the last step's batch, a cancel, a rebuild), so that the gauges do not
 * keep showing finished work. */
static void record_idle(engine_t *e) {
    stats_step_t st = {.t = engine_now(),
                       .waiting = sched_num_waiting(e->sched),
                       .kv_used = kv_used(e->kv),
                       .kv_total = e->num_blocks,
                       .preempted = e->extra_preempted};
    const stats_step_t *l = &e->last_rec;
    if (l->running == 0 && l->waiting == st.waiting && l->kv_used == st.kv_used &&
        l->kv_total == st.kv_total && st.preempted == 0)
        return;
    stats_record_step(e->stats, &st);
    e->last_rec = st;
    e->extra_preempted = 0;
}

// ---------------------------------------------------------------------------------------------
// Rebuilding the KV pool (engine thread)

/* Sets up the pool for flags f (checked by check_rebuild_flags). */
static int make_pool(engine_t *e, const flag_values_t *f, err_t *err) {
    int nb = pool_blocks(e, f, err);
    if (nb < 0) return -1;
    kv_pool_t *kv = kv_create(nb, f->block_size, f->enable_prefix_caching);
    if (!kv) return err_set(err, "out of memory for a KV pool of %d blocks", nb);
    if (backend_kv_reserve(e->be, nb, f->block_size, err) < 0) {
        kv_destroy(kv);
        return -1;
    }
    kv_destroy(e->kv);
    e->kv = kv;
    e->num_blocks = nb;
    e->bs = f->block_size;
    e->mml = f->max_model_len;
    return 0;
}

static int rebuild(engine_t *e, flag_values_t *f, err_t *err) {
    if (check_rebuild_flags(e, f, err) < 0) return -1;
    if (pool_blocks(e, f, err) < 0) return -1;
    for (eng_req_t *req = e->live; req; req = req->next) {
        int n_prompt = req->seqs[0].s.n_prompt;
        int need = req->max_tokens_set ? n_prompt + req->max_tokens : n_prompt + 1;
        for (int c = 0; c < req->n; c++)
            if (!req->seqs[c].finished && req->seqs[c].s.n_tokens + 1 > need)
                need = req->seqs[c].s.n_tokens + 1;
        if (need > f->max_model_len)
            return err_set(err,
                           "max-model-len %d is too small for request %s, which needs %d tokens",
                           f->max_model_len, req->id ? req->id : "(no id)", need);
    }
    e->extra_preempted += sched_release_all(e->sched);
    flag_values_t old = e->f;
    configure_backend(e, f); /* the KV dtype, before the pool is sized */
    if (make_pool(e, f, err) < 0) {
        err_t ignored;
        configure_backend(e, &old);
        if (make_pool(e, &old, &ignored) < 0)
            fprintf(stderr, "tachyon: engine: cannot restore the KV pool either: %s\n",
                    ignored.msg);
        sched_set_pool(e->sched, e->kv);
        return -1;
    }
    sched_set_pool(e->sched, e->kv);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The engine thread

static void apply_live(engine_t *e, const flag_values_t *f) {
    if (f->enable_prefix_caching != e->f.enable_prefix_caching)
        kv_set_prefix_caching(e->kv, f->enable_prefix_caching);
    configure_backend(e, f);
    sched_config_t sc = sched_config_of(f);
    sched_set_config(e->sched, &sc);
    e->f = *f;
}

static void shutdown_requests(engine_t *e) {
    pthread_mutex_lock(&e->mu);
    eng_req_t *inbox = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    take_inbox(e, inbox);
    while (e->live)
        end_request(e, e->live, ENGINE_FINISH_ABORT, NULL);
    flush_events(e);
    free_done(e);
    /* Every stream is detached now, so no cancel notice can arrive any more. */
    pthread_mutex_lock(&e->mu);
    engine_stream_t *cancels = e->cancels;
    e->cancels = NULL;
    if (e->rebuild_pending) {
        e->rebuild_pending = false;
        e->rebuild_rc = err_set(&e->rebuild_err, "the engine is closing");
        e->rebuild_done = true;
        pthread_cond_broadcast(&e->flag_cv);
    }
    pthread_mutex_unlock(&e->mu);
    take_cancels(e, cancels);
}

/* Waits, if there is nothing to do, for news from other threads (requests, cancels, flag
 * changes, a rebuild, closing) and takes it. Returns false when the engine is closing. */
static bool take_news(engine_t *e) {
    pthread_mutex_lock(&e->mu);
    while (atomic_load_explicit(&e->news, memory_order_relaxed) == e->news_seen &&
           (e->stalled || !sched_has_work(e->sched)))
        pthread_cond_wait(&e->cv, &e->mu);
    if (e->closing) {
        pthread_mutex_unlock(&e->mu);
        return false;
    }
    e->news_seen = atomic_load_explicit(&e->news, memory_order_relaxed);
    eng_req_t *inbox = e->inbox_head;
    engine_stream_t *cancels = e->cancels;
    bool live = e->flags_gen != e->applied_gen;
    bool rebuild_now = e->rebuild_pending;
    flag_values_t f = e->flags, rf = e->rebuild_flags;
    e->inbox_head = e->inbox_tail = NULL;
    e->cancels = NULL;
    e->applied_gen = e->flags_gen;
    e->rebuild_pending = false;
    pthread_mutex_unlock(&e->mu);

    if (inbox || cancels || live || rebuild_now) e->stalled = false;
    if (live) apply_live(e, &f);
    take_inbox(e, inbox);
    take_cancels(e, cancels);
    if (rebuild_now) {
        err_t err = {{0}};
        int rc = rebuild(e, &rf, &err);
        if (rc == 0) e->f = rf;
        pthread_mutex_lock(&e->mu);
        if (rc == 0) e->flags = rf;
        e->rebuild_rc = rc;
        e->rebuild_err = err;
        e->rebuild_done = true;
        pthread_cond_broadcast(&e->flag_cv);
        pthread_mutex_unlock(&e->mu);
    }
    return true;
}

static void *engine_main(void *arg) {
    engine_t *e = arg;
    atomic_store(&e->alive, true);
    for (;;) {
        /* With work to do and no news since the last look, straight to the step: the lock
         * that submitters take is left alone (news only grows, under it). */
        bool busy = !e->stalled && sched_has_work(e->sched);
        if ((!busy || atomic_load_explicit(&e->news, memory_order_acquire) != e->news_seen) &&
            !take_news(e))
            break;
        stats_step_t st;
        bool ran = sched_has_work(e->sched) && !e->stalled && step(e, &st);
        /* A step's time includes publishing its events, so it is recorded after them; but
         * before sleeping, the gauges are recorded first, so that a reader who got the last
         * events also sees the engine idle in engine_stats(). */
        if (e->stalled || !sched_has_work(e->sched)) {
            if (ran) record_step(e, &st);
            record_idle(e);
            record_active(e, true);
            flush_events(e);
        } else {
            flush_events(e);
            if (ran) record_step(e, &st);
            record_active(e, false);
        }
        free_done(e);
    }
    atomic_store(&e->alive, false);
    shutdown_requests(e);
    return NULL;
}

bool engine_alive(engine_t *eng) {
    return atomic_load(&eng->alive);
}

// ---------------------------------------------------------------------------------------------
// Submitting

static void free_unsubmitted(eng_req_t *req, engine_stream_t *s) {
    if (s) {
        atomic_store(&s->refs, 1);
        stream_unref(s);
    }
    if (req) free_request(req);
}

int engine_submit(engine_t *e, const engine_request_t *r, engine_stream_t **out, err_t *err) {
    *out = NULL;
    if (!r || !r->prompt || r->n_prompt <= 0) return err_set(err, "the prompt is empty");
    int vocab = e->cfg->vocab_size;
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= vocab)
            return err_set(err, "prompt token %d (id %d) is outside the vocabulary (0..%d)", i,
                           r->prompt[i], vocab - 1);

    pthread_mutex_lock(&e->mu);
    flag_values_t f = e->flags;
    pthread_mutex_unlock(&e->mu);

    eng_req_t *req = calloc(1, sizeof *req);
    if (!req) {
        err_set(err, "out of memory");
        return ENGINE_E_NOMEM;
    }
    if (sampling_params_copy(&req->sp, &r->sampling, err) < 0) { /* too many stops, or memory */
        free(req);
        return ENGINE_E_INVALID;
    }
    sampling_params_t defaults;
    defaults_from(e, &f, &defaults);
    int asked = r->sampling.max_tokens;
    if (sampling_params_resolve(&req->sp, &defaults, err) < 0) goto fail;
    if (req->sp.n_stop > 0 && !e->tok) {
        err_set(err, "stop strings need a tokenizer, and this model (%s) has none", e->cfg->source);
        goto fail;
    }
    int mml = f.max_model_len;
    if (asked != SAMPLING_UNSET_I && r->n_prompt + asked > mml) {
        err_set(err,
                "This model's maximum context length is %d tokens. However, you requested %d "
                "tokens (%d in the messages, %d in the completion). Please reduce the length of "
                "the messages or completion.",
                mml, r->n_prompt + asked, r->n_prompt, asked);
        goto fail;
    }
    if (r->n_prompt >= mml) {
        err_set(err,
                "This model's maximum context length is %d tokens. However, your prompt has %d "
                "tokens, which leaves no room for the completion.",
                mml, r->n_prompt);
        goto fail;
    }
    req->max_tokens_set = asked != SAMPLING_UNSET_I;
    req->max_tokens = req->sp.max_tokens != SAMPLING_UNSET_I ? req->sp.max_tokens : INT_MAX;
    /* generation_config.json's max_new_tokens caps even an explicit max_tokens (vLLM) */
    if (defaults.max_tokens != SAMPLING_UNSET_I && defaults.max_tokens < req->max_tokens)
        req->max_tokens = defaults.max_tokens;
    if (req->sp.min_tokens < 0) req->sp.min_tokens = 0;
    req->n = req->sp.n;
    req->arrival = r->arrival_time > 0 ? r->arrival_time : engine_now();
    if (r->request_id && !(req->id = strdup(r->request_id))) goto oom;
    size_t max_stop = 0;
    for (int i = 0; i < req->sp.n_stop; i++)
        if (strlen(req->sp.stop[i]) > max_stop) max_stop = strlen(req->sp.stop[i]);
    req->seqs = calloc((size_t)req->n, sizeof *req->seqs);
    if (!req->seqs) goto oom;
    int ahead = req->max_tokens < TOKENS_AHEAD ? req->max_tokens : TOKENS_AHEAD;
    for (int c = 0; c < req->n; c++) {
        eng_seq_t *q = &req->seqs[c];
        q->req = req;
        q->choice = c;
        q->row = q->srow = -1;
        /* Choices 1.. get the prompt when they fork from choice 0. */
        if (sched_seq_init(&q->s, r->prompt, c == 0 ? r->n_prompt : 0,
                           c == 0 ? ahead : r->n_prompt + ahead) < 0)
            goto oom;
        q->s.priority = r->priority;
        q->s.arrival = req->arrival;
        if (e->tok && req->sp.n_stop > 0) { /* stop strings: the engine detokenizes */
            q->ts = tok_stream_create(e->tok, req->sp.skip_special_tokens);
            /* held back (< longest stop) + one push, or + the finish tail */
            q->cap_pend = max_stop + e->max_chunk + 8;
            q->pend = malloc(q->cap_pend);
            if (!q->ts || !q->pend) goto oom;
        }
    }
    req->reader_decodes = e->tok && req->sp.n_stop == 0;
    engine_stream_t *s = stream_create(r, req->n, req->reader_decodes ? e->tok : NULL,
                                       req->sp.skip_special_tokens);
    if (!s) goto oom;
    req->stream = s;
    s->eng = e;

    pthread_mutex_lock(&e->mu);
    if (e->closing) {
        pthread_mutex_unlock(&e->mu);
        err_set(err, "the engine is closing");
        free_unsubmitted(req, s);
        return ENGINE_E_BUSY;
    }
    int limit = e->flags.max_queued_requests;
    if (limit > 0 && atomic_load(&e->n_queued) >= limit) {
        pthread_mutex_unlock(&e->mu);
        err_set(err, "too many requests are waiting (max-queued-requests %d); try again later",
                limit);
        free_unsubmitted(req, s);
        return ENGINE_E_BUSY;
    }
    uint64_t k = e->n_submitted++;
    req->seed = req->sp.has_seed ? req->sp.seed : rng_bits(e->flags.seed, 0x5eed, k);
    for (int c = 0; c < req->n; c++)
        req->seqs[c].s.order = k * SAMPLING_MAX_N + (uint64_t)c;
    req->queued = true;
    atomic_fetch_add(&e->n_queued, 1);
    if (e->inbox_tail)
        e->inbox_tail->next = req;
    else
        e->inbox_head = req;
    e->inbox_tail = req;
    tell_engine(e);
    pthread_mutex_unlock(&e->mu);
    stats_add_submitted(e->stats, 1);
    *out = s;
    return 0;

oom:
    err_set(err, "out of memory");
    free_unsubmitted(req, NULL);
    return ENGINE_E_NOMEM;
fail:
    free_unsubmitted(req, NULL);
    return ENGINE_E_INVALID;
}

// ---------------------------------------------------------------------------------------------
// Flags

int engine_flag_get(engine_t *e, const char *name, char *buf, size_t size, err_t *err) {
    const flag_def_t *d = flags_find(name);
    if (!d) return err_set(err, "unknown flag \"%s\"", name ? name : "");
    pthread_mutex_lock(&e->mu);
    flags_format(d, &e->flags, buf, size);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

int engine_flag_set(engine_t *e, const char *name, const char *value, err_t *err) {
    const flag_def_t *d = flags_find(name);
    if (!d) return err_set(err, "unknown flag \"%s\"", name ? name : "");
    if (d->apply == FLAG_RELOAD)
        return err_set(err, "%s needs a restart: it changes the model or its parallel layout",
                       d->name);
    pthread_mutex_lock(&e->flag_mu);
    pthread_mutex_lock(&e->mu);
    flag_values_t nf = e->flags;
    int rc = flags_set(d, value, &nf, err);
    if (rc == 0 && d->apply == FLAG_REBUILD) rc = check_rebuild_flags(e, &nf, err);
    if (rc < 0 || !flags_differ(d, &nf, &e->flags)) {
        /* nothing to change */
    } else if (d->apply == FLAG_LIVE) {
        e->flags = nf;
        e->flags_gen++;
        tell_engine(e);
    } else if (e->closing) {
        rc = err_set(err, "the engine is closing");
    } else {
        e->rebuild_flags = nf;
        e->rebuild_pending = true;
        e->rebuild_done = false;
        tell_engine(e);
        while (!e->rebuild_done)
            pthread_cond_wait(&e->flag_cv, &e->mu);
        rc = e->rebuild_rc;
        if (rc < 0 && err) *err = e->rebuild_err;
    }
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_unlock(&e->flag_mu);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Open and close

const model_config_t *engine_model_config(const engine_t *e) {
    return e->cfg;
}

const tokenizer_t *engine_tokenizer(const engine_t *e) {
    return e->tok;
}

int engine_chat_format(const engine_t *e) {
    return e->chat_format;
}

const genconfig_t *engine_genconfig(const engine_t *e) {
    return &e->gc;
}

void engine_describe_backend(const engine_t *e, char *buf, size_t size) {
    e->be->ops->describe(e->be, buf, size);
}

void engine_stats(engine_t *e, stats_snapshot_t *out) {
    stats_snapshot(e->stats, out);
}

static void engine_free(engine_t *e) {
    sched_destroy(e->sched);
    kv_destroy(e->kv);
    sampler_destroy(e->smp);
    backend_destroy(e->be);
    tok_destroy(e->tok);
    weights_destroy(e->w);
    stats_destroy(e->stats);
    free(e->b_tokens);
    free(e->b_pos);
    free(e->b_slots);
    free(e->b_qstart);
    free(e->b_ctx);
    free(e->b_rows);
    free(e->b_row_seq);
    free(e->row_seq);
    free(e->row_out);
    free(e->b_tables);
    free(e->rows);
    free(e->rows_owner);
    free(e->results);
    free(e->logits);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->flag_mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->flag_cv);
    free(e);
}

static int load_text(engine_t *e, err_t *err) {
    mdir_t *dir = weights_dir(e->w);
    e->chat_format = -1;
    memset(&e->gc, 0, sizeof e->gc);
    e->gc.bos_token_id = e->gc.pad_token_id = -1;
    if (dir) {
        if (mdir_has(dir, "tokenizer.json") && tok_load(dir, &e->tok, err) < 0) return -1;
        if (genconfig_load(dir, &e->gc, err) < 0) return -1;
        chat_format_t fmt;
        err_t ignored;
        if (chat_detect_dir(dir, &fmt, &ignored) == 0) e->chat_format = (int)fmt;
    }
    int primary = e->tok ? tok_eos_id(e->tok) : -1;
    if (primary < 0) primary = e->cfg->eos_token_id;
    e->n_stop_ids = genconfig_stop_ids(&e->gc, primary, e->stop_ids, GENCONFIG_MAX_EOS + 1);
    if (e->tok) e->max_chunk = tok_stream_max_chunk(e->tok);
    return 0;
}

int engine_open(const engine_opts_t *o, engine_t **out, err_t *err) {
    *out = NULL;
    engine_t *e = calloc(1, sizeof *e);
    if (!e) return err_set(err, "out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->flag_mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->flag_cv, NULL);
    atomic_init(&e->n_queued, 0);
    const char *backend = o->backend ? o->backend : "cpu";
    e->ops = backend_find(backend);
    if (!e->ops) {
        char names[256] = "";
        for (const char *const *n = backend_names(); *n; n++) {
            strncat(names, " ", sizeof names - strlen(names) - 1);
            strncat(names, *n, sizeof names - strlen(names) - 1);
        }
        err_set(err, "unknown backend \"%s\" (available:%s)", backend, names);
        goto fail;
    }
    model_source_t src = o->model;
    src.lazy_dummy = e->ops->makes_dummy_weights;
    if (weights_open(&src, &e->w, err) < 0) goto fail;
    e->cfg = weights_config(e->w);
    if (load_text(e, err) < 0) goto fail;

    flag_values_t f = o->flags;
    backend_options_t bo = o->backend_opts;
    backend_options_from_flags(&bo, &f);
    if (e->ops->create(&bo, e->w, &e->be, err) < 0) {
        err_prefix(err, "%s backend", e->ops->name);
        goto fail;
    }
    if (check_rebuild_flags(e, &f, err) < 0) goto fail;
    if (make_pool(e, &f, err) < 0) goto fail;
    if (!e->be->ops->sample && !(e->smp = sampler_create(e->cfg->vocab_size))) {
        err_set(err, "out of memory");
        goto fail;
    }
    sched_config_t sc = sched_config_of(&f);
    e->stats = stats_create();
    e->sched = sched_create(e->kv, &sc);
    if (!e->stats || !e->sched) {
        err_set(err, "out of memory");
        goto fail;
    }
    e->flags = e->f = f;
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        err_set(err, "cannot start the engine thread");
        goto fail;
    }
    e->thread_started = true;
    pthread_setname_np(e->thread, "tachyon-engine"); /* top -H, perf, the overhead benchmark */
    *out = e;
    return 0;
fail:
    engine_free(e);
    return -1;
}

void engine_close(engine_t *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->closing = true;
    tell_engine(e);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) pthread_join(e->thread, NULL);
    engine_free(e);
}
