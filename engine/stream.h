/*
 * stream: what a submitted request is answered through, on the reader's side (public; engine.h
 * includes it).
 *
 * A stream carries one request's events in order: text deltas of each choice, then one finish
 * per choice. One thread reads it at a time: engine_stream_poll takes the next event without
 * blocking, engine_stream_wait blocks for one. Every event taken is given back with
 * engine_event_clear. The engine thread is the only writer (engine/stream_int.h).
 *
 *     engine_event_t ev;
 *     while (engine_stream_wait(s, &ev, -1) > 0) {
 *         if (ev.type == ENGINE_EV_DELTA) fwrite(ev.text, 1, ev.text_len, stdout);
 *         engine_event_clear(&ev);
 *     }
 *     engine_stream_release(s);
 *
 * For requests without stop strings the engine thread queues token ids and the reader turns
 * them into text inside poll/wait (as vLLM's and SGLang's front ends detokenize outside the
 * engine core); readers see the same events either way.
 */
#ifndef TACHYON_STREAM_H
#define TACHYON_STREAM_H

#include <stddef.h>
#include <stdint.h>

typedef struct engine_stream engine_stream_t;

typedef enum engine_event_type {
    ENGINE_EV_DELTA,  /* new text and tokens of one choice */
    ENGINE_EV_FINISH, /* a choice ended; one per choice, always the last event of that choice */
} engine_event_type_t;

typedef enum engine_finish_reason {
    ENGINE_FINISH_STOP,   /* EOS, a stop token id or a stop string */
    ENGINE_FINISH_LENGTH, /* max_tokens or the context limit */
    ENGINE_FINISH_ABORT,  /* cancelled, or the engine closed */
    ENGINE_FINISH_ERROR,  /* the backend failed; `error` says why */
} engine_finish_reason_t;

/* "stop", "length", "abort", "error" */
const char *engine_finish_reason_name(engine_finish_reason_t r);

typedef struct engine_token_logprob {
    int32_t id;
    float logprob;
} engine_token_logprob_t;

typedef struct engine_event {
    engine_event_type_t type;
    int choice; /* 0..n-1 */
    /* ENGINE_EV_DELTA (also on FINISH: the last text, possibly empty) */
    char *text; /* UTF-8, never half a code point, never a prefix of a stop string that may
                   still match; never NULL, NUL-terminated; owned by the event */
    size_t text_len;
    int32_t *token_ids; /* [n_tokens] the tokens this delta covers */
    int n_tokens;
    /* with logprobs >= 0: per token, the sampled token's logprob then `n_top` alternatives */
    engine_token_logprob_t *logprobs; /* [n_tokens][1 + n_top] */
    int n_top;
    /* ENGINE_EV_FINISH */
    engine_finish_reason_t reason;
    char *stop_str;     /* the stop string that matched, or NULL */
    int32_t stop_token; /* the EOS / stop id that matched, or -1 */
    char *error;        /* ENGINE_FINISH_ERROR */
    int prompt_tokens;
    int completion_tokens; /* of this choice */
    int cached_tokens;     /* prompt tokens served from the prefix cache */
    double ttft_s, e2e_s;  /* of this choice */
    /* Private: text, token_ids and logprobs live in the stream's event memory (mem_, one
     * reference per event) or, for a text longer than a token usually is, in text_mem_; only
     * engine_event_clear frees them, so do not free or keep those pointers past it. */
    void *mem_;
    void *text_mem_;
} engine_event_t;

/* Takes the next event without blocking: 1 = got one, 0 = none yet, -1 = the stream is over
 * (every choice finished and every event was read). */
int engine_stream_poll(engine_stream_t *s, engine_event_t *ev);

/* As poll, but waits up to timeout_ms (-1 = forever) for an event. */
int engine_stream_wait(engine_stream_t *s, engine_event_t *ev, int timeout_ms);

/* Frees what an event owns. */
void engine_event_clear(engine_event_t *ev);

/* Aborts the request: its sequences leave the batch and free their blocks within one step; the
 * unfinished choices get a finish with reason abort. Idempotent. */
void engine_stream_cancel(engine_stream_t *s);

/* The reader is done with the stream: cancels it if unfinished and frees it when the engine is
 * done with it too. */
void engine_stream_release(engine_stream_t *s);

#endif
