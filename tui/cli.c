#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mdir.h"

void cli_model_init(cli_model_t *m) {
    memset(m, 0, sizeof *m);
    m->src.model = MDIR_EMBEDDED;
    m->src.format = LOAD_AUTO;
    m->backend = "cpu";
    m->be_opts.gpu_memory_utilization = 0.9;
}

int cli_parse_long(const char *text, long min, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int cli_model_option(cli_model_t *m, int opt, const char *arg) {
    long v;
    switch (opt) {
        case 1000: m->src.model = arg; return 1;
        case 1001: {
            int f = load_format_parse(arg);
            if (f < 0) {
                fprintf(stderr, "tachyon: --load-format must be auto, safetensors or dummy\n");
                return -1;
            }
            m->src.format = (load_format_t)f;
            return 1;
        }
        case 1002:
            if (strcmp(arg, "bf16") && strcmp(arg, "fp8")) {
                fprintf(stderr, "tachyon: --dtype must be bf16 or fp8\n");
                return -1;
            }
            m->src.dummy_fp8 = !strcmp(arg, "fp8");
            return 1;
        case 1003:
            if (cli_parse_long(arg, 0, __LONG_MAX__, &v) < 0) {
                fprintf(stderr, "tachyon: --seed must be a non-negative integer\n");
                return -1;
            }
            m->src.seed = (uint64_t)v;
            return 1;
        case 1004: m->backend = arg; return 1;
        case 1005:
            if (cli_parse_long(arg, 0, 1024, &v) < 0) {
                fprintf(stderr, "tachyon: --threads must be an integer in 0..1024\n");
                return -1;
            }
            m->be_opts.n_threads = (int)v;
            return 1;
        case 1006: m->be_opts.emulate_fp8_activations = true; return 1;
        default: return 0;
    }
}

int cli_model_open(cli_model_t *m) {
    err_t err = {{0}};
    const backend_ops_t *ops = backend_find(m->backend);
    if (!ops) {
        fprintf(stderr, "tachyon: unknown backend \"%s\" (available:", m->backend);
        for (const char *const *n = backend_names(); *n; n++) fprintf(stderr, " %s", *n);
        fprintf(stderr, ")\n");
        return -1;
    }
    if (weights_open(&m->src, &m->weights, &err) < 0) {
        fprintf(stderr, "tachyon: %s\n", err.msg);
        return -1;
    }
    if (ops->create(&m->be_opts, m->weights, &m->be, &err) < 0) {
        fprintf(stderr, "tachyon: %s backend: %s\n", m->backend, err.msg);
        weights_destroy(m->weights);
        m->weights = NULL;
        return -1;
    }
    return 0;
}

int cli_model_open_text(cli_model_t *m, bool chat) {
    err_t err = {{0}};
    mdir_t *dir = weights_dir(m->weights);
    if (!dir) {
        fprintf(stderr,
                "tachyon: preset %s has no tokenizer: give token ids (--prompt-ids), or a model "
                "directory with --load-format dummy\n",
                m->src.model);
        return -1;
    }
    if (tok_load(dir, &m->tok, &err) < 0 || genconfig_load(dir, &m->gen, &err) < 0 ||
        (chat && chat_detect_dir(dir, &m->chat_format, &err) < 0)) {
        fprintf(stderr, "tachyon: %s\n", err.msg);
        return -1;
    }
    int primary = tok_eos_id(m->tok);
    if (primary < 0) primary = weights_config(m->weights)->eos_token_id;
    m->n_stop_ids = genconfig_stop_ids(&m->gen, primary, m->stop_ids, GENCONFIG_MAX_EOS + 1);
    return 0;
}

void cli_model_close(cli_model_t *m) {
    tok_destroy(m->tok);
    m->tok = NULL;
    backend_destroy(m->be);
    weights_destroy(m->weights);
    m->be = NULL;
    m->weights = NULL;
}

int cli_parse_ids(const char *text, int32_t **ids, int *n) {
    int cap = 16, count = 0;
    int32_t *out = malloc((size_t)cap * sizeof *out);
    if (!out) return -1;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(out);
            return -1;
        }
        if (count == cap) {
            int32_t *grown = realloc(out, (size_t)(cap *= 2) * sizeof *out);
            if (!grown) {
                free(out);
                return -1;
            }
            out = grown;
        }
        out[count++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (count == 0) {
        free(out);
        return -1;
    }
    *ids = out;
    *n = count;
    return 0;
}
