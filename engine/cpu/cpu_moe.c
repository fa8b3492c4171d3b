#include "cpu_moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_bf16.h"
#include "cpu_fast.h"
#include "cpu_ops.h"

/* Rows of an expert's weight one work item computes: one FP8 block, so that the SiLU product of
 * those columns can be quantized inside the item. */
#define COLS 128

struct cpu_moe {
    int H, E, k, I, n_threads;
    int chunk; /* tokens routed at once */
    bool norm;
    float *logits;       /* [chunk, E] router logits */
    int32_t *ids;        /* [chunk, k] each token's experts */
    float *weights;      /* [chunk, k] their routing weights */
    int32_t *count;      /* [E] tokens of each expert in the chunk */
    int32_t *offset;     /* [E] first grouped row of each expert */
    int32_t *fill;       /* [E] rows placed so far */
    int32_t *active;     /* [E] experts with tokens, increasing */
    int32_t *row_token;  /* [chunk * k] the token of each grouped row */
    int32_t *pos;        /* [chunk * k] the grouped row of (token, j) */
    float *xq;           /* [chunk, H] the input after W8A8 quantization */
    float *xg;           /* [chunk * k, H] inputs grouped by expert */
    float *gate, *up;    /* [chunk * k, I]; gate becomes silu(gate) * up */
    float *y;            /* [chunk * k, H] expert outputs */
    float **wbuf;        /* [n_threads][wbuf_floats] dequantized weight rows */
    int64_t wbuf_floats; /* CPU_MM_ROWS * max(H, I), or the fast GEMM's panel */
    bool fast;           /* cpu_fast_matmul_rows (bit-identical), else cpu_matmul_rows */
    uint16_t *xgb, *gb;  /* [chunk * k][2][round32(H or I)] xg and the SiLU product split to
                            bf16 (with the bf16 kernels; NULL where the CPU has none) */
};

void cpu_moe_destroy(cpu_moe_t *m) {
    if (!m) return;
    void *bufs[] = {m->logits, m->ids,       m->weights, m->count, m->offset, m->fill,
                    m->active, m->row_token, m->pos,     m->xq,    m->xg,     m->gate,
                    m->up,     m->y,         m->xgb,     m->gb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    for (int i = 0; m->wbuf && i < m->n_threads; i++)
        free(m->wbuf[i]);
    free(m->wbuf);
    free(m);
}

static void *alloc(size_t n, size_t size, bool *ok) {
    void *p = malloc(n * size > 0 ? n * size : 1);
    if (!p) *ok = false;
    return p;
}

int cpu_moe_create(const model_config_t *c, int n_threads, bool fast, cpu_moe_t **out, err_t *err) {
    *out = NULL;
    cpu_moe_t *m = calloc(1, sizeof *m);
    if (!m) return err_set(err, "cpu backend: out of memory");
    m->H = c->hidden_size;
    m->E = c->n_experts;
    m->k = c->n_experts_per_tok;
    m->I = c->moe_intermediate_size;
    m->norm = c->norm_topk_prob;
    m->n_threads = n_threads;
    m->fast = fast;
    m->chunk = CPU_MOE_PAIRS / m->k > 0 ? CPU_MOE_PAIRS / m->k : 1;
    size_t T = (size_t)m->chunk, P = T * (size_t)m->k, H = (size_t)m->H, I = (size_t)m->I;
    size_t E = (size_t)m->E, wide = H > I ? H : I;
    bool ok = true;
    m->logits = alloc(T * E, sizeof(float), &ok);
    m->ids = alloc(P, sizeof(int32_t), &ok);
    m->weights = alloc(P, sizeof(float), &ok);
    m->count = alloc(E, sizeof(int32_t), &ok);
    m->offset = alloc(E, sizeof(int32_t), &ok);
    m->fill = alloc(E, sizeof(int32_t), &ok);
    m->active = alloc(E, sizeof(int32_t), &ok);
    m->row_token = alloc(P, sizeof(int32_t), &ok);
    m->pos = alloc(P, sizeof(int32_t), &ok);
    m->xq = alloc(T * H, sizeof(float), &ok);
    m->xg = alloc(P * H, sizeof(float), &ok);
    m->gate = alloc(P * I, sizeof(float), &ok);
    m->up = alloc(P * I, sizeof(float), &ok);
    m->y = alloc(P * H, sizeof(float), &ok);
    m->wbuf_floats = fast ? cpu_fast_scratch_floats((int64_t)wide) : CPU_MM_ROWS * (int64_t)wide;
    if (fast && cpu_bf16_supported()) {
        if (cpu_bf16_scratch_floats((int64_t)wide) > m->wbuf_floats)
            m->wbuf_floats = cpu_bf16_scratch_floats((int64_t)wide);
        m->xgb = alloc((size_t)cpu_bf16_x_elems((int)P, (int64_t)H, 2), sizeof(uint16_t), &ok);
        m->gb = alloc((size_t)cpu_bf16_x_elems((int)P, (int64_t)I, 2), sizeof(uint16_t), &ok);
    }
    m->wbuf = calloc((size_t)n_threads, sizeof *m->wbuf);
    for (int i = 0; m->wbuf && i < n_threads; i++)
        m->wbuf[i] = alloc((size_t)m->wbuf_floats, sizeof(float), &ok);
    if (!ok || !m->wbuf) {
        cpu_moe_destroy(m);
        return err_set(err, "cpu backend: out of memory for the MoE scratch");
    }
    *out = m;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Routing

void cpu_moe_route(const float *logits, int E, int k, bool norm, int32_t *ids, float *weights) {
    /* softmax over all experts in f32; top-k by logit (the same order as by probability, but
     * free of ties that rounding the probabilities could make) */
    float m = -INFINITY;
    for (int e = 0; e < E; e++)
        m = fmaxf(m, logits[e]);
    float sum = 0.0f;
    for (int e = 0; e < E; e++)
        sum += expf(logits[e] - m);
    float wsum = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++)
                taken = ids[i] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        ids[j] = best;
        weights[j] = expf(logits[best] - m) / sum;
        wsum += weights[j];
    }
    if (norm)
        for (int j = 0; j < k; j++)
            weights[j] /= wsum;
}

