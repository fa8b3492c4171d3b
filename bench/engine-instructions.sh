#!/usr/bin/env bash
# Instructions the engine thread executes per step at 512 decoding sequences, outside the
# backend: callgrind counts everything under engine_main while `engine_overhead 512 whole` runs
# one batch of 512 requests x 4,000 tokens (4,000 steps) to its end, and the null backend's
# forward and sample calls are taken out. Deterministic, unlike the timings (bench/RESULTS.md).
# Usage: bench/engine-instructions.sh [build dir]   (needs valgrind)
# BENCH_QUICK=1: 2 sequences instead of 512 (the test suite's check that the script works).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
seqs=512
[[ ${BENCH_QUICK:-0} == 1 ]] && seqs=2
command -v valgrind >/dev/null || { echo "engine-instructions: needs valgrind" >&2; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
valgrind --tool=callgrind --toggle-collect=engine_main --callgrind-out-file="$out/cg" \
    "$build/tests/engine_overhead" $seqs whole >/dev/null 2>&1
callgrind_annotate --inclusive=yes "$out/cg" >"$out/ann" 2>/dev/null
total=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}' "$out/ann")
backend=$(awk '/[:]null_(forward|sample) \[/ {gsub(",", "", $1); s += $1} END {print s + 0}' "$out/ann")
steps=4000
echo "engine instructions per step at $seqs sequences: $(((total - backend) / steps))" \
    "($(((total - backend) / steps / seqs)) per sequence; backend excluded: $((backend / steps)) per step)"
