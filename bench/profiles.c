/*
 * bench profiles: the workloads of the seed reports, bundled so `tachyon bench --profile NAME`
 * reruns them. Seeds 000-002 ran `vllm bench serve --backend openai-chat --endpoint
 * /v1/chat/completions` with every request at once (no --request-rate, no --max-concurrency):
 * ShareGPT with vLLM's default seed 0, the random cases with --seed 42. Seed 003 ran guidellm
 * through GPUStack: `--profile constant --rate R` (evenly spaced arrivals, i.e. burstiness inf),
 * chat completions, random data with dataset_seed 42. The latency preset is GPUStack's older
 * profiles_config.yaml.
 */
#include <math.h>
#include <string.h>

#include "bench.h"

typedef struct profile_def {
    bench_profile_t info;
    bench_dataset_t dataset;
    int input_len, output_len, num_prompts;
    double request_rate, burstiness;
    uint64_t seed;
} profile_def_t;

#define SEEDS_VLLM                                                                                 \
    "seeds 000-002 (vllm bench serve; Qwen3-32B, Qwen3-14B, Qwen3-235B-A22B H100 labs)"
#define SEED_GPUSTACK "seed 003_b58ebedf0df33e6b.txt (GPUStack/guidellm; Qwen3.5-9B H100 lab)"

static const profile_def_t k_defs[] = {
    {{"sharegpt", SEEDS_VLLM,
      "ShareGPT V3 with vLLM's sampling, 1000 prompts at once, seed 0 (synthetic lengths when "
      "no --dataset-path)"},
     BENCH_DATASET_SHAREGPT,
     0,
     0,
     1000,
     INFINITY,
     1.0,
     0},
    {{"short", SEEDS_VLLM, "random 128 in / 4 out, 1000 prompts at once, seed 42"},
     BENCH_DATASET_RANDOM,
     128,
     4,
     1000,
     INFINITY,
     1.0,
     42},
    {{"medium", SEEDS_VLLM, "random 2000 in / 100 out, 500 prompts at once, seed 42"},
     BENCH_DATASET_RANDOM,
     2000,
     100,
     500,
     INFINITY,
     1.0,
     42},
    {{"long", SEEDS_VLLM, "random 4000 in / 200 out, 500 prompts at once, seed 42"},
     BENCH_DATASET_RANDOM,
     4000,
     200,
     500,
     INFINITY,
     1.0,
     42},
    {{"very-long", SEEDS_VLLM, "random 32000 in / 100 out, 100 prompts at once, seed 42"},
     BENCH_DATASET_RANDOM,
     32000,
     100,
     100,
     INFINITY,
     1.0,
     42},
    {{"throughput", SEED_GPUSTACK,
      "random 1024 in / 128 out, 1000 prompts at a constant 1000 req/s, seed 42"},
     BENCH_DATASET_RANDOM,
     1024,
     128,
     1000,
     1000.0,
     INFINITY,
     42},
    {{"long-context", SEED_GPUSTACK,
      "random 32000 in / 100 out, 100 prompts at a constant 1 req/s, seed 42"},
     BENCH_DATASET_RANDOM,
     32000,
     100,
     100,
     1.0,
     INFINITY,
     42},
    {{"generation-heavy", SEED_GPUSTACK,
      "random 1000 in / 2000 out, 200 prompts at a constant 1 req/s, seed 42"},
     BENCH_DATASET_RANDOM,
     1000,
     2000,
     200,
     1.0,
     INFINITY,
     42},
    {{"latency",
      "GPUStack profiles_config.yaml (gpustack/gpustack@60191ee, the Latency preset beside "
      "seed 003's)",
      "random 32 in / 128 out, 100 prompts at a constant 1 req/s, seed 42"},
     BENCH_DATASET_RANDOM,
     32,
     128,
     100,
     1.0,
     INFINITY,
     42},
};

#define N_PROFILES (sizeof k_defs / sizeof k_defs[0])

static bench_profile_t k_list[N_PROFILES + 1];

const bench_profile_t *bench_profiles(void) {
    /* Filled from the one table on every call: idempotent, so concurrent callers agree. */
    for (size_t i = 0; i < N_PROFILES; i++)
        k_list[i] = k_defs[i].info;
    k_list[N_PROFILES] = (bench_profile_t){NULL, NULL, NULL};
    return k_list;
}

int bench_profile_apply(const char *name, bench_options_t *o, bench_err_t *err) {
    if (!name || !o) return bench_err_set(err, "bench_profile_apply: bad arguments");
    for (size_t i = 0; i < N_PROFILES; i++) {
        const profile_def_t *d = &k_defs[i];
        if (strcmp(d->info.name, name) != 0) continue;
        o->backend = BENCH_BACKEND_OPENAI_CHAT;
        o->dataset = d->dataset;
        o->num_prompts = d->num_prompts;
        if (d->dataset == BENCH_DATASET_RANDOM) {
            o->input_len = d->input_len;
            o->output_len = d->output_len;
            o->range_ratio = 0.0;
            o->prefix_len = 0;
            o->ignore_eos = true;
        } else {
            o->output_len = 0;
        }
        o->seed = d->seed;
        o->request_rate = d->request_rate;
        o->burstiness = d->burstiness;
        o->max_concurrency = 0;
        snprintf(o->profile, sizeof o->profile, "%s", d->info.name);
        return 0;
    }
    char known[512];
    size_t len = 0;
    known[0] = '\0';
    for (size_t i = 0; i < N_PROFILES && len < sizeof known; i++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "",
                                k_defs[i].info.name);
    return bench_err_set(err, "unknown profile '%s' (known: %s)", name, known);
}
