#include "ui_queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct ui_queue {
    pthread_mutex_t mu;
    ui_event_t *ring; /* [cap] */
    int cap, head, n;
    int fd; /* eventfd, non-blocking */
};

ui_queue_t *ui_queue_create(int cap, err_t *err) {
    if (cap < 1) {
        err_set(err, "ui queue: capacity must be positive, got %d", cap);
        return NULL;
    }
    ui_queue_t *q = calloc(1, sizeof *q);
    if (!q || !(q->ring = calloc((size_t)cap, sizeof *q->ring))) {
        if (q) free(q);
        err_set(err, "ui queue: out of memory");
        return NULL;
    }
    q->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->fd < 0) {
        err_set(err, "ui queue: eventfd: %s", strerror(errno));
        free(q->ring);
        free(q);
        return NULL;
    }
    pthread_mutex_init(&q->mu, NULL);
    q->cap = cap;
    return q;
}

void ui_queue_destroy(ui_queue_t *q) {
    if (!q) return;
    close(q->fd);
    pthread_mutex_destroy(&q->mu);
    free(q->ring);
    free(q);
}

void ui_queue_kick(ui_queue_t *q) {
    uint64_t one = 1;
    ssize_t n = write(q->fd, &one, sizeof one);
    (void)n; /* a full counter is still readable: nothing is lost */
}

int ui_queue_push(ui_queue_t *q, const ui_event_t *ev) {
    pthread_mutex_lock(&q->mu);
    if (q->n == q->cap) {
        pthread_mutex_unlock(&q->mu);
        return -1;
    }
    bool was_empty = q->n == 0;
    q->ring[(q->head + q->n) % q->cap] = *ev;
    q->n++;
    pthread_mutex_unlock(&q->mu);
    if (was_empty) ui_queue_kick(q);
    return 0;
}

bool ui_queue_pop(ui_queue_t *q, ui_event_t *ev) {
    pthread_mutex_lock(&q->mu);
    bool got = q->n > 0;
    if (got) {
        *ev = q->ring[q->head];
        q->head = (q->head + 1) % q->cap;
        q->n--;
    }
    pthread_mutex_unlock(&q->mu);
    return got;
}

int ui_queue_fd(const ui_queue_t *q) {
    return q->fd;
}

void ui_queue_ack(ui_queue_t *q) {
    uint64_t v;
    ssize_t n = read(q->fd, &v, sizeof v);
    (void)n; /* EAGAIN: nothing was pending */
}
