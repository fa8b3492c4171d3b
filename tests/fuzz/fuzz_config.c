/*
 * config.json of every architecture (engine/model.c and its homes in engine/arch/: model_type
 * picks the parser), then what the engine derives from an accepted config: the description,
 * the parameter count and the lazily generated dummy weights' shapes (--load-format dummy with
 * the directory's config.json). The same text also goes through generation_config.json's
 * parser (engine/genconfig.c), which reads the same kind of file from the same directory.
 */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "genconfig.h"
#include "model.h"
#include "weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fz_strndup(data, size);
    model_config_t *cfg = malloc(sizeof *cfg);
    err_t err;
    if (model_config_parse(text, "config.json", cfg, &err) == 0) {
        FZ_CHECK(cfg->arch && cfg->n_layers >= 1 && cfg->n_layers <= MODEL_MAX_LAYERS,
                 "accepted %d layers", cfg->n_layers);
        FZ_CHECK(cfg->hidden_size > 0 && cfg->n_heads > 0 && cfg->n_kv_heads > 0 &&
                     cfg->head_dim > 0 && cfg->vocab_size > 0 && cfg->intermediate_size > 0,
                 "accepted a dimension <= 0: %s", text);
        char desc[512];
        model_config_describe(cfg, desc, sizeof desc);
        model_weights_t *w;
        if (weights_dummy_lazy(cfg, 1, &w, &err) == 0) {
            (void)weights_bytes(w);
            weights_destroy(w);
        }
    }
    genconfig_t gc;
    if (genconfig_parse(text, "generation_config.json", &gc, &err) == 0) {
        int ids[64];
        FZ_CHECK(genconfig_stop_ids(&gc, 7, ids, 64) <= 64, "stop ids beyond max");
    }
    free(cfg);
    free(text);
    return 0;
}
