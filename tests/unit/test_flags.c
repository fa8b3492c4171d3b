/* flags: the table's defaults round-trip through format and set, every type rejects bad text
 * with a message that says what it takes, "unset" works where allowed, sizes parse and print in
 * binary units, command-line arguments parse in every form, and completion matches prefixes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flags.h"

static const flag_def_t *must_find(const char *name) {
    const flag_def_t *f = flags_find(name);
    assert_non_null(f);
    return f;
}

/* Sets text on a copy of the defaults and returns the copy's formatted value. */
static const char *set_fmt(const char *name, const char *text) {
    static char buf[64];
    flag_values_t v;
    flags_init(&v);
    err_t err = {{0}};
    if (flags_set(must_find(name), text, &v, &err) < 0) fail_msg("%s %s: %s", name, text, err.msg);
    flags_format(must_find(name), &v, buf, sizeof buf);
    return buf;
}

/* Expects text to fail on name, with v untouched; returns the message. */
static const char *set_fails(const char *name, const char *text) {
    static err_t err;
    flag_values_t v, before;
    flags_init(&v);
    before = v;
    memset(&err, 0, sizeof err);
    if (flags_set(must_find(name), text, &v, &err) == 0) fail_msg("%s accepted \"%s\"", name, text);
    assert_memory_equal(&v, &before, sizeof v);
    assert_true(strstr(err.msg, name) != NULL);
    return err.msg;
}

static void test_defaults(void **state) {
    (void)state;
    flag_values_t v;
    flags_init(&v);
    assert_int_equal(v.max_num_seqs, 256);
    assert_int_equal(v.max_num_batched_tokens, 2048);
    assert_true(v.enable_chunked_prefill);
    assert_true(v.enable_prefix_caching);
    assert_int_equal(v.scheduling_policy, SCHED_FCFS);
    assert_int_equal(v.max_queued_requests, 0);
    assert_true(v.cuda_graphs);
    assert_false(v.generation_config_vllm);
    assert_true(isnan(v.default_temperature) && isnan(v.default_top_p));
    assert_true(isnan(v.default_min_p) && isnan(v.default_repetition_penalty));
    assert_int_equal(v.default_top_k, -1);
    assert_true(v.seed == 0);
    assert_int_equal(v.block_size, 16);
    assert_int_equal(v.max_model_len, 0);
    assert_int_equal(v.kv_cache_dtype, KV_DTYPE_AUTO);
    assert_int_equal(v.cpu_matmul_precision, CPU_MM_HIGHEST);
    assert_int_equal(v.mamba_ssm_cache_dtype, SSM_DTYPE_AUTO);
    assert_true(v.gpu_memory_utilization == 0.9);
    assert_true(v.kv_cache_memory == 0);
    assert_int_equal(v.tensor_parallel_size, 1);
    assert_false(v.enable_expert_parallel);
    assert_int_equal(v.data_parallel_size, 1);
    assert_int_equal(v.speculative_method, 1); /* ngram: num-speculative-tokens alone turns it on */
    assert_int_equal(v.num_speculative_tokens, 0);
    assert_int_equal(v.prompt_lookup_max, 5);
    assert_int_equal(v.prompt_lookup_min, 5);
}

/* One row per field: names unique, fields distinct and inside the struct, every default parses
 * and formats back to its own text, and setting the formatted value changes nothing. */
static void test_table_round_trip(void **state) {
    (void)state;
    int n = flags_count();
    assert_int_equal(n, 30);
    assert_null(flags_at(n));
    assert_null(flags_at(-1));
    flag_values_t v;
    flags_init(&v);
    for (int i = 0; i < n; i++) {
        const flag_def_t *f = flags_at(i);
        assert_non_null(f->help);
        assert_true(strlen(f->help) > 10);
        assert_true(f->offset + f->size <= sizeof(flag_values_t));
        assert_ptr_equal(flags_find(f->name), f);
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(flags_at(j)->name, f->name);
            assert_true(flags_at(j)->offset != f->offset);
        }
        char buf[64];
        flags_format(f, &v, buf, sizeof buf);
        assert_string_equal(buf, f->def);
        flag_values_t w = v;
        err_t err = {{0}};
        assert_int_equal(flags_set(f, buf, &w, &err), 0);
        assert_false(flags_differ(f, &v, &w));
        assert_memory_equal(&v, &w, sizeof v);
    }
}

