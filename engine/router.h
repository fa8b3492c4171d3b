/*
 * router: which data-parallel replica a request goes to (engine.h's handle asks it on every
 * submit). The least busy replica, unless another one holds the request's prefix in its cache
 * and is not much busier: then that one, so that requests sharing a long prefix (a system
 * prompt, a document, the turns of one conversation) find it cached (SGLang's cache-aware
 * router, approximated without a tree).
 *
 * Each replica remembers the prompts it was given as chained hashes of their whole blocks of
 * ROUTER_BLOCK tokens (a block's hash covers every token before it, as the prefix cache's keys
 * do) in a direct-mapped table of ROUTER_SLOTS hashes: a newer prefix overwrites an older one in
 * its slot, so the memory is fixed and an old prefix fades as the replica's cache would evict it.
 * A request's match on a replica is the number of its leading blocks found there.
 *
 * The choice, given each replica's load (requests outstanding):
 *   1. the replica with the longest match (ties: the less busy, then the lower index), if it
 *      matches at least one block and its load is at most min_load + ROUTER_SLACK + min_load / 2;
 *   2. otherwise the least busy replica; ties go round-robin, so that an idle fleet is filled
 *      evenly.
 * The chosen replica then remembers the request's blocks.
 *
 *     router_t *r = router_create(2);
 *     int loads[2] = {core_outstanding(a), core_outstanding(b)};
 *     int i = router_pick(r, ids, n, loads);
 *     router_destroy(r);
 *
 * Thread-safe (a mutex: a pick costs a hash per 16 prompt tokens, at most ROUTER_MAX_BLOCKS).
 */
#ifndef TACHYON_ROUTER_H
#define TACHYON_ROUTER_H

#include <stdint.h>

#define ROUTER_BLOCK      16   /* tokens per hashed block */
#define ROUTER_MAX_BLOCKS 1024 /* leading blocks of a prompt considered (16k tokens) */
#define ROUTER_SLOTS      (1 << 16)
#define ROUTER_SLACK      4 /* requests a replica with the prefix may have over the least busy */

typedef struct router router_t;

/* NULL when out of memory. */
router_t *router_create(int n_replicas);
void router_destroy(router_t *r);

/* The replica for a prompt of n token ids, given each replica's load[n_replicas]; the prompt's
 * blocks are remembered for it. */
int router_pick(router_t *r, const int32_t *ids, int n, const int *load);

/* The leading blocks of a prompt that `replica` remembers (for tests and the console). */
int router_match(router_t *r, int replica, const int32_t *ids, int n);

#endif
