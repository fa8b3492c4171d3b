/*
 * The console's reader of a replica's Prometheus /metrics (tui/ui_fleet.c, `tachyon console
 * --watch` and `tachyon bench --metrics`): whatever a server sends.
 *
 * The input is parsed as it is, from an exactly sized copy (ASan sees any overread); the model
 * name that comes out is a NUL-terminated string inside its buffer. Then the input's first bytes
 * are read as numbers and a model name (printable ASCII and newlines), rendered by Tachyon's own
 * exporter (server/metrics.c) and parsed back: every number and the name come back exactly.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "metrics.h"
#include "ui_fleet.h"

/* The next n bytes of the input as a little-endian number (0 past its end). */
static uint64_t take(const uint8_t **p, const uint8_t *end, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++, (*p)++)
        if (*p < end) v |= (uint64_t) * *p << (8 * i);
    return v;
}

static void round_trip(const uint8_t *data, size_t size) {
    const uint8_t *p = data, *end = data + size;
    stats_snapshot_t *st = calloc(1, sizeof *st);
    if (!st) abort();
    st->running = (int)take(&p, end, 2);
    st->waiting = (int)take(&p, end, 2);
    st->kv_total = (int)take(&p, end, 2);
    st->kv_used = st->kv_total ? (int)(take(&p, end, 2) % ((uint64_t)st->kv_total + 1)) : 0;
    st->prompt_tokens = take(&p, end, 5);
    st->generation_tokens = take(&p, end, 5);
    uint64_t done = 0;
    for (int r = 0; r < 4; r++)
        done += st->requests_finished[r] = take(&p, end, 3);
    char name[64];
    size_t k = 0;
    for (; p < end && k + 1 < sizeof name; p++)
        name[k++] = *p % 96 == 95 ? '\n' : (char)(' ' + *p % 96 % 95);
    name[k] = 0;

    metrics_t *m = metrics_create(4096);
    if (!m) abort();
    metrics_info_t info = {.model_name = name, .block_size = 16, .kv_cache_dtype = "auto"};
    jbuf_t b;
    jb_init(&b);
    metrics_render(m, (const stats_snapshot_t *const[]){st}, 1, &info, &b);
    if (b.oom) abort();
    ui_fleet_scrape_t s;
    FZ_CHECK(ui_fleet_parse(b.p, b.len, &s) == 0, "the exporter's text not read");
    double kv = st->kv_total ? (double)st->kv_used / st->kv_total : 0.0;
    FZ_CHECK(s.running == st->running && s.waiting == st->waiting, "requests %g %g", s.running,
             s.waiting);
    FZ_CHECK(s.kv == kv, "KV %.17g, want %.17g", s.kv, kv);
    FZ_CHECK(s.prompt_tokens == (double)st->prompt_tokens &&
                 s.gen_tokens == (double)st->generation_tokens,
             "tokens %g %g", s.prompt_tokens, s.gen_tokens);
    FZ_CHECK(s.requests_done == (double)done, "done %g, want %llu", s.requests_done,
             (unsigned long long)done);
    FZ_CHECK(!strcmp(s.model, name), "model \"%s\", want \"%s\"", s.model, name);
    jb_free(&b);
    metrics_destroy(m);
    free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size ? size : 1);
    if (!copy) abort();
    memcpy(copy, data, size);
    ui_fleet_scrape_t s;
    memset(&s, 0x55, sizeof s);
    if (ui_fleet_parse(copy, size, &s) == 0)
        FZ_CHECK(memchr(s.model, 0, sizeof s.model) != NULL, "model not NUL-terminated");
    free(copy);
    round_trip(data, size);
    return 0;
}
