/*
 * cpu_gdn: the Gated DeltaNet layer over a varlen batch (cpu_gdn.h): four GEMMs, the conv over
 * channel ranges, the L2 norms over (token, key head) pairs, then one work item per (sequence,
 * value head) running the gates, the delta rule and the gated norm, then out_proj. Every item's
 * result is computed by one thread in a fixed order, so results do not depend on the thread
 * count or on which sequences share the batch.
 */
#include "cpu_gdn.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gdn_ops.h"
#include "dtype.h"

#define PARALLEL_MIN_ITEMS 64 /* conv channels or heads below which the caller works alone */

struct cpu_gdn {
    int Hk, Hv, dk, dv, K, C, vd, kd; /* heads, head dims, conv kernel and channels, dims */
    int n_linear;
    float eps;
    int n_threads;
    size_t layer_floats, slot_floats; /* one layer's window + S, one slot */
    float *states;                    /* [n_slots, slot_floats] */
    int n_slots;
    bool ssm_bf16;
    int cap;                        /* tokens the buffers hold */
    float *qkv, *y, *z, *a, *b, *o; /* [cap, C], [cap, C], [cap, vd], [cap, Hv] x 2, [cap, vd] */
    float **scratch;                /* [n_threads][cpu_gdn_scratch] */
};

void cpu_gdn_destroy(cpu_gdn_t *g) {
    if (!g) return;
    free(g->states);
    float **bufs[] = {&g->qkv, &g->y, &g->z, &g->a, &g->b, &g->o};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(*bufs[i]);
    for (int i = 0; g->scratch && i < g->n_threads; i++)
        free(g->scratch[i]);
    free(g->scratch);
    free(g);
}

int cpu_gdn_create(const model_config_t *c, int n_threads, cpu_gdn_t **out, err_t *err) {
    *out = NULL;
    if (c->lin_k_heads < 1 || c->lin_v_heads % c->lin_k_heads != 0 || c->lin_k_dim < 1 ||
        c->lin_v_dim < 1 || c->lin_conv_kernel < 1)
        return err_set(err, "cpu backend: unusable Gated DeltaNet config (%s)", c->source);
    cpu_gdn_t *g = calloc(1, sizeof *g);
    if (!g) return err_set(err, "cpu backend: out of memory");
    g->Hk = c->lin_k_heads;
    g->Hv = c->lin_v_heads;
    g->dk = c->lin_k_dim;
    g->dv = c->lin_v_dim;
    g->K = c->lin_conv_kernel;
    g->C = model_lin_conv_dim(c);
    g->vd = model_lin_v_dim(c);
    g->kd = model_lin_k_dim(c);
    g->n_linear = model_count_attn(c, ATTN_LINEAR);
    g->eps = c->rms_norm_eps;
    g->n_threads = n_threads;
    g->layer_floats = (size_t)(g->K - 1) * (size_t)g->C + (size_t)g->Hv * g->dk * g->dv;
    g->slot_floats = g->layer_floats * (size_t)g->n_linear;
    g->scratch = calloc((size_t)n_threads, sizeof *g->scratch);
    for (int i = 0; g->scratch && i < n_threads; i++)
        if (!(g->scratch[i] = malloc(cpu_gdn_scratch(g->dk, g->dv) * sizeof(float)))) break;
    if (!g->scratch || !g->scratch[n_threads - 1]) {
        cpu_gdn_destroy(g);
        return err_set(err, "cpu backend: out of memory");
    }
    *out = g;
    return 0;
}

size_t cpu_gdn_slot_bytes(const cpu_gdn_t *g) {
    return g->slot_floats * sizeof(float);
}

int cpu_gdn_reserve(cpu_gdn_t *g, int n_slots, bool ssm_bf16, err_t *err) {
    free(g->states);
    g->states = NULL;
    g->n_slots = 0;
    if (n_slots < 0) return err_set(err, "cpu backend: %d state slots", n_slots);
    if (n_slots > 0 && !(g->states = calloc((size_t)n_slots * g->slot_floats, sizeof(float))))
        return err_set(err, "cpu backend: out of memory for %d state slots (%zu MiB)", n_slots,
                       ((size_t)n_slots * g->slot_floats * sizeof(float)) >> 20);
    g->n_slots = n_slots;
    g->ssm_bf16 = ssm_bf16;
    return 0;
}

