/* kvcache: allocation order, LRU eviction of cached blocks, chained hashes, lookups with
 * references, prefix caching on/off, misuse detection, and 100k random operations checked
 * against a plain reference model with kv_check after every step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvcache.h"
#include "rng.h"

static void assert_ok(const kv_pool_t *kv) {
    char msg[256];
    int rc = kv_check(kv, msg, sizeof msg);
    if (rc != 0) fail_msg("kv_check: %s", msg);
}

static void fill_tokens(int32_t *t, int n, uint64_t seed) {
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)(rng_bits(seed, 1, (uint64_t)i) % 151936);
}

static void test_create_args(void **state) {
    assert_null(kv_create(0, 16, true));
    assert_null(kv_create(8, 0, true));
    assert_null(kv_create(-1, 16, false));
    kv_destroy(NULL);
    kv_pool_t *kv = kv_create(8, 16, true);
    assert_non_null(kv);
    assert_int_equal(kv_num_blocks(kv), 8);
    assert_int_equal(kv_block_size(kv), 16);
    assert_true(kv_prefix_caching(kv));
    assert_int_equal(kv_available(kv), 8);
    assert_int_equal(kv_used(kv), 0);
    assert_ok(kv);
    kv_destroy(kv);
}

static void test_alloc_until_empty(void **state) {
    kv_pool_t *kv = kv_create(8, 16, true);
    int seen[8] = {0};
    for (int i = 0; i < 8; i++) {
        int32_t b = kv_alloc(kv);
        assert_int_equal(b, i); /* a fresh pool hands out ids in order */
        seen[b]++;
        assert_int_equal(kv_refcount(kv, b), 1);
        assert_int_equal(kv_available(kv), 7 - i);
        assert_int_equal(kv_used(kv), i + 1);
        assert_ok(kv);
    }
    assert_int_equal(kv_alloc(kv), -1);
    assert_int_equal(kv_alloc(kv), -1);
    for (int i = 0; i < 8; i++)
        assert_int_equal(seen[i], 1);
    for (int i = 7; i >= 0; i--)
        kv_release(kv, i);
    assert_int_equal(kv_available(kv), 8);
    assert_int_equal(kv_used(kv), 0);
    assert_ok(kv);
    kv_destroy(kv);
}

static void test_lru_eviction_order(void **state) {
    kv_pool_t *kv = kv_create(4, 16, true);
    int32_t b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = kv_alloc(kv);
        kv_commit(kv, b[i], 100 + (uint64_t)i);
    }
    assert_int_equal(kv_num_cached(kv), 4);
    /* Released in the order 2, 0, 3, 1: that is the order they are evicted in. */
    int order[4] = {2, 0, 3, 1};
    for (int i = 0; i < 4; i++)
        kv_release(kv, b[order[i]]);
    assert_int_equal(kv_available(kv), 4);
    assert_int_equal(kv_num_cached(kv), 4);
    assert_ok(kv);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(kv_alloc(kv), b[order[i]]);
        assert_int_equal(kv_num_cached(kv), 3 - i);
        assert_ok(kv);
    }
    kv_destroy(kv);
}

static void test_free_blocks_before_cached(void **state) {
    kv_pool_t *kv = kv_create(4, 16, true);
    int32_t a = kv_alloc(kv), b = kv_alloc(kv), c = kv_alloc(kv);
    kv_commit(kv, a, 7);
    kv_release(kv, a); /* evictable */
    kv_release(kv, b); /* free: handed out before any free block of the initial list */
    assert_ok(kv);
    assert_int_equal(kv_alloc(kv), b);
    assert_int_equal(kv_alloc(kv), 3); /* the last never-used block */
    assert_int_equal(kv_num_cached(kv), 1);
    assert_int_equal(kv_alloc(kv), a); /* only now is the cached block evicted */
    assert_int_equal(kv_num_cached(kv), 0);
    assert_int_equal(kv_alloc(kv), -1);
    (void)c;
    assert_ok(kv);
    kv_destroy(kv);
}