/* Groups the chunk's (token, j) pairs by expert, in token order within each expert; returns
 * how many of the experts computed here have tokens (listed in m->active). */
static int group(cpu_moe_t *m, const cpu_moe_weights_t *w, int T) {
    memset(m->count, 0, (size_t)m->E * sizeof *m->count);
    for (int p = 0; p < T * m->k; p++)
        m->count[m->ids[p]]++;
    int at = 0, n_active = 0;
    for (int e = 0; e < m->E; e++) {
        m->offset[e] = at;
        m->fill[e] = 0;
        at += m->count[e];
        if (m->count[e] && e >= w->first && e < w->end) m->active[n_active++] = e;
    }
    for (int t = 0; t < T; t++)
        for (int j = 0; j < m->k; j++) {
            int e = m->ids[t * m->k + j], p = m->offset[e] + m->fill[e]++;
            m->row_token[p] = t;
            m->pos[t * m->k + j] = p;
        }
    return n_active;
}

// ---------------------------------------------------------------------------------------------
// Jobs

typedef struct moe_job {
    cpu_moe_t *m;
    const cpu_moe_weights_t *w;
    const float *x; /* router job: the chunk's input */
    int T;
    int n_active, blocks; /* expert jobs: items are (active expert, block of COLS rows) */
    int quant_group;      /* quantize the SiLU product for down per this many columns (W8A8;
                             0: no) */
    float *h;             /* combine job: the residual stream of the chunk */
    int passes;           /* the experts' GEMMs on the bf16 kernels (cpu_moe_forward's
                             bf16_passes; 0: f32) */
} moe_job_t;

/* cpu_matmul_rows, or its fast twin, with thread's scratch */
static void matmul_f32(const cpu_moe_t *m, int thread, const float *x, int T, const wtensor_t *w,
                       int64_t n0, int64_t n1, float *y, int64_t ldy) {
    if (m->fast)
        cpu_fast_matmul_rows(x, T, w, n0, n1, y, ldy, m->wbuf[thread], m->wbuf_floats);
    else
        cpu_matmul_rows(x, T, w, n0, n1, y, ldy, m->wbuf[thread]);
}

