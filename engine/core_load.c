/*
 * core_load: what engine_open reports as it goes (engine_opts_t.on_load), so that a console
 * shows the model loading (the shards mapped, the weights' bytes as the backend takes them, the
 * KV cache's size) instead of a blank screen.
 */
#include <string.h>

#include "core_int.h"

void load_report_init(load_report_t *r, const engine_opts_t *o) {
    memset(r, 0, sizeof *r);
    r->fn = o->on_load;
    r->user = o->load_user;
    r->t0 = engine_now();
}

void load_report(load_report_t *r, engine_load_phase_t phase, const model_weights_t *w) {
    engine_load_t *l = &r->l;
    l->phase = phase;
    if (w && !l->model_type) {
        const model_config_t *c = weights_config(w);
        l->model_type = c->model_type;
        l->n_layers = c->n_layers;
        l->shards = weights_shards(w);
        l->bytes_total = weights_bytes(w);
    }
    if (phase >= ENGINE_LOAD_KV) l->bytes = l->bytes_total;
    l->t = engine_now() - r->t0;
    if (r->fn) r->fn(r->user, l);
}

void load_report_bytes(void *user, uint64_t done, uint64_t total) {
    load_report_t *r = user;
    r->l.bytes = done;
    if (total) r->l.bytes_total = total;
    load_report(r, ENGINE_LOAD_WEIGHTS, NULL);
}
