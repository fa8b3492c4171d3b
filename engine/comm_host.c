/*
 * The host communicator (comm.h): ranks are threads of one process. A collective publishes each
 * rank's buffer in the group, meets at a barrier, works on the published buffers, and meets
 * again before anyone returns (so no buffer is reused while another rank still reads it).
 *
 * The all-reduce splits the elements into one contiguous range per rank; rank r sums its range
 * over every rank's buffer from rank 0 up, and writes the sum back into all of them. Who sums
 * which range changes nothing in the result: element i is always ((b0[i] + b1[i]) + b2[i]) ...
 */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

struct comm_group {
    int size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    unsigned long generation;
    void *buf[COMM_MAX_RANKS]; /* each rank's buffer in the current collective */
    size_t len[COMM_MAX_RANKS];
    comm_t ranks[COMM_MAX_RANKS];
};

/* The comm_t a handle points into is ranks[rank] of its group. */
static comm_group_t *group_of(comm_t *c) {
    return (comm_group_t *)((char *)(c - c->rank) - offsetof(comm_group_t, ranks));
}

static void meet(comm_group_t *g) {
    pthread_mutex_lock(&g->mu);
    unsigned long gen = g->generation;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (g->generation == gen)
            pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

/* Publishes this rank's buffer and length and waits for the others'; false when the lengths
 * differ (every rank sees the same lengths, so every rank answers alike). */
static bool publish(comm_t *c, const void *buf, size_t len) {
    comm_group_t *g = group_of(c);
    g->buf[c->rank] = (void *)buf;
    g->len[c->rank] = len;
    meet(g);
    for (int r = 1; r < g->size; r++)
        if (g->len[r] != g->len[0]) return false;
    return true;
}

static int mismatch(comm_t *c, const char *op, err_t *err) {
    comm_group_t *g = group_of(c);
    meet(g);
    return err_set(err, "host communicator: %s with %zu on rank 0 but %zu on rank %d", op,
                   g->len[0], g->len[c->rank == 0 ? 1 : c->rank], c->rank == 0 ? 1 : c->rank);
}

static int host_all_reduce_sum(comm_t *c, float *buf, size_t n, err_t *err) {
    comm_group_t *g = group_of(c);
    if (!publish(c, buf, n)) return mismatch(c, "all-reduce", err);
    size_t begin = n * (size_t)c->rank / (size_t)g->size;
    size_t end = n * (size_t)(c->rank + 1) / (size_t)g->size;
    for (size_t i = begin; i < end; i++) {
        float s = ((const float *)g->buf[0])[i];
        for (int r = 1; r < g->size; r++)
            s += ((const float *)g->buf[r])[i];
        for (int r = 0; r < g->size; r++)
            ((float *)g->buf[r])[i] = s;
    }
    meet(g);
    return 0;
}

static int host_all_gather(comm_t *c, const void *send, size_t bytes, void *recv, err_t *err) {
    comm_group_t *g = group_of(c);
    if (!publish(c, send, bytes)) return mismatch(c, "all-gather", err);
    for (int r = 0; bytes && r < g->size; r++)
        memcpy((char *)recv + (size_t)r * bytes, g->buf[r], bytes);
    meet(g);
    return 0;
}

static int host_broadcast(comm_t *c, void *buf, size_t bytes, int root, err_t *err) {
    comm_group_t *g = group_of(c);
    if (root < 0 || root >= g->size)
        return err_set(err, "host communicator: broadcast from rank %d of %d", root, g->size);
    if (!publish(c, buf, bytes)) return mismatch(c, "broadcast", err);
    if (c->rank != root && bytes) memcpy(buf, g->buf[root], bytes);
    meet(g);
    return 0;
}

static int host_barrier(comm_t *c, err_t *err) {
    (void)err;
    meet(group_of(c));
    return 0;
}

/* Each rank publishes whether it failed (as its length), every rank reads them all, and no rank
 * publishes again before every rank has read. */
static int host_agree(comm_t *c, int rc, err_t *err) {
    comm_group_t *g = group_of(c);
    g->len[c->rank] = rc < 0;
    meet(g);
    int first = -1;
    for (int r = 0; r < g->size && first < 0; r++)
        if (g->len[r]) first = r;
    meet(g);
    c->peer_failed = first >= 0 && rc >= 0;
    if (first < 0) return rc;
    if (rc < 0) return -1;
    return err_set(err, "tensor-parallel rank %d failed this step", first);
}

static const comm_ops_t host_ops = {
    .name = "host",
    .all_reduce_sum = host_all_reduce_sum,
    .all_gather = host_all_gather,
    .broadcast = host_broadcast,
    .barrier = host_barrier,
    .agree = host_agree,
    .graph_safe = false, /* the ranks meet on the host */
};

int comm_host_create(int size, comm_group_t **out, err_t *err) {
    *out = NULL;
    if (size < 1 || size > COMM_MAX_RANKS)
        return err_set(err, "host communicator: %d ranks (1..%d)", size, COMM_MAX_RANKS);
    comm_group_t *g = calloc(1, sizeof *g);
    if (!g) return err_set(err, "host communicator: out of memory");
    g->size = size;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    for (int r = 0; r < size; r++)
        g->ranks[r] = (comm_t){.ops = &host_ops, .rank = r, .size = size};
    *out = g;
    return 0;
}

comm_t *comm_rank(comm_group_t *g, int r) {
    return r >= 0 && r < g->size ? &g->ranks[r] : NULL;
}

void comm_group_destroy(comm_group_t *g) {
    if (!g) return;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}
