#include "oneshot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rng.h"

oneshot_opts_t oneshot_defaults(void) {
    return (oneshot_opts_t){
        .max_new_tokens = 16,
        .temperature = 0.0f,
        .seed = 0,
        .chunk_tokens = 2048,
        .block_size = 16,
    };
}

void oneshot_result_free(oneshot_result_t *r) {
    free(r->ids);
    r->ids = NULL;
    r->n_ids = 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int oneshot_argmax(const float *logits, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* Samples from softmax(logits / temperature) with the step's own random number. */
static int sample(const float *logits, int n, float temperature, uint64_t seed, int step) {
    int best = oneshot_argmax(logits, n);
    if (temperature <= 0.0f) return best;
    double total = 0.0;
    for (int i = 0; i < n; i++) total += exp((double)(logits[i] - logits[best]) / temperature);
    double u = rng_uniform(seed, 0, (uint64_t)step) * total;
    for (int i = 0; i < n; i++) {
        u -= exp((double)(logits[i] - logits[best]) / temperature);
        if (u < 0) return i;
    }
    return best;
}

int oneshot_generate(backend_t *be, const model_config_t *cfg, const int32_t *prompt, int n_prompt,
                     const oneshot_opts_t *o, oneshot_result_t *r, err_t *err) {
    memset(r, 0, sizeof *r);
    r->n_prompt = n_prompt;
    if (n_prompt <= 0) return err_set(err, "the prompt is empty");
    if (o->chunk_tokens <= 0 || o->block_size <= 0 || o->max_new_tokens < 0)
        return err_set(err, "invalid generation options");
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= cfg->vocab_size)
            return err_set(err, "prompt token %d (id %d) is outside the vocabulary (0..%d)", i,
                           prompt[i], cfg->vocab_size - 1);
    int total = n_prompt + o->max_new_tokens;
    if (total > cfg->max_position_embeddings)
        return err_set(err, "prompt (%d) + max new tokens (%d) exceeds the model's context of %d",
                       n_prompt, o->max_new_tokens, cfg->max_position_embeddings);

    int n_blocks = (total + o->block_size - 1) / o->block_size;
    if (backend_kv_reserve(be, n_blocks, o->block_size, err) < 0) return -1;

    int chunk = o->chunk_tokens < n_prompt ? o->chunk_tokens : n_prompt;
    int vocab = cfg->vocab_size;
    int32_t *ids = malloc((size_t)(o->max_new_tokens + 1) * sizeof *ids);
    int32_t *tokens = malloc((size_t)chunk * sizeof *tokens);
    int32_t *positions = malloc((size_t)chunk * sizeof *positions);
    int64_t *slots = malloc((size_t)chunk * sizeof *slots);
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks);
    float *logits = malloc((size_t)vocab * sizeof *logits);
    int rc = -1;
    if (!ids || !tokens || !positions || !slots || !blocks || !logits) {
        err_set(err, "out of memory");
        goto out;
    }
    for (int b = 0; b < n_blocks; b++) blocks[b] = b;

    double t0 = now_ms();
    int done = 0; /* tokens already in the KV cache */
    int next = -1;
    while (r->n_ids < o->max_new_tokens) {
        int n_new;
        if (done < n_prompt) {
            n_new = n_prompt - done < chunk ? n_prompt - done : chunk;
            memcpy(tokens, prompt + done, (size_t)n_new * sizeof *tokens);
        } else {
            n_new = 1;
            tokens[0] = next;
        }
        for (int i = 0; i < n_new; i++) {
            positions[i] = done + i;
            slots[i] = done + i; /* contiguous blocks: slot = position */
        }
        int32_t query_start[2] = {0, n_new};
        int32_t context_len = done + n_new;
        bool wants_logits = context_len >= n_prompt;
        int32_t logit_row = n_new - 1;
        be_batch_t batch = {
            .n_tokens = n_new,
            .n_seqs = 1,
            .token_ids = tokens,
            .positions = positions,
            .slot_mapping = slots,
            .query_start = query_start,
            .context_len = &context_len,
            .block_tables = blocks,
            .block_table_stride = n_blocks,
            .n_logits = wants_logits ? 1 : 0,
            .logit_rows = &logit_row,
        };
        if (backend_forward(be, &batch, logits, err) < 0) goto out;
        done += n_new;
        if (!wants_logits) continue;
        next = sample(logits, vocab, o->temperature, o->seed, r->n_ids);
        ids[r->n_ids++] = next;
        if (r->n_ids == 1) {
            double t1 = now_ms();
            r->prefill_ms = t1 - t0;
            t0 = t1;
        }
        if (o->on_token && o->on_token(o->ctx, next)) {
            r->stopped = true;
            break;
        }
        bool stop = false;
        for (int s = 0; s < o->n_stop_ids; s++) stop |= next == o->stop_ids[s];
        if (stop) {
            r->stopped = true;
            break;
        }
    }
    if (r->n_ids > 0) r->decode_ms = now_ms() - t0;
    r->ids = ids;
    ids = NULL;
    rc = 0;
out:
    free(ids);
    free(tokens);
    free(positions);
    free(slots);
    free(blocks);
    free(logits);
    return rc;
}
