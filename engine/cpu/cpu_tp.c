#include "cpu_tp.h"

#include <stdio.h>
#include <unistd.h>

#include "comm.h"
#include "tp.h"

typedef struct make_args {
    const backend_options_t *opts; /* n_threads: each rank's share */
    const model_weights_t *w;
    comm_group_t *group;
    bool ep;
} make_args_t;

static int make_rank(void *user, int rank, backend_t **out, comm_t **comm, err_t *err) {
    const make_args_t *a = user;
    shard_t s = {.rank = rank,
                 .tp = a->opts->tensor_parallel_size,
                 .ep = a->ep,
                 .comm = comm_rank(a->group, rank)};
    *comm = s.comm;
    return cpu_rank_create(a->opts, a->w, &s, out, err);
}

static void release_group(void *group) {
    comm_group_destroy(group);
}

int cpu_tp_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                  err_t *err) {
    *out = NULL;
    int n = opts->tensor_parallel_size;
    if (n < 2 || n > COMM_MAX_RANKS)
        return err_set(err, "cpu backend: tensor parallel %d (1..%d)", n, COMM_MAX_RANKS);
    bool ep = opts->expert_parallel && weights_config(w)->n_experts > 0;
    int threads = opts->n_threads;
    if (threads <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        threads = online < 1 ? 1 : (int)online;
    }
    int per_rank = threads / n > 0 ? threads / n : 1;
    backend_options_t ro = *opts;
    ro.n_threads = per_rank;
    make_args_t a = {.opts = &ro, .w = w, .ep = ep};
    if (comm_host_create(n, &a.group, err) < 0) return err_prefix(err, "cpu backend");
    char how[160];
    snprintf(how, sizeof how,
             "%s%d pool thread%s each, host communicator (all-reduce in rank order)",
             ep ? "experts whole (expert parallel), " : "", per_rank, per_rank == 1 ? "" : "s");
    if (tp_backend_create(n, make_rank, &a, release_group, a.group, how, out, err) < 0)
        return -1; /* the rank's message names the backend */
    return 0;
}
