#include "engine_testutil.h"

#include <cjson/cJSON.h>
#include <math.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mdir.h"
#include "rng.h"
#include "safetensors.h"
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

char *tu_fixture_with_kv_scales(const char *name, float k_scale, float v_scale) {
    char *dir = tu_copy_dir(tu_fixture(name));
    mdir_t *md;
    st_set_t *st;
    err_t err = {{0}};
    if (mdir_open(dir, &md, &err) < 0 || st_open(md, &st, &err) < 0) fail_msg("%s", err.msg);
    enum { MAX_ADD = 64 };
    char names[MAX_ADD][2][200], files[MAX_ADD][200];
    int n = 0;
    const char *suffix = ".self_attn.k_proj.weight";
    for (int i = 0; i < st_count(st) && n < MAX_ADD; i++) {
        const st_tensor_t *t = st_at(st, i);
        size_t len = strlen(t->name), sl = strlen(suffix);
        if (len < sl || strcmp(t->name + len - sl, suffix) || len - sl > 150) continue;
        const char *base = strrchr(t->file, '/');
        snprintf(files[n], sizeof files[n], "%s", base ? base + 1 : t->file);
        snprintf(names[n][0], sizeof names[n][0], "%.*s.self_attn.k_scale", (int)(len - sl),
                 t->name);
        snprintf(names[n][1], sizeof names[n][1], "%.*s.self_attn.v_scale", (int)(len - sl),
                 t->name);
        n++;
    }
    st_close(st);
    mdir_close(md);
    if (n == 0) fail_msg("%s: no self_attn.k_proj.weight", name);
    for (int i = 0; i < n; i++) {
        tu_safetensors_add(dir, files[i], names[i][0], "F32", NULL, 0, &k_scale, 4);
        tu_safetensors_add(dir, files[i], names[i][1], "F32", NULL, 0, &v_scale, 4);
    }
    return dir;
}

engine_t *tu_open_engine(const char *model, const char *backend, const char *const *flags) {
    engine_opts_t o;
    engine_opts_init(&o);
    o.model.model = model;
    o.backend = backend;
    o.backend_opts.n_threads = 2;
    err_t err = {{0}};
    const char *async = getenv("TACHYON_TEST_ASYNC"); /* before the caller's flags */
    if (async && flags_set(flags_find("async-scheduling"), async, &o.flags, &err) < 0)
        fail_msg("TACHYON_TEST_ASYNC: %s", err.msg);
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

int tu_mtp_golden_load(const char *fixture, tu_golden_t *g) {
    char name[128];
    snprintf(name, sizeof name, "%s.mtp", fixture);
    tu_golden_load(name, g);
    const cJSON *chained = cJSON_GetObjectItem(g->json, "chained_steps");
    assert_true(cJSON_IsNumber(chained));
    return chained->valueint;
}

void tu_golden_free(tu_golden_t *g) {
    cJSON_Delete(g->json);
    free(g->logits);
}

void tu_batch_build(tu_batch_t *sb, const int32_t *const tok[TU_SEQS], const int from[TU_SEQS],
                    const int n[TU_SEQS], bool all_logits) {
    int t = 0, l = 0;
    for (int s = 0; s < TU_SEQS; s++) {
        sb->qstart[s] = t;
        for (int i = 0; i < n[s]; i++, t++) {
            assert_true(t < TU_TOKENS);
            sb->tokens[t] = tok[s][i];
            sb->positions[t] = from[s] + i;
            sb->slots[t] = (int64_t)s * TU_SEQ_BLOCKS * TU_BLOCK + from[s] + i;
            if (all_logits || i == n[s] - 1) sb->logit_rows[l++] = t;
        }
        sb->ctx[s] = from[s] + n[s];
        assert_true(sb->ctx[s] <= TU_SEQ_BLOCKS * TU_BLOCK);
        for (int k = 0; k < TU_SEQ_BLOCKS; k++)
            sb->tables[s * TU_SEQ_BLOCKS + k] = s * TU_SEQ_BLOCKS + k;
        sb->state[s] = s;
    }
    sb->qstart[TU_SEQS] = t;
    sb->b = (be_batch_t){.n_tokens = t,
                         .n_seqs = TU_SEQS,
                         .token_ids = sb->tokens,
                         .positions = sb->positions,
                         .slot_mapping = sb->slots,
                         .query_start = sb->qstart,
                         .context_len = sb->ctx,
                         .block_tables = sb->tables,
                         .block_table_stride = TU_SEQ_BLOCKS,
                         .n_logits = l,
                         .logit_rows = sb->logit_rows,
                         .state_slots = sb->state};
}

int tu_argmax(const float *x, int n, float *margin) {
    int best = sampler_argmax(x, n);
    if (margin) {
        float second = -INFINITY;
        for (int i = 0; i < n; i++)
            if (i != best && x[i] > second) second = x[i];
        *margin = x[best] - second;
    }
    return best;
}

double tu_max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > d) d = fabs((double)a[i] - b[i]);
    return d;
}

