/* sampler: the CPU sampler (vLLM V1's order), O(V) per row, no allocation per call. */
#include "sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* vLLM's _SAMPLING_EPS: below it a temperature means greedy. */
#define SAMPLER_EPS 1e-5f
/* Ranges this short are sorted and walked instead of partitioned further. */
#define SMALL_RANGE 24

typedef struct cand {
    float logit;
    int32_t id;
    double w; /* exp(logit - max): unnormalized probability */
} cand_t;

struct sampler {
    int vocab;
    float *raw;     /* [vocab] the row before any change, kept for the sampled logprob */
    int32_t *count; /* [vocab] occurrences in the output; all zero between calls */
    uint8_t *mark;  /* [vocab] 1: in the prompt, 2: in the output; all zero between calls */
    cand_t *cand;   /* [vocab] tokens still in the running for the draw */
};

sampler_t *sampler_create(int vocab_size) {
    if (vocab_size <= 0) return NULL;
    sampler_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    size_t v = (size_t)vocab_size;
    s->vocab = vocab_size;
    s->raw = malloc(v * sizeof *s->raw);
    s->count = calloc(v, sizeof *s->count);
    s->mark = calloc(v, sizeof *s->mark);
    s->cand = malloc(v * sizeof *s->cand);
    if (!s->raw || !s->count || !s->mark || !s->cand) {
        sampler_destroy(s);
        return NULL;
    }
    return s;
}

void sampler_destroy(sampler_t *s) {
    if (!s) return;
    free(s->raw);
    free(s->count);
    free(s->mark);
    free(s->cand);
    free(s);
}

/* ---- ordering: descending logit, ties lower id first ---------------------------------------- */

static inline bool better(float la, int32_t ia, float lb, int32_t ib) {
    return la > lb || (la == lb && ia < ib);
}

static inline bool cand_better(const cand_t *a, const cand_t *b) {
    return better(a->logit, a->id, b->logit, b->id);
}

static inline void cand_swap(cand_t *a, cand_t *b) {
    cand_t t = *a;
    *a = *b;
    *b = t;
}

static int cand_cmp(const void *a, const void *b) {
    return cand_better(a, b) ? -1 : cand_better(b, a) ? 1 : 0;
}

static void sort_best_first(cand_t *c, int n) {
    if (n > 64) {
        qsort(c, (size_t)n, sizeof *c, cand_cmp);
        return;
    }
    for (int i = 1; i < n; i++) {
        cand_t x = c[i];
        int j = i;
        for (; j > 0 && cand_better(&x, &c[j - 1]); j--)
            c[j] = c[j - 1];
        c[j] = x;
    }
}

/* Min-heap on the ordering (root = the worst kept), for selecting the best k of a stream. */
static void heap_sift_down(cand_t *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_better(&h[w], &h[l])) w = l;
        if (r < n && cand_better(&h[w], &h[r])) w = r;
        if (w == i) return;
        cand_swap(&h[i], &h[w]);
        i = w;
    }
}

static void heap_push(cand_t *h, int *n, cand_t x) {
    int i = (*n)++;
    h[i] = x;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_better(&h[p], &h[i])) return;
        cand_swap(&h[p], &h[i]);
        i = p;
    }
}

/* Offers x to a heap keeping the best k. */
static inline void heap_offer(cand_t *h, int *n, int k, cand_t x) {
    if (*n < k)
        heap_push(h, n, x);
    else if (cand_better(&x, &h[0])) {
        h[0] = x;
        heap_sift_down(h, k, 0);
    }
}

/* ---- mass selection ------------------------------------------------------------------------- */

static inline bool reached(double acc, double target, bool strict) {
    return strict ? acc > target : acc >= target;
}

static int median3(const cand_t *c, int a, int b, int d) {
    if (cand_better(&c[a], &c[b])) {
        if (cand_better(&c[b], &c[d])) return b;
        return cand_better(&c[a], &c[d]) ? d : a;
    }
    if (cand_better(&c[a], &c[d])) return a;
    return cand_better(&c[b], &c[d]) ? d : b;
}

/* Reorders c[0..n) so that c[0..r) are its r best entries and returns the smallest r whose
 * total weight reaches target (> with strict, else >=); c[r - 1] is the r-th best, the entry at
 * which the best-first cumulative weight crosses target. Quickselect on mass: expected O(n),
 * and after a bounded number of partitions the rest is sorted, so O(n log n) at worst. When
 * rounding keeps the sum short of target the answer is everything that was summed. */
static int mass_select(cand_t *c, int n, double target, bool strict) {
    int lo = 0, hi = n, budget = 16;
    double acc = 0.0;
    for (int m = n; m > 1; m >>= 1)
        budget += 2;
    while (hi - lo > SMALL_RANGE && budget-- > 0) {
        int p = median3(c, lo, lo + (hi - lo) / 2, hi - 1);
        cand_swap(&c[p], &c[hi - 1]);
        const cand_t pivot = c[hi - 1];
        int g = lo;
        double mass = 0.0;
        for (int i = lo; i < hi - 1; i++) {
            if (cand_better(&c[i], &pivot)) {
                mass += c[i].w;
                cand_swap(&c[i], &c[g++]);
            }
        }
        cand_swap(&c[g], &c[hi - 1]);
        if (reached(acc + mass, target, strict)) {
            hi = g;
            continue;
        }
        acc += mass;
        if (reached(acc + c[g].w, target, strict)) return g + 1;
        acc += c[g].w;
        lo = g + 1;
    }
    sort_best_first(c + lo, hi - lo);
    for (int i = lo; i < hi; i++) {
        acc += c[i].w;
        if (reached(acc, target, strict)) return i + 1;
    }
    return hi;
}

