/* Engine CPU time per step outside the forward pass (schedule, bookkeeping, sampling
 * bookkeeping, detokenize, emit) at a given number of running sequences, with the backend
 * replaced by the null backend (no model math, sampling "on the device"). Not a test: run by
 * bench/engine-overhead.sh, results in bench/RESULTS.md.
 *
 * Two measures: the wall time of each step minus its forward pass (from engine_stats(), which
 * includes any time the engine thread spent descheduled), and the engine thread's CPU time over
 * the same steps (from the scheduler's /proc schedstat of the thread named "tachyon-engine")
 * minus the null backend's forward time, which is what the engine itself costs per step on a
 * core of its own.
 *
 * usage: engine_overhead N_SEQS [STEPS]   (prints one Markdown table row) */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

typedef struct reader {
    engine_stream_t **streams;
    int n;
    volatile int stop;
} reader_t;

/* Drains every stream, as a server would, so events do not pile up. */
static void *read_all(void *arg) {
    reader_t *r = arg;
    while (!r->stop) {
        int got = 0;
        for (int i = 0; i < r->n; i++) {
            engine_event_t ev;
            while (engine_stream_poll(r->streams[i], &ev) > 0) {
                engine_event_clear(&ev);
                got++;
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

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: engine_overhead N_SEQS [STEPS]\n");
        return 2;
    }
    int n = atoi(argv[1]), steps = argc > 2 ? atoi(argv[2]) : 400;
    if (n < 1 || steps < 10 || steps > STATS_RING) return 2;
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
    int32_t prompt[32];
    for (int i = 0; i < 32; i++)
        prompt[i] = 100 + i;
    for (int i = 0; i < n; i++) {
        engine_request_t req = {.prompt = prompt, .n_prompt = 32};
        sampling_params_init(&req.sampling);
        req.sampling.max_tokens = 4000; /* the embedded model's context is 4096 */
        req.sampling.ignore_eos = true;
        req.sampling.temperature = 0.0f;
        if (engine_submit(eng, &req, &streams[i], &err) < 0) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
    }
    reader_t reader = {streams, n, 0};
    pthread_t th;
    pthread_create(&th, NULL, read_all, &reader);

    static stats_snapshot_t snap;
    uint64_t start_step = 0;
    for (;;) { /* wait for the steady state: every sequence decoding */
        engine_stats(eng, &snap);
        if (snap.running == n && snap.steps > 0 &&
            snap.steps_ring[snap.n_steps - 1].prefill_tokens == 0) {
            start_step = snap.steps;
            break;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    long long cpu0 = thread_cpu_ns("tachyon-engine");
    engine_stats(eng, &snap);
    uint64_t cpu_step0 = snap.steps;
    do {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        engine_stats(eng, &snap);
    } while (snap.steps < start_step + (uint64_t)steps);
    long long cpu1 = thread_cpu_ns("tachyon-engine");
    uint64_t cpu_steps = snap.steps - cpu_step0;

    float *overhead = malloc((size_t)steps * sizeof *overhead);
    double sum = 0, forward_sum = 0;
    int m = 0;
    for (int i = snap.n_steps - steps; i < snap.n_steps; i++) {
        const stats_step_t *s = &snap.steps_ring[i];
        if (s->running != n) continue;
        overhead[m] = (s->step_ms - s->forward_ms) * 1000.0f; /* us */
        forward_sum += s->forward_ms * 1000.0;
        sum += overhead[m++];
    }
    qsort(overhead, (size_t)m, sizeof *overhead, cmp_float);
    double cpu_us = cpu0 >= 0 && cpu1 >= 0 && cpu_steps ? (cpu1 - cpu0) / 1e3 / cpu_steps : -1;
    printf("| %d | %d | %.1f | %.1f | %.1f | %.1f |\n", n, m, m ? sum / m : 0.0,
           m ? overhead[m / 2] : 0.0f, m ? overhead[(int)(m * 0.99)] : 0.0f,
           cpu_us >= 0 && m ? cpu_us - forward_sum / m : -1.0);
    reader.stop = 1;
    pthread_join(th, NULL);
    for (int i = 0; i < n; i++)
        engine_stream_release(streams[i]);
    engine_close(eng);
    free(streams);
    free(overhead);
    return 0;
}
