/*
 * engine: the handle engine.h describes, over one core per data-parallel replica (core.h). With
 * one replica every call passes straight to its core; with several, a request goes where the
 * router (router.h) sends it, flags and cancels go to every replica, and the stats are their
 * sum (stats_merge). The replicas never talk to each other: each has its own model copy, KV
 * cache, engine thread and devices, as vLLM's data-parallel engines do behind its API server.
 *
 * The handle also outlives its cores: a reload flag (tensor-parallel-size, expert parallel,
 * data-parallel-size) closes every core and opens new ones in place (reload_main). What callers
 * hold stays valid across it: the tokenizer (loaded once, lent to every core), the model config
 * (a copy) and the streams (a closed core's streams live until released).
 *
 * Locking: `lock` is read-held by every call for as long as it uses a core (short: no call waits
 * on an engine thread under it); a reload write-holds it only to take the cores out and to put
 * the new ones in. `mu` guards the reload state.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "mdir.h"
#include "router.h"

#define RELOAD_DRAIN_S 30.0 /* how long a reload lets requests in flight finish */

struct engine {
    /* set by engine_open, then read-only */
    tokenizer_t *tok;   /* the cores' tokenizer (NULL: none), kept across reloads */
    model_config_t cfg; /* a copy, valid across reloads */
    engine_opts_t opts; /* what cores are opened with; strings owned (own_strings) */
    char *strings[3];   /* opts.model.model, opts.backend, opts.tokenizer */
    /* the replicas */
    pthread_rwlock_t lock;
    int n;            /* cores now (0 while a reload has them closed) */
    core_t **core;    /* [n] */
    router_t *router; /* NULL with one replica */
    /* reload state, under mu */
    pthread_mutex_t mu;
    bool reloading;       /* from the change until the new cores serve */
    bool closing;         /* engine_close: a reload stops waiting for requests in flight */
    flag_values_t flags;  /* the flags the cores have (while reloading: will have) */
    int replicas;         /* engine_replicas: the configured count */
    char reload_what[96]; /* "tensor-parallel-size 2", for the refusals while reloading */
    pthread_t reloader;   /* joined by the next reload or engine_close */
    bool reloader_started;
};

double engine_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void engine_opts_init(engine_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->model.model = MDIR_EMBEDDED;
    o->model.format = LOAD_AUTO;
    o->backend = "cpu";
    flags_init(&o->flags);
}

static int replicas_of(const flag_values_t *f) {
    return f->data_parallel_size > 1 ? f->data_parallel_size : 1;
}

/* Opens the cores of options o (the first one loads the tokenizer unless e->tok is set, and
 * gives it to e). On failure nothing is left open. */
