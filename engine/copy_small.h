/* copy_small: memcpy for the few bytes of a token or a delta, inline. A call to the library's
 * memcpy costs more than the copy itself at these sizes; this handles 0..16 bytes with at most
 * two overlapping loads and stores (never touching a byte outside either range) and leaves
 * longer copies to memcpy.
 *
 *     copy_small(out + o, token_bytes, n);
 */
#ifndef TACHYON_COPY_SMALL_H
#define TACHYON_COPY_SMALL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void copy_small(void *dst, const void *src, size_t n) {
    char *d = dst;
    const char *s = src;
    if (n >= 8) {
        if (n > 16) {
            memcpy(d, s, n);
            return;
        }
        uint64_t a, b; /* fixed-size memcpys compile to plain loads and stores */
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
    } else if (n > 0) {
        char a = s[0], b = s[n / 2], c = s[n - 1];
        d[0] = a;
        d[n / 2] = b;
        d[n - 1] = c;
    }
}

#endif
