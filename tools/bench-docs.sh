#!/usr/bin/env bash
# Re-runs every measurement behind docs/performance.md and docs/compression.md.
#
#   tools/bench-docs.sh [STEP...]          (make bench runs it with every step)
#
# Steps (default: all, in this order):
#   gemma-vs-llamacpp   Gemma 3 270M Q4_K_M: pp512 / tg128 against llama-bench
#   llama1b-vs-llamacpp Llama-3.2-1B shape Q8_0: pp512 / tg128 against llama-bench
#   gemma-depths        Gemma: decode ms/token at 1K..32K, none vs snapkv --budget 1024, one
#                       prefill per press (peak RSS, cache bytes, press share)
#   llama1b-depths      1B shape: decode ms/token at 1K, 4K, 16K, none vs snapkv --budget 1024
#                       (one prefill per depth, the press on a copy)
#   llama1b-press16k    1B shape: a 16K prefill with snapkv inside it (its peak RSS, press share)
#   llama1b-llamacpp-d16k  llama-bench -d 16384 -p 0 -n 32: llama.cpp's full-cache decode at 16K
#   llama1b-32k         1B shape: decode at 32K with snapkv --budget 1024 (long: a 32K prefill)
#   gemma-mem, llama1b-mem  longest prompt whose cache + activations fit in MEM_CAP, snapkv vs none
#
# Environment: LLAMA_BENCH (llama-bench binary; steps that need it are skipped without it),
# OUT (default out/bench), THREADS (default 2), NICE (default 10), REPS (default 5),
# MEM_CAP (default 8G), PROMPTKV (default build/promptkv).
# Models: models/gemma-3-270m-q4_k_m.gguf (make model) and models/llama-3.2-1b-q8_0.gguf
# (written here with promptkv synth when missing). Each step writes STEP.md (the command and
# its output), and, where it applies, STEP.csv and STEP.svg into OUT.
set -euo pipefail

PROMPTKV=${PROMPTKV:-build/promptkv}
OUT=${OUT:-out/bench}
THREADS=${THREADS:-2}
NICE=${NICE:-10}
REPS=${REPS:-5}
MEM_CAP=${MEM_CAP:-8G}
LLAMA_BENCH=${LLAMA_BENCH:-}
GEMMA=models/gemma-3-270m-q4_k_m.gguf
L1B=models/llama-3.2-1b-q8_0.gguf

[ -x "$PROMPTKV" ] || { echo "bench-docs: build first (make)" >&2; exit 1; }
mkdir -p "$OUT"

need_gemma() { [ -r "$GEMMA" ] || { echo "bench-docs: $GEMMA missing (make model)" >&2; exit 1; }; }
need_1b() {
    if [ ! -r "$L1B" ]; then
        mkdir -p models
        "$PROMPTKV" synth llama-3.2-1b --type q8_0 -o "$L1B"
    fi
}

# run STEP COMMAND...: records the machine, the command and its output in OUT/STEP.md
run() {
    local step=$1
    shift
    local md="$OUT/$step.md"
    {
        echo "# $step"
        echo
        echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) CPUs," \
             "promptkv $(git rev-parse --short HEAD 2>/dev/null || echo '?')," \
             "$(date -u +%Y-%m-%dT%H:%MZ), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo
        echo '```'
        echo "$*"
        echo '```'
        echo
    } > "$md"
    echo "bench-docs: $step: $*" >&2
    local t0=$SECONDS
    nice -n "$NICE" "$@" >> "$md" 2> "$OUT/$step.log"
    {
        echo
        echo "wall time $((SECONDS - t0)) s, load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    } >> "$md"
}

vs_llamacpp() {
    local step=$1 model=$2
    if [ -z "$LLAMA_BENCH" ]; then echo "bench-docs: $step skipped (set LLAMA_BENCH)" >&2; return; fi
    run "$step" env NICE=0 PROMPTKV="$PROMPTKV" REPS="$REPS" tools/bench-vs-llamacpp.sh "$LLAMA_BENCH" "$model" "$THREADS"
}

step_gemma-vs-llamacpp() { need_gemma; vs_llamacpp gemma-vs-llamacpp "$GEMMA"; }
step_llama1b-vs-llamacpp() { need_1b; vs_llamacpp llama1b-vs-llamacpp "$L1B"; }

step_gemma-depths() {
    need_gemma
    run gemma-depths "$PROMPTKV" bench -m "$GEMMA" -p 0 -n 0 --depths 1024,4096,16384,32768 --depth-gen 32 \
        -r "$REPS" -t "$THREADS" --press snapkv --budget 1024 --separate-prefill \
        --csv "$OUT/gemma-depths.csv" --svg "$OUT/gemma-depths.svg"
}

step_llama1b-depths() {
    need_1b
    run llama1b-depths "$PROMPTKV" bench -m "$L1B" -p 0 -n 0 --depths 1024,4096,16384 --depth-gen 32 \
        -r "$REPS" -t "$THREADS" --press snapkv --budget 1024 \
        --csv "$OUT/llama1b-depths.csv" --svg "$OUT/llama1b-depths.svg"
}

step_llama1b-press16k() {
    need_1b
    run llama1b-press16k "$PROMPTKV" bench -m "$L1B" -p 0 -n 0 --depths 16384 --depth-gen 32 -r 3 -t "$THREADS" \
        --presses snapkv:budget=1024 --separate-prefill --csv "$OUT/llama1b-press16k.csv"
}

step_llama1b-llamacpp-d16k() {
    need_1b
    if [ -z "$LLAMA_BENCH" ]; then echo "bench-docs: llama1b-llamacpp-d16k skipped (set LLAMA_BENCH)" >&2; return; fi
    run llama1b-llamacpp-d16k env LD_LIBRARY_PATH="$(dirname "$LLAMA_BENCH")" "$LLAMA_BENCH" -m "$L1B" \
        -d 16384 -p 0 -n 32 -r 3 -t "$THREADS"
}

step_llama1b-32k() {
    need_1b
    run llama1b-32k "$PROMPTKV" bench -m "$L1B" -p 0 -n 0 --depths 32768 --depth-gen 32 -r 3 -t "$THREADS" \
        --presses snapkv:budget=1024 --separate-prefill --csv "$OUT/llama1b-32k.csv"
}

step_gemma-mem() {
    need_gemma
    run gemma-mem "$PROMPTKV" bench -m "$GEMMA" -t "$THREADS" --mem "$MEM_CAP" --mem-probe 4096,8192 \
        --presses none,snapkv:budget=1024
}

step_llama1b-mem() {
    need_1b
    run llama1b-mem "$PROMPTKV" bench -m "$L1B" -t "$THREADS" --mem "$MEM_CAP" --mem-probe 2048,4096 \
        --presses none,snapkv:budget=1024
}

ALL=(gemma-vs-llamacpp llama1b-vs-llamacpp gemma-depths llama1b-depths llama1b-press16k llama1b-llamacpp-d16k
     gemma-mem llama1b-mem llama1b-32k)
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=("${ALL[@]}")
for s in "${steps[@]}"; do
    if ! declare -F "step_$s" > /dev/null; then
        echo "bench-docs: unknown step '$s' (steps: ${ALL[*]})" >&2
        exit 2
    fi
done
for s in "${steps[@]}"; do "step_$s"; done
echo "bench-docs: results in $OUT" >&2
