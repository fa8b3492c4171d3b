# Sourced by the tests that watch or balance several `tachyon serve` replicas of the tiny fixture
# (tests/integration/test_scaleout_nginx.sh, tests/tui/test_console_watch.sh).
#
# replica NAME DIR [PORT]: starts one on PORT or a free port (one thread, served as "tiny"), its
# stderr in DIR/NAME.log; sets port_NAME and pid_NAME and appends the pid to the caller's array
# pids. Returns 1 when it did not start. Needs TACHYON_BIN and TACHYON_FIXTURES.
replica() {
    local name=$1 dir=$2 pid port
    "$TACHYON_BIN" serve --port "${3:-0}" --threads 1 --kv-cache-memory 64MiB --stats-interval 0 \
        --model "$TACHYON_FIXTURES/tiny-qwen3" --served-model-name tiny \
        2>"$dir/$name.log" >/dev/null &
    pid=$!
    pids+=("$pid")
    port=$("$(dirname "${BASH_SOURCE[0]}")/../scripts/serve-port" "$dir/$name.log" "$pid") || return 1
    printf -v "port_$name" %s "$port"
    printf -v "pid_$name" %s "$pid"
}
