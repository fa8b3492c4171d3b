/* The server's building blocks without HTTP: the JSON writer (escaping, U+FFFD replacement as
 * Python's errors="replace" does, number spelling) and the Prometheus rendering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "json.h"
#include "metrics.h"
#include "server_int.h"

static void expect_esc(const char *in, size_t n, const char *want) {
    jbuf_t b;
    jb_init(&b);
    jb_esc(&b, in, n);
    assert_false(b.oom);
    assert_string_equal(b.p, want);
    jb_free(&b);
}

static void test_escape(void **state) {
    (void)state;
    expect_esc("plain", 5, "plain");
    expect_esc("a\"b\\c", 5, "a\\\"b\\\\c");
    expect_esc("\n\r\t\b\f", 5, "\\n\\r\\t\\b\\f");
    expect_esc("\x01\x1f\x7f", 3, "\\u0001\\u001f\x7f");
    expect_esc("a\0b", 3, "a\\u0000b");
    expect_esc("h\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80", 12,
               "h\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");
}

/* Each maximal invalid subpart becomes one U+FFFD (the counts Python's
 * bytes.decode("utf-8", "replace") gives). */
static void test_utf8_replacement(void **state) {
    (void)state;
    static const struct {
        const char *in;
        size_t n;
        int fffd;
    } cases[] = {
        {"\xff", 1, 1},
        {"\x80", 1, 1},
        {"\xc0\xaf", 2, 2},
        {"\xe2\x82", 2, 1},
        {"\xed\xa0\x80", 3, 3},
        {"\xf0\x9f\x98", 3, 1},
        {"\xf4\x90\x80\x80", 4, 4},
        {"\xf5\x80", 2, 2},
        {"\xe0\x80\x80", 3, 3},
        {"\xe2\x82\x41", 3, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jbuf_t b;
        jb_init(&b);
        jb_esc(&b, cases[i].in, cases[i].n);
        int count = 0;
        for (const char *p = b.p; (p = strstr(p, "\xef\xbf\xbd")); p += 3)
            count++;
        assert_int_equal(count, cases[i].fffd);
        assert_true(jb_utf8_valid(b.p, b.len));
        assert_false(jb_utf8_valid(cases[i].in, cases[i].n));
        jb_free(&b);
    }
    jbuf_t b;
    jb_init(&b);
    jb_bytes_array(&b, "a\xe2\x82", 3);
    assert_string_equal(b.p, "[97,239,191,189]");
    jb_free(&b);
}

static void expect_double(double v, const char *want) {
    jbuf_t b;
    jb_init(&b);
    jb_double(&b, v);
    assert_string_equal(b.p, want);
    jb_free(&b);
}

/* Python's repr spelling where it matters: shortest round trip, integral values with ".0". */
static void test_numbers(void **state) {
    (void)state;
    expect_double(0.1, "0.1");
    expect_double(1.0, "1.0");
    expect_double(-2.5, "-2.5");
    expect_double((double)0.1f, "0.10000000149011612");
    expect_double(1e-05, "1e-05");
    expect_double(-1.0 / 0.0, "-9999.0");
    expect_double(0.0 / 0.0, "null");
    jbuf_t b;
    jb_init(&b);
    jb_int(&b, -42);
    jb_u64(&b, UINT64_MAX);
    jb_cstr(&b, NULL);
    jb_printf(&b, "%s", "x");
    assert_string_equal(b.p, "-4218446744073709551615nullx");
    jb_reset(&b);
    assert_int_equal(b.len, 0);
    jb_free(&b);
}

static void test_growth(void **state) {
    (void)state;
    jbuf_t b;
    jb_init(&b);
    for (int i = 0; i < 100000; i++)
        jb_lit(&b, "0123456789");
    assert_int_equal(b.len, 1000000);
    assert_int_equal(strlen(b.p), 1000000);
    jb_free(&b);
}

static void test_metrics(void **state) {
    (void)state;
    metrics_t *m = metrics_create(4096);
    assert_non_null(m);
    metrics_request_t r = {.prompt_tokens = 7,
                           .generation_tokens = 30,
                           .max_generation = 30,
                           .n = 1,
                           .max_tokens = 64};
    metrics_request_done(m, &r);
    r.prompt_tokens = 3000;
    metrics_request_done(m, &r);
    metrics_add(m, METRIC_DISCONNECTS, 2);
    stats_snapshot_t *s = calloc(1, sizeof *s);
    s->kv_used = 5;
    s->kv_total = 20;
    s->requests_finished[2] = 4; /* abort */
    s->ttft.n_bounds = 2;
    s->ttft.bounds[0] = 0.1;
    s->ttft.bounds[1] = 1;
    s->ttft.counts[0] = 1;
    s->ttft.counts[1] = 2;
    s->ttft.counts[2] = 3;
    s->ttft.count = 6;
    s->ttft.sum = 9.5;
    metrics_info_t info = {
        .model_name = "we\"ird\\name", .block_size = 16, .kv_cache_dtype = "auto"};
    jbuf_t b;
    jb_init(&b);
    metrics_render(m, (const stats_snapshot_t *const[]){s}, 1, &info, &b);
    assert_false(b.oom);
    const char *l = "engine=\"0\",model_name=\"we\\\"ird\\\\name\"";
    char want[512];
    snprintf(want, sizeof want, "vllm:kv_cache_usage_perc{%s} 0.25\n", l);
    assert_non_null(strstr(b.p, want));
    snprintf(want, sizeof want, "vllm:request_success_total{%s,finished_reason=\"abort\"} 4.0\n",
             l);
    assert_non_null(strstr(b.p, want));
    /* buckets are cumulative; +Inf equals the count */
    snprintf(want, sizeof want,
             "vllm:time_to_first_token_seconds_bucket{%s,le=\"0.1\"} 1.0\n"
             "vllm:time_to_first_token_seconds_bucket{%s,le=\"1.0\"} 3.0\n"
             "vllm:time_to_first_token_seconds_bucket{%s,le=\"+Inf\"} 6.0\n"
             "vllm:time_to_first_token_seconds_count{%s} 6.0\n"
             "vllm:time_to_first_token_seconds_sum{%s} 9.5\n",
             l, l, l, l, l);
    assert_non_null(strstr(b.p, want));
    /* 1-2-5 buckets up to max_model_len: 7 falls in le=10, 3000 in le=5000 is beyond 4096 */
    snprintf(want, sizeof want, "vllm:request_prompt_tokens_bucket{%s,le=\"10.0\"} 1.0\n", l);
    assert_non_null(strstr(b.p, want));
    snprintf(want, sizeof want, "vllm:request_prompt_tokens_bucket{%s,le=\"2000.0\"} 1.0\n", l);
    assert_non_null(strstr(b.p, want));
    snprintf(want, sizeof want, "vllm:request_prompt_tokens_bucket{%s,le=\"+Inf\"} 2.0\n", l);
    assert_non_null(strstr(b.p, want));
    assert_null(strstr(b.p, "le=\"5000.0\""));
    snprintf(want, sizeof want, "tachyon:client_disconnects_total{%s} 2.0\n", l);
    assert_non_null(strstr(b.p, want));
    assert_non_null(strstr(b.p, "# TYPE vllm:generation_tokens_total counter\n"));
    assert_null(strstr(b.p, "moe_expert")); /* a dense model has no expert series */
    jb_free(&b);

    /* speculative decoding: the counters, and accepted tokens per draft position used */
    s->spec_drafts = 10;
    s->spec_draft_tokens = 30;
    s->spec_accepted_tokens = 12;
    s->spec_accepted_per_pos[0] = 7;
    s->spec_accepted_per_pos[1] = 4;
    s->spec_accepted_per_pos[2] = 1;
    s->spec_k = 3;
    jb_init(&b);
    metrics_render(m, (const stats_snapshot_t *const[]){s}, 1, &info, &b);
    snprintf(want, sizeof want,
             "vllm:spec_decode_num_drafts_total{%s} 10.0\n"
             "# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.\n"
             "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
             "vllm:spec_decode_num_draft_tokens_total{%s} 30.0\n",
             l, l);
    assert_non_null(strstr(b.p, want));
    snprintf(want, sizeof want, "vllm:spec_decode_num_accepted_tokens_total{%s} 12.0\n", l);
    assert_non_null(strstr(b.p, want));
    snprintf(want, sizeof want,
             "vllm:spec_decode_num_accepted_tokens_per_pos_total{%s,position=\"2\"} 1.0\n", l);
    assert_non_null(strstr(b.p, want));
    assert_null(strstr(b.p, "position=\"3\""));
    jb_free(&b);

    /* an MoE model: a counter per (layer, expert) and each layer's imbalance in the window */
    s->experts.n_layers = 2;
    s->experts.n_experts = 4;
    s->experts.layer[0] = 1;
    s->experts.layer[1] = 3;
    s->experts.window_s = 10;
    static const uint32_t window[8] = {1, 1, 1, 1, 8, 0, 0, 0};
    for (int c = 0; c < 8; c++) {
        s->experts.total[c] = 100 + (uint64_t)c;
        s->experts.window[c] = window[c];
    }
    jb_init(&b);
    metrics_render(m, (const stats_snapshot_t *const[]){s}, 1, &info, &b);
    snprintf(want, sizeof want,
             "tachyon:moe_expert_tokens_total{%s,layer=\"3\",expert=\"2\"} 106.0\n", l);
    assert_non_null(strstr(b.p, want));
    snprintf(want, sizeof want,
             "tachyon:moe_expert_load_imbalance{%s,layer=\"1\"} 1.0\n"
             "tachyon:moe_expert_load_imbalance{%s,layer=\"3\"} 4.0\n",
             l, l);
    assert_non_null(strstr(b.p, want));
    snprintf(want, sizeof want, "tachyon:moe_expert_window_seconds{%s} 10.0\n", l);
    assert_non_null(strstr(b.p, want));
    jb_free(&b);
    free(s);
    metrics_destroy(m);
    metrics_destroy(NULL);
}

/* Two data-parallel replicas: each engine family has one HELP and TYPE and then a sample per
 * replica labelled engine="0" and engine="1"; the server's own series are there once. */
static void test_metrics_replicas(void **state) {
    (void)state;
    metrics_t *m = metrics_create(1024);
    stats_snapshot_t *s = calloc(2, sizeof *s);
    s[0].running = 3, s[1].running = 4;
    s[0].kv_total = 10, s[1].kv_total = 30;
    s[1].ttft.n_bounds = 1;
    s[1].ttft.bounds[0] = 1;
    s[1].ttft.counts[0] = 2;
    s[1].ttft.count = 2;
    metrics_info_t info = {.model_name = "m", .block_size = 16, .kv_cache_dtype = "auto"};
    jbuf_t b;
    jb_init(&b);
    metrics_render(m, (const stats_snapshot_t *const[]){&s[0], &s[1]}, 2, &info, &b);
    assert_false(b.oom);
    assert_non_null(strstr(b.p, "# TYPE vllm:num_requests_running gauge\n"
                                "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n"
                                "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 4.0\n"));
    assert_non_null(strstr(b.p, "vllm:time_to_first_token_seconds_count{engine=\"0\",model_name="
                                "\"m\"} 0.0\n"));
    assert_non_null(strstr(b.p, "vllm:time_to_first_token_seconds_count{engine=\"1\",model_name="
                                "\"m\"} 2.0\n"));
    assert_non_null(strstr(b.p, "num_gpu_blocks=\"30\"} 1.0"));
    /* one HELP per family, and the server's histograms once */
    const char *help = "# HELP vllm:num_requests_running ";
    assert_null(strstr(strstr(b.p, help) + 1, help));
    assert_non_null(strstr(b.p, "vllm:request_prompt_tokens_count{engine=\"0\""));
    assert_null(strstr(b.p, "vllm:request_prompt_tokens_count{engine=\"1\""));
    assert_null(strstr(b.p, "tachyon:http_connections{engine=\"1\""));
    jb_free(&b);
    free(s);
    metrics_destroy(m);
}

/* /admin answers loopback peers only when no API key is set: which addresses are loopback. */
static void test_loopback(void **state) {
    (void)state;
    struct sockaddr_in in = {.sin_family = AF_INET};
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
    static const struct {
        const char *addr;
        bool loopback;
    } cases[] = {{"127.0.0.1", true},
                 {"127.1.2.3", true},
                 {"10.0.0.1", false},
                 {"0.0.0.0", false},
                 {"::1", true},
                 {"::", false},
                 {"::ffff:127.0.0.1", true},
                 {"::ffff:192.168.1.2", false},
                 {"fe80::1", false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *a = cases[i].addr;
        bool v6 = strchr(a, ':') != NULL;
        assert_int_equal(inet_pton(v6 ? AF_INET6 : AF_INET, a,
                                   v6 ? (void *)&in6.sin6_addr : (void *)&in.sin_addr),
                         1);
        const struct sockaddr *sa = v6 ? (struct sockaddr *)&in6 : (struct sockaddr *)&in;
        assert_int_equal(srv_addr_is_loopback(sa), cases[i].loopback);
        assert_int_equal(http_host_is_loopback(a), cases[i].loopback);
    }
    assert_true(http_host_is_loopback("localhost"));
    assert_false(http_host_is_loopback("example.org"));
    assert_false(srv_addr_is_loopback(NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loopback),         cmocka_unit_test(test_escape),
        cmocka_unit_test(test_utf8_replacement), cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_growth),           cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_metrics_replicas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
