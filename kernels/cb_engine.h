/*
 * cb_engine: the engine's C headers for the CUDA (C++) translation units of kernels/. The engine
 * headers carry no `extern "C"` guards, so a .cu file includes this first: every engine
 * declaration then has C linkage, and later includes of the same headers are no-ops.
 *
 *     #include "cb_engine.h"   // before cuda_check.h, ops.h, gemm.h, ...
 */
#ifndef TACHYON_CB_ENGINE_H
#define TACHYON_CB_ENGINE_H

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"
#include "comm.h"
#include "cpu/cpu_ops.h"
#include "dtype.h"
#include "err.h"
#include "flags.h"
#include "model.h"
#include "rng.h"
#include "sampler.h"
#include "sampling.h"
#include "shard.h"
#include "shard_plan.h"
#include "tp.h"
#include "weights.h"

#ifdef __cplusplus
}
#endif

#endif
