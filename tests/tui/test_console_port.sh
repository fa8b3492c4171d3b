#!/usr/bin/env bash
# A busy port is found before the weights load: with --port on a port another program listens
# on, the console (and tachyon serve) stop at once with the reason, exit status 1, the terminal
# restored, and never start opening the model.
source "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }

python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True); time.sleep(120)' >"$TUI_DIR/port" &
holder=$!
trap 'kill $holder 2>/dev/null; tui_cleanup' EXIT
for _ in $(seq 1 50); do [ -s "$TUI_DIR/port" ] && break; sleep 0.1; done
port=$(cat "$TUI_DIR/port")

tui_start -- --port "$port"
tui_wait 'console exited: rc=1' 10
want="cannot listen on 127.0.0.1:$port: Address already in use (found before loading the model"
grep -qF "$want" "$TUI_DIR/stderr" || tui_fail "stderr: $(cat "$TUI_DIR/stderr")"
grep -q 'opening the model' "$TUI_DIR/stderr" && tui_fail "the model was opened first"
cmp -s "$TUI_DIR/stty.before" "$TUI_DIR/stty.after" || tui_fail "terminal modes not restored"

rc=0
"$TACHYON_BIN" serve --model "$TACHYON_FIXTURES/tiny-qwen3" --port "$port" 2>"$TUI_DIR/serve.err" || rc=$?
[ "$rc" = 1 ] || tui_fail "tachyon serve: exit status $rc"
grep -qF "$want" "$TUI_DIR/serve.err" || tui_fail "tachyon serve: $(cat "$TUI_DIR/serve.err")"
echo PASS