static void test_commit_lookup_hits(void **state) {
    kv_pool_t *kv = kv_create(16, 16, true);
    int32_t toks[70];
    fill_tokens(toks, 70, 1);
    uint64_t h[8];
    assert_int_equal(kv_hash_blocks(kv, toks, 70, 0, h, 8), 4); /* full blocks only */
    assert_int_equal(kv_hash_blocks(kv, toks, 70, 0, h, 3), 3);
    assert_int_equal(kv_hash_blocks(kv, toks, 15, 0, h, 8), 0);
    assert_int_equal(kv_hash_blocks(kv, toks, 64, 0, h, 8), 4);

    int32_t blocks[4], got[4];
    assert_int_equal(kv_lookup(kv, h, 4, got), 0);
    for (int i = 0; i < 4; i++) {
        blocks[i] = kv_alloc(kv);
        kv_commit(kv, blocks[i], h[i]);
    }
    for (int i = 3; i >= 0; i--)
        kv_release(kv, blocks[i]);
    assert_int_equal(kv_used(kv), 0);
    assert_int_equal(kv_num_cached(kv), 4);

    assert_int_equal(kv_lookup(kv, h, 4, got), 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(got[i], blocks[i]);
        assert_int_equal(kv_refcount(kv, got[i]), 1); /* touched out of the LRU */
    }
    assert_int_equal(kv_used(kv), 4);
    assert_int_equal(kv_available(kv), 12);
    assert_ok(kv);

    /* A second request with the same prompt shares the blocks. */
    assert_int_equal(kv_lookup(kv, h, 4, got), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(kv_refcount(kv, got[i]), 2);

    /* A prompt that differs in block 2 hits blocks 0 and 1 only. */
    int32_t toks2[64];
    memcpy(toks2, toks, sizeof toks2);
    toks2[40]++;
    uint64_t h2[4];
    assert_int_equal(kv_hash_blocks(kv, toks2, 64, 0, h2, 4), 4);
    assert_int_equal(kv_lookup(kv, h2, 4, got), 2);
    assert_int_equal(got[0], blocks[0]);
    assert_int_equal(got[1], blocks[1]);
    assert_int_equal(kv_refcount(kv, blocks[0]), 3);
    assert_int_equal(kv_refcount(kv, blocks[2]), 2);

    uint64_t queried, hit;
    kv_counters(kv, &queried, &hit);
    assert_int_equal(queried, 16);
    assert_int_equal(hit, 10);
    kv_reset_counters(kv);
    kv_counters(kv, &queried, &hit);
    assert_int_equal(queried, 0);
    assert_int_equal(hit, 0);
    assert_ok(kv);
    kv_destroy(kv);
}

static void test_chain_property(void **state) {
    kv_pool_t *kv = kv_create(4, 16, true);
    enum { NB = 32 };
    int32_t a[NB * 16], b[NB * 16];
    fill_tokens(a, NB * 16, 2);
    memcpy(b, a, sizeof a);
    uint64_t ha[NB], hb[NB], hs[NB];
    assert_int_equal(kv_hash_blocks(kv, a, NB * 16, 0, ha, NB), NB);
    assert_int_equal(kv_hash_blocks(kv, b, NB * 16, 0, hb, NB), NB);
    for (int i = 0; i < NB; i++)
        assert_true(ha[i] == hb[i]); /* deterministic in one pool */

    b[3] ^= 1; /* first block differs: every later hash differs too */
    kv_hash_blocks(kv, b, NB * 16, 0, hb, NB);
    for (int i = 0; i < NB; i++)
        assert_true(ha[i] != hb[i]);

    memcpy(b, a, sizeof a);
    b[5 * 16 + 15] += 7; /* block 5 differs: blocks 0..4 keep their hashes */
    kv_hash_blocks(kv, b, NB * 16, 0, hb, NB);
    for (int i = 0; i < 5; i++)
        assert_true(ha[i] == hb[i]);
    for (int i = 5; i < NB; i++)
        assert_true(ha[i] != hb[i]);

    assert_int_equal(kv_hash_blocks(kv, a, NB * 16, 42, hs, NB), NB); /* salt: every hash */
    for (int i = 0; i < NB; i++)
        assert_true(ha[i] != hs[i]);

    /* Same tokens in a different block position must not give the same hash. */
    int32_t rep[64];
    for (int i = 0; i < 64; i++)
        rep[i] = 9;
    uint64_t hr[4];
    kv_hash_blocks(kv, rep, 64, 0, hr, 4);
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            assert_true(hr[i] != hr[j]);

    /* Block size is part of the hash: 32 tokens as one block of 32 vs. two of 16. */
    kv_pool_t *kv32 = kv_create(4, 32, true);
    uint64_t h32[1];
    assert_int_equal(kv_hash_blocks(kv32, a, 32, 0, h32, 1), 1);
    assert_true(h32[0] != ha[1]);

    /* Avalanche: flipping one token bit flips about half the bits of the block's hash. */
    int total = 0;
    for (int bit = 0; bit < 32; bit++) {
        memcpy(b, a, 16 * sizeof *b);
        b[bit % 16] ^= (int32_t)(1u << (bit % 31));
        uint64_t x;
        kv_hash_blocks(kv, b, 16, 0, &x, 1);
        total += __builtin_popcountll(x ^ ha[0]);
    }
    assert_in_range(total, 32 * 24, 32 * 40);
    kv_destroy(kv32);
    kv_destroy(kv);
}

static void test_prefix_caching_off(void **state) {
    kv_pool_t *kv = kv_create(8, 16, false);
    int32_t toks[32];
    fill_tokens(toks, 32, 3);
    uint64_t h[2];
    assert_int_equal(kv_hash_blocks(kv, toks, 32, 0, h, 2), 2);
    int32_t b0 = kv_alloc(kv), b1 = kv_alloc(kv);
    kv_commit(kv, b0, h[0]);
    kv_commit(kv, b1, h[1]);
    assert_int_equal(kv_num_cached(kv), 0);
    kv_release(kv, b1);
    kv_release(kv, b0);
    int32_t got[2];
    assert_int_equal(kv_lookup(kv, h, 2, got), 0);
    uint64_t queried, hit;
    kv_counters(kv, &queried, &hit);
    assert_int_equal(queried, 0);
    assert_int_equal(hit, 0);
    assert_int_equal(kv_used(kv), 0);
    assert_ok(kv);
    kv_destroy(kv);
}

static void test_toggle_off_drops_hashes(void **state) {
    kv_pool_t *kv = kv_create(8, 16, true);
    int32_t toks[64];
    fill_tokens(toks, 64, 4);
    uint64_t h[4];
    kv_hash_blocks(kv, toks, 64, 0, h, 4);
    int32_t b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = kv_alloc(kv);
        kv_commit(kv, b[i], h[i]);
    }
    kv_release(kv, b[3]);
    kv_release(kv, b[2]); /* two evictable, two in use */
    assert_int_equal(kv_num_cached(kv), 4);

    kv_set_prefix_caching(kv, false);
    assert_false(kv_prefix_caching(kv));
    assert_int_equal(kv_num_cached(kv), 0);
    assert_int_equal(kv_used(kv), 2);
    assert_int_equal(kv_available(kv), 6);
    assert_ok(kv);
    int32_t got[4];
    assert_int_equal(kv_lookup(kv, h, 4, got), 0);

    kv_set_prefix_caching(kv, true);
    assert_int_equal(kv_lookup(kv, h, 4, got), 0); /* the hashes are gone, not hidden */
    kv_release(kv, b[1]);
    kv_release(kv, b[0]);
    assert_int_equal(kv_used(kv), 0);
    assert_ok(kv);
    /* Blocks in use keep working and can be registered again once caching is back on. */
    int32_t c = kv_alloc(kv);
    kv_commit(kv, c, h[0]);
    kv_release(kv, c);
    assert_int_equal(kv_lookup(kv, h, 4, got), 1);
    assert_int_equal(got[0], c);
    assert_ok(kv);
    kv_destroy(kv);
}

