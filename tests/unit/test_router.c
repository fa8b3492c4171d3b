/* The data-parallel router (engine/router.h): the least busy replica, round-robin among equals;
 * a prompt's prefix back to the replica that saw it unless that one is too busy; prefixes
 * matched by whole chained blocks only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "router.h"

/* A prompt of n ids: `shared` leading ids from base 0 (a common prefix), the rest from `tail`. */
static void prompt(int32_t *ids, int n, int shared, int tail) {
    for (int i = 0; i < n; i++)
        ids[i] = i < shared ? 1000 + 7 * i : 50000 + 131 * tail + 3 * i;
}

static void test_one_replica(void **state) {
    (void)state;
    router_t *r = router_create(1);
    int32_t ids[40];
    prompt(ids, 40, 40, 0);
    int load[1] = {9};
    for (int i = 0; i < 3; i++)
        assert_int_equal(router_pick(r, ids, 40, load), 0);
    router_destroy(r);
}

static void test_least_busy_and_round_robin(void **state) {
    (void)state;
    router_t *r = router_create(3);
    int32_t ids[8];
    prompt(ids, 8, 0, 1); /* under a block: no affinity */
    int load[3] = {2, 0, 1};
    assert_int_equal(router_pick(r, ids, 8, load), 1);
    load[1] = 5;
    assert_int_equal(router_pick(r, ids, 8, load), 2);
    /* equally busy: each replica in turn */
    int count[3] = {0};
    int idle[3] = {0, 0, 0};
    for (int i = 0; i < 30; i++)
        count[router_pick(r, ids, 8, idle)]++;
    assert_int_equal(count[0], 10);
    assert_int_equal(count[1], 10);
    assert_int_equal(count[2], 10);
    router_destroy(r);
}

static void test_prefix_affinity(void **state) {
    (void)state;
    router_t *r = router_create(2);
    int32_t a[100], b[100], c[100];
    prompt(a, 100, 64, 1); /* 64 shared ids: 4 blocks */
    prompt(b, 100, 64, 2);
    prompt(c, 100, 0, 3); /* nothing shared */
    int load[2] = {0, 0};
    int first = router_pick(r, a, 100, load);
    assert_int_equal(router_match(r, first, a, 100), 6); /* 100 ids: 6 whole blocks */
    assert_int_equal(router_match(r, 1 - first, a, 100), 0);
    assert_int_equal(router_match(r, first, b, 100), 4);
    /* the other replica is idler, but the one with the prefix is within the slack */
    load[first] = ROUTER_SLACK;
    assert_int_equal(router_pick(r, b, 100, load), first);
    /* too busy: the least busy replica, which then remembers the prefix too */
    load[first] = ROUTER_SLACK + 1;
    assert_int_equal(router_pick(r, b, 100, load), 1 - first);
    assert_int_equal(router_match(r, 1 - first, a, 100), 4);
    /* the slack grows with the load: half the least busy replica's on top */
    int32_t d[64];
    prompt(d, 64, 0, 4);
    int32_t e[64];
    memcpy(e, d, sizeof e);
    load[0] = load[1] = 0;
    int home = router_pick(r, d, 64, load);
    load[home] = 10 + ROUTER_SLACK + 5, load[1 - home] = 10;
    assert_int_equal(router_pick(r, e, 64, load), home);
    load[home]++;
    assert_int_equal(router_pick(r, e, 64, load), 1 - home);
    /* a prompt sharing nothing goes to the least busy */
    load[0] = 3, load[1] = 2;
    assert_int_equal(router_pick(r, c, 100, load), 1);
    router_destroy(r);
}

/* A block matches only with every block before it: the same 16 ids after a different first
 * block are another prefix. */
static void test_chained_blocks(void **state) {
    (void)state;
    router_t *r = router_create(2);
    int32_t a[32], b[32];
    prompt(a, 32, 32, 0);
    memcpy(b, a, sizeof b);
    b[3] ^= 1; /* the first block differs, the second is the same */
    int load[2] = {0, 0};
    int home = router_pick(r, a, 32, load);
    assert_int_equal(router_match(r, home, a, 32), 2);
    assert_int_equal(router_match(r, home, b, 32), 0);
    b[3] ^= 1;
    b[20] ^= 1; /* the second block differs */
    assert_int_equal(router_match(r, home, b, 32), 1);
    /* a partial block is not hashed: 31 ids match one block */
    assert_int_equal(router_match(r, home, a, 31), 1);
    router_destroy(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_replica),
        cmocka_unit_test(test_least_busy_and_round_robin),
        cmocka_unit_test(test_prefix_affinity),
        cmocka_unit_test(test_chained_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
