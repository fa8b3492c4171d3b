/*
 * fuzz_util: what the libFuzzer harnesses share: fixture paths and files, cutting one input into
 * parts, a scratch directory per process, and property checks that abort (libFuzzer then saves
 * the input as a crash).
 *
 *     char *text = fz_read(fz_fixture("tiny-qwen3/tokenizer.json"), &len);
 *     fz_part_t parts[4];
 *     int n = fz_split(data, size, "\n#file\n", parts, 4);
 *     FZ_CHECK(x == y, "what went wrong: %d", x);
 */
#ifndef TACHYON_FUZZ_UTIL_H
#define TACHYON_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The path of a file under tests/fixtures (a static buffer, overwritten by the next call). */
const char *fz_fixture(const char *rel);

/* The whole file, NUL-terminated (*len excludes the NUL); aborts when it cannot be read, since a
 * harness without its fixture would fuzz nothing. */
char *fz_read(const char *path, size_t *len);

/* A piece of the input. */
typedef struct fz_part {
    const uint8_t *p;
    size_t n;
} fz_part_t;

/* Cuts data at each occurrence of sep into at most max parts (the last one keeps any further
 * separators); returns the number of parts (at least 1). */
int fz_split(const uint8_t *data, size_t size, const char *sep, fz_part_t *parts, int max);

/* A NUL-terminated copy (the parsers that take C strings); the caller frees it. */
char *fz_strndup(const uint8_t *p, size_t n);

/* A directory of this process's own under $TMPDIR (or /tmp), created once, removed at exit. */
const char *fz_scratch_dir(void);

/* Writes n bytes to dir/name, replacing the file. */
void fz_write(const char *dir, const char *name, const void *p, size_t n);

/* Whether p[0..n) is valid UTF-8 (no surrogates, no overlong forms). */
bool fz_utf8_valid(const uint8_t *p, size_t n);

/* A property check: prints the message and aborts when cond is false. */
#define FZ_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) fz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                              \
    } while (0)

_Noreturn void fz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