static void test_sharing_with_ref(void **state) {
    kv_pool_t *kv = kv_create(4, 16, true);
    int32_t b = kv_alloc(kv);
    kv_ref(kv, b);
    kv_ref(kv, b);
    assert_int_equal(kv_refcount(kv, b), 3);
    kv_release(kv, b);
    kv_release(kv, b);
    assert_int_equal(kv_refcount(kv, b), 1);
    assert_int_equal(kv_used(kv), 1);
    assert_int_equal(kv_available(kv), 3);
    assert_ok(kv);
    kv_release(kv, b);
    assert_int_equal(kv_used(kv), 0);
    assert_int_equal(kv_available(kv), 4);
    assert_ok(kv);
    kv_destroy(kv);
}

static void test_eviction_forgets_hash(void **state) {
    kv_pool_t *kv = kv_create(2, 16, true);
    int32_t a = kv_alloc(kv);
    kv_commit(kv, a, 555);
    kv_release(kv, a);
    int32_t got[1];
    uint64_t h = 555;
    int32_t x = kv_alloc(kv), y = kv_alloc(kv);
    assert_int_equal(x, 1);
    assert_int_equal(y, a); /* evicted */
    assert_int_equal(kv_num_cached(kv), 0);
    assert_int_equal(kv_lookup(kv, &h, 1, got), 0);
    kv_release(kv, x);
    kv_release(kv, y);
    assert_int_equal(kv_lookup(kv, &h, 1, got), 0);
    assert_int_equal(kv_used(kv), 0);
    assert_ok(kv);
    kv_destroy(kv);
}

