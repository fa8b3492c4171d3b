/*
 * err: one error message carried out of library code.
 *
 * Library functions return 0 on success and a negative value on failure; when they fail they
 * fill an err_t with a one-line, human-readable message that names the file and the problem.
 * Only main() prints it and exits.
 *
 *     err_t err = {0};
 *     if (st_open_dir(dir, &st, &err) < 0) {
 *         fprintf(stderr, "tachyon: %s\n", err.msg);
 *         return 1;
 *     }
 */
#ifndef TACHYON_ERR_H
#define TACHYON_ERR_H

#include <stddef.h>

typedef struct err {
    char msg[1024];
} err_t;

/* Formats the message into err (which may be NULL) and returns -1, so that callers can write
 * `return err_set(err, "...")`. A later err_set overwrites an earlier message. */
int err_set(err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to the message already in err (a no-op when err is NULL) and returns -1.
 * Used to add context (the file name) on the way up. */
int err_prefix(err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
