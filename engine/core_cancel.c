/*
 * core_cancel: the two ways a request is cancelled. A stream's reader cancels its own request
 * (engine_stream_cancel: the stream queues a notice through core_on_cancel); an operator
 * cancels anyone's request by its id (engine_cancel: the console's requests table). Both are
 * taken on the engine thread with the rest of the news (core_take_cancels), and the request
 * ends as any cancel does: finish reason abort for every unfinished choice, which its client
 * sees on its stream ("finish_reason": "abort" through the API).
 */
#include <stdlib.h>
#include <string.h>

#include "core_int.h"
#include "output.h"

/* An id to cancel, queued under the engine's lock for the engine thread. */
struct id_cancel {
    struct id_cancel *next;
    char id[];
};

void core_on_cancel(void *ctx, engine_stream_t *s) {
    core_t *e = ctx;
    pthread_mutex_lock(&e->mu);
    s->next_cancel = e->cancels;
    e->cancels = s;
    tell_engine(e);
    pthread_mutex_unlock(&e->mu);
}

int core_cancel(core_t *e, const char *id) {
    if (!id || !*id) return -1;
    size_t n = strlen(id);
    if (n >= STATS_ID_LEN) n = STATS_ID_LEN - 1; /* as the snapshot cut it */
    id_cancel_t *c = malloc(sizeof *c + n + 1);
    if (!c) return -1;
    memcpy(c->id, id, n);
    c->id[n] = '\0';
    pthread_mutex_lock(&e->mu);
    c->next = e->id_cancels;
    e->id_cancels = c;
    tell_engine(e);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

/* Whether a request's id is `id` as the snapshot shows it (cut to STATS_ID_LEN - 1 bytes). */
static bool id_matches(const eng_req_t *req, const char *id) {
    if (!req->id) return false;
    size_t n = strlen(id);
    return !strncmp(req->id, id, n) && (req->id[n] == '\0' || n == STATS_ID_LEN - 1);
}

void core_take_cancels(core_t *e, engine_stream_t *list, id_cancel_t *ids) {
    while (list) {
        engine_stream_t *s = list;
        list = s->next_cancel;
        if (s->req) output_end_request(e, s->req, ENGINE_FINISH_ABORT, NULL);
        stream_unref(s);
    }
    while (ids) {
        id_cancel_t *c = ids;
        ids = c->next;
        eng_req_t *req = e->live;
        while (req) {
            eng_req_t *next = req->next; /* output_end_request may take req off the list */
            if (req->n_finished < req->n && id_matches(req, c->id))
                output_end_request(e, req, ENGINE_FINISH_ABORT, NULL);
            req = next;
        }
        free(c);
    }
}