static void test_no_double_registration(void **state) {
    kv_pool_t *kv = kv_create(4, 16, true);
    int32_t a = kv_alloc(kv), b = kv_alloc(kv);
    kv_commit(kv, a, 77);
    kv_commit(kv, b, 77); /* same content computed twice: the first block keeps the hash */
    kv_commit(kv, a, 77); /* committing again is a no-op */
    assert_int_equal(kv_num_cached(kv), 1);
    assert_ok(kv);
    kv_release(kv, b); /* uncached: plain free block */
    kv_release(kv, a);
    uint64_t h = 77;
    int32_t got[1];
    assert_int_equal(kv_lookup(kv, &h, 1, got), 1);
    assert_int_equal(got[0], a);
    assert_ok(kv);
    kv_destroy(kv);
}

static void test_misuse_is_reported(void **state) {
    char msg[256];
    kv_pool_t *kv = kv_create(4, 16, true);
    kv_release(kv, 2);
    assert_int_equal(kv_check(kv, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "kv_release(2): block is free"));
    assert_int_equal(kv_available(kv), 4);
    kv_destroy(kv);

    kv = kv_create(4, 16, true);
    kv_ref(kv, 9);
    assert_int_equal(kv_check(kv, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "kv_ref(9): no such block"));
    kv_destroy(kv);

    kv = kv_create(4, 16, true);
    int32_t b = kv_alloc(kv);
    kv_commit(kv, b, 1);
    kv_commit(kv, b, 2);
    assert_int_equal(kv_check(kv, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "already has another hash"));
    kv_destroy(kv);
}

/* ---- randomized against a reference model --------------------------------------------------- */

enum { MN = 48, MAX_HELD = 256, UNIVERSE = 160 };

