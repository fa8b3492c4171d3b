#include "backend.h"

#include <inttypes.h>
#include <string.h>

#define MAX_BACKENDS 8

/* Registration happens in main() before any other thread starts; lookups only read. */
static const backend_ops_t *table[MAX_BACKENDS] = {&cpu_backend_ops, &null_backend_ops};
static const char *names[MAX_BACKENDS + 1] = {"cpu", "null", NULL};
static int n_backends = 2;

int backend_register(const backend_ops_t *ops) {
    if (!ops || !ops->name) return -1;
    for (int i = 0; i < n_backends; i++) {
        if (table[i] == ops) return 0;
        if (strcmp(table[i]->name, ops->name) == 0) return -1;
    }
    if (n_backends == MAX_BACKENDS) return -1;
    table[n_backends] = ops;
    names[n_backends] = ops->name;
    n_backends++;
    names[n_backends] = NULL;
    return 0;
}

const backend_ops_t *backend_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < n_backends; i++)
        if (strcmp(table[i]->name, name) == 0) return table[i];
    return NULL;
}

const char *const *backend_names(void) {
    return names;
}

int backend_check_batch(const be_batch_t *b, int num_blocks, int block_size, err_t *err) {
    if (!b) return err_set(err, "batch: NULL");
    if (num_blocks < 0 || block_size < 1)
        return err_set(err, "batch: bad pool (%d blocks of %d tokens)", num_blocks, block_size);
    if (b->n_tokens < 0 || b->n_seqs < 0)
        return err_set(err, "batch: %d tokens, %d sequences", b->n_tokens, b->n_seqs);
    if (b->n_logits < 0 || b->n_logits > b->n_tokens)
        return err_set(err, "batch: n_logits %d not in [0, %d]", b->n_logits, b->n_tokens);
    if (b->n_tokens > 0 && (!b->token_ids || !b->positions || !b->slot_mapping))
        return err_set(err, "batch: %d tokens but token_ids/positions/slot_mapping missing",
                       b->n_tokens);
    if (!b->query_start) return err_set(err, "batch: query_start missing");
    if (b->n_seqs > 0 && (!b->context_len || !b->block_tables))
        return err_set(err, "batch: %d sequences but context_len/block_tables missing", b->n_seqs);
    if (b->n_logits > 0 && !b->logit_rows)
        return err_set(err, "batch: %d logit rows but logit_rows missing", b->n_logits);
    if (b->query_start[0] != 0)
        return err_set(err, "batch: query_start[0] = %d (must be 0)", b->query_start[0]);
    if (b->query_start[b->n_seqs] != b->n_tokens)
        return err_set(err, "batch: query_start[%d] = %d, but the batch has %d tokens", b->n_seqs,
                       b->query_start[b->n_seqs], b->n_tokens);

    int64_t pool_slots = (int64_t)num_blocks * block_size;
    for (int s = 0; s < b->n_seqs; s++) {
        int q0 = b->query_start[s], q1 = b->query_start[s + 1];
        if (q1 < q0 || q1 > b->n_tokens)
            return err_set(err, "batch: sequence %d: query_start %d..%d not increasing within %d",
                           s, q0, q1, b->n_tokens);
        int n_new = q1 - q0, ctx = b->context_len[s];
        if (ctx < n_new)
            return err_set(err, "batch: sequence %d: context_len %d < its %d new tokens", s, ctx,
                           n_new);
        int64_t n_blocks = ((int64_t)ctx + block_size - 1) / block_size;
        if (n_blocks > b->block_table_stride)
            return err_set(err,
                           "batch: sequence %d: context_len %d needs %" PRId64
                           " blocks, block table holds %d",
                           s, ctx, n_blocks, b->block_table_stride);
        const int32_t *row = b->block_tables + (int64_t)s * b->block_table_stride;
        for (int64_t i = 0; i < n_blocks; i++)
            if (row[i] < 0 || row[i] >= num_blocks)
                return err_set(
                    err, "batch: sequence %d: block_tables[%" PRId64 "] = %d out of range [0, %d)",
                    s, i, row[i], num_blocks);
        for (int t = q0; t < q1; t++) {
            int32_t pos = ctx - n_new + (t - q0);
            if (b->positions[t] != pos)
                return err_set(err, "batch: token %d (sequence %d): position %d, expected %d", t, s,
                               b->positions[t], pos);
            int64_t slot = b->slot_mapping[t];
            if (slot == -1) continue;
            if (slot < 0 || slot >= pool_slots)
                return err_set(err,
                               "batch: slot_mapping[%d] = %" PRId64 " out of range [0, %" PRId64
                               ") (%d blocks of %d)",
                               t, slot, pool_slots, num_blocks, block_size);
            int64_t expect = (int64_t)row[pos / block_size] * block_size + pos % block_size;
            if (slot != expect)
                return err_set(err,
                               "batch: slot_mapping[%d] = %" PRId64 ", but position %d of sequence "
                               "%d is slot %" PRId64 " by its block table",
                               t, slot, pos, s, expect);
        }
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens)
            return err_set(err, "batch: logit_rows[%d] = %d out of range [0, %d)", i,
                           b->logit_rows[i], b->n_tokens);
    return 0;
}

int backend_check_bounds(const be_batch_t *b, int num_blocks, int block_size, int vocab_size,
                         err_t *err) {
    if (b->n_tokens < 0 || b->n_seqs < 0 || b->n_logits < 0 || b->n_logits > b->n_tokens)
        return err_set(err, "batch of %d tokens, %d sequences, %d logit rows", b->n_tokens,
                       b->n_seqs, b->n_logits);
    if (b->n_tokens == 0) return 0;
    if (!b->token_ids || !b->positions || !b->slot_mapping || !b->query_start || !b->context_len ||
        !b->block_tables || (b->n_logits > 0 && !b->logit_rows))
        return err_set(err, "batch array missing");
    if (b->query_start[0] != 0 || b->query_start[b->n_seqs] != b->n_tokens)
        return err_set(err, "query_start does not span the %d tokens", b->n_tokens);
    for (int s = 0; s < b->n_seqs; s++) {
        int n_new = b->query_start[s + 1] - b->query_start[s], ctx = b->context_len[s];
        if (n_new < 0 || ctx < n_new ||
            ((int64_t)ctx + block_size - 1) / block_size > b->block_table_stride)
            return err_set(err, "sequence %d: %d new tokens, context %d", s, n_new, ctx);
        const int32_t *row = b->block_tables + (int64_t)s * b->block_table_stride;
        for (int i = 0; i * block_size < ctx; i++)
            if (row[i] < 0 || row[i] >= num_blocks)
                return err_set(err, "sequence %d: block %d out of range [0, %d)", s, row[i],
                               num_blocks);
    }
    int64_t slots = (int64_t)num_blocks * block_size;
    for (int t = 0; t < b->n_tokens; t++) {
        int32_t id = b->token_ids[t];
        if (id < 0 ? -(int64_t)id - 1 >= b->n_placeholder_rows : id >= vocab_size)
            return err_set(err, "token %d: id %d out of range [0, %d)%s", t, id, vocab_size,
                           b->n_placeholder_rows > 0 ? " and not a placeholder" : "");
        if (b->slot_mapping[t] < -1 || b->slot_mapping[t] >= slots)
            return err_set(err, "token %d: slot %" PRId64 " out of range [0, %" PRId64 ")", t,
                           b->slot_mapping[t], slots);
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens)
            return err_set(err, "logit row %d out of range [0, %d)", b->logit_rows[i], b->n_tokens);
    return 0;
}
