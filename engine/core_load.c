/*
 * core_load: a core's text side (tokenizer, chat format, generation config, stop ids), and what
 * engine_open reports as it goes (engine_opts_t.on_load), so that a console shows the model
 * loading (the shards mapped, the weights' bytes as the backend takes them, the KV cache's size)
 * instead of a blank screen.
 */
#include <string.h>

#include "core_int.h"
#include "mdir.h"
#include "scripted.h"

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

static int load_tokenizer(core_t *e, const char *path, tokenizer_t *lent, err_t *err) {
    mdir_t *dir = weights_dir(e->w);
    if (path) {
        if (mdir_open(path, &e->tok_dir, err) < 0) return err_prefix(err, "--tokenizer");
        if (!mdir_has(e->tok_dir, "tokenizer.json"))
            return err_set(err, "--tokenizer %s: no tokenizer.json there", path);
        dir = e->tok_dir;
    }
    if (!dir) return 0;
    if (lent)
        e->tok = lent, e->tok_lent = true;
    else if (mdir_has(dir, "tokenizer.json") && tok_load(dir, &e->tok, err) < 0)
        return -1;
    if (e->tok && tok_vocab_size(e->tok) > e->cfg->vocab_size)
        return err_set(err, "%stokenizer has %d ids but the model's vocab_size is %d",
                       path ? "--tokenizer: the " : "the ", (int)tok_vocab_size(e->tok),
                       (int)e->cfg->vocab_size);
    chat_format_t fmt;
    err_t ignored;
    if (chat_detect_dir(dir, &fmt, &ignored) == 0) e->chat_format = (int)fmt;
    return 0;
}

int core_load_text(core_t *e, const char *tokenizer_path, tokenizer_t *lent, err_t *err) {
    mdir_t *dir = weights_dir(e->w);
    e->chat_format = -1;
    memset(&e->gc, 0, sizeof e->gc);
    e->gc.bos_token_id = e->gc.pad_token_id = -1;
    if (load_tokenizer(e, tokenizer_path, lent, err) < 0) return -1;
    if (dir && genconfig_load(dir, &e->gc, err) < 0) return -1;
    int primary = e->tok ? tok_eos_id(e->tok) : -1;
    if (primary < 0) primary = e->cfg->eos_token_id;
    e->n_stop_ids = genconfig_stop_ids(&e->gc, primary, e->stop_ids, GENCONFIG_MAX_EOS + 1);
    if (e->tok) e->max_chunk = tok_stream_max_chunk(e->tok);
    e->step_delay_us = scripted_step_delay_us();
    return scripted_load(e->tok, &e->scripted, err);
}
