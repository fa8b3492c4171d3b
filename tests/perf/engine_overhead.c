/* Engine CPU time per step outside the forward pass (schedule, bookkeeping, sampling
 * bookkeeping, detokenize, emit) at a given number of running sequences, with the backend
 * replaced by the null backend (no model math, sampling "on the device"). Not a test: run by
 * bench/engine-overhead.sh, results in bench/RESULTS.md.
 *
 * The measured batch: N requests of 32 prompt tokens, each generating TOKENS (default 2,000,
 * so that every step of the batch is still in the stats ring afterwards), with a reader thread
 * draining every stream as a server would. Before it, a first batch of other prompts runs to
 * its end, as in a server that has been running: the heap, the KV pool and the prefix-cache
 * table are warm, so the kernel's first-touch page faults (about three per step at 512
 * sequences in a fresh process) are not counted as the engine's.
 *
 * Two measures, both taken once the batch has ended (nothing depends on catching a window):
 * the wall time of each decode step with all N sequences running, minus its forward pass (from
 * the stats ring; this includes any time the engine thread was descheduled), and the engine
 * thread's CPU time over the whole batch (schedstat of the thread named "tachyon-engine";
 * admission and the finishing step included) minus the backend's time over the same steps, per
 * step: what the engine itself costs on a core of its own.
 *
 * usage: engine_overhead N_SEQS [TOKENS]   (prints one Markdown table row)
 *        engine_overhead N_SEQS whole      (only the first batch, 4,000 tokens per request,
 *                                           printing nothing: a fixed amount of work to count
 *                                           instructions with callgrind --toggle-collect=engine_main)
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

typedef struct reader {
    engine_stream_t **streams;
    int n;
    _Atomic int stop;
    _Atomic int n_over; /* streams that ended */
    char *over; /* [n] */
} reader_t;

/* Drains every stream, as a server would, so events do not pile up. */
static void *read_all(void *arg) {
    reader_t *r = arg;
    while (!r->stop) {
        int got = 0;
        for (int i = 0; i < r->n; i++) {
            engine_event_t ev;
            int rc;
            while ((rc = engine_stream_poll(r->streams[i], &ev)) > 0) {
                engine_event_clear(&ev);
                got++;
            }
            if (rc < 0 && !r->over[i]) {
                r->over[i] = 1;
                if (++r->n_over == r->n) r->stop = 1;
            }
        }
        if (!got) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* Nanoseconds the thread named `name` has run on a CPU (schedstat), or -1. */
static long long thread_cpu_ns(const char *name) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    long long ns = -1;
    struct dirent *de;
    while (ns < 0 && (de = readdir(d))) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        if (strcmp(comm, name)) continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", de->d_name);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%lld", &ns) != 1) ns = -1;
            fclose(f);
        }
    }
    closedir(d);
    return ns;
}

