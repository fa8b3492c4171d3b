/*
 * safetensors: the tensors of a checkpoint, read in place from mmapped files.
 *
 * Opens `model.safetensors`, or every shard named by `model.safetensors.index.json`'s
 * weight_map, validates each header (length, JSON, dtypes, shapes, data_offsets in range and
 * not overlapping, sizes matching shapes) and indexes the tensors by name. Tensor data points
 * into the mapping: nothing is copied. Every failure names the file and the problem.
 *
 *     st_set_t *st;
 *     if (st_open(dir, &st, &err) < 0) return -1;
 *     const st_tensor_t *t = st_find(st, "model.embed_tokens.weight");
 *     // t->dtype, t->shape[0..ndim), t->data (t->nbytes bytes)
 *     st_close(st);
 */
#ifndef TACHYON_SAFETENSORS_H
#define TACHYON_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"
#include "mdir.h"

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    const char *name;
    const char *file; /* shard file name, for messages */
    dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data; /* into the file mapping; valid while the mdir is open */
    size_t nbytes;
} st_tensor_t;

typedef struct st_set st_set_t;

/* Opens the checkpoint of a model directory: the index and its shards when
 * model.safetensors.index.json exists, else model.safetensors. The mdir must outlive the set.
 * The caller owns *out. */
int st_open(mdir_t *dir, st_set_t **out, err_t *err);

/* Parses one safetensors file already in memory and adds its tensors to the set; `file` is the
 * name used in messages. Exposed for tests; st_open uses it for every shard. */
int st_add_file(st_set_t *set, const char *file, const void *data, size_t len, err_t *err);

/* An empty set, for st_add_file. */
st_set_t *st_create(void);

void st_close(st_set_t *set);

/* The tensor of that name, or NULL. */
const st_tensor_t *st_find(const st_set_t *set, const char *name);

int st_count(const st_set_t *set);
const st_tensor_t *st_at(const st_set_t *set, int i);

/* Number of elements of a tensor (product of its shape; 1 for a scalar). */
int64_t st_numel(const st_tensor_t *t);

#endif
