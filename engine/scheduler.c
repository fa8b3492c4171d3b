/* scheduler: running array in admission order, waiting queue as a binary heap. */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "flags.h"
#include "grow.h"

struct sched {
    kv_pool_t *kv;
    sched_config_t cfg;
    /* Admission order; preemption takes from the end. Removed sequences leave a NULL hole that
     * the next sched_schedule compacts, so removal is O(1) and the order is kept. */
    sched_seq_t **running;
    int n_running, cap_running, n_holes;
    sched_seq_t **heap; /* waiting, heap[0] first to admit */
    int n_waiting, cap_waiting;
    /* the plan's arrays */
    sched_seq_t **out_seqs;
    int *out_new;
    int cap_out;
    uint64_t preemptions;
};

// ---------------------------------------------------------------------------------------------
// Sequences

int sched_seq_init(sched_seq_t *seq, const int32_t *prompt, int n_prompt, int extra) {
    memset(seq, 0, sizeof *seq);
    if (n_prompt < 0 || extra < 0) return -1;
    if (GROW(seq->tokens, seq->cap_tokens, n_prompt + extra > 0 ? n_prompt + extra : 1) < 0)
        return -1;
    if (n_prompt > 0) memcpy(seq->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    seq->n_tokens = seq->n_prompt = n_prompt;
    seq->state = SCHED_SEQ_IDLE;
    seq->index = -1;
    return 0;
}

void sched_seq_free(sched_seq_t *seq) {
    free(seq->tokens);
    free(seq->blocks);
    free(seq->hashes);
    seq->tokens = NULL;
    seq->blocks = NULL;
    seq->hashes = NULL;
    seq->cap_tokens = seq->cap_blocks = seq->cap_hashes = 0;
    seq->n_tokens = seq->n_blocks = seq->n_hashes = 0;
}

int sched_seq_reserve(sched_seq_t *seq, int n) {
    return GROW(seq->tokens, seq->cap_tokens, n);
}

/* Releases the blocks last to first, so that a prompt's tail blocks are evicted before its
 * head (which other prompts are more likely to share), and the state slot. */
static void release_blocks(kv_pool_t *kv, sched_seq_t *seq) {
    for (int i = seq->n_blocks - 1; i >= 0; i--)
        kv_release(kv, seq->blocks[i]);
    if (seq->has_state) kv_state_free(kv, seq->state_slot);
    seq->has_state = false;
    seq->n_blocks = 0;
    seq->n_computed = 0;
    seq->n_committed = 0;
    seq->blocks_gen++;
}

/* Extends the hash chain to the first n full blocks. Each link hashes one block seeded by the
 * previous link, so that extending costs one block, not the whole prefix. */
static int ensure_hashes(kv_pool_t *kv, sched_seq_t *seq, int n) {
    if (n <= seq->n_hashes) return 0;
    if (GROW(seq->hashes, seq->cap_hashes, n) < 0) return -1;
    int bs = kv_block_size(kv);
    for (int k = seq->n_hashes; k < n; k++) {
        uint64_t parent = k > 0 ? seq->hashes[k - 1] : 0;
        kv_hash_blocks(kv, seq->tokens + (size_t)k * bs, bs, parent, &seq->hashes[k], 1);
    }
    seq->n_hashes = n;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Waiting heap

static bool before(const sched_t *s, const sched_seq_t *a, const sched_seq_t *b) {
    if (s->cfg.policy == SCHED_PRIORITY) {
        if (a->priority != b->priority) return a->priority < b->priority;
    } else if (a->front != b->front) {
        return a->front;
    }
    if (a->arrival != b->arrival) return a->arrival < b->arrival;
    return a->order < b->order;
}

static void heap_set(sched_t *s, int i, sched_seq_t *seq) {
    s->heap[i] = seq;
    seq->index = i;
}

static void sift_up(sched_t *s, int i) {
    sched_seq_t *seq = s->heap[i];
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!before(s, seq, s->heap[p])) break;
        heap_set(s, i, s->heap[p]);
        i = p;
    }
    heap_set(s, i, seq);
}

static void sift_down(sched_t *s, int i) {
    sched_seq_t *seq = s->heap[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= s->n_waiting) break;
        if (c + 1 < s->n_waiting && before(s, s->heap[c + 1], s->heap[c])) c++;
        if (!before(s, s->heap[c], seq)) break;
        heap_set(s, i, s->heap[c]);
        i = c;
    }
    heap_set(s, i, seq);
}

/* The heap's capacity is reserved beforehand (sched_add), so pushing cannot fail. */
static void heap_push(sched_t *s, sched_seq_t *seq) {
    seq->state = SCHED_SEQ_WAITING;
    heap_set(s, s->n_waiting++, seq);
    sift_up(s, s->n_waiting - 1);
}

