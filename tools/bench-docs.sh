#!/usr/bin/env bash
# Re-runs every measurement behind docs/performance.md and docs/compression.md.
#
#   tools/bench-docs.sh [STEP...]          (make bench runs it with every step)
#
# Steps (default: all but the last two, in this order):
#   gemma-vs-llamacpp        Gemma 3 270M Q4_K_M: pp512 / tg64 against llama-bench, ROUNDS alternating rounds,
#                            llama.cpp's OpenMP threads passive (OMP_WAIT_POLICY=passive)
#   qwen05-vs-llamacpp       the same on Qwen2.5-Coder-0.5B-Instruct Q4_K_M
#   qwen05-prefill-fa        Qwen 0.5B: pp4096 and pp16384 against llama-bench -fa on, one round
#   qwen05-prefill-fa-32k    the same at pp32768 (about half an hour; only when named)
#   threads                  build/bench-threads on Qwen 0.5B and the 1B shape: fork-join latency,
#                            joins per decode step and prefill, 1 against THREADS threads
#   gemma-vs-llamacpp-spin   the same with OpenMP's default spin-waiting
#   llama1b-vs-llamacpp      the same on the Llama-3.2-1B shape, Q8_0 (llama1b-vs-llamacpp-spin: spinning)
#   llama1b-depths           1B shape: decode ms/token after 1K..16K-token prompts, none / snapkv / protokv
#                            (budget 1024; one prefill per length, each press on a copy of its cache)
#   llama1b-vs-llamacpp-d16k llama-bench -d 16384 -p 0 -n 32 (full cache) against promptkv none and snapkv
#   gemma-depths             Gemma: the same curve from 1K to 32K
#   gemma-mem, llama1b-mem   longest prompt whose cache + activations fit in MEM_CAP, snapkv vs none
#   llama1b-mem-lean         the same for snapkv with Q8_0 rows and an f16 or Q8_0 residual stream, with
#                            f16 or Q8_0 rows and the f32 residual stream spilled to a file in OUT, and
#                            llama.cpp's full f16 cache (tools/llamacpp-memfit.sh; LLAMA_BENCH) at the same probes
#   gemma-roofline, qwen05-roofline, llama1b-roofline  tg64 from an empty cache as a fraction of the bandwidth bound
#   decode-layout            tg64 of the three models with the weights interleaved at load and with --gguf-layout,
#                            alternating, with the AVX-512 and the AVX2 kernels, ROUNDS rounds
#   llama1b-vs-llamacpp-spin the 1B comparison with spinning OpenMP threads (only when named)
#   llama1b-32k              1B shape at 1K and 32K, none and snapkv (long: a 32K prefill; only when named)
#   peak                     one thread's instruction ceilings: the int8 dot product the weight kernels
#                            use and the f32 FMA of attention (build/bench-dot peak)
#   qwen05-step-budget, llama1b-step-budget  the most t/s an 8-stream step could give with the weight kernels'
#                            measured rates and attention at the FMA ceiling (tools/step-budget.py), and what
#                            4x the one-stream rates of docs/server.md would need
#   qwen05-streams, llama1b-streams  1, 2, 4, 8 concurrent streams decoding together (pkv_batch_decode)
#                            against one by one, full cache and snapkv (budget 128), 512-token prompts
#   qwen05-streams-paired, llama1b-streams-paired  2, 4, 8 streams batched against one stream, timed in
#                            turns within every repetition, with the ratio repetition by repetition
#   qwen05-serve             the server: promptkv batched, --no-batch and llama-server -np N (LLAMA_SERVER;
#                            only promptkv without it), 1/2/4/8 streams and a 4K-token arrival
#   llama1b-serve            the same on the 1B shape, without the arrival
#   qwen05-serve-snapkv, llama1b-serve-snapkv  the same with promptkv's requests compressed (snapkv, budget 128)
#                            on longer prompts, without the arrival
#
# Environment: LLAMA_BENCH (llama-bench binary; steps that need it are skipped without it), LLAMA_SERVER
# and LLAMA_SERVER_ARGS (more llama-server flags, e.g. --no-repack),
# OUT (default out/bench), THREADS (default 2), NICE (default 10), REPS (default 3), ROUNDS (default 2),
# MEM_CAP (default 8G), PROMPTKV (default build/promptkv).
# Models: models/gemma-3-270m-q4_k_m.gguf (make model) and models/llama-3.2-1b-q8_0.gguf
# (written here with promptkv synth when missing). Each step writes STEP.md (the command and
# its output), and, where it applies, STEP.csv and STEP.svg into OUT.
set -euo pipefail

