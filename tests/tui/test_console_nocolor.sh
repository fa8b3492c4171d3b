#!/usr/bin/env bash
# NO_COLOR=1: no colour escapes at all in the rendered pane (capture-pane -e), while a normal run
# does have them (so this test can fail); --no-color does the same; a non-UTF-8 locale gives
# ASCII charts and borders (no byte above 0x7f on screen).
source "$(dirname "$0")/lib.sh"

# SGR parameters that set a colour: 30-38, 40-48 (38/48 start the 256-colour and RGB forms),
# 90-97, 100-107. 39 and 49 (back to the default colours) are what tmux writes for plain text.
has_colour() {
    tmux_ capture-pane -p -e -t t | grep -Eq $'\e\\[([0-9;]*;)?(3[0-8]|4[0-8]|9[0-7]|10[0-7])(;[0-9;]*)?m'
}

tui_start
tui_wait '^ready \|'
has_colour || tui_fail "a coloured run shows no colour escapes: the check cannot work"
tui_quit
tmux_ kill-server

tui_start NO_COLOR=1 --
tui_wait '^ready \|'
tui_send '/set max-num-seqs abc' Enter # an error line and a changed-flag mark would be coloured
tui_wait 'must be an integer'
tui_send '/set max-num-seqs 8' Enter
tui_wait '\*max-num-seqs'
if has_colour; then tui_fail "NO_COLOR=1: colour escapes on screen"; fi
tui_quit
tmux_ kill-server

tui_start -- --no-color
tui_wait '^ready \|'
if has_colour; then tui_fail "--no-color: colour escapes on screen"; fi
tui_quit
tmux_ kill-server

tui_start LANG=C LC_ALL=C --
tui_wait '^ready \|'
tui_send 'Hello' Enter
tui_wait '\[(stop|length): '
if tui_screen | LC_ALL=C grep -q $'[\x80-\xff]'; then tui_fail "non-ASCII bytes on screen in the C locale"; fi
tui_wait '- Flags \(\* changed\) -+$'
tui_wait '^- Chat and output -+'
tui_quit
echo PASS