static void heap_remove(sched_t *s, sched_seq_t *seq) {
    int i = seq->index;
    sched_seq_t *last = s->heap[--s->n_waiting];
    if (i < s->n_waiting) {
        heap_set(s, i, last);
        sift_down(s, i);
        sift_up(s, last->index);
    }
    seq->state = SCHED_SEQ_IDLE;
    seq->index = -1;
}

static void heapify(sched_t *s) {
    for (int i = s->n_waiting / 2 - 1; i >= 0; i--)
        sift_down(s, i);
}

// ---------------------------------------------------------------------------------------------
// Scheduler

sched_t *sched_create(kv_pool_t *kv, const sched_config_t *cfg) {
    sched_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->kv = kv;
    s->cfg = *cfg;
    return s;
}

void sched_destroy(sched_t *s) {
    if (!s) return;
    free(s->running);
    free(s->heap);
    free(s->out_seqs);
    free(s->out_new);
    free(s);
}

void sched_set_config(sched_t *s, const sched_config_t *cfg) {
    bool reorder = cfg->policy != s->cfg.policy;
    s->cfg = *cfg;
    if (reorder) heapify(s);
}

int sched_num_running(const sched_t *s) {
    return s->n_running - s->n_holes;
}

sched_seq_t *const *sched_running(const sched_t *s, int *n) {
    *n = s->n_running;
    return s->running;
}

int sched_num_waiting(const sched_t *s) {
    return s->n_waiting;
}

uint64_t sched_preemptions(const sched_t *s) {
    return s->preemptions;
}

/* Every sequence is in the heap or in the running array at most once; reserving room for all
 * of them in both keeps preemption (running -> waiting) free of allocation. The plan's arrays
 * grow only in sched_schedule: a plan stays valid while sequences are added (forks). */
static int reserve(sched_t *s, int extra) {
    int total = s->n_running + s->n_waiting + extra;
    if (GROW(s->heap, s->cap_waiting, total) < 0 || GROW(s->running, s->cap_running, total) < 0)
        return -1;
    return 0;
}

static int reserve_plan(sched_t *s) {
    int total = s->n_running + s->n_waiting;
    if (total <= s->cap_out) return 0;
    int cap = s->cap_running;
    sched_seq_t **seqs = realloc(s->out_seqs, (size_t)cap * sizeof *seqs);
    if (!seqs) return -1;
    s->out_seqs = seqs;
    int *n_new = realloc(s->out_new, (size_t)cap * sizeof *n_new);
    if (!n_new) return -1;
    s->out_new = n_new;
    s->cap_out = cap;
    return 0;
}

int sched_add(sched_t *s, sched_seq_t *seq) {
    if (seq->state != SCHED_SEQ_IDLE) return -1;
    if (reserve(s, 1) < 0) return -1;
    heap_push(s, seq);
    return 0;
}

int sched_fork(sched_t *s, const sched_seq_t *parent, sched_seq_t *child) {
    int bs = kv_block_size(s->kv);
    int shared = sched_fork_point(parent, bs) / bs;
    bool state = kv_state_slots(s->kv) > 0;
    /* a parent preempted since it computed its prompt (asynchronous scheduling emits its first
     * token after planning the next step, which may preempt it) shares what it still holds */
    bool recomputing = parent->n_preemptions > 0 && parent->n_computed < parent->n_prompt;
    if (child->state != SCHED_SEQ_IDLE ||
        (state ? parent->n_computed != shared * bs || !parent->has_state
               : parent->n_computed < parent->n_prompt && !recomputing))
        return -1;
    if (!state && parent->n_computed / bs < shared) shared = parent->n_computed / bs;
    if (state && shared > 0 && kv_state_available(s->kv) == 0) shared = 0; /* recomputes */
    if (GROW(child->tokens, child->cap_tokens, parent->n_prompt) < 0 ||
        GROW(child->blocks, child->cap_blocks, shared > 0 ? shared : 1) < 0)
        return -1;
    int n_hashes = parent->n_hashes < shared ? parent->n_hashes : shared;
    if (n_hashes > 0 && GROW(child->hashes, child->cap_hashes, n_hashes) < 0) return -1;
    if (reserve(s, 1) < 0) return -1;
    memcpy(child->tokens, parent->tokens, (size_t)parent->n_prompt * sizeof *child->tokens);
    child->n_tokens = child->n_prompt = parent->n_prompt;
    for (int i = 0; i < shared; i++) {
        kv_ref(s->kv, parent->blocks[i]);
        child->blocks[i] = parent->blocks[i];
    }
    child->n_blocks = shared;
    child->n_computed = shared * bs;
    if (state && shared > 0) {
        child->state_slot = kv_state_alloc(s->kv);
        child->has_state = true;
    }
    if (n_hashes > 0) memcpy(child->hashes, parent->hashes, (size_t)n_hashes * sizeof(uint64_t));
    child->n_hashes = n_hashes;
    child->n_committed = parent->n_committed < shared ? parent->n_committed : shared;
    heap_push(s, child);
    return 0;
}

