#!/usr/bin/env bash
# Renders the README's screenshots: the console on the tiny fixture with the tests' fake NVML
# (two made-up GPUs) in a tmux pane, during a /bench run, captured with colours
# (capture-pane -e: dashboard-WxH.ansi, `cat` shows it in a terminal) and as text (.txt); then
# the requests table focused (F6, sorted by TTFT): requests-WxH.
#
#     cmake --build build/release && tui/screenshots/capture.sh [build/release]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
out=$root/tui/screenshots
work=$(mktemp -d)
sock="shots-$$"
trap 'tmux -L "$sock" kill-server >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
tmux_() { tmux -L "$sock" -f /dev/null "$@"; }
for size in 120x40 200x50; do
    tmux_ kill-server >/dev/null 2>&1 || true
    tmux_ new-session -d -s s -x "${size%x*}" -y "${size#*x}" \
        env LANG=C.UTF-8 TERM=screen-256color XDG_STATE_HOME="$work/state" \
        TACHYON_NVML_LIB="$build/tests/libfake_nvml.so" FAKE_NVML_GPUS=2 \
        "$build/tachyon" console --model "$root/tests/fixtures/tiny-qwen3" --port 0 \
        --results-dir "$work/results"
    until tmux_ capture-pane -p -t s | grep -q '^ready |'; do sleep 0.2; done
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
echo "written: $out/{dashboard,requests}-{120x40,200x50}.{ansi,txt}"
