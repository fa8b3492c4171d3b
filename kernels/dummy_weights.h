/*
 * dummy_weights: --load-format dummy values generated on the device, bit-identical to
 * weights_dummy()'s host values (engine/weights.h: WEIGHTS_DUMMY_*, engine/rng.h), so a 15 GB
 * model "loads" in the time of one pass over its memory and the host never holds a copy.
 *
 *     dummy_fill(dst, true, rows, cols, ld, t->dummy_seed, t->dummy_stream, stream, &err);
 */
#ifndef TACHYON_DUMMY_WEIGHTS_H
#define TACHYON_DUMMY_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes element (r, c) of a [rows, cols] dummy tensor (source index r * cols + c) to
 * dst[r * ld + c]: e4m3 bytes when fp8, else bf16 (uint16). Columns cols..ld-1 are left as they
 * are. Asynchronous on `stream`; launch errors are reported. */
int dummy_fill(void *dst, bool fp8, int64_t rows, int64_t cols, int64_t ld, uint64_t seed,
               uint64_t stream_id, cudaStream_t stream, err_t *err);

/* The same for a view of a dummy tensor (wtensor_slice): element (r, c) is source index
 * src_offset + r * src_ld + c of the whole tensor. */
int dummy_fill_view(void *dst, bool fp8, int64_t rows, int64_t cols, int64_t ld, int64_t src_offset,
                    int64_t src_ld, uint64_t seed, uint64_t stream_id, cudaStream_t stream,
                    err_t *err);

#ifdef __cplusplus
}
#endif

#endif
