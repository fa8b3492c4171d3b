/* kvcache: block pool with reference counts, one eviction-ordered queue and a hash table. */
#include "kvcache.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "rng.h"

/* prev/next of a block that is not in the queue (reference count above zero). */
#define KV_OUT -2
#define KV_NIL -1

/* xxHash64's primes: odd, with well-spread bits. */
#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

struct kv_pool {
    int num_blocks, block_size;
    bool prefix_caching;
    uint64_t key; /* random, seeds every hash chain of this pool */

    int32_t *ref;    /* [num_blocks] */
    int32_t *prev;   /* [num_blocks] queue links, KV_OUT while in use */
    int32_t *next;   /* [num_blocks] */
    uint64_t *hash;  /* [num_blocks] valid where cached */
    uint8_t *cached; /* [num_blocks] */
    /* The queue holds every block with reference count 0: uncached free blocks first (taken
     * first), then evictable cached blocks from least to most recently used. */
    int32_t head, tail;
    int n_queued, n_cached;

    /* Open addressing with linear probing and backward-shift deletion (no tombstones), at most
     * half full since each block carries at most one hash. */
    uint64_t *slot_hash; /* [mask + 1] */
    int32_t *slot_block; /* [mask + 1], KV_NIL when empty */
    uint32_t mask;

    uint64_t queried, hit;
    uint64_t misuse;
    char misuse_msg[96];

    /* recurrent-state slots: a stack of free ones, and which are in use */
    int32_t *state_free; /* [n_slots] */
    uint8_t *state_used; /* [n_slots] */
    int n_slots, n_state_free;
};

static void note_misuse(kv_pool_t *kv, const char *fmt, ...) {
    if (kv->misuse++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(kv->misuse_msg, sizeof kv->misuse_msg, fmt, ap);
        va_end(ap);
    }
}

/* ---- queue ---------------------------------------------------------------------------------- */

static void q_remove(kv_pool_t *kv, int32_t b) {
    int32_t p = kv->prev[b], n = kv->next[b];
    if (p == KV_NIL)
        kv->head = n;
    else
        kv->next[p] = n;
    if (n == KV_NIL)
        kv->tail = p;
    else
        kv->prev[n] = p;
    kv->prev[b] = kv->next[b] = KV_OUT;
    kv->n_queued--;
}

static void q_push_front(kv_pool_t *kv, int32_t b) {
    kv->prev[b] = KV_NIL;
    kv->next[b] = kv->head;
    if (kv->head == KV_NIL)
        kv->tail = b;
    else
        kv->prev[kv->head] = b;
    kv->head = b;
    kv->n_queued++;
}

static void q_push_back(kv_pool_t *kv, int32_t b) {
    kv->next[b] = KV_NIL;
    kv->prev[b] = kv->tail;
    if (kv->tail == KV_NIL)
        kv->head = b;
    else
        kv->next[kv->tail] = b;
    kv->tail = b;
    kv->n_queued++;
}

/* ---- hash table ----------------------------------------------------------------------------- */

/* Callers may commit any 64-bit value, not only kv_hash_blocks output: remix before masking. */
static uint32_t home_slot(const kv_pool_t *kv, uint64_t h) {
    return (uint32_t)rng_mix64(h) & kv->mask;
}

static int32_t table_find_slot(const kv_pool_t *kv, uint64_t h) {
    for (uint32_t i = home_slot(kv, h);; i = (i + 1) & kv->mask) {
        if (kv->slot_block[i] == KV_NIL) return -1;
        if (kv->slot_hash[i] == h) return (int32_t)i;
    }
}

static void table_insert(kv_pool_t *kv, uint64_t h, int32_t b) {
    uint32_t i = home_slot(kv, h);
    while (kv->slot_block[i] != KV_NIL)
        i = (i + 1) & kv->mask;
    kv->slot_hash[i] = h;
    kv->slot_block[i] = b;
}

static void table_delete_slot(kv_pool_t *kv, uint32_t i) {
    /* Shift later entries of the cluster back unless their home lies cyclically in (i, j]. */
    for (uint32_t j = (i + 1) & kv->mask; kv->slot_block[j] != KV_NIL; j = (j + 1) & kv->mask) {
        uint32_t home = home_slot(kv, kv->slot_hash[j]);
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        kv->slot_hash[i] = kv->slot_hash[j];
        kv->slot_block[i] = kv->slot_block[j];
        i = j;
    }
    kv->slot_block[i] = KV_NIL;
}

