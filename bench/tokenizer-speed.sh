#!/usr/bin/env bash
# Tokenizer encoding speed, Tachyon vs Hugging Face `tokenizers`, one thread, the same 1 MB
# of English, code and multilingual text (bench/tokenizer_speed.py makes it). Tokenizers:
# tests/fixtures/tiny-qwen3 (when its tokenizer.json is not empty) and a 32k-vocabulary
# Qwen3-style byte-level BPE trained here on other text. Checks that both produce the same ids
# and prints a Markdown table for bench/RESULTS.md.
#
# Usage: bench/tokenizer-speed.sh [path/to/tachyon]   (default build/release/tachyon)
# The Python with `tokenizers` is $FIXTURES_PYTHON (default .venv/fixtures/bin/python).
# BENCH_QUICK=1: 20 kB of text, the fixture's tokenizer only, one repetition (the test suite's
# check that the script works; exit 77 without that Python).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release/tachyon}
py=${FIXTURES_PYTHON:-$root/.venv/fixtures/bin/python}
helper=$root/bench/tokenizer_speed.py
repeat=5
quick=${BENCH_QUICK:-0}
if [[ $quick == 1 ]]; then
    repeat=1
    export TOKENIZER_SPEED_BYTES=20000
    [[ -x $py ]] || { echo "tokenizer-speed: no Python $py" >&2; exit 77; }
fi

[[ -x $bin ]] || { echo "tokenizer-speed: no binary $bin" >&2; exit 1; }
[[ -x $py ]] || { echo "tokenizer-speed: no Python $py (set FIXTURES_PYTHON)" >&2; exit 1; }
# One thread on the HF side: encode() of one string is sequential anyway, encode_batch is not.
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false PYTHONWARNINGS=ignore

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$py" "$helper" text "$tmp/text.txt"
[[ $quick == 1 ]] || "$py" "$helper" train "$tmp/qwen3-32k" "$root/tests/fixtures/tokenizer/qwen3" 2>/dev/null

models=()
if [[ -s $root/tests/fixtures/tiny-qwen3/tokenizer.json ]]; then
    models+=("tiny-qwen3=$root/tests/fixtures/tiny-qwen3")
fi
[[ $quick == 1 ]] || models+=("qwen3-32k (trained here)=$tmp/qwen3-32k")

echo "Text: $(wc -c <"$tmp/text.txt") bytes, sha256 $(sha256sum "$tmp/text.txt" | cut -c1-16)…;" \
    "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| tokenizer | vocab | bytes | tokens | Tachyon MB/s | Tachyon tokens/s | HF MB/s | HF tokens/s" \
    "| Tachyon / HF | HF encode_batch (4 KB chunks) MB/s | HF encode_batch tokens/s" \
    "| first run ms (Tachyon / HF) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for m in "${models[@]}"; do
    name=${m%%=*}
    dir=${m#*=}
    "$bin" tokenize --model "$dir" --ids-only --stats --repeat "$repeat" - <"$tmp/text.txt" \
        >"$tmp/ids.json" 2>"$tmp/stats.txt"
    "$py" "$helper" hf "$name" "$dir/tokenizer.json" "$tmp/text.txt" "$tmp/ids.json" \
        "$tmp/stats.txt"
done
