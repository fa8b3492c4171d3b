/* kernels/memplan (host arithmetic only: runs without a GPU): the KV bytes left under a plan, the
 * out-of-memory message naming the part, the plan and what to lower, and the printed plan. */
#include "cb_engine.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gemm.h"
#include "memplan.h"

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

int main(void) {
    const uint64_t GiB = 1ull << 30;
    memplan_t p = {};
    p.device_total = 140 * GiB;
    p.device_free = 139 * GiB; /* 1 GiB taken by the context before start */
    p.utilization = 0.9;
    p.weights = 15 * GiB;
    p.activations = 2 * GiB;
    p.logits = 1 * GiB;
    p.workspaces = GiB / 2;
    p.reserve = GiB / 2;
    p.max_tokens = 8192;
    p.max_seqs = 1024;
    p.kv_block_bytes = 16 * 160 * 1024; /* qwen3-14b bf16: 160 KiB a token */
    p.block_size = 16;
    /* 0.9 * 140 = 126; minus 1 in use, minus 19 of parts = 106 GiB */
    uint64_t kv = memplan_kv_bytes(&p);
    CHECK(kv > 105 * GiB + GiB / 2 && kv < 106 * GiB + GiB / 2);

    memplan_t tight = p;
    tight.utilization = 0.1;
    CHECK(memplan_kv_bytes(&tight) == 0);

    err_t err = {{0}};
    CHECK(memplan_oom(&p, "the weights", 15 * GiB, &err) == -1);
    CHECK(strstr(err.msg, "the weights") != NULL);
    CHECK(strstr(err.msg, "max-num-batched-tokens 8192") != NULL);
    CHECK(strstr(err.msg, "lower max-num-batched-tokens or max-num-seqs") != NULL);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    memplan_print(&p, f);
    fclose(f);
    CHECK(strstr(buf, "kv cache") != NULL);
    /* 106 GiB / 160 KiB per token ~ 694k tokens */
    CHECK(strstr(buf, "tokens at block size 16") != NULL);
    free(buf);

    /* the GEMM's shape rules (host side) */
    char why[160];
    CHECK(gemm_fp8_shape_ok(7168, 5120, why, sizeof why));
    CHECK(!gemm_fp8_shape_ok(7168, 5004, why, sizeof why));
    CHECK(strstr(why, "multiples of 16") != NULL);
    CHECK(gemm_pad_t(1) == 4 && gemm_pad_t(4) == 4 && gemm_pad_t(5) == 8);
    CHECK(gemm_w8_scale_ld(5120) == 40 && gemm_w8_scale_ld(320) == 4 && gemm_w8_scale_ld(640) == 8);

    printf("test_memplan: %d failure%s\n", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
