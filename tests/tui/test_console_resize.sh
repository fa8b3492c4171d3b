#!/usr/bin/env bash
# Resizing: to 60x20 the console keeps working (charts, chat, a command answered); to 40x10 it
# shows the "too small" screen; back to 120x40 the full layout returns and chat still works.
source "$(dirname "$0")/lib.sh"

tui_start
tui_wait '^ready \|'
tui_resize 60 20
tui_wait_gone 'Flags \(\* changed\)' # no side column at 60 columns
tui_wait 'seqs .*running [0-9]'
tui_wait '^ready \|'
tui_send '/get max-num-seqs' Enter
tui_wait '^max-num-seqs = 256'

tui_resize 40 10
tui_wait 'terminal too small: need 60x16'
tui_resize 120 40
tui_wait 'Flags \(\* changed\)'
tui_wait '^ready \|'
tui_send 'Hello' Enter
tui_wait '\[(stop|length): [0-9]+ prompt'
# many quick resizes while a reply streams
for size in "80 24" "100 30" "61 17" "200 60" "120 40"; do
    tui_resize $size
done
tui_send '/get block-size' Enter
tui_wait '^block-size = 16'
tui_keys C-l
tui_wait 'Chat and output'
tui_quit
echo PASS
