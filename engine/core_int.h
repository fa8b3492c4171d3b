/*
 * core_int: a replica's private types, shared by its modules (engine-internal).
 *
 *   core.c     the engine core (core.h): inbox and news, the step loop, rebuilds, submit,
 *              open/close (vLLM v1's EngineCore); core_flags.c, core_cancel.c and core_load.c
 *              its flag changes, cancels by id and loading reports
 *   batch.c    the step's input batch (batch.h)
 *   output.c   output processing: tokens to events, stop conditions and strings, finishes,
 *              forks for n > 1 (output.h)
 *   stream.c   the per-request event queue (stream.h for readers, stream_int.h for the engine)
 *   spec.c     speculative decoding: drafts, their plan, acceptance (spec.h)
 *
 * A request (eng_req_t) has n choices (eng_choice_t); each choice is one scheduler sequence.
 * Fields under "shared, under mu" are written by any thread holding mu; the rest belong to the
 * engine thread.
 */
#ifndef TACHYON_ENGINE_INT_H
#define TACHYON_ENGINE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "batch.h"
#include "core.h"
#include "engine.h"
#include "kvcache.h"
#include "sampler.h"
#include "scheduler.h"
#include "spec.h"
#include "stream_int.h"

typedef struct eng_req eng_req_t;
typedef struct id_cancel id_cancel_t; /* engine_cancel's queued id (core_cancel.c) */

/* A rebuild-flag change waiting for the engine thread (engine_flag_set_async). */
typedef struct flag_change {
    struct flag_change *next;
    const flag_def_t *def;
    char *value; /* as given */
    engine_flag_done_fn done;
    void *ctx;
} flag_change_t;

/* One choice of a request. */
typedef struct eng_choice {
    batch_seq_t b; /* first: the scheduler's and the batch's pointers convert back */
    /* What every step reads, together after it */
    eng_req_t *req;
    tok_stream_t *ts; /* the engine's detokenizer (stop strings only; else the reader's) */
    bool started;     /* in the scheduler: choice 0 from the inbox, the others from the fork */
    bool finished;
    double t_first, t_last; /* first and latest token; 0 = not yet */
    size_t n_pend, cap_pend;
    char *pend; /* [cap_pend] decoded text not emitted yet (a possible stop string start) */
    /* speculative decoding this step (spec.c): planned with its drafts, and the state slot its
     * recurrent state was copied to before the verify (-1: none) */
    bool spec_planned;
    int32_t spec_snap;
    /* the MTP head (spec.c): the drafts it made for the context of mtp_base tokens, under block
     * table generation mtp_gen; mtp_done: the positions it has read the model's hidden state of
     * (its K/V written from them), under mtp_gen */
    int32_t mtp_draft[SPEC_MAX_TOKENS];
    int n_mtp_draft, mtp_base, mtp_done;
    uint32_t mtp_gen;
    bool placeholder; /* core_async.c: its last token stands for the step in flight's sample */
} eng_choice_t;

static inline eng_choice_t *choice_of(sched_seq_t *s) {
    return (eng_choice_t *)s;
}

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
    eng_choice_t *choices; /* [n] */
    double arrival;
    char *id;
    const int32_t *scripted; /* the output a test scripted for this prompt (scripted.h), or NULL */
    int n_scripted;
    uint64_t free_after; /* finished: freed once core_t.n_completed reaches this (a step still in
                            flight may name its sequences; core_async.c) */
};

/* core_async.c: a step launched and not yet completed, or the one being launched. */
typedef struct async_step {
    bool active;               /* launched, its tokens not yet emitted */
    bool on_device;            /* its samples come from sample_end (else sampled at launch) */
    int n;                     /* its plan's sequences, copied (the scheduler reuses its arrays): */
    sched_seq_t **seqs;        /* [n] */
    int n_logits;              /* its logit rows: */
    int32_t *logit_seq;        /* [n_logits] the plan index of each */
    sampler_result_t *results; /* [n_logits] their samples */
    int cap_seqs, cap_logit_seq, cap_results;
} async_step_t;

struct core {
    atomic_bool alive; /* the engine thread is running its loop */
    /* set by engine_open, then read-only */
    model_weights_t *w;
    const model_config_t *cfg;
    tokenizer_t *tok;
    mdir_t *tok_dir; /* opts.tokenizer's directory (NULL: the model's own) */
    genconfig_t gc;
    int chat_format;
    const backend_ops_t *ops;
    backend_t *be;
    int stop_ids[GENCONFIG_MAX_EOS + 1]; /* tokenizer eos, then generation_config eos ids */
    int n_stop_ids;
    size_t max_chunk; /* tok_stream_max_chunk */
    stats_t *stats;
    struct expert_load *experts; /* MoE models: the expert-load statistics, or NULL */
    struct scripted *scripted;   /* replies scripted for tests, or NULL */
    struct spec *spec;           /* speculative decoding's per-step state (spec.h) */
    int step_delay_us;           /* a pause after each step, for tests (scripted.h), or 0 */
    bool tok_lent;               /* tok belongs to the engine handle (engine.c), not to us */
    bool has_state;              /* the model keeps recurrent state per sequence (Qwen3.5): state
                                    slots in the pool, prefix caching off, forks copy state */

    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* wakes the engine thread */
    atomic_uint news;    /* bumped (under mu) with every change the engine thread must see */
    flag_values_t flags; /* current values; rebuild flags once applied */
    uint64_t flags_gen;
    eng_req_t *inbox_head, *inbox_tail;
    engine_stream_t *cancels;
    id_cancel_t *id_cancels;               /* engine_cancel: ids to cancel */
    flag_change_t *changes, *changes_tail; /* rebuild-flag changes, in order */
    bool closing;
    uint64_t n_submitted;
    atomic_int n_queued;      /* requests submitted and not yet admitted */
    atomic_int n_outstanding; /* requests submitted and not yet freed (core_outstanding) */
    pthread_t thread;
    bool thread_started;

