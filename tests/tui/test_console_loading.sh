#!/usr/bin/env bash
# Start-up shows the model loading before the dashboard, at 80x24, 120x40 and 200x50 (and
# NO_COLOR in the C locale): a loading screen names the model, then its shape and weights as
# engine_open reports them (here a made-up qwen3-0.6b, whose random weights take seconds to
# make on the CPU: long enough to see), with the log under it; then the dashboard, whose pane and
# log keep a summary: the layers, the time, shards, the weights' bytes and the KV cache's size.
# A model that does not open leaves the screen restored and says why on stderr.
source "$(dirname "$0")/lib.sh"

run() {
    tui_wait '^ Tachyon: loading qwen3-0\.6b' 60
    tui_wait '^   model +(reading its config and weights. headers\.\.\.|qwen3, 28 layers)'
    tui_wait '^   elapsed +[0-9]+\.[0-9] s'
    local s
    s=$(tui_screen) # one frame: the loading screen, no dashboard yet
    if grep -q '^ Tachyon: loading' <<<"$s" && grep -q 'F1Help' <<<"$s"; then
        tui_fail "the dashboard under the loading screen"
    fi
    tui_wait '^ready \|' 600
    tui_wait '^loaded qwen3 \(28 layers\) in [0-9.]+ s: 0 shards, 1\.11 GiB of weights; KV pool'
    tui_wait '[0-9]+ blocks x 16 tokens = [0-9]+ tokens' # the line wraps where narrow
    tui_keys F3
    tui_wait '^\[00:00:[0-9]{2}\] loaded qwen3 \(28 layers\)|^\[00:[0-9]{2}:[0-9]{2}\] loaded qwen3'
    tui_keys F3
}
TUI_EXTRA="--model qwen3-0.6b --load-format dummy --max-model-len 2048" tui_sizes run

# a model that does not open: the terminal restored, the reason on stderr, exit status 1
TUI_W=80 TUI_H=24
tui_start -- --model /nonexistent/model
tui_wait 'console exited: rc=1' 60
grep -q 'tachyon: .*nonexistent' "$TUI_DIR/stderr" || tui_fail "no reason on stderr: $(cat "$TUI_DIR/stderr")"
cmp -s "$TUI_DIR/stty.before" "$TUI_DIR/stty.after" || tui_fail "terminal modes not restored"
echo PASS
