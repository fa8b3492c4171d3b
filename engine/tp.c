#include "tp.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"

typedef struct tp_rank {
    backend_t *be;
    comm_t *comm;               /* its communicator handle (coll_s) */
    double t_fwd;               /* the last step's forward, s */
    backend_rank_stats_t stats; /* under the instance's mu */
    struct tp *tp;
    pthread_t thread;
    bool started;
    int rc; /* the last step's */
    err_t err;
} tp_rank_t;

typedef struct tp {
    backend_t base;
    backend_ops_t ops; /* rank 0's name and flags, these functions */
    int n;             /* ranks */
    void (*release)(void *);
    void *group;
    char how[160];
    bool one_device; /* every rank on the same device (or no devices op) */
    tp_rank_t rank[COMM_MAX_RANKS];

    /* the step handed to ranks 1..n-1 (rank 0 is the caller) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long step; /* bumped for each forward */
    int done;           /* ranks 1..n-1 that finished the current step */
    bool quit;
    const be_batch_t *batch;
    float *logits;
    const int32_t *mtp_rows; /* an MTP pass's hidden rows (mtp_forward), NULL for forward */
    int mtp_step;
    int32_t *mtp_argmax; /* its drafts (rank 0 writes them, as the logits) */
} tp_t;

/* The step's call on rank r: forward, or the MTP head's pass. */
static int rank_call(const tp_t *t, tp_rank_t *r, err_t *err) {
    if (t->mtp_rows)
        return r->be->ops->mtp_forward(r->be, t->batch, t->mtp_rows, t->mtp_step, t->logits,
                                       t->mtp_argmax, err);
    return backend_forward(r->be, t->batch, t->logits, err);
}

static void *rank_main(void *arg) {
    tp_rank_t *r = arg;
    tp_t *t = r->tp;
    unsigned long seen = 0;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (t->step == seen && !t->quit)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->quit) break;
        seen = t->step;
        pthread_mutex_unlock(&t->mu);
        double t0 = comm_clock_();
        int rc = rank_call(t, r, &r->err);
        r->t_fwd = comm_clock_() - t0;
        pthread_mutex_lock(&t->mu);
        r->rc = rc;
        t->done++;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void tp_destroy(backend_t *base) {
    tp_t *t = (tp_t *)base;
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->quit = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n; i++) {
        if (t->rank[i].started) pthread_join(t->rank[i].thread, NULL);
        backend_destroy(t->rank[i].be);
    }
    if (t->release) t->release(t->group);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

/* Every rank runs the call (rank 0 on the caller's thread): forward, or with rows an MTP pass. */
static int run_ranks(tp_t *t, const be_batch_t *b, float *logits, const int32_t *rows, int step,
                     int32_t *argmax, err_t *err) {
    pthread_mutex_lock(&t->mu);
    t->batch = b;
    t->logits = logits;
    t->mtp_rows = rows;
    t->mtp_step = step;
    t->mtp_argmax = argmax;
    t->done = 0;
    for (int i = 0; i < t->n; i++) /* quiet between steps */
        if (t->rank[i].comm) t->rank[i].comm->peer_failed = false;
    t->step++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    double t0 = comm_clock_();
    int rc = rank_call(t, &t->rank[0], err);
    t->rank[0].t_fwd = comm_clock_() - t0;
    pthread_mutex_lock(&t->mu);
    while (t->done < t->n - 1)
        pthread_cond_wait(&t->cv, &t->mu);
    for (int i = 0; i < t->n; i++) { /* every rank is between steps: its comm is quiet */
        tp_rank_t *r = &t->rank[i];
        r->stats.forward_s += r->t_fwd;
        r->stats.coll_s = r->comm ? r->comm->coll_s : 0;
        r->stats.steps++;
    }
    pthread_mutex_unlock(&t->mu);
    /* the ranks agree on a failure before a collective that a failed rank would not reach
     * (comm_agree); the message to report is that of the first rank that failed of its own
     * accord, not of one that stopped because another did */
    t->rank[0].rc = rc;
    for (int i = 0; i < t->n; i++) {
        const tp_rank_t *r = &t->rank[i];
        if (r->rc >= 0 || (r->comm && r->comm->peer_failed)) continue;
        if (i > 0) err_set(err, "rank %d: %s", i, r->err.msg);
        return -1;
    }
    return rc;
}

