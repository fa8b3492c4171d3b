/* Engine CPU time per step outside the forward pass (schedule, bookkeeping, sampling
 * bookkeeping, detokenize, emit) at a given number of running sequences, with the backend
 * replaced by the null backend (no model math, sampling "on the device"). Not a test: run by
 * bench/engine-overhead.sh, results in bench/RESULTS.md.
 *
 * The measured batch: N requests of 32 prompt tokens, each generating TOKENS (default 2,000,
 * so that every step of the batch is still in the stats ring afterwards), with a reader thread
 * draining every stream as a server would (the requests have no stop strings, so the reader's
 * engine_stream_poll detokenizes, as an HTTP thread would; that cost is the reader's, on its own
 * core, and bench/RESULTS.md gives it separately). Before it, a first batch of other prompts runs
 * to its end, as in a server that has been running: the heap, the KV pool and the prefix-cache
 * table are warm, so the kernel's first-touch page faults (about three per step at 512
 * sequences in a fresh process) are not counted as the engine's.
 *
 * Two measures over the decode phase (from the moment the reader has every stream's first token
 * to the first FINISH it sees, which the reader marks as it drains: no polling window to miss):
 * the wall time of each step with all N sequences decoding, minus its forward pass (from the
 * stats ring; this includes any time the engine thread was descheduled), and the engine
 * thread's CPU time over the phase (schedstat of the thread named "tachyon-engine") minus the
 * backend's time over the same steps, per step: what the engine itself costs on a core of its
 * own.
 *
 * usage: engine_overhead N_SEQS [TOKENS]   (prints one Markdown table row)
 *        engine_overhead N_SEQS whole      (only the first batch, 4,000 tokens per request,
 *                                           printing nothing: a fixed amount of work to count
 *                                           instructions with callgrind
 * --toggle-collect=engine_main)
 */
#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

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

typedef struct reader {
    engine_stream_t **streams;
    int n;
    engine_t *eng;
    int n_over;    /* streams that ended */
    int n_started; /* streams with a first token */
    char *state;   /* [n] bit 1: started, bit 2: over */
    /* the engine thread's CPU time and step count when every stream had its first token, and
     * when the first stream ended: the decode phase, whatever the start and end looked like */
    long long cpu0, cpu1;
    uint64_t step0, step1;
    bool decode_seen, end_seen;
    bool go; /* the streams are submitted (under go_mu) */
    pthread_mutex_t go_mu;
    pthread_cond_t go_cv;
    stats_snapshot_t snap; /* scratch */
} reader_t;

static void mark(reader_t *r, long long *cpu, uint64_t *step) {
    *cpu = thread_cpu_ns("tachyon-engine");
    engine_stats(r->eng, &r->snap);
    *step = r->snap.steps;
}

/* Drains every stream, as a server would, so events do not pile up, and marks the start and
 * the end of the phase where every sequence decodes. Returns once every stream has ended. */