static void forget_hash(kv_pool_t *kv, int32_t b) {
    int32_t s = table_find_slot(kv, kv->hash[b]);
    if (s >= 0 && kv->slot_block[s] == b) table_delete_slot(kv, (uint32_t)s);
    kv->cached[b] = 0;
    kv->n_cached--;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

static uint64_t random_key(const void *addr) {
    uint64_t k;
    if (getrandom(&k, sizeof k, GRND_NONBLOCK) == (ssize_t)sizeof k) return k;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return rng_mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)(size_t)addr);
}

kv_pool_t *kv_create(int num_blocks, int block_size, bool prefix_caching) {
    if (num_blocks <= 0 || block_size <= 0 || num_blocks > (1 << 29)) return NULL;
    kv_pool_t *kv = calloc(1, sizeof *kv);
    if (!kv) return NULL;
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)num_blocks)
        cap *= 2;
    size_t n = (size_t)num_blocks;
    kv->ref = calloc(n, sizeof *kv->ref);
    kv->prev = malloc(n * sizeof *kv->prev);
    kv->next = malloc(n * sizeof *kv->next);
    kv->hash = calloc(n, sizeof *kv->hash);
    kv->cached = calloc(n, sizeof *kv->cached);
    kv->slot_hash = calloc(cap, sizeof *kv->slot_hash);
    kv->slot_block = malloc(cap * sizeof *kv->slot_block);
    if (!kv->ref || !kv->prev || !kv->next || !kv->hash || !kv->cached || !kv->slot_hash ||
        !kv->slot_block) {
        kv_destroy(kv);
        return NULL;
    }
    kv->num_blocks = num_blocks;
    kv->block_size = block_size;
    kv->prefix_caching = prefix_caching;
    kv->key = random_key(kv);
    kv->mask = cap - 1;
    for (uint32_t i = 0; i < cap; i++)
        kv->slot_block[i] = KV_NIL;
    kv->head = kv->tail = KV_NIL;
    for (int32_t b = 0; b < num_blocks; b++)
        q_push_back(kv, b);
    return kv;
}

void kv_destroy(kv_pool_t *kv) {
    if (!kv) return;
    free(kv->ref);
    free(kv->prev);
    free(kv->next);
    free(kv->hash);
    free(kv->cached);
    free(kv->slot_hash);
    free(kv->slot_block);
    free(kv->state_free);
    free(kv->state_used);
    free(kv);
}

int kv_num_blocks(const kv_pool_t *kv) {
    return kv->num_blocks;
}

int kv_block_size(const kv_pool_t *kv) {
    return kv->block_size;
}

void kv_set_prefix_caching(kv_pool_t *kv, bool on) {
    if (!on && kv->n_cached > 0) {
        /* Every queued block becomes uncached, so the queue's "uncached first" order holds. */
        memset(kv->cached, 0, (size_t)kv->num_blocks);
        for (uint32_t i = 0; i <= kv->mask; i++)
            kv->slot_block[i] = KV_NIL;
        kv->n_cached = 0;
    }
    kv->prefix_caching = on;
}

bool kv_prefix_caching(const kv_pool_t *kv) {
    return kv->prefix_caching;
}

/* ---- hashing -------------------------------------------------------------------------------- */

