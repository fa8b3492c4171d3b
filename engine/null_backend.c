/*
 * The null backend: the engine's scheduling, bookkeeping and streaming without any model math.
 * Its "model" maps (last token, position) to the next token with a fixed hash, and samples on
 * the "device" (the sample op), so a step costs almost nothing and outputs are deterministic and
 * independent of batching. Used by engine tests and the engine-overhead benchmark.
 */
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "rng.h"

typedef struct null_backend {
    backend_t base;
    int vocab_size;
    int num_blocks, block_size;
    int32_t *last_token; /* [cap] token of each logit row of the last forward */
    int32_t *last_pos;   /* [cap] its position */
    int cap;
} null_backend_t;

static int null_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                       err_t *err) {
    null_backend_t *be = calloc(1, sizeof *be);
    if (!be) return err_set(err, "out of memory");
    be->base.ops = &null_backend_ops;
    be->vocab_size = weights_config(w)->vocab_size;
    *out = &be->base;
    return 0;
}

static void null_destroy(backend_t *base) {
    null_backend_t *be = (null_backend_t *)base;
    if (!be) return;
    free(be->last_token);
    free(be->last_pos);
    free(be);
}

static size_t null_kv_block_bytes(const backend_t *base, int block_size) {
    return (size_t)block_size * 64; /* nominal: the pool is sized by block count in tests */
}

static int null_kv_reserve(backend_t *base, int num_blocks, int block_size, err_t *err) {
    null_backend_t *be = (null_backend_t *)base;
    be->num_blocks = num_blocks;
    be->block_size = block_size;
    return 0;
}

static int null_forward(backend_t *base, const be_batch_t *b, float *logits, err_t *err) {
    null_backend_t *be = (null_backend_t *)base;
#ifndef NDEBUG
    if (backend_check_batch(b, be->num_blocks, be->block_size, err) < 0) return -1;
#endif
    if (b->n_logits > be->cap) {
        int cap = b->n_logits * 2;
        int32_t *t = realloc(be->last_token, (size_t)cap * sizeof *t);
        if (t) be->last_token = t;
        int32_t *p = realloc(be->last_pos, (size_t)cap * sizeof *p);
        if (p) be->last_pos = p;
        if (!t || !p) return err_set(err, "out of memory");
        be->cap = cap;
    }
    for (int i = 0; i < b->n_logits; i++) {
        be->last_token[i] = b->token_ids[b->logit_rows[i]];
        be->last_pos[i] = b->positions[b->logit_rows[i]];
    }
    if (logits) /* host sampling: one-hot logits on the token sample() would pick greedily */
        for (int i = 0; i < b->n_logits; i++) {
            float *row = logits + (size_t)i * be->vocab_size;
            for (int v = 0; v < be->vocab_size; v++)
                row[v] = 0.0f;
            row[rng_mix64((uint64_t)be->last_token[i] << 32 | (uint32_t)be->last_pos[i]) %
                (uint64_t)be->vocab_size] = 10.0f;
        }
    return 0;
}

static int null_sample(backend_t *base, const sampler_row_t *rows, int n_rows,
                       sampler_result_t *out, err_t *err) {
    null_backend_t *be = (null_backend_t *)base;
    for (int i = 0; i < n_rows; i++) {
        uint64_t key = (uint64_t)be->last_token[i] << 32 | (uint32_t)be->last_pos[i];
        const sampling_params_t *p = rows[i].params;
        if (p->temperature > 1e-5f)
            key ^= rng_bits(rows[i].seed, (uint64_t)rows[i].choice, (uint64_t)rows[i].n_output);
        out[i] = (sampler_result_t){.token = (int32_t)(rng_mix64(key) % (uint64_t)be->vocab_size),
                                    .logprob = 0.0f, /* a one-hot "model": log 1 */
                                    .n_top = 0};
    }
    return 0;
}

static void null_describe(const backend_t *base, char *buf, size_t size) {
    snprintf(buf, size, "null (no model computation)");
}

const backend_ops_t null_backend_ops = {
    .name = "null",
    .create = null_create,
    .destroy = null_destroy,
    .kv_block_bytes = null_kv_block_bytes,
    .kv_reserve = null_kv_reserve,
    .forward = null_forward,
    .sample = null_sample,
    .describe = null_describe,
};
