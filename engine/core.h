/*
 * core: one replica of the engine (vLLM v1's EngineCore): a model, a backend instance (itself
 * tensor parallel over its ranks when asked), the paged KV cache and the engine thread that loops
 * schedule -> forward -> sample -> emit. engine.h's handle holds one core per data-parallel
 * replica and routes requests between them; nothing outside engine/ calls a core directly.
 *
 * Each function does for one replica what its engine.h namesake promises (core_submit is
 * engine_submit's contract, and so on); core_open takes the options of the whole engine and
 * opens replica `replica` of them (flags.data_parallel_size in all): its share of the CPU
 * threads, its own GPUs (device + replica * tensor_parallel_size onwards), its share of an
 * automatic CPU KV pool.
 */
#ifndef TACHYON_CORE_H
#define TACHYON_CORE_H

#include "engine.h"

typedef struct core core_t;

/* tok: a tokenizer to use instead of loading the model's (lent: the caller keeps it alive until
 * after core_close), or NULL. */
int core_open(const engine_opts_t *o, int replica, tokenizer_t *tok, core_t **out, err_t *err);
void core_close(core_t *c);

const model_config_t *core_model_config(const core_t *c);
/* The tokenizer the core loaded (NULL: none), now the caller's: the core keeps using it, and the
 * caller frees it after core_close, so that it outlives the core (engine.c keeps one tokenizer
 * across reloads: streams and HTTP requests hold it). */
tokenizer_t *core_give_tokenizer(core_t *c);
/* The flags' current values (live and rebuild changes applied). */
void core_flags(core_t *c, flag_values_t *out);
int core_chat_format(const core_t *c);
void core_describe_backend(const core_t *c, char *buf, size_t size);
int core_devices(const core_t *c, backend_device_t *out, int max);

int core_submit(core_t *c, const engine_request_t *req, engine_stream_t **out, err_t *err);
int core_cancel(core_t *c, const char *id);
void core_stats(core_t *c, stats_snapshot_t *out);
int core_flag_set_async(core_t *c, const char *name, const char *value, engine_flag_done_fn done,
                        void *ctx, err_t *err);
bool core_alive(core_t *c);

/* Requests submitted to this replica and not yet finished (every choice ended): its share of
 * the outstanding work, which the router balances. */
int core_outstanding(core_t *c);

#endif
