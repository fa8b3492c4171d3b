#include "cpu_tp.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"

typedef struct tp_rank {
    backend_t *be;
    struct cpu_tp *tp;
    int index;
    pthread_t thread;
    bool started;
    int rc; /* the last step's */
    err_t err;
} tp_rank_t;

typedef struct cpu_tp {
    backend_t base;
    int n; /* ranks */
    bool ep;
    int threads_per_rank;
    comm_group_t *group;
    tp_rank_t rank[COMM_MAX_RANKS];

    /* the step handed to ranks 1..n-1 (rank 0 is the caller) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long step; /* bumped for each forward */
    int done;           /* ranks 1..n-1 that finished the current step */
    bool quit;
    const be_batch_t *batch;
    float *logits;
} cpu_tp_t;

static void *rank_main(void *arg) {
    tp_rank_t *r = arg;
    cpu_tp_t *t = r->tp;
    unsigned long seen = 0;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (t->step == seen && !t->quit)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->quit) break;
        seen = t->step;
        const be_batch_t *b = t->batch;
        float *logits = t->logits;
        pthread_mutex_unlock(&t->mu);
        int rc = backend_forward(r->be, b, logits, &r->err);
        pthread_mutex_lock(&t->mu);
        r->rc = rc;
        t->done++;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void tp_destroy(backend_t *base) {
    cpu_tp_t *t = (cpu_tp_t *)base;
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->quit = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n; i++) {
        if (t->rank[i].started) pthread_join(t->rank[i].thread, NULL);
        backend_destroy(t->rank[i].be);
    }
    comm_group_destroy(t->group);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

static int tp_forward(backend_t *base, const be_batch_t *b, float *logits, err_t *err) {
    cpu_tp_t *t = (cpu_tp_t *)base;
    pthread_mutex_lock(&t->mu);
    t->batch = b;
    t->logits = logits;
    t->done = 0;
    t->step++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    int rc = backend_forward(t->rank[0].be, b, logits, err);
    pthread_mutex_lock(&t->mu);
    while (t->done < t->n - 1)
        pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    /* the ranks agree on failure before their first collective (cpu_backend.c); a failure of
     * its own on another rank is the one to report */
    for (int i = 1; rc == 0 && i < t->n; i++)
        if (t->rank[i].rc < 0) {
            err_set(err, "rank %d: %s", i, t->rank[i].err.msg);
            rc = -1;
        }
    return rc;
}

static size_t tp_kv_block_bytes(const backend_t *base, int block_size) {
    const cpu_tp_t *t = (const cpu_tp_t *)base;
    size_t n = 0;
    for (int i = 0; i < t->n; i++)
        n += t->rank[i].be->ops->kv_block_bytes(t->rank[i].be, block_size);
    return n;
}

static int tp_kv_reserve(backend_t *base, int num_blocks, int block_size, err_t *err) {
    cpu_tp_t *t = (cpu_tp_t *)base;
    for (int i = 0; i < t->n; i++)
        if (backend_kv_reserve(t->rank[i].be, num_blocks, block_size, err) < 0)
            return err_prefix(err, "rank %d", i);
    return 0;
}

static void tp_describe(const backend_t *base, char *buf, size_t size) {
    const cpu_tp_t *t = (const cpu_tp_t *)base;
    char rank0[256];
    t->rank[0].be->ops->describe(t->rank[0].be, rank0, sizeof rank0);
    snprintf(buf, size,
             "%s; tensor parallel %d%s: a thread per rank, %d pool thread%s each, host "
             "communicator (all-reduce in rank order)",
             rank0, t->n, t->ep ? " with experts whole (expert parallel)" : "", t->threads_per_rank,
             t->threads_per_rank == 1 ? "" : "s");
}

static int tp_expert_load(backend_t *base, uint64_t *out, err_t *err) {
    backend_t *r0 = ((cpu_tp_t *)base)->rank[0].be;
    return r0->ops->expert_load(r0, out, err);
}

static void tp_trace_routing(backend_t *base, int32_t *ids) {
    backend_t *r0 = ((cpu_tp_t *)base)->rank[0].be;
    r0->ops->trace_routing(r0, ids);
}

static void tp_configure(backend_t *base, const backend_options_t *opts) {
    cpu_tp_t *t = (cpu_tp_t *)base;
    for (int i = 0; i < t->n; i++)
        t->rank[i].be->ops->configure(t->rank[i].be, opts);
}

static size_t tp_state_bytes(const backend_t *base) {
    const cpu_tp_t *t = (const cpu_tp_t *)base;
    size_t n = 0;
    for (int i = 0; i < t->n; i++)
        n += t->rank[i].be->ops->state_bytes(t->rank[i].be);
    return n;
}

static int tp_state_reserve(backend_t *base, int n_slots, err_t *err) {
    cpu_tp_t *t = (cpu_tp_t *)base;
    for (int i = 0; i < t->n; i++)
        if (t->rank[i].be->ops->state_reserve(t->rank[i].be, n_slots, err) < 0)
            return err_prefix(err, "rank %d", i);
    return 0;
}

static int tp_state_copy(backend_t *base, int src, int dst, err_t *err) {
    cpu_tp_t *t = (cpu_tp_t *)base;
    for (int i = 0; i < t->n; i++)
        if (t->rank[i].be->ops->state_copy(t->rank[i].be, src, dst, err) < 0)
            return err_prefix(err, "rank %d", i);
    return 0;
}

static const backend_ops_t tp_ops = {
    .name = "cpu",
    .destroy = tp_destroy,
    .kv_block_bytes = tp_kv_block_bytes,
    .kv_reserve = tp_kv_reserve,
    .forward = tp_forward,
    .describe = tp_describe,
    .expert_load = tp_expert_load,
    .trace_routing = tp_trace_routing,
    .configure = tp_configure,
    .state_bytes = tp_state_bytes,
    .state_reserve = tp_state_reserve,
    .state_copy = tp_state_copy,
    .tensor_parallel = true,
};

int cpu_tp_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                  err_t *err) {
    *out = NULL;
    int n = opts->tensor_parallel_size;
    if (n < 2 || n > COMM_MAX_RANKS)
        return err_set(err, "cpu backend: tensor parallel %d (1..%d)", n, COMM_MAX_RANKS);
    cpu_tp_t *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, "cpu backend: out of memory");
    t->base.ops = &tp_ops;
    t->n = n;
    t->ep = opts->expert_parallel && weights_config(w)->n_experts > 0;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    int threads = opts->n_threads;
    if (threads <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        threads = online < 1 ? 1 : (int)online;
    }
    t->threads_per_rank = threads / n > 0 ? threads / n : 1;
    backend_options_t ro = *opts;
    ro.n_threads = t->threads_per_rank;
    if (comm_host_create(n, &t->group, err) < 0) {
        tp_destroy(&t->base);
        return err_prefix(err, "cpu backend");
    }
    for (int i = 0; i < n; i++) {
        cpu_shard_t s = {.rank = i, .tp = n, .ep = t->ep, .comm = comm_rank(t->group, i)};
        t->rank[i] = (tp_rank_t){.tp = t, .index = i};
        if (cpu_rank_create(&ro, w, &s, &t->rank[i].be, err) < 0) {
            tp_destroy(&t->base);
            return -1;
        }
    }
    for (int i = 1; i < n; i++) {
        if (pthread_create(&t->rank[i].thread, NULL, rank_main, &t->rank[i]) != 0) {
            tp_destroy(&t->base);
            return err_set(err, "cpu backend: cannot start the thread of rank %d", i);
        }
        t->rank[i].started = true;
    }
    *out = &t->base;
    return 0;
}
