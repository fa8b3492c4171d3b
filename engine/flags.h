/*
 * flags: the one table of engine flags. It drives the command line (`--max-num-seqs 512`), the
 * console (`/set max-num-seqs 512`, completion, `/flags`) and the admin HTTP endpoint. Names
 * follow vLLM's where vLLM has one.
 *
 * Each flag says how a change applies: live (from the next engine step), rebuild (drain the
 * batch, rebuild the KV pool, resume; requests are preempted and recomputed, none lost) or
 * reload (a new parallel layout: the engine is reopened in place, engine.h).
 *
 *     flag_values_t v;
 *     flags_init(&v);
 *     const flag_def_t *f = flags_find("max-num-seqs");
 *     if (flags_set(f, "512", &v, &err) < 0) ...   // checks type and range
 *     char buf[64]; flags_format(f, &v, buf, sizeof buf);
 */
#ifndef TACHYON_FLAGS_H
#define TACHYON_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef enum flag_apply {
    FLAG_LIVE,
    FLAG_REBUILD,
    FLAG_RELOAD,
} flag_apply_t;

typedef enum flag_type {
    FLAG_INT,
    FLAG_FLOAT,
    FLAG_BOOL,
    FLAG_ENUM, /* one of the names in `choices` */
    FLAG_SIZE, /* bytes, written with an optional K/M/G/KiB/MiB/GiB suffix */
} flag_type_t;

typedef enum sched_policy {
    SCHED_FCFS,
    SCHED_PRIORITY,
} sched_policy_t;

typedef enum kv_cache_dtype {
    KV_DTYPE_AUTO, /* the model's activation type (f32 on the CPU, bf16 on the GPU) */
    KV_DTYPE_FP8,  /* e4m3 (GPU backend) */
} kv_cache_dtype_t;

/* --async-scheduling (core_async.c) */
typedef enum async_mode {
    ASYNC_AUTO, /* on where the backend has sample_begin / sample_end (the cuda backend) */
    ASYNC_ON,   /* also with host sampling (the CPU backend), where it only adds a step of
                   latency: for tests of the engine's asynchronous path */
    ASYNC_OFF,
} async_mode_t;

/* --cpu-matmul-precision: the CPU backend's GEMMs (engine/cpu/cpu_bf16.h states each error).
 * high and medium need AVX512-BF16; without it they run as highest. */
typedef enum cpu_matmul_precision {
    CPU_MM_HIGHEST, /* f32 products in the reference's order: bit-identical to the reference */
    CPU_MM_HIGH,    /* activations as two bf16 (16 bits) on bf16 dot products */
    CPU_MM_MEDIUM,  /* activations rounded to bf16, as llama.cpp and transformers at bf16 do */
} cpu_matmul_precision_t;

/* The recurrent (SSM) state's element type of models with state (Qwen3.5). */
typedef enum ssm_cache_dtype {
    SSM_DTYPE_AUTO, /* the config's mamba_ssm_dtype (float32 for Qwen3.5) */
    SSM_DTYPE_F32,
    SSM_DTYPE_BF16, /* half the memory per sequence, the state rounded after every step */
} ssm_cache_dtype_t;

/* The values of every flag. Sampling defaults use the "unset" values of sampling.h (NaN, -1):
 * unset means "take generation_config.json's value". */
typedef struct flag_values {
    /* scheduling (live) */
    int max_num_seqs;
    int max_num_batched_tokens;
    bool enable_chunked_prefill;
    bool enable_prefix_caching;
    int scheduling_policy;   /* sched_policy_t */
    int max_queued_requests; /* 0 = unlimited */
    bool cuda_graphs;
    int async_scheduling;     /* async_mode_t */
    int cpu_matmul_precision; /* cpu_matmul_precision_t */
    /* default sampling (live) */
    bool generation_config_vllm; /* --generation-config vllm: ignore generation_config.json */
    float default_temperature, default_top_p, default_min_p, default_repetition_penalty;
    int default_top_k;
    uint64_t seed; /* seed of requests that give none */
    /* KV cache (rebuild) */
    int block_size;
    int max_model_len;         /* 0 = the model's max_position_embeddings */
    int kv_cache_dtype;        /* kv_cache_dtype_t */
    int mamba_ssm_cache_dtype; /* ssm_cache_dtype_t */
    double gpu_memory_utilization;
    uint64_t kv_cache_memory; /* bytes; CPU backend pool size (0 = 25% of RAM, at most 4 GiB) */
    /* model (reload) */
    int tensor_parallel_size;
    bool enable_expert_parallel;
    int data_parallel_size;
    /* speculative decoding (live; spec.h) */
    int speculative_method;                /* spec_method_t */
    int num_speculative_tokens;            /* drafts per sequence and step (0 = off) */
    int prompt_lookup_max;                 /* ngram: the longest n-gram looked up */
    int prompt_lookup_min;                 /* ngram: the shortest */
    int speculative_disable_by_batch_size; /* no drafts while this many sequences run (0: off) */
} flag_values_t;

