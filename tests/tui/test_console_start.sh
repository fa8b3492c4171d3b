#!/usr/bin/env bash
# The console starts on the tiny fixture with a free port: the ready marker, the header (model,
# backend, server URL), the charts, flags and requests panels; F1 opens the help and any key
# closes it; /quit exits 0 with the terminal modes restored and the shell's screen back.
source "$(dirname "$0")/lib.sh"

tui_start
tui_wait '^ready \|'
screen=$(tui_screen)
grep -q 'tiny-qwen3' <<<"$screen" || tui_fail "header does not name the model"
grep -Eq 'http://127\.0\.0\.1:[0-9]+' <<<"$screen" || tui_fail "header has no server URL"
grep -q 'cpu' <<<"$screen" || tui_fail "header does not name the backend"
for title in 'seqs .*running [0-9]+ waiting [0-9]+' 'KV cache' 'tok/s .*prompt [0-9]+ gen [0-9]+' \
    'TTFT .*mean' 'TPOT .*mean' 'CPU/RSS .*cpu [0-9.]+% rss [0-9.]+%' 'Flags' 'Requests' 'Chat and output' \
    'KV [0-9]+/[0-9.k]+ tok' 'done stop 0 len 0 abort 0 error 0'; do
    grep -Eq "$title" <<<"$screen" || tui_fail "no \"$title\" panel"
done

# the server answers on the URL the header shows
port=$(grep -Eo 'http://127\.0\.0\.1:[0-9]+' <<<"$screen" | head -1 | sed 's/.*://')
if command -v curl >/dev/null; then
    curl -sf "http://127.0.0.1:$port/health" >/dev/null || tui_fail "the server does not answer /health"
fi

tui_keys F1
tui_wait 'Help \((any key closes|Up/Down, PgUp/PgDn scroll; any other key closes)\)'
tui_wait 'PgUp / PgDn'
tui_keys Space
tui_wait_gone 'Help \('
tui_wait 'Chat and output'

tui_quit
tui_wait 'console exited: rc=0'
tui_screen | grep -q 'Chat and output' && tui_fail "the console's screen is still shown after exit"
echo PASS
