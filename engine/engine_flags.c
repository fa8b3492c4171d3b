/*
 * engine_flags: reading and changing the engine's flags from other threads (engine.h): live
 * flags take effect at the next step, rebuild flags are queued for the engine thread, which
 * answers each change through its callback; engine_flag_set waits for that answer.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

int engine_flag_get(engine_t *e, const char *name, char *buf, size_t size, err_t *err) {
    const flag_def_t *d = flags_find(name);
    if (!d) return err_set(err, "unknown flag \"%s\"", name ? name : "");
    pthread_mutex_lock(&e->mu);
    flags_format(d, &e->flags, buf, size);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

int engine_flag_set_async(engine_t *e, const char *name, const char *value,
                          engine_flag_done_fn done, void *ctx, err_t *err) {
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

/* engine_flag_set waits for its change here. */
typedef struct flag_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rc;
    err_t err;
} flag_waiter_t;

static void flag_answered(void *ctx, int rc, const char *msg) {
    flag_waiter_t *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->rc = rc;
    if (rc < 0) err_set(&w->err, "%s", msg);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int engine_flag_set(engine_t *e, const char *name, const char *value, err_t *err) {
    flag_waiter_t w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    int rc = engine_flag_set_async(e, name, value, flag_answered, &w, err);
    if (rc == 0) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        rc = w.rc;
        if (rc < 0 && err) *err = w.err;
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return rc < 0 ? -1 : 0;
}
