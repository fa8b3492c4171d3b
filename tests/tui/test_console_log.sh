#!/usr/bin/env bash
# What the engine reports on stderr shows in the console: a KV pool smaller than the model's
# context makes the engine say so at start-up, and the line is in the output pane (and still in
# the stderr log, which here is a file); a rebuild that says it again shows again. Listening on
# every address without an API key gives tachyon serve's warning, in the pane and on the status
# line.
source "$(dirname "$0")/lib.sh"

kv='max-model-len [0-9]+: the KV pool \(4 MiB\) holds [0-9]+ tokens, less than the model.s context'
tui_start -- --kv-cache-memory 4MiB
tui_wait '^ready \|'
tui_wait "^$kv"
grep -Eq "$kv" "$TUI_DIR/stderr" || tui_fail "the line is not in the stderr log any more"
tui_send '/set max-model-len 0' Enter # automatic again: the rebuild fits it to the pool again
tui_wait 'KV pool rebuilt in'
tui_wait_count "^$kv" 2
tui_quit
tmux_ kill-server

# listening beyond this machine without an API key: tachyon serve's warning, in the pane (in the
# error colour), on the status line and in the stderr log; none with a key or on loopback
warn='warning: listening on 0\.0\.0\.0 without --api-key: anyone who can reach it may use the API'
tui_start -- --host 0.0.0.0
tui_wait '^ready \|'
tui_wait "^$warn"
tui_wait '^ready \| .*\| warning: listening on 0\.0\.0\.0 without --api-key'
grep -Eq "tachyon: $warn" "$TUI_DIR/stderr" || tui_fail "the warning is not in the stderr log"
tmux_ capture-pane -p -e -t t | grep -E "warning: listening" | head -1 |
    grep -Eq $'\e\\[([0-9;]*;)?31(;[0-9;]*)?m' || tui_fail "the warning is not in the error colour"
tui_quit
tmux_ kill-server
for opts in "--host 0.0.0.0 --api-key k" ""; do
    # shellcheck disable=SC2086
    tui_start -- $opts
    tui_wait '^ready \| .*server listening'
    if tui_screen | grep -q 'warning: listening'; then tui_fail "a warning with: $opts"; fi
    tui_quit
    tmux_ kill-server
done
echo PASS
