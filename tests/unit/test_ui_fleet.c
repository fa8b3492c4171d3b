/* ui_fleet: /metrics text to numbers (Tachyon's and vLLM's names, several engines summed, labels
 * with escapes, the deprecated KV name, text that is not vLLM's), rates from counter deltas (a
 * restart gives none), the fleet's total, the table's text exactly as wide as asked (a long URL
 * keeps its end, a down replica says why and for how long), a benchmark's rows (deltas, down,
 * restarts), the metrics URL; and the sampler against sockets of this test: a replica answering
 * (its rates), one refusing, one that never answers (timed out), all read at once; one read on
 * the calling thread. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "engine.h"
#include "metrics.h"
#include "ui_fleet.h"

static const char tachyon_text[] =
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{engine=\"0\",model_name=\"qwen \\\"3\\\" 14b\"} 3\n"
    "vllm:num_requests_running{engine=\"1\",model_name=\"qwen \\\"3\\\" 14b\"} 2\n"
    "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 7\n"
    "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n"
    "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.75\n"
    "vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.99\n"
    "vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} 1000\n"
    "vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 5e3\n"
    "vllm:request_success_total{engine=\"0\",model_name=\"m\",finished_reason=\"stop\"} 4\n"
    "vllm:request_success_total{engine=\"0\",model_name=\"m\",finished_reason=\"length\"} 6\n"
    "vllm:num_requests_running_other 99\n"
    "vllm:num_requests_waiting{model_name=\"a}b\"} 1 1712345678000\n"
    "vllm:num_requests_waiting{broken=\"} 50\n"
    "vllm:num_requests_waiting{engine=\"0\"} notanumber\n"
    "vllm:num_requests_waiting 1000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000000\n";

static void test_parse(void **state) {
    (void)state;
    ui_fleet_scrape_t s;
    assert_int_equal(ui_fleet_parse(tachyon_text, strlen(tachyon_text), &s), 0);
    assert_true(s.running == 5);
    assert_true(s.waiting == 8); /* a '}' inside a label value, a timestamp; bad lines skipped */
    assert_true(fabs(s.kv - 0.5) < 1e-9); /* the mean of the engines; the deprecated name unused */
    assert_true(s.gen_tokens == 1000);
    assert_true(s.prompt_tokens == 5000);
    assert_true(s.requests_done == 10);
    assert_string_equal(s.model, "qwen \"3\" 14b");

    static const char old_vllm[] = "vllm:num_requests_running 1\n"
                                   "vllm:gpu_cache_usage_perc 0.5\r\n";
    assert_int_equal(ui_fleet_parse(old_vllm, strlen(old_vllm), &s), 0);
    assert_true(s.running == 1 && s.kv == 0.5 && s.model[0] == 0);

    static const char no_kv[] = "vllm:num_requests_running{} 0";
    assert_int_equal(ui_fleet_parse(no_kv, strlen(no_kv), &s), 0);
    assert_true(isnan(s.kv));

    static const char other[] = "# a node exporter\nnode_load1 0.5\n<html>not found</html>\n";
    assert_int_equal(ui_fleet_parse(other, strlen(other), &s), -1);
    assert_int_equal(ui_fleet_parse("", 0, &s), -1);
}

/* What Tachyon's server exports (server/metrics.c) reads back exactly, a model name that needs
 * escapes included; a label of another name holding `model_name="..."` does not fool it. */
static void test_parse_server(void **state) {
    (void)state;
    metrics_t *m = metrics_create(4096);
    assert_non_null(m);
    stats_snapshot_t *st = calloc(1, sizeof *st);
    assert_non_null(st);
    st->running = 3;
    st->waiting = 9;
    st->kv_used = 5;
    st->kv_total = 20;
    st->prompt_tokens = 123456789012ull;
    st->generation_tokens = 4242;
    for (int r = 0; r < 4; r++)
        st->requests_finished[r] = (uint64_t)(r + 1);
    metrics_info_t info = {
        .model_name = "we\"ird\\name\nx", .block_size = 16, .kv_cache_dtype = "auto"};
    jbuf_t b;
    jb_init(&b);
    metrics_render(m, (const stats_snapshot_t *const[]){st}, 1, &info, &b);
    assert_false(b.oom);
    ui_fleet_scrape_t s;
    assert_int_equal(ui_fleet_parse(b.p, b.len, &s), 0);
    assert_true(s.running == 3 && s.waiting == 9 && s.kv == 0.25);
    assert_true(s.prompt_tokens == 123456789012.0 && s.gen_tokens == 4242);
    assert_true(s.requests_done == 10);
    assert_string_equal(s.model, "we\"ird\\name\nx");
    jb_free(&b);
    free(st);
    metrics_destroy(m);

    static const char tricky[] =
        "vllm:num_requests_running{x=\",model_name=\\\"no\\\"\",model_name=\"yes\"} 1\n";
    assert_int_equal(ui_fleet_parse(tricky, strlen(tricky), &s), 0);
    assert_string_equal(s.model, "yes");
}

