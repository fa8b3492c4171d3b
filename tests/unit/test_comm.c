/* comm: the host communicator with 1 to 8 rank threads. The all-reduce equals the sum in rank
 * order (rank 0 + rank 1 + ...) bit for bit on every rank and on every run, whatever the timing
 * (the ranks are jittered), on values chosen so that another order gives other bits; all-gather
 * and broadcast move the bytes; a length that differs between ranks fails on every rank; agree
 * fails every rank when one does, each keeping its own message or naming the first that failed;
 * and the group is reusable across many collectives in a row. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "comm.h"
#include "testutil.h"

#define N_VALUES 1003 /* not a multiple of any rank count: uneven ranges */
#define MAX_R    8

typedef struct rank_run {
    comm_t *c;
    int run;
    float buf[N_VALUES];
    int32_t gathered[MAX_R * 3];
    char text[16];
    int rc_reduce, rc_gather, rc_bcast, rc_barrier, rc_mismatch;
    int rc_agree_ok, rc_agree[3]; /* all succeed; then ranks (run % size) and, in turn, none fail */
    bool peer_failed[3];
    char agree_msg[3][sizeof(err_t)];
} rank_run_t;

/* A few microseconds of delay that differ by rank and run, so arrival order changes. */
static void jitter(int rank, int run) {
    int n = (rank * 31 + run * 17) % 5;
    for (int i = 0; i < n; i++)
        sched_yield();
    if ((rank + run) % 3 == 0) nanosleep(&(struct timespec){0, 20000}, NULL);
}

static void *rank_main(void *arg) {
    rank_run_t *r = arg;
    int me = r->c->rank;
    for (int i = 0; i < N_VALUES; i++)
        r->buf[i] = tu_unassociative(me, i, 0);
    jitter(me, r->run);
    r->rc_reduce = comm_all_reduce_sum(r->c, r->buf, N_VALUES, NULL);
    int32_t mine[3] = {me, me * 10, -me};
    jitter(me, r->run + 1);
    r->rc_gather = comm_all_gather(r->c, mine, sizeof mine, r->gathered, NULL);
    snprintf(r->text, sizeof r->text, me == 1 % r->c->size ? "from root" : "rank %d", me);
    r->rc_bcast = comm_broadcast(r->c, r->text, sizeof r->text, 1 % r->c->size, NULL);
    r->rc_barrier = comm_barrier(r->c, NULL);
    float one = 1.0f;
    err_t err;
    /* rank 0 passes 1 element, the others 2: all of them fail, none hangs */
    r->rc_mismatch = r->c->size > 1 ? comm_all_reduce_sum(r->c, &one, me == 0 ? 1 : 2, &err) : -1;
    r->rc_agree_ok = comm_agree(r->c, 7, &err); /* no failure: this rank's own rc back */
    for (int k = 0; k < 3; k++) { /* k 0: rank run % size fails; 1: it and the last; 2: none */
        int size = r->c->size, f = r->run % size;
        bool fails = k < 2 && (me == f || (k == 1 && me == size - 1));
        err_t e;
        snprintf(e.msg, sizeof e.msg, "own failure of rank %d", me);
        jitter(me, r->run + k);
        r->rc_agree[k] = comm_agree(r->c, fails ? -1 : 0, &e);
        r->peer_failed[k] = r->c->peer_failed;
        snprintf(r->agree_msg[k], sizeof r->agree_msg[k], "%s", e.msg);
    }
    return NULL;
}

static void run_group(int size, int run, rank_run_t *ranks) {
    comm_group_t *g;
    err_t err;
    assert_int_equal(comm_host_create(size, &g, &err), 0);
    pthread_t th[MAX_R];
    for (int r = 0; r < size; r++) {
        ranks[r] = (rank_run_t){.c = comm_rank(g, r), .run = run};
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &ranks[r]), 0);
    }
    for (int r = 0; r < size; r++)
        pthread_join(th[r], NULL);
    comm_group_destroy(g);
}

static void test_collectives(void **state) {
    (void)state;
    static rank_run_t ranks[MAX_R], first[MAX_R];
    static const int sizes[] = {1, 2, 3, 4, 8};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int size = sizes[s];
        float want[N_VALUES];
        int order_matters = 0;
        for (int i = 0; i < N_VALUES; i++) {
            float sum = tu_unassociative(0, i, 0), rev = tu_unassociative(size - 1, i, 0);
            for (int r = 1; r < size; r++)
                sum += tu_unassociative(r, i, 0);
            for (int r = size - 2; r >= 0; r--)
                rev += tu_unassociative(r, i, 0);
            want[i] = sum;
            order_matters += memcmp(&sum, &rev, sizeof sum) != 0;
        }
        if (size >= 3) assert_true(order_matters > 0);
        for (int run = 0; run < 20; run++) {
            run_group(size, run, ranks);
            for (int r = 0; r < size; r++) {
                assert_int_equal(ranks[r].rc_reduce, 0);
                if (memcmp(ranks[r].buf, want, sizeof want))
                    fail_msg("size %d run %d rank %d: not the sum in rank order", size, run, r);
                assert_int_equal(ranks[r].rc_gather, 0);
                for (int q = 0; q < size; q++) {
                    assert_int_equal(ranks[r].gathered[q * 3], q);
                    assert_int_equal(ranks[r].gathered[q * 3 + 1], q * 10);
                    assert_int_equal(ranks[r].gathered[q * 3 + 2], -q);
                }
                assert_int_equal(ranks[r].rc_bcast, 0);
                assert_string_equal(ranks[r].text, "from root");
                assert_int_equal(ranks[r].rc_barrier, 0);
                assert_int_equal(ranks[r].rc_mismatch, -1);
                assert_int_equal(ranks[r].rc_agree_ok, 7);
                int f = run % size;
                for (int k = 0; k < 3; k++) {
                    bool fails = k < 2 && (r == f || (k == 1 && r == size - 1));
                    char want_msg[64]; /* a failed rank's own; the others name the first */
                    if (k < 2 && !fails)
                        snprintf(want_msg, sizeof want_msg,
                                 "tensor-parallel rank %d failed this step", f);
                    else /* untouched: no rank failed */
                        snprintf(want_msg, sizeof want_msg, "own failure of rank %d", r);
                    assert_int_equal(ranks[r].rc_agree[k], k < 2 ? -1 : 0);
                    assert_int_equal(ranks[r].peer_failed[k], k < 2 && !fails);
                    assert_string_equal(ranks[r].agree_msg[k], want_msg);
                }
            }
            if (run == 0) memcpy(first, ranks, sizeof first);
            for (int r = 0; r < size; r++)
                assert_memory_equal(ranks[r].buf, first[r].buf, sizeof want);
        }
        printf("comm: %d rank%s: 20 runs, bit-identical, %d of %d sums differ in reverse order\n",
               size, size == 1 ? "" : "s", order_matters, N_VALUES);
    }
}

static void test_errors(void **state) {
    (void)state;
    comm_group_t *g;
    err_t err;
    assert_int_equal(comm_host_create(0, &g, &err), -1);
    assert_non_null(strstr(err.msg, "0 ranks"));
    assert_int_equal(comm_host_create(COMM_MAX_RANKS + 1, &g, &err), -1);
    assert_int_equal(comm_host_create(2, &g, &err), 0);
    assert_null(comm_rank(g, 2));
    char b[4];
    assert_int_equal(comm_broadcast(comm_rank(g, 0), b, sizeof b, 5, &err), -1);
    assert_non_null(strstr(err.msg, "rank 5 of 2"));
    comm_group_destroy(g);
    comm_group_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
