/*
 * cpu_mtp: the CPU backend's multi-token-prediction head (backend_ops_t.mtp_forward; Qwen3.5's
 * mtp.*, models.md 4.8, vLLM's Qwen3_5MultiTokenPredictor). Over a batch of T tokens, each at a
 * position t of its sequence:
 *
 *     e  = rmsnorm(embed[x_{t+1}], pre_fc_norm_embedding)          [T, H]  token_ids
 *     hh = rmsnorm(h_t, pre_fc_norm_hidden)                        [T, H]  hidden_rows
 *     h  = [e | hh] fc^T                                           [T, 2H] -> [T, H]
 *     h  = MTP layer (step % n_mtp): gated attention over its own K/V at the model's slots, and
 *          its MLP, exactly as a decoder layer (cpu_be_layer)
 *     out = rmsnorm(h, mtp.norm)                                   kept for the next step
 *     logits = out[logit_rows] lm_head^T
 *
 * h_t is the model's final-norm output at step 0 (forward keeps it when the pool was reserved
 * with the MTP layers' K/V) and the head's own `out` at later steps (vLLM feeds the head's
 * normed output back as the hidden of the next draft).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend_int.h"
#include "cpu_ops.h"
#include "cpu_weights.h"

int cpu_mtp_bind(cpu_backend_t *be, const model_weights_t *w, size_t *norm_floats, err_t *err) {
    if (be->n_mtp == 0) return 0;
    int64_t H = be->cfg->hidden_size;
    be->mtp_fc = weights_global(w, G_MTP_FC);
    static const struct {
        gslot_t slot;
        const char *name;
    } norms[] = {{G_MTP_EMBED_NORM, "mtp.pre_fc_norm_embedding"},
                 {G_MTP_HIDDEN_NORM, "mtp.pre_fc_norm_hidden"},
                 {G_MTP_NORM, "mtp.norm"}};
    if (cpu_check_tensor(be->mtp_fc, "mtp.fc", -1, H, 2 * H, err) < 0) return -1;
    for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++)
        if (cpu_check_tensor(weights_global(w, norms[i].slot), norms[i].name, -1, 1, H, err) < 0)
            return -1;
    for (int i = 0; i < 3; i++)
        be->mtp_norm_w[i] = weights_global(w, norms[i].slot);
    *norm_floats += 3 * (size_t)H;
    if (2 * H > be->kmax) be->kmax = (int)(2 * H);
    return 0;
}

void cpu_mtp_take_norms(cpu_backend_t *be, float **cursor) {
    if (be->n_mtp == 0) return;
    float offset = be->cfg->norm_offset;
    be->mtp_embed_norm = cpu_take_norm(be->mtp_norm_w[0], offset, cursor);
    be->mtp_hidden_norm = cpu_take_norm(be->mtp_norm_w[1], offset, cursor);
    be->mtp_norm = cpu_take_norm(be->mtp_norm_w[2], offset, cursor);
}

int cpu_mtp_forward(backend_t *base, const be_batch_t *b, const int32_t *hidden_rows, int step,
                    float *logits, int32_t *argmax, err_t *err) {
    cpu_backend_t *be = (cpu_backend_t *)base;
    const model_config_t *c = be->cfg;
    if (be->n_mtp == 0) return err_set(err, "cpu backend: the model has no MTP layers");
    if (!b) return 0; /* the probe: the head runs here */
    if (!be->mtp)
        return err_set(err, "cpu backend: mtp_forward on a KV pool reserved without the MTP "
                            "layers (backend_options_t.mtp)");
    if (step < 0) return err_set(err, "cpu backend: mtp_forward step %d", step);
    if (!b || !hidden_rows) return err_set(err, "cpu backend: mtp_forward: batch array missing");
    /* the hidden states come from the activations: a batch that would regrow them (more tokens
     * than any before) would lose them */
    int src_rows = step == 0 ? be->hid_rows : be->hid_mtp_rows;
    if (b->n_tokens > be->cap_tokens)
        return err_set(err, "cpu backend: mtp_forward over %d tokens, more than the last forward",
                       b->n_tokens);
    if (!logits && b->n_logits > 0) { /* drafts only: the logits in a scratch of the backend's */
        size_t need = (size_t)b->n_logits * (size_t)c->vocab_size;
        if (need > be->cap_mtp_logits) {
            free(be->mtp_logits);
            be->mtp_logits = malloc(need * sizeof(float));
            be->cap_mtp_logits = be->mtp_logits ? need : 0;
            if (!be->mtp_logits) return err_set(err, "cpu backend: out of memory for MTP logits");
        }
        logits = be->mtp_logits;
    }
    if (cpu_be_prepare(be, b, logits, err) < 0) return -1;
    int T = b->n_tokens, H = c->hidden_size;
    if (T == 0) return 0;
    for (int t = 0; t < T; t++)
        if (hidden_rows[t] < 0 || hidden_rows[t] >= src_rows)
            return err_set(err,
                           "cpu backend: mtp_forward: hidden row %d of token %d (the %s has "
                           "%d)",
                           hidden_rows[t], t, step == 0 ? "last forward" : "last MTP step",
                           src_rows);

    /* h = [rmsnorm(embed[x]) | rmsnorm(h_t)] fc^T: the inputs are read (cat) before the output
     * rows they may come from are written */
    const float *src = step == 0 ? be->hid : be->hid_mtp;
    for (int t = 0; t < T; t++) {
        float *row = be->cat + (int64_t)t * 2 * H;
        cpu_dequant_rows(be->embed, b->token_ids[t], 1, be->h + (int64_t)t * H);
        cpu_rmsnorm(be->h + (int64_t)t * H, be->mtp_embed_norm, H, c->rms_norm_eps, row);
        cpu_rmsnorm(src + (int64_t)hidden_rows[t] * H, be->mtp_hidden_norm, H, c->rms_norm_eps,
                    row + H);
    }
    cpu_be_gemm(be, be->cat, T, be->mtp_fc, be->h, H);
    cpu_be_rope(be, b);
    if (cpu_be_layer(be, b, c->n_layers + step % be->n_mtp, err) < 0) return -1;

    /* out = rmsnorm(h, mtp.norm); logits = out[logit_rows] lm_head^T */
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(be->h + (int64_t)t * H, be->mtp_norm, H, c->rms_norm_eps,
                    be->hid_mtp + (int64_t)t * H);
    be->hid_mtp_rows = T;
    for (int i = 0; i < b->n_logits; i++)
        memcpy(be->xn + (int64_t)i * H, be->hid_mtp + (int64_t)b->logit_rows[i] * H,
               (size_t)H * sizeof(float));
    if (cpu_be_logits(be, b->n_logits, logits, err) < 0) return -1;
    for (int i = 0; argmax && be->shard.rank == 0 && i < b->n_logits; i++)
        argmax[i] = sampler_argmax(logits + (size_t)i * (size_t)c->vocab_size, c->vocab_size);
    return 0;
}