/* An expert's GEMM: matmul_f32, or the bf16 kernels with j's passes (xb: x split, read for
 * BF16 weights). */
static void matmul(const moe_job_t *j, int thread, const float *x, const uint16_t *xb, int T,
                   const wtensor_t *w, int64_t n0, int64_t n1, float *y, int64_t ldy) {
    if (j->passes && cpu_bf16_takes(w))
        cpu_bf16_matmul_rows(x, xb, T, j->passes, w, n0, n1, y, ldy, j->m->wbuf[thread]);
    else
        matmul_f32(j->m, thread, x, T, w, n0, n1, y, ldy);
}

/* Row p0 of a split buffer of K columns (forward_chunk split it when the experts are BF16). */
static const uint16_t *bf16_rows(const moe_job_t *j, const uint16_t *buf, int64_t p0, int K) {
    return j->passes ? buf + cpu_bf16_x_elems((int)p0, K, j->passes) : NULL;
}

static void router_rows(void *ctx, int thread, int64_t begin, int64_t end) {
    moe_job_t *j = ctx;
    /* the router in f32 always: its top-k is a discrete choice that rounding would move */
    matmul_f32(j->m, thread, j->x, j->T, j->w->router, begin, end, j->m->logits, j->m->E);
}

static const wtensor_t *expert(const moe_job_t *j, int e, eslot_t slot) {
    return &j->w->experts[(size_t)e * E_COUNT + slot];
}

/* gate and up rows [r0, r1) of one expert for its tokens, then silu(gate) * up into gate. */
static void gate_up_items(void *ctx, int thread, int64_t begin, int64_t end) {
    moe_job_t *j = ctx;
    cpu_moe_t *m = j->m;
    int I = m->I;
    for (int64_t it = begin; it < end; it++) {
        int e = m->active[it / j->blocks];
        int r0 = (int)(it % j->blocks) * COLS, r1 = r0 + COLS < I ? r0 + COLS : I;
        int64_t p0 = m->offset[e], n = m->count[e];
        const float *x = m->xg + p0 * m->H;
        const uint16_t *xb = bf16_rows(j, m->xgb, p0, m->H);
        float *g = m->gate + p0 * I, *u = m->up + p0 * I;
        matmul(j, thread, x, xb, (int)n, expert(j, e, E_GATE), r0, r1, g, I);
        matmul(j, thread, x, xb, (int)n, expert(j, e, E_UP), r0, r1, u, I);
        for (int64_t t = 0; t < n; t++) {
            float *gr = g + t * I, *ur = u + t * I;
            for (int c = r0; c < r1; c++)
                gr[c] = gr[c] / (1.0f + expf(-gr[c])) * ur[c];
            if (j->quant_group) cpu_quant_fp8_rows(gr + r0, 1, r1 - r0, j->quant_group, gr + r0);
        }
    }
}

/* down rows [r0, r1) of one expert for its tokens. */
static void down_items(void *ctx, int thread, int64_t begin, int64_t end) {
    moe_job_t *j = ctx;
    cpu_moe_t *m = j->m;
    for (int64_t it = begin; it < end; it++) {
        int e = m->active[it / j->blocks];
        int r0 = (int)(it % j->blocks) * COLS, r1 = r0 + COLS < m->H ? r0 + COLS : m->H;
        int64_t p0 = m->offset[e];
        matmul(j, thread, m->gate + p0 * m->I, bf16_rows(j, m->gb, p0, m->I), m->count[e],
               expert(j, e, E_DOWN), r0, r1, m->y + p0 * m->H, m->H);
    }
}

/* h[t] += sum over t's experts (those computed here) in increasing id of weight * output (HF's
 * index_add_ order). */
