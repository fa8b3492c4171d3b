/*
 * cpu_pool: a persistent pool of worker threads for the CPU backend.
 *
 * The threads are created once and parked between jobs (a short spin, then a condition
 * variable), so a forward step dispatches its dozens of GEMMs without creating threads. A job is
 * a function over an index range [0, n) handed out in chunks of `grain` items; the calling
 * thread works too (as thread 0) and cpu_pool_run returns when every item is done. Which thread
 * computes an item is not fixed, so a job must give each item a result that does not depend on
 * the thread (per-thread scratch only, no cross-item reductions): results are then identical for
 * any thread count.
 *
 *     cpu_pool_t *pool;
 *     if (cpu_pool_create(4, &pool, &err) < 0) ...
 *     cpu_pool_run(pool, n_rows, 16, gemm_rows, &ctx);   // gemm_rows(ctx, thread, begin, end)
 *     cpu_pool_destroy(pool);
 */
#ifndef TACHYON_CPU_POOL_H
#define TACHYON_CPU_POOL_H

#include <stdint.h>

#include "err.h"

typedef struct cpu_pool cpu_pool_t;

/* Works on items [begin, end); thread is in [0, cpu_pool_size()). */
typedef void (*cpu_pool_fn)(void *ctx, int thread, int64_t begin, int64_t end);

/* Starts n_threads - 1 workers (n_threads >= 1; the caller of cpu_pool_run is the last one).
 * The caller owns *out. */
int cpu_pool_create(int n_threads, cpu_pool_t **out, err_t *err);

/* Stops and joins the workers. NULL is a no-op. */
void cpu_pool_destroy(cpu_pool_t *pool);

/* Threads that run a job, the caller included. */
int cpu_pool_size(const cpu_pool_t *pool);

/* Multiply-adds below which a job runs on the calling thread alone: waking workers costs a few
 * microseconds (far more on a loaded machine), the time of ~1e5 multiply-adds. */
#define CPU_POOL_MIN_WORK (1 << 19)

/* A grain for a job of n items and `work` multiply-adds in all: about `per_thread` chunks per
 * thread for balance, a multiple of `align` items; n (one chunk, run by the caller alone) when
 * the work is below CPU_POOL_MIN_WORK. */
int64_t cpu_pool_grain(const cpu_pool_t *pool, int64_t n, int64_t work, int per_thread,
                       int64_t align);

/* Runs fn over [0, n) in chunks of grain items (grain >= 1) on all threads and returns when all
 * are done. One job at a time: only the thread that owns the pool may call it. */
void cpu_pool_run(cpu_pool_t *pool, int64_t n, int64_t grain, cpu_pool_fn fn, void *ctx);

#endif