typedef struct model {
    int ref[MN];
    bool has[MN];
    uint64_t hash[MN];
    int q[MN]; /* eviction order, front first */
    int qlen;
    bool on;
    int held[MAX_HELD]; /* references the test holds */
    int nheld;
    uint64_t queried, hit;
} model_t;

static int m_find(const model_t *m, uint64_t h) {
    for (int b = 0; b < MN; b++)
        if (m->has[b] && m->hash[b] == h) return b;
    return -1;
}

static void m_qremove(model_t *m, int b) {
    for (int i = 0; i < m->qlen; i++) {
        if (m->q[i] != b) continue;
        memmove(m->q + i, m->q + i + 1, (size_t)(m->qlen - i - 1) * sizeof *m->q);
        m->qlen--;
        return;
    }
    fail_msg("model: block %d not queued", b);
}

static void m_release(model_t *m, int b) {
    if (--m->ref[b] > 0) return;
    if (m->has[b]) {
        m->q[m->qlen++] = b;
    } else {
        memmove(m->q + 1, m->q, (size_t)m->qlen * sizeof *m->q);
        m->q[0] = b;
        m->qlen++;
    }
}

static void test_random_against_model(void **state) {
    kv_pool_t *kv = kv_create(MN, 16, true);
    model_t m;
    memset(&m, 0, sizeof m);
    for (int b = 0; b < MN; b++)
        m.q[b] = b;
    m.qlen = MN;
    m.on = true;
    uint64_t ctr = 0;
#define RND(n) ((int)(rng_bits(12345, 7, ctr++) % (uint64_t)(n)))
    int n_alloc_fail = 0, n_hits = 0, n_evict = 0, n_toggles = 0;
    for (int step = 0; step < 100000; step++) {
        int op = RND(1000);
        if (m.nheld >= MAX_HELD - 8 && op < 700) op = 300; /* keep the held list bounded */
        if (op < 250) {                                    /* alloc */
            int32_t b = kv_alloc(kv);
            if (m.qlen == 0) {
                assert_int_equal(b, -1);
                n_alloc_fail++;
            } else {
                int want = m.q[0];
                assert_int_equal(b, want);
                m_qremove(&m, want);
                if (m.has[want]) n_evict++;
                m.has[want] = false;
                m.ref[want] = 1;
                m.held[m.nheld++] = want;
            }
        } else if (op < 500) { /* release */
            if (m.nheld == 0) continue;
            int i = RND(m.nheld);
            int b = m.held[i];
            m.held[i] = m.held[--m.nheld];
            kv_release(kv, b);
            m_release(&m, b);
        } else if (op < 580) { /* ref */
            if (m.nheld == 0) continue;
            int b = m.held[RND(m.nheld)];
            kv_ref(kv, b);
            m.ref[b]++;
            m.held[m.nheld++] = b;
        } else if (op < 730) { /* commit */
            if (m.nheld == 0) continue;
            int b = m.held[RND(m.nheld)];
            uint64_t h = m.has[b] ? m.hash[b] : 1 + (uint64_t)RND(UNIVERSE);
            kv_commit(kv, b, h);
            if (m.on && !m.has[b] && m_find(&m, h) < 0) {
                m.has[b] = true;
                m.hash[b] = h;
            }
        } else if (op < 995) { /* lookup */
            uint64_t chain[5];
            int n = 1 + RND(5);
            for (int i = 0; i < n; i++) {
                int pick = RND(MN);
                chain[i] =
                    (RND(10) < 7 && m.has[pick]) ? m.hash[pick] : 1 + (uint64_t)RND(UNIVERSE);
            }
            if (m.nheld + n > MAX_HELD) continue;
            int32_t got[5];
            int hit = kv_lookup(kv, chain, n, got);
            int want = 0;
            if (m.on) {
                for (; want < n; want++) {
                    int b = m_find(&m, chain[want]);
                    if (b < 0) break;
                    assert_true(want < hit);
                    assert_int_equal(got[want], b);
                    if (m.ref[b] == 0) m_qremove(&m, b);
                    m.ref[b]++;
                    m.held[m.nheld++] = b;
                }
                m.queried += (uint64_t)n;
                m.hit += (uint64_t)want;
            }
            assert_int_equal(hit, want);
            n_hits += hit;
        } else { /* toggle */
            m.on = !m.on;
            kv_set_prefix_caching(kv, m.on);
            if (!m.on) memset(m.has, 0, sizeof m.has);
            n_toggles++;
        }

        char msg[256];
        if (kv_check(kv, msg, sizeof msg) != 0) fail_msg("step %d: kv_check: %s", step, msg);
        int cached = 0;
        for (int b = 0; b < MN; b++) {
            if (kv_refcount(kv, b) != m.ref[b])
                fail_msg("step %d: block %d refcount %d, model %d", step, b, kv_refcount(kv, b),
                         m.ref[b]);
            cached += m.has[b];
        }
        assert_int_equal(kv_available(kv), m.qlen);
        assert_int_equal(kv_used(kv), MN - m.qlen);
        assert_int_equal(kv_num_cached(kv), cached);
        uint64_t queried, hit;
        kv_counters(kv, &queried, &hit);
        assert_int_equal(queried, m.queried);
        assert_int_equal(hit, m.hit);
    }
#undef RND
    /* The mix must have exercised every path, not just run. */
    assert_true(n_alloc_fail > 100);
    assert_true(n_hits > 1000);
    assert_true(n_evict > 100);
    assert_true(n_toggles > 50);
    while (m.nheld > 0)
        kv_release(kv, m.held[--m.nheld]);
    assert_int_equal(kv_used(kv), 0);
    assert_ok(kv);
    kv_destroy(kv);
}