static ui_fleet_scrape_t scrape(double gen, double prompt) {
    ui_fleet_scrape_t s = {.running = 2, .kv = 0.5, .gen_tokens = gen, .prompt_tokens = prompt};
    return s;
}

static void test_rates(void **state) {
    (void)state;
    ui_fleet_row_t r;
    ui_fleet_row_init(&r, "http://a:8000");
    assert_false(r.seen);
    ui_fleet_scrape_t s = scrape(100, 1000);
    ui_fleet_row_update(&r, &s, NULL, 10);
    assert_true(r.seen && r.up && r.since == 10);
    assert_true(isnan(r.gen_tps)); /* one read: no rate yet */
    s = scrape(300, 1500);
    ui_fleet_row_update(&r, &s, NULL, 12);
    assert_true(r.gen_tps == 100 && r.prompt_tps == 250);
    assert_true(r.since == 10);

    ui_fleet_row_update(&r, NULL, "connection refused", 13);
    assert_false(r.up);
    assert_string_equal(r.why, "connection refused");
    assert_true(r.since == 13 && isnan(r.gen_tps));
    assert_true(r.m.gen_tokens == 300); /* the last good read is kept */

    s = scrape(5, 5); /* back after a restart: its counters start again */
    ui_fleet_row_update(&r, &s, NULL, 20);
    assert_true(r.up && r.since == 20 && isnan(r.gen_tps));
    s = scrape(2, 10); /* a counter that goes down: no rate */
    ui_fleet_row_update(&r, &s, NULL, 21);
    assert_true(isnan(r.gen_tps) && r.prompt_tps == 5);
}

static void test_total(void **state) {
    (void)state;
    ui_fleet_row_t rows[3], t;
    ui_fleet_row_init(&rows[0], "a");
    ui_fleet_row_init(&rows[1], "b");
    ui_fleet_row_init(&rows[2], "c");
    ui_fleet_scrape_t s = scrape(0, 0);
    ui_fleet_row_update(&rows[0], &s, NULL, 1);
    s = scrape(100, 0);
    ui_fleet_row_update(&rows[0], &s, NULL, 2);
    s = scrape(0, 0);
    s.kv = 0.25;
    s.requests_done = 3;
    ui_fleet_row_update(&rows[1], &s, NULL, 2); /* up, no rate yet */
    ui_fleet_row_update(&rows[2], NULL, "HTTP 503", 2);
    ui_fleet_total(rows, 3, &t);
    assert_int_equal(t.n_up, 2);
    assert_int_equal(t.n_rows, 3);
    assert_true(t.m.running == 4 && t.m.requests_done == 3);
    assert_true(fabs(t.m.kv - 0.375) < 1e-9);
    assert_true(t.gen_tps == 100);
    ui_fleet_total(rows + 2, 1, &t); /* none up: no numbers */
    assert_int_equal(t.n_up, 0);
    assert_true(isnan(t.m.kv) && isnan(t.gen_tps));
}

