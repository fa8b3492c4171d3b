/* bench_err_set: the benchmark library's error messages (bench/ does not use engine/err.h). */
#include <stdarg.h>
#include <stdio.h>

#include "bench.h"

int bench_err_set(bench_err_t *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}
