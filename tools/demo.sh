#!/usr/bin/env bash
# The main demo: the default model answers a prompt.
# usage: tools/demo.sh PROMPTKV MODEL
set -euo pipefail
bin=$1
model=$2
threads=${THREADS:-$(nproc)}

echo "== promptkv info"
"$bin" info "$model" | head -n 12
echo
echo "== promptkv run (greedy, $threads threads)"
"$bin" run -m "$model" -t "$threads" -n 64 \
    -p "The three primary colours of light are red, green and"
