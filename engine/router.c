#include "router.h"

#include <pthread.h>
#include <stdlib.h>

#include "rng.h"

struct router {
    pthread_mutex_t mu;
    int n;
    unsigned next;  /* round-robin start among equally busy replicas */
    uint64_t *seen; /* [n][ROUTER_SLOTS]: block hashes, 0 = empty */
};

router_t *router_create(int n_replicas) {
    router_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->n = n_replicas;
    r->seen = calloc((size_t)n_replicas * ROUTER_SLOTS, sizeof *r->seen);
    if (!r->seen) {
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void router_destroy(router_t *r) {
    if (!r) return;
    pthread_mutex_destroy(&r->mu);
    free(r->seen);
    free(r);
}

/* The chained hashes of the prompt's whole blocks (at most ROUTER_MAX_BLOCKS); never 0, the
 * empty slot. */
static int block_hashes(const int32_t *ids, int n, uint64_t *out) {
    int blocks = n / ROUTER_BLOCK;
    if (blocks > ROUTER_MAX_BLOCKS) blocks = ROUTER_MAX_BLOCKS;
    uint64_t h = 0x7ac4f00dull;
    for (int b = 0; b < blocks; b++) {
        for (int i = 0; i < ROUTER_BLOCK; i++)
            h = rng_mix64(h ^ (uint32_t)ids[b * ROUTER_BLOCK + i]);
        out[b] = h ? h : 1;
    }
    return blocks;
}

static uint64_t *slot(router_t *r, int replica, uint64_t h) {
    return &r->seen[(size_t)replica * ROUTER_SLOTS + (h & (ROUTER_SLOTS - 1))];
}

static int match(router_t *r, int replica, const uint64_t *h, int blocks) {
    int m = 0;
    while (m < blocks && *slot(r, replica, h[m]) == h[m])
        m++;
    return m;
}

int router_match(router_t *r, int replica, const int32_t *ids, int n) {
    uint64_t h[ROUTER_MAX_BLOCKS]; /* 8 KiB */
    int blocks = block_hashes(ids, n, h);
    pthread_mutex_lock(&r->mu);
    int m = match(r, replica, h, blocks);
    pthread_mutex_unlock(&r->mu);
    return m;
}

int router_pick(router_t *r, const int32_t *ids, int n, const int *load) {
    if (r->n <= 1) return 0;
    uint64_t h[ROUTER_MAX_BLOCKS]; /* 8 KiB; hashed outside the lock */
    int blocks = block_hashes(ids, n, h);
    pthread_mutex_lock(&r->mu);
    /* the least busy, ties from the round-robin start */
    int least = -1;
    for (int k = 0; k < r->n; k++) {
        int i = (int)((r->next + (unsigned)k) % (unsigned)r->n);
        if (least < 0 || load[i] < load[least]) least = i;
    }
    r->next++;
    /* the longest match, ties to the less busy, then the lower index */
    int best = -1, best_m = 0;
    for (int i = 0; i < r->n && blocks > 0; i++) {
        int m = match(r, i, h, blocks);
        if (m > best_m || (m == best_m && m > 0 && load[i] < load[best])) best = i, best_m = m;
    }
    int min = load[least];
    int pick = best >= 0 && load[best] <= min + ROUTER_SLACK + min / 2 ? best : least;
    for (int b = 0; b < blocks; b++)
        *slot(r, pick, h[b]) = h[b];
    pthread_mutex_unlock(&r->mu);
    return pick;
}
