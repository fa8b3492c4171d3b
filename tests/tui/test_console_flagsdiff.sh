#!/usr/bin/env bash
# Closing the tuning loop, at 80x24, 120x40, 200x50 and NO_COLOR/C: /flags diff prints the
# `tachyon serve` line that reproduces the model and the changed flags (a false boolean as
# --no-NAME), and that line starts a server whose flags are the console's; /get says what a flag
# takes (range, choices) and its help.
source "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }
model="$TACHYON_FIXTURES/tiny-qwen3"

check() {
    tui_wait '^ready \|'
    tui_send '/flags diff' Enter
    tui_wait "^tachyon serve --model $model( --threads 2)?\$"
    tui_send '/set max-num-seqs 4' Enter
    tui_wait '^set max-num-seqs = 4 '
    tui_send '/set enable-prefix-caching false' Enter
    tui_wait '^set enable-prefix-caching = false '
    tui_send '/set scheduling-policy priority' Enter
    tui_wait '^set scheduling-policy = priority '
    tui_send '/flags diff' Enter
    tui_wait '^\(3 flags changed from the defaults\)|^\(4 flags changed'
    # the line as printed, wrapped at any character where the pane is narrower (a space at a
    # row's end is lost to capture-pane: compared without spaces)
    line=$(tui_screen | awk '/^tachyon serve --model /{l=""; f=1} /^\([0-9]+ flags? changed/{f=0} f{l=l $0} END{print l}')
    for want in '--max-num-seqs4' '--no-enable-prefix-caching' '--scheduling-policypriority'; do
        grep -qF -- "$want" <<<"${line// /}" || tui_fail "/flags diff: no '$want' in: $line"
    done
    if [ "$TUI_W" = 200 ]; then # one row there: the chat pane's 150 columns hold it
        tui_screen | cut -c1-150 | grep -E '^tachyon serve --model .*--max-num-seqs 4' | tail -1 |
            sed 's/ *$//' >"$TUI_DIR/line"
    fi
    tui_send '/get max-num-seqs' Enter
    tui_wait 'an integer in \[1, [0-9]+\]'
    tui_send '/get scheduling-policy' Enter
    tui_wait 'one of fcfs, priority'
    tui_send '/get enable-prefix-caching' Enter
    tui_wait 'true or false'
}

tui_sizes check

# the printed line reproduces the flags: a server started with it reports them
line=$(cat "$TUI_DIR/line")
read -ra args <<<"${line#tachyon serve }"
"$TACHYON_BIN" serve "${args[@]}" --port 0 --stats-interval 0 2>"$TUI_DIR/serve.log" >/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null; tui_cleanup' EXIT
port=$("$(dirname "$0")/../../scripts/serve-port" "$TUI_DIR/serve.log" "$pid") ||
    tui_fail "the /flags diff line did not start a server: $(cat "$TUI_DIR/serve.log")"
flags=$(curl -sf "http://127.0.0.1:$port/admin/flags")
for want in '"name":"max-num-seqs","value":"4"' '"name":"enable-prefix-caching","value":"false"' \
    '"name":"scheduling-policy","value":"priority"'; do
    grep -qF "$want" <<<"$flags" || tui_fail "the server has not $want: $flags"
done
echo PASS