static void test_apply_classes(void **state) {
    (void)state;
    static const char *const live[] = {"max-num-seqs",
                                       "max-num-batched-tokens",
                                       "enable-chunked-prefill",
                                       "enable-prefix-caching",
                                       "scheduling-policy",
                                       "max-queued-requests",
                                       "cuda-graphs",
                                       "async-scheduling",
                                       "generation-config",
                                       "default-temperature",
                                       "default-top-p",
                                       "default-min-p",
                                       "default-repetition-penalty",
                                       "default-top-k",
                                       "seed"};
    static const char *const rebuild[] = {"block-size",
                                          "max-model-len",
                                          "kv-cache-dtype",
                                          "mamba-ssm-cache-dtype",
                                          "gpu-memory-utilization",
                                          "kv-cache-memory"};
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
        assert_int_equal(must_find(live[i])->apply, FLAG_LIVE);
    for (size_t i = 0; i < sizeof rebuild / sizeof rebuild[0]; i++)
        assert_int_equal(must_find(rebuild[i])->apply, FLAG_REBUILD);
    assert_int_equal(must_find("tensor-parallel-size")->apply, FLAG_RELOAD);
    assert_int_equal(must_find("enable-expert-parallel")->apply, FLAG_RELOAD);
    assert_int_equal(must_find("data-parallel-size")->apply, FLAG_RELOAD);
    assert_string_equal(flag_apply_name(FLAG_LIVE), "live");
    assert_string_equal(flag_apply_name(FLAG_REBUILD), "rebuild");
    assert_string_equal(flag_apply_name(FLAG_RELOAD), "reload");
}

static void test_find(void **state) {
    (void)state;
    assert_ptr_equal(flags_find("max_num_seqs"), flags_find("max-num-seqs"));
    assert_null(flags_find("max-num-seq"));
    assert_null(flags_find("max-num-seqss"));
    assert_null(flags_find(""));
    assert_null(flags_find(NULL));
}

