#include "flags.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sampling.h"
#include "spec.h"

#define FIELD(f) offsetof(flag_values_t, f), sizeof(((flag_values_t *)0)->f)

static const char *const POLICY_CHOICES[] = {"fcfs", "priority", NULL};
static const char *const GENCONFIG_CHOICES[] = {"auto", "vllm", NULL};
static const char *const KV_DTYPE_CHOICES[] = {"auto", "fp8", NULL};
static const char *const SSM_DTYPE_CHOICES[] = {"auto", "float32", "bfloat16", NULL};
static const char *const SPEC_METHOD_CHOICES[] = {"none", "ngram", "mtp", NULL};
static const char *const ASYNC_CHOICES[] = {"auto", "on", "off", NULL};
static const char *const CPU_MM_CHOICES[] = {"highest", "high", "medium", NULL};
static const char *const BOOL_VALUES[] = {"true", "false", NULL};
static const char *const UNSET_VALUES[] = {"unset", NULL};

#define KIB 1024.0
#define PIB (KIB * KIB * KIB * KIB * KIB)

static const flag_def_t FLAGS[] = {
    {.name = "max-num-seqs",
     .type = FLAG_INT,
     .apply = FLAG_LIVE,
     FIELD(max_num_seqs),
     .min = 1,
     .max = 65536,
     .def = "256",
     .help = "most sequences in one batch"},
    {.name = "max-num-batched-tokens",
     .type = FLAG_INT,
     .apply = FLAG_LIVE,
     FIELD(max_num_batched_tokens),
     .min = 1,
     .max = 1 << 20,
     .def = "2048",
     .help = "token budget of one engine step (prefill chunks plus decodes)"},
    {.name = "enable-chunked-prefill",
     .type = FLAG_BOOL,
     .apply = FLAG_LIVE,
     FIELD(enable_chunked_prefill),
     .def = "true",
     .help = "split long prompts across steps to fit the token budget"},
    {.name = "enable-prefix-caching",
     .type = FLAG_BOOL,
     .apply = FLAG_LIVE,
     FIELD(enable_prefix_caching),
     .def = "true",
     .help = "reuse the KV blocks of shared prompt prefixes"},
    {.name = "scheduling-policy",
     .type = FLAG_ENUM,
     .apply = FLAG_LIVE,
     FIELD(scheduling_policy),
     .choices = POLICY_CHOICES,
     .def = "fcfs",
     .help = "fcfs: arrival order; priority: the request's priority, then arrival"},
    {.name = "max-queued-requests",
     .type = FLAG_INT,
     .apply = FLAG_LIVE,
     FIELD(max_queued_requests),
     .min = 0,
     .max = 2147483647,
     .def = "0",
     .help = "waiting requests beyond which new ones are refused (0 = unlimited)"},
    {.name = "cuda-graphs",
     .type = FLAG_BOOL,
     .apply = FLAG_LIVE,
     FIELD(cuda_graphs),
     .def = "true",
     .help = "replay decode steps from captured CUDA graphs (cuda backend)"},
    {.name = "async-scheduling",
     .type = FLAG_ENUM,
     .apply = FLAG_LIVE,
     FIELD(async_scheduling),
     .choices = ASYNC_CHOICES,
     .def = "auto",
     .help = "plan and launch each step before the last one's tokens come back (auto: where the "
             "backend samples asynchronously, the cuda backend; off with speculative decoding)"},
    {.name = "cpu-matmul-precision",
     .type = FLAG_ENUM,
     .apply = FLAG_LIVE,
     FIELD(cpu_matmul_precision),
     .choices = CPU_MM_CHOICES,
     .def = "highest",
     .help = "cpu backend GEMMs: highest = f32 (the reference's bits); high = activations as two "
             "bf16 on AVX512-BF16 dot products (|err| <= 2^-16 sum|x w|); medium = one bf16 "
             "(2^-8, as llama.cpp's BF16 path: prefill and batched decode ~1.6-1.8x)"},
    {.name = "generation-config",
     .type = FLAG_ENUM,
     .apply = FLAG_LIVE,
     FIELD(generation_config_vllm),
     .choices = GENCONFIG_CHOICES,
     .def = "auto",
     .help = "auto: sampling defaults from generation_config.json; vllm: ignore them"},
    {.name = "default-temperature",
     .type = FLAG_FLOAT,
     .apply = FLAG_LIVE,
     FIELD(default_temperature),
     .min = 0,
     .max = 2,
     .can_unset = true,
     .def = "unset",
     .help = "temperature of requests that give none (unset: generation_config.json)"},
    {.name = "default-top-p",
     .type = FLAG_FLOAT,
     .apply = FLAG_LIVE,
     FIELD(default_top_p),
     .min = 0,
     .max = 1,
     .min_open = true,
     .can_unset = true,
     .def = "unset",
     .help = "top_p of requests that give none (unset: generation_config.json)"},
    {.name = "default-min-p",
     .type = FLAG_FLOAT,
     .apply = FLAG_LIVE,
     FIELD(default_min_p),
     .min = 0,
     .max = 1,
     .can_unset = true,
     .def = "unset",
     .help = "min_p of requests that give none (unset: generation_config.json)"},
    {.name = "default-repetition-penalty",
     .type = FLAG_FLOAT,
     .apply = FLAG_LIVE,
     FIELD(default_repetition_penalty),
     .min = 0,
     .max = 10,
     .min_open = true,
     .can_unset = true,
     .def = "unset",
     .help = "repetition_penalty of requests that give none (unset: generation_config.json)"},
    {.name = "default-top-k",
     .type = FLAG_INT,
     .apply = FLAG_LIVE,
     FIELD(default_top_k),
     .min = 0,
     .max = 1 << 20,
     .can_unset = true,
     .def = "unset",
     .help = "top_k of requests that give none, 0 = off (unset: generation_config.json)"},
    {.name = "seed",
     .type = FLAG_INT,
     .apply = FLAG_LIVE,
     FIELD(seed),
     .min = 0,
     .max = 18446744073709551615.0,
     .def = "0",
     .help = "seed of requests that give none"},
    {.name = "block-size",
     .type = FLAG_INT,
     .apply = FLAG_REBUILD,
     FIELD(block_size),
     .min = 1,
     .max = 256,
     .def = "16",
     .help = "tokens per KV cache block (the cuda backend takes 16 or 32)"},
    {.name = "max-model-len",
     .type = FLAG_INT,
     .apply = FLAG_REBUILD,
     FIELD(max_model_len),
     .min = 0,
     .max = 2147483647,
     .def = "0",
     .help = "context limit in tokens, prompt plus output (0 = the model's)"},
    {.name = "kv-cache-dtype",
     .type = FLAG_ENUM,
     .apply = FLAG_REBUILD,
     FIELD(kv_cache_dtype),
     .choices = KV_DTYPE_CHOICES,
     .def = "auto",
     .help = "auto: the model's activation type; fp8: e4m3 (cuda; the cpu backend emulates its "
             "rounding)"},
    {.name = "mamba-ssm-cache-dtype",
     .type = FLAG_ENUM,
     .apply = FLAG_REBUILD,
     FIELD(mamba_ssm_cache_dtype),
     .choices = SSM_DTYPE_CHOICES,
     .def = "auto",
     .help = "recurrent state of hybrid models (Qwen3.5): auto = config.json's mamba_ssm_dtype"},
    {.name = "gpu-memory-utilization",
     .type = FLAG_FLOAT,
     .apply = FLAG_REBUILD,
     FIELD(gpu_memory_utilization),
     .min = 0,
     .max = 1,
     .min_open = true,
     .def = "0.9",
     .help = "fraction of GPU memory for weights, activations and the KV cache"},
    {.name = "kv-cache-memory",
     .type = FLAG_SIZE,
     .apply = FLAG_REBUILD,
     FIELD(kv_cache_memory),
     .min = 0,
     .max = PIB,
     .def = "0",
     .help = "KV pool of the CPU backend, bytes (0 = 25% of RAM, at most 4GiB)"},
    {.name = "tensor-parallel-size",
     .type = FLAG_INT,
     .apply = FLAG_RELOAD,
     FIELD(tensor_parallel_size),
     .min = 1,
     .max = 8,
     .def = "1",
     .help = "ranks (GPUs; the cpu backend: threads) each weight matrix is sharded across"},
    {.name = "enable-expert-parallel",
     .type = FLAG_BOOL,
     .apply = FLAG_RELOAD,
     FIELD(enable_expert_parallel),
     .def = "false",
     .help = "MoE: place whole experts on each GPU instead of slicing every expert"},
    {.name = "data-parallel-size",
     .type = FLAG_INT,
     .apply = FLAG_RELOAD,
     FIELD(data_parallel_size),
     .min = 1,
     .max = 8,
     .def = "1",
     .help = "engine replicas in this process (each tensor-parallel-size GPUs; the cpu backend: "
             "threads / N each); requests go to the least busy, shared prefixes together"},
    {.name = "speculative-method",
     .type = FLAG_ENUM,
     .apply = FLAG_REBUILD, /* mtp: the pool holds the MTP layers' K/V */
     FIELD(speculative_method),
     .choices = SPEC_METHOD_CHOICES,
     .def = "ngram",
     .help = "speculative drafts: ngram (prompt lookup, no extra weights), mtp (the model's "
             "multi-token-prediction head: Qwen3.5) or none"},
    {.name = "num-speculative-tokens",
     .type = FLAG_INT,
     .apply = FLAG_LIVE,
     FIELD(num_speculative_tokens),
     .min = 0,
     .max = SPEC_MAX_TOKENS,
     .def = "0",
     .help = "drafts verified per sequence and step (0 = speculation off)"},
    {.name = "prompt-lookup-max",
     .type = FLAG_INT,
     .apply = FLAG_LIVE,
     FIELD(prompt_lookup_max),
     .min = 1,
     .max = SPEC_MAX_NGRAM,
     .def = "5",
     .help = "ngram drafts: the longest n-gram of the last tokens looked up in the context"},
    {.name = "prompt-lookup-min",
     .type = FLAG_INT,
     .apply = FLAG_LIVE,
     FIELD(prompt_lookup_min),
     .min = 1,
     .max = SPEC_MAX_NGRAM,
     .def = "5",
     .help = "ngram drafts: the shortest n-gram looked up (above prompt-lookup-max: that)"},
    {.name = "speculative-disable-by-batch-size",
     .type = FLAG_INT,
     .apply = FLAG_LIVE,
     FIELD(speculative_disable_by_batch_size),
     .min = 0,
     .max = 65536,
     .def = "0",
     .help = "no drafts in a step while this many sequences run (0 = drafts at any batch size)"},
};

