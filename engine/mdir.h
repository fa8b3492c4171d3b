/*
 * mdir: the files of one model, mapped read-only.
 *
 * A model is a Hugging Face directory (config.json, *.safetensors, tokenizer.json, ...) or the
 * small model embedded in the binary ("embedded", see embedded.h). Both look the same to the
 * loaders: they ask for a file by name and get its bytes, mmapped from disk (never copied) or
 * pointing into the binary. A mapping lives until mdir_close().
 *
 *     mdir_t *dir;
 *     if (mdir_open("/models/Qwen3-14B-FP8", &dir, &err) < 0) return -1;
 *     const void *bytes; size_t len;
 *     if (mdir_map(dir, "config.json", &bytes, &len, &err) < 0) ...
 *     mdir_close(dir);
 */
#ifndef TACHYON_MDIR_H
#define TACHYON_MDIR_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

typedef struct mdir mdir_t;

/* The name that selects the embedded model instead of a directory. */
#define MDIR_EMBEDDED "embedded"

/* Opens a model directory (or MDIR_EMBEDDED). Fails with a message when the path is not a
 * readable directory. The caller owns *out and frees it with mdir_close(). */
int mdir_open(const char *path, mdir_t **out, err_t *err);

void mdir_close(mdir_t *dir);

/* The directory path (or "embedded") as given to mdir_open, for messages. */
const char *mdir_path(const mdir_t *dir);

/* True when the model has a file of that name (relative to the directory). */
bool mdir_has(const mdir_t *dir, const char *name);

/* Maps the named file. *data stays valid until mdir_close(); mapping the same name twice
 * returns the same bytes. A missing or unreadable file fails with a message naming it. An
 * empty file maps to a non-NULL pointer and len 0. */
int mdir_map(mdir_t *dir, const char *name, const void **data, size_t *len, err_t *err);

/* Maps the named file and returns a NUL-terminated copy for text parsers (JSON); the caller
 * frees it. Used for small files only (config.json, tokenizer.json). */
int mdir_read_text(mdir_t *dir, const char *name, char **text, size_t *len, err_t *err);

#endif