int cpu_gdn_copy(cpu_gdn_t *g, int src, int dst, err_t *err) {
    if (src < 0 || src >= g->n_slots || dst < 0 || dst >= g->n_slots)
        return err_set(err, "cpu backend: state copy %d -> %d outside %d slots", src, dst,
                       g->n_slots);
    if (src != dst)
        memcpy(g->states + (size_t)dst * g->slot_floats, g->states + (size_t)src * g->slot_floats,
               g->slot_floats * sizeof(float));
    return 0;
}

int cpu_gdn_check(const cpu_gdn_t *g, const be_batch_t *b, err_t *err) {
    if (b->n_seqs > 0 && !b->state_slots)
        return err_set(err, "cpu backend: a model with recurrent state needs state_slots");
    for (int s = 0; s < b->n_seqs; s++)
        if (b->state_slots[s] < 0 || b->state_slots[s] >= g->n_slots)
            return err_set(err, "cpu backend: sequence %d has state slot %d (%d slots)", s,
                           b->state_slots[s], g->n_slots);
    return 0;
}

static int grow(cpu_gdn_t *g, int T, err_t *err) {
    if (T <= g->cap) return 0;
    size_t cap = (size_t)(T + 63) / 64 * 64;
    size_t widths[] = {(size_t)g->C,  (size_t)g->C,  (size_t)g->vd,
                       (size_t)g->Hv, (size_t)g->Hv, (size_t)g->vd};
    float **bufs[] = {&g->qkv, &g->y, &g->z, &g->a, &g->b, &g->o};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        free(*bufs[i]);
        *bufs[i] = malloc(cap * widths[i] * sizeof(float));
        if (!*bufs[i]) {
            g->cap = 0;
            return err_set(err, "cpu backend: out of memory for a batch of %d tokens", T);
        }
    }
    g->cap = (int)cap;
    return 0;
}

/* ---- jobs ----------------------------------------------------------------------------------- */

typedef struct job {
    cpu_gdn_t *g;
    const cpu_gdn_layer_t *L;
    const be_batch_t *b;
    int li;
} job_t;

static float *slot_layer(const job_t *j, int s) {
    return j->g->states + (size_t)j->b->state_slots[s] * j->g->slot_floats +
           (size_t)j->li * j->g->layer_floats;
}

static bool starts_at_zero(const be_batch_t *b, int s) {
    return b->context_len[s] == b->query_start[s + 1] - b->query_start[s];
}

/* Channels [begin, end) of every sequence: y = silu(conv(qkv)), the windows slide. */
static void conv_channels(void *ctx, int thread, int64_t begin, int64_t end) {
    (void)thread;
    const job_t *j = ctx;
    const cpu_gdn_t *g = j->g;
    const be_batch_t *b = j->b;
    for (int s = 0; s < b->n_seqs; s++) {
        int t0 = b->query_start[s], n = b->query_start[s + 1] - t0;
        float *window = slot_layer(j, s);
        if (starts_at_zero(b, s))
            for (int r = 0; r < g->K - 1; r++)
                memset(window + (size_t)r * g->C + begin, 0, (size_t)(end - begin) * sizeof(float));
        cpu_gdn_conv(n, g->C, g->K, (int)begin, (int)end, j->L->conv, g->qkv + (size_t)t0 * g->C,
                     g->C, window, g->y + (size_t)t0 * g->C, g->C);
    }
}

/* (token, key head) pairs: q and k L2-normalized in place. */
static void l2norm_pairs(void *ctx, int thread, int64_t begin, int64_t end) {
    (void)thread;
    const cpu_gdn_t *g = ((const job_t *)ctx)->g;
    for (int64_t i = begin; i < end; i++) {
        float *row = g->y + (size_t)(i / g->Hk) * g->C + (size_t)(i % g->Hk) * g->dk;
        cpu_gdn_l2norm(row, g->dk);
        cpu_gdn_l2norm(row + g->kd, g->dk);
    }
}

static void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = dtype_bf16_to_f32(dtype_f32_to_bf16(x[i]));
}

