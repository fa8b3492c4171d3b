#!/usr/bin/env bash
# The live expert-load panel (/experts) on the tiny Qwen3-MoE fixture (MoE layers 0 and 2 of 8
# experts, top-2) at 80x24 (colours) and 200x50 in NO_COLOR/C (test_console_draw's unit case
# draws the panel at other sizes): it takes the chat pane's place,
# empty before any token; a client's completion routes 2 x (prompt + generated - 1) tokens through
# each MoE layer, which the rows show once the console's next sample has them, and a second
# completion changes the panel again (it is redrawn from each sample, not printed once): the
# count since start grows by the second's tokens. The cells are coloured where colours are on.
# /experts again and Esc give the chat pane back; /experts print leaves a copy in the pane. A
# dummy model of Qwen3-235B's 94 MoE layers x 128 experts at 80x24 shows the layers that fit and
# pages through the rest. Two data-parallel replicas' loads are summed. On the dense fixture the
# panel says there are no experts.
source "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }

url() { tui_screen | head -1 | grep -Eo 'http://127\.0\.0\.1:[0-9]+'; }
# the panel's rows: from its title to the REPL line, exclusive
panel() { tui_screen | sed -n '/Expert load/,$p' | head -n -2; }

# complete IDS MAX_TOKENS [TOP_K]: a greedy completion of the token ids; prints the tokens it
# routed through each MoE layer (each token processed goes to TOP_K experts, 2 by default; the
# last sampled one is never processed)
complete() {
    local out p g
    out=$(curl -s -m 120 "$(url)/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\": [$1], \"max_tokens\": $2, \"temperature\": 0, \"ignore_eos\": true}")
    p=$(grep -Eo '"prompt_tokens": ?[0-9]+' <<<"$out" | grep -Eo '[0-9]+$')
    g=$(grep -Eo '"completion_tokens": ?[0-9]+' <<<"$out" | grep -Eo '[0-9]+$')
    [ "$g" = "$2" ] || tui_fail "completion: $out"
    echo $((${3:-2} * (p + g - 1)))
}

check_moe() {
    tui_wait '^ready \|'
    tui_send '/experts' Enter
    tui_wait 'Expert load, live: 2 MoE layers'
    tui_wait 'no tokens routed yet: 2 MoE layers x 8 experts'
    tui_wait '^L0 +\| +\| x 0\.00 0( |$)'
    tui_wait '^L2 +\| +\| x 0\.00 0( |$)'
    tui_screen | grep -q 'Chat and output' && tui_fail "the chat pane beside the panel"
    local n1 n2
    n1=$(complete "5, 6, 7, 8, 9, 10" 10)
    [ "$n1" -gt 0 ] || tui_fail "nothing routed: $n1"
    # the window's counts, or (idle for the whole window on a slow machine) those since start:
    # either way the one request's tokens
    tui_wait "^L0 +\|[^|]+\| x *[0-9.]+ $n1( |\$)"
    tui_wait "^L2 +\|[^|]+\| x *[0-9.]+ $n1( |\$)"
    tui_wait "(^| )$((2 * n1)) routed since start"
    tui_wait 'busiest L[02] e[0-7] [0-9]+ tok, [0-9]+% of its layer'
    tui_wait 'worst imbalance L[02] x[0-9]+\.[0-9]+'
    local before after
    before=$(panel)
    n2=$(complete "11, 12, 13, 14, 15" 7)
    tui_wait "(^| )$((2 * (n1 + n2))) routed since start"
    after=$(panel)
    [ "$before" != "$after" ] || tui_fail "the panel did not change with the second request"
    if [ -z "${plain:-}" ]; then # colours: the rows' cells carry SGR colour codes
        tmux_ capture-pane -e -p -t t | grep -aE 'L2 +.*\| x ' | grep -q $'\e\\[[0-9;]*3[1-4]m' ||
            tui_fail "no colour in the heat-map rows"
    fi
    # off again: the chat pane back
    tui_send '/experts' Enter
    tui_wait 'Chat and output'
    tui_wait_gone 'Expert load'
    # on, then Esc
    tui_send '/experts' Enter
    tui_wait 'Expert load, live'
    tui_keys Escape
    tui_wait 'Chat and output'
    tui_wait_gone 'Expert load'
    # print: a copy in the pane (the panel stays closed)
    tui_send '/experts print' Enter
    tui_wait "(^| )$((2 * (n1 + n2))) routed since start"
    tui_wait '^L2 +\|[^|]+\| x'
    tui_screen | grep -q 'Expert load' && tui_fail "print opened the panel"
    return 0
}

