#!/usr/bin/env bash
# Tachyon's CPU backend side by side with llama.cpp on this machine, the same threads, the same
# model shapes (Qwen3-0.6B, random weights), alternating runs, medians. Not run in CI (it builds
# llama.cpp: minutes); the test suite runs its Tachyon half at a tiny size (BENCH_QUICK=1).
#
# llama.cpp: the tree vendored in the `llama-cpp-python` source package from PyPI (pip download,
# version $LLAMA_CPP_PYTHON, default 0.3.36), built once into the cache directory $CACHE
# (default ~/.cache/tachyon-llamacpp) with GGML_NATIVE (llama-bench, llama-batched-bench). The
# models: GGUF files written by bench/cpu_vs_llamacpp.py with the vendored gguf-py (a venv in the
# cache with numpy), in F32, BF16 and Q8_0 ($FORMATS); Tachyon runs its dummy qwen3-0.6b (BF16)
# at each --cpu-matmul-precision of $PRECISIONS (default: highest, and medium and high where the
# CPU has AVX512-BF16; "Tachyon" in the table is highest).
#
# Measures (each engine, ROUNDS rounds, default 3, engines alternating within a round):
#   prompt 128 and 512 tokens      llama-bench -p 128,512 -n 0     cpu_forward prefill N
#   decode 32 at depth 0 and 512   llama-bench -p 0 -n 32 -d 0,512 cpu_forward decode D 32
#   8 and 32 sequences decoding    llama-batched-bench -npp 32 -ntg 16 -npl 8,32 (speed_tg)
#                                  cpu_forward batch S 16 (32 tokens of context each)
#   peak RSS at prompt 512         /usr/bin/time of llama-bench -p 512 -n 0 / cpu_forward prefill 512
# Prints the load average before and after, and the Markdown table for bench/RESULTS.md.
# Usage: bench/cpu-vs-llamacpp.sh [build dir]   (THREADS, default 2; ROUNDS; FORMATS; CACHE;
#        PRECISIONS)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
threads=${THREADS:-2}
rounds=${ROUNDS:-3}
formats=${FORMATS:-F32 BF16 Q8_0}
cache=${CACHE:-$HOME/.cache/tachyon-llamacpp}
version=${LLAMA_CPP_PYTHON:-0.3.36}
quick=${BENCH_QUICK:-0}
if grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then
    precisions=${PRECISIONS:-highest medium high}
else
    precisions=${PRECISIONS:-highest}
