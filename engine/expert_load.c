#include "expert_load.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct expert_load {
    backend_t *be;
    stats_t *st;
    int n_layers, n_experts; /* the model's */
    int n_rows;              /* MoE layers */
    int row_layer[STATS_EXPERT_LAYERS];
    uint64_t *all;  /* [n_layers][n_experts] as the backend gives them */
    uint64_t *rows; /* [n_rows][n_experts] */
    double last;    /* engine_now() of the last record */
};

expert_load_t *expert_load_open(const model_config_t *cfg, backend_t *be, stats_t *st, double now) {
    if (cfg->n_experts < 1 || !be->ops->expert_load) return NULL;
    expert_load_t *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->be = be;
    x->st = st;
    x->n_layers = cfg->n_layers;
    x->n_experts = cfg->n_experts;
    for (int l = 0; l < cfg->n_layers && x->n_rows < STATS_EXPERT_LAYERS; l++)
        if (cfg->layer[l].mlp == MLP_MOE) x->row_layer[x->n_rows++] = l;
    x->all = calloc((size_t)x->n_layers * (size_t)x->n_experts, sizeof *x->all);
    x->rows = calloc((size_t)x->n_rows * (size_t)x->n_experts, sizeof *x->rows);
    if (!x->all || !x->rows ||
        stats_experts_init(st, x->n_rows, x->n_experts, x->row_layer, now) < 0) {
        expert_load_free(x);
        return NULL;
    }
    x->last = now;
    return x;
}

void expert_load_poll(expert_load_t *x, bool force, double now) {
    if (!x || (!force && now - x->last < STATS_EXPERT_REFRESH)) return;
    x->last = now;
    err_t err = {{0}};
    if (x->be->ops->expert_load(x->be, x->all, &err) < 0) return; /* counts only: skip it */
    size_t n = (size_t)x->n_experts;
    for (int r = 0; r < x->n_rows; r++)
        memcpy(x->rows + (size_t)r * n, x->all + (size_t)x->row_layer[r] * n, n * sizeof *x->all);
    stats_record_experts(x->st, x->rows, now);
}

void expert_load_free(expert_load_t *x) {
    if (!x) return;
    free(x->all);
    free(x->rows);
    free(x);
}
