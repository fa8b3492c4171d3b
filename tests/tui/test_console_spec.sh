#!/usr/bin/env bash
# Speculative decoding's chart at 120x40 and 200x50: with n-gram drafts configured
# (--speculative-config, as vLLM takes it) a seventh chart, "spec", shows the draft tokens
# proposed and accepted per verify step (its title in full or short: "accepted 1.7  drafted 3",
# "acc 1.7 dft 3"); a client's repetitive greedy completion moves both
# numbers (drafts found and accepted); turned off live (/set num-speculative-tokens 0), the chart
# stays with its history. Without speculation there is no such chart.
source "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }

chart='spec +(last [0-9]+ (s|min) +)?(accepted|acc) [-0-9.]+ +(drafted|dft)' # its title
url() { tui_screen | head -1 | grep -Eo 'http://127\.0\.0\.1:[0-9]+'; }
ids="5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10"
spec='{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 4}'

for size in 120x40 200x50; do
    TUI_W=${size%x*} TUI_H=${size#*x}
    tui_start -- --speculative-config "$spec"
    tui_wait '^ready \|'
    tui_wait "$chart"
    out=$(curl -s -m 120 "$(url)/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\": [$ids], \"max_tokens\": 40, \"temperature\": 0, \"ignore_eos\": true}")
    grep -q '"completion_tokens":40' <<<"$out" || tui_fail "completion: $out"
    # the 5 s window's means: some drafted (up to 3 a step), some accepted
    tui_wait 'spec +(last [0-9]+ (s|min) +)?(accepted|acc) (0\.[0-9]*[1-9]|[1-3](\.[0-9]+)?) +(drafted|dft) [1-3]'
    tui_send '/set num-speculative-tokens 0' Enter
    tui_wait 'num-speculative-tokens'
    sleep 1
    tui_screen | grep -Eq "$chart" || tui_fail "the spec chart went away once speculation had run"
    tui_quit
    tmux_ kill-server
done

# no speculation configured: six charts, no spec chart
TUI_W=120 TUI_H=40
tui_start --
tui_wait '^ready \|'
tui_wait 'TPOT'
tui_screen | grep -Eq "$chart" && tui_fail "a spec chart without speculative decoding"
tui_quit
echo PASS
