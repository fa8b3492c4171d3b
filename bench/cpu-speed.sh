#!/usr/bin/env bash
# CPU backend speed on this machine: prefill and decode tokens/s and peak memory for the
# fixtures and dummy qwen3-0.6b (BF16 and FP8); with `moe` the Qwen3-MoE fixtures and dummy
# qwen3-30b-a3b FP8 instead (a 4-token prompt and 4 tokens: with more weights than this machine
# has memory its values are generated as they are read). Prints a Markdown table for
# bench/RESULTS.md. Usage: bench/cpu-speed.sh [moe] [path/to/tachyon]
# (default build/release/tachyon). BENCH_QUICK=1: the first fixture of each table only, a
# 4-token prompt and 2 tokens (the test suite's check that the script works).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
set_moe=
if [[ "${1:-}" == moe ]]; then
    set_moe=1
    shift
fi
bin=${1:-$root/build/release/tachyon}
n_prompt=128
n_out=64
quick=${BENCH_QUICK:-0}
[[ $quick == 1 ]] && n_prompt=4 n_out=2
fixtures=$root/tests/fixtures

run() { # label, args...
    local label=$1
    shift
    local out
    out=$("$bin" complete "$@" --prompt-ids "$(seq -s, 1 $n_prompt)" -n $n_out --ignore-eos \
        --stats 2>&1 >/dev/null)
    local prefill decode mem
    prefill=$(echo "$out" | sed -n 's/^prefill: .*(\(.*\) tokens\/s)/\1/p')
    decode=$(echo "$out" | sed -n 's/^decode: .*(\(.*\) tokens\/s)/\1/p')
    mem=$(echo "$out" | sed -n 's/^peak memory: \(.*\) MiB/\1/p')
    printf '| %s | %s | %s | %s | `tachyon complete %s --prompt-ids 1..%d -n %d --ignore-eos --stats` |\n' \
        "$label" "$prefill" "$decode" "$mem" "$*" $n_prompt $n_out
}

echo "| model | prefill tok/s | decode tok/s | peak RSS MiB | command |"
echo "|---|---|---|---|---|"
if [[ -n $set_moe ]]; then
    run "tiny-qwen3-moe (BF16, 8 experts top-2)" --model "$fixtures/tiny-qwen3-moe"
    [[ $quick == 1 ]] && exit 0
    run "tiny-qwen3-moe-fp8 (12 experts top-3)" --model "$fixtures/tiny-qwen3-moe-fp8"
    run "tiny-qwen3-moe-fp8, W8A8 emulation" --model "$fixtures/tiny-qwen3-moe-fp8" \
        --emulate-fp8-activations
    n_prompt=4
    n_out=4
    run "dummy qwen3-30b-a3b FP8 (generated as read)" --model qwen3-30b-a3b --load-format dummy \
        --dtype fp8 --max-model-len 256
    exit 0
fi
run "tiny-qwen3 (BF16)" --model "$fixtures/tiny-qwen3"
[[ $quick == 1 ]] && exit 0
run "tiny-qwen3-fp8" --model "$fixtures/tiny-qwen3-fp8"
run "tiny-qwen3-fp8, W8A8 emulation" --model "$fixtures/tiny-qwen3-fp8" --emulate-fp8-activations
run "dummy qwen3-0.6b BF16" --model qwen3-0.6b --load-format dummy
run "dummy qwen3-0.6b FP8" --model qwen3-0.6b --load-format dummy --dtype fp8