static void test_text(void **state) {
    (void)state;
    char line[UI_FLEET_LINE];
    for (int w = 40; w <= 300; w += 13) {
        ui_fleet_cols_t c;
        ui_fleet_columns(w, &c);
        assert_true(c.url_w >= 12);
        ui_fleet_head_text(&c, line, sizeof line);
        assert_int_equal((int)strlen(line), w);
        ui_fleet_row_t r;
        ui_fleet_row_init(&r, "http://a-very-long-host-name.example.com:8000/some/path");
        ui_fleet_scrape_t s = scrape(0, 0);
        snprintf(s.model, sizeof s.model, "Qwen/Qwen3-14B-FP8");
        ui_fleet_row_update(&r, &s, NULL, 1);
        ui_fleet_row_text(&c, &r, 7, 2, line, sizeof line);
        assert_int_equal((int)strlen(line), w);
        if (w >= 80) {
            /* a URL longer than its column keeps its end */
            if (c.url_w < 48) assert_non_null(strstr(line, "  7 ~"));
            assert_non_null(strstr(line, "8000/some/path"));
            assert_non_null(strstr(line, " up "));
            assert_non_null(strstr(line, "50.0%"));
        }
        assert_true((c.model_w > 0) == (w >= 117));
        if (c.model_w > 0) assert_non_null(strstr(line, "Qwen/Qwen3-14B"));
        ui_fleet_row_update(&r, NULL, "connection refused", 5);
        ui_fleet_row_text(&c, &r, 7, 17.5, line, sizeof line);
        assert_int_equal((int)strlen(line), w);
        if (w >= 120) assert_non_null(strstr(line, "down  connection refused for 12 s"));
    }
    ui_fleet_cols_t c;
    ui_fleet_columns(80, &c);
    ui_fleet_head_text(&c, line, sizeof line);
    assert_string_equal(line, "  # replica             state  run  wait    KV%  gen tok/s  prompt "
                              "tok/s    done");
    ui_fleet_row_t r, t;
    ui_fleet_row_init(&r, "http://127.0.0.1:8001");
    ui_fleet_row_text(&c, &r, 1, 0, line, sizeof line);
    assert_non_null(strstr(line, "  1 127.0.0.1:8001      --    not read yet"));
    ui_fleet_total(&r, 1, &t);
    ui_fleet_row_text(&c, &t, 0, 0, line, sizeof line);
    assert_non_null(strstr(line, "    fleet: 0/1 up  "));
    assert_non_null(strstr(line, "      -          -             -       0"));
}

static void test_run_text(void **state) {
    (void)state;
    char line[UI_FLEET_LINE];
    ui_fleet_run_head_text(line, sizeof line);
    assert_string_equal(line,
                        "  # replica                  state  requests  gen tokens  gen tok/s  "
                        "KV% at end");
    ui_fleet_row_t b, a;
    ui_fleet_row_init(&b, "http://127.0.0.1:8001");
    ui_fleet_scrape_t s = scrape(100, 0);
    s.requests_done = 10;
    ui_fleet_row_update(&b, &s, NULL, 1);
    a = b;
    s = scrape(400, 0);
    s.requests_done = 15;
    ui_fleet_row_update(&a, &s, NULL, 5);
    ui_fleet_run_text(&b, &a, 1, 3, line, sizeof line);
    assert_string_equal(line, "  1 127.0.0.1:8001           up            5         300      100.0"
                              "       50.0%");
    ui_fleet_row_t down = b;
    ui_fleet_row_update(&down, NULL, "HTTP 503", 5);
    ui_fleet_run_text(&b, &down, 2, 3, line, sizeof line);
    assert_string_equal(line, "  2 127.0.0.1:8001           down  HTTP 503 (up before the run)");
    ui_fleet_run_text(&down, &a, 3, 3, line, sizeof line); /* down before: no deltas */
    assert_non_null(strstr(line, " up            -           -          -       50.0%"));
    s = scrape(5, 0); /* restarted during the run: its counters went down */
    ui_fleet_row_update(&a, &s, NULL, 6);
    ui_fleet_run_text(&b, &a, 4, 3, line, sizeof line);
    assert_non_null(strstr(line, " up            -           -          -"));
}

static void test_metrics_url(void **state) {
    (void)state;
    char buf[64];
    assert_int_equal(ui_fleet_metrics_url("http://h:8000", buf, sizeof buf), 0);
    assert_string_equal(buf, "http://h:8000/metrics");
    assert_int_equal(ui_fleet_metrics_url("http://h:8000//", buf, sizeof buf), 0);
    assert_string_equal(buf, "http://h:8000/metrics");
    assert_int_equal(ui_fleet_metrics_url("http://h:8000/metrics/", buf, sizeof buf), 0);
    assert_string_equal(buf, "http://h:8000/metrics");
    assert_int_equal(ui_fleet_metrics_url("http://h/x", buf, 12), -1);
}

