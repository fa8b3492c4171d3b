/*
 * scheduler: the step plan on its own, against a real block pool. Decodes before prefills and
 * the token budget, chunked and unchunked prefill, max-num-seqs, preemption of the newest
 * sequence (freed, front of the queue, recomputed with its output), prefix-cache hits that
 * leave one token to compute, blocks committed once full, forks sharing full prompt blocks,
 * fcfs and priority order (and a live switch between them), and giving every block back;
 * recurrent-state slots taken at admission and given back, and forks at the fork point.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "flags.h"
#include "kvcache.h"
#include "scheduler.h"

enum { BS = 16 };

static sched_config_t config(int max_seqs, int budget, bool chunked) {
    return (sched_config_t){.max_num_seqs = max_seqs,
                            .max_num_batched_tokens = budget,
                            .chunked_prefill = chunked,
                            .policy = SCHED_FCFS};
}

static void check_pool(const kv_pool_t *kv) {
    char msg[256];
    if (kv_check(kv, msg, sizeof msg) < 0) fail_msg("kv_check: %s", msg);
}

/* A sequence with prompt tokens base, base+1, ... */
static void seq_make(sched_seq_t *s, int n_prompt, int base, uint64_t order) {
    int32_t *p = malloc((size_t)n_prompt * sizeof *p);
    for (int i = 0; i < n_prompt; i++)
        p[i] = base + i;
    assert_int_equal(sched_seq_init(s, p, n_prompt, 4), 0);
    free(p);
    s->arrival = (double)order;
    s->order = order;
}

/* Plans a step, checks it covers each sequence's next tokens with blocks in place, and
 * "computes" it: advances, then appends a token to every sequence that reached its end. */
static sched_out_t run_step(sched_t *s, kv_pool_t *kv, int32_t next_token) {
    sched_out_t out;
    sched_seq_t *failed;
    assert_int_equal(sched_schedule(s, &out, &failed), 0);
    int total = 0;
    for (int i = 0; i < out.n; i++) {
        sched_seq_t *q = out.seqs[i];
        assert_true(out.n_new[i] >= 1);
        assert_true(q->n_computed + out.n_new[i] <= q->n_tokens);
        assert_true(q->n_blocks * BS >= q->n_computed + out.n_new[i]);
        total += out.n_new[i];
    }
    assert_int_equal(total, out.n_tokens);
    assert_int_equal(sched_advance(s, &out), 0);
    for (int i = 0; i < out.n; i++)
        if (out.seqs[i]->n_computed == out.seqs[i]->n_tokens)
            assert_int_equal(sched_seq_append(out.seqs[i], next_token), 0);
    check_pool(kv);
    return out;
}

