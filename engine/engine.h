/*
 * engine: the public API of the inference engine.
 *
 * An engine owns a model, a backend, the paged KV cache and one engine thread that loops
 * schedule -> forward -> sample -> emit while there is work and sleeps when there is none.
 * Requests are submitted from any thread and answered through a stream of events (text deltas,
 * then one finish per choice). A stream's `wake` hook is called from the engine thread whenever
 * new events are queued, so that a server can resume a suspended connection; or a thread can
 * block in engine_stream_wait().
 *
 * The engine thread does only what must be serial. For a request without stop strings it
 * queues token ids, and the text is detokenized by whoever reads the stream, inside
 * engine_stream_poll/wait (as vLLM's and SGLang's front ends detokenize outside the engine
 * core); with stop strings the engine thread detokenizes, since it must see the text to stop.
 * Readers see the same events either way.
 *
 *     engine_opts_t o;
 *     engine_opts_init(&o);
 *     o.model.model = "/models/Qwen3-14B-FP8";
 *     engine_t *eng;
 *     if (engine_open(&o, &eng, &err) < 0) ...
 *     engine_request_t req = {.prompt = ids, .n_prompt = n};
 *     sampling_params_init(&req.sampling);
 *     engine_stream_t *s;
 *     engine_submit(eng, &req, &s, &err);
 *     engine_event_t ev;
 *     while (engine_stream_wait(s, &ev, -1) > 0) {
 *         if (ev.type == ENGINE_EV_DELTA) fwrite(ev.text, 1, ev.text_len, stdout);
 *         bool last = ev.type == ENGINE_EV_FINISH;   // (one per choice; n = 1 here)
 *         engine_event_clear(&ev);
 *         if (last) break;
 *     }
 *     engine_stream_release(s);
 *     engine_close(eng);
 *
 * Streams and their events are in stream.h. Thread safety: every function may be called from
 * any thread, except that one stream is read by one thread at a time. Engine flags are read and
 * changed through engine_flag_get/set (see flags.h for the table).
 */
#ifndef TACHYON_ENGINE_H
#define TACHYON_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "chat.h"
#include "err.h"
#include "flags.h"
#include "genconfig.h"
#include "sampling.h"
#include "stats.h"
#include "stream.h"
#include "tokenizer.h"
#include "weights.h"

typedef struct engine engine_t;

/* A rebuild-flag change answered (engine_flag_set_async): rc 0, or -1 and msg says why. */
typedef void (*engine_flag_done_fn)(void *ctx, int rc, const char *msg);

/* How far engine_open is (engine_opts_t.on_load), for a loading screen: each phase as it starts
 * (and ENGINE_LOAD_WEIGHTS again as the backend reads or uploads the weights' bytes). */
typedef enum engine_load_phase {
    ENGINE_LOAD_OPEN,      /* the model's files: config, safetensors headers (mapped) */
    ENGINE_LOAD_TOKENIZER, /* the weights are mapped (shards, bytes_total known) */
    ENGINE_LOAD_WEIGHTS,   /* the backend takes the weights: bytes of bytes_total so far */
    ENGINE_LOAD_KV,        /* the weights are in; the KV cache is being sized and reserved */
    ENGINE_LOAD_READY,     /* the KV cache is reserved (kv_* known); the engine thread starts */
} engine_load_phase_t;

typedef struct engine_load {
    engine_load_phase_t phase;
    double t;                    /* s since engine_open began */
    const char *model_type;      /* "qwen3" once the config is read, else NULL */
    int n_layers;                /* 0 until then */
    int shards;                  /* safetensors files (0: embedded weights, a preset, dummy) */
    uint64_t bytes, bytes_total; /* the weights taken by the backend so far / all of them */
    int kv_blocks, block_size;   /* from ENGINE_LOAD_READY */
    uint64_t kv_bytes;           /* the KV pool's bytes */
} engine_load_t;

typedef void (*engine_load_fn)(void *user, const engine_load_t *load);

typedef struct engine_opts {
    model_source_t model; /* which model (default: the embedded one) */
    const char *backend;  /* "cpu" (default) or "cuda" */
    backend_options_t backend_opts;
    flag_values_t flags; /* every engine flag (flags.h); flags_init() gives defaults */
    /* A directory whose tokenizer.json, tokenizer_config.json (and chat template) replace the
     * model's own, as vLLM's --tokenizer (NULL: the model's). Its ids must fit the model's
     * vocabulary; generation_config.json stays the model's. */
    const char *tokenizer;
    /* Optional: called on engine_open's thread as it goes (engine_load_t); must not block. */
    engine_load_fn on_load;
    void *load_user;
} engine_opts_t;

void engine_opts_init(engine_opts_t *o);

/* Opens the model (weights, tokenizer, generation_config.json, chat format), creates the
 * backend, sizes the KV pool from the flags and starts the engine thread. A model without a
 * tokenizer (a dummy preset, unless opts.tokenizer names one) still runs on token ids; text
 * features then fail per request.
 * The caller owns *out. */
int engine_open(const engine_opts_t *o, engine_t **out, err_t *err);

/* Stops the engine thread (aborting requests still in flight: their streams get a finish with
 * reason "abort") and frees everything. Streams not yet released stay valid until released.
 * No other call on this engine may run during or after it (streams excepted). */
void engine_close(engine_t *eng);

// ---------------------------------------------------------------------------------------------
// What the engine serves

