/* The cuda backend's tests' shared helpers (cuda_compare.h). */
#include "cuda_compare.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine_testutil.h"
#include "testutil.h"

cJSON *golden(const char *fixture) {
    char name[256];
    snprintf(name, sizeof name, "golden/%s.json", fixture);
    char *text = tu_read(tu_fixture(name), NULL);
    assert_non_null(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

int32_t *json_ids(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc((size_t)*n * sizeof *ids);
    for (int i = 0; i < *n; i++)
        ids[i] = cJSON_GetArrayItem(arr, i)->valueint;
    return ids;
}

int kv_dtype = KV_DTYPE_AUTO;
bool cuda_graphs = true;
const char *weights_from;

backend_t *open_backend_tp(const backend_ops_t *ops, model_weights_t *w, bool emulate, int tp,
                           bool ep, err_t *err) {
    backend_options_t o = {.n_threads = 2,
                           .kv_cache_dtype = kv_dtype,
                           .expert_parallel = ep,
                           .emulate_fp8_activations = emulate,
                           .gpu_memory_utilization = 0.5,
                           .max_num_batched_tokens = 2048,
                           .max_num_seqs = 64,
                           .cuda_graphs = cuda_graphs,
                           .tensor_parallel_size = tp};
    backend_t *be;
    err_t e = {{0}};
    if (ops->create(&o, w, &be, &e) < 0) {
        if (!err) fail_msg("%s: %s", ops->name, e.msg);
        *err = e;
        return NULL;
    }
    return be;
}

backend_t *open_backend(const backend_ops_t *ops, model_weights_t *w, bool emulate) {
    return open_backend_tp(ops, w, emulate, 1, false, NULL);
}

/* Models with recurrent state: n slots on be, sequence s in slot n - 1 - s; NULL otherwise. The
 * caller frees the array. */
int32_t *state_slots(backend_t *be, const model_weights_t *w, int n) {
    if (!model_has_state(weights_config(w))) return NULL;
    err_t err = {{0}};
    if (be->ops->state_reserve(be, n, &err) < 0) fail_msg("%s: %s", be->ops->name, err.msg);
    int32_t *slots = malloc((size_t)n * sizeof *slots);
    for (int s = 0; s < n; s++)
        slots[s] = n - 1 - s;
    return slots;
}

trace_t *trace_new(const model_config_t *cfg, int cap) {
    if (cfg->n_experts == 0) return NULL;
    trace_t *t = calloc(1, sizeof *t);
    size_t n = (size_t)cfg->n_layers * (size_t)cap * (size_t)cfg->n_experts_per_tok;
    *t = (trace_t){cfg, cap, calloc(n, 4), calloc(n, 4), 0, 0};
    return t;
}

void trace_free(trace_t *t) {
    if (!t) return;
    free(t->cpu);
    free(t->gpu);
    free(t);
}

void trace_on(trace_t *t, backend_t *cpu, backend_t *gpu) {
    cpu->ops->trace_routing(cpu, t ? t->cpu : NULL);
    gpu->ops->trace_routing(gpu, t ? t->gpu : NULL);
}

/* After a traced forward of T tokens: flipped[i] (T entries) whether token i went to other
 * experts on the two backends in any MoE layer (as sets: the order of equal choices does not
 * matter). Returns how many tokens flipped. */
int trace_compare(trace_t *t, int T, bool *flipped) {
    const model_config_t *c = t->cfg;
    int k = c->n_experts_per_tok, any = 0;
    for (int i = 0; i < T; i++)
        flipped[i] = false;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer[l].mlp != MLP_MOE) continue;
        for (int i = 0; i < T; i++) {
            const int32_t *a = t->cpu + ((size_t)l * T + i) * k,
                          *b = t->gpu + ((size_t)l * T + i) * k;
            bool same = true;
            for (int j = 0; j < k; j++) {
                bool found = false;
                for (int m = 0; m < k; m++)
                    found |= a[j] == b[m];
                same &= found;
            }
            t->routings++;
            if (!same) {
                t->flips++;
                any += !flipped[i];
                flipped[i] = true;
            }
        }
    }
    return any;
}

