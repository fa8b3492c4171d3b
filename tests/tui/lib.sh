# Helpers for the console's tmux tests (sourced by tests/tui/test_*.sh).
#
# Each test gets a private tmux server (its own socket name, no config file), one pane of a fixed
# size running the console through a wrapper that records the exit status and the terminal modes
# before and after, and polls capture-pane for expected text with a timeout instead of sleeping.
# The server and the temporary directory are removed on exit, whatever happens.
#
#     source "$(dirname "$0")/lib.sh"
#     tui_start                        # console on the tiny fixture, --port 0, 120x40
#     tui_wait 'ready'                 # the status line's ready marker
#     tui_send 'hello' Enter
#     tui_wait '\[stop: '
#     tui_quit                         # /quit, exit status 0, terminal restored

set -euo pipefail

: "${TACHYON_BIN:?TACHYON_BIN must name the tachyon binary}"
: "${TACHYON_FIXTURES:?TACHYON_FIXTURES must name tests/fixtures}"
command -v tmux >/dev/null || { echo "SKIP: tmux not installed"; exit 77; }

TUI_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tachyon-tui.XXXXXX")
# A fresh socket per tui_start: a test that kills its server and starts another must not race
# the old server's shutdown on the same socket ("server exited unexpectedly").
TUI_SOCK="tachyon-test-$$-$RANDOM"
TUI_SOCKS=()
TUI_TIMEOUT=${TUI_TIMEOUT:-30}
unset TMUX

tmux_() { tmux -L "$TUI_SOCK" -f /dev/null "$@"; }

tui_cleanup() {
    for sock in "${TUI_SOCKS[@]}"; do tmux -L "$sock" kill-server >/dev/null 2>&1 || true; done
    rm -rf "$TUI_DIR"
}
trap tui_cleanup EXIT

tui_fail() {
    echo "FAIL: $*" >&2
    echo "---- screen ----" >&2
    tmux_ capture-pane -p -t t >&2 2>/dev/null || true
    echo "---- stderr of the console ----" >&2
    cat "$TUI_DIR/stderr" >&2 2>/dev/null || true
    exit 1
}

# tui_start [ENV=VALUE...] -- [console options...]: starts the console (120x40, or TUI_W x
# TUI_H) on the tiny fixture with a free port, results and history under the test's directory
# (and the options in TUI_EXTRA, for tui_sizes).
tui_start() {
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    tui_run "${envs[@]}" -- console --model "$TACHYON_FIXTURES/tiny-qwen3" --port 0 --threads 2 \
        --results-dir "$TUI_DIR/results" ${TUI_EXTRA:-} "$@"
}

# tui_run [ENV=VALUE...] -- ARGS...: `tachyon ARGS...` in the pane as tui_start runs the
# console (the wrapper, the size, the state directory), with no options added; the variables in
# TUI_ENV (space-separated ENV=VALUE, for tui_sizes) go into its environment too.
tui_run() {
    local envs=(${TUI_ENV:-})
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    cat >"$TUI_DIR/run.sh" <<'EOF'
#!/bin/bash
dir=$1; shift
stty -g >"$dir/stty.before"
"$@" 2>"$dir/stderr"
rc=$?
stty -g >"$dir/stty.after"
echo "$rc" >"$dir/rc"
echo "console exited: rc=$rc"
exec sleep 600
EOF
    rm -f "$TUI_DIR/rc"
    TUI_SOCK="tachyon-test-$$-$RANDOM-${#TUI_SOCKS[@]}"
    TUI_SOCKS+=("$TUI_SOCK")
    tmux_ new-session -d -s t -x "${TUI_W:-120}" -y "${TUI_H:-40}" \
        env -u NO_COLOR LANG=C.UTF-8 LC_ALL= TERM=screen XDG_STATE_HOME="$TUI_DIR/state" "${envs[@]}" \
        bash "$TUI_DIR/run.sh" "$TUI_DIR" "$TACHYON_BIN" "$@"
}

tui_screen() { tmux_ capture-pane -p -t t; }

# tui_wait REGEX [TIMEOUT]: polls the screen until a line matches (grep -E).
tui_wait() {
    local re=$1 timeout=${2:-$TUI_TIMEOUT}
    local end=$((SECONDS + timeout))
    while [ $SECONDS -lt $end ]; do
        if tui_screen | grep -Eq -- "$re"; then return 0; fi
        if [ -f "$TUI_DIR/rc" ] && ! tui_screen | grep -Eq -- "$re"; then
            tui_fail "the console exited (rc $(cat "$TUI_DIR/rc")) before showing /$re/"
        fi
        sleep 0.1
    done
    tui_fail "timed out after ${timeout}s waiting for /$re/"
}

