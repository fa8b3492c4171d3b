/* The CUDA ranks' communicators (kernels/comm_gpu.h) on their own, each rank a thread with its
 * own stream, buffers in device memory:
 *
 * - single-device, 2 and 3 ranks on device 0: the all-reduce equals the sum in rank order bit
 *   for bit on every rank (values chosen so that another order gives other bits), all-gather and
 *   broadcast move the bytes, agree fails every rank when one fails (its own message kept);
 * - NCCL (where built), a rank per device over every device there is (up to 4; on a one-GPU
 *   machine a group of one, which NCCL allows): the same collectives eagerly, then the all-reduce
 *   captured into each rank's CUDA graph and replayed three times over new values (what the
 *   backend's decode graphs do at tensor parallel > 1). NCCL sums in its own order: exact for up
 *   to two ranks (a + b is b + a), within f32 rounding beyond.
 *
 * On the device (scripts/device-check's gpu stage) and in the host emulation
 * (test_comm_gpu_emu; test_comm_gpu_emu_nccl with TACHYON_EMU_DEVICES=2 over its emulated NCCL).
 * Exit 77 without a Hopper GPU. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "comm_gpu.h"
#include "cuda_backend.h"
#include "testutil.h"

#define N_VALUES 1003 /* not a multiple of any rank count: uneven ranges */
#define MAX_R    4
#define REPLAYS  3

typedef struct rank_job {
    comm_t *c;
    int device, size;
    bool graph;        /* NCCL: the all-reduce captured and replayed too */
    int failed_rank;   /* agree: this rank fails (-1: none) */
    const char *error; /* the first failure, or NULL */
    char msg[sizeof(err_t) + 256];
    int agree_rc;
    char agree_msg[sizeof(err_t)];
    float reduced[REPLAYS + 1][N_VALUES];
    int32_t gathered[MAX_R * 2];
    char text[16];
} rank_job_t;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess && !j->error) {                                                      \
            snprintf(j->msg, sizeof j->msg, "%s: %s", #call, cudaGetErrorString(e_));              \
            j->error = j->msg;                                                                     \
        }                                                                                          \
    } while (0)
