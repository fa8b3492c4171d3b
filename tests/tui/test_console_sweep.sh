#!/usr/bin/env bash
# /sweep at 80x24, 120x40 and 200x50: max-num-seqs over two values on the embedded model gives
# the table (each value, the Pareto and best marks) and the plot (best point '*', legend), keeps
# each point as a run, says the best on the status line and puts the flag back; a rebuild flag,
# a bad value and an unknown profile are refused at once. NO_COLOR in the C locale: ASCII.
source "$(dirname "$0")/lib.sh"

sweep() {
    tui_wait '^ready \|'
    tui_send '/sweep block-size 16,32 short' Enter
    tui_wait '/sweep takes a live flag \(block-size needs a rebuild or a reload\)'
    tui_send '/sweep max-num-seqs 0,4 short' Enter
    tui_wait 'max-num-seqs must be an integer in \[1'
    tui_send '/sweep max-num-seqs 2,4 nosuch' Enter
    tui_wait 'unknown profile nosuch'
    tui_send '/sweep max-num-seqs 1,8 short --num-prompts 8 --input-len 16 --output-len 4' Enter
    tui_wait 'sweep done: best max-num-seqs=(1|8) \([0-9.]+ output tok/s\)' 120
    tui_wait '^points: [1*]=1 [2*]=8 +\(\* best throughput\)'
    tui_wait '^run #[0-9]+: max-num-seqs=1, saved to'
    tui_wait '^run #[0-9]+: max-num-seqs=8, saved to'
    for _ in $(seq 1 10); do # up to the table above the plot
        tui_screen | grep -q '^Sweep of max-num-seqs' && break
        tui_keys PageUp
        sleep 0.2
    done
    tui_wait '^Sweep of max-num-seqs'
    tui_wait '(pareto|best \*)$'
    tui_keys F3 # the log has it (and the pane is back at its end after it)
    tui_wait '\] /sweep max-num-seqs 1,8 short started'
    tui_wait '\] /sweep max-num-seqs done'
    tui_keys F3
    tui_send '/get max-num-seqs' Enter
    tui_wait '^max-num-seqs = 256 ' # put back
}

tui_sizes sweep
echo PASS
