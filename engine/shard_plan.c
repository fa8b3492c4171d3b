#include "shard_plan.h"

#include <stdio.h>
#include <string.h>

#include "model_arch.h"

/* The devices the description lists: datasheet memory in bytes. */
static const struct {
    const char *name;
    double bytes;
} devices[] = {{"H100 80GB", 80e9}, {"H200 141GB", 141e9}};

/* Bytes of a [rows, cols] tensor of kind s in cfg's checkpoint dtype. */
static uint64_t tensor_bytes(const model_config_t *cfg, const wspec_t *s, int64_t rows,
                             int64_t cols) {
    if (rows <= 0 || cols <= 0) return 0;
    if (cfg->fp8 && (s->kind == WK_LINEAR || s->kind == WK_EXPERT))
        return (uint64_t)(rows * cols) + (uint64_t)((rows + 127) / 128 * ((cols + 127) / 128)) * 4;
    return (uint64_t)(rows * cols) * 2;
}

/* A dimension's share on one GPU of tp: sharded dimensions divide (rounded up), KV heads
 * replicate below one a GPU. *bad gets a reason when a block-FP8 shard is not whole blocks. */
static int64_t share(const model_config_t *cfg, wdim_t dim, int tp, bool experts_whole, bool fp8,
                     char *bad, size_t size) {
    int64_t n = model_dim(cfg, dim);
    switch (dim) {
        case WD_KV: {
            int heads = cfg->n_kv_heads / tp > 0 ? cfg->n_kv_heads / tp : 1;
            return (int64_t)heads * cfg->head_dim;
        }
        case WD_Q:
        case WD_INTER:
        case WD_VOCAB:
            break;
        case WD_MOE_INTER:
            if (experts_whole) return n;
            break;
        default:
            return n;
    }
    int64_t part = (n + tp - 1) / tp;
    if (fp8 && dim != WD_VOCAB && part % 128 && !bad[0]) {
        char what[96];
        model_dim_explain(cfg, dim, what, sizeof what);
        snprintf(bad, size, "%s / %d = %lld is not a multiple of the 128-wide FP8 blocks", what, tp,
                 (long long)part);
    }
    return part;
}

void shard_plan_make(const model_config_t *cfg, int tp, bool ep, shard_plan_t *out) {
    memset(out, 0, sizeof *out);
    out->tp = tp < 1 ? 1 : tp;
    tp = out->tp;
    out->ep = ep && cfg->n_experts > 0;
    out->kv_heads = cfg->n_kv_heads / tp > 0 ? cfg->n_kv_heads / tp : 1;
    if (cfg->n_experts > 0)
        out->experts = out->ep ? (cfg->n_experts + tp - 1) / tp : cfg->n_experts;
    const model_arch_t *a = cfg->arch;
    for (int i = 0; i < a->n_tensors; i++) {
        const wspec_t *s = &a->tensors[i];
        if (s->kind == WK_LM_HEAD && cfg->tie_word_embeddings) continue;
        int copies = 0, local = 0;
        for (int l = 0; l < (s->per_layer ? cfg->n_layers : 1); l++) {
            if (s->per_layer && !wspec_in_layer(s, cfg, l)) continue;
            copies += wspec_per_expert(s) ? cfg->n_experts : 1;
            local += wspec_per_expert(s) ? out->experts : 1;
        }
        if (copies == 0) continue;
        bool fp8 = cfg->fp8 && (s->kind == WK_LINEAR || s->kind == WK_EXPERT);
        int64_t rows = model_dim(cfg, s->rows), cols = model_dim(cfg, s->cols);
        /* column-parallel: output rows split; row-parallel: input columns split */
        int64_t r = s->kind == WK_VECTOR || s->kind == WK_ROUTER
                        ? rows
                        : share(cfg, s->rows, tp, out->ep, fp8, out->why, sizeof out->why);
        int64_t c = (s->kind == WK_LINEAR || s->kind == WK_EXPERT) && s->cols != WD_HIDDEN
                        ? share(cfg, s->cols, tp, out->ep, fp8, out->why, sizeof out->why)
                        : cols;
        uint64_t whole = tensor_bytes(cfg, s, rows, cols), part = tensor_bytes(cfg, s, r, c);
        out->weights_total += whole * (uint64_t)copies;
        out->weights += part * (uint64_t)local;
    }
    int attn_layers = 0; /* the layers with a KV cache */
    for (int l = 0; l < cfg->n_layers; l++)
        attn_layers += cfg->layer[l].attn == ATTN_FULL || cfg->layer[l].attn == ATTN_GATED;
    out->kv_per_token = (uint64_t)attn_layers * 2 * (uint64_t)out->kv_heads * cfg->head_dim * 2;
    out->valid = out->why[0] == 0;
}

uint64_t shard_plan_kv_tokens(const shard_plan_t *p, double device_bytes, double util,
                              uint64_t overhead) {
    double left = util * device_bytes - (double)p->weights - (double)overhead;
    return left > 0 && p->kv_per_token ? (uint64_t)(left / (double)p->kv_per_token) : 0;
}

static double gib(uint64_t b) {
    return (double)b / (double)(1ull << 30);
}

void shard_plan_describe(const model_config_t *cfg, int tp, char *buf, size_t size) {
    size_t n = 0;
    for (int ep = 0; ep <= (cfg->n_experts > 0); ep++) {
        shard_plan_t p;
        shard_plan_make(cfg, tp, ep, &p);
        n += (size_t)snprintf(buf + n, n < size ? size - n : 0,
                              "%s%s %d: %.1f GiB of weights per GPU (%.1f GiB in all), %d KV "
                              "head%s and %.0f KiB of KV cache per token per GPU",
                              n ? "; " : "", ep ? "expert parallel" : "tensor parallel", tp,
                              gib(p.weights), gib(p.weights_total), p.kv_heads,
                              p.kv_heads == 1 ? "" : "s", (double)p.kv_per_token / 1024);
        if (!p.valid) {
            n += (size_t)snprintf(buf + n, n < size ? size - n : 0, ", not possible: %s", p.why);
            continue;
        }
        for (size_t d = 0; d < sizeof devices / sizeof devices[0]; d++)
            n += (size_t)snprintf(buf + n, n < size ? size - n : 0, ", %s %llu KV tokens",
                                  devices[d].name,
                                  (unsigned long long)shard_plan_kv_tokens(
                                      &p, devices[d].bytes, 0.9, SHARD_PLAN_OVERHEAD));
    }
    if (n >= size && size) buf[size - 1] = 0;
}

int shard_plan_refuse(const model_source_t *src, int tp, err_t *err) {
    model_config_t cfg;
    if (weights_source_config(src, &cfg, err) < 0) return -1;
    char plan[720];
    shard_plan_describe(&cfg, tp, plan, sizeof plan);
    return err_set(err,
                   "tensor-parallel-size %d: this backend runs a model on one device per engine "
                   "(tensor parallelism runs on the cpu and cuda backends; run with "
                   "--tensor-parallel-size 1 or --backend cpu). %s would need: %s",
                   tp, src->model ? src->model : "the model", plan);
}
