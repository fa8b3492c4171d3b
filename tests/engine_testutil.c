#include "engine_testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "rng.h"

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

sampling_params_t tu_greedy(int max_tokens) {
    sampling_params_t p;
    sampling_params_init(&p);
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}