fi
prog=$build/tests/cpu_forward
[ -x "$prog" ] || { echo "cpu-vs-llamacpp: no $prog (cmake --build)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=qwen3-0.6b pp="128 512" depth=512 ntg=16 seqs="8 32"
if [ "$quick" = 1 ]; then # the Tachyon half only, tiny shapes
    rounds=1 formats="" model=tiny pp="8 16" depth=4 ntg=2 seqs="2 4"
fi

# ---------------------------------------------------------------------------------------------
# llama.cpp and the models, once into the cache
if [ -n "$formats" ]; then
    mkdir -p "$cache"
    src=$cache/llama_cpp_python-$version/vendor/llama.cpp
    if [ ! -d "$src" ]; then
        python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" \
            -d "$cache"
        tar xzf "$cache/llama_cpp_python-$version.tar.gz" -C "$cache"
    fi
    bin=$cache/build-$version/bin
    if [ ! -x "$bin/llama-bench" ] || [ ! -x "$bin/llama-batched-bench" ]; then
        echo "building llama.cpp $version (vendored by llama-cpp-python) in $cache ..." >&2
        cmake -S "$src" -B "$cache/build-$version" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >"$cache/cmake.log"
        cmake --build "$cache/build-$version" --target llama-bench llama-batched-bench \
            -j"$(nproc)" >"$cache/build.log"
    fi
    if [ ! -x "$cache/venv/bin/python" ]; then
        python3 -m venv "$cache/venv"
        "$cache/venv/bin/pip" install -q "$src/gguf-py"
    fi
    cat >"$tmp/config.json" <<'JSON'
{"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
 "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936,
 "tie_word_embeddings": true, "rope_theta": 1000000, "rms_norm_eps": 1e-06,
 "max_position_embeddings": 40960}
JSON
    for f in $formats; do
        gguf=$cache/random-qwen3-0.6b-$f.gguf
        [ -s "$gguf" ] && continue
        echo "writing $gguf ..." >&2
        "$cache/venv/bin/python" "$root/bench/cpu_vs_llamacpp.py" gguf "$tmp/config.json" \
            "$root/tests/fixtures/tokenizer/qwen3/tokenizer.json" "$gguf.part" "$f"
        mv "$gguf.part" "$gguf"
    done
fi

# ---------------------------------------------------------------------------------------------
# One round of each engine; lines "ENGINE MEASURE VALUE" into $tmp/ENGINE-ROUND.txt
max_rss_mib() { # COMMAND... -> peak RSS of the command in MiB
    /usr/bin/time -f '%M' -o "$tmp/rss" "$@" >/dev/null 2>&1
    awk '{ printf "%.1f\n", $1 / 1024 }' "$tmp/rss"
}
tachyon_round() { # PRECISION OUT
    local out=$2 p label=128 e=tachyon
    local run=("$prog" --model $model --threads "$threads" --reps 1 --precision "$1")
    [ "$1" = highest ] || e=tachyon-$1
    for p in $pp; do # the table's rows are named by the full-size measures
        "${run[@]}" prefill "$p" | awk -v e=$e -v p="$label" '{ print e, "pp" p, $3 }' >>"$out"
        label=512
    done
    for d in 0 $depth; do
        "${run[@]}" decode "$d" "$((quick == 1 ? 2 : 32))" |
            awk -v e=$e -v d="$d" '{ print e, "tg32_d" (d > 0 ? 512 : 0), $4 }' >>"$out"
    done
    label=8
    for s in $seqs; do
        "${run[@]}" batch "$s" "$ntg" | awk -v e=$e -v s="$label" '{ print e, "batch" s, $4 }' >>"$out"
        label=32
    done
    echo "$e rss512 $(max_rss_mib "${run[@]}" prefill "${pp##* }")" >>"$out"
}
llama_round() { # FORMAT OUT
    local f=$1 out=$2 m=$cache/random-qwen3-0.6b-$1.gguf
    "$bin/llama-bench" -m "$m" -t "$threads" -p 128,512 -n 0 -r 1 -o jsonl 2>/dev/null |
        python3 -c 'import json, sys
for l in sys.stdin:
    d = json.loads(l); print("'"$f"' pp%d %.2f" % (d["n_prompt"], d["avg_ts"]))' >>"$out"
    "$bin/llama-bench" -m "$m" -t "$threads" -p 0 -n 32 -d 0,512 -r 1 -o jsonl 2>/dev/null |
        python3 -c 'import json, sys
for l in sys.stdin:
    d = json.loads(l); print("'"$f"' tg32_d%d %.2f" % (d["n_depth"], d["avg_ts"]))' >>"$out"
    "$bin/llama-batched-bench" -m "$m" -t "$threads" -c 4096 -b 2048 -ub 512 -npp 32 \
        -ntg "$ntg" -npl 8,32 --output-format jsonl 2>/dev/null |
        python3 -c 'import json, sys
for l in sys.stdin:
    if l.startswith("{"):
        d = json.loads(l); print("'"$f"' batch%d %.2f" % (d["pl"], d["speed_tg"]))' >>"$out"
    echo "$f rss512 $(max_rss_mib "$bin/llama-bench" -m "$m" -t "$threads" -p 512 -n 0 -r 1)" \
        >>"$out"
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$rounds"); do
    for pr in $precisions; do
        tachyon_round "$pr" "$tmp/tachyon-$pr-$r.txt"
    done
    for f in $formats; do
        llama_round "$f" "$tmp/$f-$r.txt"
    done
done
echo "$model, $threads threads, $rounds rounds, commit $(git -C "$root" rev-parse --short HEAD)," \
    "llama.cpp from llama-cpp-python $version; load average before: $load0, after:" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
echo
python3 "$root/bench/cpu_vs_llamacpp.py" table "$tmp"