/* (sequence, value head) items: gates, the delta rule from the slot's state, the gated norm. */
static void head_items(void *ctx, int thread, int64_t begin, int64_t end) {
    const job_t *j = ctx;
    const cpu_gdn_t *g = j->g;
    const cpu_gdn_layer_t *L = j->L;
    const be_batch_t *b = j->b;
    for (int64_t item = begin; item < end; item++) {
        int s = (int)(item / g->Hv), h = (int)(item % g->Hv);
        int t0 = b->query_start[s], n = b->query_start[s + 1] - t0;
        int hk = h / (g->Hv / g->Hk); /* value head h reads key head h / (Hv / Hk) */
        for (int t = t0; t < t0 + n; t++) {
            size_t i = (size_t)t * g->Hv + h;
            cpu_gdn_gates(g->a[i], g->b[i], L->a_log[h], L->dt_bias[h], &g->a[i], &g->b[i]);
        }
        size_t ssm = (size_t)g->Hv * g->dk * g->dv;
        float *S = slot_layer(j, s) + (size_t)(g->K - 1) * g->C + (size_t)h * g->dk * g->dv;
        if (starts_at_zero(b, s)) memset(S, 0, (size_t)g->dk * g->dv * sizeof(float));
        const float *row = g->y + (size_t)t0 * g->C;
        cpu_gdn_head_t hd = {.n = n,
                             .dk = g->dk,
                             .dv = g->dv,
                             .q = row + (size_t)hk * g->dk,
                             .k = row + g->kd + (size_t)hk * g->dk,
                             .ld_qk = g->C,
                             .v = row + 2 * (size_t)g->kd + (size_t)h * g->dv,
                             .ld_v = g->C,
                             .g = g->a + (size_t)t0 * g->Hv + h,
                             .beta = g->b + (size_t)t0 * g->Hv + h,
                             .ld_gb = g->Hv,
                             .o = g->o + (size_t)t0 * g->vd + (size_t)h * g->dv,
                             .ld_o = g->vd};
        if (n > 1)
            cpu_gdn_chunked(&hd, S, g->scratch[thread]);
        else
            cpu_gdn_recurrent(&hd, S, g->scratch[thread]);
        if (g->ssm_bf16) round_bf16(S, ssm / (size_t)g->Hv);
        for (int t = t0; t < t0 + n; t++) {
            float *o = g->o + (size_t)t * g->vd + (size_t)h * g->dv;
            cpu_gdn_gated_rmsnorm(o, g->z + (size_t)t * g->vd + (size_t)h * g->dv, L->norm, g->dv,
                                  g->eps, o);
        }
    }
}

static void run(cpu_pool_t *pool, int64_t n, cpu_pool_fn fn, void *ctx) {
    int threads = cpu_pool_size(pool);
    int64_t grain = n < PARALLEL_MIN_ITEMS ? n : (n + 4 * threads - 1) / (4 * threads);
    if (n > 0) cpu_pool_run(pool, n, grain, fn, ctx);
}

int cpu_gdn_forward(cpu_gdn_t *g, cpu_pool_t *pool, const cpu_gdn_layer_t *L, int li,
                    const be_batch_t *b, const float *x, float *out, cpu_gdn_gemm_fn gemm,
                    void *ctx, err_t *err) {
    int T = b->n_tokens;
    if (T == 0) return 0;
    if (li < 0 || li >= g->n_linear)
        return err_set(err, "cpu backend: linear layer %d of %d", li, g->n_linear);
    if (cpu_gdn_check(g, b, err) < 0 || grow(g, T, err) < 0) return -1;
    const int64_t at[3] = {0, g->kd, 2 * (int64_t)g->kd}; /* where q, k and v columns start */
    for (int p = 0; p < 3; p++)
        if (L->qkv[p]) gemm(ctx, x, T, L->qkv[p], g->qkv + at[p], g->C);
    gemm(ctx, x, T, L->z, g->z, g->vd);
    gemm(ctx, x, T, L->b, g->b, g->Hv);
    gemm(ctx, x, T, L->a, g->a, g->Hv);
    job_t j = {g, L, b, li};
    run(pool, g->C, conv_channels, &j);
    run(pool, (int64_t)T * g->Hk, l2norm_pairs, &j);
    run(pool, (int64_t)b->n_seqs * g->Hv, head_items, &j);
    gemm(ctx, g->o, T, L->out, out, (int64_t)L->out->rows);
    return 0;
}
