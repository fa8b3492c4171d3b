#include "cpu_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Iterations a thread spins before it sleeps on the condition variable: a forward step issues
 * jobs back to back, microseconds apart, and a futex wake-up per job would cost more than the
 * small GEMMs of a decode step. Roughly tens of microseconds. */
#define SPIN_ITERS 4000

typedef struct worker {
    struct cpu_pool *pool;
    int index;
} worker_t;

/* A job is open from its publication until the calling thread has taken the last chunk; a
 * worker joins it by raising `active` and then checking that it is still open, so the caller,
 * after closing it, only waits for the workers that are inside it. A worker that wakes late
 * (descheduled on a busy machine) finds the job closed and is not waited for. */
struct cpu_pool {
    int n_threads;
    pthread_t *threads; /* [n_threads - 1] */
    worker_t *workers;  /* [n_threads - 1] */
    int started;

    pthread_mutex_t mu;
    pthread_cond_t wake;    /* generation changed or stop */
    atomic_uint generation; /* id of the latest job, never 0 */
    atomic_uint open;       /* id of the job workers may join, 0 when none */
    atomic_int active;      /* workers inside a job */
    atomic_int sleepers;    /* workers waiting on `wake` */
    atomic_bool stop;

    /* The current job; written before it opens. */
    cpu_pool_fn fn;
    void *ctx;
    int64_t n, grain;
    atomic_llong next;
};

static void work(struct cpu_pool *p, int thread) {
    for (;;) {
        int64_t begin = atomic_fetch_add(&p->next, p->grain);
        if (begin >= p->n) return;
        int64_t end = begin + p->grain < p->n ? begin + p->grain : p->n;
        p->fn(p->ctx, thread, begin, end);
    }
}

static void *worker_main(void *arg) {
    worker_t *w = arg;
    struct cpu_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        for (int i = 0;
             i < SPIN_ITERS && atomic_load(&p->generation) == seen && !atomic_load(&p->stop); i++)
            CPU_RELAX();
        if (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = atomic_load(&p->generation);
        atomic_fetch_add(&p->active, 1);
        if (atomic_load(&p->open) == seen) work(p, w->index);
        atomic_fetch_sub(&p->active, 1);
    }
}

int cpu_pool_create(int n_threads, cpu_pool_t **out, err_t *err) {
    *out = NULL;
    if (n_threads < 1) return err_set(err, "cpu pool: %d threads (need at least 1)", n_threads);
    struct cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return err_set(err, "cpu pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    atomic_init(&p->generation, 0);
    atomic_init(&p->open, 0);
    atomic_init(&p->active, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->next, 0);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->threads || !p->workers) {
            cpu_pool_destroy(p);
            return err_set(err, "cpu pool: out of memory");
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        p->workers[i] = (worker_t){p, i + 1};
        int rc = pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]);
        if (rc != 0) {
            cpu_pool_destroy(p);
            return err_set(err, "cpu pool: cannot start thread %d of %d: %s", i + 2, n_threads,
                           strerror(rc));
        }
        p->started++;
    }
    *out = p;
    return 0;
}

void cpu_pool_destroy(cpu_pool_t *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p->threads);
    free(p);
}

int cpu_pool_size(const cpu_pool_t *p) {
    return p->n_threads;
}

int64_t cpu_pool_grain(const cpu_pool_t *p, int64_t n, int64_t work, int per_thread,
                       int64_t align) {
    if (work < CPU_POOL_MIN_WORK || n < 1) return n > 0 ? n : 1;
    int64_t chunks = (int64_t)per_thread * p->n_threads;
    int64_t grain = (n + chunks - 1) / chunks;
    return (grain + align - 1) / align * align;
}

void cpu_pool_run(cpu_pool_t *p, int64_t n, int64_t grain, cpu_pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (p->n_threads == 1 || n <= grain) {
        fn(ctx, 0, 0, n);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    atomic_store(&p->next, 0);
    unsigned id = atomic_load(&p->generation) + 1;
    if (id == 0) id = 1;
    atomic_store(&p->open, id);
    atomic_store(&p->generation, id);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }

    work(p, 0);

    atomic_store(&p->open, 0);
    for (int i = 0; atomic_load(&p->active) > 0; i++) {
        if (i < SPIN_ITERS)
            CPU_RELAX();
        else
            sched_yield();
    }
}
