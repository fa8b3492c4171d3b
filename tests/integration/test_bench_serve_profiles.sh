#!/usr/bin/env bash
# `tachyon bench` end to end against `tachyon serve` on the tiny fixture: every bundled profile
# (small --num-prompts; lengths cut where a profile exceeds the tiny model's 4096-token context
# or would take minutes on the CPU backend),
# the report's counts (ignore_eos makes random output totals exact), --save-result keys, the
# compare subcommand, the openai-chat backend, goodput and percentile flags, a run whose
# requests all fail (wrong model: counted, reported, server still up), bad flags (exit 2).
set -uo pipefail
bin=${TACHYON_BIN:?} fixtures=${TACHYON_FIXTURES:?}
root=$(cd "$(dirname "$0")/../.." && pwd)
failures=0 passed=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { passed=$((passed + 1)); }

tmp=$(mktemp -d)
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

"$bin" serve --port 0 --threads 2 --kv-cache-memory 128MiB --stats-interval 0 \
    --model "$fixtures/tiny-qwen3" 2>"$tmp/serve.log" >/dev/null &
server_pid=$!
# Readiness: the server prints the port it bound once it accepts connections.
if ! port=$("$root/scripts/serve-port" "$tmp/serve.log" "$server_pid"); then
    echo "FAIL: server did not start"; cat "$tmp/serve.log"; exit 1
fi
base="http://127.0.0.1:$port"

# field NAME FILE: the value of a "Name:   value" report line.
field() { sed -n "s/^$1:[[:space:]]*\([^[:space:]]*\).*/\1/p" "$2" | head -1; }

# check_run NAME N OUT_TOTAL(or -) IN_MIN IN_MAX FILE: successful = N, failed = 0, output tokens
# exact when given, input tokens within [IN_MIN, IN_MAX] (random prompts re-encode to their
# length up to a few tokens on the tiny vocabulary; chat adds the template's tokens).
check_run() {
    local name=$1 n=$2 out=$3 in_min=$4 in_max=$5 f=$6
    local s fl o i
    s=$(field "Successful requests" "$f"); fl=$(field "Failed requests" "$f")
    o=$(field "Total generated tokens" "$f"); i=$(field "Total input tokens" "$f")
    [ "$s" = "$n" ] && [ "$fl" = "0" ] || { fail "$name: successful=$s failed=$fl, want $n/0"; cat "$f"; return; }
    if [ "$out" != "-" ] && [ "$o" != "$out" ]; then fail "$name: generated tokens $o, want $out"; return; fi
    [ "$i" -ge "$in_min" ] && [ "$i" -le "$in_max" ] || { fail "$name: input tokens $i not in [$in_min, $in_max]"; return; }
    grep -q "^============ Serving Benchmark Result ============$" "$f" || { fail "$name: no vLLM block"; return; }
    ok
}