#define N_FLAGS ((int)(sizeof FLAGS / sizeof FLAGS[0]))

static void *field(const flag_def_t *f, flag_values_t *v) {
    return (char *)v + f->offset;
}

static const void *cfield(const flag_def_t *f, const flag_values_t *v) {
    return (const char *)v + f->offset;
}

void flags_init(flag_values_t *v) {
    memset(v, 0, sizeof *v);
    /* The table's defaults are text so that one place states them; the unit test checks that
     * each one parses. */
    for (int i = 0; i < N_FLAGS; i++)
        flags_set(&FLAGS[i], FLAGS[i].def, v, NULL);
}

int flags_count(void) {
    return N_FLAGS;
}

const flag_def_t *flags_at(int i) {
    return i >= 0 && i < N_FLAGS ? &FLAGS[i] : NULL;
}

/* Name equality over the first n bytes of s, '_' matching '-'. */
static bool name_eq(const char *name, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i] == '_' ? '-' : s[i];
        if (name[i] == '\0' || name[i] != c) return false;
    }
    return name[n] == '\0';
}

static const flag_def_t *find_n(const char *s, size_t n) {
    for (int i = 0; i < N_FLAGS; i++)
        if (name_eq(FLAGS[i].name, s, n)) return &FLAGS[i];
    return NULL;
}

