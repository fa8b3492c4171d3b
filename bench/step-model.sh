#!/usr/bin/env bash
# The step-time model (bench/step_model.py, issue 21 item 6): predicted total tok/s of the seeds'
# nine profiles for Tachyon before and after the tensor-core attention, calibrated on the seeds'
# measured engines, on an H100 and an H200 (Markdown tables for bench/RESULTS.md). Arguments go
# to step_model.py (e.g. --pf-tflops 210 --att 0.5 --bw 4240 from a GPU run's microbenchmarks).
# BENCH_QUICK=1: two profiles at 5 % of their requests (the test suite's check that it runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ ${BENCH_QUICK:-0} == 1 ]]; then
    exec python3 "$root/bench/step_model.py" --profile short medium --requests-scale 0.05 "$@"
fi
for device in h100 h200; do
    python3 "$root/bench/step_model.py" --device "$device" "$@"
    echo
done