const model_config_t *engine_model_config(const engine_t *eng);
const tokenizer_t *engine_tokenizer(const engine_t *eng); /* NULL for a preset */
/* The chat format, or -1 when the model has no chat template. */
int engine_chat_format(const engine_t *eng);
/* "cpu, 2 threads, f32" */
void engine_describe_backend(const engine_t *eng, char *buf, size_t size);
/* The devices the engine runs on, in rank order (backend.h: a CUDA ordinal and the PCI bus id
 * NVML finds it by); returns how many (0 on the CPU backend), at most max filled. */
int engine_devices(const engine_t *eng, backend_device_t *out, int max);
/* Data-parallel replicas (--data-parallel-size): each a whole engine (model, KV cache, engine
 * thread, its own devices), requests routed to the least busy unless another holds the prompt's
 * prefix (router.h). 1 without data parallelism. */
int engine_replicas(const engine_t *eng);

// ---------------------------------------------------------------------------------------------
// Requests and streams

typedef struct engine_request {
    const int32_t *prompt; /* token ids (copied) */
    int n_prompt;
    sampling_params_t sampling; /* copied; unset fields take the engine defaults */
    int priority;               /* with --scheduling-policy priority: lower runs first */
    double arrival_time;        /* engine_now() seconds; 0 = now */
    const char *request_id;     /* optional, copied; shown in stats and logs */
    /* Called on the engine thread when the stream gets new events (once per step that gave it
     * events, possibly after the reader already consumed them), outside any lock of the
     * engine's, and never after engine_stream_release has returned. Must not block or call back
     * into the engine except engine_stream_poll. May be NULL. */
    void (*wake)(void *ctx);
    void *wake_ctx;
} engine_request_t;

/* engine_submit's failures: what the request did wrong, or the engine's state. */
enum {
    ENGINE_E_INVALID = -1, /* the request: bad ids, sampling ranges, too long for the context */
    ENGINE_E_BUSY = -2,    /* max-queued-requests reached, or the engine is closing: retry later */
    ENGINE_E_NOMEM = -3,   /* out of memory */
};

/* Validates (prompt within the vocabulary and max-model-len, sampling ranges, prompt + max_tokens
 * within max-model-len, queue limits) and queues the request. On failure nothing is queued, the
 * return value is one of ENGINE_E_* and the message is one an API can show the user. The caller
 * owns *out: engine_stream_release. */
int engine_submit(engine_t *eng, const engine_request_t *req, engine_stream_t **out, err_t *err);

/* Cancels every unfinished request whose id is `id` (as engine_stats() lists it: cut to
 * STATS_ID_LEN - 1 bytes) from the engine thread's next look at its news: each ends with finish
 * reason abort on its stream, as when its client cancels it. Returns 0 once queued (an id that
 * matches nothing by then changes nothing), -1 for an empty id or out of memory. */
int engine_cancel(engine_t *eng, const char *id);

// ---------------------------------------------------------------------------------------------
// Stats and flags

/* A consistent copy of the engine's counters and recent history (stats.h); with data-parallel
 * replicas their sum (stats_merge). */
void engine_stats(engine_t *eng, stats_snapshot_t *out);
/* One replica's own stats (0 <= replica < engine_replicas). */
void engine_replica_stats(engine_t *eng, int replica, stats_snapshot_t *out);

/* Reads a flag's current value as text ("512", "true", "fcfs"). */
int engine_flag_get(engine_t *eng, const char *name, char *buf, size_t size, err_t *err);

/* Changes a flag while the engine runs (on every replica). live flags apply from the next step;
 * rebuild flags drain the batch (running requests are preempted and recomputed, none lost),
 * rebuild the KV pool and resume, and the call returns once that is done (or refused: a
 * max-model-len that a queued request does not fit in, a pool too small for one max-model-len
 * sequence); reload flags (tensor-parallel-size, enable-expert-parallel, data-parallel-size)
 * reopen the engine in place: from the call on, engine_submit refuses new requests
 * (ENGINE_E_BUSY, "the engine is reloading (...)"), those in flight finish (for at most 30 s;
 * then closing their replica ends them with finish reason abort), the replicas are closed and
 * opened again with the new value, and the call returns once the new layout serves, or refused
 * with why when it cannot open (the previous layout then serves again). The handle, its
 * tokenizer and model config, and unreleased streams stay valid across a reload. A bad value
 * changes nothing and the message says why. max-model-len reads back as the effective value
 * (0 sets the model's). */
int engine_flag_set(engine_t *eng, const char *name, const char *value, err_t *err);

/* engine_flag_set without waiting for a rebuild, for threads that must not block (an HTTP
 * event thread, the console's UI thread). Returns -1 (refused at once: err says why; done is
 * not called), 1 (applied, or nothing to change; done is not called) or 0 (a rebuild flag,
 * queued: done(ctx, rc, msg) is called once from the engine thread when the rebuild has been
 * answered, rc 0 or -1 with msg saying why, also when the engine closes first). Changes are
 * applied in the order they were made. `done` must not block. */
int engine_flag_set_async(engine_t *eng, const char *name, const char *value,
                          engine_flag_done_fn done, void *ctx, err_t *err);

/* True while the engine thread runs its loop: from engine_open until engine_close. A failing
 * backend does not stop it (each failed step finishes its requests with an error), so false
 * means the engine is closing or its thread is gone: what /health reports as 503. */
bool engine_alive(engine_t *eng);

/* Seconds on the engine's monotonic clock. */
double engine_now(void);

#endif
