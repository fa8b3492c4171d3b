#!/usr/bin/env bash
# Past one node (server/scale-out.md): two `tachyon serve` replicas behind a real nginx running
# server/nginx-tachyon.conf (ports substituted), `tachyon bench` through nginx, and one replica
# stopped while it has requests in flight. Two phases, each with a fresh nginx (so that one
# phase's passive health marks do not carry into the next):
#
# 1. drain: replica b gets SIGTERM mid-run. It finishes what it has and exits 0; meanwhile it
#    answers new requests 503, which nginx retries on a (http_503 non_idempotent). Every request
#    of the benchmark succeeds. Then b is started again on its port.
# 2. kill: replica a gets SIGKILL mid-run. What must hold:
#    - both replicas' /health answered 200 before (and nginx's);
#    - the benchmark finishes (every step runs under a timeout) and counts every request:
#      successful + failed = N;
#    - from nginx's access log (one line per request: end time, duration, status, the upstreams
#      tried): every failed request was on the killed replica when it died (its last upstream is
#      the killed one and it ended after the kill): failed <= that count;
#    - every request nginx received after the killed process was gone (reaped: until then, a
#      large ASan process's teardown takes a while, the kernel still accepts connections on its
#      socket and resets them, as it did once under load) was answered 200 by the survivor (some
#      tried the dead replica first: connection refused, then the survivor);
#    - the survivor's /metrics counts exactly the requests nginx's log says it answered, and the
#      killed replica had answered some before the kill (both took work);
#    - the benchmark's --metrics rows: the survivor's requests and tokens during the run as its
#      /metrics counted them, the killed replica down;
#    - afterwards nginx still answers /health and completions (through the survivor).
# No timing is asserted beyond generous timeouts: on a loaded machine the run is only slower.
set -uo pipefail
bin=${TACHYON_BIN:?} fixtures=${TACHYON_FIXTURES:?}
root=$(cd "$(dirname "$0")/../.." && pwd)
nginx=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx" ] || { echo "FAIL: nginx is not installed (scripts/setup-deps installs it)"; exit 1; }

tmp=$(mktemp -d)
chmod 755 "$tmp" # nginx's workers run as nobody when the test runs as root
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
phase=drain
fail() {
    echo "FAIL ($phase): $*"
    for f in bench-$phase.out bench-$phase.err nginx-$phase.err access-$phase.log a.log b.log; do
        [ -s "$tmp/$f" ] && { echo "---- $f"; tail -40 "$tmp/$f"; }
    done
    exit 1
}

source "$root/tests/replica.sh"
replica a "$tmp" || fail "replica a did not start"
replica b "$tmp" || fail "replica b did not start"
ra=127.0.0.1:$port_a rb=127.0.0.1:$port_b

# status URL: the HTTP status of a GET (000: no answer).
status() { curl -s -o /dev/null -m 10 -w '%{http_code}' "$1"; }
# metric URL NAME: the sum of a series' samples in a replica's /metrics.
metric() {
    curl -sf -m 10 "$1/metrics" | awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $NF }
        END { printf "%d\n", s }'
}

