#!/usr/bin/env bash
# Results outlive the console: a run is saved as JSON in --results-dir; a run in which no
# request succeeded is not kept; a restart (here with another flag, as a reload flag would need)
# loads the saved runs, /results lists them, numbering goes on, and /compare with no arguments
# compares the last two complete runs of the profile across the restart; /compare takes a file.
source "$(dirname "$0")/lib.sh"

opts=(--num-prompts 10 --input-len 32 --output-len 8)
tui_start
tui_wait '^ready \|'
tui_send "/bench short ${opts[*]}" Enter
tui_wait 'run #1: 10 ok, 0 failed, flags: defaults, saved to' 120
# prompts longer than the model's context: every request fails, the run is no result
tui_send '/bench short --num-prompts 3 --input-len 5000 --output-len 4' Enter
tui_wait 'not kept as a result' 120
[ "$(ls "$TUI_DIR"/results/*.json | wc -l)" -eq 1 ] || tui_fail "expected one saved result"
tui_send '/compare' Enter
tui_wait "run #1 \(short\) is the only one"
tui_quit
tmux_ kill-server

tui_start -- --max-num-seqs 4
tui_wait '^ready \|'
tui_wait '1 benchmark run loaded from .*results'
tui_send '/results' Enter
tui_wait '^ +1 +[0-9]{8}-[0-9]{6} +short +10 +10 .* defaults$'
tui_send "/bench short ${opts[*]}" Enter
tui_wait 'run #2: 10 ok, 0 failed, flags: max-num-seqs=4, saved to' 120
tui_send '/compare' Enter
tui_wait '^  TTFT mean ms +[0-9.]+ +[0-9.]+ +[+-][0-9.]+%'
tui_wait '^  #2: [0-9]+ better, [0-9]+ worse, [0-9]+ the same'
tui_wait '^  flags: max-num-seqs 256 -> 4$'
tui_keys NPage NPage
tui_send '/clear' Enter
first=$(ls "$TUI_DIR"/results/*.json | head -1)
tui_send "/compare $(basename "$first") 2" Enter
tui_wait "^/compare: base $(basename "$first")"
tui_wait '^  #2: [0-9]+ better, [0-9]+ worse, [0-9]+ the same'
tui_send "/compare 1 $TUI_DIR/results/none.json" Enter
tui_wait 'is neither a run number'
tui_quit
echo PASS
