/*
 * embedded: the small model compiled into the binary, so that `tachyon` starts with no
 * download. It is tests/fixtures/tiny-qwen3 (a 3-layer Qwen3 trained on English prose by
 * scripts/make-fixtures); build/embedded.S pulls its files in with .incbin.
 */
#ifndef TACHYON_EMBEDDED_H
#define TACHYON_EMBEDDED_H

#include <stddef.h>

typedef struct embedded_file {
    const char *name;          /* file name inside the model directory */
    const unsigned char *data; /* bytes, in the binary's read-only data */
    size_t len;                /* bytes */
} embedded_file_t;

/* The embedded model's files, terminated by an entry whose name is NULL. */
extern const embedded_file_t embedded_model_files[];

#endif