/* n requests of the same 32 prompt tokens (first, first + 1, ...), each generating `tokens`. */
static int submit_all(engine_t *eng, int n, engine_stream_t **streams, int32_t first,
                      int tokens) {
    int32_t prompt[32];
    for (int i = 0; i < 32; i++)
        prompt[i] = first + i;
    for (int i = 0; i < n; i++) {
        engine_request_t req = {.prompt = prompt, .n_prompt = 32};
        sampling_params_init(&req.sampling);
        req.sampling.max_tokens = tokens;
        req.sampling.ignore_eos = true;
        req.sampling.temperature = 0.0f;
        err_t err = {{0}};
        if (engine_submit(eng, &req, &streams[i], &err) < 0) {
            fprintf(stderr, "%s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

/* Waits until the engine has recorded itself idle (no batch), then *snap is that state. */
static void wait_idle(engine_t *eng, stats_snapshot_t *snap) {
    for (;;) {
        engine_stats(eng, snap);
        if (snap->running == 0 && snap->waiting == 0 && snap->n_steps > 0 &&
            snap->steps_ring[snap->n_steps - 1].running == 0)
            return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: engine_overhead N_SEQS [STEPS]\n");
        return 2;
    }
    bool whole = argc > 2 && strcmp(argv[2], "whole") == 0;
    int n = atoi(argv[1]), tokens = argc > 2 && !whole ? atoi(argv[2]) : 2000;
    if (n < 1 || tokens < 10 || tokens > STATS_RING - 8) return 2;
    engine_opts_t o;
    engine_opts_init(&o);
    o.model.model = MDIR_EMBEDDED;
    o.backend = "null";
    err_t err = {{0}};
    char seqs[16];
    snprintf(seqs, sizeof seqs, "%d", n);
    const char *flags[][2] = {{"max-num-seqs", seqs},
                              {"max-num-batched-tokens", "16384"},
                              {"max-model-len", "4096"},
                              {"kv-cache-memory", "1GiB"}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (flags_set(flags_find(flags[i][0]), flags[i][1], &o.flags, &err) < 0) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
    engine_t *eng;
    if (engine_open(&o, &eng, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    engine_stream_t **streams = calloc((size_t)n, sizeof *streams);
    /* First a whole batch, as a server that has been running: the heap, the KV pool and the
     * prefix-cache table are warm, and the kernel's first-touch page faults (about three per
     * step at 512 sequences otherwise) are not counted as the engine's. */
    reader_t reader = {streams, n, 0, 0, calloc((size_t)n, 1)};
    pthread_t th;
    /* other prompt tokens: no prefix in common; 4,000 tokens: the embedded model's context */
    if (submit_all(eng, n, streams, 1000, 4000) < 0) return 1;
    pthread_create(&th, NULL, read_all, &reader);
    pthread_join(th, NULL);
    for (int i = 0; i < n; i++)
        engine_stream_release(streams[i]);
    if (whole) {
        engine_close(eng);
        free(streams);
        free(reader.over);
        return 0;
    }

    static stats_snapshot_t snap;
    wait_idle(eng, &snap);
    uint64_t step0 = snap.steps;
    long long cpu0 = thread_cpu_ns("tachyon-engine");
    reader = (reader_t){streams, n, 0, 0, reader.over};
    memset(reader.over, 0, (size_t)n);
    if (submit_all(eng, n, streams, 100, tokens) < 0) return 1;
    pthread_create(&th, NULL, read_all, &reader);
    pthread_join(th, NULL);
    wait_idle(eng, &snap);
    long long cpu1 = thread_cpu_ns("tachyon-engine");

    /* The batch's records are the last snap.steps - step0 (those of an idle engine have
     * running == 0); all of them must still be in the ring. */
    int records = (int)(snap.steps - step0), batch_steps = 0, m = 0;
    if (records > snap.n_steps) {
        fprintf(stderr, "engine_overhead: %d records, %d in the stats ring\n", records,
                snap.n_steps);
        return 1;
    }
    float *overhead = malloc((size_t)records * sizeof *overhead);
    double sum = 0, forward_all = 0;
    for (int i = snap.n_steps - records; i < snap.n_steps; i++) {
        const stats_step_t *s = &snap.steps_ring[i];
        if (s->running == 0) continue;
        batch_steps++;
        forward_all += s->forward_ms * 1e3;
        if (s->running != n || s->prefill_tokens > 0) continue; /* admission, finishing */
        overhead[m] = (s->step_ms - s->forward_ms) * 1000.0f; /* us */
        sum += overhead[m++];
    }
    if (m == 0) return 1;
    qsort(overhead, (size_t)m, sizeof *overhead, cmp_float);
    double cpu_us = cpu0 >= 0 && cpu1 >= 0 ? ((cpu1 - cpu0) / 1e3 - forward_all) / batch_steps : -1;
    printf("| %d | %d | %.1f | %.1f | %.1f | %.1f |\n", n, m, sum / m, overhead[m / 2],
           overhead[(int)(m * 0.99)], cpu_us);
    for (int i = 0; i < n; i++)
        engine_stream_release(streams[i]);
    engine_close(eng);
    free(streams);
    free(overhead);
    free(reader.over);
    return 0;
}
