#!/usr/bin/env bash
# llama.cpp and promptkv on the same GGUF, the same threads, in one run.
#
#   tools/bench-vs-llamacpp.sh LLAMA_BENCH_PATH MODEL [THREADS]
#
# Runs llama.cpp's llama-bench (-p 512 -n 128 -r 5) and `promptkv bench` with
# the same settings (random token ids, logits of the last prompt token only, a
# warmup run, 5 repetitions; docs/engine.md §6.3), then prints one table with
# both engines' tokens per second and the ratio promptkv / llama.cpp, and
# llama.cpp's build line. Both means are the mean of the repetitions' t/s
# (llama-bench's avg_ts); promptkv's median is shown too.
#
# Optional, in the environment:
#   PP=512 TG=128 REPS=5     test sizes and repetitions
#   DEPTH=16384 DTG=32       also decode DTG tokens after a DEPTH-token prompt:
#                            llama-bench -d DEPTH -p 0 -n DTG (full cache) against
#                            promptkv bench --depths DEPTH --depth-gen DTG for
#                            each press in PRESSES (default none)
#   PRESSES=none,snapkv:budget=1024
#   ROUNDS=1                 alternate the engines this many times (each round: llama.cpp's
#                            tests, then promptkv's); the table gives the mean over the rounds
#                            of each round's mean t/s, and each round's ratio
#   PP=0 TG=0                with DEPTH: only the depth tests
#   PROMPTKV=build/promptkv  the promptkv binary
#   NICE=10                  niceness of both runs (the machine may be shared)
#   LLAMA_ARGS="--poll 0"    extra llama-bench arguments (--poll only acts on builds without
#                            OpenMP; a GGML_OPENMP build's threads wait as OMP_WAIT_POLICY says)
#   OMP_WAIT_POLICY=passive  on a machine with more runnable threads than CPUs, spin-waiting
#                            OpenMP threads hold the CPU their partner needs to reach the
#                            barrier; passive makes llama.cpp's threads sleep, as promptkv's do
#
# It never fetches or builds llama.cpp: LLAMA_BENCH_PATH is an existing
# llama-bench binary; its directory is put on LD_LIBRARY_PATH for its shared
# libraries.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
llama_bench=$1
model=$2
threads=${3:-2}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-5}
DEPTH=${DEPTH:-}
DTG=${DTG:-32}
PRESSES=${PRESSES:-none}
ROUNDS=${ROUNDS:-1}
PROMPTKV=${PROMPTKV:-build/promptkv}
NICE=${NICE:-10}
LLAMA_ARGS=${LLAMA_ARGS:-}

[ -x "$llama_bench" ] || { echo "bench-vs-llamacpp: $llama_bench is not an executable llama-bench" >&2; exit 1; }
[ -r "$model" ] || { echo "bench-vs-llamacpp: cannot read model $model" >&2; exit 1; }
[ -x "$PROMPTKV" ] || { echo "bench-vs-llamacpp: $PROMPTKV not built (make)" >&2; exit 1; }

lib_dir=$(cd "$(dirname "$llama_bench")" && pwd)
export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) CPUs; threads $threads;" \
     "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $model"

# ---------------------------------------------------------------- the runs
# One round = llama.cpp's tests, then promptkv's same tests. With ROUNDS > 1 the engines
# alternate, so a change in the machine's load during the run hits both.
# append_csv SRC DST: SRC's rows (its header only when DST is still empty)
append_csv() { if [ -s "$2" ]; then tail -n +2 "$1" >> "$2"; else cat "$1" > "$2"; fi; }

llama_round() {
    if [ "$PP" != 0 ] || [ "$TG" != 0 ]; then
        echo "running: llama-bench -m $model -p $PP -n $TG -r $REPS -t $threads $LLAMA_ARGS -o csv" >&2
        # shellcheck disable=SC2086 # LLAMA_ARGS is a list of words
        nice -n "$NICE" "$llama_bench" -m "$model" -p "$PP" -n "$TG" -r "$REPS" -t "$threads" $LLAMA_ARGS -o csv \
            > "$tmp/one.csv" 2> "$tmp/llama.err" || { cat "$tmp/llama.err" >&2; exit 1; }
        append_csv "$tmp/one.csv" "$tmp/llama.csv"
    fi
    if [ -n "$DEPTH" ]; then
        echo "running: llama-bench -m $model -d $DEPTH -p 0 -n $DTG -r $REPS -t $threads $LLAMA_ARGS -o csv" >&2
        # shellcheck disable=SC2086
        nice -n "$NICE" "$llama_bench" -m "$model" -d "$DEPTH" -p 0 -n "$DTG" -r "$REPS" -t "$threads" $LLAMA_ARGS \
            -o csv > "$tmp/one.csv" 2> "$tmp/llama-depth.err" || { cat "$tmp/llama-depth.err" >&2; exit 1; }
        append_csv "$tmp/one.csv" "$tmp/llama.csv"
    fi
}

