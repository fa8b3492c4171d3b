/* The CPU backend's forward pass alone (no engine, no sampling), timed at the shapes of a model
 * preset with random (dummy) weights: the measures of bench/cpu-vs-llamacpp.sh and of the CPU
 * speed issue. Not a test: run by bench/cpu-forward.sh, results in bench/RESULTS.md.
 *
 *   prefill N        one sequence, an N-token prompt in one step: prompt tokens/s
 *   decode D N       one sequence with D tokens of context, then N one-token steps: tokens/s
 *   batch S N        S sequences of 32 tokens of context each, then N steps of S tokens (one
 *                    each): aggregate tokens/s
 *
 * usage: cpu_forward [--model PRESET] [--fp8] [--threads N] [--reps R] [--reference]
 *                    [--precision highest|high|medium] [--tp N [--ep]] MEASURE...
 * (--reference: the scalar reference kernels instead of the vector fast paths; --precision: the
 * cpu-matmul-precision flag's value; --tp: tensor parallel over N ranks as threads, sharing the
 * --threads; --ep: MoE experts placed whole)
 * Each measure runs once untimed first (a warm-up, as llama-bench's).
 * Prints one line per measure: its name, the median tokens/s over R repetitions, and each; then
 * the median tokens per CPU-second of the process (robust to a loaded machine with --threads 1,
 * where no thread spins waiting for another). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "flags.h"
#include "model.h"
#include "weights.h"

enum { BS = 16 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the process, all threads: on a shared machine, with --threads 1, a measure
 * of the kernels that time spent descheduled does not inflate. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double g_cpu; /* CPU seconds of the last measure's timed part */
static double g_tokens;

typedef struct run {
    backend_t *be;
    int V, stride; /* vocabulary; block table row */
    float *logits;
} run_t;

/* One step: n_new[s] tokens of each of n_seqs sequences with done[s] tokens cached; sequence s
 * owns blocks s * stride ... Logits of each sequence's last token. */
static void step(run_t *r, int n_seqs, const int *done, const int *n_new) {
    int T = 0;
    for (int s = 0; s < n_seqs; s++)
        T += n_new[s];
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)T), *pos = malloc(sizeof(int32_t) * (size_t)T);
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)T);
    int32_t *qs = malloc(sizeof(int32_t) * (size_t)(n_seqs + 1));
    int32_t *ctx = malloc(sizeof(int32_t) * (size_t)n_seqs);
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)n_seqs);
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)n_seqs * (size_t)r->stride);
    int t = 0;
    qs[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        for (int i = 0; i < n_new[s]; i++, t++) {
            int p = done[s] + i;
            ids[t] = (int32_t)((p * 7919u + (unsigned)s * 104729u) % (unsigned)r->V);
            pos[t] = p;
            slots[t] = ((int64_t)s * r->stride + p / BS) * BS + p % BS;
        }
        qs[s + 1] = t;
        ctx[s] = done[s] + n_new[s];
        rows[s] = t - 1;
        for (int b = 0; b < r->stride; b++)
            tables[s * r->stride + b] = s * r->stride + b;
    }
    be_batch_t b = {.n_tokens = T,
                    .n_seqs = n_seqs,
                    .token_ids = ids,
                    .positions = pos,
                    .slot_mapping = slots,
                    .query_start = qs,
                    .context_len = ctx,
                    .block_tables = tables,
                    .block_table_stride = r->stride,
                    .n_logits = n_seqs,
                    .logit_rows = rows};
    err_t err;
    if (backend_forward(r->be, &b, r->logits, &err) < 0) {
        fprintf(stderr, "cpu_forward: %s\n", err.msg);
        exit(1);
    }
    free(ids);
    free(pos);
    free(slots);
    free(qs);
    free(ctx);
    free(rows);
    free(tables);
}

