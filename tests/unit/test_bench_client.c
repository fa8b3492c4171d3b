/* bench client: the libcurl multi loop against a small HTTP/1.1 responder in this test (loopback,
 * keep-alive, chunked SSE): token-event timing (TTFT, one ITL gap per later event, latency at the
 * last event), usage overriding the counts, headers (x-request-id, bearer), the max-concurrency
 * gate with connection reuse and queue time, HTTP errors with status, reason and message, a
 * stream without events, a stream the server ended with finish_reason "abort" or "error" (a
 * failure, not a success), the per-request timeout, and the stop flag. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "client.h"

#define MAX_CONNS    64
#define EVENT_GAP_US 20000

typedef struct srv {
    int fd, port;
    pthread_t accept_th;
    pthread_t conn_th[MAX_CONNS];
    int conn_fd[MAX_CONNS];
    atomic_int n_conns, active, max_active;
    atomic_bool quit;
    pthread_mutex_t mu;
    char ids[MAX_CONNS * 4][64];
    int n_ids;
    char auth[128];
} srv_t;

typedef struct conn_arg {
    srv_t *s;
    int fd;
} conn_arg_t;

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        p += k;
        n -= (size_t)k;
    }
}

static void chunk(int fd, const char *data) {
    char head[32];
    snprintf(head, sizeof head, "%zx\r\n", strlen(data));
    write_all(fd, head, strlen(head));
    write_all(fd, data, strlen(data));
    write_all(fd, "\r\n", 2);
}

/* Sleeps us microseconds in small steps; false when the test is shutting down. */
static bool nap(srv_t *s, long us) {
    for (long t = 0; t < us; t += 5000) {
        if (atomic_load(&s->quit)) return false;
        struct timespec ts = {0, 5000 * 1000};
        nanosleep(&ts, NULL);
    }
    return true;
}

static const char *header_value(const char *req, const char *name, char *out, size_t cap) {
    const char *h = strcasestr(req, name);
    out[0] = '\0';
    if (!h) return NULL;
    h += strlen(name);
    while (*h == ' ')
        h++;
    size_t k = strcspn(h, "\r\n");
    if (k >= cap) k = cap - 1;
    memcpy(out, h, k);
    out[k] = '\0';
    return out;
}