promptkv_round() {
    local pkv_args
    if [ "$PP" != 0 ] || [ "$TG" != 0 ]; then
        pkv_args=(-m "$model" -p "$PP" -n "$TG" -r "$REPS" -t "$threads" -o csv)
        echo "running: promptkv bench ${pkv_args[*]}" >&2
        nice -n "$NICE" "$PROMPTKV" bench "${pkv_args[@]}" > "$tmp/one.csv" 2> "$tmp/pkv.err" ||
            { cat "$tmp/pkv.err" >&2; exit 1; }
        append_csv "$tmp/one.csv" "$tmp/pkv.csv"
    fi
    if [ -n "$DEPTH" ]; then
        pkv_args=(-m "$model" -p 0 -n 0 --depths "$DEPTH" --depth-gen "$DTG" --presses "$PRESSES" -r "$REPS"
                  -t "$threads" -o csv)
        echo "running: promptkv bench ${pkv_args[*]}" >&2
        nice -n "$NICE" "$PROMPTKV" bench "${pkv_args[@]}" > "$tmp/one.csv" 2> "$tmp/pkv-depth.err" ||
            { cat "$tmp/pkv-depth.err" >&2; exit 1; }
        append_csv "$tmp/one.csv" "$tmp/pkv.csv"
    fi
}

: > "$tmp/llama.csv"
: > "$tmp/pkv.csv"
for ((round = 1; round <= ROUNDS; round++)); do
    echo "round $round/$ROUNDS: load average $(cut -d' ' -f1-3 /proc/loadavg)"
    llama_round
    promptkv_round
done

# ---------------------------------------------------------------- the table
# mawk has no CSV mode: split on commas outside double quotes.
awk_csv='
function split_csv(line, out,    n, i, c, field, quoted) {
    n = 0; field = ""; quoted = 0
    for (i = 1; i <= length(line); i++) {
        c = substr(line, i, 1)
        if (c == "\"") { quoted = !quoted; continue }
        if (c == "," && !quoted) { out[++n] = field; field = ""; continue }
        field = field c
    }
    out[++n] = field
    return n
}
function header(line, idx,    f, n, i) { n = split_csv(line, f); for (i = 1; i <= n; i++) idx[f[i]] = i }
'

awk "$awk_csv"'
FNR == 1 { file++; delete h; header($0, h); next }
file == 1 {
    split_csv($0, f)
    np = f[h["n_prompt"]]; ng = f[h["n_gen"]]; nd = f[h["n_depth"]]
    test = (np > 0) ? "pp" np : "tg" ng
    if (nd > 0) test = test "@d" nd
    k = ++llama_n[test]
    llama_ts[test, k] = f[h["avg_ts"]]
    llama_sd[test, k] = f[h["stddev_ts"]]
    build = "build: " f[h["build_commit"]] " (" f[h["build_number"]] ")"
    cpu = f[h["cpu_info"]]
    next
}
file == 2 {
    split_csv($0, f)
    test = f[h["test"]]; press = f[h["press"]]
    key = test SUBSEP press
    if (!(key in pkv_n)) { rows[++n_rows] = key; pkv_test[key] = test; pkv_press[key] = press }
    k = ++pkv_n[key]
    pkv_ts[key, k] = f[h["tps_mean"]]
    pkv_sd[key, k] = f[h["tps_stddev"]]
    pkv_med[key, k] = f[h["tps_median"]]
}
function mean_of(arr, key, n,    i, s) { s = 0; for (i = 1; i <= n; i++) s += arr[key, i]; return n ? s / n : 0 }
function max_of(arr, key, n,    i, m) { m = 0; for (i = 1; i <= n; i++) if (arr[key, i] + 0 > m) m = arr[key, i] + 0; return m }
function list_of(arr, key, n,    i, s) { s = ""; for (i = 1; i <= n; i++) s = s (i > 1 ? " / " : "") sprintf("%.2f", arr[key, i]); return s }
END {
    printf "\n| test | promptkv press | llama.cpp t/s | promptkv t/s | promptkv median | promptkv / llama.cpp | per round | best / best |\n"
    printf "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: |\n"
    for (i = 1; i <= n_rows; i++) {
        key = rows[i]; test = pkv_test[key]; n = pkv_n[key]; nl = llama_n[test]
        pm = mean_of(pkv_ts, key, n)
        lm = mean_of(llama_ts, test, nl)
        ratio = (nl > 0 && lm > 0) ? sprintf("%.2fx", pm / lm) : "-"
        rounds = ""
        for (r = 1; r <= n && r <= nl; r++)
            rounds = rounds (r > 1 ? ", " : "") sprintf("%.2fx", llama_ts[test, r] > 0 ? pkv_ts[key, r] / llama_ts[test, r] : 0)
        lcell = nl ? sprintf("%.2f (%s)", lm, list_of(llama_ts, test, nl)) : "-"
        if (nl == 1) lcell = sprintf("%.2f ± %.2f", lm, llama_sd[test, 1])
        pcell = (n == 1) ? sprintf("%.2f ± %.2f", pm, pkv_sd[key, 1]) : sprintf("%.2f (%s)", pm, list_of(pkv_ts, key, n))
        best = (nl > 0 && max_of(llama_ts, test, nl) > 0) ? \
            sprintf("%.2fx", max_of(pkv_ts, key, n) / max_of(llama_ts, test, nl)) : "-"
        printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", test, pkv_press[key], lcell, pcell, \
            list_of(pkv_med, key, n), ratio, (nl > 0) ? rounds : "-", best
    }
    printf "\nt/s: the mean of the repetitions (llama-bench avg_ts), then the mean over rounds (each round in\n"
    printf "brackets); the ratio is of those means; best / best: the fastest round of each engine\n"
    printf "llama.cpp %s (cpu_info %s)\n", build, cpu
}' "$tmp/llama.csv" "$tmp/pkv.csv"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
