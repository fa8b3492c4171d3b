#!/usr/bin/env bash
# The header names the model exactly as clients must send it and keeps the server URL whole:
# with --model DIR it shows DIR as given (the API accepts nothing else); at 60x16 the URL and
# the end of the name stay while the other fields go; with vLLM's --served-model-name (one or
# more names) it shows the first, /v1/models lists them all and a request naming the second one
# is answered.
source "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }

header() { tui_screen | head -1; }

tui_start
tui_wait '^ready \|'
model="$TACHYON_FIXTURES/tiny-qwen3"
header | grep -qF " $model | http://127.0.0.1:" || tui_fail "the header does not show --model as given ($model)"
tui_resize 60 16
tui_wait 'terminal too small|seqs .*running [0-9]'
tui_wait '^ready \|'
header | grep -Eq 'tiny-qwen3 \| http://127\.0\.0\.1:[0-9]+ *$' ||
    tui_fail "at 60x16 the header lost the URL or the model name: $(header)"
tui_quit
tmux_ kill-server

tui_start -- --served-model-name qwen-tiny second-name
tui_wait '^ready \|'
tui_wait 'Serving qwen-tiny at http://127\.0\.0\.1:[0-9]+'
tui_resize 60 16
tui_wait '^ready \|'
header | grep -Eq '^ *qwen-tiny \| http://127\.0\.0\.1:[0-9]+ ' || tui_fail "header: $(header)"
url=$(header | grep -Eo 'http://127\.0\.0\.1:[0-9]+')
models=$(curl -sf "$url/v1/models") || tui_fail "GET /v1/models failed"
python3 -c 'import json,sys; ids=[m["id"] for m in json.load(sys.stdin)["data"]]; sys.exit(ids != ["qwen-tiny", "second-name"])' <<<"$models" ||
    tui_fail "/v1/models lists $models"
reply=$(curl -sf "$url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model": "second-name", "prompt": "Hello", "max_tokens": 2}') || tui_fail "a request naming second-name failed"
grep -q '"model":"second-name"' <<<"$reply" || tui_fail "reply: $reply"
tui_quit
echo PASS