void tu_check_mtp_refusals(backend_t *be, const backend_options_t *off, const tu_batch_t *sb,
                           float *logits) {
    err_t err = {{0}};
    const int32_t bad[TU_SEQS] = {0, 7};
    assert_int_equal(be->ops->mtp_forward(be, &sb->b, bad, 1, logits, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "hidden row 7"));
    be->ops->configure(be, off);
    if (backend_kv_reserve(be, TU_SEQS * TU_SEQ_BLOCKS, TU_BLOCK, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(be->ops->mtp_forward(be, &sb->b, bad, 0, logits, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "without the MTP layers"));
}

void tu_got_free(tu_got_t *g) {
    for (int c = 0; c < TU_MAXC; c++) {
        free(g->ids[c]);
        free(g->text[c]);
    }
    memset(g, 0, sizeof *g);
}

void tu_got_event(tu_got_t *g, const engine_event_t *ev) {
    int c = ev->choice;
    assert_true(c >= 0 && c < TU_MAXC);
    assert_int_equal(g->n_finish[c], 0); /* nothing after a choice's FINISH */
    assert_non_null(ev->text);
    assert_int_equal(strlen(ev->text), ev->text_len);
    g->ids[c] = realloc(g->ids[c], (size_t)(g->n_ids[c] + ev->n_tokens + 1) * sizeof(int32_t));
    if (ev->n_tokens > 0)
        memcpy(g->ids[c] + g->n_ids[c], ev->token_ids, (size_t)ev->n_tokens * sizeof(int32_t));
    g->n_ids[c] += ev->n_tokens;
    g->text[c] = realloc(g->text[c], g->text_len[c] + ev->text_len + 1);
    memcpy(g->text[c] + g->text_len[c], ev->text, ev->text_len + 1);
    g->text_len[c] += ev->text_len;
    if (ev->type == ENGINE_EV_DELTA) {
        assert_int_equal(ev->n_tokens, 1); /* one token per step */
        g->n_deltas[c]++;
        return;
    }
    g->n_finish[c]++;
    g->reason[c] = ev->reason;
    g->completion[c] = ev->completion_tokens;
    g->prompt[c] = ev->prompt_tokens;
    g->cached[c] = ev->cached_tokens;
    g->stop_token[c] = ev->stop_token;
    snprintf(g->stop_str[c], sizeof g->stop_str[c], "%s", ev->stop_str ? ev->stop_str : "");
    snprintf(g->error[c], sizeof g->error[c], "%s", ev->error ? ev->error : "");
}

/* Reads the stream to its end (every choice finished), failing on a stall. */
void tu_got_collect(engine_stream_t *s, tu_got_t *g) {
    engine_event_t ev;
    int rc;
    while ((rc = engine_stream_wait(s, &ev, 20000)) > 0) {
        tu_got_event(g, &ev);
        engine_event_clear(&ev);
    }
    if (rc == 0) fail_msg("stream stalled");
}

sampling_params_t tu_mixed_params(int i) {
    sampling_params_t p;
    sampling_params_init(&p);
    p.max_tokens = 6 + (int)(rng_bits(77, 0, (uint64_t)i) % 24);
    switch (i % 8) {
        case 0: /* greedy, EOS ignored */
            p.temperature = 0.0f;
            p.ignore_eos = true;
            break;
        case 1: /* seeded sampling with logprobs */
            p.temperature = 0.8f;
            p.top_p = 0.9f;
            p.has_seed = true;
            p.seed = 100 + (uint64_t)i;
            p.logprobs = 2;
            break;
        case 2: /* stop strings (single letters: they do end some) and a stop id */
            p.temperature = 0.0f;
            p.stop[0] = strdup("e");
            p.stop[1] = strdup("s");
            p.n_stop = 2;
            p.stop_token_ids[0] = 17;
            p.n_stop_token_ids = 1;
            break;
        case 3: /* penalties: reads its own output, never ahead */
            p.temperature = 0.7f;
            p.has_seed = true;
            p.seed = 7;
            p.presence_penalty = 0.5f;
            p.frequency_penalty = 0.3f;
            break;
        case 4: /* two choices, forked after the prompt */
            p.n = 2;
            p.temperature = 1.0f;
            p.has_seed = true;
            p.seed = 3;
            break;
        case 5: /* min_tokens before EOS may end it */
            p.temperature = 1.0f;
            p.has_seed = true;
            p.seed = 11;
            p.min_tokens = 3;
            break;
        case 6: /* repetition penalty, greedy */
            p.temperature = 0.0f;
            p.repetition_penalty = 1.3f;
            break;
        default: /* one token */
            p.max_tokens = 1;
            p.temperature = 0.0f;
            break;
    }
    return p;
}

void tu_mixed_run(const char *fixture, const char *backend, const char *async,
                  const char *const *extra, int n_req, tu_got_t *out, stats_snapshot_t *snap) {
    const char *flags[16] = {"max-num-batched-tokens", "48", "max-model-len", "160",
                             "async-scheduling",       async};
    int nf = 6;
    for (const char *const *f = extra; f && *f && nf < 14; f += 2) {
        flags[nf++] = f[0];
        flags[nf++] = f[1];
    }
    flags[nf] = NULL;
    engine_t *eng = tu_open_engine(tu_fixture(fixture), backend, flags);
    engine_stream_t **s = calloc((size_t)n_req, sizeof *s);
    assert_non_null(s);
    int32_t prompt[96];
    for (int i = 0; i < n_req; i++) {
        int n = tu_prompt(i, prompt);
        for (int k = 0; k < n; k++) /* within tiny-qwen3.5's 1,088 ids too */
            prompt[k] %= 1024;
        sampling_params_t p = tu_mixed_params(i);
        s[i] = tu_submit(eng, prompt, n, &p);
        sampling_params_free(&p);
    }
    for (int i = 0; i < n_req; i++) {
        memset(&out[i], 0, sizeof out[i]);
        tu_got_collect(s[i], &out[i]);
        engine_stream_release(s[i]);
    }
    free(s);
    engine_stats(eng, snap);
    engine_close(eng);
}

void tu_mixed_expect_same(const char *what, int n_req, const tu_got_t *a, const tu_got_t *b) {
    for (int i = 0; i < n_req; i++) {
        sampling_params_t p = tu_mixed_params(i);
        for (int c = 0; c < p.n; c++) {
            if (a[i].n_ids[c] != b[i].n_ids[c] ||
                memcmp(a[i].ids[c], b[i].ids[c], (size_t)a[i].n_ids[c] * sizeof(int32_t)))
                fail_msg("%s: request %d choice %d: %d tokens in steps ahead, %d without (or "
                         "other ids)",
                         what, i, c, a[i].n_ids[c], b[i].n_ids[c]);
            assert_int_equal(a[i].text_len[c], b[i].text_len[c]);
            if (a[i].text_len[c]) assert_memory_equal(a[i].text[c], b[i].text[c], a[i].text_len[c]);
            assert_int_equal(a[i].n_finish[c], 1);
            assert_int_equal(b[i].n_finish[c], 1);
            assert_int_equal(a[i].reason[c], b[i].reason[c]);
            assert_int_equal(a[i].completion[c], b[i].completion[c]);
            assert_int_equal(a[i].completion[c], a[i].n_ids[c]);
            assert_int_equal(a[i].stop_token[c], b[i].stop_token[c]);
            assert_string_equal(a[i].stop_str[c], b[i].stop_str[c]);
        }
        sampling_params_free(&p);
    }
}
