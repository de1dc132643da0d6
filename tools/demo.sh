#!/usr/bin/env bash
# The main demo: a long document with one fact buried in its middle and a
# question about it, in the model's chat template, answered with the full KV
# cache and with compressed caches (SnapKV, ProtoKV, and StreamingLLM as the
# baseline that keeps only the start and the end), side by side: the answer,
# the whole model's cache before and after the press, the press's time and the
# decode speed. The question is part of what the press sees (query-aware), as
# when a user asks about a document they have just pasted.
#
# usage: tools/demo.sh PROMPTKV MODEL
# environment: THREADS (default: all CPUs), BUDGET (rows kept per KV head and
# layer, default 512), PARAGRAPHS (how many of tests/data/english.txt's 40
# paragraphs make the document, default 20: about 2,000 Qwen tokens, so the
# four prefills stay short on two cores), CHAT (on, the default, for an
# instruct model; off for a base model such as Gemma 3 270M: the question and
# the start of the answer follow the document as plain text)
set -euo pipefail
bin=$1
model=$2
threads=${THREADS:-$(nproc)}
budget=${BUDGET:-512}
paragraphs=${PARAGRAPHS:-20}
chat=${CHAT:-on}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the document: the first paragraphs of tests/data/english.txt with a note inserted after the middle one
awk -v RS= -v ORS='\n\n' -v n="$paragraphs" 'NR <= n { p[++k] = $0 } END {
    for (i = 1; i <= k; i++) {
        print p[i]
        if (i == int(k / 2)) print "A note for visitors: the locker code for the harbour museum is 4817. Please keep it safe."
    }
}' tests/data/english.txt > "$tmp/document.txt"
question="What is the locker code for the harbour museum?"
if [ "$chat" = on ]; then
    query=(-q " $question" --chat)
    layout="the model's chat template"
else
    query=(-q $'\nQuestion: '"$question"$'\nAnswer: The locker code for the harbour museum is')
    layout="plain text, the answer begun"
fi

echo "promptkv demo: a $(wc -w < "$tmp/document.txt")-word document with one fact in its middle, then the question"
echo "\"$question\" ($layout; the press sees the question: query-aware)."
echo "model: $model, $threads threads, compressed caches keep $budget rows per KV head in every pressed layer"
echo

run() {
    local label=$1
    shift
    "$bin" run -m "$model" -f "$tmp/document.txt" "${query[@]}" -n 24 -t "$threads" -c 8192 "$@" \
        > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    local answer before after decode press
    # one line of at most 50 bytes of valid UTF-8 without control characters, whatever the model wrote
    answer=$({ tr '\n\t\r' '   ' < "$tmp/out" | iconv -c -f UTF-8 -t UTF-8 | LC_ALL=C tr -d '\000-\037\177' |
        sed 's/  */ /g; s/^ //; s/ $//' | cut -c1-50 | iconv -c -f UTF-8 -t UTF-8; } || true)
    # "kv cache:        44.80 MiB full -> 3.05 MiB kept after the prompt (14.7x smaller)", or without a
    # press "kv cache:        44.80 MiB after the prompt (no press)"
    before=$(sed -nE 's/^kv cache: +([0-9.]+) MiB.*/\1 MiB/p' "$tmp/err")
    after=$(sed -nE 's/^kv cache: .*-> ([0-9.]+) MiB kept.*\(([0-9.]+x) smaller\).*/\1 MiB (\2)/p' "$tmp/err")
    press=$(sed -nE 's/^press time: +([0-9.]+ ms).*/\1/p' "$tmp/err")
    decode=$(sed -nE 's/^decode: .*, ([0-9.]+ tok\/s).*/\1/p' "$tmp/err")
    local found=no
    case "$answer" in *4817*) found=yes ;; esac
    printf '%-24s %-50s %-6s %10s %18s %10s %12s\n' "$label" "$answer" "$found" "$before" "${after:--}" \
        "${press:--}" "$decode"
    if [ -z "${prompt_line:-}" ]; then
        prompt_line=$(sed -nE 's/^prompt tokens: +//p' "$tmp/err")
    fi
    if [ -z "${layers_line:-}" ] && grep -q '^rows kept:' "$tmp/err"; then
        layers_line=$(sed -nE 's/^rows kept: +//p' "$tmp/err")
    fi
}

printf '%-24s %-50s %-6s %10s %18s %10s %12s\n' "cache" "answer" "4817?" "kv before" "kv after" "press" "decode"
run "full (no press)"
run "snapkv" --press snapkv --budget "$budget"
run "protokv" --press protokv --budget "$budget"
run "streamingllm (baseline)" --press streamingllm --budget "$budget"
echo
echo "prompt tokens: $prompt_line. The correct answer is 4817."
n_pressed=$(printf '%s\n' "$layers_line" | { grep -oE 'L[0-9]+ ' || true; } | wc -l)
sliding=$(printf '%s\n' "$layers_line" | sed -nE 's/.*; ([0-9]+) sliding-window layers.*/\1/p')
if [ -n "$sliding" ]; then
    echo "Layers with full attention (pressed): $n_pressed of $((n_pressed + sliding)); the other $sliding are"
    echo "sliding-window layers, never pressed (their cache is bounded by the window), so the whole cache"
    echo "shrinks less than the full-attention layers do."
else
    echo "Every one of this model's $n_pressed layers has full attention and is pressed, so the whole cache"
    echo "shrinks to the budget: 'kv after' is all the model keeps for decoding."
fi
echo "kv before/after: the cache after the prompt without and with the press; decode reads the kept rows."
echo "Every press and option: $bin run --help-press; which tokens a press keeps: $bin inspect --html."