/* All golden prompts prefilled in one batch on `be`; returns logits [n_logits, vocab]. */
float *batched_prefill(backend_t *be, const model_weights_t *w, const cJSON *g, int vocab,
                       int *n_out) {
    const cJSON *prompts = cJSON_GetObjectItem(g, "prompts");
    int n_seqs = cJSON_GetArraySize(prompts), n_tokens = 0, max_blocks = 0;
    for (int s = 0; s < n_seqs; s++) {
        int len = cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, s), "ids"));
        n_tokens += len;
        if ((len + BLOCK - 1) / BLOCK > max_blocks) max_blocks = (len + BLOCK - 1) / BLOCK;
    }
    int32_t *tokens = malloc((size_t)n_tokens * 4), *pos = malloc((size_t)n_tokens * 4);
    int64_t *slots = malloc((size_t)n_tokens * 8);
    int32_t *qs = malloc((size_t)(n_seqs + 1) * 4), *ctx = malloc((size_t)n_seqs * 4);
    int32_t *tables = calloc((size_t)(n_seqs * max_blocks), 4), *rows = malloc((size_t)n_seqs * 4);
    int total = n_seqs * max_blocks, next = total - 1, t = 0;
    qs[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        int len;
        int32_t *ids = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, s), "ids"), &len);
        for (int b = 0; b < (len + BLOCK - 1) / BLOCK; b++)
            tables[s * max_blocks + b] = next--;
        for (int i = 0; i < len; i++, t++) {
            tokens[t] = ids[i];
            pos[t] = i;
            slots[t] = (int64_t)tables[s * max_blocks + i / BLOCK] * BLOCK + i % BLOCK;
        }
        qs[s + 1] = t;
        ctx[s] = len;
        rows[s] = t - 1;
        free(ids);
    }
    err_t err = {{0}};
    if (backend_kv_reserve(be, total, BLOCK, &err) < 0) fail_msg("%s", err.msg);
    int32_t *sslots = state_slots(be, w, n_seqs);
    be_batch_t b = {.n_tokens = n_tokens,
                    .n_seqs = n_seqs,
                    .token_ids = tokens,
                    .positions = pos,
                    .slot_mapping = slots,
                    .query_start = qs,
                    .context_len = ctx,
                    .block_tables = tables,
                    .block_table_stride = max_blocks,
                    .n_logits = n_seqs,
                    .logit_rows = rows,
                    .state_slots = sslots};
    float *logits = malloc((size_t)n_seqs * vocab * sizeof *logits);
    /* poison: every row must be written */
    for (size_t i = 0; i < (size_t)n_seqs * vocab; i++)
        logits[i] = NAN;
    if (backend_forward(be, &b, logits, &err) < 0) fail_msg("%s", err.msg);
    free(tokens);
    free(pos);
    free(slots);
    free(qs);
    free(ctx);
    free(tables);
    free(rows);
    free(sslots);
    *n_out = n_seqs;
    return logits;
}

/* Greedy generation on both backends in lockstep, the CPU's token fed to both: chunked prefill
 * (BLOCK tokens a step, over the cached prefix), then n_gen decode steps. At every step with
 * logits the two rows must be within tol, and their argmax equal unless the CPU's top-2 gap is
 * itself within 2 * tol (a near tie that numeric noise may flip; counted in *ties). Returns the
 * largest logit difference seen. */
