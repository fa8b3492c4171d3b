#!/usr/bin/env bash
# The F-key bar and the mouse at 80x24, 120x40 and 200x50: F3 shows the log (a /set and the
# periodic stats line are in it) and F3 again the chat; F4 zooms the charts one by one and back
# to the grid; a click on a chart zooms it and another goes back; a click on the bar's F3 opens
# the log; the wheel scrolls the pane; F5 runs the last /bench again; F10 quits (exit status 0).
# With --no-mouse the terminal keeps the mouse; NO_COLOR in the C locale keeps the bar.
source "$(dirname "$0")/lib.sh"

# tmux passes what send-keys -l types to the console as is: an X10 mouse report (TERM=screen)
report() { printf '\e[M%b%b%b' "\\$(printf '%03o' $((32 + $1)))" "\\$(printf '%03o' $((33 + $2)))" \
    "\\$(printf '%03o' $((33 + $3)))"; }
mouse() { # mouse BUTTON X Y (0-based cells; BUTTON 0 = a left click, 64/65 = wheel up/down)
    if [ "$1" = 0 ]; then tui_send "$(report 0 "$2" "$3")$(report 3 "$2" "$3")"; else tui_send "$(report "$@")"; fi
}
# the row (0-based) of the first line matching a regex
row_of() { tui_screen | grep -nE -- "$1" | head -1 | cut -d: -f1 | awk '{print $1 - 1}'; }
# the column where the F-key bar's key starts on the status line
fkey_col() { tui_screen | tail -1 | grep -ob -- "$1" | head -1 | cut -d: -f1; }

for size in 80x24 120x40 200x50; do
    TUI_W=${size%x*} TUI_H=${size#*x}
    tui_start
    tui_wait '^ready \| F1Help'
    [ "$(tmux_ display -p -t t '#{mouse_standard_flag}')" = 1 ] || tui_fail "the mouse is off"
    if [ "$TUI_W" -ge 100 ]; then
        tui_wait '^ready \| F1Help F2Think F3Log F4Zoom F5Rerun F6Reqs F10Quit \|'
    else
        tui_wait '^ready \| F1Help F10Quit \|'
    fi
    tui_send '/set max-num-seqs 8' Enter
    tui_wait 'max-num-seqs = 8'
    tui_send 'Hello' Enter
    tui_wait '\[(stop|length): [0-9]+ prompt'
    tui_keys F3
    tui_wait '^─ Log \(F3: back to the chat\)'
    tui_wait '^\[00:00:[0-9]{2}\] /set max-num-seqs 8 applied'
    tui_wait '^\[00:00:[0-9]{2}\] Avg prompt throughput: [0-9.]+ tokens/s' 20
    tui_keys F3
    tui_wait '^─ Chat and output'
    # F4: each chart in turn over the whole chart area, then the grid
    tui_wait 'seqs .*running [0-9]+ .*KV cache|seqs .*running [0-9]+'
    tui_keys F4
    tui_wait '^seqs .*running [0-9]+'
    tui_wait_gone 'KV cache'
    for _ in 1 2 3 4 5; do tui_keys F4; done
    tui_wait '^(GPU|CPU/RSS) '
    tui_wait_gone '^seqs '
    tui_keys F4
    tui_wait 'KV cache'
    tui_wait '^seqs '
    # the mouse: a click on a chart zooms it, another goes back; the wheel scrolls the pane
    y=$(($(row_of '^seqs ') + 1))
    mouse 0 2 $y
    tui_wait_gone 'KV cache'
    mouse 0 2 $y
    tui_wait 'KV cache'
    for i in $(seq 1 60); do tui_send "/get block-size" Enter; done
    tui_wait_count '^block-size = 16' 2
    mouse 64 5 $((TUI_H - 4))
    tui_wait 'Chat and output \(scrolled up: PgDn goes back\)'
    mouse 65 5 $((TUI_H - 4))
    tui_wait_gone 'scrolled up'
    if [ "$TUI_W" -ge 100 ]; then
        mouse 0 $(($(fkey_col F3Log) + 1)) $((TUI_H - 1))
        tui_wait '^─ Log \(F3: back to the chat\)'
        tui_keys F3
        tui_wait '^─ Chat and output'
    fi
    # F5: the last /bench again
    tui_keys F5
    tui_wait 'no /bench to run again yet'
    tui_send '/bench short --num-prompts 4 --input-len 16 --output-len 4' Enter
    tui_wait 'run #[0-9]+: 4 ok' 120
    n=$(tui_screen | grep -Eo 'run #[0-9]+: 4 ok' | tail -1 | grep -Eo '[0-9]+' | head -1)
    tui_keys F5
    tui_wait "run #$((n + 1)): 4 ok" 120
    tui_keys F10
    tui_wait 'console exited: rc=' 20
    [ "$(cat "$TUI_DIR/rc")" = 0 ] || tui_fail "F10: exit status $(cat "$TUI_DIR/rc")"
    tmux_ kill-server
done

TUI_W=120 TUI_H=40
tui_start NO_COLOR=1 LANG=C LC_ALL=C -- --no-mouse
tui_wait '^ready \| F1Help F2Think F3Log F4Zoom F5Rerun F6Reqs F10Quit \|'
tui_wait 'KV cache'
[ "$(tmux_ display -p -t t '#{mouse_standard_flag}')" = 0 ] || tui_fail "--no-mouse: the mouse is on"
tui_keys F4
tui_wait_gone 'KV cache'
tui_screen | LC_ALL=C grep -q '[^ -~]' && tui_fail "non-ASCII on the screen in the C locale"
tui_quit
echo PASS
