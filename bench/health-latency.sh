#!/usr/bin/env bash
# /health and /metrics latency while the largest accepted prompt (a body of --max-request-body
# bytes, default 32 MiB) is tokenized: starts `tachyon serve` on the embedded model and runs
# bench/health-latency.py against it. The issue's bar: under 50 ms. Prints a Markdown table for
# bench/RESULTS.md.
#
# Usage: bench/health-latency.sh [path/to/tachyon] [extra serve flags...]
#        (default build/release/tachyon; e.g. --http-threads 1 --max-request-body 33554432)
# BENCH_QUICK=1: a 256 KiB body limit (the test suite's check that the script works).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release/tachyon}
shift || true
[[ ${BENCH_QUICK:-0} == 1 ]] && set -- --max-request-body 262144 "$@"
[[ -x $bin ]] || { echo "health-latency: no binary $bin" >&2; exit 1; }
limit=33554432
for ((i = 1; i <= $#; i++)); do
    [[ ${!i} == --max-request-body ]] && { j=$((i + 1)); limit=${!j}; }
done

log=$(mktemp)
"$bin" serve --port 0 --threads 2 --kv-cache-memory 64MiB --stats-interval 0 "$@" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=$("$root/scripts/serve-port" "$log" "$pid") || { cat "$log" >&2; exit 1; }
echo "at $(git -C "$root" rev-parse --short HEAD), $(nproc) cores, body limit $limit bytes," \
    "serve flags: $*"
python3 "$root/bench/health-latency.py" "$port" "$limit"
