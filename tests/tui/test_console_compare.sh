#!/usr/bin/env bash
# /compare at a glance at 80x24, 120x40 and 200x50 (and NO_COLOR in the C locale): two runs with
# the default flags (repeats: their spread is the noise) and one with max-num-seqs 4; /compare 1 3
# names the differing flag, puts each metric on a line of at most 80 columns with base, run,
# change, noise and a verdict (better, worse, or the same within the noise), better lines green
# and worse ones red (the words say it without colours), and counts the verdicts; /compare 1 2
# (two repeats) has noise and no flag changed. Without repeats a line says how to measure noise.
source "$(dirname "$0")/lib.sh"

bench() { # N: runs /bench and waits for run #N
    tui_send '/bench short --num-prompts 8 --input-len 32 --output-len 8' Enter
    tui_wait "run #$1: 8 ok, 0 failed" 120
}
run() {
    tui_wait '^ready \|'
    bench 1
    tui_send '/set max-num-seqs 4' Enter
    tui_wait 'max-num-seqs = 4'
    bench 2
    tui_send '/clear' Enter
    tui_send '/compare 1 2' Enter
    tui_wait '^  #2: [0-9]+ better, [0-9]+ worse, [0-9]+ the same( |$)'
    tui_find_up '^  no repeats: changes under 1% count as the same' '^  flags: max-num-seqs 256 -> 4( |$)'
    tui_send '/set max-num-seqs 256' Enter
    tui_wait 'max-num-seqs = 256'
    bench 3
    tui_send '/clear' Enter
    tui_send '/compare 3 2' Enter
    tui_wait '^  #2: [0-9]+ better, [0-9]+ worse, [0-9]+ the same( |$)'
    tui_find_up '^  noise: half the spread of 2 runs like the base, 1 like #2( |$)' \
        "^  output tok/s +[0-9.]+ +[0-9.]+ +[+-][0-9.]+% +(±|\+-)[0-9.]+% +(= same( \(noise\))?|(▲|▼|\+|-) (better|worse))( |$)" \
        '^  TPOT mean ms +[0-9.]+ +[0-9.]+ ' '^  metric +#3 +#2 +change +noise +verdict( |$)' \
        '^  flags: max-num-seqs 256 -> 4( |$)' '^/compare: base #3 \('
    # every row of the comparison fits 80 columns: none wrapped onto a second line (the rows of
    # the output are all in view from 120x40; at 200x50 the requests table runs beside the chat
    # pane, from column 150)
    local screen
    screen=$(tui_screen)
    if [ "$TUI_W" -ge 120 ]; then
        LC_ALL=C.UTF-8 awk '/^\/compare: base/ { on = 1 } /^>/ { on = 0 }
            on { s = substr($0, 1, 150); sub(/ +$/, "", s); if (length(s) > 80) bad = 1 }
            END { exit bad }' <<<"$screen" || tui_fail "a line over 80 columns"
    fi
    # colours: better rows green, worse ones red; none with NO_COLOR (tui_sizes' $size says)
    local colored
    colored=$(tmux_ capture-pane -p -e -t t)
    if [ "${size%-plain}" != "$size" ]; then
        grep -q $'\e\\[[0-9;]*3[0-7]m' <<<"$colored" && tui_fail "a colour with NO_COLOR"
    else # the foreground colour in force at each verdict (tmux repeats no SGR a row inherits)
        python3 - "$colored" <<'PY' || tui_fail "a verdict not in its colour"
import re, sys
fg, bad = None, []
for m in re.finditer(r"\x1b\[([0-9;]*)m|(better|worse)( |$)", sys.argv[1], re.M):
    if m.group(2) is None:
        for p in (m.group(1) or "0").split(";"):
            if p in ("", "0", "39"):
                fg = None
            elif p.isdigit() and 30 <= int(p) <= 37:
                fg = int(p)
    elif fg != (32 if m.group(2) == "better" else 31):
        bad.append((m.group(2), fg))
sys.exit(1 if bad else 0)
PY
    fi
    # two repeats: no flag changed, the noise shown
    tui_send '/clear' Enter
    tui_send '/compare 1 3' Enter
    tui_wait '^  #3: [0-9]+ better, [0-9]+ worse, [0-9]+ the same( |$)'
    tui_find_up '^  noise: half the spread of 2 runs like the base, 2 like #3( |$)' '^  flags: the same as the base.s( |$)'
    rm -rf "$TUI_DIR/results" # the next size's console starts with none
}

tui_sizes run
echo PASS
