/*
 * statedir: where the console keeps what outlives a session (the REPL history, benchmark
 * results): $XDG_STATE_HOME/tachyon, or ~/.local/state/tachyon when XDG_STATE_HOME is unset,
 * empty or not absolute (as the XDG spec says), and mkdir -p for such paths (mode 0700).
 *
 *     char path[4096];
 *     if (statedir_path("results", path, sizeof path, &err) < 0) show(err.msg);
 *     else if (statedir_mkdirs(path, &err) < 0) show(err.msg);   // .../tachyon/results
 */
#ifndef TACHYON_STATEDIR_H
#define TACHYON_STATEDIR_H

#include <stddef.h>

#include "err.h"

/* "<state dir>/tachyon/<leaf>" into buf, creating <state dir>/tachyon (not leaf itself).
 * Returns -1 with err set (the message starts with leaf) when HOME is unknown, the path does not
 * fit in size, or a directory cannot be created. */
int statedir_path(const char *leaf, char *buf, size_t size, err_t *err);

/* mkdir -p path with mode 0700 for what it creates. A component that exists but is not a
 * directory is an error naming it. */
int statedir_mkdirs(const char *path, err_t *err);

#endif
