#!/usr/bin/env bash
# Renders the README's screenshots: the console on the tiny fixture with the tests' fake NVML
# (two made-up GPUs) in a tmux pane, during a /bench run, captured with colours
# (capture-pane -e: dashboard-WxH.ansi, `cat` shows it in a terminal) and as text (.txt); then
# the requests table focused (F6, sorted by TTFT): requests-WxH; and the live expert-load panel
# (/experts) on the tiny Qwen3-MoE fixture during a /bench run: experts-120x40.
#
#     cmake --build build/release && tui/screenshots/capture.sh [build/release [SHOTS...]]
#
# SHOTS: dashboard (the dashboards and the requests tables) and experts; both by default.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
shots=${*:2}
shots=${shots:-dashboard experts}
out=$root/tui/screenshots
work=$(mktemp -d)
sock="shots-$$"
trap 'tmux -L "$sock" kill-server >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
tmux_() { tmux -L "$sock" -f /dev/null "$@"; }
start() { # start SIZE MODEL: the console in a pane of SIZE, once it is ready
    tmux_ kill-server >/dev/null 2>&1 || true
    tmux_ new-session -d -s s -x "${1%x*}" -y "${1#*x}" \
        env LANG=C.UTF-8 TERM=screen-256color XDG_STATE_HOME="$work/state" \
        TACHYON_NVML_LIB="$build/tests/libfake_nvml.so" FAKE_NVML_GPUS=2 \
        "$build/tachyon" console --model "$2" --port 0 --results-dir "$work/results"
    until tmux_ capture-pane -p -t s | grep -q '^ready |'; do sleep 0.2; done
}
for size in 120x40 200x50; do
    [[ " $shots " == *" dashboard "* ]] || break
    start "$size" "$root/tests/fixtures/tiny-qwen3"
    tmux_ send-keys -t s -l 'Hello' && tmux_ send-keys -t s Enter
    sleep 2
    tmux_ send-keys -t s -l '/bench short --num-prompts 2000 --request-rate 60' && tmux_ send-keys -t s Enter
    sleep 12
    tmux_ capture-pane -p -e -t s >"$out/dashboard-$size.ansi"
    tmux_ capture-pane -p -t s | sed 's/ *$//' >"$out/dashboard-$size.txt"
    tmux_ send-keys -t s -l '/requests sort ttft' && tmux_ send-keys -t s Enter
    tmux_ send-keys -t s F6
    sleep 1
    tmux_ send-keys -t s Home # the slowest first: the top of the table selected
    sleep 1
    tmux_ capture-pane -p -e -t s >"$out/requests-$size.ansi"
    tmux_ capture-pane -p -t s | sed 's/ *$//' >"$out/requests-$size.txt"
    tmux_ send-keys -t s Escape
    tmux_ send-keys -t s -l '/bench stop' && tmux_ send-keys -t s Enter
    sleep 2
    tmux_ send-keys -t s -l '/quit' && tmux_ send-keys -t s Enter
    sleep 1
done
if [[ " $shots " == *" experts "* ]]; then
    start 120x40 "$root/tests/fixtures/tiny-qwen3-moe"
    tmux_ send-keys -t s -l '/experts' && tmux_ send-keys -t s Enter
    tmux_ send-keys -t s -l '/bench short --num-prompts 2000 --request-rate 60' && tmux_ send-keys -t s Enter
    until tmux_ capture-pane -p -t s | grep -Eq '^last [0-9.]+ s: '; do sleep 0.2; done
    sleep 5 # a few seconds of the window
    tmux_ capture-pane -p -e -t s >"$out/experts-120x40.ansi"
    tmux_ capture-pane -p -t s | sed 's/ *$//' >"$out/experts-120x40.txt"
    tmux_ send-keys -t s -l '/bench stop' && tmux_ send-keys -t s Enter
    sleep 2
    tmux_ send-keys -t s -l '/quit' && tmux_ send-keys -t s Enter
    sleep 1
fi
echo "written to $out: $shots"
