#!/usr/bin/env bash
# Multi-line input: a bracketed paste of three lines is one message (shown in the REPL line with
# a mark per line break, sent whole, one request); Alt-Enter puts a line break in a message;
# a message typed while a reply streams stays in the line instead of being lost, and goes out
# with Enter once the reply has ended; on exit the terminal's paste mode is restored.
source "$(dirname "$0")/lib.sh"

repl_line() { tui_screen | tail -2 | head -1; }
# repl_wait REGEX: polls until the REPL line (the row above the status line) matches.
repl_wait() {
    local end=$((SECONDS + TUI_TIMEOUT))
    while [ $SECONDS -lt $end ]; do
        repl_line | grep -Eq -- "$1" && return 0
        sleep 0.1
    done
    tui_fail "the REPL line is \"$(repl_line)\", expected /$1/"
}

tui_start -- --max-num-batched-tokens 256
tui_wait '^ready \|'
tmux_ set-buffer -b paste $'first line\nsecond line\nthird line'
tmux_ paste-buffer -p -b paste -t t
tui_wait '^> first line⏎second line⏎third line'
tui_keys Enter
tui_wait '^> first line$'
tui_wait '^second line$'
tui_wait '^third line$'
tui_wait '\[(stop|length): [0-9]+ prompt'
tui_wait '1 submitted, 1 done'
repl_wait '^> *$'

tui_send 'one'
tui_keys M-Enter
tui_send 'two'
tui_wait '^> one⏎two'
tui_keys Enter
tui_wait '^> one$'
tui_wait '^two$'
tui_wait '2 submitted, 2 done'

# a reply that is surely still running: queued behind a benchmark (see test_console_chat.sh)
tui_send '/bench short --num-prompts 400 --input-len 1000 --output-len 4' Enter
tui_wait 'engine: [0-9]+ running, [1-9][0-9]* waiting' 60
tui_send 'Tell me a long story' Enter
tui_wait 'chat-[0-9]+ +[0-9]+ +0 .*prefill'
tui_send 'the next question' Enter
repl_wait '^\.\.\. the next question$'
tui_wait 'your message stays in the line'
tui_keys Escape
tui_wait '\[abort: '
repl_wait '^> the next question$'
tui_keys Enter
repl_wait '^(>|\.\.\.) *$'
tui_wait '^> the next question$'
tui_send '/bench stop' Enter
tui_wait '^ready \| F1Help' 60
tui_quit
# the terminal's bracketed paste mode is off again: a paste into the shell's terminal (the tty
# echoes it) carries no markers
tmux_ set-buffer -b paste 'after-exit'
tmux_ paste-buffer -p -b paste -t t
tui_wait 'after-exit'
if tui_screen | grep -q '200~'; then tui_fail "bracketed paste is still on after the console exited"; fi
echo PASS
