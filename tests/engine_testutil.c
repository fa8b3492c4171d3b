#include "engine_testutil.h"

#include <cjson/cJSON.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "rng.h"
#include "testutil.h"

model_weights_t *tu_weights(const model_source_t *src) {
    model_weights_t *w;
    err_t err = {{0}};
    if (weights_open(src, &w, &err) < 0) fail_msg("%s", err.msg);
    return w;
}

model_weights_t *tu_fixture_weights(const char *name) {
    model_source_t src = {.model = tu_fixture(name), .format = LOAD_AUTO};
    return tu_weights(&src);
}

engine_t *tu_open_engine(const char *model, const char *backend, const char *const *flags) {
    engine_opts_t o;
    engine_opts_init(&o);
    o.model.model = model;
    o.backend = backend;
    o.backend_opts.n_threads = 2;
    err_t err = {{0}};
    for (const char *const *f = flags; f && *f; f += 2) {
        const flag_def_t *def = flags_find(f[0]);
        assert_non_null(def);
        if (flags_set(def, f[1], &o.flags, &err) < 0) fail_msg("%s", err.msg);
    }
    engine_t *eng;
    if (engine_open(&o, &eng, &err) < 0) fail_msg("%s", err.msg);
    return eng;
}

engine_stream_t *tu_submit(engine_t *eng, const int32_t *prompt, int n,
                           const sampling_params_t *p) {
    engine_request_t req = {.prompt = prompt, .n_prompt = n};
    err_t err = {{0}};
    if (sampling_params_copy(&req.sampling, p, &err) < 0) fail_msg("%s", err.msg);
    engine_stream_t *s;
    if (engine_submit(eng, &req, &s, &err) < 0) fail_msg("submit: %s", err.msg);
    sampling_params_free(&req.sampling);
    return s;
}

int tu_prompt(int i, int32_t *ids) {
    int n = 5 + (int)(rng_bits(1234, 0, (uint64_t)i) % 76);
    for (int k = 0; k < n; k++)
        ids[k] = (int32_t)(rng_bits(1234, 1 + (uint64_t)i, (uint64_t)k) % 2048);
    return n;
}

void tu_spec_on(engine_t *eng, const char *k) {
    const char *const flags[][2] = {{"speculative-method", "ngram"},
                                    {"prompt-lookup-min", "1"},
                                    {"prompt-lookup-max", "4"},
                                    {"num-speculative-tokens", k}};
    err_t err = {{0}};
    for (int f = 0; f < 4; f++)
        if (engine_flag_set(eng, flags[f][0], flags[f][1], &err) < 0)
            fail_msg("%s: %s", flags[f][0], err.msg);
}

sampling_params_t tu_greedy(int max_tokens) {
    sampling_params_t p;
    sampling_params_init(&p);
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

void tu_check_expert_load(engine_t *eng, uint64_t forwarded) {
    static stats_snapshot_t snap;
    engine_stats(eng, &snap);
    const model_config_t *c = engine_model_config(eng);
    const stats_experts_t *x = &snap.experts;
    int moe_layers = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer[l].mlp == MLP_MOE) assert_int_equal(x->layer[moe_layers++], l);
    assert_int_equal(x->n_layers, moe_layers);
    assert_int_equal(x->n_experts, c->n_experts);
    assert_true(x->window_s > 0 && x->window_s <= STATS_EXPERT_WINDOW);
    for (int r = 0; r < x->n_layers; r++) {
        uint64_t total = 0, window = 0;
        int used = 0;
        for (int e = 0; e < x->n_experts; e++) {
            uint64_t t = x->total[r * x->n_experts + e];
            assert_true(x->window[r * x->n_experts + e] <= t);
            total += t;
            window += x->window[r * x->n_experts + e];
            used += t > 0;
        }
        print_message("MoE layer %d: %llu tokens routed (%llu in the last %.1f s) over %d of %d "
                      "experts\n",
                      x->layer[r], (unsigned long long)total, (unsigned long long)window,
                      x->window_s, used, x->n_experts);
        assert_int_equal(total, forwarded * (uint64_t)c->n_experts_per_tok);
        assert_true(window > 0 && used > 1);
    }
}

void tu_golden_load(const char *golden, tu_golden_t *g) {
    char name[256];
    snprintf(name, sizeof name, "golden/%s.json", golden);
    char *text = tu_read(tu_fixture(name), NULL);
    assert_non_null(text);
    g->json = cJSON_Parse(text);
    free(text);
    assert_non_null(g->json);
    const cJSON *vocab = cJSON_GetObjectItem(g->json, "vocab_size");
    const cJSON *file = cJSON_GetObjectItem(g->json, "logits_file");
    assert_true(cJSON_IsNumber(vocab) && vocab->valueint > 0 && cJSON_IsString(file));
    g->vocab = vocab->valueint;
    snprintf(name, sizeof name, "golden/%s", file->valuestring);
    size_t len;
    g->logits = (float *)tu_read(tu_fixture(name), &len);
    assert_non_null(g->logits);
    g->n_rows = len / (sizeof(float) * (size_t)g->vocab);
    assert_int_equal(len, g->n_rows * sizeof(float) * (size_t)g->vocab);
}

void tu_golden_free(tu_golden_t *g) {
    cJSON_Delete(g->json);
    free(g->logits);
}
