#!/usr/bin/env bash
# The longest prompt llama.cpp's full cache fits in a memory cap, measured as
# promptkv bench --mem measures promptkv's (docs/compression.md): peak RSS of
# real prefills at two prompt lengths (llama-bench, flash attention on, its
# default f16 cache), a line a + b*n through them, the weights (the GGUF's
# bytes, which llama.cpp maps and reads whole) outside the cap.
#
#   tools/llamacpp-memfit.sh LLAMA_BENCH MODEL [P1 P2 [CAP_MIB [THREADS]]]
#   e.g. tools/llamacpp-memfit.sh path/to/llama-bench models/llama-3.2-1b-q8_0.gguf 2048 4096 8192 2
set -euo pipefail
bench=$1 model=$2 p1=${3:-2048} p2=${4:-4096} cap=${5:-8192} threads=${6:-2}
weights=$(stat -c %s "$model")
peak_kib() {
    /usr/bin/time -f '%M' -o "$tmp" "$bench" -m "$model" -p "$1" -n 0 -r 1 -t "$threads" -fa on -o csv > /dev/null 2>&1
    tail -n 1 "$tmp"
}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
k1=$(peak_kib "$p1")
k2=$(peak_kib "$p2")
awk -v p1="$p1" -v p2="$p2" -v k1="$k1" -v k2="$k2" -v w="$weights" -v cap="$cap" 'BEGIN {
    m1 = k1 / 1024 - w / 1048576; m2 = k2 / 1024 - w / 1048576   # MiB above the weights
    b = (m2 - m1) / (p2 - p1); a = m1 - b * p1
    printf "llama.cpp (llama-bench -fa on, f16 cache): peak RSS above the weights %d: %.1f MiB, %d: %.1f MiB\n", p1, m1, p2, m2
    printf "a %.1f MiB, b %.2f KiB/token, longest prompt in %d MiB: %d tokens\n", a, b * 1024, cap, (cap - a) / b
}'