static int tp_forward(backend_t *base, const be_batch_t *b, float *logits, err_t *err) {
    return run_ranks((tp_t *)base, b, logits, NULL, 0, NULL, err);
}

static backend_t *rank0(const backend_t *base) {
    return ((const tp_t *)base)->rank[0].be;
}

/* The MTP head over every rank (each its shard of the head's layer); no batch: rank 0's answer
 * to whether the head runs. */
static int tp_mtp_forward(backend_t *base, const be_batch_t *b, const int32_t *hidden_rows,
                          int step, float *logits, int32_t *argmax, err_t *err) {
    if (!b) return rank0(base)->ops->mtp_forward(rank0(base), NULL, NULL, 0, NULL, NULL, err);
    if (!hidden_rows) return err_set(err, "mtp_forward: no hidden rows");
    return run_ranks((tp_t *)base, b, logits, hidden_rows, step, argmax, err);
}

static int tp_sample(backend_t *base, const sampler_row_t *rows, int n_rows, sampler_result_t *out,
                     err_t *err) {
    backend_t *r0 = rank0(base);
    return r0->ops->sample(r0, rows, n_rows, out, err);
}

static size_t tp_kv_block_bytes(const backend_t *base, int block_size) {
    const tp_t *t = (const tp_t *)base;
    size_t n = 0;
    for (int i = 0; i < t->n; i++)
        n += t->rank[i].be->ops->kv_block_bytes(t->rank[i].be, block_size);
    return n;
}

static int tp_kv_reserve(backend_t *base, int num_blocks, int block_size, err_t *err) {
    tp_t *t = (tp_t *)base;
    for (int i = 0; i < t->n; i++)
        if (backend_kv_reserve(t->rank[i].be, num_blocks, block_size, err) < 0)
            return err_prefix(err, "rank %d", i);
    return 0;
}

static void tp_describe(const backend_t *base, char *buf, size_t size) {
    const tp_t *t = (const tp_t *)base;
    char r0[256];
    rank0(base)->ops->describe(rank0(base), r0, sizeof r0);
    snprintf(buf, size, "%s; tensor parallel %d: a thread per rank, %s", r0, t->n, t->how);
}

/* Ranks on one device share its memory: the budget is rank 0's answer (the other ranks' current
 * pools then count as used: a smaller pool, never an overcommit). Ranks on their own devices
 * (the ranks hold equal shares of every block): n times the smallest rank's answer. */
static uint64_t tp_kv_pool_bytes(const backend_t *base, double utilization) {
    const tp_t *t = (const tp_t *)base;
    uint64_t least = rank0(base)->ops->kv_pool_bytes(rank0(base), utilization);
    if (t->one_device) return least;
    for (int i = 1; i < t->n; i++) {
        uint64_t b = t->rank[i].be->ops->kv_pool_bytes(t->rank[i].be, utilization);
        if (b < least) least = b;
    }
    return least * (uint64_t)t->n;
}

static void tp_configure(backend_t *base, const backend_options_t *opts) {
    tp_t *t = (tp_t *)base;
    for (int i = 0; i < t->n; i++)
        t->rank[i].be->ops->configure(t->rank[i].be, opts);
}

static int tp_expert_load(backend_t *base, uint64_t *out, err_t *err) {
    return rank0(base)->ops->expert_load(rank0(base), out, err);
}

static void tp_trace_routing(backend_t *base, int32_t *ids) {
    const tp_t *t = (const tp_t *)base;
    for (int i = 0; i < t->n; i++) /* rank 0 writes; backend.h */
        t->rank[i].be->ops->trace_routing(t->rank[i].be, ids);
}

static size_t tp_state_bytes(const backend_t *base) {
    const tp_t *t = (const tp_t *)base;
    size_t n = 0;
    for (int i = 0; i < t->n; i++)
        n += t->rank[i].be->ops->state_bytes(t->rank[i].be);
    return n;
}

static int tp_state_reserve(backend_t *base, int n_slots, err_t *err) {
    tp_t *t = (tp_t *)base;
    for (int i = 0; i < t->n; i++)
        if (t->rank[i].be->ops->state_reserve(t->rank[i].be, n_slots, err) < 0)
            return err_prefix(err, "rank %d", i);
    return 0;
}

static int tp_state_copy(backend_t *base, int src, int dst, err_t *err) {
    tp_t *t = (tp_t *)base;
    for (int i = 0; i < t->n; i++)
        if (t->rank[i].be->ops->state_copy(t->rank[i].be, src, dst, err) < 0)
            return err_prefix(err, "rank %d", i);
    return 0;
}

