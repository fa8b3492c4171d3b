#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(err_t *err, const char *fmt, ...) {
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int err_prefix(err_t *err, const char *fmt, ...) {
    if (!err) return -1;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix - 2, fmt, ap);
    va_end(ap);
    strcat(prefix, ": ");
    size_t np = strlen(prefix), nm = strnlen(err->msg, sizeof err->msg - 1);
    if (np + nm > sizeof err->msg - 1) nm = sizeof err->msg - 1 - np;
    memmove(err->msg + np, err->msg, nm);
    memcpy(err->msg, prefix, np);
    err->msg[np + nm] = '\0';
    return -1;
}