const flag_def_t *flags_find(const char *name) {
    return name ? find_n(name, strlen(name)) : NULL;
}

const char *flag_apply_name(flag_apply_t a) {
    switch (a) {
        case FLAG_LIVE:
            return "live";
        case FLAG_REBUILD:
            return "rebuild";
        case FLAG_RELOAD:
            return "reload";
    }
    return "?";
}

const char *flag_type_name(flag_type_t t) {
    switch (t) {
        case FLAG_INT:
            return "int";
        case FLAG_FLOAT:
            return "float";
        case FLAG_BOOL:
            return "bool";
        case FLAG_ENUM:
            return "enum";
        case FLAG_SIZE:
            return "size";
    }
    return "?";
}

/* Sizes in the largest binary unit that divides them exactly, so that they parse back. */
static void format_size(uint64_t b, char *buf, size_t size) {
    static const char *const units[] = {"", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (b != 0 && b % 1024 == 0 && u < 6) {
        b /= 1024;
        u++;
    }
    snprintf(buf, size, "%" PRIu64 "%s", b, units[u]);
}

static void format_bound(const flag_def_t *f, double b, char *buf, size_t size) {
    if (f->type == FLAG_SIZE)
        format_size((uint64_t)b, buf, size);
    else if (f->type == FLAG_INT && b >= 18446744073709551615.0)
        snprintf(buf, size, "%" PRIu64, UINT64_MAX);
    else
        snprintf(buf, size, "%.15g", b);
}

static int range_error(const flag_def_t *f, const char *what, const char *text, err_t *err) {
    char lo[32], hi[32];
    format_bound(f, f->min, lo, sizeof lo);
    format_bound(f, f->max, hi, sizeof hi);
    return err_set(err, "%s must be %s in %c%s, %s]%s, got \"%.100s\"", f->name, what,
                   f->min_open ? '(' : '[', lo, hi, f->can_unset ? " or \"unset\"" : "", text);
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

static int set_int(const flag_def_t *f, const char *text, flag_values_t *v, err_t *err) {
    static const char what[] = "an integer";
    if (f->size == sizeof(uint64_t)) {
        /* strtoull would wrap "-1" around: only digits are taken. */
        if (!is_digit(text[0])) return range_error(f, what, text, err);
        char *end;
        errno = 0;
        unsigned long long x = strtoull(text, &end, 10);
        if (*end || errno || (double)x < f->min || (double)x > f->max)
            return range_error(f, what, text, err);
        uint64_t u = x;
        memcpy(field(f, v), &u, sizeof u);
        return 0;
    }
    if (!is_digit(text[0]) && !(text[0] == '-' && is_digit(text[1])))
        return range_error(f, what, text, err);
    char *end;
    errno = 0;
    long long x = strtoll(text, &end, 10);
    if (*end || errno || (double)x < f->min || (double)x > f->max)
        return range_error(f, what, text, err);
    int i = (int)x;
    memcpy(field(f, v), &i, sizeof i);
    return 0;
}

static int set_float(const flag_def_t *f, const char *text, flag_values_t *v, err_t *err) {
    static const char what[] = "a number";
    /* strtod also takes leading spaces, hex, inf and nan: only plain decimals get through. */
    if (text[strspn(text, "0123456789.eE+-")] != '\0' || text[0] == '\0')
        return range_error(f, what, text, err);
    char *end;
    errno = 0;
    double d = strtod(text, &end);
    if (*end || end == text || errno || !isfinite(d)) return range_error(f, what, text, err);
    /* The range is checked on the stored value, so that what is kept always formats back to a
     * valid setting (1e-50 would become 0 as a float). */
    if (f->size == sizeof(float)) {
        float x = (float)d;
        if (!isfinite(x) || x < f->min || (f->min_open && x <= f->min) || x > f->max)
            return range_error(f, what, text, err);
        memcpy(field(f, v), &x, sizeof x);
    } else {
        if (d < f->min || (f->min_open && d <= f->min) || d > f->max)
            return range_error(f, what, text, err);
        memcpy(field(f, v), &d, sizeof d);
    }
    return 0;
}

static int parse_bool(const char *text, bool *out) {
    static const char *const yes[] = {"true", "on", "1", "yes"};
    static const char *const no[] = {"false", "off", "0", "no"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(text, yes[i]) == 0) return *out = true, 0;
        if (strcasecmp(text, no[i]) == 0) return *out = false, 0;
    }
    return -1;
}

static int set_bool(const flag_def_t *f, const char *text, flag_values_t *v, err_t *err) {
    bool b;
    if (parse_bool(text, &b) < 0)
        return err_set(err, "%s must be true or false (on/off, yes/no, 1/0), got \"%.100s\"",
                       f->name, text);
    memcpy(field(f, v), &b, sizeof b);
    return 0;
}

static int set_enum(const flag_def_t *f, const char *text, flag_values_t *v, err_t *err) {
    for (int i = 0; f->choices[i]; i++) {
        if (strcasecmp(text, f->choices[i]) != 0) continue;
        if (f->size == sizeof(bool)) {
            bool b = i != 0;
            memcpy(field(f, v), &b, sizeof b);
        } else {
            memcpy(field(f, v), &i, sizeof i);
        }
        return 0;
    }
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; f->choices[i] && len < sizeof list; i++)
        len +=
            (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", f->choices[i]);
    return err_set(err, "%s must be one of %s, got \"%.100s\"", f->name, list, text);
}

static uint64_t gcd(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* "512MiB", "2G", "1.5GiB", "1048576": K/M/G/T and the *iB forms are binary, k/m/g/t decimal. */
static int parse_size(const char *text, uint64_t *out) {
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {
        {"", 1},
        {"B", 1},
        {"K", 1ull << 10},
        {"M", 1ull << 20},
        {"G", 1ull << 30},
        {"T", 1ull << 40},
        {"KiB", 1ull << 10},
        {"MiB", 1ull << 20},
        {"GiB", 1ull << 30},
        {"TiB", 1ull << 40},
        {"PiB", 1ull << 50},
        {"EiB", 1ull << 60},
        {"k", 1000ull},
        {"m", 1000000ull},
        {"g", 1000000000ull},
        {"t", 1000000000000ull},
    };
    const char *p = text;
    if (!is_digit(*p)) return -1;
    uint64_t whole = 0;
    for (; is_digit(*p); p++)
        if (__builtin_mul_overflow(whole, 10, &whole) ||
            __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole))
            return -1;
    uint64_t frac = 0, frac_den = 1;
    if (*p == '.') {
        p++;
        if (!is_digit(*p)) return -1;
        for (; is_digit(*p); p++) {
            if (frac_den >= 1000000000000ull) return -1; /* more digits than a byte needs */
            frac = frac * 10 + (uint64_t)(*p - '0');
            frac_den *= 10;
        }
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].suffix) != 0) continue;
        uint64_t m = units[i].mult, bytes;
        if (__builtin_mul_overflow(whole, m, &bytes)) return -1;
        /* frac * m / frac_den, exactly and without overflowing: cancel the common factor of m
         * and frac_den first; the fraction is whole bytes only when frac is then divisible. */
        uint64_t g = gcd(m, frac_den), den = frac_den / g;
        if (frac % den != 0) return -1;
        if (__builtin_add_overflow(bytes, frac / den * (m / g), &bytes)) return -1;
        *out = bytes;
        return 0;
    }
    return -1;
}