static void *read_all(void *arg) {
    reader_t *r = arg;
    pthread_mutex_lock(&r->go_mu); /* asleep, not spinning: submitting needs the other core */
    while (!r->go)
        pthread_cond_wait(&r->go_cv, &r->go_mu);
    pthread_mutex_unlock(&r->go_mu);
    while (r->n_over < r->n) {
        int got = 0;
        for (int i = 0; i < r->n; i++) {
            engine_event_t ev;
            int rc;
            while ((rc = engine_stream_poll(r->streams[i], &ev)) > 0) {
                if (ev.type == ENGINE_EV_FINISH && !r->end_seen && r->decode_seen) {
                    r->end_seen = true;
                    mark(r, &r->cpu1, &r->step1);
                }
                if (!(r->state[i] & 1) && ++r->n_started == r->n) {
                    r->decode_seen = true;
                    mark(r, &r->cpu0, &r->step0);
                }
                r->state[i] |= 1;
                engine_event_clear(&ev);
                got++;
            }
            if (rc < 0 && !(r->state[i] & 2)) {
                r->state[i] |= 2;
                r->n_over++;
            }
        }
        if (!got) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* n requests of the same 32 prompt tokens (first, first + 1, ...), each generating `tokens`. */
static int submit_all(engine_t *eng, int n, engine_stream_t **streams, int32_t first, int tokens) {
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

/* Submits a batch and drains it. The reader is already running when the requests go in: a batch
 * of one runs its 2,000 steps in a few milliseconds, and a reader started afterwards (a time
 * slice later on a busy machine) could see its first and last tokens in one look. */
static int run_batch(reader_t *r, int32_t first, int tokens) {
    pthread_t th;
    if (pthread_create(&th, NULL, read_all, r) != 0) return -1;
    if (submit_all(r->eng, r->n, r->streams, first, tokens) < 0) exit(1); /* said why */
    pthread_mutex_lock(&r->go_mu);
    r->go = true;
    pthread_cond_signal(&r->go_cv);
    pthread_mutex_unlock(&r->go_mu);
    return pthread_join(th, NULL) == 0 ? 0 : -1;
}

/* Steps in ring[from, to) that ran all n sequences, decoding. */
static int decode_steps(const stats_snapshot_t *snap, int from, int to, int n) {
    int m = 0;
    for (int i = from; i < to; i++)
        m += snap->steps_ring[i].running == n && snap->steps_ring[i].prefill_tokens == 0;
    return m;
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
    static reader_t reader; /* holds a stats snapshot: too large for the stack */
    reader = (reader_t){.streams = streams,
                        .n = n,
                        .eng = eng,
                        .state = calloc((size_t)n, 1),
                        .go_mu = PTHREAD_MUTEX_INITIALIZER,
                        .go_cv = PTHREAD_COND_INITIALIZER};
    /* other prompt tokens: no prefix in common; 4,000 tokens: the embedded model's context */
    if (run_batch(&reader, 1000, 4000) < 0) return 1;
    for (int i = 0; i < n; i++)
        engine_stream_release(streams[i]);
    char *state = reader.state;
    if (whole) {
        engine_close(eng);
        free(streams);
        free(state);
        return 0;
    }

    /* Steps step0 + 1 .. step1 (global numbers; the ring holds the last n_steps of
     * snap.steps): the decode phase, every step of it still in the ring. The batch runs again
     * when fewer than half its steps ran all N sequences decoding: the reader saw its first
     * and last tokens in one look (a batch of one is that quick), or the requests did not
     * start together (the submitting thread was descheduled midway, on a busy machine). */
    static stats_snapshot_t snap;
    int from = 0, to = 0;
    for (int attempt = 0; attempt < 5 && decode_steps(&snap, from, to, n) < tokens / 2; attempt++) {
        if (attempt > 0)
            for (int i = 0; i < n; i++)
                engine_stream_release(streams[i]);
        memset(state, 0, (size_t)n);
        reader = (reader_t){.streams = streams,
                            .n = n,
                            .eng = eng,
                            .state = state,
                            .go_mu = PTHREAD_MUTEX_INITIALIZER,
                            .go_cv = PTHREAD_COND_INITIALIZER};
        if (run_batch(&reader, 100, tokens) < 0) return 1;
        engine_stats(eng, &snap);
        from = snap.n_steps - (int)(snap.steps - reader.step0);
        to = snap.n_steps - (int)(snap.steps - reader.step1);
        if (!reader.end_seen || from < 0) from = to = 0;
    }
    if (decode_steps(&snap, from, to, n) < tokens / 2) {
        fprintf(stderr,
                "engine_overhead: five batches without a decode phase of %d steps in the ring\n",
                tokens / 2);
        return 1;
    }
    float *overhead = malloc((size_t)(to - from) * sizeof *overhead);
    double sum = 0, forward_all = 0;
    int m = 0;
    for (int i = from; i < to; i++) {
        const stats_step_t *s = &snap.steps_ring[i];
        forward_all += s->forward_ms * 1e3;
        if (s->running != n || s->prefill_tokens > 0) continue;
        overhead[m] = (s->step_ms - s->forward_ms) * 1000.0f; /* us */
        sum += overhead[m++];
    }
    qsort(overhead, (size_t)m, sizeof *overhead, cmp_float);
    double cpu_us = reader.cpu0 >= 0 && reader.cpu1 >= 0
                        ? ((reader.cpu1 - reader.cpu0) / 1e3 - forward_all) / (to - from)
                        : -1;
    printf("| %d | %d | %.1f | %.1f | %.1f | %.1f |\n", n, m, sum / m, overhead[m / 2],
           overhead[(int)(m * 0.99)], cpu_us);
    for (int i = 0; i < n; i++)
        engine_stream_release(streams[i]);
    engine_close(eng);
    free(streams);
    free(overhead);
    free(state);
    return 0;
}
