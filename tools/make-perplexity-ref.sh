#!/usr/bin/env bash
# Writes llama.cpp's perplexity on a fixed English text as a reference fixture
# for our own perplexity command (tests/fixtures/perplexity/gemma3-270m.ref;
# qwen2.5-coder-0.5b.ref and qwen2.5-coder-1.5b.ref with OUT=...).
#
# usage: tools/make-perplexity-ref.sh LLAMA_PERPLEXITY MODEL [TEXT]
#        OUT=tests/fixtures/perplexity/qwen2.5-coder-0.5b.ref tools/make-perplexity-ref.sh \
#            LLAMA_PERPLEXITY models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
#   LLAMA_PERPLEXITY  path of an already built llama-perplexity binary
#                     (this script never fetches or builds llama.cpp)
#   MODEL             the GGUF model, e.g. gemma-3-270m-q4_k_m.gguf
#   TEXT              default tests/data/english.txt
# environment:
#   OUT           output file (default tests/fixtures/perplexity/gemma3-270m.ref)
#   KV_TYPE       KV cache type for K and V (default f16, llama.cpp's default)
#   FLASH_ATTN    on|off (default on: what "auto" picks on a CPU-only build;
#                 pinned so the result does not depend on that choice). On the
#                 CPU a 512-token batch takes the tiled flash-attention kernel:
#                 f32 Q, K and V widened from the cache to f32, f32 softmax.
#                 With it on, an f32 cache is cast back to f16 before attention
#                 (src/llama-graph.cpp), so KV_TYPE=f32 only changes anything
#                 with FLASH_ATTN=off; the non-flash path rounds Q and the
#                 softmax weights to f16 for its f16 matrix products.
#   LLAMA_TOKENIZE  llama-tokenize binary (default: next to LLAMA_PERPLEXITY)
#   LLAMA_SOURCE    where the build came from, for the header
#                   (default: read "llama_cpp_python-X.Y.Z" off the binary's path)
#
# Settings: 512-token chunks, one chunk per batch, 2 threads, no GPU offload
# (-ngl 0 -dev none). llama-perplexity scores the second half of each chunk;
# with a fixed thread count and no GPU the numbers are reproducible.
#
# Output (one "key value" per line after three comment lines):
#   n_ctx, n_tokens, n_chunks, ppl (final estimate), ppl_err (its +/- value).
# llama-perplexity does not print the number of tokens, so n_tokens comes from
# llama-tokenize on the same text; it is checked against the chunk count.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 LLAMA_PERPLEXITY MODEL [TEXT]" >&2
    exit 2
fi
perplexity_bin=$1
model=$2
text=${3:-tests/data/english.txt}
out=${OUT:-tests/fixtures/perplexity/gemma3-270m.ref}
kv_type=${KV_TYPE:-f16}
flash_attn=${FLASH_ATTN:-on}
tokenize_bin=${LLAMA_TOKENIZE:-$(dirname "$perplexity_bin")/llama-tokenize}
n_ctx=512

for f in "$perplexity_bin" "$tokenize_bin"; do
    if [ ! -x "$f" ]; then
        echo "error: $f is not an executable file" >&2
        exit 1
    fi
done
for f in "$model" "$text"; do
    if [ ! -f "$f" ]; then
        echo "error: $f not found" >&2
        exit 1
    fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# "version: 0.5.0-dev (build 1, commit 0c1e570)" -> "1 (0c1e570), version 0.5.0-dev"
version_line=$("$perplexity_bin" --version 2>&1 | grep -m1 '^version:' || true)
build=$(echo "$version_line" |
    sed -nE 's/^version: *([^ ]+) *\(build ([0-9]+), commit ([0-9a-f]+)\).*/\2 (\3), version \1/p')
if [ -z "$build" ]; then
    echo "error: cannot read the build from '$perplexity_bin --version'" >&2
    exit 1
fi
source=${LLAMA_SOURCE:-$(echo "$perplexity_bin" |
    sed -nE 's/.*llama_cpp_python-([0-9][0-9.]*[0-9]).*/llama-cpp-python \1/p')}
if [ -n "$source" ]; then
    build="$build, from $source"
fi

flags=(-c "$n_ctx" -b "$n_ctx" -t 2 -ngl 0 -dev none -fa "$flash_attn"
       -ctk "$kv_type" -ctv "$kv_type")
log=$tmp/perplexity.log
echo "running llama-perplexity on $text (${flags[*]}) ..." >&2
if ! "$perplexity_bin" -m "$model" -f "$text" "${flags[@]}" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "error: llama-perplexity failed" >&2
    exit 1
fi

# "perplexity: calculating perplexity over 7 chunks, n_ctx=512, batch_size=512, n_seq=1"
chunks_line=$(grep -m1 -E 'calculating perplexity over [0-9]+ chunks' "$log" || true)
n_chunks=$(echo "$chunks_line" | sed -nE 's/.*over ([0-9]+) chunks.*/\1/p')
ctx_seen=$(echo "$chunks_line" | sed -nE 's/.*n_ctx=([0-9]+).*/\1/p')
# "Final estimate: PPL = 22.3961 +/- 1.46227"
final_line=$(grep -m1 'Final estimate: PPL = ' "$log" || true)
ppl=$(echo "$final_line" | sed -nE 's/.*PPL = ([0-9.]+) \+\/- ([0-9.]+).*/\1/p')
ppl_err=$(echo "$final_line" | sed -nE 's/.*PPL = ([0-9.]+) \+\/- ([0-9.]+).*/\2/p')
if [ -z "$n_chunks" ] || [ -z "$ppl" ] || [ -z "$ppl_err" ] || [ "$ctx_seen" != "$n_ctx" ]; then
    tail -n 20 "$log" >&2
    echo "error: unexpected llama-perplexity output (chunk line or final estimate missing)" >&2
    exit 1
fi

# llama.cpp's -f drops one trailing newline before tokenizing (common/arg.cpp);
# llama-tokenize reads the file verbatim, so give it the same text.
cp "$text" "$tmp/text"
if [ "$(tail -c 1 "$tmp/text" | od -An -tx1 | tr -d ' ')" = "0a" ]; then
    head -c -1 "$text" >"$tmp/text"
fi
ids=$("$tokenize_bin" -m "$model" -f "$tmp/text" --ids --log-disable 2>/dev/null)
n_tokens=$(echo "$ids" | tr ',' '\n' | grep -c '[0-9]' || true)
if [ "$n_tokens" -lt $((2 * n_ctx)) ] || [ $((n_tokens / n_ctx)) != "$n_chunks" ]; then
    echo "error: $n_tokens tokens do not give $n_chunks chunks of $n_ctx" >&2
    exit 1
fi

mkdir -p "$(dirname "$out")"
{
    echo "# llama-perplexity reference for $text"
    echo "# llama.cpp build: $build"
    echo "# command: llama-perplexity -m $(basename "$model") -f $text ${flags[*]}"
    echo "n_ctx $n_ctx"
    echo "n_tokens $n_tokens"
    echo "n_chunks $n_chunks"
    echo "ppl $ppl"
    echo "ppl_err $ppl_err"
} >"$out"
echo "wrote $out" >&2
cat "$out"