/* Recurrent-state slots: all free after init, handed out once each, given back; misuse is
 * recorded and kv_check names it. */
static void test_state_slots(void **state) {
    (void)state;
    kv_pool_t *kv = kv_create(4, 16, false);
    assert_int_equal(kv_state_slots(kv), 0);
    assert_int_equal(kv_state_alloc(kv), -1);
    assert_int_equal(kv_state_init(kv, 3), 0);
    assert_int_equal(kv_state_available(kv), 3);
    int32_t a = kv_state_alloc(kv), b = kv_state_alloc(kv), c = kv_state_alloc(kv);
    assert_true(a >= 0 && b >= 0 && c >= 0 && a != b && b != c && a != c);
    assert_int_equal(kv_state_alloc(kv), -1);
    assert_int_equal(kv_check(kv, NULL, 0), 0);
    kv_state_free(kv, b);
    assert_int_equal(kv_state_available(kv), 1);
    assert_int_equal(kv_state_alloc(kv), b);
    kv_state_free(kv, a);
    kv_state_free(kv, b);
    kv_state_free(kv, c);
    assert_int_equal(kv_state_available(kv), 3);
    assert_int_equal(kv_check(kv, NULL, 0), 0);
    kv_state_free(kv, c); /* already free */
    char msg[128];
    assert_int_equal(kv_check(kv, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "kv_state_free"));
    assert_int_equal(kv_state_available(kv), 3);
    kv_destroy(kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_args),
        cmocka_unit_test(test_alloc_until_empty),
        cmocka_unit_test(test_lru_eviction_order),
        cmocka_unit_test(test_free_blocks_before_cached),
        cmocka_unit_test(test_commit_lookup_hits),
        cmocka_unit_test(test_chain_property),
        cmocka_unit_test(test_prefix_caching_off),
        cmocka_unit_test(test_toggle_off_drops_hashes),
        cmocka_unit_test(test_sharing_with_ref),
        cmocka_unit_test(test_eviction_forgets_hash),
        cmocka_unit_test(test_no_double_registration),
        cmocka_unit_test(test_misuse_is_reported),
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_state_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
