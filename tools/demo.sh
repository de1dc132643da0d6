#!/usr/bin/env bash
# The main demo: a long document with one fact buried in the middle and a
# question at the end, answered by the default model with the full KV cache
# and with compressed caches, side by side (answer, cache size, decode speed).
# usage: tools/demo.sh PROMPTKV MODEL
set -euo pipefail
bin=$1
model=$2
threads=${THREADS:-$(nproc)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the document: tests/data/english.txt with a note inserted after its middle paragraph
awk -v RS= -v ORS='\n\n' '{ p[NR] = $0 } END {
    for (i = 1; i <= NR; i++) {
        print p[i]
        if (i == int(NR / 2)) print "A note for visitors: the locker code for the harbour museum is 4817. Please keep it safe."
    }
}' tests/data/english.txt > "$tmp/prompt.txt"
printf 'Question: What is the locker code for the harbour museum?\nAnswer: The locker code for the harbour museum is' >> "$tmp/prompt.txt"

echo "promptkv demo: $(wc -w < "$tmp/prompt.txt") words of text, one fact in the middle, the question at the end."
echo "model: $model, $threads threads"
echo

run() {
    local label=$1
    shift
    "$bin" run -m "$model" -f "$tmp/prompt.txt" -n 8 -t "$threads" -c 8192 "$@" > "$tmp/out" 2> "$tmp/err"
    local answer cache decode press
    answer=$(tr '\n' ' ' < "$tmp/out" | sed 's/  */ /g' | cut -c1-28)
    cache=$(grep -E '^kv cache now:' "$tmp/err" | sed -E 's/.*: *([0-9.]+ MiB).*/\1/')
    decode=$(grep -E '^decode:' "$tmp/err" | sed -E 's/.*, ([0-9.]+ tok\/s).*/\1/')
    press=$(grep -E '^press time:' "$tmp/err" | sed -E 's/^press time: *//; s/ \(.*//' || true)
    printf '%-26s %-30s %12s %14s %10s\n' "$label" "$answer" "$cache" "$decode" "${press:--}"
}

printf '%-26s %-30s %12s %14s %10s\n' "cache" "answer" "kv cache" "decode" "press"
run "full (no press)"
run "snapkv, budget 512" --press snapkv --budget 512
run "protokv, budget 512" --press protokv --budget 512
run "streamingllm, budget 512" --press streamingllm --budget 512
echo
echo "The correct answer is 4817. Gemma 3 270M has 3 full-attention layers (pressed) and 15"
echo "sliding-window layers (512 rows each, never pressed), so the whole-model cache shrinks less"
echo "than the full-attention layers do; see 'promptkv run --help-press' for every press and option."