// ---------------------------------------------------------------------------------------------
// The sampler against this test's sockets

static int listen_loopback(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

typedef struct responder {
    int fd;
    atomic_int served; /* answers given; the generation counter grows 50 per answer */
} responder_t;

/* Answers each connection's request with /metrics text, then closes it. Ends when fd is shut. */
static void *respond(void *arg) {
    responder_t *r = arg;
    for (;;) {
        int c = accept(r->fd, NULL, NULL);
        if (c < 0) return NULL;
        char req[4096];
        ssize_t n = read(c, req, sizeof req);
        (void)n;
        char body[256], head[128];
        int served = atomic_fetch_add(&r->served, 1);
        int bl = snprintf(body, sizeof body,
                          "vllm:num_requests_running{model_name=\"fake\"} 1\n"
                          "vllm:generation_tokens_total{model_name=\"fake\"} %d\n",
                          served * 50);
        int hl = snprintf(head, sizeof head,
                          "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", bl);
        if (write(c, head, (size_t)hl) < 0 || write(c, body, (size_t)bl) < 0) {
        }
        close(c);
    }
}

static void test_sampler(void **state) {
    (void)state;
    int p_up, p_hang, p_closed;
    responder_t up = {.fd = listen_loopback(&p_up)};
    int hang = listen_loopback(&p_hang); /* accepts (the kernel does), never answers */
    close(listen_loopback(&p_closed));   /* nothing listens there */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, respond, &up), 0);
    char u0[64], u1[64], u2[64];
    snprintf(u0, sizeof u0, "http://127.0.0.1:%d", p_up);
    snprintf(u1, sizeof u1, "http://127.0.0.1:%d/metrics", p_closed);
    snprintf(u2, sizeof u2, "http://127.0.0.1:%d/", p_hang);
    const char *urls[] = {u0, u1, u2};
    err_t err = {{0}};
    ui_fleet_sampler_t *sp = ui_fleet_sampler_start(urls, 3, 0.2, &err);
    assert_non_null(sp);
    ui_fleet_row_t rows[3];
    unsigned seq = 0;
    bool rated = false;
    double t0 = engine_now();
    while (!rated && engine_now() - t0 < 30) {
        if (ui_fleet_sampler_latest(sp, rows, 3, &seq)) rated = !isnan(rows[0].gen_tps);
        usleep(20000);
    }
    assert_true(rated);
    assert_true(rows[0].up && rows[0].m.running == 1 && rows[0].gen_tps > 0);
    assert_string_equal(rows[0].m.model, "fake");
    assert_false(rows[1].up);
    assert_string_equal(rows[1].why, "connection refused");
    assert_false(rows[2].up); /* a round waits for the slowest: 1 s at least */
    assert_string_equal(rows[2].why, "timed out");
    /* one read on this thread: the same outcomes */
    ui_fleet_row_t once[2];
    ui_fleet_row_init(&once[0], u0);
    ui_fleet_row_init(&once[1], u1);
    assert_int_equal(ui_fleet_read(once, 2, 1, &err), 0);
    assert_true(once[0].up && once[0].m.running == 1);
    assert_false(once[1].up);
    assert_string_equal(once[1].why, "connection refused");
    double t_stop = engine_now();
    ui_fleet_sampler_stop(sp); /* in the middle of a round: at once */
    assert_true(engine_now() - t_stop < 0.9);
    ui_fleet_sampler_stop(NULL);
    shutdown(up.fd, SHUT_RDWR);
    close(up.fd);
    pthread_join(th, NULL);
    close(hang);

    const char *none[] = {u0};
    assert_null(ui_fleet_sampler_start(none, 0, 1, &err));
    assert_non_null(strstr(err.msg, "between 1 and"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),       cmocka_unit_test(test_parse_server),
        cmocka_unit_test(test_rates),       cmocka_unit_test(test_total),
        cmocka_unit_test(test_text),        cmocka_unit_test(test_run_text),
        cmocka_unit_test(test_metrics_url), cmocka_unit_test(test_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
