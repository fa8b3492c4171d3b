#!/usr/bin/env bash
# `tachyon bench sweep` against `tachyon serve` on the tiny fixture: max-num-seqs over two values
# through /admin/flags, the table (each value, req/s, throughput, latencies, Pareto and best
# marks), the plot with the best point '*', the server's flag left at the last value, the results
# saved with --save-result; a bad value is reported for its point while the others run; usage
# errors exit 2.
set -uo pipefail
bin=${TACHYON_BIN:?} fixtures=${TACHYON_FIXTURES:?}
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out" 2>/dev/null; exit 1; }

"$bin" serve --port 0 --threads 2 --kv-cache-memory 128MiB --stats-interval 0 \
    --model "$fixtures/tiny-qwen3" 2>"$tmp/serve.log" >/dev/null &
server_pid=$!
port=$("$root/scripts/serve-port" "$tmp/serve.log" "$server_pid") || {
    echo "FAIL: server did not start"; cat "$tmp/serve.log"; exit 1
}
base="http://127.0.0.1:$port"
work=(--base-url "$base" --profile short --num-prompts 12 --input-len 16 --output-len 4)

"$bin" bench sweep max-num-seqs 1,8 "${work[@]}" --save-result --result-dir "$tmp" \
    >"$tmp/out" 2>"$tmp/err" || fail "exit status $?: $(cat "$tmp/err")"
grep -q '^Sweep of max-num-seqs$' "$tmp/out" || fail "no title"
grep -Eq '^ 1 1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ ' "$tmp/out" || fail "no row for 1"
grep -Eq '^ 2 8 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ ' "$tmp/out" || fail "no row for 8"
[ "$(grep -c 'best \*' "$tmp/out")" = 1 ] || fail "not exactly one best point"
grep -q 'pareto' "$tmp/out" || fail "no Pareto point"
grep -q '^output tok/s$' "$tmp/out" || fail "no plot"
grep -Eq '^ +([0-9.]+ )?\|.*\*' "$tmp/out" || fail "the plot has no best point"
grep -q 'mean TPOT (ms)' "$tmp/out" || fail "the plot has no x axis"
grep -Eq '^points: .*=1.*=8' "$tmp/out" || fail "no legend"
[ "$(ls "$tmp"/sweep-max-num-seqs-*.json | wc -l)" = 2 ] || fail "results not saved: $(ls "$tmp")"
curl -sf "$base/admin/flags/max-num-seqs" | grep -q '"value":"8"' || fail "the flag is not 8"

# a value the server refuses: that point says why, the other runs
"$bin" bench sweep max-num-seqs 0,4 "${work[@]}" >"$tmp/out" 2>"$tmp/err" || fail "exit $?"
grep -Eq '^ 1 0 +max-num-seqs=0: HTTP 400' "$tmp/out" || fail "the refused value is not reported"
grep -Eq '^ 2 4 +[0-9.]+ .*best \*' "$tmp/out" || fail "the other point did not run"

"$bin" bench sweep max-num-seqs >/dev/null 2>&1; [ $? = 2 ] || fail "usage: not 2"
"$bin" bench sweep max-num-seqs 1,,2 "${work[@]}" >/dev/null 2>&1; [ $? = 2 ] || fail "bad list: not 2"
echo PASS
