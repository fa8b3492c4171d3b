#!/usr/bin/env bash
# Cross-check of `tachyon bench` against independent clients on the same server and workload:
# guidellm (PyPI, into .venv/bench) and, when it installs, `vllm bench serve` (PyPI, into
# .venv/bench-vllm; only its benchmark client runs, no GPU needed). Each venv is made and
# installed on the first run; a client that does not install is reported and skipped.
#
# Server: `tachyon serve` on the tiny-qwen3 fixture (CPU backend). Workload, the same for every
# client: N random-token prompts of IN tokens to /v1/completions, OUT output tokens with
# ignore_eos, CONC requests in flight, all sent at once (tachyon and vLLM: --max-concurrency;
# guidellm: the concurrent profile), ROUNDS rounds interleaved across clients, seed = round (the
# CPU backend shares the machine with whatever else runs, so single runs drift: the throughput
# check uses each client's median over the rounds).
#
# Checks: generated tokens equal N*OUT for every client (exact); every client's input-token total
# equals the server's own count for its run (the vllm:prompt_tokens_total delta of /metrics,
# exact); guidellm's equals N*IN (its prompts are cut to IN tokens exactly; vLLM's random dataset,
# which tachyon reproduces, re-encodes decoded random ids and does not always converge on a
# 2,074-token vocabulary, so those two exceed N*IN by a few tokens, and vLLM says so); output
# throughput (generated tokens / benchmark duration, median over rounds) of each other client
# within 10 % of tachyon's. Prints Markdown for bench/RESULTS.md; exit 1 when a check fails.
# Usage: bench/crosscheck.sh [TACHYON_BINARY]   (default build/release/tachyon)
# BENCH_QUICK=1: tachyon bench alone (no installs), 4 prompts of 16 tokens, 4 out, one round (the
# test suite's check that the script works).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release/tachyon}
model=$root/tests/fixtures/tiny-qwen3
N=${N:-40} IN=${IN:-64} OUT=${OUT:-32} CONC=${CONC:-4} ROUNDS=${ROUNDS:-5}
quick=${BENCH_QUICK:-0}
[ "$quick" = 1 ] && N=4 IN=16 OUT=4 ROUNDS=1
tmp=$(mktemp -d)
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
[ -x "$bin" ] || { echo "no tachyon binary at $bin" >&2; exit 2; }

# venv DIR PACKAGE COMMAND: makes DIR and installs PACKAGE unless COMMAND is already there.
venv() {
    local dir=$1 pkg=$2 cmd=$3
    [ -x "$dir/bin/$cmd" ] && return 0
    python3 -m venv "$dir" && "$dir/bin/pip" install -q "$pkg" >"$tmp/pip-$pkg.log" 2>&1 \
        && [ -x "$dir/bin/$cmd" ]
}
have_guidellm=0 have_vllm=0
if [ "$quick" != 1 ]; then
    venv "$root/.venv/bench" guidellm guidellm && have_guidellm=1 \
        || echo "guidellm did not install: $(tail -1 "$tmp/pip-guidellm.log" 2>/dev/null)" >&2
    venv "$root/.venv/bench-vllm" vllm vllm && have_vllm=1 \
        || echo "vllm did not install: $(tail -1 "$tmp/pip-vllm.log" 2>/dev/null)" >&2
fi

# No prefix caching: Tachyon's vllm:prompt_tokens_total counts computed prefill tokens, and
# random prompts of different runs share cached blocks.
"$bin" serve --port 0 --threads 2 --kv-cache-memory 256MiB --stats-interval 0 --model "$model" \
    --enable-prefix-caching=false \
    2>"$tmp/serve.log" >/dev/null &
server_pid=$!
port=$("$root/scripts/serve-port" "$tmp/serve.log" "$server_pid") ||
    { echo "server did not start" >&2; cat "$tmp/serve.log" >&2; exit 1; }
base="http://127.0.0.1:$port"

server_prompt_tokens() {
    curl -s "$base/metrics" | awk '/^vllm:prompt_tokens_total/ {s += $2} END {printf "%d\n", s}'
}