PROMPTKV=${PROMPTKV:-build/promptkv}
OUT=${OUT:-out/bench}
THREADS=${THREADS:-2}
NICE=${NICE:-10}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-2}
MEM_CAP=${MEM_CAP:-8G}
LLAMA_BENCH=${LLAMA_BENCH:-}
GEMMA=models/gemma-3-270m-q4_k_m.gguf
L1B=models/llama-3.2-1b-q8_0.gguf
Q05=models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
LLAMA_SERVER=${LLAMA_SERVER:-}

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

# vs_llamacpp STEP MODEL WAIT [VAR=VALUE...]: tools/bench-vs-llamacpp.sh in ROUNDS alternating rounds.
# OMP_WAIT_POLICY=passive: llama.cpp's OpenMP threads sleep at barriers instead of spinning, as
# promptkv's pool does; on a machine with more runnable threads than CPUs a spinning thread holds a
# CPU its partner needs (see docs/performance.md). WAIT "default" leaves OpenMP's own policy.
vs_llamacpp() {
    local step=$1 model=$2 wait=$3
    shift 3
    if [ -z "$LLAMA_BENCH" ]; then echo "bench-docs: $step skipped (set LLAMA_BENCH)" >&2; return; fi
    [ "$wait" = default ] && wait=
    run "$step" env ${wait:+OMP_WAIT_POLICY=$wait} NICE=0 PROMPTKV="$PROMPTKV" REPS="$REPS" ROUNDS="$ROUNDS" \
        PP=512 TG=64 "$@" tools/bench-vs-llamacpp.sh "$LLAMA_BENCH" "$model" "$THREADS"
}

step_gemma-vs-llamacpp() { need_gemma; vs_llamacpp gemma-vs-llamacpp "$GEMMA" passive; }
need_q05() { [ -r "$Q05" ] || { echo "bench-docs: $Q05 missing (make model)" >&2; exit 1; }; }
step_qwen05-vs-llamacpp() { need_q05; vs_llamacpp qwen05-vs-llamacpp "$Q05" passive; }
# long prefills: llama.cpp with flash attention on (its tiled attention), one round, one repetition
step_qwen05-prefill-fa() {
    need_q05
    vs_llamacpp qwen05-prefill-fa "$Q05" passive PP=4096,16384 TG=0 REPS=1 ROUNDS=1 LLAMA_ARGS="-fa on"
}
step_qwen05-prefill-fa-32k() {
    need_q05
    vs_llamacpp qwen05-prefill-fa-32k "$Q05" passive PP=32768 TG=0 REPS=1 ROUNDS=1 LLAMA_ARGS="-fa on"
}
step_gemma-vs-llamacpp-spin() { need_gemma; vs_llamacpp gemma-vs-llamacpp-spin "$GEMMA" default; }
step_llama1b-vs-llamacpp() { need_1b; vs_llamacpp llama1b-vs-llamacpp "$L1B" passive; }
step_llama1b-vs-llamacpp-spin() { need_1b; vs_llamacpp llama1b-vs-llamacpp-spin "$L1B" default; }

# decode from an empty cache against the memory-bandwidth bound (weights + cache bytes per token
# over the measured read bandwidth)
step_gemma-roofline() {
    need_gemma
    run gemma-roofline "$PROMPTKV" bench -m "$GEMMA" -p 0 -n 64 -r "$REPS" -t "$THREADS"
}
step_qwen05-roofline() {
    need_q05
    run qwen05-roofline "$PROMPTKV" bench -m "$Q05" -p 0 -n 64 -r "$REPS" -t "$THREADS"
}
step_llama1b-roofline() {
    need_1b
    run llama1b-roofline "$PROMPTKV" bench -m "$L1B" -p 0 -n 64 -r "$REPS" -t "$THREADS"
}

# llama.cpp's full-cache decode after a 16K prompt against promptkv's, none and snapkv, in one run
step_llama1b-vs-llamacpp-d16k() {
    need_1b
    vs_llamacpp llama1b-vs-llamacpp-d16k "$L1B" passive PP=0 TG=0 DEPTH=16384 DTG=32 ROUNDS=1 \
        PRESSES=none,snapkv:budget=1024
}

# decode ms/token against prompt length: one prefill per length, each press on a copy of its cache
PRESSES_CMP=none,snapkv:budget=1024,protokv:budget=1024
step_llama1b-depths() {
    need_1b
    run llama1b-depths "$PROMPTKV" bench -m "$L1B" -p 0 -n 0 --depths 1024,2048,4096,8192,16384 --depth-gen 32 \
        -r "$REPS" -t "$THREADS" --presses "$PRESSES_CMP" \
        --csv "$OUT/llama1b-depths.csv" --svg "$OUT/llama1b-depths.svg"
}