void sched_remove(sched_t *s, sched_seq_t *seq) {
    if (seq->state == SCHED_SEQ_WAITING) {
        heap_remove(s, seq);
    } else if (seq->state == SCHED_SEQ_RUNNING) {
        s->running[seq->index] = NULL;
        s->n_holes++;
        seq->state = SCHED_SEQ_IDLE;
        seq->index = -1;
    }
    release_blocks(s->kv, seq);
}

static void compact_running(sched_t *s) {
    if (s->n_holes == 0) return;
    int j = 0;
    for (int i = 0; i < s->n_running; i++) {
        sched_seq_t *seq = s->running[i];
        if (!seq) continue;
        seq->index = j;
        s->running[j++] = seq;
    }
    s->n_running = j;
    s->n_holes = 0;
}

/* The newest running sequence goes back to the front of the waiting queue without its blocks. */
static sched_seq_t *preempt_last(sched_t *s) {
    sched_seq_t *victim = s->running[--s->n_running];
    release_blocks(s->kv, victim);
    victim->front = true;
    victim->n_preemptions++;
    s->preemptions++;
    heap_push(s, victim);
    return victim;
}

int sched_release_all(sched_t *s) {
    compact_running(s);
    int n = 0;
    while (s->n_running > 0) {
        preempt_last(s);
        n++;
    }
    for (int i = 0; i < s->n_waiting; i++) {
        release_blocks(s->kv, s->heap[i]);
        s->heap[i]->n_hashes = 0;
    }
    return n;
}

void sched_set_pool(sched_t *s, kv_pool_t *kv) {
    s->kv = kv;
}

/* Blocks the sequence needs beyond those it holds to cover `upto` tokens, after making room in
 * its block array. -1 when the array cannot grow. */
static int blocks_needed(sched_seq_t *seq, int upto, int bs) {
    int beyond = upto - seq->n_blocks * bs; /* tokens past the blocks it holds */
    if (beyond <= 0) return 0;
    int need = beyond <= bs ? 1 : (beyond + bs - 1) / bs; /* a decode never divides */
    if (GROW(seq->blocks, seq->cap_blocks, seq->n_blocks + need) < 0) return -1;
    return need;
}

static void take_blocks(kv_pool_t *kv, sched_seq_t *seq, int n) {
    for (int i = 0; i < n; i++)
        seq->blocks[seq->n_blocks++] = kv_alloc(kv);
}

int sched_seq_cover(sched_t *s, sched_seq_t *seq, int upto, int keep_free) {
    int bs = kv_block_size(s->kv), need = blocks_needed(seq, upto, bs);
    if (need < 0) return -1;
    int spare = kv_available(s->kv) - keep_free;
    take_blocks(s->kv, seq, need < spare ? need : spare > 0 ? spare : 0);
    return seq->n_blocks * bs;
}

/* Without chunked prefill a computation that does not fit the rest of the budget waits; one
 * larger than the whole budget runs alone in a step of its own, or it would never run. A
 * sequence waiting to fork stops at the fork point. */
static int clamp_new(const sched_t *s, const sched_seq_t *seq, int budget, int n_scheduled) {
    int n_new = seq->n_tokens - seq->n_computed;
    if (seq->fork_pending) {
        int to_fork = sched_fork_point(seq, kv_block_size(s->kv)) - seq->n_computed;
        if (to_fork < n_new) n_new = to_fork > 0 ? to_fork : 0;
    }
    if (s->cfg.chunked_prefill) return n_new < budget ? n_new : budget;
    if (n_new <= budget) return n_new;
    return n_scheduled == 0 && budget == s->cfg.max_num_batched_tokens ? n_new : 0;
}

static inline void plan(sched_out_t *out, sched_seq_t *seq, int n_new) {
    out->seqs[out->n] = seq;
    out->n_new[out->n] = n_new;
    out->n++;
    out->n_tokens += n_new;
    if (seq->n_blocks > out->max_blocks) out->max_blocks = seq->n_blocks;
}

