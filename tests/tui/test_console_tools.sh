#!/usr/bin/env bash
# Tool calls in the console's chat, on the embedded model. The tiny model cannot be taught to
# call tools, so its replies are scripted (TACHYON_SCRIPTED_OUTPUTS: the engine overrides the
# sampled tokens with a reply chosen by the prompt's text); everything else is real: /tools loads
# an OpenAI tools array, the chat template renders it into the prompt (only then does a rule
# that matches the tool's description fire), and the front door's hermes parser takes the calls
# out of the reply. A call shows apart, "⚙ name(arguments)" in its own colour; its reasoning stays
# reasoning (F2 hides it); two calls show as two; a malformed call stays text; /tools off and the
# call is text again; a bad file says why. In the C locale with NO_COLOR: "[tool] name(...)", bold
# and no colour.
source "$(dirname "$0")/lib.sh"

cat >"$TUI_DIR/tools.json" <<'EOF'
[{"type": "function", "function": {"name": "get_weather",
  "description": "The weather in a city (fixture tool).",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                 "days": {"type": "integer"}}, "required": ["city"]}}}]
EOF
cat >"$TUI_DIR/notools.json" <<'EOF'
{"tools": [{"type": "function"}]}
EOF
# "fixture tool" is in the prompt only when the template rendered the tools
python3 - "$TUI_DIR/script.json" <<'EOF'
import json, sys
think = "<think>\nThe user wants the weather.\n</think>\n\n"
call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s", "days": %d}}\n</tool_call>'
json.dump([  # the first rule whose text the prompt holds
    {"when": "no tools here", "reply": think + call % ("Oslo", 1)},
    {"when": "broken please", "reply": think + '<tool_call>\n{"name": "get_wea'},
    {"when": "Paris and Rome", "reply": think + call % ("Paris", 1) + "\n" + call % ("Rome", 3)},
    {"when": "fixture tool)", "reply": think + "Let me check.\n" + call % ("Paris", 2)},
], open(sys.argv[1], "w"))
EOF
script="TACHYON_SCRIPTED_OUTPUTS=$TUI_DIR/script.json"
call_re='⚙ get_weather\(\{"city": "Paris", "days": 2\}\)'
# SGR colour parameters (test_console_nocolor.sh), and bold
colour=$'\e\\[([0-9;]*;)?(3[0-8]|4[0-8]|9[0-7]|10[0-7])(;[0-9;]*)?m'
bold=$'\e\\[([0-9;]*;)?1(;[0-9;]*)?m'
line_with() { tmux_ capture-pane -p -e -t t | grep -F -- "$1" | tail -1; }
# the chat pane's lines after the last one that is TEXT
after() { tui_screen | sed -n '/^─ Chat and output/,$p' | tac | sed "/^$(sed 's/[]\/$*.^[]/\\&/g' <<<"$1")\$/q" | tac | tail -n +2; }

tui_start "$script" -- --model embedded
tui_wait '^ready \|'
tui_send '/tools' Enter
tui_wait 'no tools: /tools FILE'
tui_send "/tools $TUI_DIR/nothing.json" Enter
tui_wait 'nothing.json: cannot be read: No such file'
tui_send "/tools $TUI_DIR/notools.json" Enter
tui_wait 'notools.json: tools\[0\].function: Field required'
tui_send "/tools $TUI_DIR/tools.json" Enter
tui_wait 'tools from .*tools.json \(calls found as hermes'
tui_wait '^  get_weather\(city, days\)  The weather in a city \(fixture tool\)\.'

tui_send 'What is the weather in Paris?' Enter
tui_wait "$call_re"
tui_wait '\[tool_calls: [0-9]+ prompt \+ [0-9]+ generated tokens'
screen=$(tui_screen)
grep -q '^The user wants the weather\.' <<<"$screen" || tui_fail "the reasoning before the call is not shown"
grep -q '^Let me check\.' <<<"$screen" || tui_fail "the text before the call is not shown"
if grep -q 'tool_call>' <<<"$screen"; then tui_fail "the call's tags are shown as text"; fi
# the call in its own colour, unlike the reply's text
grep -Eq "$colour" <<<"$(line_with 'get_weather({')" || tui_fail "the call is not coloured"
if grep -Eq "$colour" <<<"$(line_with 'Let me check.')"; then tui_fail "the reply's text is coloured"; fi
# F2 hides the reasoning, not the call
tui_keys F2
tui_wait '^\(reasoning hidden: F2 shows it\)'
tui_wait_gone '^The user wants the weather\.'
tui_wait "$call_re"
tui_keys F2

# two calls in one reply: two lines, in order
tui_send '/new' Enter
tui_send 'And in Paris and Rome?' Enter
tui_wait '⚙ get_weather\(\{"city": "Rome", "days": 3\}\)'
calls=$(after '> And in Paris and Rome?' | grep '^⚙')
[ "$calls" = '⚙ get_weather({"city": "Paris", "days": 1})
⚙ get_weather({"city": "Rome", "days": 3})' ] || tui_fail "two calls shown as: $calls"
# a call cut short before its name is whole stays text (as the server's parser gives it back)
tui_send '/new' Enter
tui_send 'broken please' Enter
tui_wait '^\[stop: [0-9]+ prompt .*\]' # the scripted reply ends with the model's EOS
tui_wait '^<tool_call>'
if after '> broken please' | grep -q '^⚙'; then tui_fail "a malformed call is shown as a call"; fi

# without tools the same call is the reply's text
tui_send '/tools off' Enter
tui_wait '\(no tools: the chat goes on without them\)'
tui_send '/new' Enter
tui_send 'no tools here' Enter
tui_wait '"city": "Oslo"'
tui_wait '^\[stop: [0-9]+ prompt'
after '> no tools here' | grep -q '^<tool_call>' || tui_fail "without tools the call is not text"
if after '> no tools here' | grep -q '^⚙'; then tui_fail "a call is parsed without tools"; fi
tui_quit
tmux_ kill-server

# ASCII and no colour: the mark is "[tool]", the line bold
tui_start "$script" LANG=C LC_ALL=C NO_COLOR=1 -- --model embedded
tui_wait '^ready \|'
tui_send "/tools $TUI_DIR/tools.json" Enter
tui_wait '^  get_weather\(city, days\)'
tui_send 'What is the weather in Paris?' Enter
tui_wait '^\[tool\] get_weather\(\{"city": "Paris", "days": 2\}\)'
tui_wait '\[tool_calls: '
if tui_screen | LC_ALL=C grep -q $'[\x80-\xff]'; then tui_fail "non-ASCII bytes on screen in the C locale"; fi
line=$(line_with '[tool] get_weather(')
grep -Eq "$bold" <<<"$line" || tui_fail "the call is not bold without colours: $line"
if tmux_ capture-pane -p -e -t t | grep -Eq "$colour"; then tui_fail "NO_COLOR: colour on screen"; fi
tui_quit
echo PASS