step_gemma-depths() {
    need_gemma
    run gemma-depths "$PROMPTKV" bench -m "$GEMMA" -p 0 -n 0 --depths 1024,2048,4096,8192,16384,32768 \
        --depth-gen 32 -r "$REPS" -t "$THREADS" --presses "$PRESSES_CMP" \
        --csv "$OUT/gemma-depths.csv" --svg "$OUT/gemma-depths.svg"
}

# one thread's instruction ceilings, against which the kernels' rates are read (docs/server.md)
step_peak() { run peak build/bench-dot peak; }

# the 8-stream step's bound from the kernels' rates (docs/server.md "What bounds the batched step"); the
# one-stream rates are the server's, at the host's slow and fast memory (docs/server.md)
step_qwen05-step-budget() {
    need_q05
    run qwen05-step-budget python3 tools/step-budget.py "$Q05" --promptkv "$PROMPTKV" --threads "$THREADS" \
        --one-stream 86.6 123.4 133.0
}
step_llama1b-step-budget() {
    need_1b
    run llama1b-step-budget python3 tools/step-budget.py "$L1B" --promptkv "$PROMPTKV" --threads "$THREADS" \
        --one-stream 26.7 44.2
}

# the thread pool: fork-join latency, joins per decode step and prefill, 1..THREADS threads
step_threads() {
    need_1b
    need_q05
    run threads-qwen05 build/bench-threads -t "$THREADS" -m "$Q05"
    run threads-llama1b build/bench-threads -t "$THREADS" -m "$L1B"
}

step_llama1b-32k() {
    need_1b
    run llama1b-32k "$PROMPTKV" bench -m "$L1B" -p 0 -n 0 --depths 1024,32768 --depth-gen 32 -r "$REPS" \
        -t "$THREADS" --presses none,snapkv:budget=1024 --csv "$OUT/llama1b-32k.csv"
}

step_gemma-mem() {
    need_gemma
    run gemma-mem "$PROMPTKV" bench -m "$GEMMA" -p 0 -n 0 -t "$THREADS" --mem "$MEM_CAP" --mem-probe 4096,8192 \
        --presses none,snapkv:budget=1024
}

step_llama1b-mem() {
    need_1b
    run llama1b-mem "$PROMPTKV" bench -m "$L1B" -p 0 -n 0 -t "$THREADS" --mem "$MEM_CAP" --mem-probe 2048,4096 \
        --presses none,snapkv:budget=1024
}

step_llama1b-mem-lean() {
    need_1b
    local r
    for r in f16 q8_0; do
        run "llama1b-mem-lean-$r" "$PROMPTKV" bench -m "$L1B" -p 0 -n 0 -t "$THREADS" --mem "$MEM_CAP" \
            --mem-probe 2048,4096 --presses snapkv:budget=1024 --cache-type q8_0 --residual-type "$r"
    done
    # the f32 residual stream in a spill file on disk (OUT: a directory on disk, not tmpfs)
    for c in f16 q8_0; do
        run "llama1b-mem-spill-$c" "$PROMPTKV" bench -m "$L1B" -p 0 -n 0 -t "$THREADS" --mem "$MEM_CAP" \
            --mem-probe 2048,4096 --presses snapkv:budget=1024 --cache-type "$c" --residual-spill "$OUT"
    done
    if [ -n "${LLAMA_BENCH:-}" ]; then
        run llama1b-mem-llamacpp tools/llamacpp-memfit.sh "$LLAMA_BENCH" "$L1B" 2048 4096 \
            "$(numfmt --from=iec --to-unit=1Mi "$MEM_CAP")" "$THREADS"
    else
        echo "bench-docs: llama1b-mem-lean: LLAMA_BENCH not set, llama.cpp's half skipped" >&2
    fi
}

# decode with the legacy weights interleaved by 8 rows at load (the default, docs/engine.md §2.5)
# against the file's row layout (--gguf-layout), the same binary, alternating, ROUNDS rounds
step_decode-layout() {
    need_q05
    need_gemma
    need_1b
    local cmd="for r in \$(seq $ROUNDS); do for s in avx512 avx2; do for m in $Q05 $GEMMA $L1B; do"
    cmd+=" for l in --gguf-layout ''; do echo \"== \$m \$s \${l:-interleaved} round \$r\";"
    cmd+=" $PROMPTKV bench -m \$m -p 0 -n 64 -r $REPS -t $THREADS --simd \$s \$l; done; done; done; done"
    run decode-layout bash -c "$cmd"
}

