/*
 * The benchmark client's SSE parser (bench/sse.c): a streamed response's bytes, cut anywhere,
 * and the allocation-free JSON readers the client runs on every message (as bench/client.c's
 * on_message does).
 *
 * The bytes are fed whole, one at a time and in uneven pieces. Which messages come out may depend
 * on the cuts, by design: vLLM's trailing-buffer rule hands on a message whose data line is a
 * complete JSON object before its blank line arrives, so "data: {}x" cut after "}" gives "{}",
 * whole it gives "{}x". Properties: cut only after blank lines ("\n\n"), the messages are
 * those of the whole feed; bench_sse_json_valid agrees with the server's strict parser
 * (engine/json.c) on UTF-8 text nested less deeply than its limit.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "json.h"
#include "sse.h"

/* The messages of one pass, each as its length then its bytes. */
static int collect(void *user, const char *data, size_t len) {
    jbuf_t *b = user;
    FZ_CHECK(data[len] == '\0', "message not NUL-terminated");
    jb_printf(b, "%zu:", len);
    jb_raw(b, data, len);
    return 0;
}

/* Feeds pieces of 1, 2, ... max_piece bytes, cycling (max_piece >= size: the whole input at
 * once; max_piece 0: pieces that end after each "\n\n"). */
static void pass(const uint8_t *data, size_t size, size_t max_piece, jbuf_t *out) {
    bench_sse_t s;
    if (bench_sse_init(&s, 16) < 0) abort();
    size_t piece = max_piece >= size ? size : 1;
    for (size_t at = 0; at < size;) {
        size_t k = piece < size - at ? piece : size - at;
        if (max_piece == 0) {
            const uint8_t *b = memmem(data + at, size - at, "\n\n", 2);
            k = b ? (size_t)(b - (data + at)) + 2 : size - at;
        }
        FZ_CHECK(bench_sse_feed(&s, (const char *)data + at, k, collect, out) == 0, "feed failed");
        at += k;
        if (max_piece) piece = piece % max_piece + 1;
    }
    FZ_CHECK(bench_sse_finish(&s, collect, out) == 0, "finish failed");
    bench_sse_free(&s);
}

static bool same(const jbuf_t *a, const jbuf_t *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

static unsigned hex4_at(const char *p) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'                     ? c - '0'
                : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10
                                                         : -1;
        if (d < 0) return 0x110000; /* not a \u escape the grammar takes */
        v = v * 16 + (unsigned)d;
    }
    return v;
}

/* Whether the text holds a \u escape of an unpaired UTF-16 surrogate (a high one not followed by
 * a low one, or a low one alone). */
static bool lone_surrogate(const char *p, size_t n) {
    for (size_t i = 0; i + 6 <= n; i++) {
        if (p[i] != '\\') continue;
        if (p[i + 1] != 'u') {
            i++; /* an escaped character: \\ or \" */
            continue;
        }
        unsigned v = hex4_at(p + i + 2);
        if (v >= 0xdc00 && v <= 0xdfff) return true;
        if (v >= 0xd800 && v <= 0xdbff) {
            unsigned w =
                i + 12 <= n && p[i + 6] == '\\' && p[i + 7] == 'u' ? hex4_at(p + i + 8) : 0;
            if (!(w >= 0xdc00 && w <= 0xdfff)) return true;
            i += 6;
        }
        i += 5;
    }
    return false;
}

static int depth_of(const char *p, size_t n) {
    int d = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++d > max) max = d;
        } else if (c == ']' || c == '}') {
            d--;
        }
    }
    return max;
}

/* What the client reads of a message. */
static void read_message(const char *data, size_t len) {
    bool valid = bench_sse_json_valid(data, len);
    if (len < 4096 && depth_of(data, len) < 60 && fz_utf8_valid((const uint8_t *)data, len)) {
        err_t err;
        cJSON *j = json_parse(data, len, &err);
        /* json_parse refuses by design, where the client rightly takes what JSON's grammar takes:
         * an object key holding U+0000 (json.h: cJSON would cut the key), and a \u escape of an
         * unpaired surrogate (RFC 8259's grammar has it, as Python's json does; cJSON has no
         * UTF-8 for it) */
        bool nul_key = !j && strstr(err.msg, "object key holds U+0000");
        bool lone = !j && valid && lone_surrogate(data, len);
        FZ_CHECK(nul_key || lone || valid == (j != NULL),
                 "bench_sse_json_valid says %d, json_parse %s: %.*s", valid, j ? "valid" : err.msg,
                 (int)len, data);
        cJSON_Delete(j);
    }
    size_t vl, el, l;
    const char *v = bench_sse_json_get(data, len, "choices", &vl);
    if (v) {
        FZ_CHECK(v >= data && v + vl <= data + len, "choices outside the message");
        (void)bench_sse_json_nonempty_array(v, vl);
        const char *c = bench_sse_json_first(v, vl, &el);
        if (c) {
            FZ_CHECK(c >= v && c + el <= v + vl, "first choice outside the array");
            const char *f = bench_sse_json_get(c, el, "finish_reason", &l);
            if (f) FZ_CHECK(f >= c && f + l <= c + el, "finish_reason outside the choice");
        }
    }
    const char *u = bench_sse_json_get(data, len, "usage", &vl);
    if (u) {
        long long x;
        const char *t = bench_sse_json_get(u, vl, "completion_tokens", &l);
        if (t) (void)bench_sse_json_int(t, l, &x);
        t = bench_sse_json_get(u, vl, "prompt_tokens", &l);
        if (t) (void)bench_sse_json_int(t, l, &x);
    }
}

static int check_message(void *user, const char *data, size_t len) {
    char *copy = malloc(len ? len : 1); /* exactly sized: ASan sees any overread */
    if (!copy) abort();
    memcpy(copy, data, len);
    read_message(copy, len);
    free(copy);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    jbuf_t whole, messages, other;
    jb_init(&whole);
    jb_init(&messages);
    jb_init(&other);
    pass(data, size, size ? size : 1, &whole);
    pass(data, size, 0, &messages);
    FZ_CHECK(same(&whole, &messages), "messages differ when fed message by message");
    pass(data, size, 1, &other);
    pass(data, size, 7, &other);
    bench_sse_t s;
    if (bench_sse_init(&s, 64) < 0) abort();
    bench_sse_feed(&s, (const char *)data, size, check_message, NULL);
    bench_sse_finish(&s, check_message, NULL);
    bench_sse_free(&s);
    jb_free(&whole);
    jb_free(&messages);
    jb_free(&other);
    return 0;
}
