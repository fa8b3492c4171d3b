#!/usr/bin/env bash
# Benchmarks: /bench short --num-prompts 20 shows the result table and a saved JSON; a second run
# after /set; /results lists both with their flag sets; /compare shows the comparison table; a
# long run's progress bar, and /bench stop.
source "$(dirname "$0")/lib.sh"

opts=(--num-prompts 20 --input-len 64 --output-len 16)
tui_start
tui_wait '^ready \|'
# /bench takes `tachyon bench`'s own options, with its messages; the target is the console's
tui_send '/bench short --num-prompts x' Enter
tui_wait 'num-prompts x: expected a whole number'
tui_send '/bench short --base-url http://example.invalid' Enter
tui_wait "the target, tokenizer and output options are the console's own here"
# (20 short requests may finish between two looks at the screen: the progress bar is looked for
# in the long run below)
tui_send "/bench short ${opts[*]}" Enter
tui_wait 'run #1: ' 120
tui_wait 'Mean TTFT \(ms\): +[0-9.]+'
tui_wait 'run #1: 20 ok, 0 failed, flags: defaults, saved to'
ls "$TUI_DIR"/results/*short*.json >/dev/null 2>&1 || tui_fail "no saved result JSON"

tui_send '/set max-num-seqs 4' Enter
tui_wait '\*max-num-seqs'
tui_send "/bench short ${opts[*]}" Enter
tui_wait 'run #2: 20 ok, 0 failed, flags: max-num-seqs=4' 120
[ "$(ls "$TUI_DIR"/results/*.json | wc -l)" -eq 2 ] || tui_fail "expected two saved results"

tui_send '/results' Enter
tui_wait '^ +1 .*short.*defaults'
tui_wait '^ +2 .*short.*max-num-seqs=4'

tui_send '/compare' Enter
tui_wait 'max-num-seqs'
tui_wait '[+-][0-9.]+ ?%'

# the pane scrolls back through the reports and returns
tui_keys PPage
tui_wait 'Chat and output \(scrolled up: PgDn goes back\)'
tui_keys PPage PPage
tui_keys NPage NPage NPage NPage
tui_wait_gone 'scrolled up'

# a long run shows its progress bar; /bench stop ends it early and keeps the partial result (once a request has succeeded: a run
# without one is no result)
tui_send "/bench short --num-prompts 400 --input-len 64 --output-len 64" Enter
tui_wait 'bench \[[#.]+\] [1-9][0-9]*/400' 60
tui_send '/bench stop' Enter
tui_wait 'run #3 \(stopped: partial\)' 60

tui_quit
echo PASS