# tui_wait_count REGEX N [TIMEOUT]: polls until at least N lines match.
tui_wait_count() {
    local re=$1 n=$2 timeout=${3:-$TUI_TIMEOUT}
    local end=$((SECONDS + timeout))
    while [ $SECONDS -lt $end ]; do
        if [ "$(tui_screen | grep -Ec -- "$re")" -ge "$n" ]; then return 0; fi
        sleep 0.1
    done
    tui_fail "timed out after ${timeout}s waiting for $n lines matching /$re/"
}

# tui_wait_gone REGEX [TIMEOUT]: polls until no line matches.
tui_wait_gone() {
    local re=$1 timeout=${2:-$TUI_TIMEOUT}
    local end=$((SECONDS + timeout))
    while [ $SECONDS -lt $end ]; do
        if ! tui_screen | grep -Eq -- "$re"; then return 0; fi
        sleep 0.1
    done
    tui_fail "timed out after ${timeout}s waiting for /$re/ to go away"
}

# tui_send TEXT [KEYS...]: types TEXT literally, then tmux key names (Enter, Escape, F1, ...).
tui_send() {
    tmux_ send-keys -t t -l -- "$1"
    shift
    [ $# -gt 0 ] && tmux_ send-keys -t t "$@"
    return 0
}

tui_keys() { tmux_ send-keys -t t "$@"; }

tui_resize() { tmux_ resize-window -t t -x "$1" -y "$2"; }

# tui_quit: /quit, then the wrapper must report exit status 0 and unchanged terminal modes.
tui_quit() {
    tui_send '/quit' Enter
    tui_wait 'console exited: rc=' 20
    [ "$(cat "$TUI_DIR/rc")" = 0 ] || tui_fail "exit status $(cat "$TUI_DIR/rc"), expected 0"
    cmp -s "$TUI_DIR/stty.before" "$TUI_DIR/stty.after" ||
        tui_fail "terminal modes not restored: $(cat "$TUI_DIR/stty.before") vs $(cat "$TUI_DIR/stty.after")"
}

# tui_console_pid: the console's process, a descendant of the pane's (its main thread names it
# tachyon-ui)
tui_console_pid() {
    local pids p
    pids=$(tmux_ display -p -t t '#{pane_pid}')
    for _ in 1 2 3 4; do
        for p in $pids; do
            case "$(ps -o comm= -p "$p")" in tachyon*) echo "$p" && return 0 ;; esac
        done
        pids=$(for p in $pids; do pgrep -P "$p" || true; done)
    done
}

# tui_pane: the chat pane's rows on the screen (from its title to the REPL line, exclusive).
tui_pane() { tui_screen | sed -n '/Chat and output/,$p' | head -n -2; }

# tui_find_up REGEX...: each REGEX must match a row of the chat pane as it is or once paged up
# (PgUp, waiting for the pane to change each time: a small terminal shows a long output a page at
# a time); then pages back down to the newest rows.
tui_find_up() {
    local re prev end i
    for re in "$@"; do
        for i in $(seq 30); do
            prev=$(tui_pane)
            grep -Eq -- "$re" <<<"$prev" && continue 2
            tui_keys PPage
            end=$((SECONDS + TUI_TIMEOUT))
            until [ "$(tui_pane)" != "$prev" ]; do
                [ $SECONDS -lt $end ] || tui_fail "/$re/ not in the pane, paged up to its top"
                sleep 0.1
            done
        done
        tui_fail "/$re/ not in the pane after 30 pages"
    done
    for i in $(seq 30); do tui_keys NPage; done
    tui_wait_gone 'scrolled up'
}

# tui_sizes FN: FN against a fresh console at 80x24, 120x40 and 200x50, then at 120x40 with
# NO_COLOR in the C locale, where the screen must hold only ASCII; each console is quit (exit
# status 0, terminal restored) and its server removed.
tui_sizes() {
    local fn=$1 size
    for size in 80x24 120x40 200x50 120x40-plain; do
        TUI_W=${size%%x*} TUI_H=${size#*x} TUI_H=${TUI_H%-plain}
        if [ "${size%-plain}" = "$size" ]; then tui_start; else tui_start NO_COLOR=1 LANG=C LC_ALL=C --; fi
        "$fn"
        if [ "${size%-plain}" != "$size" ] && tui_screen | LC_ALL=C grep -q '[^ -~]'; then
            tui_fail "non-ASCII on the screen in the C locale"
        fi
        tui_quit
        tmux_ kill-server
    done
}
