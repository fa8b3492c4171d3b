#!/usr/bin/env bash
# The numbers band and the GPU chart at 80x24, 120x40 and 200x50: with the tests' fake NVML
# (two made-up GPUs, tests/fake/fake_nvml.c) a row per GPU with its utilisation, memory, power,
# temperature and clocks and a "GPU" chart with a legend; without NVML "no NVML" and the
# process's CPU % and RSS with a "CPU/RSS" chart; the engine's numbers (KV tokens and blocks,
# max concurrency, prefix hit rate, step time, tokens per step, preemptions, queue time,
# finishes by reason) in both, counting a chat reply; NO_COLOR with the C locale: ASCII only.
# With four GPUs a row each at the three sizes (the CPU backend names no device of its own, so
# every GPU is the machine's: "GPUn", not "TPr GPUn"), sampled by the tachyon-nvml thread and not
# the UI thread (tachyon-ui).
source "$(dirname "$0")/lib.sh"
: "${TACHYON_FAKE_NVML:?TACHYON_FAKE_NVML must name the fake NVML library}"

for size in 80x24 120x40 200x50; do
    TUI_W=${size%x*} TUI_H=${size#*x}
    tui_start TACHYON_NVML_LIB="$TACHYON_FAKE_NVML" FAKE_NVML_GPUS=2 --
    tui_wait '^ready \|'
    tui_wait '^ GPU0  util +[0-9]+%  mem 30\.0/80\.0 GiB  pwr 350/700 W'
    tui_wait '^ GPU1  util +[0-9]+%  mem 31\.0/80\.0 GiB'
    tui_wait 'KV [0-9]+/[0-9.k]+ tok \([0-9]+/[0-9]+ blk\)'
    tui_wait 'max conc [0-9.]+x @[0-9]+'
    tui_wait 'prefix hit'
    tui_wait 'done stop 0 len 0 abort 0 error 0'
    tui_wait 'GPU( +last)? [0-9]+ (s|min) +util [0-9.]+% mem 3[0-9.]+%|GPU +util [0-9.]+% mem'
    if [ "$TUI_W" = 200 ]; then
        tui_wait 'temp 61 C  clk 1980/2619 MHz  Fake H100 0'
    fi
    tui_send 'Hello' Enter
    tui_wait '\[(stop|length): [0-9]+ prompt'
    tui_wait 'done stop 1 len 0 abort 0 error 0|done stop 0 len 1 abort 0 error 0'
    tui_wait 'step [0-9.]+ ms fwd [0-9.]+|step idle'
    tui_wait 'tok/step'
    tui_wait 'queue [0-9]+ ms'
    tui_quit
    tmux_ kill-server
done

for size in 80x24 120x40 200x50; do
    TUI_W=${size%x*} TUI_H=${size#*x}
    tui_start TACHYON_NVML_LIB="$TACHYON_FAKE_NVML" FAKE_NVML_GPUS=4 --
    tui_wait '^ready \|'
    for i in 0 1 2 3; do tui_wait "^ GPU$i  util +[0-9]+%  mem 3$i\.0/80\.0 GiB  pwr 35$i/700 W"; done
    tui_screen | grep -q 'TP[0-9] GPU' && tui_fail "a rank row without an engine device"
    pid=$(tui_console_pid)
    [ -n "$pid" ] || tui_fail "no console process"
    grep -qx tachyon-nvml /proc/"$pid"/task/*/comm || tui_fail "no tachyon-nvml sampler thread"
    grep -qx tachyon-ui /proc/"$pid"/task/*/comm || tui_fail "no tachyon-ui thread"
    tui_quit
    tmux_ kill-server
done

TUI_W=80 TUI_H=24
tui_start TACHYON_NVML_LIB=/nonexistent/libnvidia-ml.so.1 --
tui_wait '^ready \|'
tui_wait '^ no NVML \(/nonexistent/libnvidia-ml\.so\.1 not found'
tui_wait 'CPU [0-9]+% of [0-9]+ cores'
tui_wait 'RSS [0-9.]+/[0-9.]+ GiB'
tui_wait 'CPU/RSS'
tui_quit
tmux_ kill-server

TUI_W=120 TUI_H=40
tui_start NO_COLOR=1 LANG=C LC_ALL=C TACHYON_NVML_LIB="$TACHYON_FAKE_NVML" FAKE_NVML_GPUS=1 --
tui_wait '^ready \|'
tui_wait '^ GPU0  util +[0-9]+%'
tui_wait 'done stop 0 len 0 abort 0 error 0'
tui_screen | LC_ALL=C grep -q '[^ -~]' && tui_fail "non-ASCII on the screen in the C locale"
tmux_ capture-pane -p -e -t t | grep -q $'\e\\[3[0-7]m' && tui_fail "a colour with NO_COLOR"
tui_quit
echo PASS
