#!/usr/bin/env bash
# F1 help at 80x24, where it does not fit: it says it scrolls, PgDn brings the last commands
# (/results, /compare, /clear) into view, PgUp goes back, Esc closes it. A rejected command
# leaves no dimmed suggestion behind: Right and Enter after "/b" send nothing to the model.
source "$(dirname "$0")/lib.sh"

tui_start
tui_wait '^ready \|'
tui_resize 80 24
tui_wait '^ready \|'
tui_keys F1
tui_wait 'Help \(Up/Down, PgUp/PgDn scroll; any other key closes\)'
tui_wait 'Enter +send a chat message'
tui_wait 'PgDn: more below'
tui_keys NPage NPage
tui_wait '/clear +clear the chat pane'
tui_wait '/results +list the benchmark runs'
tui_wait '/compare \[A B\.\.\.\] +compare runs'
tui_wait 'end \(PgUp: more above\)'
tui_keys PPage PPage
tui_wait 'Enter +send a chat message'
tui_keys Down
tui_wait_gone '^ *Keys$'
tui_keys Up
tui_wait '^ *Keys$'
tui_keys Escape
tui_wait_gone 'Help \('
tui_wait 'Chat and output'

tui_resize 120 40
tui_wait 'Requests'
tui_send '/b' Enter
tui_wait 'unknown command /b'
tui_keys Right Enter
tui_send '/get block-size' Enter # a marker: the keys before it have been handled
tui_wait '^block-size = 16'
tui_screen | grep -q '^> ench' && tui_fail "a stale suggestion was sent as a message"
tui_wait '0 submitted, 0 done'
tui_quit
echo PASS