int sched_schedule(sched_t *s, sched_out_t *out, sched_seq_t **failed) {
    compact_running(s);
    *failed = NULL;
    if (reserve_plan(s) < 0) {
        *out = (sched_out_t){0};
        *failed = s->n_waiting > 0 ? s->heap[0] : s->running[s->n_running - 1];
        return -1;
    }
    /* Planned in a local copy, so that its counters stay in registers (the plan's arrays
     * could otherwise alias them); written back at each return. */
    sched_out_t o = {.seqs = s->out_seqs, .n_new = s->out_new};
    int bs = kv_block_size(s->kv);
    int budget = s->cfg.max_num_batched_tokens;

    int avail = kv_available(s->kv);
    for (int i = 0; i < s->n_running && budget > 0; i++) {
        /* Decodes in blocks they hold, the common case, run without the general path (nor
         * reloading what the plan's stores could alias). */
        sched_seq_t *const *running = s->running;
        int n_running = s->n_running, fast = 0;
        for (; i < n_running && fast < budget; i++, fast++) {
            sched_seq_t *seq = running[i];
            if (seq->n_tokens - seq->n_computed != 1 || seq->n_computed >= seq->n_blocks * bs)
                break;
            plan(&o, seq, 1);
        }
        budget -= fast;
        if (i == n_running || budget == 0) break;
        sched_seq_t *seq = running[i];
        int n_new = clamp_new(s, seq, budget, o.n);
        if (n_new == 0) continue;
        int need = blocks_needed(seq, seq->n_computed + n_new, bs);
        if (need < 0) {
            *failed = seq;
            *out = o;
            return -1;
        }
        bool self = false;
        while (avail < need && !self) {
            self = preempt_last(s) == seq;
            o.n_preempted++;
            avail = kv_available(s->kv);
        }
        if (self) break;
        take_blocks(s->kv, seq, need);
        avail -= need;
        plan(&o, seq, n_new);
        budget -= n_new;
    }
    if (o.n_preempted > 0) {
        *out = o;
        return 0;
    }

    bool caching = kv_prefix_caching(s->kv);
    while (s->n_waiting > 0 && sched_num_running(s) < s->cfg.max_num_seqs && budget > 0) {
        sched_seq_t *seq = s->heap[0];
        int hit = 0;
        int n_full = (seq->n_tokens - 1) / bs; /* at least one token left to compute */
        if (seq->n_blocks == 0 && caching && n_full > 0) {
            if (ensure_hashes(s->kv, seq, n_full) < 0 ||
                GROW(seq->blocks, seq->cap_blocks, n_full) < 0) {
                *failed = seq;
                *out = o;
                return -1;
            }
            hit = kv_lookup(s->kv, seq->hashes, n_full, seq->blocks);
            seq->n_blocks = hit;
            seq->n_computed = hit * bs;
            seq->n_committed = hit;
        }
        int n_new = clamp_new(s, seq, budget, o.n);
        int need = n_new > 0 ? blocks_needed(seq, seq->n_computed + n_new, bs) : 0;
        if (need < 0) {
            *failed = seq;
            *out = o;
            return -1;
        }
        bool needs_slot = kv_state_slots(s->kv) > 0 && !seq->has_state;
        if (n_new == 0 || kv_available(s->kv) < need ||
            (needs_slot && kv_state_available(s->kv) == 0)) {
            if (hit > 0) release_blocks(s->kv, seq);
            break;
        }
        heap_remove(s, seq);
        take_blocks(s->kv, seq, need);
        if (needs_slot) {
            seq->state_slot = kv_state_alloc(s->kv);
            seq->has_state = true;
        }
        if (!seq->admitted) {
            seq->admitted = true;
            seq->cached_tokens = hit * bs;
            seq->prefix_queried = caching ? n_full * bs : 0;
        }
        seq->front = false;
        seq->state = SCHED_SEQ_RUNNING;
        seq->index = s->n_running;
        s->running[s->n_running++] = seq;
        plan(&o, seq, n_new);
        o.n_admitted++;
        budget -= n_new;
    }
    *out = o;
    return 0;
}

int sched_advance(sched_t *s, const sched_out_t *out) {
    bool caching = kv_prefix_caching(s->kv);
    int bs = kv_block_size(s->kv), n = out->n;
    sched_seq_t *const *seqs = out->seqs;
    const int *n_new = out->n_new;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        sched_seq_t *seq = seqs[i];
        if (seq->state != SCHED_SEQ_RUNNING) continue; /* ended since the plan (core_async.c) */
        seq->n_computed += n_new[i];
        if (!caching || seq->n_computed < (seq->n_committed + 1) * bs) continue;
        int full = seq->n_computed / bs;
        if (ensure_hashes(s->kv, seq, full) < 0) {
            rc = -1;
            continue;
        }
        for (int k = seq->n_committed; k < full; k++)
            kv_commit(s->kv, seq->blocks[k], seq->hashes[k]);
        seq->n_committed = full;
    }
    return rc;
}