# concurrent streams: batched steps against the same streams decoded one by one, in the library
streams() {
    local step=$1 model=$2
    run "$step" "$PROMPTKV" bench -m "$model" -p 0 -n 0 --streams 1,2,4,8 --stream-depth 512 --depth-gen 32 \
        -r "$REPS" -t "$THREADS" --presses none,snapkv:budget=128 --csv "$OUT/$step.csv"
}
step_qwen05-streams() {
    need_q05
    streams qwen05-streams "$Q05"
}
step_llama1b-streams() { need_1b; streams llama1b-streams "$L1B"; }

# 2, 4 and 8 streams batched against one stream, the two in turns within every repetition (the ratio
# repetition by repetition: the host's memory speed moves between runs, and both sides meet the same one)
streams_paired() {
    local step=$1 model=$2
    run "$step" "$PROMPTKV" bench -m "$model" -p 0 -n 0 --streams 2,4,8 --paired --stream-depth 512 --depth-gen 32 \
        -r "$REPS" -t "$THREADS" --presses none,snapkv:budget=128 --csv "$OUT/$step.csv"
}
step_qwen05-streams-paired() {
    need_q05
    streams_paired qwen05-streams-paired "$Q05"
}
step_llama1b-streams-paired() { need_1b; streams_paired llama1b-streams-paired "$L1B"; }

# the server against llama-server on the same GGUF and threads, in one run
step_qwen05-serve() {
    need_q05
    run qwen05-serve python3 tools/serve-bench.py --promptkv "$PROMPTKV" --model "$Q05" --threads "$THREADS" \
        --streams 1,2,4,8 --tokens 64 --prompt-tokens 256 --arrival ${LLAMA_SERVER:+--llama-server "$LLAMA_SERVER"} \
        ${LLAMA_SERVER_ARGS:+"--llama-args=$LLAMA_SERVER_ARGS"} \
        --json "$OUT/qwen05-serve.json"
}

step_llama1b-serve() {
    need_1b
    # the synthetic model's vocabulary makes about 1.4 tokens of a character: 256 characters of text are
    # about 350 tokens, and each slot gets 1024
    run llama1b-serve python3 tools/serve-bench.py --promptkv "$PROMPTKV" --model "$L1B" --threads "$THREADS" \
        --streams 1,2,4,8 --tokens 64 --prompt-tokens 64 --ctx 1024 ${LLAMA_SERVER:+--llama-server "$LLAMA_SERVER"} \
        ${LLAMA_SERVER_ARGS:+"--llama-args=$LLAMA_SERVER_ARGS"} --json "$OUT/llama1b-serve.json"
}

# the same with every promptkv request compressed (SnapKV, 128 rows per head) on longer prompts, so that
# most of each prompt is pressed away; llama-server keeps its full cache
SERVE_SNAPKV='{"press": "snapkv", "budget": 128}'
step_qwen05-serve-snapkv() {
    need_q05
    run qwen05-serve-snapkv python3 tools/serve-bench.py --promptkv "$PROMPTKV" --model "$Q05" --threads "$THREADS" \
        --streams 1,2,4,8 --tokens 64 --prompt-tokens 512 --press "$SERVE_SNAPKV" \
        ${LLAMA_SERVER:+--llama-server "$LLAMA_SERVER"} ${LLAMA_SERVER_ARGS:+"--llama-args=$LLAMA_SERVER_ARGS"} \
        --json "$OUT/qwen05-serve-snapkv.json"
}
step_llama1b-serve-snapkv() {
    need_1b
    # 128 "tokens" of text are about 700 tokens of the synthetic vocabulary (see llama1b-serve)
    run llama1b-serve-snapkv python3 tools/serve-bench.py --promptkv "$PROMPTKV" --model "$L1B" --threads "$THREADS" \
        --streams 1,2,4,8 --tokens 64 --prompt-tokens 128 --ctx 1024 --press "$SERVE_SNAPKV" \
        ${LLAMA_SERVER:+--llama-server "$LLAMA_SERVER"} ${LLAMA_SERVER_ARGS:+"--llama-args=$LLAMA_SERVER_ARGS"} \
        --json "$OUT/llama1b-serve-snapkv.json"
}

ALL=(gemma-vs-llamacpp gemma-vs-llamacpp-spin qwen05-vs-llamacpp llama1b-vs-llamacpp llama1b-depths
     llama1b-vs-llamacpp-d16k gemma-depths gemma-mem llama1b-mem llama1b-mem-lean gemma-roofline qwen05-roofline llama1b-roofline decode-layout
     qwen05-prefill-fa threads peak qwen05-step-budget llama1b-step-budget qwen05-streams llama1b-streams qwen05-streams-paired llama1b-streams-paired
     qwen05-serve llama1b-serve qwen05-serve-snapkv
     llama1b-serve-snapkv)
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
