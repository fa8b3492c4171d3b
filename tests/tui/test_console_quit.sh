#!/usr/bin/env bash
# Quitting is safe for the server's other clients. Ctrl-C with nothing running quits at once.
# Ctrl-C first stops what the console itself is doing (its reply and its benchmark) and the
# console stays. With requests from other clients in flight it says how many and stays; /quit
# --drain then refuses new requests and quits once those have finished (each one complete,
# finish_reason "length", none "abort"), and so do SIGTERM and SIGHUP (the terminal hung up: its
# default action killed the console mid-request); a second Ctrl-C instead aborts them and quits.
source "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }

model="$TACHYON_FIXTURES/tiny-qwen3"
# The engine pauses 20 ms after each step (scripted.h) where requests must stay in flight for
# seconds: they then cost little CPU, at any build's speed.
paced=TACHYON_TEST_STEP_DELAY_MS=20
url() { tui_screen | head -1 | grep -Eo 'http://127\.0\.0\.1:[0-9]+'; }
# outside N TOKENS: N completion requests from another client, in the background
outside() {
    local u
    u=$(url)
    for i in $(seq "$1"); do
        curl -s -m 300 "$u/v1/completions" -H 'Content-Type: application/json' \
            -d "{\"model\": \"$model\", \"prompt\": \"Hello\", \"max_tokens\": $2, \"ignore_eos\": true}" \
            >"$TUI_DIR/out.$i" &
    done
}
# tokens_for SECONDS: how many tokens one request generates in about that long on this build and
# machine (ASan and a busy machine are many times slower than Release), measured once with a
# request of 100 tokens, so that requests are surely in flight during the steps below and the
# drains still end in time
tokens_for() {
    if [ -z "${TOK_PER_S:-}" ]; then
        local t0 t1
        t0=$(date +%s.%N)
        curl -s -m 300 "$(url)/v1/completions" -H 'Content-Type: application/json' \
            -d "{\"model\": \"$model\", \"prompt\": \"Hi\", \"max_tokens\": 100, \"ignore_eos\": true}" >/dev/null
        t1=$(date +%s.%N)
        TOK_PER_S=$(python3 -c "print(100 / max($t1 - $t0, 0.01))")
    fi
    python3 -c "print(max(50, min(3500, int($TOK_PER_S * $1))))"
}
still_running() { [ ! -f "$TUI_DIR/rc" ] || tui_fail "the console quit"; }
exited_ok() {
    tui_wait 'console exited: rc=' 120
    [ "$(cat "$TUI_DIR/rc")" = 0 ] || tui_fail "exit status $(cat "$TUI_DIR/rc"), expected 0"
    cmp -s "$TUI_DIR/stty.before" "$TUI_DIR/stty.after" || tui_fail "terminal modes not restored"
}

# nothing running: Ctrl-C quits
tui_start
tui_wait '^ready \|'
tui_keys C-c
exited_ok
tmux_ kill-server

# the console's own benchmark: Ctrl-C stops it, the console stays
tui_start -- --max-num-seqs 1 --max-num-batched-tokens 256 --shutdown-timeout 120
tui_wait '^ready \|'
tui_send '/bench short --num-prompts 400 --input-len 64 --output-len 64' Enter
tui_wait 'bench \[[#.]+\]'
tui_keys C-c
tui_wait 'run #1 \(stopped: partial\)|not kept as a result|benchmark stopped \(stopped while preparing' 60
tui_wait '^ready \| F1Help'
still_running
tmux_ kill-server

# the console's own reply, queued behind other clients' requests: the first Ctrl-C stops the
# reply only; the next one says how many requests of other clients are in flight
tui_start "$paced" -- --max-num-seqs 1 --max-num-batched-tokens 256 --shutdown-timeout 120
tui_wait '^ready \|'
outside 3 "$(tokens_for 3)"
tui_wait 'engine: 1 running, [12] waiting'
tui_send 'Tell me a long story' Enter
tui_wait 'chat-[0-9]+ +[0-9]+ +0 '
tui_keys C-c
tui_wait '\[abort: [0-9]+ prompt \+ 0 generated tokens'
still_running
tui_keys C-c
tui_wait '[1-3] requests? from other clients (is|are) in flight'
still_running
# /quit --drain lets them finish
u=$(url)
tui_send '/quit --drain' Enter
# new requests are refused while the others finish (or, once they have, nothing listens)
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$u/health" || true)
[ "$code" != 200 ] || tui_fail "a new request was answered while draining"
exited_ok
wait
for i in 1 2 3; do
    grep -q '"finish_reason":"length"' "$TUI_DIR/out.$i" ||
        tui_fail "request $i of the other client did not complete: $(cat "$TUI_DIR/out.$i")"
done
tmux_ kill-server

# SIGTERM drains as it does for tachyon serve; so does SIGHUP
for sig in TERM HUP; do
    tui_start "$paced" -- --max-num-seqs 1 --shutdown-timeout 120
    tui_wait '^ready \|'
    # 5 s of tokens each (as measured once, at the start; the engine paced, so the rate hardly
    # moves with the machine's load: unpaced, 3 s worth once finished before the drain was seen)
    outside 2 "$(tokens_for 5)"
    tui_wait 'engine: 1 running, 1 waiting'
    pid=$(tui_console_pid)
    [ -n "$pid" ] || tui_fail "no console process under the pane"
    kill -"$sig" "$pid"
    tui_wait '^draining: new requests are refused'
    # the status line counts what is left, from the server's http_wait_idle
    tui_wait '^ready \| .*\| draining: [12] requests? in flight, [0-9]+ s left \(Ctrl-C aborts\)'
    exited_ok
    wait
    for i in 1 2; do
        grep -q '"finish_reason":"length"' "$TUI_DIR/out.$i" ||
            tui_fail "after SIG$sig, request $i did not complete: $(cat "$TUI_DIR/out.$i")"
    done
    tmux_ kill-server
done

# a second Ctrl-C aborts them and quits
tui_start "$paced" -- --max-num-seqs 1
tui_wait '^ready \|'
outside 2 "$(tokens_for 4)"
tui_wait 'engine: 1 running, 1 waiting'
tui_keys C-c
tui_wait '2 requests from other clients are in flight'
tui_keys C-c
exited_ok
wait
tmux_ kill-server

# /quit during the console's own benchmark stops it, then quits (nothing else in flight)
tui_start
tui_wait '^ready \|'
tui_send '/bench short --num-prompts 400 --input-len 64 --output-len 64' Enter
tui_wait 'bench \[[#.]+\]'
tui_send '/quit' Enter
exited_ok
echo PASS