/* Every rank's devices, in rank order, each once. */
static int tp_devices(const backend_t *base, backend_device_t *out, int max) {
    const tp_t *t = (const tp_t *)base;
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        backend_device_t d[BACKEND_MAX_DEVICES];
        int k = t->rank[i].be->ops->devices(t->rank[i].be, d, BACKEND_MAX_DEVICES);
        for (int j = 0; j < k; j++) {
            bool seen = false;
            for (int m = 0; m < n && m < max; m++)
                seen |= out[m].ordinal == d[j].ordinal;
            if (seen) continue;
            if (n < max) out[n] = d[j];
            n++;
        }
    }
    return n;
}

static int tp_rank_stats(backend_t *base, backend_rank_stats_t *out, int max) {
    tp_t *t = (tp_t *)base;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n && i < max; i++)
        out[i] = t->rank[i].stats;
    pthread_mutex_unlock(&t->mu);
    return t->n;
}

static int tp_max_logit_rows(const backend_t *base) {
    return rank0(base)->ops->max_logit_rows(rank0(base));
}

int tp_backend_create(int n, tp_make_rank_fn make_rank, void *user, void (*release)(void *),
                      void *group, const char *how, backend_t **out, err_t *err) {
    *out = NULL;
    if (n < 2 || n > COMM_MAX_RANKS) {
        if (release) release(group);
        return err_set(err, "tensor parallel %d (2..%d)", n, COMM_MAX_RANKS);
    }
    tp_t *t = calloc(1, sizeof *t);
    if (!t) {
        if (release) release(group);
        return err_set(err, "out of memory");
    }
    t->n = n;
    t->release = release;
    t->group = group;
    snprintf(t->how, sizeof t->how, "%s", how);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    for (int i = 0; i < n; i++) {
        t->rank[i] = (tp_rank_t){.tp = t};
        if (make_rank(user, i, &t->rank[i].be, &t->rank[i].comm, err) < 0) {
            tp_destroy(&t->base);
            return err_prefix(err, "rank %d", i);
        }
    }
    const backend_ops_t *o = t->rank[0].be->ops;
    t->one_device = true;
    for (int i = 1; o->devices && i < n; i++) {
        backend_device_t d0, di;
        if (o->devices(t->rank[0].be, &d0, 1) > 0 &&
            t->rank[i].be->ops->devices(t->rank[i].be, &di, 1) > 0 && d0.ordinal != di.ordinal)
            t->one_device = false;
    }
    t->ops = (backend_ops_t){
        .name = o->name,
        .destroy = tp_destroy,
        .kv_block_bytes = tp_kv_block_bytes,
        .kv_reserve = tp_kv_reserve,
        .forward = tp_forward,
        .sample = o->sample ? tp_sample : NULL,
        .describe = tp_describe,
        .kv_pool_bytes = o->kv_pool_bytes ? tp_kv_pool_bytes : NULL,
        .configure = o->configure ? tp_configure : NULL,
        .makes_dummy_weights = o->makes_dummy_weights,
        .expert_load = o->expert_load ? tp_expert_load : NULL,
        .trace_routing = o->trace_routing ? tp_trace_routing : NULL,
        .state_bytes = o->state_bytes ? tp_state_bytes : NULL,
        .state_reserve = o->state_reserve ? tp_state_reserve : NULL,
        .state_copy = o->state_copy ? tp_state_copy : NULL,
        .devices = o->devices ? tp_devices : NULL,
        .max_logit_rows = o->max_logit_rows ? tp_max_logit_rows : NULL,
        .rank_stats = tp_rank_stats,
        .tensor_parallel = true,
        .mtp_forward = o->mtp_forward ? tp_mtp_forward : NULL,
    };
    t->base.ops = &t->ops;
    for (int i = 1; i < n; i++) {
        if (pthread_create(&t->rank[i].thread, NULL, rank_main, &t->rank[i]) != 0) {
            tp_destroy(&t->base);
            return err_set(err, "cannot start the thread of rank %d", i);
        }
        t->rank[i].started = true;
    }
    *out = &t->base;
    return 0;
}

backend_t *tp_backend_rank(backend_t *be, int r) {
    if (!be || be->ops->destroy != tp_destroy) return NULL;
    tp_t *t = (tp_t *)be;
    return r >= 0 && r < t->n ? t->rank[r].be : NULL;
}
