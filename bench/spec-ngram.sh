#!/usr/bin/env bash
# Speculative decoding with n-gram drafts (engine/spec.h) on the CPU backend: greedy decode speed
# with and without drafts on a repetitive workload, with the acceptance rate and the tokens each
# verifying sequence gets per step. The prompt says a passage of 32 ids four times (what "repeat
# this passage" asks of a model); the models here have random or tiny weights, so whether their
# output repeats is up to them: the acceptance columns say how much it did. Prints a Markdown
# table for bench/RESULTS.md (decode tok/s: the best of three runs each way, alternating).
# Usage: bench/spec-ngram.sh [path/to/tachyon]
# (default build/release/tachyon). BENCH_QUICK=1: the tiny fixture only, 16 tokens (the test
# suite's check that the script works).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/spec-rows.bash" # bin n_out reps quick; decode, row
passage=$(for i in $(seq 1 32); do echo $(((i * 7919) % 990 + 5)); done | paste -sd,)
prompt=$passage,$passage,$passage,$passage
spec='{"method":"ngram","num_speculative_tokens":K,"prompt_lookup_max":4,"prompt_lookup_min":2}'

echo "| model | k | decode tok/s, no drafts | decode tok/s, n-gram drafts | acceptance | tokens per verify step | speed-up |"
echo "|---|---|---|---|---|---|---|"
row "tiny-qwen3 fixture" 3 --prompt-ids "$prompt" --model "$root/tests/fixtures/tiny-qwen3"
[[ $quick == 1 ]] && exit 0
row "tiny-qwen3.5 fixture" 3 --prompt-ids "$prompt" --model "$root/tests/fixtures/tiny-qwen3.5" --max-model-len 512
row "dummy qwen3-0.6b BF16" 1 --prompt-ids "$prompt" --model qwen3-0.6b --load-format dummy --max-model-len 512
row "dummy qwen3-0.6b BF16" 3 --prompt-ids "$prompt" --model qwen3-0.6b --load-format dummy --max-model-len 512
row "dummy qwen3-0.6b BF16" 5 --prompt-ids "$prompt" --model qwen3-0.6b --load-format dummy --max-model-len 512
