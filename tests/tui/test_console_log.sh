#!/usr/bin/env bash
# What the engine reports on stderr shows in the console: a KV pool smaller than the model's
# context makes the engine say so at start-up, and the line is in the output pane (and still in
# the stderr log, which here is a file); a rebuild that says it again shows again.
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
echo PASS
