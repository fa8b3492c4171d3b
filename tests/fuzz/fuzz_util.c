#include "fuzz_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *fz_fixture(const char *rel) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", TACHYON_FIXTURES, rel);
    return path;
}

char *fz_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz: cannot open %s\n", path);
        abort();
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) abort();
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

int fz_split(const uint8_t *data, size_t size, const char *sep, fz_part_t *parts, int max) {
    size_t seplen = strlen(sep);
    int n = 0;
    const uint8_t *p = data, *end = data + size;
    while (n < max - 1) {
        const uint8_t *s =
            seplen <= (size_t)(end - p) ? memmem(p, (size_t)(end - p), sep, seplen) : NULL;
        if (!s) break;
        parts[n++] = (fz_part_t){p, (size_t)(s - p)};
        p = s + seplen;
    }
    parts[n++] = (fz_part_t){p, (size_t)(end - p)};
    return n;
}

char *fz_strndup(const uint8_t *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static char scratch[4096];

static void remove_scratch(void) {
    DIR *d = opendir(scratch);
    if (d) {
        struct dirent *e;
        char path[8192];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(path, sizeof path, "%s/%s", scratch, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(scratch);
}

const char *fz_scratch_dir(void) {
    if (scratch[0]) return scratch;
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/tachyon-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(scratch)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(remove_scratch);
    return scratch;
}

void fz_write(const char *dir, const char *name, const void *p, size_t n) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (n && write(fd, p, n) != (ssize_t)n)) {
        perror(path);
        abort();
    }
    close(fd);
}

bool fz_utf8_valid(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
        if (len == 0 || c > 0xF4 || i + (size_t)len > n) return false;
        for (int k = 1; k < len; k++)
            if ((p[i + k] & 0xC0) != 0x80) return false;
        if (c == 0xE0 && p[i + 1] < 0xA0) return false;  /* overlong */
        if (c == 0xED && p[i + 1] >= 0xA0) return false; /* surrogate */
        if (c == 0xF0 && p[i + 1] < 0x90) return false;  /* overlong */
        if (c == 0xF4 && p[i + 1] >= 0x90) return false; /* beyond U+10FFFF */
        i += (size_t)len;
    }
    return true;
}

void fz_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    fprintf(stderr, "\n%s:%d: property failed: %s\n  ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

/* mdir.c's table of the model compiled into tachyon: the harnesses read fixtures from disk, so
 * the fuzz build embeds none (mdir_open("embedded") finds no files). */
#include "embedded.h"
const embedded_file_t embedded_model_files[] = {{0, 0, 0}};
