#!/usr/bin/env bash
# `tachyon console --watch URL URL`: two live `tachyon serve` replicas watched, one row each.
# At 80x24, 120x40, 200x50 and NO_COLOR in the C locale: both rows up, the fleet's total, the
# status line; q quits with status 0 and the terminal restored. Then at 120x40: requests on
# replica 1 show in its row (running, generation tok/s) and in the fleet's chart; replica 2
# killed with SIGKILL: its row says down (connection refused, in red), the total counts 1 of 2
# up. At 80x24, 20 replicas (19 down): the rows that fit and "... and 3 more". Options that
# open a model are refused with --watch.
source "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)

pids=()
stop_replicas() {
    local i # the clients first: a replica drains its requests before it exits
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    tui_cleanup
}
trap stop_replicas EXIT

source "$root/tests/replica.sh"
replica a "$TUI_DIR" || tui_fail "replica a did not start"
replica b "$TUI_DIR" || tui_fail "replica b did not start"
ua=http://127.0.0.1:$port_a ub=http://127.0.0.1:$port_b

rc=0
"$TACHYON_BIN" console --watch "$ua" --port 0 >/dev/null 2>"$TUI_DIR/usage.err" </dev/null || rc=$?
[ $rc = 2 ] && grep -q 'does not go with --watch' "$TUI_DIR/usage.err" || tui_fail "--port with --watch"

watch_quit() {
    tui_keys q
    tui_wait 'console exited: rc=' 20
    [ "$(cat "$TUI_DIR/rc")" = 0 ] || tui_fail "exit status $(cat "$TUI_DIR/rc"), expected 0"
    cmp -s "$TUI_DIR/stty.before" "$TUI_DIR/stty.after" || tui_fail "terminal modes not restored"
}

for size in 80x24 120x40 200x50 120x40-plain; do
    TUI_W=${size%%x*} TUI_H=${size#*x} TUI_H=${TUI_H%-plain}
    if [ "${size%-plain}" = "$size" ]; then envs=(); else envs=(NO_COLOR=1 LANG=C LC_ALL=C); fi
    tui_run "${envs[@]}" -- console --watch "$ua" "$ub/" --interval 0.5
    tui_wait '^watching 2 replicas: q quits'
    tui_wait "^ +1 127\.0\.0\.1:$port_a +up +0 +0 +0\.0% "
    tui_wait "^ +2 127\.0\.0\.1:$port_b/ +up +0 +0 +0\.0% "
    tui_wait '^ +fleet: 2/2 up'
    tui_wait 'Tachyon fleet +2 replicas, 2 of 2 up'
    tui_wait 'replica +state +run +wait +KV% +gen tok/s +prompt tok/s +done'
    if [ "$TUI_W" -ge 120 ]; then
        tui_wait "done +model"
        tui_wait " 0 +tiny *$"
        tui_wait 'fleet gen tok/s'
    fi
    if [ "${size%-plain}" != "$size" ] && tui_screen | LC_ALL=C grep -q '[^ -~]'; then
        tui_fail "non-ASCII on the screen in the C locale"
    fi
    watch_quit
    tmux_ kill-server
done

# More replicas than rows at 80x24: the rows that fit, then how many more; the total counts all.
TUI_W=80 TUI_H=24
many=("$ua")
for p in $(seq 2 20); do many+=("http://127.0.0.1:$p"); done # nothing listens there
tui_run -- console --watch "${many[@]}"
tui_wait '^ +17 127\.0\.0\.1:17 +down '
tui_wait '^ +\.\.\. and 3 more \(a taller terminal shows them\)'
tui_wait '^ +fleet: 1/20 up'
watch_quit
tmux_ kill-server

# Requests on replica 1, then replica 2 killed.
TUI_W=120 TUI_H=40
tui_run -- console --watch "$ua" "$ub"
tui_wait '^ +fleet: 2/2 up'
for _ in 1 2 3; do
    curl -s -m 120 "$ua/v1/completions" -H 'Content-Type: application/json' \
        -d '{"model":"tiny","prompt":"Hello","max_tokens":1000,"ignore_eos":true}' >/dev/null &
    pids+=($!)
done
tui_wait "^ +1 127\.0\.0\.1:$port_a +up +[1-3] +0 +[0-9.]+% +[1-9][0-9]*\.[0-9] "
tui_wait 'fleet gen tok/s +last .* now [1-9]'
kill -KILL "$pid_b"
tui_wait "^ +2 127\.0\.0\.1:$port_b +down +connection refused for [0-9]+ s"
tui_wait '^ +fleet: 1/2 up'
tui_wait 'Tachyon fleet +2 replicas, 1 of 2 up'
# the down row in red
tmux_ capture-pane -e -p -t t | grep "127.0.0.1:$port_b" | grep -q $'\e\[[0-9;]*31m' ||
    tui_fail "the down row is not red"
watch_quit
echo PASS