static int set_size(const flag_def_t *f, const char *text, flag_values_t *v, err_t *err) {
    uint64_t b;
    if (parse_size(text, &b) < 0 || (double)b < f->min || (double)b > f->max)
        return range_error(f, "a byte size (1048576, 512MiB, 2G, 1.5GiB)", text, err);
    memcpy(field(f, v), &b, sizeof b);
    return 0;
}

static void set_unset(const flag_def_t *f, flag_values_t *v) {
    if (f->type == FLAG_FLOAT && f->size == sizeof(float)) {
        float x = SAMPLING_UNSET_F;
        memcpy(field(f, v), &x, sizeof x);
    } else if (f->type == FLAG_FLOAT) {
        double x = SAMPLING_UNSET_F;
        memcpy(field(f, v), &x, sizeof x);
    } else {
        int i = SAMPLING_UNSET_I;
        memcpy(field(f, v), &i, sizeof i);
    }
}

int flags_set(const flag_def_t *f, const char *text, flag_values_t *v, err_t *err) {
    if (!f || !text) return err_set(err, "flags: no flag or no value");
    if (f->can_unset && strcmp(text, "unset") == 0) {
        set_unset(f, v);
        return 0;
    }
    switch (f->type) {
        case FLAG_INT:
            return set_int(f, text, v, err);
        case FLAG_FLOAT:
            return set_float(f, text, v, err);
        case FLAG_BOOL:
            return set_bool(f, text, v, err);
        case FLAG_ENUM:
            return set_enum(f, text, v, err);
        case FLAG_SIZE:
            return set_size(f, text, v, err);
    }
    return err_set(err, "%s: unknown flag type", f->name);
}

