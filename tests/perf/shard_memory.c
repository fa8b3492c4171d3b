/* Memory per GPU of the seeds' models in FP8 at tensor-parallel sizes 1, 2, 4 and 8 (and expert
 * parallel for the MoE model), as engine/shard_plan computes it from the presets' real shapes:
 * one shard_plan_describe line per (model, size). Not a test: the numbers of bench/RESULTS.md's
 * memory table.
 *
 * usage: shard_memory [PRESET...]   (default: qwen3-14b qwen3-32b qwen3-235b-a22b) */
#include <stdio.h>

#include "model.h"
#include "shard_plan.h"

int main(int argc, char **argv) {
    static const char *const seeds[] = {"qwen3-14b", "qwen3-32b", "qwen3-235b-a22b"};
    int n = argc > 1 ? argc - 1 : 3;
    for (int m = 0; m < n; m++) {
        const char *name = argc > 1 ? argv[m + 1] : seeds[m];
        model_config_t cfg;
        err_t err;
        if (model_config_preset(name, true, &cfg, &err) < 0) {
            fprintf(stderr, "shard_memory: %s\n", err.msg);
            return 1;
        }
        for (int tp = 1; tp <= 8; tp *= 2) {
            char line[1024];
            shard_plan_describe(&cfg, tp, line, sizeof line);
            printf("%s FP8, TP %d: %s\n", name, tp, line);
        }
    }
    return 0;
}