static void test_int(void **state) {
    (void)state;
    flag_values_t v;
    flags_init(&v);
    err_t err = {{0}};
    assert_int_equal(flags_set(must_find("max-num-seqs"), "512", &v, &err), 0);
    assert_int_equal(v.max_num_seqs, 512);
    assert_string_equal(set_fmt("max-num-seqs", "1"), "1");
    assert_string_equal(set_fmt("max-num-seqs", "65536"), "65536");
    assert_string_equal(set_fails("max-num-seqs", "abc"),
                        "max-num-seqs must be an integer in [1, 65536], got \"abc\"");
    const char *bad[] = {"",     "0",   "65537", "-1",   "12x", " 12",
                         "12 ",  "+12", "1e3",   "0x10", "1.0", "99999999999999999999",
                         "unset"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        set_fails("max-num-seqs", bad[i]);
    set_fails("block-size", "257");
    assert_string_equal(set_fmt("block-size", "32"), "32");
    set_fails("tensor-parallel-size", "9");
    assert_string_equal(set_fmt("max-queued-requests", "0"), "0");
    assert_string_equal(set_fmt("max-model-len", "2147483647"), "2147483647");
    set_fails("max-model-len", "2147483648");
}

static void test_seed_u64(void **state) {
    (void)state;
    flag_values_t v;
    flags_init(&v);
    err_t err = {{0}};
    assert_int_equal(flags_set(must_find("seed"), "18446744073709551615", &v, &err), 0);
    assert_true(v.seed == UINT64_MAX);
    assert_string_equal(set_fmt("seed", "18446744073709551615"), "18446744073709551615");
    assert_string_equal(set_fmt("seed", "42"), "42");
    assert_string_equal(set_fails("seed", "-1"),
                        "seed must be an integer in [0, 18446744073709551615], got \"-1\"");
    set_fails("seed", "18446744073709551616");
    set_fails("seed", "unset");
}

static void test_float(void **state) {
    (void)state;
    flag_values_t v;
    flags_init(&v);
    err_t err = {{0}};
    assert_int_equal(flags_set(must_find("gpu-memory-utilization"), "0.5", &v, &err), 0);
    assert_true(v.gpu_memory_utilization == 0.5);
    assert_string_equal(set_fmt("gpu-memory-utilization", "1"), "1");
    assert_string_equal(set_fmt("gpu-memory-utilization", "0.95"), "0.95");
    assert_string_equal(set_fmt("default-temperature", "0.7"), "0.7");
    assert_string_equal(set_fmt("default-temperature", "0"), "0");
    assert_string_equal(set_fmt("default-top-p", "0.95"), "0.95");
    assert_string_equal(set_fmt("default-min-p", "1e-05"), "1e-05");
    assert_string_equal(set_fails("gpu-memory-utilization", "0"),
                        "gpu-memory-utilization must be a number in (0, 1], got \"0\"");
    assert_string_equal(set_fails("default-top-p", "x"),
                        "default-top-p must be a number in (0, 1] or \"unset\", got \"x\"");
    const char *bad[] = {"",     "inf",  "-inf", "nan",       "NaN",  "infinity", "1e999", "0x1p-1",
                         " 0.5", "0.5 ", "0.5x", "1.0000001", "-0.1", ".",        "e5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        set_fails("gpu-memory-utilization", bad[i]);
    set_fails("gpu-memory-utilization", "unset");
    set_fails("default-temperature", "2.5");
    set_fails("default-top-p", "0");
    set_fails("default-top-p", "1e-50"); /* positive, but 0 once stored as a float */
    set_fails("default-repetition-penalty", "0");
    set_fails("default-min-p", "1.5");
    /* A float field keeps the float nearest the text; it still prints as the text. */
    assert_int_equal(flags_set(must_find("default-temperature"), "0.1", &v, &err), 0);
    assert_true(v.default_temperature == 0.1f);
}

static void test_unset(void **state) {
    (void)state;
    flag_values_t v, d;
    flags_init(&v);
    flags_init(&d);
    err_t err = {{0}};
    const flag_def_t *t = must_find("default-temperature"), *k = must_find("default-top-k");
    assert_int_equal(flags_set(t, "0.6", &v, &err), 0);
    assert_int_equal(flags_set(k, "20", &v, &err), 0);
    assert_true(flags_differ(t, &v, &d));
    assert_true(flags_differ(k, &v, &d));
    char buf[32];
    flags_format(k, &v, buf, sizeof buf);
    assert_string_equal(buf, "20");
    assert_int_equal(flags_set(t, "unset", &v, &err), 0);
    assert_int_equal(flags_set(k, "unset", &v, &err), 0);
    assert_true(isnan(v.default_temperature));
    assert_int_equal(v.default_top_k, -1);
    assert_false(flags_differ(t, &v, &d));
    assert_false(flags_differ(k, &v, &d));
    flags_format(k, &v, buf, sizeof buf);
    assert_string_equal(buf, "unset");
    assert_string_equal(set_fmt("default-top-k", "0"), "0");
    assert_string_equal(
        set_fails("default-top-k", "-1"),
        "default-top-k must be an integer in [0, 1048576] or \"unset\", got \"-1\"");
    set_fails("default-top-k", "UNSET");
    set_fails("max-num-seqs", "unset");
}

static void test_bool(void **state) {
    (void)state;
    const char *yes[] = {"true", "on", "1", "yes", "TRUE", "Yes"};
    const char *no[] = {"false", "off", "0", "no", "False", "NO"};
    for (int i = 0; i < 6; i++) {
        assert_string_equal(set_fmt("enable-expert-parallel", yes[i]), "true");
        assert_string_equal(set_fmt("cuda-graphs", no[i]), "false");
    }
    assert_string_equal(set_fails("cuda-graphs", "maybe"),
                        "cuda-graphs must be true or false (on/off, yes/no, 1/0), got \"maybe\"");
    set_fails("cuda-graphs", "");
    set_fails("cuda-graphs", "2");
    set_fails("cuda-graphs", "true ");
}

static void test_enum(void **state) {
    (void)state;
    flag_values_t v;
    flags_init(&v);
    err_t err = {{0}};
    assert_int_equal(flags_set(must_find("scheduling-policy"), "priority", &v, &err), 0);
    assert_int_equal(v.scheduling_policy, SCHED_PRIORITY);
    assert_int_equal(flags_set(must_find("kv-cache-dtype"), "fp8", &v, &err), 0);
    assert_int_equal(v.kv_cache_dtype, KV_DTYPE_FP8);
    assert_int_equal(flags_set(must_find("generation-config"), "vllm", &v, &err), 0);
    assert_true(v.generation_config_vllm);
    char buf[32];
    flags_format(must_find("generation-config"), &v, buf, sizeof buf);
    assert_string_equal(buf, "vllm");
    assert_int_equal(flags_set(must_find("generation-config"), "auto", &v, &err), 0);
    assert_false(v.generation_config_vllm);
    assert_string_equal(set_fmt("scheduling-policy", "PRIORITY"), "priority");
    assert_string_equal(set_fails("scheduling-policy", "lifo"),
                        "scheduling-policy must be one of fcfs, priority, got \"lifo\"");
    assert_int_equal(v.async_scheduling, ASYNC_AUTO);
    assert_int_equal(flags_set(must_find("async-scheduling"), "off", &v, &err), 0);
    assert_int_equal(v.async_scheduling, ASYNC_OFF);
    assert_string_equal(set_fmt("async-scheduling", "On"), "on");
    assert_string_equal(set_fails("async-scheduling", "yes"),
                        "async-scheduling must be one of auto, on, off, got \"yes\"");
    set_fails("kv-cache-dtype", "fp16");
    set_fails("mamba-ssm-cache-dtype", "float16");
    set_fails("kv-cache-dtype", "");
}

static void test_size(void **state) {
    (void)state;
    flag_values_t v;
    flags_init(&v);
    err_t err = {{0}};
    const flag_def_t *f = must_find("kv-cache-memory");
    static const struct {
        const char *text;
        uint64_t bytes;
        const char *formatted;
    } ok[] = {
        {"512MiB", 512ull << 20, "512MiB"},
        {"2G", 2ull << 30, "2GiB"},
        {"1048576", 1048576, "1MiB"},
        {"1.5GiB", 3ull << 29, "1536MiB"},
        {"0.5K", 512, "512"},
        {"1k", 1000, "1000"},
        {"2m", 2000000, "2000000"},
        {"3g", 3000000000ull, "3000000000"},
        {"4096B", 4096, "4KiB"},
        {"1000", 1000, "1000"},
        {"1025KiB", 1025ull << 10, "1025KiB"},
        {"1T", 1ull << 40, "1TiB"},
        {"1PiB", 1ull << 50, "1PiB"},
        {"0", 0, "0"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        if (flags_set(f, ok[i].text, &v, &err) < 0) fail_msg("%s: %s", ok[i].text, err.msg);
        assert_true(v.kv_cache_memory == ok[i].bytes);
        assert_string_equal(set_fmt("kv-cache-memory", ok[i].text), ok[i].formatted);
        assert_string_equal(set_fmt("kv-cache-memory", ok[i].formatted), ok[i].formatted);
    }
    assert_string_equal(set_fails("kv-cache-memory", "lots"),
                        "kv-cache-memory must be a byte size (1048576, 512MiB, 2G, 1.5GiB) in "
                        "[0, 1PiB], got \"lots\"");
    const char *bad[] = {"",
                         "-1",
                         "1 GiB",
                         "1GB",
                         "1gib",
                         "1.3B",
                         "1.",
                         ".5G",
                         "2PiB",
                         "1EiB",
                         "1.0000000000001G",
                         "99999999999999999999",
                         "16384P",
                         "1e3",
                         "0x10"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        set_fails("kv-cache-memory", bad[i]);
}

static void test_differ(void **state) {
    (void)state;
    flag_values_t a, b;
    flags_init(&a);
    flags_init(&b);
    err_t err = {{0}};
    assert_int_equal(flags_set(must_find("block-size"), "32", &b, &err), 0);
    for (int i = 0; i < flags_count(); i++) {
        const flag_def_t *f = flags_at(i);
        assert_int_equal(flags_differ(f, &a, &b), strcmp(f->name, "block-size") == 0);
    }
}

static void test_format_truncates(void **state) {
    (void)state;
    flag_values_t v;
    flags_init(&v);
    char buf[4];
    flags_format(must_find("max-num-batched-tokens"), &v, buf, sizeof buf);
    assert_string_equal(buf, "204");
}

static void test_parse_arg(void **state) {
    (void)state;
    flag_values_t v;
    flags_init(&v);
    err_t err = {{0}};
    int used = 0;
    assert_int_equal(flags_parse_arg("--max-num-seqs", "512", &v, &used, &err), 1);
    assert_int_equal(used, 2);
    assert_int_equal(v.max_num_seqs, 512);
    assert_int_equal(flags_parse_arg("--max-num-seqs=64", "x", &v, &used, &err), 1);
    assert_int_equal(used, 1);
    assert_int_equal(v.max_num_seqs, 64);
    assert_int_equal(flags_parse_arg("--max_num_seqs=8", NULL, &v, &used, &err), 1);
    assert_int_equal(v.max_num_seqs, 8);
    assert_int_equal(flags_parse_arg("--kv-cache-memory", "512MiB", &v, &used, &err), 1);
    assert_true(v.kv_cache_memory == 512ull << 20);

    /* Booleans: bare is true and leaves the next argument alone unless it is a boolean word,
     * which is the value (--help writes "--enable-prefix-caching BOOL"). */
    assert_int_equal(flags_parse_arg("--no-enable-prefix-caching", "x", &v, &used, &err), 1);
    assert_int_equal(used, 1);
    assert_false(v.enable_prefix_caching);
    assert_int_equal(flags_parse_arg("--enable-prefix-caching", "x", &v, &used, &err), 1);
    assert_int_equal(used, 1);
    assert_true(v.enable_prefix_caching);
    assert_int_equal(flags_parse_arg("--enable-prefix-caching", "false", &v, &used, &err), 1);
    assert_int_equal(used, 2);
    assert_false(v.enable_prefix_caching);
    assert_int_equal(flags_parse_arg("--enable-prefix-caching", "On", &v, &used, &err), 1);
    assert_int_equal(used, 2);
    assert_true(v.enable_prefix_caching);
    assert_int_equal(flags_parse_arg("--enable-prefix-caching", NULL, &v, &used, &err), 1);
    assert_int_equal(used, 1);
    assert_true(v.enable_prefix_caching);
    assert_int_equal(flags_parse_arg("--enable-prefix-caching=off", NULL, &v, &used, &err), 1);
    assert_false(v.enable_prefix_caching);
    assert_int_equal(flags_parse_arg("--no_cuda_graphs", NULL, &v, &used, &err), 1);
    assert_false(v.cuda_graphs);

    /* Not ours: untouched. */
    flag_values_t before = v;
    used = 99;
    const char *others[] = {
        "--model", "--model=x",         "model",        "-m", "--", "---max-num-seqs", "--no-model",
        "--no-",   "--max-num-seqsx=1", "-max-num-seqs"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        assert_int_equal(flags_parse_arg(others[i], "1", &v, &used, &err), 0);
    assert_int_equal(flags_parse_arg(NULL, "1", &v, &used, &err), 0);
    assert_int_equal(used, 99);
    assert_memory_equal(&v, &before, sizeof v);

    /* Ours but wrong. */
    assert_int_equal(flags_parse_arg("--max-num-seqs", NULL, &v, &used, &err), -1);
    assert_string_equal(err.msg, "--max-num-seqs needs a value");
    assert_int_equal(flags_parse_arg("--max-num-seqs=abc", NULL, &v, &used, &err), -1);
    assert_string_equal(err.msg, "max-num-seqs must be an integer in [1, 65536], got \"abc\"");
    assert_int_equal(flags_parse_arg("--max-num-seqs", "0", &v, &used, &err), -1);
    assert_int_equal(flags_parse_arg("--no-max-num-seqs", NULL, &v, &used, &err), -1);
    assert_string_equal(err.msg, "--no-max-num-seqs: max-num-seqs is not a boolean flag");
    assert_int_equal(flags_parse_arg("--no-cuda-graphs=true", NULL, &v, &used, &err), -1);
    assert_int_equal(flags_parse_arg("--cuda-graphs=maybe", NULL, &v, &used, &err), -1);
    assert_int_equal(used, 99);
    assert_memory_equal(&v, &before, sizeof v);
}

/* A subcommand's loop over argv: table flags are taken, the rest left for the caller. */
static void test_parse_argv_loop(void **state) {
    (void)state;
    char *argv[] = {"serve",
                    "--port",
                    "8000",
                    "--max-num-seqs",
                    "4",
                    "--no-cuda-graphs",
                    "--block-size=32",
                    "--gpu-memory-utilization",
                    "0.8",
                    "model-dir"};
    int argc = (int)(sizeof argv / sizeof argv[0]);
    flag_values_t v;
    flags_init(&v);
    err_t err = {{0}};
    int rest = 0;
    for (int i = 1; i < argc;) {
        int used;
        int r = flags_parse_arg(argv[i], i + 1 < argc ? argv[i + 1] : NULL, &v, &used, &err);
        assert_true(r >= 0);
        if (r == 1) {
            i += used;
        } else {
            rest++;
            i++;
        }
    }
    assert_int_equal(rest, 3); /* --port, 8000 and model-dir are the caller's */
    assert_int_equal(v.max_num_seqs, 4);
    assert_false(v.cuda_graphs);
    assert_int_equal(v.block_size, 32);
    assert_true(v.gpu_memory_utilization == 0.8);
}

static void test_complete(void **state) {
    (void)state;
    const char *out[32];
    int n = flags_complete_name("max-", out, 32);
    assert_int_equal(n, 4);
    assert_string_equal(out[0], "max-num-seqs");
    assert_string_equal(out[1], "max-num-batched-tokens");
    assert_string_equal(out[2], "max-queued-requests");
    assert_string_equal(out[3], "max-model-len");
    assert_int_equal(flags_complete_name("max-", out, 2), 2);
    assert_int_equal(flags_complete_name("", out, 32), flags_count());
    assert_int_equal(flags_complete_name("default-t", out, 32), 3);
    assert_int_equal(flags_complete_name("zzz", out, 32), 0);
    assert_int_equal(flags_complete_name("seed", out, 32), 1);

    n = flags_complete_value(must_find("scheduling-policy"), "", out, 32);
    assert_int_equal(n, 2);
    assert_string_equal(out[0], "fcfs");
    assert_string_equal(out[1], "priority");
    n = flags_complete_value(must_find("scheduling-policy"), "p", out, 32);
    assert_int_equal(n, 1);
    assert_string_equal(out[0], "priority");
    n = flags_complete_value(must_find("cuda-graphs"), "", out, 32);
    assert_int_equal(n, 2);
    assert_string_equal(out[0], "true");
    assert_string_equal(out[1], "false");
    n = flags_complete_value(must_find("cuda-graphs"), "f", out, 32);
    assert_int_equal(n, 1);
    assert_string_equal(out[0], "false");
    n = flags_complete_value(must_find("default-top-p"), "u", out, 32);
    assert_int_equal(n, 1);
    assert_string_equal(out[0], "unset");
    assert_int_equal(flags_complete_value(must_find("max-num-seqs"), "", out, 32), 0);
    assert_int_equal(flags_complete_value(must_find("kv-cache-dtype"), "x", out, 32), 0);
    assert_int_equal(flags_complete_value(must_find("kv-cache-dtype"), "", out, 1), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_table_round_trip),
        cmocka_unit_test(test_apply_classes),
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_int),
        cmocka_unit_test(test_seed_u64),
        cmocka_unit_test(test_float),
        cmocka_unit_test(test_unset),
        cmocka_unit_test(test_bool),
        cmocka_unit_test(test_enum),
        cmocka_unit_test(test_size),
        cmocka_unit_test(test_differ),
        cmocka_unit_test(test_format_truncates),
        cmocka_unit_test(test_parse_arg),
        cmocka_unit_test(test_parse_argv_loop),
        cmocka_unit_test(test_complete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