n=3
# profile  extra-flags  input-len-per-prompt  output-len-per-prompt (- = not exact)
while read -r profile flags il olen; do
    flags=${flags//,/ }
    [ "$flags" = "-" ] && flags=
    # shellcheck disable=SC2086
    if ! timeout 300 "$bin" bench --base-url "$base" --profile "$profile" --num-prompts $n $flags \
            >"$tmp/$profile.out" 2>"$tmp/$profile.err"; then
        fail "$profile: exit status $?"; cat "$tmp/$profile.err"; continue
    fi
    if [ "$olen" = "-" ]; then
        check_run "$profile" $n - 1 100000 "$tmp/$profile.out"
        grep -qi "synthetic" "$tmp/$profile.out" && ok || fail "$profile: report does not say synthetic"
    else
        check_run "$profile" $n $((n * olen)) $((n * il * 95 / 100)) $((n * (il * 105 / 100 + 16))) \
            "$tmp/$profile.out"
    fi
done <<'PROFILES'
sharegpt - 0 -
short - 128 4
medium --input-len,400,--output-len,16 400 16
long --input-len,400,--output-len,16 400 16
very-long --input-len,400,--output-len,32 400 32
throughput --input-len,256 256 128
long-context --input-len,400,--output-len,32,--request-rate,20 400 32
generation-heavy --input-len,200,--output-len,200,--request-rate,20 200 200
latency --request-rate,20 32 128
PROFILES
# Every bundled profile is covered above.
listed=$("$bin" bench --list-profiles | grep -c '^[a-z]')
[ "$listed" = 9 ] && ok || fail "--list-profiles lists $listed profiles, the test covers 9"

# openai-chat backend, explicit flags, saved results and the comparison.
"$bin" bench --base-url "$base" --backend openai-chat --dataset-name random --input-len 64 \
    --output-len 8 --num-prompts 4 --max-concurrency 2 --request-rate 50 --burstiness 2 \
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90 --goodput ttft:100000 \
    tpot:100000 --save-result --result-dir "$tmp/new/dir" --result-filename chat.json \
    >"$tmp/chat.out" 2>"$tmp/chat.err" || fail "chat run: exit $?"
# --result-dir is made as vLLM makes it (mkdir -p); one that cannot be made fails before the run
[ -f "$tmp/new/dir/chat.json" ] && ok || fail "no chat.json in the --result-dir made for it"
mv "$tmp/new/dir/chat.json" "$tmp/chat.json"
if "$bin" bench --base-url "$base" --num-prompts 1 --save-result --result-dir "$tmp/chat.json/x" \
    >/dev/null 2>"$tmp/baddir.err"; then
    fail "a --result-dir under a file was accepted"
else
    grep -q "result-dir $tmp/chat.json/x: " "$tmp/baddir.err" && ok ||
        fail "no message naming the --result-dir: $(cat "$tmp/baddir.err")"
fi
check_run chat 4 32 $((4 * 60)) $((4 * 90)) "$tmp/chat.out"
for row in "Maximum request concurrency:             2" "Request rate configured (RPS):           50.00" \
           "Request goodput (req/s):" "P90 TTFT (ms):" "Median E2EL (ms):" "P50 ITL (ms):"; do
    grep -qF "$row" "$tmp/chat.out" && ok || fail "chat report lacks \"$row\""
done
"$bin" bench --base-url "$base" --input-len 64 --output-len 8 --num-prompts 4 --seed 1 \
    --save-result --result-dir "$tmp" --label base >"$tmp/base.out" 2>"$tmp/base.err" \
    || fail "base run: exit $?"
check_run base 4 32 $((4 * 60)) $((4 * 70)) "$tmp/base.out"
saved=$(ls "$tmp"/base-infqps-tiny-qwen3-*.json 2>/dev/null | head -1)
if [ -z "$saved" ]; then
    fail "no result file named base-infqps-tiny-qwen3-DATE.json"; ls "$tmp"
else
    python3 - "$saved" "$tmp/chat.json" <<'PY' && ok || fail "saved JSON keys or values"
import json, sys
base, chat = (json.load(open(p)) for p in sys.argv[1:])
keys = ["date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness",
        "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
        "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
        "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests",
        "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
        "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms", "server_flags", "synthetic_dataset"]
missing = [k for k in keys if k not in base]
assert not missing, missing
assert base["completed"] == 4 and base["failed"] == 0, base
assert base["total_output_tokens"] == 32, base["total_output_tokens"]
assert base["request_rate"] in ("inf", float("inf")), base["request_rate"]
assert base["server_flags"]["max-num-seqs"], base["server_flags"]
assert chat["max_concurrency"] == 2 and chat["backend"] == "openai-chat", chat
assert "p90_ttft_ms" in chat and "p50_e2el_ms" in chat, sorted(chat)
PY
    "$bin" bench compare "$saved" "$tmp/chat.json" >"$tmp/compare.out" 2>&1 \
        || fail "compare: exit $?"
    grep -q "Mean TTFT (ms)" "$tmp/compare.out" && grep -q "%" "$tmp/compare.out" && ok \
        || { fail "compare output"; cat "$tmp/compare.out"; }
fi

# Every request fails (unknown model): counted and reported, and the server stays up.
"$bin" bench --base-url "$base" --model no-such-model --input-len 16 --output-len 4 \
    --num-prompts 5 >"$tmp/fail.out" 2>&1 || fail "failing run: exit $?"
[ "$(field "Successful requests" "$tmp/fail.out")" = 0 ] && \
    [ "$(field "Failed requests" "$tmp/fail.out")" = 5 ] && ok \
    || { fail "failed-request counts"; cat "$tmp/fail.out"; }
grep -q "HTTP 404" "$tmp/fail.out" && ok || fail "failed-request error text"
curl -sf "$base/health" >/dev/null && ok || fail "server down after failed requests"
"$bin" bench --base-url "$base" --input-len 16 --output-len 4 --num-prompts 2 >"$tmp/after.out" 2>&1
check_run after-failures 2 8 1 100 "$tmp/after.out"

# Ctrl-C (SIGINT) stops the run: the partial result is printed, exit 130, server unharmed.
finished() {
    curl -s "$base/metrics" | awk '/^vllm:request_success_total.*finished_reason="length"/ {s += $2} END {print s + 0}'
}
before=$(finished)
"$bin" bench --base-url "$base" --input-len 16 --output-len 4 --num-prompts 1000 \
    --request-rate 5 >"$tmp/int.out" 2>"$tmp/int.err" &
bench_pid=$!
for _ in $(seq 600); do
    [ "$(finished)" -ge $((before + 2)) ] && break
    sleep 0.1
done
kill -INT $bench_pid; wait $bench_pid; rc=$?
s=$(field "Successful requests" "$tmp/int.out")
[ $rc = 130 ] && grep -q "stopped" "$tmp/int.err" && [ "${s:-0}" -ge 2 ] && [ "$s" -lt 1000 ] && ok \
    || { fail "SIGINT: rc $rc, successful $s"; cat "$tmp/int.err" "$tmp/int.out"; }

# Nothing listens: one message, exit 1.
out=$("$bin" bench --base-url http://127.0.0.1:1 --num-prompts 1 2>&1); rc=$?
[ $rc = 1 ] && [ "$(echo "$out" | wc -l)" = 1 ] && ok || fail "no server: rc $rc: $out"

# Bad flags: one line, exit 2.
for args in "--bogus" "--num-prompts x" "--request-rate -1" "--dataset-name nope" \
            "--goodput ttft" "--profile nope" "--random-range-ratio 1" "--num-prompts"; do
    # shellcheck disable=SC2086
    out=$("$bin" bench $args 2>&1); rc=$?
    [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && ok || fail "bench $args: rc $rc: $out"
done
"$bin" bench --help | grep -q -- "--max-concurrency" && ok || fail "--help"

kill "$server_pid"; wait "$server_pid"; rc=$?; server_pid=
[ $rc = 0 ] && ok || fail "server exit status $rc"
if grep -qE "AddressSanitizer|LeakSanitizer|runtime error:" "$tmp/serve.log"; then
    fail "sanitizer report in the server log"; tail -40 "$tmp/serve.log"
fi
echo "$passed passed, $failures failed"
[ $failures = 0 ]
