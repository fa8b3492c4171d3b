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
    const char *name; /* owned by the set */
    const char *file; /* the name given to st_add_file (st_open: "DIR/SHARD"), owned by the set */
    dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data; /* into the file mapping; valid while the mdir is open; not necessarily
                         aligned for the dtype (read through memcpy or dtype_to_f32) */
    size_t nbytes;    /* numel * dtype_size; shape products and nbytes fit in int64 */
} st_tensor_t;

typedef struct st_set st_set_t;

/* Opens the checkpoint of a model directory: the index and its shards when
 * model.safetensors.index.json exists, else model.safetensors. With an index, each distinct
 * shard of weight_map is opened once and every weight_map entry must name a tensor of the shard
 * it points to (shards may hold tensors the index does not list); a name in two files fails.
 * The mdir must outlive the set. The caller owns *out (NULL on failure). */
int st_open(mdir_t *dir, st_set_t **out, err_t *err);

/* Parses one safetensors file already in memory and adds its tensors to the set; `file` is the
 * name used in messages (copied). `data` must outlive the set. On failure the set is left as it
 * was. Adding a file invalidates st_tensor_t pointers obtained earlier. Exposed for tests;
 * st_open uses it for every shard. The "__metadata__" entry is ignored. */
int st_add_file(st_set_t *set, const char *file, const void *data, size_t len, err_t *err);

/* An empty set, for st_add_file; NULL when out of memory. */
st_set_t *st_create(void);

/* Frees the set and its strings (not the mappings); NULL is a no-op. */
void st_close(st_set_t *set);

/* The tensor of that name, or NULL. Hashed: O(1) on average. */
const st_tensor_t *st_find(const st_set_t *set, const char *name);

/* Tensors in the order added (shards by file name, then header order); st_at gives NULL
 * outside [0, st_count). */
int st_count(const st_set_t *set);
/* Files added (st_add_file), for a loading screen's shard count. */
int st_files(const st_set_t *set);
const st_tensor_t *st_at(const st_set_t *set, int i);

/* Number of elements of a tensor (product of its shape; 1 for a scalar). */
int64_t st_numel(const st_tensor_t *t);

#endif
