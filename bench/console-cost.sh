#!/usr/bin/env bash
# What the console costs: the UI thread's CPU use (idle, during a /bench run inside the console,
# and while an external benchmark loads the engine), and the engine's throughput with the
# console open vs headless `tachyon serve` on the same workload.
#
#     bench/console-cost.sh                     # tiny fixture, CPU backend, short profile x 1000
#     NUM_PROMPTS=2000 ROUNDS=5 bench/console-cost.sh
#     NVML_LIB=build/release/tests/libfake_nvml.so FAKE_NVML_GPUS=4 bench/console-cost.sh
#                                               # with a GPU panel (the tests' fake NVML)
#     BENCH_QUICK=1 bench/console-cost.sh       # 4 prompts, 1 round, 1 s idle (the test suite's
#                                               # check that the script works)
#
# The UI thread is found by its name (tachyon-ui) under /proc/PID/task; its CPU is utime + stime
# from /proc/PID/task/TID/stat over the window, as a percentage of one core; so is the GPU
# sampler thread's (tachyon-nvml: NVML and /proc once a second, off the UI thread). Both servers stay up
# for the whole script and the benchmark alternates between them ROUNDS times, so that they see
# the same machine state (one untimed warm-up run each first: the first run after start-up pays
# for page faults in the KV pool); an idle engine sleeps, so neither disturbs the other's run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TACHYON_BIN:-$root/build/release/tachyon}
model=${MODEL:-$root/tests/fixtures/tiny-qwen3}
num_prompts=${NUM_PROMPTS:-1000}
rounds=${ROUNDS:-3}
idle_s=${IDLE_S:-10}
[[ ${BENCH_QUICK:-0} == 1 ]] && num_prompts=4 rounds=1 idle_s=1
profile=${PROFILE:-short}
command -v tmux >/dev/null || { echo "console-cost: needs tmux" >&2; exit 77; }
[ -x "$bin" ] || { echo "console-cost: no binary at $bin (scripts/build Release)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/console-cost.XXXXXX")
sock="console-cost-$$"
serve_pid=
cleanup() {
    tmux -L "$sock" kill-server >/dev/null 2>&1 || true
    [ -n "$serve_pid" ] && kill -INT "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
tmux_() { tmux -L "$sock" -f /dev/null "$@"; }
screen() { tmux_ capture-pane -p -t cost; }
wait_for() { # REGEX TIMEOUT
    local end=$((SECONDS + $2))
    until screen | grep -Eq -- "$1"; do
        [ $SECONDS -lt "$end" ] || { echo "console-cost: timed out waiting for /$1/" >&2; screen >&2; exit 1; }
        sleep 0.2
    done
}
hz=$(getconf CLK_TCK)
ticks() { # utime + stime of a thread
    awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/task/$2/stat"
}
pct() { # TICKS0 TICKS1 SECONDS -> percent of one core
    awk -v a="$1" -v b="$2" -v s="$3" -v hz="$hz" 'BEGIN { printf "%.2f", (b - a) / hz / s * 100 }'
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# --- the console, in a 120x40 tmux pane
unset TMUX
tmux_ new-session -d -s cost -x 120 -y 40 \
    env LANG=C.UTF-8 XDG_STATE_HOME="$work/state" ${NVML_LIB:+TACHYON_NVML_LIB=$NVML_LIB} \
    ${FAKE_NVML_GPUS:+FAKE_NVML_GPUS=$FAKE_NVML_GPUS} "$bin" console --model "$model" --port 0 \
    --results-dir "$work/results"
wait_for '^ready \|' 60
console_port=$(screen | grep -Eo 'http://127\.0\.0\.1:[0-9]+' | head -1 | sed 's/.*://')
pane_pid=$(tmux_ display -p -t cost '#{pane_pid}')
pid=
ntid=
for p in $pane_pid $(pgrep -P "$pane_pid" || true); do
    for t in /proc/$p/task/*; do
        if [ "$(cat "$t/comm" 2>/dev/null)" = tachyon-ui ]; then pid=$p; tid=${t##*/}; fi
        if [ "$(cat "$t/comm" 2>/dev/null)" = tachyon-nvml ]; then ntid=${t##*/}; fi
    done
done
[ -n "$pid" ] || { echo "console-cost: no tachyon-ui thread found" >&2; exit 1; }

# --- headless serve beside it
"$bin" serve --model "$model" --port 0 --stats-interval 0 2>"$work/serve.log" &
serve_pid=$!
serve_port=$("$root/scripts/serve-port" "$work/serve.log" "$serve_pid") ||
    { echo "console-cost: tachyon serve did not start" >&2; cat "$work/serve.log" >&2; exit 1; }

echo "binary: $bin"
echo "model: $model, backend: $(screen | head -1 | grep -Eo 'cpu[^|]*|cuda[^|]*' | head -1)"
echo "workload: --profile $profile --num-prompts $num_prompts, $rounds rounds"

# --- UI thread idle
t0=$(ticks "$pid" "$tid")
sleep "$idle_s"
t1=$(ticks "$pid" "$tid")
idle=$(pct "$t0" "$t1" "$idle_s")

# --- UI thread during a /bench inside the console
start=$(now)
t0=$(ticks "$pid" "$tid")
[ -n "$ntid" ] && n0=$(ticks "$pid" "$ntid")
tmux_ send-keys -t cost -l "/bench $profile --num-prompts $num_prompts"
tmux_ send-keys -t cost Enter
wait_for 'run #1: ' 1200
t1=$(ticks "$pid" "$tid")
[ -n "$ntid" ] && n1=$(ticks "$pid" "$ntid")
dur=$(elapsed "$start")
in_console=$(pct "$t0" "$t1" "$dur")
sampler=n/a
[ -n "$ntid" ] && sampler=$(pct "$n0" "$n1" "$dur")

# --- engine throughput: external benchmark against the console's server and the headless one
run_bench() { # PORT NAME
    "$bin" bench --profile "$profile" --num-prompts "$num_prompts" --port "$1" --save-result \
        --result-dir "$work" --result-filename "$2.json" >"$work/$2.txt" 2>&1
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.1f %.1f' % (d['output_throughput'], d['total_token_throughput']))" "$work/$2.json"
}
declare -a c_out s_out c_tot s_tot ext_ui
run_bench "$console_port" warmup-console >/dev/null
run_bench "$serve_port" warmup-serve >/dev/null
for r in $(seq "$rounds"); do
    start=$(now)
    t0=$(ticks "$pid" "$tid")
    read -r o t < <(run_bench "$console_port" "console-$r")
    t1=$(ticks "$pid" "$tid")
    ext_ui+=("$(pct "$t0" "$t1" "$(elapsed "$start")")")
    c_out+=("$o"); c_tot+=("$t")
    read -r o t < <(run_bench "$serve_port" "serve-$r")
    s_out+=("$o"); s_tot+=("$t")
done
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.1f", s / NR }'; }

echo
echo "UI thread (tachyon-ui) CPU, % of one core:"
echo "  idle (${idle_s} s):                              $idle"
echo "  during /bench $profile x $num_prompts in the console (${dur} s): $in_console"
echo "  during external benchmarks against the console: ${ext_ui[*]}"
echo "GPU sampler thread (tachyon-nvml) CPU during the /bench in the console: $sampler"
echo
echo "engine throughput, tok/s (output / total), per round:"
for i in $(seq 0 $((rounds - 1))); do
    echo "  round $((i + 1)): console open ${c_out[$i]} / ${c_tot[$i]}   headless serve ${s_out[$i]} / ${s_tot[$i]}"
done
co=$(mean "${c_tot[@]}"); so=$(mean "${s_tot[@]}")
echo "  mean total tok/s: console open $co, headless $so ($(awk -v a="$co" -v b="$so" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }'))"
co=$(mean "${c_out[@]}"); so=$(mean "${s_out[@]}")
echo "  mean output tok/s: console open $co, headless $so ($(awk -v a="$co" -v b="$so" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }'))"