double lockstep(backend_t *cpu, backend_t *gpu, const model_weights_t *w, const int32_t *prompt,
                int n, int n_gen, double tol, const char *what, int *ties, trace_t *tr,
                double *flip_worst) {
    int vocab = weights_config(w)->vocab_size;
    bool flipped = false; /* a token of the sequence so far was routed differently */
    int total = n + n_gen, nb = (total + BLOCK - 1) / BLOCK;
    int32_t *tokens = malloc((size_t)total * 4), *table = malloc((size_t)nb * 4);
    float *lc = malloc((size_t)vocab * 4), *lg = malloc((size_t)vocab * 4);
    memcpy(tokens, prompt, (size_t)n * 4);
    for (int b = 0; b < nb; b++)
        table[b] = nb - 1 - b; /* not in order */
    err_t err = {{0}};
    if (backend_kv_reserve(cpu, nb, BLOCK, &err) < 0 ||
        backend_kv_reserve(gpu, nb, BLOCK, &err) < 0)
        fail_msg("%s", err.msg);
    int32_t *sc = state_slots(cpu, w, 1), *sg = state_slots(gpu, w, 1);
    double worst = 0;
    int done = 0, len = n;
    while (len < total) {
        int chunk = done < n ? (n - done < BLOCK ? n - done : BLOCK) : 1;
        int32_t pos[BLOCK], qs[2] = {0, chunk}, ctx[1] = {done + chunk}, row[1] = {chunk - 1};
        int64_t slots[BLOCK];
        for (int i = 0; i < chunk; i++) {
            pos[i] = done + i;
            slots[i] = (int64_t)table[(done + i) / BLOCK] * BLOCK + (done + i) % BLOCK;
        }
        bool last = done + chunk == len;
        be_batch_t b = {.n_tokens = chunk,
                        .n_seqs = 1,
                        .token_ids = tokens + done,
                        .positions = pos,
                        .slot_mapping = slots,
                        .query_start = qs,
                        .context_len = ctx,
                        .block_tables = table,
                        .block_table_stride = nb,
                        .n_logits = last ? 1 : 0,
                        .logit_rows = row};
        for (int v = 0; v < vocab; v++)
            lg[v] = NAN;
        trace_on(tr, cpu, gpu);
        b.state_slots = sc;
        if (backend_forward(cpu, &b, lc, &err) < 0) fail_msg("%s: %s", what, err.msg);
        b.state_slots = sg;
        if (backend_forward(gpu, &b, lg, &err) < 0) fail_msg("%s: %s", what, err.msg);
        bool f[BLOCK];
        if (tr && trace_compare(tr, chunk, f)) flipped = true;
        done += chunk;
        if (!last) continue;
        double *into = flipped ? flip_worst : &worst, step_tol = flipped ? LOGIT_TOL_FLIP : tol;
        int ac = 0, ag = 0;
        for (int v = 0; v < vocab; v++) {
            double d = fabs((double)lc[v] - lg[v]);
            if (!(d <= *into)) *into = d;
            if (lc[v] > lc[ac]) ac = v;
            if (lg[v] > lg[ag]) ag = v;
        }
        if (ag != ac) {
            float second = -INFINITY;
            for (int v = 0; v < vocab; v++)
                if (v != ac && lc[v] > second) second = lc[v];
            if (lc[ac] - second > 2 * step_tol)
                fail_msg("%s: token %d: cuda picks %d, cpu %d with a margin of %.4g (> %.3g)", what,
                         len - n, ag, ac, lc[ac] - second, 2 * step_tol);
            print_message("%s: token %d: near tie, cuda picks %d, cpu %d (cpu margin %.4g)\n", what,
                          len - n, ag, ac, lc[ac] - second);
            (*ties)++;
        }
        tokens[len++] = ac;
    }
    trace_on(NULL, cpu, gpu);
    free(tokens);
    free(table);
    free(lc);
    free(lg);
    free(sc);
    free(sg);
    return worst;
}

int collect(engine_stream_t *s, int32_t *out, int cap) {
    engine_event_t ev;
    int rc, n = 0;
    while ((rc = engine_stream_wait(s, &ev, 600000)) > 0) {
        for (int i = 0; i < ev.n_tokens && n < cap; i++)
            out[n++] = ev.token_ids[i];
        engine_event_clear(&ev);
    }
    assert_int_equal(rc, -1);
    engine_stream_release(s);
    return n;
}

engine_t *open_engine(const char *const *flags) {
    return tu_open_engine(tu_fixture("tiny-qwen3"), "cuda", flags);
}
