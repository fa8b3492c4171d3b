#!/usr/bin/env bash
# Engine time per step outside the forward pass at 1, 64 and 512 running sequences (wall time,
# and the engine thread's own CPU time, which excludes time it spent descheduled), with the
# null backend (no model math; the embedded model's tokenizer still detokenizes every token).
# Each point runs RUNS times (default 3; the machine's noise is larger than the differences
# between runs of one build). Prints a Markdown table for bench/RESULTS.md.
# Usage: bench/engine-overhead.sh [build dir] [runs]
# BENCH_QUICK=1: 64 sequences, one run (the test suite's check that the script works).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
runs=${2:-3}
sizes="1 64 512"
[[ ${BENCH_QUICK:-0} == 1 ]] && sizes=64 runs=1
echo "| running sequences | steps measured | wall: mean us/step | p50 us | p99 us | engine-thread CPU us/step |"
echo "|---|---|---|---|---|---|"
for n in $sizes; do
    for _ in $(seq "$runs"); do
        "$build/tests/engine_overhead" "$n"
    done
done
