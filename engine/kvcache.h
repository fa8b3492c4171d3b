/*
 * kvcache: the paged KV block allocator with prefix caching (vLLM V1's BlockPool).
 *
 * The pool's memory belongs to the backend; this module only hands out block ids. Blocks have
 * reference counts (a block can be shared by choices of one request and by prefix-cache hits).
 * With prefix caching, a full block is registered under a chained hash of its tokens (the
 * parent block's hash and the block's token ids); when its last reference goes it stays cached
 * in an LRU list of evictable blocks, from which new allocations are taken oldest first
 * (evicting the hash). A lookup of a prompt's block hashes returns the longest cached run of
 * leading blocks and takes a reference on each.
 *
 *     kv_pool_t *kv = kv_create(num_blocks, 16, true);
 *     uint64_t h[8]; int nh = kv_hash_blocks(kv, tokens, n_tokens, 0, h, 8);
 *     int32_t blocks[8];
 *     int hit = kv_lookup(kv, h, nh, blocks);        // blocks[0..hit) now referenced
 *     int32_t b = kv_alloc(kv);                        // -1 when none is free
 *     kv_commit(kv, b, h[hit]);                        // after its 16 tokens are computed
 *     kv_release(kv, b);
 *     kv_destroy(kv);
 *
 * Models with recurrent state (Qwen3.5's Gated DeltaNet layers) also take state slots from the
 * pool's memory: one per running sequence, handed out and taken back here, their contents held
 * by the backend (engine/backend.h).
 *
 *     kv_state_init(kv, 64);                           // 64 slots
 *     int32_t s = kv_state_alloc(kv);                  // -1 when none is free
 *     kv_state_free(kv, s);
 *
 * Not thread-safe: the engine thread owns it.
 */
#ifndef TACHYON_KVCACHE_H
#define TACHYON_KVCACHE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct kv_pool kv_pool_t;

/* A pool of num_blocks blocks of block_size tokens, all free. NULL when out of memory or when
 * an argument is not positive. The caller owns it: kv_destroy. */
kv_pool_t *kv_create(int num_blocks, int block_size, bool prefix_caching);
void kv_destroy(kv_pool_t *kv);

int kv_num_blocks(const kv_pool_t *kv);
int kv_block_size(const kv_pool_t *kv);

/* Turns prefix caching on or off (live). Turning it off drops every cached hash (evictable
 * blocks become plain free blocks); blocks in use keep working. */
void kv_set_prefix_caching(kv_pool_t *kv, bool on);
bool kv_prefix_caching(const kv_pool_t *kv);

/* Chained hashes of the full blocks of tokens[0..n): hash i covers tokens of blocks 0..i.
 * `salt` seeds the chain (0 for plain text). Writes at most max hashes; returns how many.
 * Hashes are 64-bit, non-cryptographic (xxHash64-style lanes and avalanche), and keyed by a
 * random per-pool key, so they are only comparable within one pool and cannot be precomputed
 * offline. vLLM can use sha256; we accept 64 bits: a lookup falsely matches one of C cached
 * blocks with probability C / 2^64, so with 50k cached blocks (an H200's pool for a 14B model)
 * and 10^4 block lookups per second a false hit is expected about once in a thousand years.
 * Tenants that must never share cache entries use different salts. */
int kv_hash_blocks(const kv_pool_t *kv, const int32_t *tokens, int n, uint64_t salt,
                   uint64_t *hashes, int max);

/* Looks up the leading cached blocks of a hash chain: returns how many of hashes[0..n) are
 * cached in a row from the start, taking a reference on each and writing their ids. Counts
 * queries and hits. Returns 0 when prefix caching is off. */
int kv_lookup(kv_pool_t *kv, const uint64_t *hashes, int n, int32_t *blocks);

/* Blocks that kv_alloc can hand out right now (free plus evictable). */
int kv_available(const kv_pool_t *kv);

/* A block with reference count 1: from the free list, else the least recently used evictable
 * cached block (its hash is forgotten). -1 when none is left. */
int32_t kv_alloc(kv_pool_t *kv);

/* Adds a reference (a choice sharing its parent's prompt block). */
void kv_ref(kv_pool_t *kv, int32_t block);

/* Drops a reference; at zero, a cached block becomes evictable (most recently used end), any
 * other block free. Release a sequence's blocks last block first, as vLLM does, so that the
 * tail of a prefix is evicted before its head. */
void kv_release(kv_pool_t *kv, int32_t block);

/* Registers a full, computed block under its chained hash (a no-op when prefix caching is off
 * or the hash is already cached by another block: blocks are not de-duplicated). The block must
 * be in use and not yet registered under another hash.
 *
 * Misuse (an id out of range, kv_ref / kv_release / kv_commit on a free block, a second hash
 * for one block) changes nothing and is recorded; kv_check then fails naming the first one. */
void kv_commit(kv_pool_t *kv, int32_t block, uint64_t hash);

/* Blocks with a reference count above zero. */
int kv_used(const kv_pool_t *kv);

/* Blocks registered under a hash (in use or evictable). */
int kv_num_cached(const kv_pool_t *kv);

/* The reference count of a block (0 when free or evictable); -1 for an id out of range. */
int kv_refcount(const kv_pool_t *kv, int32_t block);

/* Prefix-cache counters: blocks queried and blocks hit since creation (or kv_reset_counters). */
void kv_counters(const kv_pool_t *kv, uint64_t *queried, uint64_t *hit);
void kv_reset_counters(kv_pool_t *kv);

/* Gives the pool n_slots recurrent-state slots, all free (0: none, the default). -1 when out of
 * memory or n_slots < 0. */
int kv_state_init(kv_pool_t *kv, int n_slots);

/* State slots in the pool, and free ones. */
int kv_state_slots(const kv_pool_t *kv);
int kv_state_available(const kv_pool_t *kv);

/* A free slot, now in use; -1 when none is left. */
int32_t kv_state_alloc(kv_pool_t *kv);

/* Gives a slot back. Misuse (out of range, already free) changes nothing and is recorded. */
void kv_state_free(kv_pool_t *kv, int32_t slot);

/* Checks the invariants (every block exactly once in free, evictable or used; reference counts;
 * hash table consistent; every state slot free or used, once). For tests and debug builds: returns
 * 0, or -1 naming the first broken one in buf. */
int kv_check(const kv_pool_t *kv, char *buf, int size);

#endif
