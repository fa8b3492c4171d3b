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
bin=${1:-$root/build/release/tachyon}
n_out=128
reps=3
quick=${BENCH_QUICK:-0}
[[ $quick == 1 ]] && n_out=16 reps=1
passage=$(for i in $(seq 1 32); do echo $(((i * 7919) % 990 + 5)); done | paste -sd,)
prompt=$passage,$passage,$passage,$passage
spec='{"method":"ngram","num_speculative_tokens":K,"prompt_lookup_max":4,"prompt_lookup_min":2}'

decode() { # args... -> "tok/s|rate|length"
    local out
    out=$("$bin" complete "$@" --prompt-ids "$prompt" -n $n_out --ignore-eos --stats 2>&1 >/dev/null)
    local tps rate len
    tps=$(echo "$out" | sed -n 's/^decode: .*(\(.*\) tokens\/s)/\1/p')
    rate=$(echo "$out" | sed -n 's/^speculative: .*acceptance rate \([0-9.]*\)%.*/\1%/p')
    len=$(echo "$out" | sed -n 's/^speculative: .*mean acceptance length \([0-9.]*\)).*/\1/p')
    echo "$tps|${rate:--}|${len:--}"
}

max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }

row() { # label, k, model args...: the best of $reps alternating runs each way (a shared
    # machine's load moves single runs by 2x)
    local label=$1 k=$2
    shift 2
    local b=0 w=0 with r
    for ((r = 0; r < reps; r++)); do
        b=$(max "$b" "$(decode "$@" | cut -d'|' -f1)")
        with=$(decode "$@" --speculative-config "${spec/K/$k}")
        w=$(max "$w" "${with%%|*}")
    done
    local rest=${with#*|}
    printf '| %s | %s | %s | %s | %s | %s | %.2fx |\n' "$label" "$k" "$b" "$w" "${rest%%|*}" \
        "${rest#*|}" "$(echo "$w $b" | awk '{print $1 / $2}')"
}

echo "| model | k | decode tok/s, no drafts | decode tok/s, n-gram drafts | acceptance | tokens per verify step | speed-up |"
echo "|---|---|---|---|---|---|---|"
row "tiny-qwen3 fixture" 3 --model "$root/tests/fixtures/tiny-qwen3"
[[ $quick == 1 ]] && exit 0
row "tiny-qwen3.5 fixture" 3 --model "$root/tests/fixtures/tiny-qwen3.5" --max-model-len 512
row "dummy qwen3-0.6b BF16" 1 --model qwen3-0.6b --load-format dummy --max-model-len 512
row "dummy qwen3-0.6b BF16" 3 --model qwen3-0.6b --load-format dummy --max-model-len 512
row "dummy qwen3-0.6b BF16" 5 --model qwen3-0.6b --load-format dummy --max-model-len 512
