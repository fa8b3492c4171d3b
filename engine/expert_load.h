/*
 * expert_load: the engine thread's side of the expert-load statistics (stats.h,
 * stats_experts_t): it polls the backend's cumulative per-expert counts (backend_ops_t
 * .expert_load) every STATS_EXPERT_REFRESH seconds and when the engine goes idle, keeps the rows
 * of the MoE layers and records them. Nothing for a dense model. Internal to the engine.
 *
 *     expert_load_t *x = expert_load_open(cfg, be, stats, engine_now());   // NULL: nothing to do
 *     expert_load_poll(x, false, engine_now());                             // after a step
 *     expert_load_poll(x, true, engine_now());                              // going idle
 *     expert_load_free(x);
 */
#ifndef TACHYON_EXPERT_LOAD_H
#define TACHYON_EXPERT_LOAD_H

#include <stdbool.h>

#include "backend.h"
#include "model.h"
#include "stats.h"

typedef struct expert_load expert_load_t;

/* Starts tracking when the model has MoE layers and the backend counts (NULL otherwise, also
 * when the cells do not fit the snapshot or memory is short: the engine runs without). */
expert_load_t *expert_load_open(const model_config_t *cfg, backend_t *be, stats_t *st, double now);

/* Records the backend's counts when the last record is at least STATS_EXPERT_REFRESH old, or
 * always with force. x may be NULL. */
void expert_load_poll(expert_load_t *x, bool force, double now);

void expert_load_free(expert_load_t *x);

#endif
