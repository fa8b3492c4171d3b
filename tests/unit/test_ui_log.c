/* ui_log: the console's stderr capture: lines written to fd 2 (by stdio or write) reach the
 * callback in order, a last line without '\n' too, a long line in pieces; the bytes are copied
 * to the original stderr only while echo is on; after ui_log_stop fd 2 is the original again. */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"
#include "ui_log.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char got[16][UI_LOG_LINE + 1];
static int n_got;

static void on_line(void *user, const char *line) {
    (void)user;
    pthread_mutex_lock(&mu);
    if (n_got < 16) snprintf(got[n_got++], sizeof got[0], "%s", line);
    pthread_mutex_unlock(&mu);
}

static void test_capture(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/stderr", dir);
    /* the "original" stderr of this test: a file, so that the echo can be read back */
    int saved = dup(2), file = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && file >= 0);
    dup2(file, 2);
    close(file);

    err_t err = {{0}};
    ui_log_t *log = ui_log_start(on_line, NULL, &err);
    int orig_ok = log && ui_log_fd(log) > 2;
    fprintf(stderr, "tachyon: KV cache: 4 MiB\nsecond line\n");
    /* the echo follows the reader: let it take these lines before turning it off */
    for (int i = 0; i < 2000; i++) {
        pthread_mutex_lock(&mu);
        int n = n_got;
        pthread_mutex_unlock(&mu);
        if (n == 2) break;
        usleep(1000);
    }
    ui_log_echo(log, false);
    char long_line[601];
    memset(long_line, 'x', 600);
    long_line[600] = '\0';
    fprintf(stderr, "%s\n", long_line);
    ssize_t w = write(2, "no newline at the end", 21);
    ui_log_stop(log);
    fprintf(stderr, "after\n"); /* the original again */

    dup2(saved, 2);
    close(saved);
    assert_non_null(log);
    assert_true(orig_ok);
    assert_int_equal(w, 21);
    assert_int_equal(n_got, 5);
    assert_string_equal(got[0], "tachyon: KV cache: 4 MiB");
    assert_string_equal(got[1], "second line");
    assert_int_equal(strlen(got[2]), UI_LOG_LINE);
    assert_int_equal(strlen(got[3]), 600 - UI_LOG_LINE);
    assert_string_equal(got[4], "no newline at the end");
    size_t len;
    char *text = tu_read(path, &len);
    assert_string_equal(text, "tachyon: KV cache: 4 MiB\nsecond line\nafter\n");
    free(text);
    ui_log_stop(NULL);
    tu_rmrf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
