/*
 * workers: the server's pool for work too long for an HTTP thread (see server_int.h). A FIFO of
 * jobs under one mutex; each job is a request whose connection is suspended until it is done.
 */
#include <pthread.h>
#include <stdlib.h>

#include "server_int.h"

struct srv_workers {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    req_t *head, *tail; /* linked through req_t.work_next */
    bool stop;
    int n_threads;
    pthread_t *threads;
};

static void *worker_main(void *arg) {
    srv_workers_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        req_t *r = w->head;
        if (!r) break; /* stopping, and nothing is left */
        w->head = r->work_next;
        if (!w->head) w->tail = NULL;
        pthread_mutex_unlock(&w->mu);
        srv_work_run(r);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

srv_workers_t *srv_workers_create(int n) {
    srv_workers_t *w = calloc(1, sizeof *w);
    if (!w || !(w->threads = calloc((size_t)n, sizeof *w->threads))) {
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (; w->n_threads < n; w->n_threads++)
        if (pthread_create(&w->threads[w->n_threads], NULL, worker_main, w) != 0) break;
    if (w->n_threads == 0) {
        srv_workers_destroy(w);
        return NULL;
    }
    return w;
}

void srv_workers_push(srv_workers_t *w, req_t *r) {
    r->work_next = NULL;
    pthread_mutex_lock(&w->mu);
    if (w->tail)
        w->tail->work_next = r;
    else
        w->head = r;
    w->tail = r;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void srv_workers_destroy(srv_workers_t *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->n_threads; i++)
        pthread_join(w->threads[i], NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->threads);
    free(w);
}