/* Tokens/s of one repetition of the measure. */
static double measure(run_t *r, const char *what, int a, int n) {
    int S = !strcmp(what, "batch") ? a : 1;
    int *done = calloc((size_t)S, sizeof(int)), *n_new = calloc((size_t)S, sizeof(int));
    double t0, t1;
    if (!strcmp(what, "prefill")) {
        n_new[0] = a;
        t0 = now_s();
        g_cpu = cpu_s();
        step(r, 1, done, n_new);
        t1 = now_s();
        g_cpu = cpu_s() - g_cpu;
        n = a;
    } else {
        int depth = !strcmp(what, "decode") ? a : 32;
        for (int s = 0; s < S; s++)
            n_new[s] = depth;
        if (depth > 0) step(r, S, done, n_new); /* the context, untimed */
        for (int s = 0; s < S; s++) {
            done[s] = depth;
            n_new[s] = 1;
        }
        t0 = now_s();
        g_cpu = cpu_s();
        for (int i = 0; i < n; i++) {
            step(r, S, done, n_new);
            for (int s = 0; s < S; s++)
                done[s]++;
        }
        t1 = now_s();
        g_cpu = cpu_s() - g_cpu;
        n *= S;
    }
    g_tokens = n;
    free(done);
    free(n_new);
    return n / (t1 - t0);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *preset = "qwen3-0.6b";
    bool fp8 = false, reference = false;
    int threads = 0, reps = 3, tp = 1, i = 1, precision = CPU_MM_HIGHEST;
    bool ep = false;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            preset = argv[++i];
        else if (!strcmp(argv[i], "--fp8"))
            fp8 = true;
        else if (!strcmp(argv[i], "--reference"))
            reference = true;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tp") && i + 1 < argc)
            tp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ep"))
            ep = true;
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            flag_values_t f;
            flags_init(&f);
            if (flags_set(flags_find("cpu-matmul-precision"), argv[++i], &f, NULL) < 0) break;
            precision = f.cpu_matmul_precision;
        } else
            break;
    }
    if (i >= argc || reps < 1 || reps > 64) {
        fprintf(stderr, "usage: cpu_forward [--model PRESET] [--fp8] [--threads N] [--reps R] "
                        "[--reference] [--precision highest|high|medium] [--tp N [--ep]] "
                        "(prefill N | decode DEPTH N | batch SEQS N)...\n");
        return 2;
    }
    model_config_t cfg;
    model_weights_t *w;
    err_t err;
    if (model_config_preset(preset, fp8, &cfg, &err) < 0 || weights_dummy(&cfg, 1, &w, &err) < 0) {
        fprintf(stderr, "cpu_forward: %s\n", err.msg);
        return 1;
    }
    /* room for 64 sequences of 2,048 tokens, or one of 64 x 2,048 */
    run_t r = {.V = cfg.vocab_size, .stride = 2048 / BS};
    backend_options_t opts = {.n_threads = threads,
                              .cpu_reference = reference,
                              .cpu_matmul_precision = precision,
                              .tensor_parallel_size = tp,
                              .expert_parallel = ep};
    if (cpu_backend_ops.create(&opts, w, &r.be, &err) < 0 ||
        backend_kv_reserve(r.be, 64 * r.stride, BS, &err) < 0) {
        fprintf(stderr, "cpu_forward: %s\n", err.msg);
        return 1;
    }
    r.logits = malloc(sizeof(float) * 64 * (size_t)cfg.vocab_size);
    while (i < argc) {
        const char *what = argv[i++];
        bool two = !strcmp(what, "decode") || !strcmp(what, "batch");
        if ((strcmp(what, "prefill") && !two) || i + (two ? 2 : 1) > argc) {
            fprintf(stderr, "cpu_forward: bad measure at '%s'\n", what);
            return 2;
        }
        int a = atoi(argv[i++]), n = two ? atoi(argv[i++]) : 0;
        if (a < (two && strcmp(what, "decode") ? 1 : 0) || a > 2000 || n < 0 ||
            (!strcmp(what, "batch") && a > 64) || (two && a + n > 2048) || (!two && a < 1)) {
            fprintf(stderr, "cpu_forward: %s %d %d out of range\n", what, a, n);
            return 2;
        }
        double v[64], per_cpu[64];
        /* one untimed warm-up first, as llama-bench runs (a prompt of the same size, or one
         * step at the same depth): the first forward of a size pays its buffers' page faults */
        measure(&r, what, a, two ? 1 : n);
        for (int k = 0; k < reps; k++) {
            v[k] = measure(&r, what, a, n);
            per_cpu[k] = g_tokens / g_cpu;
        }
        double sorted[64], sorted_cpu[64];
        memcpy(sorted, v, sizeof(double) * (size_t)reps);
        qsort(sorted, (size_t)reps, sizeof(double), cmp_double);
        memcpy(sorted_cpu, per_cpu, sizeof(double) * (size_t)reps);
        qsort(sorted_cpu, (size_t)reps, sizeof(double), cmp_double);
        if (two)
            printf("%s %d %d: %.1f tok/s (", what, a, n, sorted[reps / 2]);
        else
            printf("%s %d: %.1f tok/s (", what, a, sorted[reps / 2]);
        for (int k = 0; k < reps; k++)
            printf("%s%.1f", k ? ", " : "", v[k]);
        printf("); %.1f tok per CPU-second\n", sorted_cpu[reps / 2]);
        fflush(stdout);
    }
    free(r.logits);
    backend_destroy(r.be);
    weights_destroy(w);
    return 0;
}