# Each run appends "client round input output duration throughput server_input" to results.
run_tachyon() {
    "$bin" bench --base-url "$base" --model "$model" --dataset-name random --input-len "$IN" \
        --output-len "$OUT" --num-prompts "$N" --max-concurrency "$CONC" --seed "$1" \
        --save-result --result-dir "$tmp" --result-filename "t$1.json" >"$tmp/t$1.out" 2>&1 || return 1
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(d["total_input_tokens"], d["total_output_tokens"], d["duration"])' "$tmp/t$1.json"
}
run_vllm() {
    "$root/.venv/bench-vllm/bin/vllm" bench serve --backend openai --base-url "$base" \
        --model "$model" --tokenizer "$model" --dataset-name random --random-input-len "$IN" \
        --random-output-len "$OUT" --num-prompts "$N" --max-concurrency "$CONC" --seed "$1" \
        --save-result --result-dir "$tmp" --result-filename "v$1.json" >"$tmp/v$1.out" 2>&1 || return 1
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(d["total_input_tokens"], d["total_output_tokens"], d["duration"])' "$tmp/v$1.json"
}
run_guidellm() {
    "$root/.venv/bench/bin/guidellm" run \
        --backend "kind=openai_http,target=$base,model=$model,request_format=/v1/completions" \
        --profile "kind=concurrent,streams=$CONC" --constraint "kind=max_requests,count=$N" \
        --data "kind=synthetic_text,prompt_tokens=$IN,output_tokens=$OUT" \
        --seed "kind=static,value=$1" --output "kind=json,path=$tmp/g$1.json" \
        --disable-progress >"$tmp/g$1.out" 2>&1 || return 1
    python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["benchmarks"][0]; m=b["metrics"]
print(int(m["prompt_token_count"]["successful"]["total_sum"]), int(m["output_token_count"]["successful"]["total_sum"]), b["duration"])' "$tmp/g$1.json"
}

clients="tachyon"
[ $have_guidellm = 1 ] && clients="$clients guidellm"
[ $have_vllm = 1 ] && clients="$clients vllm"
: >"$tmp/results"
for round in $(seq "$ROUNDS"); do
    for c in $clients; do
        before=$(server_prompt_tokens)
        if line=$(run_$c "$round"); then
            after=$(server_prompt_tokens)
            echo "$c $round $line $((after - before))" >>"$tmp/results"
        else
            echo "$c round $round failed:" >&2
            tail -20 "$tmp/${c:0:1}$round.out" >&2
            echo "$c $round failed" >>"$tmp/results"
        fi
    done
done

python3 - "$tmp/results" "$N" "$IN" "$OUT" <<'PY'
import statistics, sys
path, n, inl, outl = sys.argv[1], *map(int, sys.argv[2:])
rows, ok = [], True
for line in open(path):
    f = line.split()
    if f[2] == "failed":
        print("| %s | %s | failed | | | | |" % (f[0], f[1])); ok = False; continue
    c, r, i, o, d, srv = f[0], int(f[1]), int(f[2]), int(f[3]), float(f[4]), int(f[5])
    rows.append((c, r, i, o, d, srv))
print("| client | round | input tokens | server-counted input | generated tokens | duration s | output tok/s |")
print("|---|---|---|---|---|---|---|")
for c, r, i, o, d, srv in rows:
    print("| %s | %d | %d | %d | %d | %.2f | %.1f |" % (c, r, i, srv, o, d, o / d))
print()
tput = {}
for c, r, i, o, d, srv in rows:
    if o != n * outl:
        print("FAIL: %s round %d generated %d tokens, want %d" % (c, r, o, n * outl)); ok = False
    if i != srv:
        print("FAIL: %s round %d reports %d input tokens, the server counted %d" % (c, r, i, srv)); ok = False
    if c == "guidellm" and i != n * inl:
        print("FAIL: guidellm round %d input %d, want %d" % (r, i, n * inl)); ok = False
    tput.setdefault(c, []).append(o / d)
med = {c: statistics.median(v) for c, v in tput.items()}
for c in med:
    if c == "tachyon" or "tachyon" not in med:
        continue
    rel = med[c] / med["tachyon"] - 1
    good = abs(rel) <= 0.10
    ok &= good
    print("Output throughput, median of %d rounds: %s %.1f tok/s vs tachyon %.1f tok/s: %+.1f %% (%s)"
          % (len(tput[c]), c, med[c], med["tachyon"], 100 * rel,
             "within 10 %" if good else "FAIL: over 10 %"))
print("All checks passed." if ok else "Some checks FAILED.")
sys.exit(0 if ok else 1)
PY
