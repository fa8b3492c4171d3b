/*
 * testutil: helpers shared by the C tests: temporary directories, files, fixture paths.
 * Failures abort the test (they mean a broken environment, not a finding).
 *
 *     char *dir = tu_tmpdir();
 *     tu_write_text(dir, "config.json", "{...}");
 *     ...
 *     tu_rmrf(dir); free(dir);
 */
#ifndef TACHYON_TESTUTIL_H
#define TACHYON_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A new empty directory under $TMPDIR (or /tmp). The caller frees the string. */
char *tu_tmpdir(void);

/* Writes a file (creating or replacing it) inside dir. */
void tu_write(const char *dir, const char *name, const void *data, size_t len);
void tu_write_text(const char *dir, const char *name, const char *text);

/* Reads a whole file into a NUL-terminated buffer the caller frees; NULL when missing. */
char *tu_read(const char *path, size_t *len);

/* Copies every regular file of src into a new temporary directory; the caller frees. */
char *tu_copy_dir(const char *src);

/* Appends tensor `name` (dtype as safetensors spells it, e.g. "F32"; shape[ndim], ndim 0 for
 * a scalar; nbytes of data) to the safetensors file dir/file, and to the weight map of
 * dir/model.safetensors.index.json when there is one. */
void tu_safetensors_add(const char *dir, const char *file, const char *name, const char *dtype,
                        const int64_t *shape, int ndim, const void *data, size_t nbytes);

/* Removes a directory tree. */
void tu_rmrf(const char *dir);

/* Whether a test of this name runs: TEST_FILTER and TEST_SKIP are comma-separated fnmatch
 * patterns of the tests to run (unset: all) and to leave out, e.g. TEST_FILTER='*moe*'. A test
 * program keeps the selected entries of its CMUnitTest array and runs those. */
bool tu_test_selected(const char *name);

/* TACHYON_FIXTURES "/" name, in a static buffer. */
const char *tu_fixture(const char *name);

/* Deterministic pseudo-random numbers (xorshift; one stream per test program, fixed seed):
 * 32 random bits, and a float uniform in [-1, 1). */
uint32_t tu_rand32(void);
float tu_randf(void);
/* Restarts the stream from seed (nonzero). */
void tu_rand_seed(uint64_t seed);

/* Element i of rank `rank`'s buffer in collective `round`, a pure function of the three: values
 * of very different magnitudes and signs, so that f32 sums over the ranks in another order give
 * other bits (the communicators' tests check the order). */
float tu_unassociative(int rank, int i, int round);

#endif