for size in 80x24 200x50-plain; do
    TUI_W=${size%%x*} TUI_H=${size#*x} TUI_H=${TUI_H%-plain}
    plain=
    [ "${size%-plain}" != "$size" ] && plain=1
    args=(console --model "$TACHYON_FIXTURES/tiny-qwen3-moe" --port 0 --threads 2
        --results-dir "$TUI_DIR/results")
    if [ -n "$plain" ]; then tui_run NO_COLOR=1 LANG=C LC_ALL=C -- "${args[@]}"; else tui_run -- "${args[@]}"; fi
    check_moe
    if [ -n "$plain" ] && tui_screen | LC_ALL=C grep -q '[^ -~]'; then
        tui_fail "non-ASCII on the screen in the C locale"
    fi
    tui_quit
    tmux_ kill-server
done

# two data-parallel replicas: the panel shows their sum (engine_stats merges them), whichever
# replica each completion went to
TUI_W=120 TUI_H=40
tui_run -- console --model "$TACHYON_FIXTURES/tiny-qwen3-moe" --data-parallel-size 2 --port 0 \
    --threads 2 --results-dir "$TUI_DIR/results"
tui_wait '^ready \|'
tui_send '/experts' Enter
tui_wait 'no tokens routed yet: 2 MoE layers x 8 experts'
complete "21, 22, 23, 24, 25" 9 >"$TUI_DIR/n1" &
complete "31, 32, 33" 5 >"$TUI_DIR/n2" &
wait
n1=$(cat "$TUI_DIR/n1") n2=$(cat "$TUI_DIR/n2")
[ "$n1" -gt 0 ] && [ "$n2" -gt 0 ] || tui_fail "completions: $n1 $n2"
tui_wait "(^| )$((2 * (n1 + n2))) routed since start"
tui_wait "^L2 +\|[^|]+\| x *[0-9.]+ $((n1 + n2))( |\$)"
tui_quit
tmux_ kill-server

# Qwen3-235B-A22B's layout (94 MoE layers x 128 experts, top-8) at toy widths with dummy
# weights, at 80x24: the layers that fit and how many more; PgDn pages by the layers shown, to
# the last one; PgUp back
mkdir "$TUI_DIR/moe94"
sed -e 's/"num_hidden_layers": [0-9]*/"num_hidden_layers": 94/' \
    -e 's/"num_local_experts": [0-9]*/"num_local_experts": 128/' \
    -e 's/"num_experts_per_tok": [0-9]*/"num_experts_per_tok": 8/' \
    -e 's/"hidden_size": [0-9]*/"hidden_size": 64/' -e 's/"head_dim": [0-9]*/"head_dim": 32/' \
    -e 's/"moe_intermediate_size": [0-9]*/"moe_intermediate_size": 16/' \
    "$TACHYON_FIXTURES/tiny-qwen3-moe/config.json" | tr -d '\n' |
    sed -e 's/"mlp_only_layers": *\[[^]]*\]/"mlp_only_layers": []/' >"$TUI_DIR/moe94/config.json"
# the title's layers shown: "A B"
range() { tui_screen | grep -Eo 'layers [0-9]+-[0-9]+ of 94' | grep -Eo '[0-9]+-[0-9]+' | tr - ' '; }
TUI_W=80 TUI_H=24
tui_run -- console --model "$TUI_DIR/moe94" --load-format dummy --port 0 --threads 2 \
    --results-dir "$TUI_DIR/results"
tui_wait '^ready \|'
tui_send '/experts' Enter
tui_wait 'Expert load, live: layers 1-[0-9]+ of 94 \(PgUp/PgDn'
tui_wait '94 MoE layers x 128 experts \(3 a cell\)'
n=$(complete "5, 6, 7, 8" 6 8)
tui_wait "^L0 +\|[^|]+\| x *[0-9.]+ $n( |\$)"
read -r a b <<<"$(range)"
[ "$a" = 1 ] && [ "$b" -ge 2 ] || tui_fail "layers shown: $a-$b"
tui_wait "^-- $((94 - b)) more MoE layers below \(PgDn\) --"
tui_keys NPage
tui_wait "layers $((b + 1))-$((2 * b)) of 94"
tui_wait "^L$b +\|[^|]+\| x *[0-9.]+ $n( |\$)"
tui_wait "more MoE layers below \(PgDn\), more above \(PgUp\) --"
for _ in $(seq 60); do tui_keys NPage; done
tui_wait "layers $((94 - b + 1))-94 of 94"
tui_wait "^L93 +\|[^|]+\| x *[0-9.]+ $n( |\$)"
tui_wait "^-- $((94 - b)) more MoE layers above \(PgUp\) --"
tui_keys PPage
tui_wait "layers $((94 - 2 * b + 1))-$((94 - b)) of 94"
tui_quit
tmux_ kill-server

# a dense model: the panel says plainly there are none
TUI_W=120 TUI_H=40
tui_start --
tui_wait '^ready \|'
tui_send '/experts' Enter
tui_wait 'Expert load \(/experts or Esc: back to the chat\)'
tui_wait 'no expert load: the model has no MoE layers'
tui_send '/experts off' Enter
tui_wait 'Chat and output'
tui_quit
echo PASS