typedef struct flag_def {
    const char *name; /* "max-num-seqs" */
    flag_type_t type;
    flag_apply_t apply;
    size_t offset;   /* of the field in flag_values_t */
    size_t size;     /* of the field: INT is int or uint64_t, FLOAT float or double, ENUM int or
                        bool (index 0 = false) */
    double min, max; /* range for INT, FLOAT, SIZE */
    bool min_open;   /* FLOAT: the range excludes min, "(0, 1]" */
    bool can_unset;  /* INT, FLOAT: "unset" is accepted (NaN / -1: take generation_config.json) */
    const char *const *choices; /* ENUM: NULL-terminated names, value = index */
    const char *def;            /* default, as text */
    const char *help;           /* one line */
} flag_def_t;

void flags_init(flag_values_t *v);

int flags_count(void);
const flag_def_t *flags_at(int i);
/* NULL when unknown; '_' matches '-' as vLLM's parser allows ("max_num_seqs"). */
const flag_def_t *flags_find(const char *name);

/* Parses text into the flag's field of v, checking type, range and choices; on failure v is
 * unchanged and the message says what is accepted ("max-num-seqs must be an integer in
 * [1, 65536], got \"abc\""). The whole text must parse: no spaces, no trailing junk.
 * Booleans take true/false/on/off/1/0/yes/no; floats reject inf and nan; sizes take a plain
 * byte count or a suffix: K/M/G/T and KiB/MiB/GiB/TiB are binary, k/m/g/t decimal (as vLLM's
 * human_readable_int), a fraction is allowed when the byte count comes out whole ("1.5GiB").
 * Flags with can_unset take "unset". */
int flags_set(const flag_def_t *f, const char *text, flag_values_t *v, err_t *err);

/* The flag's current value in v as text that flags_set parses back to the same value: floats
 * in the shortest form that round-trips, sizes in the largest binary unit that divides them
 * exactly ("512MiB"), unset values as "unset". Truncated to size (always NUL-terminated). */
void flags_format(const flag_def_t *f, const flag_values_t *v, char *buf, size_t size);

/* Tries one command-line argument of the table's flags, so that any subcommand can loop over
 * argv with it around its own options:
 *     --name value   --name=value   --bool-name [BOOL]   --no-bool-name (false)
 * and vLLM's --speculative-config JSON, which sets the speculative flags (spec.h).
 * `next` is the following argv entry (NULL at the end). A boolean takes `next` only when it is
 * a boolean word (true/false, on/off, yes/no, 1/0); otherwise it is true and `next` is left.
 * Returns 1 and sets *used to the argv entries consumed (1 or 2), 0 when arg is not a flag of
 * the table (v and *used untouched), or -1 with err set on a bad value or a missing one. */
int flags_parse_arg(const char *arg, const char *next, flag_values_t *v, int *used, err_t *err);

/* True when the flag's value in a differs from b. */
bool flags_differ(const flag_def_t *f, const flag_values_t *a, const flag_values_t *b);

const char *flag_apply_name(flag_apply_t a); /* "live", "rebuild", "reload" */
const char *flag_type_name(flag_type_t t);   /* "int", "float", "bool", "enum", "size" */

/* Completion: names starting with prefix (table order), and the values of an enum (its
 * choices), a bool ("true", "false") or a flag with can_unset ("unset") starting with prefix;
 * other flags have none. Each returns how many matches it wrote to out (at most max); the
 * strings are static. */
int flags_complete_name(const char *prefix, const char **out, int max);
int flags_complete_value(const flag_def_t *f, const char *prefix, const char **out, int max);

#endif
