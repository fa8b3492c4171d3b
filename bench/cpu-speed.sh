#!/usr/bin/env bash
# CPU backend speed on this machine: prefill and decode tokens/s and peak memory for the
# fixtures and dummy qwen3-0.6b (BF16 and FP8). Prints a Markdown table for bench/RESULTS.md.
# Usage: bench/cpu-speed.sh [path/to/tachyon]   (default build/release/tachyon)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release/tachyon}
prompt=$(seq -s, 1 128)           # 128 prompt tokens
fixtures=$root/tests/fixtures

run() { # label, args...
    local label=$1
    shift
    local out
    out=$("$bin" complete "$@" --prompt-ids "$prompt" -n 64 --ignore-eos --stats 2>&1 >/dev/null)
    local prefill decode mem
    prefill=$(echo "$out" | sed -n 's/^prefill: .*(\(.*\) tokens\/s)/\1/p')
    decode=$(echo "$out" | sed -n 's/^decode: .*(\(.*\) tokens\/s)/\1/p')
    mem=$(echo "$out" | sed -n 's/^peak memory: \(.*\) MiB/\1/p')
    printf '| %s | %s | %s | %s | `tachyon complete %s --prompt-ids 1..128 -n 64 --ignore-eos --stats` |\n' \
        "$label" "$prefill" "$decode" "$mem" "$*"
}

echo "| model | prefill tok/s (128-token prompt) | decode tok/s (64 tokens) | peak RSS MiB | command |"
echo "|---|---|---|---|---|"
run "tiny-qwen3 (BF16)" --model "$fixtures/tiny-qwen3"
run "tiny-qwen3-fp8" --model "$fixtures/tiny-qwen3-fp8"
run "tiny-qwen3-fp8, W8A8 emulation" --model "$fixtures/tiny-qwen3-fp8" --emulate-fp8-activations
run "dummy qwen3-0.6b BF16" --model qwen3-0.6b --load-format dummy
run "dummy qwen3-0.6b FP8" --model qwen3-0.6b --load-format dummy --dtype fp8