/* The shortest %g form that reads back to the same value. */
static void format_float(double d, bool single, char *buf, size_t size) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, d);
        if (single ? strtof(buf, NULL) == (float)d : strtod(buf, NULL) == d) return;
    }
}

void flags_format(const flag_def_t *f, const flag_values_t *v, char *buf, size_t size) {
    if (size == 0) return;
    const void *p = cfield(f, v);
    switch (f->type) {
        case FLAG_INT:
            if (f->size == sizeof(uint64_t)) {
                uint64_t u;
                memcpy(&u, p, sizeof u);
                snprintf(buf, size, "%" PRIu64, u);
            } else {
                int i;
                memcpy(&i, p, sizeof i);
                if (f->can_unset && i == SAMPLING_UNSET_I)
                    snprintf(buf, size, "unset");
                else
                    snprintf(buf, size, "%d", i);
            }
            return;
        case FLAG_FLOAT: {
            double d;
            if (f->size == sizeof(float)) {
                float x;
                memcpy(&x, p, sizeof x);
                d = x;
            } else {
                memcpy(&d, p, sizeof d);
            }
            if (isnan(d))
                snprintf(buf, size, "unset");
            else
                format_float(d, f->size == sizeof(float), buf, size);
            return;
        }
        case FLAG_BOOL: {
            bool b;
            memcpy(&b, p, sizeof b);
            snprintf(buf, size, "%s", b ? "true" : "false");
            return;
        }
        case FLAG_ENUM: {
            int i;
            if (f->size == sizeof(bool)) {
                bool b;
                memcpy(&b, p, sizeof b);
                i = b;
            } else {
                memcpy(&i, p, sizeof i);
            }
            int n = 0;
            while (f->choices[n])
                n++;
            snprintf(buf, size, "%s", i >= 0 && i < n ? f->choices[i] : "?");
            return;
        }
        case FLAG_SIZE: {
            uint64_t u;
            memcpy(&u, p, sizeof u);
            format_size(u, buf, size);
            return;
        }
    }
    buf[0] = '\0';
}