static void respond(srv_t *s, int fd, const char *req, const char *body) {
    char v[128];
    pthread_mutex_lock(&s->mu);
    if (header_value(req, "\r\nx-request-id:", v, sizeof v) && s->n_ids < MAX_CONNS * 4)
        snprintf(s->ids[s->n_ids++], sizeof s->ids[0], "%.60s", v);
    if (header_value(req, "\r\nAuthorization:", v, sizeof v))
        snprintf(s->auth, sizeof s->auth, "%s", v);
    pthread_mutex_unlock(&s->mu);
    int now = atomic_fetch_add(&s->active, 1) + 1;
    for (int m = atomic_load(&s->max_active); now > m;)
        if (atomic_compare_exchange_weak(&s->max_active, &m, now)) break;

    if (strstr(body, "\"mode\":\"missing\"")) {
        static const char msg[] = "{\"error\":{\"message\":\"The model `x` does not exist.\","
                                  "\"type\":\"NotFoundError\",\"code\":404}}";
        char head[160];
        snprintf(head, sizeof head,
                 "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\n\r\n",
                 sizeof msg - 1);
        write_all(fd, head, strlen(head));
        write_all(fd, msg, sizeof msg - 1);
    } else {
        static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n";
        write_all(fd, head, sizeof head - 1);
        if (strstr(body, "\"mode\":\"abort\"") || strstr(body, "\"mode\":\"error\"")) {
            /* two tokens, then the server gives up on the request (a shutdown, a cancel) */
            bool abort = strstr(body, "\"mode\":\"abort\"") != NULL;
            chunk(fd,
                  "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n");
            chunk(fd,
                  "data: {\"choices\":[{\"index\":0,\"text\":\"b\",\"finish_reason\":null}]}\n\n");
            chunk(fd, abort ? "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":"
                              "\"abort\",\"stop_reason\":null}]}\n\n"
                            : "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":"
                              "\"error\"}]}\n\n");
            chunk(fd, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
                      "\"completion_tokens\":2,\"total_tokens\":5}}\n\n");
        } else if (strstr(body, "\"mode\":\"stall\"")) {
            chunk(fd, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n");
            nap(s, 3000000);
        } else if (!strstr(body, "\"mode\":\"empty\"")) {
            /* 5 token events (one with empty text, which still counts), a role-less usage
             * chunk saying 9 tokens, then [DONE]. */
            static const char *const texts[] = {"a", "", "c", "d", "e"};
            chunk(fd, ": keep-alive comment\n\n");
            for (int i = 0; i < 5; i++) {
                char ev[128];
                snprintf(ev, sizeof ev, "data: {\"choices\":[{\"index\":0,\"text\":\"%s\"}]}\n\n",
                         texts[i]);
                if (i > 0 && !nap(s, EVENT_GAP_US)) break;
                chunk(fd, ev);
            }
            nap(s, EVENT_GAP_US);
            chunk(fd, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":33,"
                      "\"completion_tokens\":9,\"total_tokens\":42}}\n\n");
        }
        chunk(fd, "data: [DONE]\n\n");
        write_all(fd, "0\r\n\r\n", 5);
    }
    atomic_fetch_sub(&s->active, 1);
}

static void *conn_main(void *arg) {
    conn_arg_t *a = arg;
    srv_t *s = a->s;
    int fd = a->fd;
    free(a);
    char buf[65536];
    size_t len = 0;
    for (;;) {
        char *end = NULL;
        while (!(end = memmem(buf, len, "\r\n\r\n", 4))) {
            if (len == sizeof buf - 1) return NULL;
            ssize_t k = recv(fd, buf + len, sizeof buf - 1 - len, 0);
            if (k <= 0) return NULL;
            len += (size_t)k;
        }
        buf[len] = '\0';
        size_t head = (size_t)(end + 4 - buf);
        char v[32];
        size_t body_len = header_value(buf, "\r\nContent-Length:", v, sizeof v)
                              ? (size_t)strtoul(v, NULL, 10)
                              : 0;
        while (len < head + body_len) {
            ssize_t k = recv(fd, buf + len, sizeof buf - 1 - len, 0);
            if (k <= 0) return NULL;
            len += (size_t)k;
        }
        char saved = buf[head + body_len];
        buf[head + body_len] = '\0';
        buf[head - 1] = '\0';
        respond(s, fd, buf, buf + head);
        buf[head - 1] = '\n';
        buf[head + body_len] = saved;
        memmove(buf, buf + head + body_len, len - head - body_len);
        len -= head + body_len;
    }
}

static void *accept_main(void *arg) {
    srv_t *s = arg;
    for (;;) {
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0 || atomic_load(&s->quit)) {
            if (fd >= 0) close(fd);
            return NULL;
        }
        int i = atomic_fetch_add(&s->n_conns, 1);
        if (i >= MAX_CONNS) {
            close(fd);
            continue;
        }
        conn_arg_t *a = malloc(sizeof *a);
        a->s = s;
        a->fd = fd;
        s->conn_fd[i] = fd;
        pthread_create(&s->conn_th[i], NULL, conn_main, a);
    }
}

static srv_t *srv_start(void) {
    srv_t *s = calloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s->fd, 128), 0);
    socklen_t al = sizeof a;
    getsockname(s->fd, (struct sockaddr *)&a, &al);
    s->port = ntohs(a.sin_port);
    pthread_create(&s->accept_th, NULL, accept_main, s);
    return s;
}

