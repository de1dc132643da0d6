#!/usr/bin/env bash
# Reference token ids from llama.cpp for the real-model tokenizer test.
#
# Usage: tools/make-tokenizer-ref-llamacpp.sh LLAMA_TOKENIZE MODEL [INPUTS] > tests/fixtures/tokenizer/gemma3-270m.ref
#        tools/make-tokenizer-ref-llamacpp.sh LLAMA_TOKENIZE models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
#            tests/fixtures/tokenizer/qwen2.5-coder.inp > tests/fixtures/tokenizer/qwen2.5-coder.ref
#
#   LLAMA_TOKENIZE  path of a built llama-tokenize binary (this script does not
#                   fetch or build llama.cpp)
#   MODEL           the GGUF file (models/gemma-3-270m-q4_k_m.gguf)
#   INPUTS          one escaped string per line (default
#                   tests/fixtures/tokenizer/gemma3-270m.inp; qwen2.5-coder.inp for
#                   Qwen2.5-Coder, both written by tools/make-tokenizer-fixtures.py):
#                   printable ASCII as is, '\\' for a backslash, \xHH for any other byte
#
# Output: the format of the other .ref files (see make-tokenizer-fixtures.py):
#   T <escaped text>, then one line per mode "<add_special><parse_special> <ids>".
# Each string is written to a file byte for byte and given to llama-tokenize
# with -f and --no-escape; --no-bos and --no-parse-special select the modes.
set -euo pipefail

if [ $# -lt 2 ]; then
    sed -n '4,14p' "$0" >&2
    exit 2
fi
tokenize=$1
model=$2
inputs=${3:-tests/fixtures/tokenizer/gemma3-270m.inp}
version=${LLAMA_CPP_VERSION:-"0c1e570 (llama-cpp-python 0.3.36)"}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# token ids from llama.cpp ${version} llama-tokenize --ids for $(basename "$model")"
while IFS= read -r line || [ -n "$line" ]; do
    # \xHH and \\ are exactly the escapes printf %b understands here
    printf '%b' "$line" > "$tmp/prompt"
    printf 'T\t%s\n' "$line"
    for mode in 11 10 01 00; do
        flags=()
        [ "${mode:0:1}" = 0 ] && flags+=(--no-bos)
        [ "${mode:1:1}" = 0 ] && flags+=(--no-parse-special)
        ids=$("$tokenize" -m "$model" -f "$tmp/prompt" --no-escape --ids --log-disable \
                "${flags[@]}" 2>/dev/null | tail -n 1)
        case $ids in
            \[*\]) ;;
            *) echo "llama-tokenize failed on: $line" >&2; exit 1 ;;
        esac
        ids=${ids#[}
        ids=${ids%]}
        printf '%s\t%s\n' "$mode" "${ids//, / }"
    done
done < "$inputs"