static inline uint64_t rotl64(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

/* One link of the chain. For fixed tokens it is a bijection of the parent (every step on acc
 * is invertible), so different parents never collide on the same block. */
static uint64_t hash_block(uint64_t parent, const int32_t *t, int bs) {
    uint64_t acc = parent + P5 + (uint64_t)bs * 4;
    int i = 0;
    for (; i + 2 <= bs; i += 2) {
        uint64_t lane = (uint64_t)(uint32_t)t[i] | (uint64_t)(uint32_t)t[i + 1] << 32;
        acc ^= rotl64(lane * P2, 31) * P1;
        acc = rotl64(acc, 27) * P1 + P4;
    }
    if (i < bs) {
        acc ^= (uint64_t)(uint32_t)t[i] * P1;
        acc = rotl64(acc, 23) * P2 + P3;
    }
    acc ^= acc >> 33;
    acc *= P2;
    acc ^= acc >> 29;
    acc *= P3;
    acc ^= acc >> 32;
    return acc;
}

int kv_hash_blocks(const kv_pool_t *kv, const int32_t *tokens, int n, uint64_t salt,
                   uint64_t *hashes, int max) {
    int nb = n > 0 ? n / kv->block_size : 0;
    if (nb > max) nb = max > 0 ? max : 0;
    uint64_t h = rng_mix64(kv->key ^ rng_mix64(salt));
    for (int i = 0; i < nb; i++) {
        h = hash_block(h, tokens + (size_t)i * (size_t)kv->block_size, kv->block_size);
        hashes[i] = h;
    }
    return nb;
}

/* ---- blocks --------------------------------------------------------------------------------- */

static bool valid_block(const kv_pool_t *kv, int32_t b) {
    return b >= 0 && b < kv->num_blocks;
}

int kv_lookup(kv_pool_t *kv, const uint64_t *hashes, int n, int32_t *blocks) {
    if (!kv->prefix_caching || n <= 0) return 0;
    int hit = 0;
    for (; hit < n; hit++) {
        int32_t s = table_find_slot(kv, hashes[hit]);
        if (s < 0) break;
        int32_t b = kv->slot_block[s];
        if (kv->ref[b] == 0) q_remove(kv, b);
        kv->ref[b]++;
        blocks[hit] = b;
    }
    kv->queried += (uint64_t)n;
    kv->hit += (uint64_t)hit;
    return hit;
}

int kv_available(const kv_pool_t *kv) {
    return kv->n_queued;
}

int32_t kv_alloc(kv_pool_t *kv) {
    int32_t b = kv->head;
    if (b == KV_NIL) return -1;
    q_remove(kv, b);
    if (kv->cached[b]) forget_hash(kv, b);
    kv->ref[b] = 1;
    return b;
}

void kv_ref(kv_pool_t *kv, int32_t block) {
    if (!valid_block(kv, block)) {
        note_misuse(kv, "kv_ref(%d): no such block", block);
        return;
    }
    if (kv->ref[block] == 0) {
        note_misuse(kv, "kv_ref(%d): block is free", block);
        return;
    }
    kv->ref[block]++;
}

void kv_release(kv_pool_t *kv, int32_t block) {
    if (!valid_block(kv, block)) {
        note_misuse(kv, "kv_release(%d): no such block", block);
        return;
    }
    if (kv->ref[block] == 0) {
        note_misuse(kv, "kv_release(%d): block is free", block);
        return;
    }
    if (--kv->ref[block] > 0) return;
    if (kv->cached[block])
        q_push_back(kv, block);
    else
        q_push_front(kv, block);
}

void kv_commit(kv_pool_t *kv, int32_t block, uint64_t hash) {
    if (!valid_block(kv, block)) {
        note_misuse(kv, "kv_commit(%d): no such block", block);
        return;
    }
    if (kv->ref[block] == 0) {
        note_misuse(kv, "kv_commit(%d): block is free", block);
        return;
    }
    if (!kv->prefix_caching) return;
    if (kv->cached[block]) {
        if (kv->hash[block] != hash)
            note_misuse(kv, "kv_commit(%d): block already has another hash", block);
        return;
    }
    if (table_find_slot(kv, hash) >= 0) return;
    table_insert(kv, hash, block);
    kv->hash[block] = hash;
    kv->cached[block] = 1;
    kv->n_cached++;
}

int kv_used(const kv_pool_t *kv) {
    return kv->num_blocks - kv->n_queued;
}

int kv_num_cached(const kv_pool_t *kv) {
    return kv->n_cached;
}

int kv_refcount(const kv_pool_t *kv, int32_t block) {
    return valid_block(kv, block) ? kv->ref[block] : -1;
}

void kv_counters(const kv_pool_t *kv, uint64_t *queried, uint64_t *hit) {
    if (queried) *queried = kv->queried;
    if (hit) *hit = kv->hit;
}

void kv_reset_counters(kv_pool_t *kv) {
    kv->queried = kv->hit = 0;
}

/* ---- recurrent-state slots ------------------------------------------------------------------ */

int kv_state_init(kv_pool_t *kv, int n_slots) {
    if (n_slots < 0) return -1;
    int32_t *stack = malloc((size_t)(n_slots > 0 ? n_slots : 1) * sizeof *stack);
    uint8_t *used = calloc((size_t)(n_slots > 0 ? n_slots : 1), 1);
    if (!stack || !used) {
        free(stack);
        free(used);
        return -1;
    }
    free(kv->state_free);
    free(kv->state_used);
    kv->state_free = stack;
    kv->state_used = used;
    kv->n_slots = kv->n_state_free = n_slots;
    for (int i = 0; i < n_slots; i++) /* slot 0 on top */
        stack[i] = n_slots - 1 - i;
    return 0;
}

int kv_state_slots(const kv_pool_t *kv) {
    return kv->n_slots;
}

int kv_state_available(const kv_pool_t *kv) {
    return kv->n_state_free;
}

int32_t kv_state_alloc(kv_pool_t *kv) {
    if (kv->n_state_free == 0) return -1;
    int32_t s = kv->state_free[--kv->n_state_free];
    kv->state_used[s] = 1;
    return s;
}

void kv_state_free(kv_pool_t *kv, int32_t slot) {
    if (slot < 0 || slot >= kv->n_slots) {
        note_misuse(kv, "kv_state_free(%d): no such slot", slot);
        return;
    }
    if (!kv->state_used[slot]) {
        note_misuse(kv, "kv_state_free(%d): slot is free", slot);
        return;
    }
    kv->state_used[slot] = 0;
    kv->state_free[kv->n_state_free++] = slot;
}

/* ---- invariants ----------------------------------------------------------------------------- */

static int fail(char *buf, int size, const char *fmt, ...) {
    if (buf && size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, (size_t)size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int kv_check(const kv_pool_t *kv, char *buf, int size) {
    if (kv->misuse)
        return fail(buf, size, "%llu invalid calls, first: %s", (unsigned long long)kv->misuse,
                    kv->misuse_msg);
    int N = kv->num_blocks, zero = 0, cached = 0;
    for (int32_t b = 0; b < N; b++) {
        if (kv->ref[b] < 0) return fail(buf, size, "block %d: refcount %d", b, kv->ref[b]);
        if (kv->ref[b] == 0)
            zero++;
        else if (kv->prev[b] != KV_OUT || kv->next[b] != KV_OUT)
            return fail(buf, size, "block %d: in use but linked in the queue", b);
        if (kv->cached[b]) {
            cached++;
            int32_t s = table_find_slot(kv, kv->hash[b]);
            if (s < 0 || kv->slot_block[s] != b)
                return fail(buf, size, "block %d: its hash is not in the table", b);
        }
    }
    if (zero != kv->n_queued)
        return fail(buf, size, "%d blocks have refcount 0 but %d are queued", zero, kv->n_queued);
    if (cached != kv->n_cached)
        return fail(buf, size, "%d blocks cached, counter says %d", cached, kv->n_cached);
    if (!kv->prefix_caching && cached)
        return fail(buf, size, "%d blocks cached with prefix caching off", cached);

    /* A walk that ends within N steps with consistent back links visits distinct blocks; with
     * the count equal to the number of refcount-0 blocks, each is queued exactly once. */
    int steps = 0;
    bool seen_cached = false;
    for (int32_t b = kv->head, p = KV_NIL; b != KV_NIL; p = b, b = kv->next[b]) {
        if (!valid_block(kv, b)) return fail(buf, size, "queue: bad link %d after %d", b, p);
        if (++steps > N) return fail(buf, size, "queue: cycle");
        if (kv->prev[b] != p)
            return fail(buf, size, "queue: block %d: prev %d, not %d", b, kv->prev[b], p);
        if (kv->ref[b] != 0)
            return fail(buf, size, "queue: block %d has refcount %d", b, kv->ref[b]);
        if (kv->cached[b])
            seen_cached = true;
        else if (seen_cached)
            return fail(buf, size, "queue: free block %d after an evictable one", b);
        if (kv->next[b] == KV_NIL && kv->tail != b)
            return fail(buf, size, "queue: ends at %d, tail is %d", b, kv->tail);
    }
    if (steps != kv->n_queued)
        return fail(buf, size, "queue: %d blocks linked, %d counted", steps, kv->n_queued);
    if (steps == 0 && kv->tail != KV_NIL) return fail(buf, size, "queue: empty with a tail");

    int entries = 0;
    for (uint32_t i = 0; i <= kv->mask; i++) {
        int32_t b = kv->slot_block[i];
        if (b == KV_NIL) continue;
        entries++;
        if (!valid_block(kv, b) || !kv->cached[b] || kv->hash[b] != kv->slot_hash[i])
            return fail(buf, size, "table: slot %u names block %d, which is not cached there", i,
                        b);
        if (table_find_slot(kv, kv->slot_hash[i]) != (int32_t)i)
            return fail(buf, size, "table: slot %u unreachable from its home", i);
    }
    if (entries != cached)
        return fail(buf, size, "table: %d entries for %d cached blocks", entries, cached);

    int used = 0;
    for (int i = 0; i < kv->n_slots; i++)
        used += kv->state_used[i];
    if (used + kv->n_state_free != kv->n_slots)
        return fail(buf, size, "state slots: %d used + %d free of %d", used, kv->n_state_free,
                    kv->n_slots);
    uint8_t *seen = calloc((size_t)(kv->n_slots > 0 ? kv->n_slots : 1), 1);
    if (!seen) return fail(buf, size, "out of memory");
    int rc = 0;
    for (int i = 0; i < kv->n_state_free && rc == 0; i++) {
        int32_t s = kv->state_free[i];
        if (s < 0 || s >= kv->n_slots || kv->state_used[s] || seen[s]++)
            rc = fail(buf, size, "state slot %d is on the free list wrongly", s);
    }
    free(seen);
    return rc;
}