bool flags_differ(const flag_def_t *f, const flag_values_t *a, const flag_values_t *b) {
    const void *pa = cfield(f, a), *pb = cfield(f, b);
    if (f->type == FLAG_FLOAT && f->size == sizeof(float)) {
        float x, y;
        memcpy(&x, pa, sizeof x);
        memcpy(&y, pb, sizeof y);
        return isnan(x) || isnan(y) ? isnan(x) != isnan(y) : x != y;
    }
    if (f->type == FLAG_FLOAT) {
        double x, y;
        memcpy(&x, pa, sizeof x);
        memcpy(&y, pb, sizeof y);
        return isnan(x) || isnan(y) ? isnan(x) != isnan(y) : x != y;
    }
    return memcmp(pa, pb, f->size) != 0;
}

int flags_parse_arg(const char *arg, const char *next, flag_values_t *v, int *used, err_t *err) {
    if (!arg || strncmp(arg, "--", 2) != 0) return 0;
    const char *body = arg + 2;
    const char *eq = strchr(body, '=');
    size_t n = eq ? (size_t)(eq - body) : strlen(body);
    if (name_eq("speculative-config", body, n)) {
        const char *json = eq ? eq + 1 : next;
        if (!json) return err_set(err, "--speculative-config needs a JSON object");
        if (spec_parse_config(json, v, err) < 0) return err_prefix(err, "--speculative-config");
        *used = eq ? 1 : 2;
        return 1;
    }
    const flag_def_t *f = find_n(body, n);
    if (!f) {
        if (n <= 3 || !(strncmp(body, "no-", 3) == 0 || strncmp(body, "no_", 3) == 0)) return 0;
        f = find_n(body + 3, n - 3);
        if (!f) return 0;
        if (f->type != FLAG_BOOL)
            return err_set(err, "--no-%s: %s is not a boolean flag", f->name, f->name);
        if (eq) return err_set(err, "--no-%s takes no value", f->name);
        bool off = false;
        memcpy(field(f, v), &off, sizeof off);
        *used = 1;
        return 1;
    }
    int n_used = 1;
    const char *text = eq ? eq + 1 : NULL;
    if (!text && f->type == FLAG_BOOL) {
        /* --help writes "--enable-prefix-caching BOOL": a boolean word after a bare boolean flag
         * is its value; anything else is left to the caller and the flag means true */
        bool b;
        if (next && parse_bool(next, &b) == 0) {
            text = next;
            n_used = 2;
        } else {
            text = "true";
        }
    }
    if (!text) {
        if (!next) return err_set(err, "--%s needs a value", f->name);
        text = next;
        n_used = 2;
    }
    if (flags_set(f, text, v, err) < 0) return -1;
    *used = n_used;
    return 1;
}

int flags_complete_name(const char *prefix, const char **out, int max) {
    size_t n = strlen(prefix);
    int k = 0;
    for (int i = 0; i < N_FLAGS && k < max; i++)
        if (strncmp(FLAGS[i].name, prefix, n) == 0) out[k++] = FLAGS[i].name;
    return k;
}

int flags_complete_value(const flag_def_t *f, const char *prefix, const char **out, int max) {
    const char *const *vals = f->type == FLAG_ENUM   ? f->choices
                              : f->type == FLAG_BOOL ? BOOL_VALUES
                              : f->can_unset         ? UNSET_VALUES
                                                     : NULL;
    if (!vals) return 0;
    size_t n = strlen(prefix);
    int k = 0;
    for (int i = 0; vals[i] && k < max; i++)
        if (strncmp(vals[i], prefix, n) == 0) out[k++] = vals[i];
    return k;
}