#define TRY_COMM(call)                                                                             \
    do {                                                                                           \
        err_t err_ = {{0}};                                                                        \
        if ((call) < 0 && !j->error) {                                                             \
            snprintf(j->msg, sizeof j->msg, "%s: %s", #call, err_.msg);                            \
            j->error = j->msg;                                                                     \
        }                                                                                          \
    } while (0)

/* This rank's values of `round` (host: scratch) into buf, queued on the stream. */
static void fill(rank_job_t *j, float *buf, cudaStream_t st, int round, float *host) {
    for (int i = 0; i < N_VALUES; i++)
        host[i] = tu_unassociative(j->c->rank, i, round);
    TRY(cudaMemcpyAsync(buf, host, sizeof(float) * N_VALUES, cudaMemcpyHostToDevice, st));
}

static void *rank_main(void *arg) {
    rank_job_t *j = arg;
    TRY(cudaSetDevice(j->device));
    cudaStream_t st = NULL;
    TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if (j->error) return NULL;
    comm_gpu_bind(j->c, st);
    float *buf = NULL, host[N_VALUES];
    int32_t *mine = NULL, *all = NULL;
    char *text = NULL;
    TRY(cudaMalloc((void **)&buf, sizeof(float) * N_VALUES));
    TRY(cudaMalloc((void **)&mine, sizeof(int32_t) * 2));
    TRY(cudaMalloc((void **)&all, sizeof(int32_t) * 2 * MAX_R));
    TRY(cudaMalloc((void **)&text, sizeof j->text));
    if (j->error) return NULL;
    /* eagerly: all-reduce, all-gather, broadcast from the last rank */
    fill(j, buf, st, 0, host);
    TRY_COMM(comm_all_reduce_sum(j->c, buf, N_VALUES, &err_));
    int32_t pair[2] = {j->c->rank, -10 * j->c->rank};
    TRY(cudaMemcpyAsync(mine, pair, sizeof pair, cudaMemcpyHostToDevice, st));
    TRY_COMM(comm_all_gather(j->c, mine, sizeof pair, all, &err_));
    char t[16];
    snprintf(t, sizeof t, j->c->rank == j->size - 1 ? "from the root" : "rank %d", j->c->rank);
    TRY(cudaMemcpyAsync(text, t, sizeof t, cudaMemcpyHostToDevice, st));
    TRY_COMM(comm_broadcast(j->c, text, sizeof t, j->size - 1, &err_));
    TRY(cudaStreamSynchronize(st));
    TRY(cudaMemcpy(j->reduced[0], buf, sizeof(float) * N_VALUES, cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(j->gathered, all, sizeof(int32_t) * 2 * (size_t)j->size,
                   cudaMemcpyDeviceToHost));
    TRY(cudaMemcpy(j->text, text, sizeof j->text, cudaMemcpyDeviceToHost));
    /* the all-reduce inside a CUDA graph, replayed over new values each time */
    if (j->graph) {
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        TRY_COMM(comm_all_reduce_sum(j->c, buf, N_VALUES, &err_));
        TRY(cudaStreamEndCapture(st, &graph));
        if (!j->error) TRY(cudaGraphInstantiate(&exec, graph, 0));
        for (int round = 1; round <= REPLAYS && !j->error; round++) {
            fill(j, buf, st, round, host);
            TRY(cudaGraphLaunch(exec, st));
            TRY(cudaStreamSynchronize(st));
            TRY(cudaMemcpy(j->reduced[round], buf, sizeof(float) * N_VALUES,
                           cudaMemcpyDeviceToHost));
        }
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
    }
    /* agree: one rank fails, every rank learns it */
    err_t e;
    snprintf(e.msg, sizeof e.msg, "own failure of rank %d", j->c->rank);
    j->agree_rc = comm_agree(j->c, j->c->rank == j->failed_rank ? -1 : 0, &e);
    snprintf(j->agree_msg, sizeof j->agree_msg, "%s", e.msg);
    cudaFree(buf);
    cudaFree(mine);
    cudaFree(all);
    cudaFree(text);
    cudaStreamDestroy(st);
    return NULL;
}

/* Runs `size` rank threads over group g (devices[r] each) and checks what they got: the sums
 * bit-exact in rank order when `exact`, else within f32 rounding of it. */
static void run_group(comm_gpu_group_t *g, int size, const int *devices, bool graph, bool exact,
                      const char *what) {
    static rank_job_t jobs[MAX_R];
    pthread_t th[MAX_R];
    for (int r = 0; r < size; r++) {
        jobs[r] = (rank_job_t){.c = comm_gpu_rank(g, r),
                               .device = devices[r],
                               .size = size,
                               .graph = graph,
                               .failed_rank = size - 1};
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (int r = 0; r < size; r++)
        pthread_join(th[r], NULL);
    double worst = 0;
    for (int r = 0; r < size; r++) {
        rank_job_t *j = &jobs[r];
        if (j->error) fail_msg("%s: rank %d: %s", what, r, j->error);
        for (int round = 0; round <= (graph ? REPLAYS : 0); round++)
            for (int i = 0; i < N_VALUES; i++) {
                float want = tu_unassociative(0, i, round),
                      mag = fabsf(tu_unassociative(0, i, round));
                for (int q = 1; q < size; q++) {
                    want += tu_unassociative(q, i, round);
                    mag += fabsf(tu_unassociative(q, i, round));
                }
                float got = j->reduced[round][i];
                if (exact) {
                    if (memcmp(&got, &want, sizeof got) != 0)
                        fail_msg("%s: rank %d round %d element %d: %.9g, the sum in rank order "
                                 "is %.9g",
                                 what, r, round, i, got, want);
                } else {
                    double d = fabs((double)got - want) / mag;
                    if (d > worst) worst = d;
                    if (!(d <= size * 0x1p-23))
                        fail_msg("%s: rank %d round %d element %d: %.9g against %.9g", what, r,
                                 round, i, got, want);
                }
            }
        for (int q = 0; q < size; q++) {
            assert_int_equal(j->gathered[2 * q], q);
            assert_int_equal(j->gathered[2 * q + 1], -10 * q);
        }
        assert_string_equal(j->text, "from the root");
        assert_int_equal(j->agree_rc, -1);
        char want_msg[64];
        if (r == size - 1)
            snprintf(want_msg, sizeof want_msg, "own failure of rank %d", r);
        else
            snprintf(want_msg, sizeof want_msg, "tensor-parallel rank %d failed this step",
                     size - 1);
        assert_string_equal(j->agree_msg, want_msg);
    }
    print_message("%s: %d rank%s%s: all-reduce %s, all-gather, broadcast, agree\n", what, size,
                  size == 1 ? "" : "s", graph ? ", the all-reduce also from CUDA graphs" : "",
                  exact ? "bit-exact in rank order" : "within f32 rounding");
    if (!exact) print_message("%s: largest relative difference %.3g\n", what, worst);
}

static void test_one_device(void **state) {
    (void)state;
    for (int size = 2; size <= 3; size++) {
        comm_gpu_group_t *g;
        err_t err;
        if (comm_gpu_create_one_device(size, &g, &err) < 0) fail_msg("%s", err.msg);
        const int devices[MAX_R] = {0, 0, 0, 0};
        run_group(g, size, devices, false, true, "single-device");
        comm_gpu_destroy(g);
    }
}

static void test_nccl(void **state) {
    (void)state;
    if (!comm_gpu_have_nccl()) {
        print_message("skipped: this build has no NCCL\n");
        return;
    }
    int count = 0;
    assert_int_equal(cudaGetDeviceCount(&count), cudaSuccess);
    int size = count < MAX_R ? count : MAX_R, devices[MAX_R];
    for (int r = 0; r < size; r++)
        devices[r] = r;
    comm_gpu_group_t *g;
    err_t err;
    if (comm_gpu_create_nccl(size, devices, &g, &err) < 0) fail_msg("%s", err.msg);
    run_group(g, size, devices, true, size <= 2, "nccl");
    comm_gpu_destroy(g);
}

int main(void) {
    if (!cuda_backend_available()) {
        printf("test_comm_gpu: no Hopper GPU, skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_device),
        cmocka_unit_test(test_nccl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
