#!/usr/bin/env bash
# The benchmark client's own cost, so that it is never the bottleneck of a GPU run: CPU seconds
# of the client thread per 1,000 streamed requests, and the highest open-loop request rate it
# sustains, against the minimal local SSE responder (bench/http/responder.c: libmicrohttpd, a
# canned 16-token /v1/completions stream with a usage chunk, written in one piece).
#
# The driver (bench/http/client_cost.c) runs the same loop `tachyon bench` times requests with
# (bench_client_run: libcurl multi, epoll, SSE parsing, per-event timing) and measures only the
# run (getrusage RUSAGE_THREAD), not dataset building. A rate counts as sustained when every
# request succeeded with its 16 token events, the achieved rate is within 2 % of the offered one
# and the mean start lateness is under 5 ms. Client and responder share this machine's cores, so
# the rates are a lower bound for the client alone. Prints Markdown rows for bench/RESULTS.md.
# The two programs are CMake targets (bench_responder, bench_client_cost) of the build directory.
# Usage: bench/client-cost.sh [build dir]   (default build/release)
# BENCH_QUICK=1: one closed-loop and one open-loop run of 200 requests (the test suite's check
# that the script works; numbers not worth recording).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
for p in bench_responder bench_client_cost; do
    [ -x "$build/bench/$p" ] || { echo "client-cost: no $build/bench/$p (cmake --build)" >&2; exit 1; }
done
quick=${BENCH_QUICK:-0}
tmp=$(mktemp -d)
resp_pid=
cleanup() {
    [ -n "$resp_pid" ] && kill "$resp_pid" 2>/dev/null && wait "$resp_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
"$build/bench/bench_responder" 0 16 2>"$tmp/resp.log" &
resp_pid=$!
port=
for _ in $(seq 400); do # up to 20 s: a loaded machine starts it late
    port=$(sed -n 's/.*http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/resp.log")
    [ -n "$port" ] && break
    sleep 0.05
done
[ -n "$port" ] || { echo "responder did not start" >&2; exit 1; }
url="http://127.0.0.1:$port/v1/completions"

row() { # JSON line -> Markdown row
    python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print("| %s | %s | %d | %d/%d | %.0f | %.3f | %.2f | %.2f |" % (d["rate"], d["concurrency"] or "unlimited",
      d["n"], d["ok"], d["n"], d["achieved_rps"], d["cpu_s_per_1000"], d["late_mean_ms"], d["late_p99_ms"]))
' "$1"
}
sustained() {
    python3 -c '
import json, sys
d = json.loads(sys.argv[1])
ok = d["ok"] == d["n"] and d["bad_tokens"] == 0 and d["achieved_rps"] >= 0.98 * float(d["rate"]) and d["late_mean_ms"] < 5
sys.exit(0 if ok else 1)
' "$1"
}

echo "| offered req/s | max concurrency | requests | succeeded | achieved req/s | client CPU s / 1000 req | mean start lateness ms | p99 lateness ms |"
echo "|---|---|---|---|---|---|---|---|"
# Closed loop: as fast as the pair goes, at 64 and 1024 in flight.
closed_n=20000 closed_conc="64 1024" rates="1000 2000 4000 6000 8000 10000 12000"
[ "$quick" = 1 ] && closed_n=200 closed_conc=64 rates=1000
for conc in $closed_conc; do
    row "$("$build/bench/bench_client_cost" "$url" "$closed_n" inf "$conc" 16 || true)"
done
# Open loop (constant arrivals, unlimited concurrency), rising until a rate is not sustained.
best=0
for rate in $rates; do
    n=$((rate * 5 / 2))
    [ "$quick" = 1 ] && n=200
    out=$("$build/bench/bench_client_cost" "$url" "$n" "$rate" 0 16 2>"$tmp/err" || true)
    [ -n "$out" ] || { echo "| $rate | unlimited | $n | run failed: $(head -1 "$tmp/err") | | | | |"; break; }
    row "$out"
    if sustained "$out"; then best=$rate; else break; fi
done
echo
echo "Highest sustained open-loop rate: $best req/s (16 token events per request)."