static void combine_tokens(void *ctx, int thread, int64_t begin, int64_t end) {
    moe_job_t *j = ctx;
    cpu_moe_t *m = j->m;
    int k = m->k, H = m->H;
    for (int64_t t = begin; t < end; t++) {
        int order[32]; /* k <= 32 (the config parser's limit) */
        for (int i = 0; i < k; i++) {
            int at = i;
            while (at > 0 && m->ids[t * k + order[at - 1]] > m->ids[t * k + i]) {
                order[at] = order[at - 1];
                at--;
            }
            order[at] = i;
        }
        float *h = j->h + t * H;
        for (int c = 0; c < H; c++) {
            float acc = 0.0f;
            for (int i = 0; i < k; i++) {
                int slot = (int)t * k + order[i];
                if (m->ids[slot] < j->w->first || m->ids[slot] >= j->w->end) continue;
                float prod = m->y[(int64_t)m->pos[slot] * H + c] * m->weights[slot];
                acc += prod;
            }
            h[c] += acc;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The layer

static void forward_chunk(cpu_moe_t *m, cpu_pool_t *pool, const cpu_moe_weights_t *w,
                          const float *x, int T, float *h, bool emulate_fp8, int bf16_passes,
                          uint64_t *counts, int32_t *trace) {
    int H = m->H, E = m->E, k = m->k;
    moe_job_t job = {.m = m, .w = w, .x = x, .T = T, .h = h, .passes = m->xgb ? bf16_passes : 0};

    /* logits = x Wr^T; each token's experts and weights */
    int64_t grain = cpu_pool_grain(pool, E, (int64_t)T * E * H, 4, CPU_MM_ROWS);
    cpu_pool_run(pool, E, grain, router_rows, &job);
    for (int t = 0; t < T; t++)
        cpu_moe_route(m->logits + (int64_t)t * E, E, k, m->norm, m->ids + t * k,
                      m->weights + t * k);
    if (trace) memcpy(trace, m->ids, (size_t)T * (size_t)k * sizeof *trace);
    int n_active = group(m, w, T);
    for (int e = 0; counts && e < E; e++)
        counts[e] += (uint64_t)m->count[e];

    /* the experts' input, quantized once for all of them, gathered by expert */
    const float *xin = cpu_linear_input(x, T, &w->experts[E_GATE], emulate_fp8, m->xq);
    for (int p = 0; p < T * k; p++)
        memcpy(m->xg + (int64_t)p * H, xin + (int64_t)m->row_token[p] * H,
               (size_t)H * sizeof(float));

    /* act = silu(x Wg^T) * x Wu^T, then y = act Wd^T, per expert on its rows */
    const wtensor_t *down0 = &w->experts[E_DOWN];
    job.n_active = n_active;
    /* the config allows 128-column blocks only, which divide an item's COLS columns */
    job.quant_group = emulate_fp8 && down0->dtype == DT_F8_E4M3 ? down0->block_k : 0;
    job.blocks = (m->I + COLS - 1) / COLS;
    int64_t items = (int64_t)n_active * job.blocks, macs = (int64_t)T * k * 2 * m->I * H;
    bool split = job.passes && w->experts[E_GATE].dtype == DT_BF16;
    if (split) cpu_bf16_split(m->xg, T * k, H, job.passes, m->xgb);
    cpu_pool_run(pool, items, cpu_pool_grain(pool, items, macs, 2, 1), gate_up_items, &job);
    if (split) cpu_bf16_split(m->gate, T * k, m->I, job.passes, m->gb);
    job.blocks = (H + COLS - 1) / COLS;
    items = (int64_t)n_active * job.blocks;
    cpu_pool_run(pool, items, cpu_pool_grain(pool, items, macs / 2, 2, 1), down_items, &job);

    /* h += the routing-weighted sum */
    grain = cpu_pool_grain(pool, T, (int64_t)T * k * H, 4, 1);
    cpu_pool_run(pool, T, grain, combine_tokens, &job);
}

void cpu_moe_forward(cpu_moe_t *m, cpu_pool_t *pool, const cpu_moe_weights_t *w, const float *x,
                     int T, float *h, bool emulate_fp8, int bf16_passes, uint64_t *counts,
                     int32_t *trace) {
    for (int t0 = 0; t0 < T; t0 += m->chunk) {
        int n = T - t0 < m->chunk ? T - t0 : m->chunk;
        forward_chunk(m, pool, w, x + (int64_t)t0 * m->H, n, h + (int64_t)t0 * m->H, emulate_fp8,
                      bf16_passes, counts, trace ? trace + (int64_t)t0 * m->k : NULL);
    }
}
