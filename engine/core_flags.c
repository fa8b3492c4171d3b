/*
 * core_flags: reading and changing a replica's flags from other threads (engine.h's
 * engine_flag_get/set_async for one core): live flags take effect at the next step, rebuild
 * flags are queued for the engine thread, which answers each change through its callback.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core_int.h"

void core_flags(core_t *e, flag_values_t *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->flags;
    pthread_mutex_unlock(&e->mu);
}

int core_flag_set_async(core_t *e, const char *name, const char *value, engine_flag_done_fn done,
                        void *ctx, err_t *err) {
    const flag_def_t *d = flags_find(name);
    if (!d) return err_set(err, "unknown flag \"%s\"", name ? name : "");
    if (d->apply == FLAG_RELOAD)
        return err_set(err, "%s needs a restart: it changes the model or its parallel layout",
                       d->name);
    flag_change_t *c = NULL;
    if (d->apply == FLAG_REBUILD) {
        c = calloc(1, sizeof *c);
        if (!c || !(c->value = strdup(value ? value : ""))) {
            free(c);
            return err_set(err, "out of memory");
        }
        *c = (flag_change_t){.def = d, .value = c->value, .done = done, .ctx = ctx};
    }
    pthread_mutex_lock(&e->mu);
    flag_values_t nf = e->flags;
    int rc = flags_set(d, value, &nf, err);
    if (rc == 0 && e->has_state && nf.enable_prefix_caching)
        rc = err_set(err, "enable-prefix-caching: off for %s (hybrid model): %s",
                     e->cfg->model_type, ENGINE_NO_PREFIX_CACHING_WHY);
    if (rc == 0 && d->apply == FLAG_REBUILD) rc = check_rebuild_flags(e, &nf, err);
    if (rc == 0 && e->closing) rc = err_set(err, "the engine is closing");
    if (rc == 0) {
        rc = 1;
        if (d->apply == FLAG_LIVE && flags_differ(d, &nf, &e->flags)) {
            e->flags = nf;
            e->flags_gen++;
            tell_engine(e);
        } else if (d->apply == FLAG_REBUILD) {
            /* queued even when it looks unchanged: an earlier change may still be queued */
            if (e->changes_tail)
                e->changes_tail->next = c;
            else
                e->changes = c;
            e->changes_tail = c;
            c = NULL;
            rc = 0;
            tell_engine(e);
        }
    }
    pthread_mutex_unlock(&e->mu);
    if (c) {
        free(c->value);
        free(c);
    }
    return rc;
}
