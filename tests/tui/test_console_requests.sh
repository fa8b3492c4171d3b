#!/usr/bin/env bash
# The requests table at 80x24, 120x40 and 200x50 (and NO_COLOR in the C locale): F6 focuses it
# (over the charts and the chat pane, at 80x24 too where it is hidden otherwise); it lists
# another client's requests with their choices, sorts (/requests sort age asc: the newest first)
# and filters (waiting, running, errors); the selected request is cancelled with c and y through
# the engine's cancel path, and its client sees finish_reason "abort" (every choice of a request
# with n = 16 still in flight), while the request left alone is not touched. With --max-num-seqs 1 one choice runs
# at a time, so the requests stay in flight for as long as the test needs (16 x 3000 tokens).
source "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }

model="$TACHYON_FIXTURES/tiny-qwen3"
url() { tui_screen | head -1 | grep -Eo 'http://127\.0\.0\.1:[0-9]+'; }
complete() { # OUT N MAX_TOKENS PROMPT: a completion request in the background
    curl -s -m 600 "$(url)/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"model\": \"$model\", \"prompt\": \"$4\", \"n\": $2, \"max_tokens\": $3, \"ignore_eos\": true}" \
        >"$TUI_DIR/$1" &
}
finished() { # OUT REASON COUNT: the response came, with COUNT choices ending so
    local end=$((SECONDS + 60))
    until [ "$(grep -o "\"finish_reason\":\"$2\"" "$TUI_DIR/$1" 2>/dev/null | wc -l)" = "$3" ]; do
        [ $SECONDS -lt $end ] || tui_fail "$1: expected $3 x finish_reason $2, got: $(head -c 300 "$TUI_DIR/$1")"
        sleep 0.2
    done
}

run() {
    tui_wait '^ready \|'
    rm -f "$TUI_DIR"/long.out "$TUI_DIR"/short.out "$TUI_DIR"/other.out
    complete long.out 16 3000 Hello # runs a choice at a time: a long while in flight
    tui_keys F6
    tui_wait 'Requests \(live, by age (v|▼)\) s sort, r reverse, f filter, c cancel, Esc back'
    tui_wait 'F6Back'
    tui_wait 'engine: 1 running, [1-9][0-9]* waiting' # the choices queue behind the first
    tui_keys Escape
    tui_wait_gone 'F6Back'
    # two more, queued behind every choice of the long one (prompts of 10 tokens or more: they
    # tell them apart from the long one's choices of 3 in the table)
    complete short.out 1 5 "one two three four five six seven eight nine ten"
    complete other.out 1 5 "ten nine eight seven six five four three two one"
    # the newest first, waiting ones only: the one to cancel at the top (a command gives the
    # keys back to the line: F6 again)
    tui_send '/requests sort age asc' Enter
    tui_wait 'requests table: live, by age \(smallest first\)'
    tui_send '/requests filter waiting' Enter
    tui_wait 'requests table: waiting, by age \(smallest first\)'
    tui_keys F6
    tui_wait 'Requests \(waiting, by age (\^|▲)\)'
    tui_wait_count '^ *(~|cmpl-)[0-9a-f]+ +[1-9][0-9] +0 ' 2
    tui_keys Home c
    tui_wait 'y cancels cmpl-'
    tui_keys y
    tui_wait 'cancelled cmpl-[0-9a-f]+$'
    local sel
    sel=$(tui_screen | tail -1 | grep -Eo 'cancelled cmpl-[0-9a-f]+$' | sed 's/cancelled //')
    # the newest of the two (they raced to the server): its client saw the abort
    local gone= kept end=$((SECONDS + 60))
    until [ -n "$gone" ]; do
        for f in short.out other.out; do
            grep -q '"finish_reason":"abort"' "$TUI_DIR/$f" 2>/dev/null && gone=$f
        done
        [ $SECONDS -lt $end ] || tui_fail "no client saw the abort of $sel"
        sleep 0.2
    done
    [ "$gone" = short.out ] && kept=other.out || kept=short.out
    grep -q "\"id\":\"$sel\"" "$TUI_DIR/$gone" || tui_fail "cancelled $sel: not in $gone"
    # a running request: every choice ends with abort, and its client sees it
    tui_keys f # waiting -> finished
    tui_wait 'Requests \(finished, by age'
    tui_keys f
    tui_wait 'Requests \(errors, by age'
    tui_wait ' abort *$'
    tui_keys f f f
    tui_wait 'Requests \(running, by age'
    tui_wait ' decode *$'
    tui_keys Home c y
    tui_wait 'cancelled cmpl-'
    # every choice still in flight ends with abort; on a slow machine (ASan under load) the
    # first choices may have run to their length before the cancel: all 16 end one way or the
    # other, and the cancel caught at least the one running
    local end=$((SECONDS + 60)) aborts lengths
    while :; do
        aborts=$({ grep -o '"finish_reason":"abort"' "$TUI_DIR/long.out" 2>/dev/null || true; } | wc -l)
        lengths=$({ grep -o '"finish_reason":"length"' "$TUI_DIR/long.out" 2>/dev/null || true; } | wc -l)
        [ $((aborts + lengths)) -eq 16 ] && break
        [ $SECONDS -lt $end ] || tui_fail "long.out: $aborts aborts + $lengths lengths of 16"
        sleep 0.2
    done
    [ "$aborts" -ge 1 ] || tui_fail "long.out: no choice aborted ($lengths ran to their length)"
    finished "$kept" length 1 # left alone: it runs once the long one is gone
    tui_keys Escape
    tui_wait_gone 'F6Back'
    tui_send '/requests filter' Enter # back to the live ones
    tui_wait 'requests table: live, by age'
}

# paced (the engine pauses 20 ms after each step, scripted.h): the long request stays in flight
# at little CPU, at any build's speed
TUI_ENV=TACHYON_TEST_STEP_DELAY_MS=20 TUI_EXTRA="--max-num-seqs 1" tui_sizes run
echo PASS