static void test_decodes_first_and_budget(void **state) {
    kv_pool_t *kv = kv_create(64, BS, false);
    sched_config_t cfg = config(8, 40, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t a, b, c;
    seq_make(&a, 20, 100, 1);
    seq_make(&b, 30, 200, 2);
    seq_make(&c, 5, 300, 3);
    assert_int_equal(sched_add(s, &a), 0);
    assert_int_equal(sched_add(s, &b), 0);

    /* step 1: a's whole prompt (20), then b's first 20 tokens fill the budget of 40 */
    sched_out_t out = run_step(s, kv, 1);
    assert_int_equal(out.n, 2);
    assert_ptr_equal(out.seqs[0], &a);
    assert_int_equal(out.n_new[0], 20);
    assert_ptr_equal(out.seqs[1], &b);
    assert_int_equal(out.n_new[1], 20);
    assert_int_equal(out.n_admitted, 2);
    assert_int_equal(a.n_tokens, 21); /* got its first token */
    assert_int_equal(b.n_tokens, 30);

    /* c arrives; step 2: running first: a decodes (1), b finishes its prompt (10), c (5) */
    assert_int_equal(sched_add(s, &c), 0);
    out = run_step(s, kv, 2);
    assert_int_equal(out.n, 3);
    assert_ptr_equal(out.seqs[0], &a);
    assert_int_equal(out.n_new[0], 1);
    assert_int_equal(out.n_new[1], 10);
    assert_ptr_equal(out.seqs[2], &c);
    assert_int_equal(out.n_new[2], 5);
    assert_int_equal(sched_num_running(s), 3);
    assert_int_equal(sched_num_waiting(s), 0);

    /* all decode now: one token each */
    out = run_step(s, kv, 3);
    assert_int_equal(out.n_tokens, 3);

    /* a removed: its blocks go back, the others keep running in order */
    int used = kv_used(kv);
    int a_blocks = a.n_blocks;
    sched_remove(s, &a);
    assert_int_equal(kv_used(kv), used - a_blocks);
    out = run_step(s, kv, 4);
    assert_int_equal(out.n, 2);
    assert_ptr_equal(out.seqs[0], &b);
    assert_ptr_equal(out.seqs[1], &c);
    sched_remove(s, &b);
    sched_remove(s, &c);
    assert_int_equal(kv_used(kv), 0);
    check_pool(kv);
    sched_seq_free(&a);
    sched_seq_free(&b);
    sched_seq_free(&c);
    sched_destroy(s);
    kv_destroy(kv);
}

static void test_chunked_prefill(void **state) {
    kv_pool_t *kv = kv_create(64, BS, false);
    sched_config_t cfg = config(8, 16, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t a;
    seq_make(&a, 100, 0, 1);
    sched_add(s, &a);
    int chunks[] = {16, 16, 16, 16, 16, 16, 4, 1, 1};
    for (int i = 0; i < 9; i++) {
        sched_out_t out = run_step(s, kv, 7);
        assert_int_equal(out.n, 1);
        assert_int_equal(out.n_new[0], chunks[i]);
    }
    assert_int_equal(a.n_tokens, 103); /* tokens after steps 7, 8 and 9 */
    assert_int_equal(a.n_computed, 102);
    sched_remove(s, &a);
    sched_seq_free(&a);
    sched_destroy(s);
    kv_destroy(kv);
}

static void test_unchunked_prefill_waits(void **state) {
    kv_pool_t *kv = kv_create(64, BS, false);
    sched_config_t cfg = config(8, 32, false);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t a, b, big;
    seq_make(&a, 20, 0, 1);
    seq_make(&b, 20, 50, 2);
    seq_make(&big, 50, 100, 3);
    sched_add(s, &a);
    sched_add(s, &b);
    sched_add(s, &big);
    /* a fits; b (20) does not fit the 12 left: it waits, and so does everything behind it */
    sched_out_t out = run_step(s, kv, 1);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.n_new[0], 20);
    out = run_step(s, kv, 1);
    assert_int_equal(out.n, 2);
    assert_ptr_equal(out.seqs[1], &b);
    assert_int_equal(out.n_new[1], 20);
    /* big (50) exceeds the whole budget: it runs only alone */
    out = run_step(s, kv, 1);
    assert_int_equal(out.n, 2);
    assert_int_equal(sched_num_waiting(s), 1);
    sched_remove(s, &a);
    sched_remove(s, &b);
    out = run_step(s, kv, 1);
    assert_int_equal(out.n, 1);
    assert_ptr_equal(out.seqs[0], &big);
    assert_int_equal(out.n_new[0], 50);
    sched_remove(s, &big);
    sched_seq_free(&a);
    sched_seq_free(&b);
    sched_seq_free(&big);
    sched_destroy(s);
    kv_destroy(kv);
}

static void test_max_num_seqs(void **state) {
    kv_pool_t *kv = kv_create(64, BS, false);
    sched_config_t cfg = config(2, 100, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t q[3];
    for (int i = 0; i < 3; i++) {
        seq_make(&q[i], 4, 10 * i, (uint64_t)i);
        sched_add(s, &q[i]);
    }
    sched_out_t out = run_step(s, kv, 1);
    assert_int_equal(out.n, 2);
    assert_int_equal(sched_num_waiting(s), 1);
    cfg.max_num_seqs = 3; /* live */
    sched_set_config(s, &cfg);
    out = run_step(s, kv, 1);
    assert_int_equal(out.n, 3);
    assert_ptr_equal(out.seqs[2], &q[2]);
    for (int i = 0; i < 3; i++) {
        sched_remove(s, &q[i]);
        sched_seq_free(&q[i]);
    }
    sched_destroy(s);
    kv_destroy(kv);
}

/* Pool of 6 blocks: two sequences of 48 and 40 tokens (3 blocks each) fill it; when the older
 * needs a 4th block the newer is preempted: freed, queued first, and later recomputed, prompt and
 * output, in a prefill of its own. */
static void test_preemption(void **state) {
    kv_pool_t *kv = kv_create(6, BS, false);
    sched_config_t cfg = config(8, 256, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t a, b, c;
    seq_make(&a, 48, 0, 1);
    seq_make(&b, 40, 100, 2);
    seq_make(&c, 3, 200, 3);
    sched_add(s, &a);
    sched_add(s, &b);
    run_step(s, kv, 9); /* a: 48 (+1 output), b: 40 (+1): 3 blocks each */
    assert_int_equal(kv_used(kv), 6);
    sched_add(s, &c);
    /* a's next token is position 48: a 4th block; b is the newest: preempted */
    sched_out_t out = run_step(s, kv, 9);
    assert_int_equal(out.n_preempted, 1);
    assert_int_equal(out.n, 1);
    assert_ptr_equal(out.seqs[0], &a);
    assert_int_equal(out.n_admitted, 0); /* no admission in a step that preempted */
    assert_int_equal(b.state, SCHED_SEQ_WAITING);
    assert_int_equal(b.n_computed, 0);
    assert_int_equal(b.n_blocks, 0);
    assert_int_equal(b.n_tokens, 41); /* keeps its output */
    assert_int_equal(b.n_preemptions, 1);
    assert_int_equal(sched_preemptions(s), 1);
    /* b is ahead of c (which arrived later but never ran) */
    sched_remove(s, &a);
    out = run_step(s, kv, 9);
    assert_ptr_equal(out.seqs[0], &b);
    assert_int_equal(out.n_new[0], 41); /* recomputes prompt + output */
    assert_int_equal(b.n_tokens, 42);
    assert_ptr_equal(out.seqs[1], &c);
    sched_remove(s, &b);
    sched_remove(s, &c);
    assert_int_equal(kv_used(kv), 0);
    sched_seq_free(&a);
    sched_seq_free(&b);
    sched_seq_free(&c);
    sched_destroy(s);
    kv_destroy(kv);
}

/* A sequence that cannot get a block even alone preempts itself and the step stops there. */
static void test_self_preemption(void **state) {
    kv_pool_t *kv = kv_create(2, BS, false);
    sched_config_t cfg = config(8, 256, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t a, b;
    seq_make(&a, 16, 0, 1);
    seq_make(&b, 16, 100, 2);
    sched_add(s, &a);
    sched_add(s, &b);
    run_step(s, kv, 1); /* each 16 tokens + 1 output: 1 block each, pool full */
    /* both need a second block: b (newest) is preempted for a; then a runs */
    sched_out_t out = run_step(s, kv, 1);
    assert_int_equal(out.n_preempted, 1);
    assert_int_equal(out.n, 1);
    assert_ptr_equal(out.seqs[0], &a);
    /* a alone outgrows the pool: at position 32 it needs a third block */
    for (int i = 0; i < 15; i++)
        run_step(s, kv, 1);
    assert_int_equal(a.n_tokens, 33);
    out = run_step(s, kv, 1);
    assert_int_equal(out.n, 0);
    assert_int_equal(out.n_preempted, 1);
    assert_int_equal(a.state, SCHED_SEQ_WAITING);
    sched_remove(s, &a);
    sched_remove(s, &b);
    assert_int_equal(kv_used(kv), 0);
    sched_seq_free(&a);
    sched_seq_free(&b);
    sched_destroy(s);
    kv_destroy(kv);
}

static void test_prefix_cache(void **state) {
    kv_pool_t *kv = kv_create(32, BS, true);
    sched_config_t cfg = config(8, 256, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t a, b, c;
    seq_make(&a, 40, 0, 1);
    sched_add(s, &a);
    run_step(s, kv, 5);
    assert_int_equal(a.n_committed, 2); /* blocks 0, 1 full after 40 tokens */
    assert_int_equal(a.cached_tokens, 0);
    assert_int_equal(a.prefix_queried, 32);
    for (int i = 0; i < 8; i++)
        run_step(s, kv, 5);
    assert_int_equal(a.n_computed, 48);
    assert_int_equal(a.n_committed, 3); /* output tokens fill and commit block 2 */
    sched_remove(s, &a);
    assert_int_equal(kv_used(kv), 0);

    /* the same 40-token prompt: 2 cached blocks, 8 tokens to compute */
    seq_make(&b, 40, 0, 2);
    sched_add(s, &b);
    sched_out_t out = run_step(s, kv, 5);
    assert_int_equal(out.n_new[0], 8);
    assert_int_equal(b.cached_tokens, 32);
    assert_int_equal(b.prefix_queried, 32);

    /* a 32-token prompt all cached: still computes its last token (one block only hits) */
    seq_make(&c, 32, 0, 3);
    sched_add(s, &c);
    out = run_step(s, kv, 5);
    assert_ptr_equal(out.seqs[1], &c);
    assert_int_equal(out.n_new[1], 16);
    assert_int_equal(c.cached_tokens, 16);
    /* b and c share block 0 */
    assert_int_equal(b.blocks[0], c.blocks[0]);
    assert_int_equal(kv_refcount(kv, b.blocks[0]), 2);
    sched_remove(s, &b);
    sched_remove(s, &c);
    assert_int_equal(kv_used(kv), 0);
    check_pool(kv);
    sched_seq_free(&a);
    sched_seq_free(&b);
    sched_seq_free(&c);
    sched_destroy(s);
    kv_destroy(kv);
}

static void test_fork(void **state) {
    kv_pool_t *kv = kv_create(32, BS, false);
    sched_config_t cfg = config(8, 256, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t p, ch, ch2;
    seq_make(&p, 37, 0, 10);
    sched_add(s, &p);
    assert_int_equal(sched_seq_init(&ch, NULL, 0, 40), 0);
    assert_int_equal(sched_fork(s, &p, &ch), -1); /* the prompt is not computed yet */
    run_step(s, kv, 3);
    ch.order = 11;
    assert_int_equal(sched_fork(s, &p, &ch), 0);
    assert_int_equal(ch.n_tokens, 37);
    assert_memory_equal(ch.tokens, p.tokens, 37 * sizeof(int32_t));
    assert_int_equal(ch.n_computed, 32); /* (37 - 1) / 16 full blocks */
    assert_int_equal(ch.n_blocks, 2);
    assert_int_equal(ch.blocks[0], p.blocks[0]);
    assert_int_equal(ch.blocks[1], p.blocks[1]);
    assert_int_equal(kv_refcount(kv, p.blocks[0]), 2);
    assert_int_equal(kv_refcount(kv, p.blocks[2]), 1);
    sched_out_t out = run_step(s, kv, 4);
    assert_int_equal(out.n, 2);
    assert_ptr_equal(out.seqs[1], &ch);
    assert_int_equal(out.n_new[1], 5); /* computes its own last block */
    assert_int_not_equal(ch.blocks[2], p.blocks[2]);
    /* a prompt of exactly one block shares nothing: its last token is in that block */
    sched_seq_t q;
    seq_make(&q, 16, 0, 20);
    sched_add(s, &q);
    run_step(s, kv, 4);
    assert_int_equal(sched_seq_init(&ch2, NULL, 0, 0), 0);
    assert_int_equal(sched_fork(s, &q, &ch2), 0);
    assert_int_equal(ch2.n_blocks, 0);
    assert_int_equal(ch2.n_computed, 0);
    sched_remove(s, &p);
    assert_int_equal(kv_refcount(kv, ch.blocks[0]), 1); /* still held by the child */
    /* a parent preempted after computing its prompt (asynchronous scheduling forks when its
     * first token is emitted, after the next step was planned): the child shares nothing and
     * computes the whole prompt; an unpreempted parent that has not computed it still refuses */
    sched_seq_t r, ch3, ch4;
    seq_make(&r, 40, 0, 30);
    sched_add(s, &r);
    assert_int_equal(sched_seq_init(&ch4, NULL, 0, 0), 0);
    assert_int_equal(sched_fork(s, &r, &ch4), -1);
    run_step(s, kv, 5);
    assert_int_equal(r.n_computed, 40);
    sched_release_all(s); /* every running sequence preempted, r among them */
    assert_int_equal(r.n_computed, 0);
    assert_int_equal(sched_seq_init(&ch3, NULL, 0, 0), 0);
    ch3.order = 31;
    assert_int_equal(sched_fork(s, &r, &ch3), 0);
    assert_int_equal(ch3.n_tokens, 40);
    assert_int_equal(ch3.n_blocks, 0);
    assert_int_equal(ch3.n_computed, 0);
    sched_remove(s, &r);
    sched_remove(s, &ch);
    sched_remove(s, &q);
    sched_remove(s, &ch2);
    sched_remove(s, &ch3);
    assert_int_equal(kv_used(kv), 0);
    check_pool(kv);
    sched_seq_free(&p);
    sched_seq_free(&ch);
    sched_seq_free(&q);
    sched_seq_free(&ch2);
    sched_seq_free(&r);
    sched_seq_free(&ch3);
    sched_seq_free(&ch4);
    sched_destroy(s);
    kv_destroy(kv);
}

static void test_policy_order(void **state) {
    kv_pool_t *kv = kv_create(64, BS, false);
    sched_config_t cfg = config(1, 256, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t q[5];
    int prio[5] = {3, 1, 2, 1, 0};
    for (int i = 0; i < 5; i++) {
        seq_make(&q[i], 2, 10 * i, (uint64_t)i);
        q[i].priority = prio[i];
        sched_add(s, &q[i]);
    }
    /* fcfs: arrival order; one at a time (max-num-seqs 1) */
    sched_out_t out = run_step(s, kv, 1);
    assert_ptr_equal(out.seqs[0], &q[0]);
    sched_remove(s, &q[0]);
    out = run_step(s, kv, 1);
    assert_ptr_equal(out.seqs[0], &q[1]);
    sched_remove(s, &q[1]);
    /* switch to priority live: 4 (0), then 3 (1), then 2 (2) */
    cfg.policy = SCHED_PRIORITY;
    sched_set_config(s, &cfg);
    int expect[3] = {4, 3, 2};
    for (int i = 0; i < 3; i++) {
        out = run_step(s, kv, 1);
        assert_ptr_equal(out.seqs[0], &q[expect[i]]);
        sched_remove(s, &q[expect[i]]);
    }
    assert_false(sched_has_work(s));
    for (int i = 0; i < 5; i++)
        sched_seq_free(&q[i]);
    sched_destroy(s);
    kv_destroy(kv);
}

/* A pool swap: everyone back to waiting without blocks, then the same work on a new pool with
 * another block size gives the same tokens. */
static void test_release_all(void **state) {
    kv_pool_t *kv = kv_create(32, BS, true);
    sched_config_t cfg = config(8, 64, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t a, b;
    seq_make(&a, 30, 0, 1);
    seq_make(&b, 70, 100, 2);
    sched_add(s, &a);
    sched_add(s, &b);
    run_step(s, kv, 1);
    assert_int_equal(sched_release_all(s), 2);
    assert_int_equal(kv_used(kv), 0);
    assert_int_equal(a.n_hashes, 0);
    assert_int_equal(sched_num_waiting(s), 2);
    kv_pool_t *kv2 = kv_create(16, 32, true);
    sched_set_pool(s, kv2);
    kv_destroy(kv);
    sched_out_t out;
    sched_seq_t *failed;
    assert_int_equal(sched_schedule(s, &out, &failed), 0);
    assert_ptr_equal(out.seqs[0], &a);
    assert_int_equal(out.n_new[0], 31); /* 30 + its output */
    assert_int_equal(a.n_blocks, 1);
    assert_int_equal(out.n_new[1], 33);
    assert_int_equal(b.n_blocks, 2);
    sched_remove(s, &a);
    sched_remove(s, &b);
    assert_int_equal(kv_used(kv2), 0);
    check_pool(kv2);
    sched_seq_free(&a);
    sched_seq_free(&b);
    sched_destroy(s);
    kv_destroy(kv2);
}

/* A plan stays valid while sequences are added (the engine forks choices mid-step): the arrays
 * it points to do not move (ASan would see them freed). */
static void test_plan_survives_adds(void **state) {
    kv_pool_t *kv = kv_create(256, BS, false);
    sched_config_t cfg = config(64, 1024, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t q[40];
    for (int i = 0; i < 2; i++) {
        seq_make(&q[i], 5, 10 * i, (uint64_t)i);
        sched_add(s, &q[i]);
    }
    sched_out_t out;
    sched_seq_t *failed;
    assert_int_equal(sched_schedule(s, &out, &failed), 0);
    assert_int_equal(out.n, 2);
    for (int i = 2; i < 40; i++) {
        seq_make(&q[i], 5, 10 * i, (uint64_t)i);
        assert_int_equal(sched_add(s, &q[i]), 0);
    }
    assert_ptr_equal(out.seqs[0], &q[0]);
    assert_ptr_equal(out.seqs[1], &q[1]);
    assert_int_equal(out.n_new[1], 5);
    assert_int_equal(sched_advance(s, &out), 0);
    assert_int_equal(q[1].n_computed, 5);
    for (int i = 0; i < 40; i++) {
        sched_remove(s, &q[i]);
        sched_seq_free(&q[i]);
    }
    sched_destroy(s);
    kv_destroy(kv);
}

/* Recurrent-state slots (models with state): admission takes one (and waits for one as for
 * blocks), preemption and removal give it back, every running sequence holds its own. */
static void test_state_slots(void **state) {
    kv_pool_t *kv = kv_create(7, BS, false);
    assert_int_equal(kv_state_init(kv, 2), 0);
    sched_config_t cfg = config(8, 256, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t a, b, c;
    seq_make(&a, 40, 0, 1);
    seq_make(&b, 40, 100, 2);
    seq_make(&c, 3, 200, 3);
    sched_add(s, &a);
    sched_add(s, &b);
    sched_add(s, &c);
    sched_out_t out = run_step(s, kv, 9); /* two slots: c waits though blocks are left */
    assert_int_equal(out.n, 2);
    assert_true(a.has_state && b.has_state && !c.has_state);
    assert_int_not_equal(a.state_slot, b.state_slot);
    assert_int_equal(kv_state_available(kv), 0);
    assert_int_equal(c.state, SCHED_SEQ_WAITING);
    /* a grows into a 4th block: b, the newest, is preempted and gives its slot back */
    out = run_step(s, kv, 9);
    while (out.n_preempted == 0)
        out = run_step(s, kv, 9);
    assert_false(b.has_state);
    assert_int_equal(b.n_computed, 0);
    /* with b back in the queue, the freed slot goes to it first (it is ahead of c) */
    sched_remove(s, &a);
    assert_false(a.has_state);
    out = run_step(s, kv, 9);
    assert_true(b.has_state && c.has_state);
    assert_int_not_equal(b.state_slot, c.state_slot);
    sched_remove(s, &b);
    sched_remove(s, &c);
    assert_int_equal(kv_state_available(kv), 2);
    assert_int_equal(kv_used(kv), 0);
    check_pool(kv);
    sched_seq_free(&a);
    sched_seq_free(&b);
    sched_seq_free(&c);
    sched_destroy(s);
    kv_destroy(kv);
}

/* With state, choice 0 of an n > 1 request stops at the fork point (its last full prompt block)
 * until the fork; a child takes a slot of its own, shares the full blocks and computes the rest;
 * without a free slot it shares nothing and recomputes everything. */
static void test_fork_with_state(void **state) {
    kv_pool_t *kv = kv_create(32, BS, false);
    assert_int_equal(kv_state_init(kv, 2), 0);
    sched_config_t cfg = config(8, 256, true);
    sched_t *s = sched_create(kv, &cfg);
    sched_seq_t p, ch, ch2;
    seq_make(&p, 37, 0, 10);
    p.fork_pending = true;
    sched_add(s, &p);
    assert_int_equal(sched_fork_point(&p, BS), 32);
    sched_out_t out = run_step(s, kv, 3);
    assert_int_equal(out.n_new[0], 32); /* stops at the fork point despite the budget */
    out = run_step(s, kv, 3);           /* and stays there until the fork */
    assert_int_equal(out.n, 0);
    assert_int_equal(sched_seq_init(&ch, NULL, 0, 40), 0);
    ch.order = 11;
    assert_int_equal(sched_fork(s, &p, &ch), 0);
    p.fork_pending = false;
    assert_true(ch.has_state);
    assert_int_not_equal(ch.state_slot, p.state_slot);
    assert_int_equal(ch.n_computed, 32);
    assert_int_equal(ch.n_blocks, 2);
    assert_int_equal(ch.blocks[1], p.blocks[1]);
    assert_int_equal(sched_seq_init(&ch2, NULL, 0, 40), 0); /* no slot left: recomputes */
    ch2.order = 12;
    assert_int_equal(sched_fork(s, &p, &ch2), 0);
    assert_false(ch2.has_state);
    assert_int_equal(ch2.n_computed, 0);
    assert_int_equal(ch2.n_blocks, 0);
    out = run_step(s, kv, 4);
    assert_int_equal(out.n, 2); /* ch2 waits for a slot */
    assert_int_equal(out.n_new[0], 5);
    assert_int_equal(out.n_new[1], 5);
    sched_remove(s, &p);
    out = run_step(s, kv, 4);
    assert_true(ch2.has_state);
    assert_int_equal(ch2.n_computed, 37);
    sched_remove(s, &ch);
    sched_remove(s, &ch2);
    assert_int_equal(kv_used(kv), 0);
    assert_int_equal(kv_state_available(kv), 2);
    check_pool(kv);
    sched_seq_free(&p);
    sched_seq_free(&ch);
    sched_seq_free(&ch2);
    sched_destroy(s);
    kv_destroy(kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decodes_first_and_budget),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_unchunked_prefill_waits),
        cmocka_unit_test(test_max_num_seqs),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_self_preemption),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_policy_order),
        cmocka_unit_test(test_release_all),
        cmocka_unit_test(test_plan_survives_adds),
        cmocka_unit_test(test_state_slots),
        cmocka_unit_test(test_fork_with_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
