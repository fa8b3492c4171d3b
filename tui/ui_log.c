/* ui_log: see ui_log.h. */
#include "ui_log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ui_log {
    int orig;    /* the original stderr (a dup) */
    int read_fd; /* the pipe's read end; fd 2 is its write end */
    atomic_bool echo;
    ui_log_fn fn;
    void *user;
    pthread_t thread;
    char line[UI_LOG_LINE + 1];
    size_t len;
};

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return; /* the original stderr is gone: nothing to do about it */
        p += k;
        n -= (size_t)k;
    }
}

static void hand_on(ui_log_t *log) {
    log->line[log->len] = '\0';
    log->fn(log->user, log->line);
    log->len = 0;
}

static void *reader(void *arg) {
    ui_log_t *log = arg;
    char buf[4096];
    for (;;) {
        ssize_t n = read(log->read_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; /* EOF: ui_log_stop put the original back on fd 2 */
        if (atomic_load(&log->echo)) write_all(log->orig, buf, (size_t)n);
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                hand_on(log);
                continue;
            }
            log->line[log->len++] = buf[i];
            if (log->len == UI_LOG_LINE) hand_on(log);
        }
    }
    if (log->len) hand_on(log);
    return NULL;
}

ui_log_t *ui_log_start(ui_log_fn fn, void *user, err_t *err) {
    ui_log_t *log = calloc(1, sizeof *log);
    int p[2] = {-1, -1};
    if (!log) {
        err_set(err, "stderr capture: out of memory");
        return NULL;
    }
    log->fn = fn;
    log->user = user;
    atomic_init(&log->echo, true);
    fflush(stderr);
    if ((log->orig = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3)) < 0 || pipe2(p, O_CLOEXEC) < 0) {
        err_set(err, "stderr capture: %s", strerror(errno));
        goto fail;
    }
    log->read_fd = p[0];
    if (pthread_create(&log->thread, NULL, reader, log) != 0) {
        err_set(err, "stderr capture: cannot start its thread");
        goto fail;
    }
    dup2(p[1], STDERR_FILENO); /* fd 2 is now the only write end */
    close(p[1]);
    return log;
fail:
    if (p[0] >= 0) close(p[0]);
    if (p[1] >= 0) close(p[1]);
    if (log->orig >= 0) close(log->orig);
    free(log);
    return NULL;
}

void ui_log_echo(ui_log_t *log, bool on) {
    atomic_store(&log->echo, on);
}

int ui_log_fd(const ui_log_t *log) {
    return log->orig;
}

void ui_log_stop(ui_log_t *log) {
    if (!log) return;
    fflush(stderr);
    dup2(log->orig, STDERR_FILENO); /* closes the pipe's last write end: the reader sees EOF */
    pthread_join(log->thread, NULL);
    close(log->read_fd);
    close(log->orig);
    free(log);
}
