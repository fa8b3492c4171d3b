/*
 * ui_log: the console's stderr. The engine, its backends and the server report on stderr (the
 * KV-cache size, a max-model-len fitted to the pool, a CUDA graph capture that failed, an HTTP
 * error). Under the console such a line went to the terminal before the screen started, to be
 * seen only after quitting, or was drawn over the screen. ui_log_start() points fd 2 at a pipe;
 * a reader thread splits what arrives into lines and hands each to a callback (the console shows
 * it in the output pane) and, while echo is on, copies the bytes to the original stderr (during
 * start-up, and for the whole session when stderr is a file: a log keeps everything).
 *
 *     ui_log_t *log = ui_log_start(on_line, ctx, &err);  // before the engine opens
 *     ... once curses owns the terminal:
 *     ui_log_echo(log, !isatty(ui_log_fd(log)));
 *     ...
 *     ui_log_stop(log);   // fd 2 is the original stderr again, the reader has handed on all
 *
 * The callback runs on the reader thread and must not block (the console posts an event).
 * Lines longer than UI_LOG_LINE bytes are handed on in pieces. The reader thread is started
 * with the caller's signal mask.
 */
#ifndef TACHYON_UI_LOG_H
#define TACHYON_UI_LOG_H

#include <stdbool.h>

#include "err.h"

#define UI_LOG_LINE 500 /* bytes of one line handed on (without its '\n') */

typedef struct ui_log ui_log_t;

/* Called with each line (NUL-terminated, without its '\n'). */
typedef void (*ui_log_fn)(void *user, const char *line);

/* Captures fd 2 with echo on. NULL with err set when no pipe or thread can be had (stderr is
 * then left as it was). */
ui_log_t *ui_log_start(ui_log_fn fn, void *user, err_t *err);

/* Turns the copy to the original stderr on or off (any thread). */
void ui_log_echo(ui_log_t *log, bool on);

/* The original stderr (a descriptor owned by log, valid until ui_log_stop). */
int ui_log_fd(const ui_log_t *log);

/* Puts the original stderr back on fd 2, waits for the reader to hand on what was written
 * before, and frees log. NULL is a no-op. */
void ui_log_stop(ui_log_t *log);

#endif