static void srv_stop(srv_t *s) {
    atomic_store(&s->quit, true);
    shutdown(s->fd, SHUT_RDWR);
    close(s->fd);
    pthread_join(s->accept_th, NULL);
    int n = atomic_load(&s->n_conns);
    for (int i = 0; i < n && i < MAX_CONNS; i++) {
        shutdown(s->conn_fd[i], SHUT_RDWR);
        pthread_join(s->conn_th[i], NULL);
        close(s->conn_fd[i]);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

typedef struct run {
    srv_t *s;
    char url[128];
    bench_client_config_t cfg;
    bench_client_request_t reqs[16];
    bench_record_t recs[16];
    int started;
    double t0, t_end;
    int progress_calls;
    bench_progress_t last;
} run_t;

static void on_progress(const bench_progress_t *p, void *user) {
    run_t *r = user;
    r->progress_calls++;
    r->last = *p;
}

static void run_setup(run_t *r, const char *body, int n) {
    memset(r, 0, sizeof *r);
    r->s = srv_start();
    snprintf(r->url, sizeof r->url, "http://127.0.0.1:%d/v1/completions", r->s->port);
    r->cfg = (bench_client_config_t){.url = r->url,
                                     .api_key = "sk-test",
                                     .request_id_prefix = "bench-0badcafe-",
                                     .timeout_s = 30};
    for (int i = 0; i < n; i++)
        r->reqs[i] = (bench_client_request_t){body, strlen(body), 100 + i, 5};
}

static void run_go(run_t *r, int n, const double *delays) {
    bench_err_t err;
    r->t0 = bench_client_now();
    assert_int_equal(bench_client_run(&r->cfg, r->reqs, n, delays, r->t0, r->recs, &r->started,
                                      &r->t_end, on_progress, r, &err),
                     0);
}

static void run_teardown(run_t *r, int n) {
    for (int i = 0; i < n; i++)
        free(r->recs[i].itl);
    srv_stop(r->s);
}

static void test_stream_timing(void **state) {
    (void)state;
    run_t r;
    run_setup(&r, "{\"mode\":\"ok\"}", 4);
    run_go(&r, 4, NULL);
    assert_int_equal(r.started, 4);
    for (int i = 0; i < 4; i++) {
        const bench_record_t *x = &r.recs[i];
        if (!x->success) fail_msg("request %d: %s", i, x->error);
        assert_int_equal(x->output_len, 9);  /* usage overrides the 5 events */
        assert_int_equal(x->prompt_len, 33); /* and the dataset's 100 + i */
        assert_int_equal(x->n_itl, 4);       /* one gap per event after the first */
        /* The server naps EVENT_GAP_US before each event after the first, so the last event
         * cannot arrive sooner than four naps after the request left. One gap alone has no such
         * floor: a late event k-1 (a loaded machine) shortens the gap to event k. */
        double sum = 0;
        for (int k = 0; k < 4; k++) {
            assert_true(x->itl[k] > 0);
            sum += x->itl[k];
        }
        assert_true(x->ttft > 0 && x->ttft < 1.0);
        /* latency ends at the last token event, not at the usage chunk or [DONE] */
        assert_true(fabs(x->latency - (x->ttft + sum)) < 1e-9);
        assert_true(x->latency >= 4 * EVENT_GAP_US * 1e-6);
        assert_true(x->start_time >= 0 && x->start_time < 0.5);
        assert_true(x->client_queue_time < 0.5);
    }
    assert_true(r.t_end - r.t0 >= 4 * EVENT_GAP_US * 1e-6);
    /* headers */
    assert_int_equal(r.s->n_ids, 4);
    bool seen[4] = {0};
    for (int i = 0; i < 4; i++) {
        int k;
        assert_int_equal(sscanf(r.s->ids[i], "bench-0badcafe-%d", &k), 1);
        assert_true(k >= 0 && k < 4);
        seen[k] = true;
    }
    assert_true(seen[0] && seen[1] && seen[2] && seen[3]);
    assert_string_equal(r.s->auth, "Bearer sk-test");
    /* the last progress call is the final one */
    assert_true(r.progress_calls >= 1);
    assert_int_equal(r.last.done, 4);
    assert_int_equal(r.last.failed, 0);
    assert_int_equal(r.last.in_flight, 0);
    assert_int_equal(r.last.output_tokens, 36);
    run_teardown(&r, 4);
}

/* At most 2 in flight, 6 requests: the responder never sees more than 2 at once, the client
 * reuses its 2 connections, and the later requests wait in the client's queue. */
static void test_max_concurrency(void **state) {
    (void)state;
    run_t r;
    run_setup(&r, "{\"mode\":\"ok\"}", 6);
    r.cfg.max_concurrency = 2;
    run_go(&r, 6, NULL);
    assert_int_equal(r.started, 6);
    for (int i = 0; i < 6; i++)
        assert_true(r.recs[i].success);
    assert_int_equal(atomic_load(&r.s->max_active), 2);
    assert_int_equal(atomic_load(&r.s->n_conns), 2);
    assert_true(r.recs[4].client_queue_time > 2 * 4 * EVENT_GAP_US * 0.8e-6);
    assert_true(r.recs[5].start_time > r.recs[0].start_time);
    run_teardown(&r, 6);
}

/* Arrivals follow the delays: request i starts at its delay. */
static void test_arrival_delays(void **state) {
    (void)state;
    run_t r;
    run_setup(&r, "{\"mode\":\"ok\"}", 3);
    double delays[3] = {0.05, 0.15, 0.30};
    run_go(&r, 3, delays);
    for (int i = 0; i < 3; i++) {
        assert_true(r.recs[i].success);
        assert_true(r.recs[i].start_time >= delays[i] - 1e-3);
        assert_true(r.recs[i].start_time < delays[i] + 0.05);
    }
    run_teardown(&r, 3);
}

static void test_http_error(void **state) {
    (void)state;
    run_t r;
    run_setup(&r, "{\"mode\":\"missing\"}", 2);
    run_go(&r, 2, NULL);
    for (int i = 0; i < 2; i++) {
        assert_false(r.recs[i].success);
        assert_string_equal(r.recs[i].error, "HTTP 404 Not Found: The model `x` does not exist.");
        assert_null(r.recs[i].itl);
    }
    assert_int_equal(r.last.failed, 2);
    run_teardown(&r, 2);
}

static void test_no_token_event(void **state) {
    (void)state;
    run_t r;
    run_setup(&r, "{\"mode\":\"empty\"}", 1);
    run_go(&r, 1, NULL);
    assert_false(r.recs[0].success);
    assert_string_equal(r.recs[0].error, "Never received a valid chunk to calculate TTFT.");
    run_teardown(&r, 1);
}

/* A stream that ends with finish_reason "abort" (the server shut down or cancelled it) or
 * "error" is a failed request: a benchmark must not count it as a success. */
static void test_server_abort(void **state) {
    (void)state;
    const char *modes[] = {"{\"mode\":\"abort\"}", "{\"mode\":\"error\"}"};
    const char *errors[] = {"the server ended the stream with finish_reason \"abort\"",
                            "the server ended the stream with finish_reason \"error\""};
    for (int k = 0; k < 2; k++) {
        run_t r;
        run_setup(&r, modes[k], 2);
        run_go(&r, 2, NULL);
        for (int i = 0; i < 2; i++) {
            assert_false(r.recs[i].success);
            assert_string_equal(r.recs[i].error, errors[k]);
            assert_null(r.recs[i].itl);
        }
        assert_int_equal(r.last.failed, 2);
        run_teardown(&r, 2);
    }
}

static void test_timeout(void **state) {
    (void)state;
    run_t r;
    run_setup(&r, "{\"mode\":\"stall\"}", 1);
    r.cfg.timeout_s = 0.3;
    run_go(&r, 1, NULL);
    assert_false(r.recs[0].success);
    assert_non_null(strstr(r.recs[0].error, "Timeout"));
    assert_true(r.t_end - r.t0 < 2.0);
    run_teardown(&r, 1);
}

static atomic_bool stop_flag;

static void *raise_stop(void *arg) {
    (void)arg;
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    atomic_store(&stop_flag, true);
    return NULL;
}

/* Stop while two stalled requests are in flight and two more wait for far-off arrivals. */
static void test_stop(void **state) {
    (void)state;
    run_t r;
    run_setup(&r, "{\"mode\":\"stall\"}", 4);
    atomic_store(&stop_flag, false);
    r.cfg.stop = &stop_flag;
    double delays[4] = {0, 0, 30, 60};
    pthread_t th;
    pthread_create(&th, NULL, raise_stop, NULL);
    run_go(&r, 4, delays);
    pthread_join(th, NULL);
    assert_int_equal(r.started, 2);
    for (int i = 0; i < 2; i++) {
        assert_false(r.recs[i].success);
        assert_string_equal(r.recs[i].error, "aborted: benchmark stopped");
    }
    assert_true(r.t_end - r.t0 < 1.5);
    run_teardown(&r, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_timing),  cmocka_unit_test(test_max_concurrency),
        cmocka_unit_test(test_arrival_delays), cmocka_unit_test(test_http_error),
        cmocka_unit_test(test_no_token_event), cmocka_unit_test(test_server_abort),
        cmocka_unit_test(test_timeout),        cmocka_unit_test(test_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
