#!/usr/bin/env bash
# A benchmark's progress as tqdm shows it, at 80x24, 120x40 and 200x50: done/total, percent,
# elapsed<ETA, req/s on the status line, with ok and failed so far where it is wide (a failure
# always) and in the requests table where it has room; "preparing N prompts" before the first
# request, which /bench stop ends at once; /bench stop keeps the partial run. NO_COLOR in the C locale: the same, ASCII.
source "$(dirname "$0")/lib.sh"

prog='bench \[[#.]+\] [0-9]+/400 [0-9]+% [0-9]{2}:[0-9]{2}<([0-9]{2}:[0-9]{2}|\?) [0-9.]+ req/s( ok [0-9]+ fail 0)? \|'
run() {
    tui_wait '^ready \|'
    # a long preparation shows as such, and /bench stop ends it at once
    tui_send '/bench short --num-prompts 4000 --input-len 2000 --output-len 4' Enter
    tui_wait '^ready \| bench \[\.+\] 0/4000 preparing 4000 prompts \|'
    tui_send '/bench stop' Enter
    tui_wait '^benchmark stopped \(stopped while preparing the prompts\)' 5
    tui_send '/bench short --num-prompts 400 --request-rate 20 --input-len 16 --output-len 4' Enter
    tui_wait "^ready \\| $prog"
    tui_wait "^ready \\| bench \\[[#.]+\\] [1-9][0-9]*/400 [0-9]+% 00:[0-9]{2}<00:[0-9]{2} [0-9.]+ req/s" 60
    # ok and failed so far on the status line where it is wide, in the requests table
    if [ "$TUI_W" -ge 160 ]; then tui_wait "^ready \\| bench .* req/s ok [1-9][0-9]* fail 0 \\|"; fi
    if [ "$TUI_W" -ge 200 ]; then # the requests table has room for the benchmark's lines
        tui_wait '[0-9]+% [0-9]{2}:[0-9]{2}<[0-9]{2}:[0-9]{2} [0-9.]+ req/s ok [0-9]+ fail 0 *$'
    fi
    tui_send '/bench stop' Enter
    tui_wait 'run #[0-9]+ \(stopped: partial\)' 60
    tui_wait_gone "$prog"
}

tui_sizes run
echo PASS
