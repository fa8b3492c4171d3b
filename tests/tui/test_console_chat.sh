#!/usr/bin/env bash
# Chat: a message streams a reply into the pane (text, then the finish line with token counts);
# the conversation goes on (a second turn); /new starts over; /think off is acknowledged; the
# request shows in the engine's counters; the requests table lists the benchmark's requests;
# Esc stops a reply (here one queued behind a benchmark).
source "$(dirname "$0")/lib.sh"

# small steps, so that a cancel (which lands between steps) is quick even in slow builds
tui_start -- --max-num-batched-tokens 256
tui_wait '^ready \|'
tui_send 'Hello there' Enter
tui_wait '^> Hello there'
tui_wait '\[(stop|length): [0-9]+ prompt \+ [0-9]+ generated tokens'
# the reply's text sits between the user's line and the finish line
reply=$(tui_screen | sed -n '/^> Hello there/,/^\[\(stop\|length\):/p' | sed '1d;$d' | tr -d ' \n')
[ -n "$reply" ] || tui_fail "no reply text between the message and the finish line"
tui_wait '1 submitted, 1 done'

# second turn: the prompt holds the whole conversation, so it is longer than the first
first=$(tui_screen | grep -Eo '\[(stop|length): [0-9]+ prompt' | head -1 | grep -Eo '[0-9]+')
tui_send 'And then?' Enter
tui_wait '2 submitted, 2 done'
second=$(tui_screen | grep -Eo '\[(stop|length): [0-9]+ prompt' | tail -1 | grep -Eo '[0-9]+')
[ "$second" -gt "$first" ] || tui_fail "second turn's prompt ($second) not longer than the first ($first)"

tui_keys F2
tui_wait '^─ Chat and output \(reasoning hidden: F2\)'
tui_keys F2
tui_wait_gone 'reasoning hidden: F2'

tui_send '/new' Enter
tui_wait '\(new conversation\)'
tui_send '/think off' Enter
tui_wait '\(thinking off'
tui_send 'Hi' Enter
tui_wait '3 submitted, 3 done'
third=$(tui_screen | grep -Eo '\[(stop|length): [0-9]+ prompt' | tail -1 | grep -Eo '[0-9]+')
[ "$third" -lt "$second" ] || tui_fail "/new did not start over ($third prompt tokens)"

# Esc stops a reply. To have one that is surely still running when Esc arrives, a benchmark
# first fills the engine's queue (first come, first served), so the chat request waits behind it;
# Esc must end it with reason abort, and the benchmark goes on until /bench stop.
tui_send '/bench short --num-prompts 400 --input-len 1000 --output-len 4' Enter
tui_wait 'engine: [0-9]+ running, [1-9][0-9]* waiting' 60
# the requests table lists the engine's live requests: the benchmark's, by the end of their API
# ids (chatcmpl-<hex>), with prompt and generated tokens, seconds and state
tui_wait '~[0-9a-f]+ +[0-9]+ +[0-9]+ +[0-9.]+ (prefill|decode|waiting)' 60
tui_send 'Tell me a long story' Enter
tui_wait 'chat-[0-9]+ +[0-9]+ +0 .*prefill'
tui_keys Escape
tui_wait '\[abort: [0-9]+ prompt \+ 0 generated tokens, [0-9.]+ s, stopped\]'
tui_wait '^ready \| bench \[[#.]+\] [1-9][0-9]*/400' 60 # a partial run is kept once one succeeded
tui_send '/bench stop' Enter
tui_wait 'run #1 \(stopped: partial\)' 60
tui_quit
echo PASS