static int open_cores(engine_t *e, const engine_opts_t *o, core_t ***cores, router_t **router,
                      err_t *err) {
    int n = replicas_of(&o->flags);
    if (n > STATS_MERGE_MAX)
        return err_set(err, "data-parallel-size %d: at most %d replicas", n, STATS_MERGE_MAX);
    core_t **c = calloc((size_t)n, sizeof *c);
    *router = NULL;
    if (!c || (n > 1 && !(*router = router_create(n)))) {
        free(c);
        return err_set(err, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        if (core_open(o, i, e->tok, &c[i], err) < 0) {
            if (n > 1) err_prefix(err, "data-parallel replica %d of %d", i, n);
            for (int k = 0; k < i; k++)
                core_close(c[k]);
            router_destroy(*router);
            free(c);
            return -1;
        }
        if (i == 0 && !e->tok) e->tok = core_give_tokenizer(c[0]);
    }
    *cores = c;
    return 0;
}

static void close_cores(core_t **c, int n, router_t *router) {
    for (int i = 0; i < n; i++)
        core_close(c[i]);
    free(c);
    router_destroy(router);
}

static void free_handle(engine_t *e) {
    tok_destroy(e->tok);
    for (int i = 0; i < 3; i++)
        free(e->strings[i]);
    pthread_rwlock_destroy(&e->lock);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

int engine_open(const engine_opts_t *o, engine_t **out, err_t *err) {
    *out = NULL;
    engine_t *e = calloc(1, sizeof *e);
    if (!e) return err_set(err, "out of memory");
    pthread_rwlock_init(&e->lock, NULL);
    pthread_mutex_init(&e->mu, NULL);
    e->opts = *o;
    const char *strs[3] = {o->model.model, o->backend, o->tokenizer};
    for (int i = 0; i < 3; i++)
        if (strs[i] && !(e->strings[i] = strdup(strs[i]))) {
            free_handle(e);
            return err_set(err, "out of memory");
        }
    e->opts.model.model = e->strings[0];
    e->opts.backend = e->strings[1];
    e->opts.tokenizer = e->strings[2];
    if (open_cores(e, o, &e->core, &e->router, err) < 0) {
        free_handle(e);
        return -1;
    }
    e->n = e->replicas = replicas_of(&o->flags);
    e->opts.on_load = NULL; /* a reload runs on its own thread: no loading screen */
    e->cfg = *core_model_config(e->core[0]);
    core_flags(e->core[0], &e->flags);
    *out = e;
    return 0;
}

void engine_close(engine_t *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    bool join = e->reloader_started;
    e->reloader_started = false;
    e->closing = true;
    pthread_mutex_unlock(&e->mu);
    if (join) pthread_join(e->reloader, NULL);
    close_cores(e->core, e->n, e->router);
    free_handle(e);
}

// ---------------------------------------------------------------------------------------------
// What the engine serves: the same model on every replica and across reloads

const model_config_t *engine_model_config(const engine_t *e) {
    return &e->cfg;
}

const tokenizer_t *engine_tokenizer(const engine_t *e) {
    return e->tok;
}

int engine_chat_format(const engine_t *e) {
    engine_t *m = (engine_t *)e;
    pthread_rwlock_rdlock(&m->lock);
    int fmt = e->n ? core_chat_format(e->core[0]) : -1;
    pthread_rwlock_unlock(&m->lock);
    return fmt;
}

void engine_describe_backend(const engine_t *e, char *buf, size_t size) {
    engine_t *m = (engine_t *)e;
    pthread_rwlock_rdlock(&m->lock);
    if (e->n == 0)
        snprintf(buf, size, "reloading");
    else
        core_describe_backend(e->core[0], buf, size);
    size_t len = strlen(buf);
    if (e->n > 1 && len < size)
        snprintf(buf + len, size - len, " x %d data-parallel replicas", e->n);
    pthread_rwlock_unlock(&m->lock);
}

int engine_devices(const engine_t *e, backend_device_t *out, int max) {
    engine_t *m = (engine_t *)e;
    pthread_rwlock_rdlock(&m->lock);
    int total = 0;
    for (int i = 0; i < e->n; i++)
        total += core_devices(e->core[i], out + (total < max ? total : max),
                              total < max ? max - total : 0);
    pthread_rwlock_unlock(&m->lock);
    return total;
}

int engine_replicas(const engine_t *e) {
    engine_t *m = (engine_t *)e;
    pthread_mutex_lock(&m->mu);
    int n = e->replicas;
    pthread_mutex_unlock(&m->mu);
    return n;
}

// ---------------------------------------------------------------------------------------------
// Requests

/* ENGINE_E_BUSY with the reason while a reload runs; 0 otherwise. */
static int refuse_reloading(engine_t *e, const char *what, err_t *err) {
    pthread_mutex_lock(&e->mu);
    bool reloading = e->reloading;
    if (reloading)
        err_set(err, "%s: the engine is reloading (%s); try again when it is done", what,
                e->reload_what);
    pthread_mutex_unlock(&e->mu);
    return reloading ? ENGINE_E_BUSY : 0;
}

int engine_submit(engine_t *e, const engine_request_t *req, engine_stream_t **out, err_t *err) {
    *out = NULL;
    int rc = refuse_reloading(e, "request refused", err);
    if (rc) return rc;
    pthread_rwlock_rdlock(&e->lock);
    if (e->n == 0) { /* reloading, or a reload that could not reopen any layout */
        pthread_rwlock_unlock(&e->lock);
        if (!refuse_reloading(e, "request refused", err))
            err_set(err, "request refused: the engine is down (a reload failed; the log says why)");
        return ENGINE_E_BUSY;
    }
    int r = 0;
    if (e->n > 1) {
        int load[STATS_MERGE_MAX];
        for (int i = 0; i < e->n; i++)
            load[i] = core_outstanding(e->core[i]);
        r = router_pick(e->router, req->prompt, req->n_prompt > 0 ? req->n_prompt : 0, load);
    }
    rc = core_submit(e->core[r], req, out, err);
    pthread_rwlock_unlock(&e->lock);
    return rc;
}

int engine_cancel(engine_t *e, const char *id) {
    int rc = 0;
    pthread_rwlock_rdlock(&e->lock);
    for (int i = 0; i < e->n; i++)
        if (core_cancel(e->core[i], id) < 0) rc = -1;
    pthread_rwlock_unlock(&e->lock);
    return rc;
}

bool engine_alive(engine_t *e) {
    pthread_rwlock_rdlock(&e->lock);
    bool alive = e->n > 0;
    for (int i = 0; i < e->n; i++)
        alive = alive && core_alive(e->core[i]);
    pthread_rwlock_unlock(&e->lock);
    return alive;
}

// ---------------------------------------------------------------------------------------------
// Stats

void engine_replica_stats(engine_t *e, int replica, stats_snapshot_t *out) {
    pthread_rwlock_rdlock(&e->lock);
    if (replica >= 0 && replica < e->n)
        core_stats(e->core[replica], out);
    else /* reloading, or no such replica: nothing runs there */
        memset(out, 0, sizeof *out);
    pthread_rwlock_unlock(&e->lock);
}

int engine_rank_stats(engine_t *e, int replica, backend_rank_stats_t *out, int max) {
    pthread_rwlock_rdlock(&e->lock);
    int n = replica >= 0 && replica < e->n ? core_rank_stats(e->core[replica], out, max) : 0;
    pthread_rwlock_unlock(&e->lock);
    return n;
}

void engine_stats(engine_t *e, stats_snapshot_t *out) {
    pthread_rwlock_rdlock(&e->lock);
    if (e->n <= 1) {
        if (e->n)
            core_stats(e->core[0], out);
        else
            memset(out, 0, sizeof *out);
        pthread_rwlock_unlock(&e->lock);
        return;
    }
    stats_snapshot_t *parts[STATS_MERGE_MAX] = {0};
    int got = 0;
    for (; got < e->n; got++) {
        if (!(parts[got] = malloc(sizeof *parts[got]))) break;
        core_stats(e->core[got], parts[got]);
    }
    if (got == e->n)
        stats_merge(out, parts, got);
    else /* out of memory: replica 0's alone rather than nothing */
        core_stats(e->core[0], out);
    pthread_rwlock_unlock(&e->lock);
    for (int i = 0; i < got; i++)
        free(parts[i]);
}

// ---------------------------------------------------------------------------------------------
// Flags: the same values on every replica

int engine_flag_get(engine_t *e, const char *name, char *buf, size_t size, err_t *err) {
    const flag_def_t *d = flags_find(name);
    if (!d) return err_set(err, "unknown flag \"%s\"", name ? name : "");
    flag_values_t f;
    pthread_rwlock_rdlock(&e->lock);
    pthread_mutex_lock(&e->mu);
    if (e->n && !e->reloading)
        core_flags(e->core[0], &f);
    else
        f = e->flags;
    pthread_mutex_unlock(&e->mu);
    pthread_rwlock_unlock(&e->lock);
    flags_format(d, &f, buf, size);
    return 0;
}

/* A change queued on several replicas: answered once, when the last one answers. */
typedef struct fanout {
    pthread_mutex_t mu;
    int left; /* replicas yet to answer, plus one while engine_flag_set_async still queues */
    int rc;
    err_t why; /* the first refusal */
    engine_flag_done_fn done;
    void *ctx;
} fanout_t;

static void fanout_answer(void *ctx, int rc, const char *msg) {
    fanout_t *f = ctx;
    pthread_mutex_lock(&f->mu);
    if (rc < 0 && f->rc == 0) {
        f->rc = -1;
        err_set(&f->why, "%s", msg ? msg : "");
    }
    bool last = --f->left == 0;
    pthread_mutex_unlock(&f->mu);
    if (!last) return;
    if (f->done) f->done(f->ctx, f->rc, f->rc < 0 ? f->why.msg : NULL);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* A live or rebuild change on every core (under the read lock). Replica 0 first: a refusal
 * there (a bad value, a pool too small) changes nothing anywhere. */
static int set_on_cores(engine_t *e, const char *name, const char *value, engine_flag_done_fn done,
                        void *ctx, err_t *err) {
    if (e->n == 1) return core_flag_set_async(e->core[0], name, value, done, ctx, err);
    fanout_t *f = calloc(1, sizeof *f);
    if (!f) return err_set(err, "out of memory");
    pthread_mutex_init(&f->mu, NULL);
    f->left = e->n + 1;
    f->done = done;
    f->ctx = ctx;
    int rc0 = core_flag_set_async(e->core[0], name, value, fanout_answer, f, err);
    if (rc0 < 0) {
        pthread_mutex_destroy(&f->mu);
        free(f);
        return -1;
    }
    int queued = rc0 == 0;
    if (rc0 != 0) fanout_answer(f, 0, NULL);
    for (int i = 1; i < e->n; i++) {
        err_t ei = {0};
        int rc = core_flag_set_async(e->core[i], name, value, fanout_answer, f, &ei);
        if (rc == 0)
            queued++;
        else
            fanout_answer(f, rc, ei.msg);
    }
    if (queued) {
        fanout_answer(f, 0, NULL); /* the guard: done runs when the last replica answers */
        return 0;
    }
    /* every replica answered at once: no callback (engine.h), the outcome returned */
    int rc = f->rc;
    if (rc < 0) err_set(err, "%s", f->why.msg);
    pthread_mutex_destroy(&f->mu);
    free(f);
    return rc < 0 ? -1 : 1;
}

// ---------------------------------------------------------------------------------------------
// Reload: new cores in place

typedef struct reload_job {
    engine_t *e;
    flag_values_t next, prev;
    engine_flag_done_fn done;
    void *ctx;
} reload_job_t;

/* Requests in flight on the cores that a reload waits for: none once the engine closes. */
static int outstanding(engine_t *e) {
    int busy = 0;
    pthread_mutex_lock(&e->mu);
    bool closing = e->closing;
    pthread_mutex_unlock(&e->mu);
    if (closing) return 0;
    pthread_rwlock_rdlock(&e->lock);
    for (int i = 0; i < e->n; i++)
        busy += core_outstanding(e->core[i]);
    pthread_rwlock_unlock(&e->lock);
    return busy;
}

/* The reload thread: new requests are refused from the change on (ENGINE_E_BUSY); those in
 * flight may finish for RELOAD_DRAIN_S, after which closing their core ends them (abort); then
 * the cores are closed and new ones opened with the new flags (or, when those cannot open, with
 * the old ones again, and the change answered with why). */
static void *reload_main(void *arg) {
    reload_job_t *j = arg;
    engine_t *e = j->e;
    double t0 = engine_now();
    while (outstanding(e) > 0 && engine_now() - t0 < RELOAD_DRAIN_S)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    pthread_rwlock_wrlock(&e->lock);
    core_t **old = e->core;
    int n_old = e->n;
    router_t *old_router = e->router;
    e->core = NULL;
    e->n = 0;
    e->router = NULL;
    pthread_rwlock_unlock(&e->lock);
    close_cores(old, n_old, old_router);

    engine_opts_t o = e->opts;
    o.flags = j->next;
    core_t **cores = NULL;
    router_t *router = NULL;
    err_t err = {{0}};
    int rc = open_cores(e, &o, &cores, &router, &err);
    if (rc < 0) {
        fprintf(stderr, "tachyon: reload: %s; back to the previous layout\n", err.msg);
        o.flags = j->prev;
        err_t again = {{0}};
        if (open_cores(e, &o, &cores, &router, &again) < 0) {
            fprintf(stderr, "tachyon: reload: the previous layout failed too: %s\n", again.msg);
            cores = NULL;
        }
    }
    pthread_rwlock_wrlock(&e->lock);
    pthread_mutex_lock(&e->mu);
    e->core = cores;
    e->n = cores ? replicas_of(&o.flags) : 0;
    e->router = router;
    e->flags = o.flags;
    e->replicas = replicas_of(&o.flags);
    e->reloading = false;
    pthread_mutex_unlock(&e->mu);
    pthread_rwlock_unlock(&e->lock);
    fprintf(stderr, "tachyon: reload %s in %.1f s\n", rc < 0 ? "refused" : "done",
            engine_now() - t0);
    if (j->done) j->done(j->ctx, rc, rc < 0 ? err.msg : NULL);
    free(j);
    return NULL;
}

/* A reload flag: checked, then handed to the reload thread. */
static int reload(engine_t *e, const flag_def_t *d, const char *value, engine_flag_done_fn done,
                  void *ctx, err_t *err) {
    pthread_rwlock_rdlock(&e->lock);
    pthread_mutex_lock(&e->mu);
    flag_values_t cur;
    if (e->n)
        core_flags(e->core[0], &cur);
    else
        cur = e->flags;
    flag_values_t next = cur;
    int rc = flags_set(d, value, &next, err);
    if (rc == 0 && e->reloading)
        rc = err_set(err, "%s: a reload is already running (%s)", d->name, e->reload_what);
    if (rc == 0 && !flags_differ(d, &next, &cur)) rc = 1;
    reload_job_t *j = NULL;
    if (rc == 0 && !(j = malloc(sizeof *j))) rc = err_set(err, "out of memory");
    pthread_t prev = e->reloader;
    bool join = false;
    if (rc == 0) {
        *j = (reload_job_t){.e = e, .next = next, .prev = cur, .done = done, .ctx = ctx};
        join = e->reloader_started;
        e->reloading = true;
        e->flags = next;
        char shown[64];
        flags_format(d, &next, shown, sizeof shown);
        snprintf(e->reload_what, sizeof e->reload_what, "%s %s", d->name, shown);
    }
    pthread_mutex_unlock(&e->mu);
    pthread_rwlock_unlock(&e->lock);
    if (rc != 0) return rc;
    if (join) pthread_join(prev, NULL); /* the last reload's thread, finished */
    pthread_mutex_lock(&e->mu);
    e->reloader_started = pthread_create(&e->reloader, NULL, reload_main, j) == 0;
    bool started = e->reloader_started;
    if (!started) e->reloading = false, e->flags = j->prev;
    pthread_mutex_unlock(&e->mu);
    if (!started) {
        free(j);
        return err_set(err, "cannot start the reload thread");
    }
    return 0;
}

int engine_flag_set_async(engine_t *e, const char *name, const char *value,
                          engine_flag_done_fn done, void *ctx, err_t *err) {
    const flag_def_t *d = flags_find(name);
    if (!d) return err_set(err, "unknown flag \"%s\"", name ? name : "");
    if (d->apply == FLAG_RELOAD) return reload(e, d, value, done, ctx, err);
    if (refuse_reloading(e, d->name, err)) return -1;
    pthread_rwlock_rdlock(&e->lock);
    int rc = e->n ? set_on_cores(e, name, value, done, ctx, err)
                  : err_set(err, "%s: the engine is down", d->name);
    pthread_rwlock_unlock(&e->lock);
    return rc;
}

/* engine_flag_set waits for its change here. */
typedef struct flag_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rc;
    err_t err;
} flag_waiter_t;

static void flag_answered(void *ctx, int rc, const char *msg) {
    flag_waiter_t *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->rc = rc;
    if (rc < 0) err_set(&w->err, "%s", msg);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int engine_flag_set(engine_t *e, const char *name, const char *value, err_t *err) {
    flag_waiter_t w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    int rc = engine_flag_set_async(e, name, value, flag_answered, &w, err);
    if (rc == 0) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        rc = w.rc;
        if (rc < 0 && err) *err = w.err;
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return rc < 0 ? -1 : 0;
}
