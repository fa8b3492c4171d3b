#!/usr/bin/env bash
# A chat pane that shrinks when idle: after --chat-idle seconds without a key, a reply or a
# report, the charts take most of the screen (taller plots) where there are rows to give (120x40,
# 200x50; 80x24 keeps its layout: the charts are at their smallest already); a key gives the
# pane its rows back. NO_COLOR/C too.
source "$(dirname "$0")/lib.sh"
TUI_EXTRA="--chat-idle 2"

chat_row() { tui_screen | grep -n 'Chat and output' | head -1 | cut -d: -f1; }

check() {
    tui_wait '^ready \|'
    tui_send 'x' # activity now
    sleep 0.3
    local busy=$(chat_row) end=$((SECONDS + 15))
    tui_keys BSpace # an empty line: the pane may shrink
    if [ "$TUI_W" = 80 ]; then return; fi
    until [ "$(chat_row)" -gt $((busy + 1)) ]; do
        [ $SECONDS -lt $end ] || tui_fail "the chat pane did not shrink (title at row $busy)"
        sleep 0.2
    done
    local idle=$(chat_row)
    tui_send 'x'
    end=$((SECONDS + 5))
    until [ "$(chat_row)" -lt "$idle" ]; do
        [ $SECONDS -lt $end ] || tui_fail "a key did not give the pane its rows back (row $idle)"
        sleep 0.1
    done
    tui_keys BSpace
}

tui_sizes check
echo PASS
