#!/usr/bin/env bash
# Runs one bench/ script once at a tiny size (BENCH_QUICK=1), as ctest does for every script
# (tests/CMakeLists.txt: test_bench_script_*), so that none of them rots unnoticed: the script
# must exit 0 and print what it exists to print (a Markdown row of numbers, or its one line).
# Exit 77 (ctest: skipped) when the script says a tool it needs is missing (it exits 77: tmux,
# valgrind, a Python with `tokenizers`), and for valgrind under an ASan build.
# usage: tests/bench_smoke.sh BUILD_DIR SCRIPT
set -uo pipefail
build=$1 script=$2
name=$(basename "$script")
export BENCH_QUICK=1
want='^\|[^|]*[a-z][^|]*\|.*[0-9].*\|$' # a table row with a name and numbers
run=(bash "$script")
case $name in
    client-cost.sh | engine-overhead.sh | cpu-forward.sh | cpu-vs-llamacpp.sh) run+=("$build") ;;
    engine-instructions.sh)
        if grep -q '^CMAKE_BUILD_TYPE:STRING=Asan' "$build/CMakeCache.txt" 2>/dev/null; then
            echo "bench_smoke: valgrind does not run an ASan build's programs"
            exit 77
        fi
        run+=("$build")
        want='^engine instructions per step at [0-9]+ sequences: [0-9]+'
        ;;
    cpu-speed.sh | tokenizer-speed.sh | health-latency.sh | crosscheck.sh | spec-ngram.sh | spec-mtp.sh)
        run+=("$build/tachyon")
        ;;
    console-cost.sh)
        export TACHYON_BIN=$build/tachyon
        want='^  mean total tok/s: console open [0-9.]+, headless [0-9.]+'
        ;;
    http_overhead.py) run=(python3 "$script" "$build") ;;
    step-model.sh) ;; # the model alone: no binary
    *)
        echo "bench_smoke: no rule for $name: add one (every bench/ script runs in the test suite)"
        exit 1
        ;;
esac
out=$("${run[@]}" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "bench_smoke: $name exited $rc"; exit 1; }
grep -Eq -- "$want" <<<"$out" || { echo "bench_smoke: $name printed no line matching $want"; exit 1; }
if [ "$name" = cpu-speed.sh ]; then # and its MoE table
    out=$(bash "$script" moe "$build/tachyon" 2>&1) || { echo "$out"; echo "bench_smoke: cpu-speed.sh moe failed"; exit 1; }
    echo "$out"
    grep -Eq -- "$want" <<<"$out" || { echo "bench_smoke: cpu-speed.sh moe printed no row"; exit 1; }
fi
exit 0
