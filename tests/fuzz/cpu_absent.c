/* The harnesses drive the engine on the null backend: the CPU backend's compute (engine/cpu/, a
 * fifth of this build's compile time) parses nothing, so the fuzz library leaves it out and this
 * table stands in for the one engine/backend.c lists, refusing to open. */
#include "backend.h"

static int cpu_absent_create(const backend_options_t *opts, const model_weights_t *w,
                             backend_t **out, err_t *err) {
    (void)opts;
    (void)w;
    *out = NULL;
    return err_set(err, "backend cpu: not built into the fuzz harnesses (null is)");
}

const backend_ops_t cpu_backend_ops = {.name = "cpu", .create = cpu_absent_create};
