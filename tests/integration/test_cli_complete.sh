#!/usr/bin/env bash
# `tachyon complete` end to end: reproduces transformers' greedy continuations on both
# fixtures, and a broken model directory gives one message, a non-zero exit and no crash.
set -uo pipefail
bin=${TACHYON_BIN:?} fixtures=${TACHYON_FIXTURES:?}
failures=0 passed=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { passed=$((passed + 1)); }

# golden.json -> lines "prompt_ids greedy_ids"
golden_cases() {
    python3 -c '
import json, sys
g = json.load(open(sys.argv[1]))
for p in g["prompts"]:
    print(",".join(map(str, p["ids"])), ",".join(map(str, p["greedy"])))
' "$1"
}

for fixture in tiny-qwen3 tiny-qwen3-fp8; do
    while read -r prompt want; do
        n=$(echo "$want" | tr ',' '\n' | wc -l)
        got=$("$bin" complete --model "$fixtures/$fixture" --prompt-ids "$prompt" -n "$n" \
              --temperature 0 --ignore-eos --token-ids --threads 2 2>&1)
        if [ "$got" = "$want" ]; then ok; else fail "$fixture prompt $prompt: got $got want $want"; fi
    done < <(golden_cases "$fixtures/golden/$fixture.json")
done

# The embedded model is tiny-qwen3 itself.
read -r prompt want < <(golden_cases "$fixtures/golden/tiny-qwen3.json")
n=$(echo "$want" | tr ',' '\n' | wc -l)
got=$("$bin" complete --prompt-ids "$prompt" -n "$n" --ignore-eos --token-ids 2>&1)
[ "$got" = "$want" ] && ok || fail "embedded model: got $got want $want"

# Broken directories: non-zero exit below 128 (no signal), one line naming the file.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$fixtures/tiny-qwen3" "$tmp/broken"
printf '{"model_type": "qwen3", ' > "$tmp/broken/config.json"
out=$("$bin" complete --model "$tmp/broken" --prompt-ids 1,2 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] &&
   echo "$out" | grep -q "config.json: invalid JSON"; then ok; else fail "invalid config: rc=$rc out=$out"; fi

cp -r "$fixtures/tiny-qwen3-fp8" "$tmp/truncated"
shard="$tmp/truncated/model-00002-of-00002.safetensors"
truncate -s $(( $(stat -c %s "$shard") / 2 )) "$shard"
out=$("$bin" complete --model "$tmp/truncated" --prompt-ids 1,2 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && echo "$out" | grep -q "model-00002-of-00002.safetensors"; then ok
else fail "truncated shard: rc=$rc out=$out"; fi

out=$("$bin" complete --model "$tmp/nonexistent" --prompt-ids 1 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "nonexistent" && ok || fail "missing dir: rc=$rc out=$out"

out=$("$bin" complete --prompt-ids 1,99999999 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "outside the vocabulary" && ok || fail "bad id: rc=$rc out=$out"

out=$("$bin" complete --model qwen3-0.6b --load-format dummy --dtype fp8 --prompt-ids 1,2,3 -n 2 --token-ids 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -Eq '^[0-9]+,[0-9]+$' && ok || fail "dummy qwen3-0.6b: rc=$rc out=$out"

echo "$passed passed, $failures failed"
[ $failures -eq 0 ]