    /* engine thread only */
    unsigned news_seen; /* `news` when the engine thread last took it */
    flag_values_t f;    /* applied */
    uint64_t applied_gen;
    int mml, num_blocks, num_slots;
    kv_pool_t *kv;
    sched_t *sched;
    sampler_t *smp; /* NULL when the backend samples */
    eng_req_t *live;
    stats_active_t active[STATS_MAX_ACTIVE]; /* scratch for record_active */
    double active_t;                         /* when the list was last recorded */
    eng_req_t *done; /* finished requests, freed after their events are pushed */
    bool stalled;    /* the last step had nothing to run: wait for news */
    int extra_preempted;
    stats_step_t last_rec;  /* the last step recorded (its gauges) */
    int spec_step_accepted; /* drafts accepted in this step (spec.c) */
    /* output processing (output.c): the step's inter-token latencies, grouped (every choice
     * that also got a token in the previous step has the same one): [n_itl] (value s, count);
     * and the streams with events written this step */
    double itl_v[8];
    uint64_t itl_n[8];
    int n_itl;
    engine_stream_t *to_publish;
    step_batch_t batch;
    float *logits; /* [cap_logits] for the host sampler */
    size_t cap_logits;
    /* asynchronous scheduling (core_async.c): async[async_cur] is the step in flight when
     * active; steps launched and completed (equal when nothing is in flight) */
    async_step_t async[2];
    int async_cur;
    uint64_t n_launched, n_completed;
};

/* Why hybrid models run without prefix caching (README.md says more). */
#define ENGINE_NO_PREFIX_CACHING_WHY                                                               \
    "a cached block is only reusable with the recurrent state at its end, and a checkpoint of "    \
    "that state per block would cost more memory than the blocks"

/* Wakes the engine thread for a change made under e->mu (which the caller holds). */
void tell_engine(core_t *e);

/* Checks the rebuild flags of f against the model and the pool, filling the automatic ones
 * (max_model_len 0). */
int check_rebuild_flags(const core_t *e, flag_values_t *f, err_t *err);

/* core_load.c: the tokenizer (lent: the engine handle's, else the model's or --tokenizer's),
 * chat format, generation_config.json, stop ids and scripted replies of e's model. */
int core_load_text(core_t *e, const char *tokenizer_path, tokenizer_t *lent, err_t *err);

/* core_load.c: core_open's reports to engine_opts_t.on_load (a no-op without one). */
typedef struct load_report {
    engine_load_fn fn;
    void *user;
    double t0;
    engine_load_t l;
} load_report_t;

void load_report_init(load_report_t *r, const engine_opts_t *o);
/* The phase (and what w, e, the pool know by then: NULL where not yet), reported. */
void load_report(load_report_t *r, engine_load_phase_t phase, const model_weights_t *w);
/* backend_options_t.load_progress: user is the load_report_t. */
void load_report_bytes(void *user, uint64_t done, uint64_t total);

/* core_step.c: runs one synchronous step; fills *st (but for its end time and duration) and
 * returns true when one ran. */
bool core_step(core_t *e, stats_step_t *st);
/* core_step.c: a step with nothing planned (stalled unless it preempted); returns false. */
bool core_nothing_planned(core_t *e, const sched_out_t *out);
/* core_step.c: the plan laid out in *b (batch.c) with the prefix-cache counts recorded, and the
 * host logits buffer when the backend does not sample (*logits, else NULL): NULL, or what failed
 * for want of memory. */
const char *core_lay_out(core_t *e, const sched_out_t *out, double t0, be_batch_t *b,
                         batch_counts_t *counts, float **logits);
/* core_step.c: the host sampler over the laid-out batch's first n_rows rows of e->logits. */
void core_host_sample(core_t *e, int n_rows, sampler_result_t *out);

/* core_step.c, for core_async.c too: a sampled token for choice q (a fork of the other choices
 * first when it is choice 0's first, a scripted reply's token in place of r's), unless q has
 * finished; the request ends with the error of a failed step; the choices forked where the step
 * left their parent at its fork point (models with state). */
void core_emit_token(core_t *e, eng_choice_t *q, sampler_result_t *r, double now);
void core_fail_step(core_t *e, const sched_out_t *out, const char *what, const char *msg);
void core_fork_at_points(core_t *e, const sched_out_t *out);
/* core_step.c: the end of a step: its inter-token latencies flushed, its record (*st, the start t0,
 * backend_s seconds in the backend, the plan's and the batch's counts). */
void core_step_stats(core_t *e, stats_step_t *st, double t0, double backend_s,
                     const sched_out_t *out, const batch_counts_t *counts);

/* core_async.c: asynchronous scheduling (see there). Whether the next step runs ahead
 * (--async-scheduling, the backend, no speculative decoding); one step; the step in flight
 * completed (its tokens emitted), a no-op without one; the buffers freed. */
bool core_async_active(const core_t *e);
bool core_async_step(core_t *e, stats_step_t *st);
void core_async_drain(core_t *e);
void core_async_free(core_t *e);

/* core_cancel.c. The stream_cancel_fn of every attached stream: queues its cancel notice. */
void core_on_cancel(void *ctx, engine_stream_t *s);

/* Engine thread: ends the requests of the streams' notices and of the ids engine_cancel queued
 * (abort), and frees both lists. */
void core_take_cancels(core_t *e, engine_stream_t *list, id_cancel_t *ids);

#endif
