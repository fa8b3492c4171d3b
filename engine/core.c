/*
 * core: one replica of the engine (core.h; vLLM v1's EngineCore). Other threads reach its thread
 * through an inbox under `mu` (submitted requests, cancel notices, flag changes, a rebuild) and
 * a `news` counter; the engine thread loops: take news, schedule, build the batch (batch.c),
 * forward and sample on the backend (core_step.c; core_async.c with steps ahead), process the
 * output (output.c), publish the step's events to the streams (stream.c). Per step the work is
 * O(scheduled sequences + new tokens + new blocks). The types these modules share are in
 * core_int.h.
 */
#include "core_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "expert_load.h"
#include "grow.h"
#include "output.h"
#include "rng.h"
#include "scripted.h"
#include "shard_plan.h"
#include "spec.h"

#define AUTO_POOL_MAX (4ull << 30) /* bytes: the automatic pool is 25% of RAM, at most this */
#define TOKENS_AHEAD  64           /* room for output tokens reserved at submit */

void tell_engine(core_t *e) {
    atomic_fetch_add_explicit(&e->news, 1, memory_order_relaxed);
    pthread_cond_signal(&e->cv);
}

// ---------------------------------------------------------------------------------------------
// Flags and defaults

static void defaults_from(const core_t *e, const flag_values_t *f, sampling_params_t *d) {
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

/* Checks rebuild flags that do not need the engine thread. Normalises max-model-len 0 to the
 * model's context. */
static uint64_t auto_pool_bytes(void);

/* The pool's bytes under flags f: kv-cache-memory, else what the backend can give (the cuda
 * backend: gpu-memory-utilization of the device after weights and workspaces), else 25% of
 * RAM shared by the data-parallel replicas. */
static uint64_t pool_bytes(const core_t *e, const flag_values_t *f) {
    if (f->kv_cache_memory) return f->kv_cache_memory;
    if (e->be->ops->kv_pool_bytes)
        return e->be->ops->kv_pool_bytes(e->be, f->gpu_memory_utilization);
    return auto_pool_bytes() / (uint64_t)(f->data_parallel_size > 1 ? f->data_parallel_size : 1);
}

/* The options a backend takes from the flags (and the model: its SSM state dtype). */
static void backend_options_from_flags(backend_options_t *bo, const flag_values_t *f,
                                       const model_config_t *cfg) {
    bo->gpu_memory_utilization = f->gpu_memory_utilization;
    bo->max_num_batched_tokens = f->max_num_batched_tokens;
    bo->max_num_seqs = f->max_num_seqs;
    bo->cuda_graphs = f->cuda_graphs;
    bo->cpu_matmul_precision = f->cpu_matmul_precision;
    bo->kv_cache_dtype = f->kv_cache_dtype;
    bo->tensor_parallel_size = f->tensor_parallel_size;
    bo->expert_parallel = f->enable_expert_parallel;
    bo->mtp = f->speculative_method == SPEC_MTP;
    bo->ssm_state_bf16 = f->mamba_ssm_cache_dtype == SSM_DTYPE_BF16 ||
                         (f->mamba_ssm_cache_dtype == SSM_DTYPE_AUTO && cfg->ssm_dtype == DT_BF16);
}

/* Hands the backend the flags (engine thread only: a backend is not thread-safe). */
static void configure_backend(core_t *e, const flag_values_t *f) {
    if (!e->be->ops->configure) return;
    backend_options_t bo = {0};
    backend_options_from_flags(&bo, f, e->cfg);
    e->be->ops->configure(e->be, &bo);
}

/* Bytes of one sequence's recurrent state on the backend (0: the model has none). */
static uint64_t state_bytes(const core_t *e) {
    return e->has_state ? e->be->ops->state_bytes(e->be) : 0;
}

int check_rebuild_flags(const core_t *e, flag_values_t *f, err_t *err) {
    int model_len = e->cfg->max_position_embeddings;
    if (f->max_model_len == 0) {
        /* auto: the model's context, or as much of it as the pool can give one sequence (a
         * 40k-token Qwen3 context does not fit the CPU's default pool for the bigger presets) */
        f->max_model_len = model_len;
        size_t per_block = e->be->ops->kv_block_bytes(e->be, f->block_size);
        uint64_t bytes = pool_bytes(e, f), one_state = state_bytes(e);
        bytes = bytes > one_state ? bytes - one_state : 0; /* a sequence's state, if any */
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
    if (f->speculative_method == SPEC_MTP && e->cfg->n_mtp_layers == 0)
        return err_set(err, "speculative method mtp: %s has no MTP head (no mtp.* tensors)",
                       e->cfg->source);
    err_t why = {{0}}; /* mtp_forward with no batch: whether this instance runs the head */
    if (f->speculative_method == SPEC_MTP &&
        (!e->be->ops->mtp_forward ||
         e->be->ops->mtp_forward(e->be, NULL, NULL, 0, NULL, NULL, &why) < 0))
        return err_set(err, "speculative method mtp: the %s backend does not run the MTP head%s%s",
                       e->ops->name, why.msg[0] ? ": " : "", why.msg);
    if (f->kv_cache_dtype == KV_DTYPE_FP8 && strcmp(e->ops->name, "cuda") != 0 &&
        strcmp(e->ops->name, "cpu") != 0)
        return err_set(err,
                       "kv-cache-dtype fp8 needs the cuda backend, or the cpu backend's emulation "
                       "(this engine runs on %s)",
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
 * max-model-len sequence would not fit. A model with recurrent state first takes one state slot
 * per sequence that may run (max-num-seqs) from the same bytes, fewer when that would leave no
 * room for one max-model-len sequence's blocks (*n_slots; 0 for other models). */
static int pool_blocks(const core_t *e, const flag_values_t *f, int *n_slots, err_t *err) {
    uint64_t bytes = pool_bytes(e, f);
    size_t per_block = e->be->ops->kv_block_bytes(e->be, f->block_size);
    if (per_block == 0) return err_set(err, "%s backend: a KV block takes 0 bytes", e->ops->name);
    uint64_t need = ((uint64_t)f->max_model_len + (uint64_t)f->block_size - 1) / f->block_size;
    uint64_t state = state_bytes(e), kv_need = need * per_block;
    *n_slots = 0;
    if (state > 0) {
        uint64_t slots = bytes > kv_need ? (bytes - kv_need) / state : 0;
        if (slots > (uint64_t)f->max_num_seqs) slots = (uint64_t)f->max_num_seqs;
        if (slots == 0)
            return err_set(err,
                           "the KV pool (%llu MiB) cannot hold one sequence's recurrent state "
                           "(%.1f MiB) beside one max-model-len sequence of %d tokens (%llu "
                           "MiB): raise kv-cache-memory or lower max-model-len",
                           (unsigned long long)(bytes >> 20), (double)state / (1 << 20),
                           f->max_model_len, (unsigned long long)(kv_need >> 20));
        *n_slots = (int)slots;
        bytes -= slots * state;
    }
    uint64_t nb = bytes / per_block;
    if (nb > INT_MAX / 2) nb = INT_MAX / 2;
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
// Requests (engine thread)

static void free_request(eng_req_t *req) {
    for (int c = 0; c < req->n; c++) {
        tok_stream_destroy(req->choices[c].ts);
        free(req->choices[c].pend);
        sched_seq_free(&req->choices[c].b.s);
    }
    free(req->choices);
    sampling_params_free(&req->sp);
    free(req->id);
    free(req);
}

/* Detaches the streams of finished requests (after their events were pushed) and frees them. */
static void free_done(core_t *e) {
    eng_req_t **at = &e->done;
    while (*at) {
        eng_req_t *req = *at;
        if (req->free_after > e->n_completed) { /* a step in flight names it */
            at = &req->next_done;
            continue;
        }
        *at = req->next_done;
        engine_stream_t *s = req->stream;
        stream_detach(s);
        stream_unref(s);
        free_request(req);
        atomic_fetch_sub(&e->n_outstanding, 1);
    }
}

static void take_inbox(core_t *e, eng_req_t *list) {
    while (list) {
        eng_req_t *req = list;
        list = req->next;
        req->next = e->live;
        req->prev = NULL;
        if (e->live) e->live->prev = req;
        e->live = req;
        req->stream->req = req;
        /* max-model-len may have shrunk since the request was checked */
        int n_prompt = req->choices[0].b.s.n_prompt;
        char msg[160];
        if (n_prompt >= e->mml || (req->max_tokens_set && n_prompt + req->max_tokens > e->mml)) {
            snprintf(msg, sizeof msg,
                     "the request no longer fits max-model-len %d (prompt %d tokens)", e->mml,
                     n_prompt);
            output_end_request(e, req, ENGINE_FINISH_ERROR, msg);
            continue;
        }
        sched_seq_t *first = &req->choices[0].b.s;
        if (sched_add(e->sched, first) < 0) {
            output_end_request(e, req, ENGINE_FINISH_ERROR, "out of memory");
            continue;
        }
        req->choices[0].started = true;
        req->n_started = 1;
        /* With recurrent state, choices fork where choice 0's state is at a block boundary
         * (scheduler.h): at once for a prompt within one block, else when it gets there. */
        if (e->has_state && req->n > 1) {
            if (sched_fork_point(first, e->f.block_size) == 0)
                output_fork_choices(e, req);
            else
                first->fork_pending = true;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One step (engine thread)

/* A choice's first scheduling (batch_build): a request leaves the queue that
 * max-queued-requests limits when its choice 0 is first scheduled. */
static void on_first_scheduled(void *ctx, batch_seq_t *q) {
    core_t *e = ctx;
    eng_req_t *req = ((eng_choice_t *)q)->req;
    if (q->choice == 0 && req->queued) {
        req->queued = false;
        atomic_fetch_sub(&e->n_queued, 1);
    }
}

/* Records a step that started at st->t and ends now. */
static void record_step(core_t *e, stats_step_t *st) {
    double t1 = engine_now();
    st->step_ms = (float)((t1 - st->t) * 1e3);
    st->t = t1;
    stats_record_step(e->stats, st);
    e->last_rec = *st;
}

/* Lists the live choices for the console, oldest first, at most every 100 ms (and whenever the
 * engine goes idle, so an empty list shows at once): cheap next to a step at any batch size. */
static void record_active(core_t *e, bool force) {
    double now = engine_now();
    if (!force && now - e->active_t < 0.1) return;
    e->active_t = now;
    int n = 0, total = 0;
    eng_req_t *oldest = e->live;
    while (oldest && oldest->next)
        oldest = oldest->next; /* the live list is newest first */
    for (eng_req_t *req = oldest; req; req = req->prev) {
        for (int c = 0; c < req->n_started; c++) {
            const eng_choice_t *q = &req->choices[c];
            if (q->finished) continue;
            total++;
            if (n == STATS_MAX_ACTIVE) continue;
            stats_active_t *a = &e->active[n++];
            const sched_seq_t *s = &q->b.s;
            a->choice = q->b.choice;
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
static void record_idle(core_t *e) {
    stats_step_t st = {.t = engine_now(),
                       .waiting = sched_num_waiting(e->sched),
                       .kv_used = kv_used(e->kv),
                       .kv_total = e->num_blocks,
                       .state_used = e->num_slots - kv_state_available(e->kv),
                       .state_total = e->num_slots,
                       .preempted = e->extra_preempted};
    const stats_step_t *l = &e->last_rec;
    if (l->running == 0 && l->waiting == st.waiting && l->kv_used == st.kv_used &&
        l->kv_total == st.kv_total && l->state_used == st.state_used &&
        l->state_total == st.state_total && st.preempted == 0)
        return;
    stats_record_step(e->stats, &st);
    e->last_rec = st;
    e->extra_preempted = 0;
}

// ---------------------------------------------------------------------------------------------
// Rebuilding the KV pool (engine thread)

/* Sets up the pool for flags f (checked by check_rebuild_flags). */
static int make_pool(core_t *e, const flag_values_t *f, err_t *err) {
    int n_slots;
    int nb = pool_blocks(e, f, &n_slots, err);
    if (nb < 0) return -1;
    kv_pool_t *kv = kv_create(nb, f->block_size, f->enable_prefix_caching && !e->has_state);
    if (!kv || kv_state_init(kv, n_slots) < 0) {
        kv_destroy(kv);
        return err_set(err, "out of memory for a KV pool of %d blocks", nb);
    }
    if (backend_kv_reserve(e->be, nb, f->block_size, err) < 0 ||
        (e->has_state && e->be->ops->state_reserve(e->be, n_slots, err) < 0)) {
        kv_destroy(kv);
        return -1;
    }
    if (e->has_state)
        fprintf(stderr,
                "tachyon: %s: %d recurrent-state slots of %.1f MiB (one per running sequence, "
                "max-num-seqs %d) and %d KV blocks of %d tokens share the pool\n",
                e->cfg->model_type, n_slots, (double)state_bytes(e) / (1 << 20), f->max_num_seqs,
                nb, f->block_size);
    kv_destroy(e->kv);
    e->kv = kv;
    e->num_blocks = nb;
    e->num_slots = n_slots;
    e->batch.block_size = f->block_size;
    e->mml = f->max_model_len;
    return 0;
}

static int rebuild(core_t *e, flag_values_t *f, err_t *err) {
    int n_slots;
    if (check_rebuild_flags(e, f, err) < 0) return -1;
    if (pool_blocks(e, f, &n_slots, err) < 0) return -1;
    for (eng_req_t *req = e->live; req; req = req->next) {
        int n_prompt = req->choices[0].b.s.n_prompt;
        int need = req->max_tokens_set ? n_prompt + req->max_tokens : n_prompt + 1;
        for (int c = 0; c < req->n; c++)
            if (!req->choices[c].finished && req->choices[c].b.s.n_tokens + 1 > need)
                need = req->choices[c].b.s.n_tokens + 1;
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
    stats_set_kv(e->stats, 0, e->num_blocks); /* every sequence preempted: the new pool empty */
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The engine thread

static void apply_live(core_t *e, const flag_values_t *f) {
    if (f->enable_prefix_caching != e->f.enable_prefix_caching)
        kv_set_prefix_caching(e->kv, f->enable_prefix_caching && !e->has_state);
    configure_backend(e, f);
    sched_config_t sc = sched_config_of(f);
    sched_set_config(e->sched, &sc);
    e->f = *f;
}

static void shutdown_requests(core_t *e) {
    core_async_drain(e);
    pthread_mutex_lock(&e->mu);
    eng_req_t *inbox = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    take_inbox(e, inbox);
    while (e->live)
        output_end_request(e, e->live, ENGINE_FINISH_ABORT, NULL);
    output_flush(e);
    free_done(e);
    /* Every stream is detached now, so no cancel notice can arrive any more. */
    pthread_mutex_lock(&e->mu);
    engine_stream_t *cancels = e->cancels;
    id_cancel_t *ids = e->id_cancels;
    flag_change_t *changes = e->changes;
    e->cancels = NULL;
    e->id_cancels = NULL;
    e->changes = e->changes_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    core_take_cancels(e, cancels, ids);
    while (changes) {
        flag_change_t *c = changes;
        changes = c->next;
        c->done(c->ctx, -1, "the engine is closing");
        free(c->value);
        free(c);
    }
}

/* Applies one queued rebuild-flag change and answers it. Only that flag is written back, so
 * that live changes made meanwhile stay. */
static void apply_change(core_t *e, flag_change_t *c) {
    err_t err = {{0}};
    pthread_mutex_lock(&e->mu);
    flag_values_t nf = e->flags;
    pthread_mutex_unlock(&e->mu);
    int rc = flags_set(c->def, c->value, &nf, &err);
    if (rc == 0 && flags_differ(c->def, &nf, &e->f)) {
        rc = rebuild(e, &nf, &err);
        if (rc == 0) {
            char text[64];
            flags_format(c->def, &nf, text, sizeof text); /* normalised: max-model-len 0 */
            flags_set(c->def, text, &e->f, NULL);
            pthread_mutex_lock(&e->mu);
            flags_set(c->def, text, &e->flags, NULL);
            pthread_mutex_unlock(&e->mu);
        }
    }
    c->done(c->ctx, rc, rc < 0 ? err.msg : NULL);
    free(c->value);
    free(c);
}

/* Waits, if there is nothing to do, for news from other threads (requests, cancels, flag
 * changes, a rebuild, closing) and takes it. Returns false when the engine is closing. */
static bool take_news(core_t *e) {
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
    id_cancel_t *ids = e->id_cancels;
    bool live = e->flags_gen != e->applied_gen;
    flag_values_t f = e->flags;
    flag_change_t *changes = e->changes;
    e->inbox_head = e->inbox_tail = NULL;
    e->cancels = NULL;
    e->id_cancels = NULL;
    e->changes = e->changes_tail = NULL;
    e->applied_gen = e->flags_gen;
    pthread_mutex_unlock(&e->mu);

    if (inbox || cancels || ids || live || changes) e->stalled = false;
    if (live || changes) core_async_drain(e); /* flags and the pool change between steps */
    if (live) apply_live(e, &f);
    take_inbox(e, inbox);
    core_take_cancels(e, cancels, ids);
    while (changes) {
        flag_change_t *c = changes;
        changes = c->next;
        apply_change(e, c);
    }
    return true;
}

static void *core_main(void *arg) {
    core_t *e = arg;
    for (;;) {
        /* With work to do and no news since the last look, straight to the step: the lock
         * that submitters take is left alone (news only grows, under it). */
        bool busy = !e->stalled && sched_has_work(e->sched);
        if ((!busy || atomic_load_explicit(&e->news, memory_order_acquire) != e->news_seen) &&
            !take_news(e))
            break;
        stats_step_t st;
        bool ran = false;
        if (sched_has_work(e->sched) && !e->stalled) {
            if (core_async_active(e)) {
                ran = core_async_step(e, &st);
            } else {
                core_async_drain(e); /* switched off with a step in flight */
                ran = core_step(e, &st);
            }
        }
        /* A step's time includes publishing its events, so it is recorded after them; but
         * before sleeping, the gauges are recorded first, so that a reader who got the last
         * events also sees the engine idle in core_stats(). */
        if (e->stalled || !sched_has_work(e->sched)) {
            if (ran) record_step(e, &st);
            record_idle(e);
            record_active(e, true);
            expert_load_poll(e->experts, true, engine_now());
            output_flush(e);
        } else {
            output_flush(e);
            if (ran) record_step(e, &st);
            record_active(e, false);
            expert_load_poll(e->experts, false, engine_now());
            if (e->step_delay_us) usleep((useconds_t)e->step_delay_us);
        }
        free_done(e);
    }
    atomic_store(&e->alive, false);
    shutdown_requests(e);
    return NULL;
}

int core_rank_stats(core_t *e, backend_rank_stats_t *out, int max) {
    return e->be->ops->rank_stats ? e->be->ops->rank_stats(e->be, out, max) : 0;
}

int core_outstanding(core_t *e) {
    return atomic_load(&e->n_outstanding);
}

bool core_alive(core_t *eng) {
    return atomic_load(&eng->alive);
}

// ---------------------------------------------------------------------------------------------
// Submitting

static void free_unsubmitted(eng_req_t *req, engine_stream_t *s) {
    if (s) stream_discard(s);
    if (req) free_request(req);
}

int core_submit(core_t *e, const engine_request_t *r, engine_stream_t **out, err_t *err) {
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
    req->scripted = scripted_match(e->scripted, r->prompt, r->n_prompt, &req->n_scripted);
    size_t max_stop = 0;
    for (int i = 0; i < req->sp.n_stop; i++)
        if (strlen(req->sp.stop[i]) > max_stop) max_stop = strlen(req->sp.stop[i]);
    req->choices = calloc((size_t)req->n, sizeof *req->choices);
    if (!req->choices) goto oom;
    int ahead = req->max_tokens < TOKENS_AHEAD ? req->max_tokens : TOKENS_AHEAD;
    for (int c = 0; c < req->n; c++) {
        eng_choice_t *q = &req->choices[c];
        q->req = req;
        batch_seq_init(&q->b, &req->sp, 0, c); /* the seed once the request has its number */
        /* Choices 1.. get the prompt when they fork from choice 0. */
        if (sched_seq_init(&q->b.s, r->prompt, c == 0 ? r->n_prompt : 0,
                           c == 0 ? ahead : r->n_prompt + ahead) < 0)
            goto oom;
        q->b.s.priority = r->priority;
        q->b.s.arrival = req->arrival;
        if (e->tok && req->sp.n_stop > 0) { /* stop strings: the engine detokenizes */
            q->ts = tok_stream_create(e->tok, req->sp.skip_special_tokens);
            /* held back (< longest stop) + one push, or + the finish tail */
            q->cap_pend = max_stop + e->max_chunk + 8;
            q->pend = malloc(q->cap_pend);
            if (!q->ts || !q->pend) goto oom;
        }
    }
    req->reader_decodes = e->tok && req->sp.n_stop == 0;
    engine_stream_t *s =
        stream_create(req->n, r->wake, r->wake_ctx, req->reader_decodes ? e->tok : NULL,
                      req->sp.skip_special_tokens);
    if (!s) goto oom;
    req->stream = s;
    stream_attach(s, core_on_cancel, e);

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
    for (int c = 0; c < req->n; c++) {
        req->choices[c].b.s.order = k * SAMPLING_MAX_N + (uint64_t)c;
        req->choices[c].b.seed = req->seed;
    }
    req->queued = true;
    atomic_fetch_add(&e->n_queued, 1);
    atomic_fetch_add(&e->n_outstanding, 1);
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
// Open and close

const model_config_t *core_model_config(const core_t *e) {
    return e->cfg;
}

tokenizer_t *core_give_tokenizer(core_t *e) {
    e->tok_lent = true;
    return e->tok;
}

int core_chat_format(const core_t *e) {
    return e->chat_format;
}

void core_describe_backend(const core_t *e, char *buf, size_t size) {
    e->be->ops->describe(e->be, buf, size);
}

int core_devices(const core_t *e, backend_device_t *out, int max) {
    return e->be->ops->devices ? e->be->ops->devices(e->be, out, max) : 0;
}

void core_stats(core_t *e, stats_snapshot_t *out) {
    stats_age_experts(e->stats, engine_now());
    stats_snapshot(e->stats, out);
}

static void core_free(core_t *e) {
    sched_destroy(e->sched);
    kv_destroy(e->kv);
    sampler_destroy(e->smp);
    expert_load_free(e->experts);
    backend_destroy(e->be);
    scripted_free(e->scripted);
    spec_destroy(e->spec);
    if (!e->tok_lent) tok_destroy(e->tok);
    mdir_close(e->tok_dir);
    weights_destroy(e->w);
    stats_destroy(e->stats);
    batch_free(&e->batch);
    free(e->logits);
    core_async_free(e);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* Replica `replica`'s share of the machine: the CPU threads divided between the replicas, its own
 * GPUs after the earlier replicas' ranks. */
static void replica_share(backend_options_t *bo, const flag_values_t *f, int replica) {
    int d = f->data_parallel_size > 1 ? f->data_parallel_size : 1;
    int tp = f->tensor_parallel_size > 1 ? f->tensor_parallel_size : 1;
    if (d == 1) return;
    int threads = bo->n_threads;
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (int)cores : 1;
    }
    bo->n_threads = threads / d > 0 ? threads / d : 1;
    bo->device += replica * tp;
}

int core_open(const engine_opts_t *o, int replica, tokenizer_t *tok, core_t **out, err_t *err) {
    *out = NULL;
    core_t *e = calloc(1, sizeof *e);
    if (!e) return err_set(err, "out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    atomic_init(&e->n_queued, 0);
    atomic_init(&e->n_outstanding, 0);
    load_report_t lr;
    load_report_init(&lr, o);
    load_report(&lr, ENGINE_LOAD_OPEN, NULL);
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
    if (o->flags.tensor_parallel_size > 1 && !e->ops->tensor_parallel) {
        shard_plan_refuse(&src, o->flags.tensor_parallel_size, err);
        goto fail;
    }
    if (weights_open(&src, &e->w, err) < 0) goto fail;
    e->cfg = weights_config(e->w);
    load_report(&lr, ENGINE_LOAD_TOKENIZER, e->w);
    if (core_load_text(e, o->tokenizer, tok, err) < 0) goto fail;
    load_report(&lr, ENGINE_LOAD_WEIGHTS, NULL);

    if (weights_note(e->w)[0]) fprintf(stderr, "tachyon: %s\n", weights_note(e->w));

    flag_values_t f = o->flags;
    backend_options_t bo = o->backend_opts;
    backend_options_from_flags(&bo, &f, e->cfg);
    replica_share(&bo, &f, replica);
    bo.load_progress = load_report_bytes;
    bo.load_progress_user = &lr;
    if (e->ops->create(&bo, e->w, &e->be, err) < 0) {
        err_prefix(err, "%s backend", e->ops->name);
        goto fail;
    }
    if (model_has_state(e->cfg)) {
        if (!e->be->ops->state_bytes || !e->be->ops->state_reserve || !e->be->ops->state_copy) {
            err_set(err, "%s backend: %s keeps recurrent state, which this backend cannot hold",
                    e->ops->name, e->cfg->model_type);
            goto fail;
        }
        e->has_state = true;
        if (f.enable_prefix_caching)
            fprintf(stderr, "tachyon: %s: prefix caching is off: %s\n", e->cfg->model_type,
                    ENGINE_NO_PREFIX_CACHING_WHY);
        f.enable_prefix_caching = false;
    }
    load_report(&lr, ENGINE_LOAD_KV, NULL);
    if (check_rebuild_flags(e, &f, err) < 0) goto fail;
    batch_init(&e->batch, f.block_size, e->stop_ids, e->n_stop_ids, on_first_scheduled, e);
    if (make_pool(e, &f, err) < 0) goto fail;
    lr.l.kv_blocks = e->num_blocks;
    lr.l.block_size = f.block_size;
    lr.l.kv_bytes = (uint64_t)e->num_blocks * e->be->ops->kv_block_bytes(e->be, f.block_size);
    load_report(&lr, ENGINE_LOAD_READY, NULL);
    if (!e->be->ops->sample && !(e->smp = sampler_create(e->cfg->vocab_size))) {
        err_set(err, "out of memory");
        goto fail;
    }
    sched_config_t sc = sched_config_of(&f);
    e->stats = stats_create();
    e->sched = sched_create(e->kv, &sc);
    e->spec = spec_create();
    if (!e->stats || !e->sched || !e->spec) {
        err_set(err, "out of memory");
        goto fail;
    }
    e->experts = expert_load_open(e->cfg, e->be, e->stats, engine_now());
    e->flags = e->f = f;
    stats_set_kv(e->stats, 0, e->num_blocks); /* the pool's size before the first step */
    atomic_store(&e->alive, true); /* from open (engine.h), not from when the thread runs */
    if (pthread_create(&e->thread, NULL, core_main, e) != 0) {
        atomic_store(&e->alive, false);
        err_set(err, "cannot start the engine thread");
        goto fail;
    }
    e->thread_started = true;
    pthread_setname_np(e->thread, "tachyon-engine"); /* top -H, perf, the overhead benchmark */
    *out = e;
    return 0;
fail:
    core_free(e);
    return -1;
}

void core_close(core_t *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->closing = true;
    tell_engine(e);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) pthread_join(e->thread, NULL);
    core_free(e);
}
