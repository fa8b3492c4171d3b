/*
 * engine: the handle engine.h describes, over one core per data-parallel replica (core.h). With
 * one replica every call passes straight to its core; with several, a request goes where the
 * router (router.h) sends it, flags and cancels go to every replica, and the stats are their
 * sum (stats_merge). The replicas never talk to each other: each has its own model copy, KV
 * cache, engine thread and devices, as vLLM's data-parallel engines do behind its API server.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "mdir.h"
#include "router.h"

struct engine {
    int n;            /* replicas */
    core_t **core;    /* [n] */
    router_t *router; /* NULL with one replica */
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

int engine_open(const engine_opts_t *o, engine_t **out, err_t *err) {
    *out = NULL;
    int n = o->flags.data_parallel_size > 1 ? o->flags.data_parallel_size : 1;
    if (n > STATS_MERGE_MAX)
        return err_set(err, "data-parallel-size %d: at most %d replicas", n, STATS_MERGE_MAX);
    engine_t *e = calloc(1, sizeof *e);
    if (!e || !(e->core = calloc((size_t)n, sizeof *e->core))) {
        free(e);
        return err_set(err, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        if (core_open(o, i, &e->core[i], err) < 0) {
            if (n > 1) err_prefix(err, "data-parallel replica %d of %d", i, n);
            engine_close(e);
            return -1;
        }
        e->n = i + 1;
    }
    if (n > 1 && !(e->router = router_create(n))) {
        engine_close(e);
        return err_set(err, "out of memory");
    }
    *out = e;
    return 0;
}

void engine_close(engine_t *e) {
    if (!e) return;
    for (int i = 0; i < e->n; i++)
        core_close(e->core[i]);
    router_destroy(e->router);
    free(e->core);
    free(e);
}

// ---------------------------------------------------------------------------------------------
// What the engine serves: the replicas serve the same model, so replica 0 answers

const model_config_t *engine_model_config(const engine_t *e) {
    return core_model_config(e->core[0]);
}

const tokenizer_t *engine_tokenizer(const engine_t *e) {
    return core_tokenizer(e->core[0]);
}

int engine_chat_format(const engine_t *e) {
    return core_chat_format(e->core[0]);
}

void engine_describe_backend(const engine_t *e, char *buf, size_t size) {
    core_describe_backend(e->core[0], buf, size);
    size_t len = strlen(buf);
    if (e->n > 1 && len < size)
        snprintf(buf + len, size - len, " x %d data-parallel replicas", e->n);
}

int engine_devices(const engine_t *e, backend_device_t *out, int max) {
    int total = 0;
    for (int i = 0; i < e->n; i++)
        total += core_devices(e->core[i], out + (total < max ? total : max),
                              total < max ? max - total : 0);
    return total;
}

int engine_replicas(const engine_t *e) {
    return e->n;
}

// ---------------------------------------------------------------------------------------------
// Requests

int engine_submit(engine_t *e, const engine_request_t *req, engine_stream_t **out, err_t *err) {
    int r = 0;
    if (e->n > 1) {
        int load[STATS_MERGE_MAX];
        for (int i = 0; i < e->n; i++)
            load[i] = core_outstanding(e->core[i]);
        r = router_pick(e->router, req->prompt, req->n_prompt > 0 ? req->n_prompt : 0, load);
    }
    return core_submit(e->core[r], req, out, err);
}

int engine_cancel(engine_t *e, const char *id) {
    int rc = 0;
    for (int i = 0; i < e->n; i++)
        if (core_cancel(e->core[i], id) < 0) rc = -1;
    return rc;
}

bool engine_alive(engine_t *e) {
    for (int i = 0; i < e->n; i++)
        if (!core_alive(e->core[i])) return false;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Stats

void engine_replica_stats(engine_t *e, int replica, stats_snapshot_t *out) {
    core_stats(e->core[replica >= 0 && replica < e->n ? replica : 0], out);
}

void engine_stats(engine_t *e, stats_snapshot_t *out) {
    if (e->n == 1) {
        core_stats(e->core[0], out);
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
    for (int i = 0; i < got; i++)
        free(parts[i]);
}

// ---------------------------------------------------------------------------------------------
// Flags: the same values on every replica

int engine_flag_get(engine_t *e, const char *name, char *buf, size_t size, err_t *err) {
    return core_flag_get(e->core[0], name, buf, size, err);
}

/* A rebuild change queued on several replicas: answered once, when the last one answers. */
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

int engine_flag_set_async(engine_t *e, const char *name, const char *value,
                          engine_flag_done_fn done, void *ctx, err_t *err) {
    /* replica 0 first: a refusal there (a bad value, a reload flag) changes nothing anywhere */
    fanout_t *f = NULL;
    if (e->n > 1) {
        if (!(f = calloc(1, sizeof *f))) return err_set(err, "out of memory");
        pthread_mutex_init(&f->mu, NULL);
        f->left = e->n + 1;
        f->done = done;
        f->ctx = ctx;
    }
    int rc0 = core_flag_set_async(e->core[0], name, value, f ? fanout_answer : done,
                                  f ? (void *)f : ctx, err);
    if (!f) return rc0;
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