/* ---- steps ---------------------------------------------------------------------------------- */

int32_t sampler_argmax(const float *x, int n) {
    int32_t best = 0;
    float bv = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (x[i] > bv) {
            bv = x[i];
            best = i;
        }
    }
    return best;
}

/* log(sum(exp(x))) with a double accumulator. */
static double log_sum_exp(const float *x, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    if (!isfinite(m)) return m;
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += (double)expf(x[i] - m);
    return (double)m + log(sum);
}

static void top_logprobs(const float *x, int n, int k, double lse, sampler_result_t *out) {
    cand_t h[SAMPLING_MAX_LOGPROBS];
    int nh = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        heap_offer(h, &nh, k, (cand_t){.logit = x[i], .id = i});
    }
    sort_best_first(h, nh);
    for (int i = 0; i < nh; i++) {
        out->top_ids[i] = h[i].id;
        out->top_logprobs[i] = (float)((double)h[i].logit - lse);
    }
    out->n_top = nh;
}

static void mask_ids(float *logits, int V, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < V) logits[ids[i]] = -INFINITY;
}

/* vLLM apply_penalties: repetition over prompt and output (divide positive logits, multiply
 * the others), then frequency (times the output count) and presence (output only). The count
 * and mark arrays are touched only at the row's tokens and cleared as each is applied. */
static void apply_penalties(sampler_t *s, float *logits, const sampler_row_t *row) {
    const sampling_params_t *p = row->params;
    const float rp = p->repetition_penalty, fp = p->frequency_penalty, pp = p->presence_penalty;
    const bool rep = rp != 1.0f;
    if (!rep && fp == 0.0f && pp == 0.0f) return;
    const int V = s->vocab;
    for (int i = 0; i < row->n_output; i++) {
        int32_t t = row->output[i];
        if (t < 0 || t >= V) continue;
        s->count[t]++;
        s->mark[t] |= 2;
    }
    if (rep) {
        for (int i = 0; i < row->n_prompt; i++) {
            int32_t t = row->prompt[i];
            if (t >= 0 && t < V) s->mark[t] |= 1;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *ids = pass == 0 ? row->output : row->prompt;
        int n = pass == 0 ? row->n_output : (rep ? row->n_prompt : 0);
        for (int i = 0; i < n; i++) {
            int32_t t = ids[i];
            if (t < 0 || t >= V || !s->mark[t]) continue;
            float x = logits[t];
            if (rep) x = x > 0.0f ? x / rp : x * rp;
            if (s->mark[t] & 2) x = x - fp * (float)s->count[t] - pp;
            logits[t] = x;
            s->mark[t] = 0;
            s->count[t] = 0;
        }
    }
}

static int32_t sample_random(sampler_t *s, float *logits, const sampler_row_t *row) {
    const sampling_params_t *p = row->params;
    const int V = s->vocab;
    const float T = p->temperature;
    float m = -INFINITY;
    for (int i = 0; i < V; i++) {
        logits[i] /= T;
        if (logits[i] > m) m = logits[i];
    }
    if (!isfinite(m)) return sampler_argmax(logits, V);

    /* min_p: p_i < min_p * p_max  <=>  logit_i - logit_max < log(min_p). */
    const float log_min_p = p->min_p > 0.0f ? logf(p->min_p) : -INFINITY;
    const int k = p->top_k > 0 && p->top_k < V ? p->top_k : 0;
    cand_t *c = s->cand;
    int n = 0;
    for (int i = 0; i < V; i++) {
        float x = logits[i];
        if (!(x > -INFINITY) || !(x - m >= log_min_p)) continue;
        cand_t e = {.logit = x, .id = i};
        if (k)
            heap_offer(c, &n, k, e);
        else
            c[n++] = e;
    }
    double Z = 0.0;
    for (int i = 0; i < n; i++) {
        c[i].w = (double)expf(c[i].logit - m);
        Z += c[i].w;
    }
    if (p->top_p < 1.0f) {
        n = mass_select(c, n, (double)p->top_p * Z, false);
        Z = 0.0;
        for (int i = 0; i < n; i++)
            Z += c[i].w;
    }
    const double u =
        (double)(rng_bits(row->seed, (uint64_t)row->choice, (uint64_t)row->n_output) >> 11) *
        0x1.0p-53;
    int r = mass_select(c, n, u * Z, true);
    return c[r - 1].id;
}

void sampler_sample(sampler_t *s, float *logits, const sampler_row_t *row, sampler_result_t *out) {
    const sampling_params_t *p = row->params;
    const int V = s->vocab;
    const bool want_logprobs = p->logprobs >= 0;
    double lse = 0.0;
    out->logprob = 0.0f;
    out->n_top = 0;
    if (want_logprobs) {
        memcpy(s->raw, logits, (size_t)V * sizeof *logits);
        lse = log_sum_exp(logits, V);
        int k = p->logprobs < V ? p->logprobs : V;
        if (k > 0) top_logprobs(logits, V, k, lse, out);
    }

    if (row->n_output < p->min_tokens) {
        mask_ids(logits, V, row->eos_ids, row->n_eos);
        mask_ids(logits, V, p->stop_token_ids, p->n_stop_token_ids);
    }
    apply_penalties(s, logits, row);

    int32_t tok =
        p->temperature >= SAMPLER_EPS ? sample_random(s, logits, row) : sampler_argmax(logits, V);
    out->token = tok;
    if (want_logprobs) out->logprob = (float)((double)s->raw[tok] - lse);
}
