#!/usr/bin/env bash
# Speculative decoding with the model's MTP head (engine/spec_mtp.h) on the CPU backend: greedy
# decode speed with and without the head's drafts, with the acceptance rate and the tokens each
# verifying sequence gets per step, for k = 1..4, on the two Qwen3.5 fixtures (the only models
# with an MTP head the project has: tiny, trained for a few minutes, so what their heads accept
# says little of a released model's). Two prompts: prose (a passage of the Python reference the
# fixtures were trained on) and a chat turn. Prints a Markdown table for bench/RESULTS.md (decode
# tok/s: the best of three runs each way, alternating).
# Usage: bench/spec-mtp.sh [path/to/tachyon]
# (default build/release/tachyon). BENCH_QUICK=1: one row, 16 tokens (the test suite's check that
# the script works).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/spec-rows.bash" # bin n_out reps quick; decode, row
prose='The "assert" statement: assert statements are a convenient way to insert debugging
assertions into a program. The simple form, "assert expression", is equivalent to'
chat='What is a lambda expression?'
spec='{"method":"mtp","num_speculative_tokens":K}'

echo "| model | prompt | k | decode tok/s, no drafts | decode tok/s, MTP drafts | acceptance | tokens per verify step | speed-up |"
echo "|---|---|---|---|---|---|---|---|"
bf16=$root/tests/fixtures/tiny-qwen3.5
fp8=$root/tests/fixtures/tiny-qwen3.5-fp8
if [[ $quick == 1 ]]; then
    row "tiny-qwen3.5 fixture | prose" 2 --model "$bf16" --prompt "$prose"
    exit 0
fi
for k in 1 2 3 4; do
    row "tiny-qwen3.5 fixture | prose" $k --model "$bf16" --prompt "$prose"
done
row "tiny-qwen3.5 fixture | chat" 2 --model "$bf16" --prompt "$chat" --chat
for k in 1 2 4; do
    row "tiny-qwen3.5-fp8 fixture | prose" $k --model "$fp8" --prompt "$prose"
done
row "tiny-qwen3.5-fp8 fixture | chat" 2 --model "$fp8" --prompt "$chat" --chat
