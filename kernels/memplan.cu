#include "cb_engine.h"
#include "memplan.h"

static double gib(uint64_t b) {
    return (double)b / (double)(1ull << 30);
}

static uint64_t others(const memplan_t *p) {
    return p->weights + p->activations + p->logits + p->workspaces + p->reserve;
}

extern "C" uint64_t memplan_kv_bytes(const memplan_t *p) {
    double budget = p->utilization * (double)p->device_total;
    /* What was in use before the backend allocated anything: the context, other processes. */
    uint64_t in_use = p->device_total > p->device_free ? p->device_total - p->device_free : 0;
    double left = budget - (double)in_use - (double)others(p);
    return left > 0 ? (uint64_t)left : 0;
}

extern "C" void memplan_print(const memplan_t *p, FILE *f) {
    uint64_t kv = memplan_kv_bytes(p);
    uint64_t in_use = p->device_total > p->device_free ? p->device_total - p->device_free : 0;
    fprintf(f,
            "tachyon: cuda memory plan (%.1f GiB device, %.2f of it = %.1f GiB; %.2f GiB in use "
            "before start):\n"
            "  weights      %7.2f GiB\n"
            "  activations  %7.2f GiB  (max-num-batched-tokens %d)\n"
            "  logits       %7.2f GiB  (max-num-seqs %d)\n"
            "  workspaces   %7.2f GiB  (cuBLASLt, split-KV attention, step metadata)\n"
            "  reserve      %7.2f GiB  (CUDA graphs, cuBLASLt, context growth)\n"
            "  kv cache     %7.2f GiB  (%llu tokens at block size %d)\n",
            gib(p->device_total), p->utilization,
            gib((uint64_t)(p->utilization * (double)p->device_total)), gib(in_use), gib(p->weights),
            gib(p->activations), p->max_tokens, gib(p->logits), p->max_seqs, gib(p->workspaces),
            gib(p->reserve), gib(kv),
            p->kv_block_bytes
                ? (unsigned long long)(kv / p->kv_block_bytes * (uint64_t)p->block_size)
                : 0ull,
            p->block_size);
}

extern "C" int memplan_oom(const memplan_t *p, const char *what, uint64_t bytes, err_t *err) {
    return err_set(err,
                   "out of device memory for %s (%.2f GiB): weights %.2f GiB, activations %.2f GiB "
                   "(max-num-batched-tokens %d), logits %.2f GiB (max-num-seqs %d), workspaces "
                   "%.2f GiB, reserve %.2f GiB, of %.1f GiB (%.1f GiB free at start, "
                   "gpu-memory-utilization %.2f): lower max-num-batched-tokens or max-num-seqs, "
                   "raise gpu-memory-utilization, or serve a smaller model (or --dtype fp8)",
                   what, gib(bytes), gib(p->weights), gib(p->activations), p->max_tokens,
                   gib(p->logits), p->max_seqs, gib(p->workspaces), gib(p->reserve),
                   gib(p->device_total), gib(p->device_free), p->utilization);
}
