#!/usr/bin/env bash
# Flags: /set max-num-seqs 4 shows in the flags panel (marked changed) and in /get; a bad value
# shows why and changes nothing; a live flag the header shows (cpu-matmul-precision) follows
# there; a rebuild flag (block-size) drains, rebuilds and reports it;
# a reload flag (tensor-parallel-size) reopens the engine in place and the header follows, one that
# cannot open is refused with why; Tab completes a flag name.
source "$(dirname "$0")/lib.sh"

tui_start
tui_wait '^ready \|'
tui_wait ' max-num-seqs +256$' # the panel before: default, unmarked
tui_send '/set max-num-seqs 4' Enter
tui_wait '\*max-num-seqs +4$'
tui_send '/get max-num-seqs' Enter
tui_wait '^max-num-seqs = 4 +\(default 256, live\)'

tui_send '/set max-num-seqs abc' Enter
tui_wait 'max-num-seqs must be an integer'
tui_send '/set max-num-seqs 0' Enter
tui_wait 'max-num-seqs must be an integer in \[1'
tui_send '/get max-num-seqs' Enter
tui_wait_count '^max-num-seqs = 4 ' 2
tui_screen | grep -Eq '\*max-num-seqs +4$' || tui_fail "the panel changed after a bad /set"

tui_send '/set block-size 32' Enter
tui_wait 'needs a KV-pool rebuild'
tui_wait 'KV pool rebuilt in'
tui_wait '\*block-size +32$'
# the KV cache's dtype (the cpu backend emulates fp8's rounding): the band says so
tui_send '/set kv-cache-dtype fp8' Enter
tui_wait 'kv-cache-dtype = fp8: KV pool rebuilt in'
tui_wait '^ KV fp8 [0-9.k]+/[0-9.k]+ tok'

# a live flag the header shows: the CPU GEMMs' precision (bf16 dot products where the CPU has
# AVX512-BF16; elsewhere the header says why it stays f32), in a window wide enough for it
tui_resize 300 40
tui_send '/set cpu-matmul-precision medium' Enter
tui_wait '\*cpu-matmul-precision +medium$'
if grep -qw avx512_bf16 /proc/cpuinfo; then
    tui_wait 'threads, matmul medium \(bf16, AVX512-BF16\)'
else
    tui_wait 'high and medium need AVX512-BF16'
fi
tui_send '/set cpu-matmul-precision highest' Enter
tui_wait 'threads, f32 \('
tui_resize 120 40

# a reload flag: the engine reopened in place, the header's layout follows
tui_send '/set tensor-parallel-size 2' Enter
tui_wait 'reloads the engine in place'
tui_wait 'engine reloaded in [0-9.]+ s \(TP 2\)'
tui_screen | head -1 | grep -q '| TP 2 |' || tui_fail "the header does not say TP 2 after the reload"
tui_wait '\*tensor-parallel-size +2$'
# one that cannot open (TP 3 over 4 heads): refused with why, TP 2 serving again
tui_send '/set tensor-parallel-size 3' Enter
tui_wait 'not a multiple of 3'
tui_screen | head -1 | grep -q '| TP 2 |' || tui_fail "the header lost TP 2 after a refused reload"

tui_send '/get max-num-bat' Tab
tui_wait '^> /get max-num-batched-tokens'
tui_keys Enter
tui_wait '^max-num-batched-tokens = '

tui_quit
echo PASS