# nginx for this phase: the sample's upstream and listen lines pointed at the replicas and a
# free port, inside a main config whose paths are all in the test's directory. A port taken
# between choosing and binding it: another. Sets lb (its URL) and pid_n.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
try_nginx() {
    local port=$1 conf=$tmp/tachyon-$phase.conf
    sed -e "s/127\.0\.0\.1:8001/$ra/" -e "s/127\.0\.0\.1:8002/$rb/" \
        -e "s/listen 8000;/listen 127.0.0.1:$port;/" "$root/server/nginx-tachyon.conf" >"$conf"
    grep -q "server $ra " "$conf" && grep -q "server $rb " "$conf" &&
        grep -q "listen 127.0.0.1:$port;" "$conf" ||
        fail "server/nginx-tachyon.conf no longer has the lines this test substitutes"
    mkdir -p "$tmp/temp"
    cat >"$tmp/nginx-$phase.conf" <<EOF
worker_processes 1;
events { worker_connections 256; }
http {
    log_format scaleout '\$msec \$request_time \$status "\$request_uri" "\$upstream_addr" "\$upstream_status"';
    access_log $tmp/access-$phase.log scaleout;
    client_body_temp_path $tmp/temp/body;
    proxy_temp_path $tmp/temp/proxy;
    fastcgi_temp_path $tmp/temp/fastcgi;
    uwsgi_temp_path $tmp/temp/uwsgi;
    scgi_temp_path $tmp/temp/scgi;
    include $conf;
}
EOF
    "$nginx" -p "$tmp" -c "$tmp/nginx-$phase.conf" \
        -g "daemon off; pid $tmp/nginx-$phase.pid; error_log stderr;" 2>"$tmp/nginx-$phase.err" &
    pid_n=$!
    pids+=("$pid_n")
    lb=http://127.0.0.1:$port
    for _ in $(seq 100); do
        [ "$(status "$lb/health")" = 200 ] && return 0
        kill -0 "$pid_n" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
start_nginx() {
    [ "$(status "http://$ra/health")" = 200 ] || fail "replica a: /health did not answer 200"
    [ "$(status "http://$rb/health")" = 200 ] || fail "replica b: /health did not answer 200"
    for try in 1 2 3; do
        try_nginx "$(free_port)" && return 0
        [ "$try" = 3 ] && fail "nginx did not start"
    done
}

# The benchmark: 60 requests, 4 at a time, 48 tokens each (least_conn gives each replica about
# two at a time), through nginx; --metrics adds a row per replica to its report.
n=60
start_bench() {
    timeout 300 "$bin" bench --base-url "$lb" --num-prompts $n --input-len 16 --output-len 48 \
        --max-concurrency 4 --metrics "http://$ra" --metrics "http://$rb/metrics" \
        >"$tmp/bench-$phase.out" 2>"$tmp/bench-$phase.err" &
    bench_pid=$!
    pids+=("$bench_pid")
}
# await_work URL BASE: until the replica has answered some of this benchmark's requests (its
# count was BASE before) and has some in flight (sets done_r and busy_r).
await_work() {
    local base=$2
    for _ in $(seq 600); do
        kill -0 "$bench_pid" 2>/dev/null || fail "the benchmark ended before the replica stopped"
        done_r=$(($(metric "$1" 'vllm:request_success_total') - base))
        busy_r=$(metric "$1" 'tachyon:requests_in_flight')
        [ "${done_r:-0}" -ge 2 ] && [ "${busy_r:-0}" -ge 1 ] && return 0
        sleep 0.1
    done
    fail "$1 never had work (done $done_r, in flight $busy_r)"
}
# end_bench: waits for the benchmark and nginx's n lines; sets ok and failed.
end_bench() {
    wait "$bench_pid"
    local rc=$?
    [ "$rc" = 0 ] || fail "tachyon bench exited with $rc"
    local f=$tmp/bench-$phase.out
    ok=$(sed -n 's/^Successful requests:[[:space:]]*\([0-9]*\).*/\1/p' "$f")
    failed=$(sed -n 's/^Failed requests:[[:space:]]*\([0-9]*\).*/\1/p' "$f")
    [ -n "$ok" ] && [ -n "$failed" ] || fail "no counts in the report"
    [ $((ok + failed)) = $n ] || fail "successful $ok + failed $failed != $n"
    # nginx writes a request's line once it has finished it
    local log=$tmp/access-$phase.log
    for _ in $(seq 100); do [ "$(grep -c '"/v1/completions"' "$log")" -ge $n ] && break; sleep 0.1; done
    [ "$(grep -c '"/v1/completions"' "$log")" = $n ] || fail "nginx logged $(grep -c '"/v1/completions"' "$log") completions, not $n"
}

# ---- 1. drain: SIGTERM to b
start_nginx
start_bench
await_work "http://$rb" 0
kill -TERM "$pid_b"
timeout 60 tail --pid="$pid_b" -f /dev/null || fail "replica b did not exit within 60 s of SIGTERM"
wait "$pid_b"
rc=$?
[ "$rc" = 0 ] || fail "replica b exited with $rc after SIGTERM"
end_bench
moved=$(grep '"/v1/completions"' "$tmp/access-$phase.log" | grep -c ", ")
echo "drained replica b (it had answered $done_r, $busy_r in flight): bench $ok successful," \
    "$failed failed; $moved requests moved on to a (503 or refused by b)"
[ "$failed" = 0 ] || fail "$failed requests failed while b drained"
grep -Eq "^ +1 127\.0\.0\.1:$port_a +up +[1-9][0-9]* +[1-9][0-9]* " "$tmp/bench-$phase.out" ||
    fail "the report's row of replica a"
grep -Eq "^ +2 127\.0\.0\.1:$port_b/metrics +down +connection refused \(up before the run\)$" \
    "$tmp/bench-$phase.out" || fail "the report's row of replica b"
kill "$pid_n"
wait "$pid_n" 2>/dev/null
replica b "$tmp" "$port_b" || fail "replica b did not start again on port $port_b"

# ---- 2. kill: SIGKILL to a
phase=kill
start_nginx
done_a0=$(metric "http://$ra" 'vllm:request_success_total')
done_b0=$(metric "http://$rb" 'vllm:request_success_total')
start_bench
await_work "http://$ra" "$done_a0"
t_kill=$(date +%s.%N)
kill -KILL "$pid_a"
wait "$pid_a" 2>/dev/null
# reaped: its sockets are closed. Until then (a large ASan process takes a while to tear down)
# the kernel still accepts connections on its listening socket and resets them.
t_dead=$(date +%s.%N)
echo "killed replica a at $t_kill, gone at $t_dead: it had answered $done_r, $busy_r in flight"
end_bench

done_b=$(($(metric "http://$rb" 'vllm:request_success_total') - done_b0))
read -r in_flight after retried to_b < <(python3 - "$tmp/access-$phase.log" "$t_kill" "$t_dead" \
    "$ra" "$rb" <<'EOF'
import re, sys
log, t_kill, t_dead, ra, rb = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
in_flight = after = retried = to_b = 0
bad = []
for line in open(log):
    end, dur, status, uri, ups = re.match(r'(\S+) (\S+) (\d+) "([^"]*)" "([^"]*)"', line).groups()
    if uri != "/v1/completions":
        continue
    ups = [u.strip() for u in ups.split(",")]
    end, start = float(end), float(end) - float(dur)
    last = ups[-1]
    if last == rb and status == "200":
        to_b += 1
    if len(ups) > 1:
        retried += 1
    if last == ra and end >= t_kill - 0.002:  # $msec: milliseconds
        in_flight += 1  # on the killed replica when it died, or sent to it while it died
    if start > t_dead + 0.005 and (status != "200" or last != rb):
        bad.append(line.strip())
    after += start > t_dead + 0.005
for b in bad:
    print("after the kill, not answered by the survivor:", b, file=sys.stderr)
print(in_flight, after, retried, to_b if not bad else -1)
EOF
)
echo "bench: $ok successful, $failed failed; nginx: $in_flight in flight on the killed replica," \
    "$after received after the kill, $retried retried; survivor answered $to_b (its /metrics: $done_b)"
[ "$to_b" != -1 ] || fail "a request received after the kill was not answered by the survivor"
[ "$failed" -le "$in_flight" ] ||
    fail "$failed requests failed, only $in_flight were in flight on the killed replica"
[ "$done_b" = "$to_b" ] || fail "the survivor's /metrics counts $done_b requests, nginx's log $to_b"
[ "$after" -ge 1 ] || fail "no request was sent after the kill: the run ended too early"
# the report's rows: b's requests and tokens as its /metrics counted them, a down
grep -Eq "^ +2 127\.0\.0\.1:$port_b/metrics +up +$done_b +$((done_b * 48)) +[0-9.]+ " \
    "$tmp/bench-$phase.out" || fail "the report's row of replica b (want $done_b requests)"
grep -Eq "^ +1 127\.0\.0\.1:$port_a +down +connection refused \(up before the run\)$" \
    "$tmp/bench-$phase.out" || fail "the report's row of replica a"

# The fleet without replica a: nginx still answers, through b.
[ "$(status "http://$ra/health")" = 000 ] || fail "the killed replica still answers"
[ "$(status "$lb/health")" = 200 ] || fail "nginx's /health did not answer 200 after the kill"
for i in 1 2 3; do
    curl -sf -m 60 "$lb/v1/completions" -H 'Content-Type: application/json' \
        -d '{"model":"tiny","prompt":"Hello","max_tokens":4}' | grep -q '"finish_reason"' ||
        fail "completion $i through nginx after the kill failed"
done
echo PASS
