#!/usr/bin/env bash
# The CPU backend's forward pass alone (tests/perf/cpu_forward: no engine, no sampling) at the
# measures of the CPU speed issue, dummy qwen3-0.6b BF16: prompt 128 and 512 tokens, 32 decode
# steps at depth 0 and 512, aggregate decode of 8 and 32 sequences; the vector fast paths
# (cpu_fast.h) against the scalar reference kernels (--reference) in alternating runs, ROUNDS
# rounds (default 3), medians. Tokens/s on all threads, and tokens per CPU-second of one thread
# (--threads 1: what the kernels do, whatever else loads the machine). Prints a Markdown table.
# Usage: bench/cpu-forward.sh [build dir] [extra cpu_forward flags, e.g. --fp8]
# BENCH_QUICK=1: the "tiny" preset, small sizes, one round (the test suite's check that the
# script works).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
shift || true
prog=$build/tests/cpu_forward
[ -x "$prog" ] || { echo "cpu-forward: no $prog (cmake --build)" >&2; exit 1; }
rounds=${ROUNDS:-3}
model=qwen3-0.6b
measures=(prefill 128 prefill 512 decode 0 32 decode 512 32 batch 8 16 batch 32 8)
if [[ ${BENCH_QUICK:-0} == 1 ]]; then
    rounds=1 model=tiny
    measures=(prefill 8 decode 4 2 batch 2 2)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$rounds"); do
    for kind in fast reference; do
        flag=()
        [[ $kind == reference ]] && flag=(--reference)
        "$prog" --model "$model" --reps 1 "${flag[@]}" "$@" "${measures[@]}" >>"$tmp/$kind.all"
        "$prog" --model "$model" --reps 1 --threads 1 "${flag[@]}" "$@" "${measures[@]}" \
            >>"$tmp/$kind.one"
    done
done
# lines: "NAME ARGS: X tok/s (X); Y tok per CPU-second"
median() { # FILE MEASURE FIELD(wall|cpu)
    grep "^$2:" "$1" | sed 's/^[^:]*: \([0-9.]*\) tok\/s.*; \([0-9.]*\) tok per.*/\1 \2/' |
        awk -v f="$3" '{ print (f == "wall" ? $1 : $2) }' | sort -g |
        awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "-" }'
}
echo "$model ($*), $rounds rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
    "commit $(git -C "$root" rev-parse --short HEAD)"
echo
echo "| measure | fast tok/s | reference tok/s | fast tok/CPU-s, 1 thread | reference tok/CPU-s, 1 thread |"
echo "|---|---|---|---|---|"
names=$(sed 's/:.*//' "$tmp/fast.all" | awk '!seen[$0]++')
while read -r name; do
    echo "| $name | $(median "$tmp/fast.all" "$name" wall) | $(median "$tmp/reference.all" "$name" wall)" \
        "| $(median "$tmp/fast.one" "$name" cpu) | $(median "$tmp/reference.one" "$name" cpu) |"
done <<<"$names"
