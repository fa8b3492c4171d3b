#!/usr/bin/env bash
# Two data-parallel replicas (--data-parallel-size 2) in the console: the header says "DP 2",
# the numbers band has a row per replica (DP0, DP1), and six clients' completions are spread
# over both rows' "done" counts, as /metrics' series per replica (engine="0", engine="1") say.
# With tensor parallel 2 as well, a row per rank (DP0 TP0 ... DP1 TP1) with its time per step
# while requests run. Without the flags there are no replica rows.
source "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }

url() { tui_screen | head -1 | grep -Eo 'http://127\.0\.0\.1:[0-9]+'; }
TUI_W=150 TUI_H=40
tui_start -- --data-parallel-size 2
tui_wait '^ready \|'
tui_screen | head -1 | grep -q '| TP 1 DP 2 |' || tui_fail "the header does not say DP 2"
tui_wait '^ DP0 +run 0 wait 0 +KV 0% +gen [0-9.]+ tok/s +step idle +done 0'
tui_wait '^ DP1 +run 0 wait 0'
base=$(url)
for i in 1 2 3 4 5 6; do
    curl -s -m 120 "$base/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\": \"client $i says hello\", \"max_tokens\": 24, \"ignore_eos\": true}" \
        >"$TUI_DIR/out$i" &
done
wait
for i in 1 2 3 4 5 6; do
    grep -q '"completion_tokens":24' "$TUI_DIR/out$i" || tui_fail "client $i: $(cat "$TUI_DIR/out$i")"
done
# the router spreads them (the least busy replica; equally busy ones take turns): both rows'
# done counts, which refresh a few times a second, add up to the six
done_of() { tui_screen | grep -E "^ DP$1 " | grep -Eo 'done [0-9]+$' | grep -Eo '[0-9]+'; }
for _ in $(seq 100); do
    d0=$(done_of 0) d1=$(done_of 1)
    [ "$((d0 + d1))" = 6 ] && break
    sleep 0.1
done
[ "$((d0 + d1))" = 6 ] && [ "$d0" -gt 0 ] && [ "$d1" -gt 0 ] ||
    tui_fail "replica rows done $d0 and $d1, want six spread over both"
metrics=$(curl -s -m 10 "$base/metrics")
m0=$(grep -Eo '^tachyon:requests_submitted_total\{engine="0",model_name="[^"]*"\} [0-9]+' <<<"$metrics" |
    grep -Eo '[0-9]+$')
m1=$(grep -Eo '^tachyon:requests_submitted_total\{engine="1",model_name="[^"]*"\} [0-9]+' <<<"$metrics" |
    grep -Eo '[0-9]+$')
[ "$m0" = "$d0" ] && [ "$m1" = "$d1" ] || tui_fail "/metrics per replica $m0 and $m1: $metrics"
tui_quit
tmux_ kill-server

# tensor parallel 2 in each replica: a row per rank with its forward and collective times
tui_start -- --data-parallel-size 2 --tensor-parallel-size 2
tui_wait '^ready \|'
tui_screen | head -1 | grep -q '| TP 2 DP 2 |' || tui_fail "the header does not say TP 2 DP 2"
base=$(url)
for i in 1 2; do
    curl -s -m 300 "$base/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\": \"long $i\", \"max_tokens\": 3000, \"ignore_eos\": true}" \
        >"$TUI_DIR/long$i" &
done
tui_wait '^ DP0 TP0 +fwd [0-9.]+ ms/step +coll [0-9.]+ ms \([0-9]+%\)'
tui_wait '^ DP1 TP1 +fwd [0-9.]+ ms/step +coll [0-9.]+ ms \([0-9]+%\)'
# the rows are what this checks: the long requests are cut short by quitting twice (once, if
# they finished meanwhile)
tui_send '/quit' Enter
tui_wait 'in flight: quitting now aborts|console exited: rc=' 20
tui_screen | grep -q 'console exited: rc=' || tui_send '/quit' Enter
tui_wait 'console exited: rc=' 20
wait
tmux_ kill-server

tui_start --
tui_wait '^ready \|'
tui_wait 'TPOT'
tui_screen | grep -Eq '^ DP[0-9] ' && tui_fail "replica rows without data parallelism"
tui_screen | head -1 | grep -q 'DP ' && tui_fail "DP in the header without data parallelism"
tui_quit
echo PASS
