# Shared by bench/spec-ngram.sh and bench/spec-mtp.sh (sourced, not run, after the caller sets
# root): one table row of greedy decode speed without and with speculative drafts. Sets bin (the
# caller's first argument, default build/release/tachyon), n_out (tokens) and reps (runs each
# way), both smaller under BENCH_QUICK=1 (quick); the caller sets spec (the --speculative-config
# JSON with K for k).

bin=${1:-$root/build/release/tachyon}
n_out=128
reps=3
quick=${BENCH_QUICK:-0}
[[ $quick == 1 ]] && n_out=16 reps=1

decode() { # args... -> "tok/s|rate|length"
    local out
    out=$("$bin" complete "$@" -n "$n_out" --ignore-eos --stats 2>&1 >/dev/null)
    local tps rate len
    tps=$(echo "$out" | sed -n 's/^decode: .*(\(.*\) tokens\/s)/\1/p')
    rate=$(echo "$out" | sed -n 's/^speculative: .*acceptance rate \([0-9.]*\)%.*/\1%/p')
    len=$(echo "$out" | sed -n 's/^speculative: .*mean acceptance length \([0-9.]*\)).*/\1/p')
    echo "$tps|${rate:--}|${len:--}"
}

max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }

# row CELLS K ARGS...: "| CELLS | K | tok/s without | tok/s with | acceptance | tokens per verify
# step | speed-up |", the best of $reps alternating runs each way (a shared machine's load moves
# single runs by 2x)
row() {
    local cells=$1 k=$2
    shift 2
    local b=0 w=0 with r
    for ((r = 0; r < reps; r++)); do
        b=$(max "$b" "$(decode "$@" | cut -d'|' -f1)")
        with=$(decode "$@" --speculative-config "${spec/K/$k}")
        w=$(max "$w" "${with%%|*}")
    done
    local rest=${with#*|}
    printf '| %s | %s | %s | %s | %s | %s | %.2fx |\n' "$cells" "$k" "$b" "$w" "${rest%%|*}" \
        "${rest#*|}" "$(echo "$w $b" | awk '{print $1 / $2}')"
}