int cpu_mtp_chain(backend_t *base, const be_batch_t *b, const int32_t *hidden_rows, int first_step,
                  int n_steps, const int32_t *last_pos, int32_t *drafts, err_t *err) {
    cpu_backend_t *be = (cpu_backend_t *)base;
    if (first_step < 1 || n_steps < 1 || !b || !hidden_rows || !last_pos || !drafts)
        return err_set(err, "cpu backend: mtp_chain of %d passes from step %d", n_steps,
                       first_step);
    const int n = b->n_seqs, bs = be->block_size;
    bool one_each = b->n_tokens == n && b->n_logits == n;
    for (int i = 0; one_each && i < n; i++)
        one_each = b->query_start[i] == i && b->logit_rows[i] == i;
    if (!one_each)
        return err_set(err,
                       "cpu backend: mtp_chain takes one token a sequence, each its logit "
                       "row (%d tokens, %d rows, %d sequences)",
                       b->n_tokens, b->n_logits, n);
    if (n == 0) return 0;
    /* the batch's arrays, advanced pass by pass */
    int32_t *ids = malloc((size_t)n * sizeof *ids), *pos = malloc((size_t)n * sizeof *pos);
    int32_t *ctx = malloc((size_t)n * sizeof *ctx), *rows = malloc((size_t)n * sizeof *rows);
    int64_t *slots = malloc((size_t)n * sizeof *slots);
    int rc = ids && pos && ctx && rows && slots ? 0 : err_set(err, "out of memory");
    if (rc == 0) {
        memcpy(ids, b->token_ids, (size_t)n * sizeof *ids);
        memcpy(pos, b->positions, (size_t)n * sizeof *pos);
        memcpy(ctx, b->context_len, (size_t)n * sizeof *ctx);
        memcpy(rows, hidden_rows, (size_t)n * sizeof *rows);
        memcpy(slots, b->slot_mapping, (size_t)n * sizeof *slots);
    }
    be_batch_t pass = *b;
    pass.token_ids = ids;
    pass.positions = pos;
    pass.context_len = ctx;
    pass.slot_mapping = slots;
    for (int j = 0; rc == 0 && j < n_steps; j++) {
        int32_t *d = drafts + (size_t)j * (size_t)n;
        rc = cpu_mtp_forward(base, &pass, rows, first_step + j, NULL, d, err);
        for (int s = 0; rc == 0 && s < n; s++) { /* kernels/gated.cu's mtp_advance_kernel */
            ids[s] = d[s];
            rows[s] = s;
            int p = pos[s] + 1;
            if (p <= last_pos[s]) {
                pos[s] = p;
                ctx[s] = p + 1;
                slots[s] =
                    (int64_t)b->block_tables[(int64_t)s * b->block_table_stride + p / bs] * bs +
                    p % bs;
            } else {
                slots[s] = -1;
            }
        }
    }
    free(ids);
    free(pos);
    free(ctx);
    free(rows);
    free(slots);
    return rc;
}
