#!/usr/bin/env bash
# promptkv eval end to end on a tiny fixture model:
#   1. smoke: every task, two presses, two budgets, both modes; checks the files it writes
#   2. resume: a run killed with SIGKILL (plus a torn last line) and resumed ends with the
#      same results and summary as an uninterrupted run
#   3. MPI (when an MPI build is given): mpirun -np 2 gives the same files as one process
# usage: tests/eval-smoke.sh PROMPTKV [MPI_PROMPTKV]     ends with "N passed, N failed"
# (without MPI_PROMPTKV the MPI part is skipped and says so; given but missing, it fails)
set -u
bin=${1:-build/promptkv}
mpi_bin=${2:-}
model=tests/fixtures/models/tiny-gemma3-f32.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); echo "ok   eval_smoke_$1"; }
bad() { fail=$((fail + 1)); echo "FAIL eval_smoke_$1: $2"; }
check() { # NAME CONDITION-COMMAND...
    local name=$1
    shift
    if "$@"; then ok "$name"; else bad "$name" "$*"; fi
}

# the result lines without their timings (they differ between runs)
no_times() { sed 's/,"time":{[^}]*}}$/}/' "$1"; }
lines() { wc -l < "$1" | tr -d ' '; }
same_results() { cmp -s <(no_times "$1/results.jsonl") <(no_times "$2/results.jsonl"); }
same_summary() { cmp -s "$1/summary.csv" "$2/summary.csv"; }

# ---------------------------------------------------------------- 0. bad input: one-line errors, exit 2
bad_input() { # NAME PATTERN ARGS...
    local name=$1 pattern=$2
    shift 2
    local err code
    err=$("$bin" eval "$@" 2>&1 > /dev/null)
    code=$?
    if [ "$code" = 2 ] && printf '%s' "$err" | grep -Eq -- "$pattern" && [ "$(printf '%s\n' "$err" | grep -c error)" = 1 ]; then
        ok "$name"
    else
        bad "$name" "exit $code, stderr: $err"
    fi
}
bad_input no_model 'model is required' --tasks vt
bad_input unknown_task "unknown task 'frob'" -m "$model" --tasks frob
bad_input unknown_press "unknown press 'frob'" -m "$model" --press snapkv,frob
bad_input budget_le_window 'budget 32 must be larger than the observation window 32' -m "$model" --budgets 32
bad_input bad_ratio 'ratios must be in' -m "$model" --ratios 1.5
bad_input bad_mode 'query_agnostic and/or query_aware' -m "$model" --mode both
bad_input bad_length 'lengths expects an integer' -m "$model" --lengths 1k
bad_input resume_and_force 'at most one of --resume and --force' -m "$model" --resume --force
bad_input unknown_flag "unknown option '--frob'" -m "$model" --frob
bad_input ratio_press_not_run "ratio-presses: 'h2o' is not among the presses" -m "$model" --press snapkv --ratio-presses h2o
"$bin" eval --help | grep -q 'usage: promptkv eval' && ok help || bad help "no usage"
"$bin" eval --list-tasks | grep -q 'niah_multikey_3' && ok list_tasks || bad list_tasks "no task list"

# ---------------------------------------------------------------- 1. smoke
out=$tmp/runs/smoke # a missing parent is created (as mkdir -p)
"$bin" eval -m "$model" --tasks all --lengths 2048 --samples 1 --niah-lengths 512 --niah-depths 50 \
    --press snapkv,streamingllm --budgets 48,96 --window 16 --mode query_agnostic,query_aware \
    --agree-k 4 -t 1 -o "$out" > "$tmp/smoke.log" 2>&1
code=$?
check exit_code [ "$code" = 0 ]
# 15 tasks, and 2 multi-question tasks of 4 questions each, x 2 modes x (full + 2 presses x 2 budgets)
check line_count [ "$(lines "$out/results.jsonl")" = 230 ]
check whole_lines [ "$(grep -c '^{"key":".*}}$' "$out/results.jsonl")" = 230 ]
for t in niah_single_1 niah_single_2 niah_single_3 niah_multikey_1 niah_multikey_2 niah_multikey_3 \
    niah_multivalue niah_multiquery vt cwe fwe longeval_lines niah_passkey_noise niah_passkey_essay niah_classic; do
    [ "$(grep -c "\"task\":\"$t\"" "$out/results.jsonl")" = 10 ] || bad "task_$t" "not 10 lines"
done
for t in niah_multiquestion longeval_multiquestion; do
    [ "$(grep -c "\"task\":\"$t\"" "$out/results.jsonl")" = 40 ] || bad "task_$t" "not 40 lines"
    for q in 0 1 2 3; do
        [ "$(grep -c "\"key\":\"$t/2048/0/q$q/" "$out/results.jsonl")" = 10 ] || bad "task_${t}_q$q" "not 10 lines"
    done
done
ok tasks_present
# a context's later questions in query-agnostic mode read the prefill its first one left
check shared_prefill [ "$(grep -c '"prefill_shared":true' "$out/results.jsonl")" = 30 ]
check configs [ "$(grep -c '"config":"snapkv/b48"' "$out/results.jsonl")" = 46 ]
check modes [ "$(grep -c '"mode":"query_aware"' "$out/results.jsonl")" = 115 ]
check full_agrees [ "$(grep '"config":"full"' "$out/results.jsonl" | grep -c '"agree_top1":1,"kl":0,')" = 46 ]
check needle_retention [ "$(grep -c '"needle_kept_layers":\[{"layer":5,' "$out/results.jsonl")" -ge 100 ]
check summary_md grep -q '^| config | niah_single_1 |' "$out/summary.md"
check summary_md_costs grep -q 'decode ms/token' "$out/summary.md"
check summary_csv_header grep -q '^mode,task,length,config,press,budget,ratio,n,score,full_score,relative,' "$out/summary.csv"
check timing_csv grep -q '^query_aware,snapkv/b96,snapkv,96,' "$out/timing.csv"
check niah_csv grep -q '^512,50,.*,1,snapkv,48,0,query_agnostic,niah_classic$' "$out/niah_tiny-gemma3-f32_snapkv_48.csv"
for f in accuracy_query_agnostic.svg accuracy_query_aware.svg heatmap_niah_classic_query_aware.svg \
    heatmap_niah_passkey_noise_query_agnostic.svg; do
    [ -s "$out/$f" ] && head -c 4 "$out/$f" | grep -q '<svg' && tail -n 1 "$out/$f" | grep -q '</svg>' ||
        bad "svg_$f" "missing or malformed"
done
ok svg_files
check run_manifest grep -q '"model":"tiny-gemma3-f32"' "$out/run.json"
# tools/eval-compare.py over the lines: all of them, a range of samples (the run has sample 0 only), a bad range
compare() { python3 tools/eval-compare.py "$out/results.jsonl" --cost "$@" 2>&1; }
check compare_cost grep -q '^result lines 230,' <(compare)
check compare_samples grep -q '^result lines 230,' <(compare --samples 0-0)
check compare_samples_none grep -q 'no result lines' <(compare --samples 1-3)
check compare_samples_bad grep -q "wants A-B (sample indices), got '1-x'" <(compare --samples 1-x)
# a second run into the same directory must not clobber it
"$bin" eval -m "$model" --tasks vt -o "$out" > /dev/null 2> "$tmp/err"
code=$?
check refuses_existing [ "$code" = 1 ]
check refuses_existing_message grep -q 'already holds results' "$tmp/err"
"$bin" eval -m "$model" --report-only -o "$out" > /dev/null 2>&1
check report_only same_summary "$out" "$out"

# ProtoKV in a sweep; --ratio-presses: baselines at the budgets only
out=$tmp/ratio_presses
"$bin" eval -m "$model" --tasks niah_single_1 --lengths 1024 --samples 1 --press protokv,streamingllm --budgets 48 \
    --ratios 0.5 --ratio-presses protokv --window 16 --agree-k 4 -t 1 -o "$out" > /dev/null 2>&1
check ratio_presses_run [ $? = 0 ]
check ratio_presses_configs [ "$(grep -o '"config":"[^"]*"' "$out/results.jsonl" | tr '\n' ' ')" = \
    '"config":"full" "config":"protokv/b48" "config":"protokv/r0.5" "config":"streamingllm/b48" ' ]
check protokv_compressed [ "$(grep '"config":"protokv/b48"' "$out/results.jsonl" | grep -c '"kept_rows":48,')" = 1 ]

# ---------------------------------------------------------------- 2. kill -9 and resume
args=(eval -m "$model" --tasks niah_single_1,fwe,niah_passkey_noise --lengths 1024 --samples 2
    --niah-lengths 512 --niah-depths 0,100 --press snapkv,streamingllm --budgets 48 --window 16
    --mode query_agnostic,query_aware --agree-k 4 -t 1)
"$bin" "${args[@]}" -o "$tmp/straight" > /dev/null 2>&1
check straight_run [ $? = 0 ]
"$bin" "${args[@]}" -o "$tmp/killed" > /dev/null 2>&1 &
pid=$!
for _ in $(seq 1 400); do
    [ -f "$tmp/killed/results.jsonl" ] && [ "$(lines "$tmp/killed/results.jsonl")" -ge 6 ] && break
    sleep 0.05
done
kill -9 "$pid" 2> /dev/null
wait "$pid" 2> /dev/null
n_before=$(lines "$tmp/killed/results.jsonl")
echo "     killed after $n_before of 36 lines"
check killed_mid_run [ "$n_before" -lt 36 ]
# what a kill in the middle of a write would leave
printf '{"key":"niah_single_1/1024/1/query_aware/none","task":"niah_si' >> "$tmp/killed/results.jsonl"
"$bin" "${args[@]}" -o "$tmp/killed" > /dev/null 2>&1
check resume_without_flag_refused [ $? = 1 ]
"$bin" "${args[@]}" -o "$tmp/killed" --resume > "$tmp/resume.log" 2>&1
check resume_run [ $? = 0 ]
check resume_skipped grep -q "$n_before already done" "$tmp/resume.log"
check resume_same_results same_results "$tmp/straight" "$tmp/killed"
check resume_same_summary same_summary "$tmp/straight" "$tmp/killed"
check resume_no_torn_line [ "$(grep -c '"task":"niah_si"' "$tmp/killed/results.jsonl")" = 0 ]
# resuming a finished run does nothing and changes nothing
"$bin" "${args[@]}" -o "$tmp/killed" --resume > "$tmp/again.log" 2>&1
check resume_finished grep -q '36 already done' "$tmp/again.log"

# ---------------------------------------------------------------- 2b. results that are not this run's
# a task too big for its length fails before the first line (niah_single_1 would run first)
"$bin" eval -m "$model" --tasks niah_single_1,vt --lengths 400 --samples 2 --press snapkv --budgets 48 \
    --window 16 -t 1 -o "$tmp/nofit" > /dev/null 2> "$tmp/nofit.err"
check fit_checked_first [ $? = 1 ]
check fit_checked_message grep -q 'error: before the run: vt does not fit in 400 tokens' "$tmp/nofit.err"
check fit_checked_no_lines [ ! -s "$tmp/nofit/results.jsonl" ]
# a corrupt line in the middle: named, recomputed, same results
cp -r "$tmp/straight" "$tmp/corrupt"
sed -i '10s/.*/{"key": broken/' "$tmp/corrupt/results.jsonl"
"$bin" "${args[@]}" -o "$tmp/corrupt" --resume > /dev/null 2> "$tmp/corrupt.err"
check corrupt_line_run [ $? = 0 ]
check corrupt_line_named grep -q 'warning: .*results.jsonl line 10 is not a valid result line' "$tmp/corrupt.err"
check corrupt_line_recomputed same_results "$tmp/straight" "$tmp/corrupt"
# a valid line of another run (another seed, model or chat setting): refused, naming the line
for what in seed model chat; do
    cp -r "$tmp/straight" "$tmp/foreign_$what"
    case $what in
    seed) sed -i '5s/"seed":"[0-9a-f]*"/"seed":"0123456789abcdef"/' "$tmp/foreign_$what/results.jsonl" ;;
    model) sed -i '5s/"model":"tiny-gemma3-f32"/"model":"another-model"/' "$tmp/foreign_$what/results.jsonl" ;;
    chat) sed -i '5s/"chat":false/"chat":true/' "$tmp/foreign_$what/results.jsonl" ;;
    esac
    "$bin" "${args[@]}" -o "$tmp/foreign_$what" --resume > /dev/null 2> "$tmp/foreign.err"
    code=$?
    if [ "$code" = 1 ] && grep -q "results.jsonl line 5 (.*) is from another run: .*$what" "$tmp/foreign.err" &&
        [ "$(grep -c error "$tmp/foreign.err")" = 1 ]; then
        ok "foreign_line_$what"
    else
        bad "foreign_line_$what" "exit $code: $(cat "$tmp/foreign.err")"
    fi
done
# a line of a key this plan does not produce (an earlier plan of the run): kept, named, not run
cp -r "$tmp/straight" "$tmp/outside"
sed -n '3s/"key":"\([^"]*\)"/"key":"\1-elsewhere"/p' "$tmp/straight/results.jsonl" >> "$tmp/outside/results.jsonl"
"$bin" "${args[@]}" -o "$tmp/outside" --resume > "$tmp/outside.log" 2>&1
check outside_key_run [ $? = 0 ]
check outside_key_named grep -q 'warning: .*: 1 line of results this plan does not produce (the first is line 37' \
    "$tmp/outside.log"
check outside_key_kept [ "$(lines "$tmp/outside/results.jsonl")" = 37 ]
check outside_key_nothing_run grep -q '36 already done' "$tmp/outside.log"

# ---------------------------------------------------------------- 3. MPI
# the given MPI build, or the binary under test itself when it was built with make MPI=1
if { [ -z "$mpi_bin" ] || [ ! -x "$mpi_bin" ]; } && ldd "$bin" 2> /dev/null | grep -q libmpi; then mpi_bin=$bin; fi
if [ -n "$mpi_bin" ] && [ -x "$mpi_bin" ] && command -v mpirun > /dev/null; then
    mpirun --allow-run-as-root --oversubscribe -np 2 "$mpi_bin" "${args[@]}" -o "$tmp/mpi" > "$tmp/mpi.log" 2>&1
    check mpi_run [ $? = 0 ]
    check mpi_same_results same_results "$tmp/straight" "$tmp/mpi"
    check mpi_same_summary same_summary "$tmp/straight" "$tmp/mpi"
    check mpi_parts_merged [ -z "$(ls "$tmp/mpi" | grep part)" ]
elif [ -n "${2:-}" ]; then
    # an MPI build was asked for (make test builds one): its absence is a failure, not a skip
    check mpi_build_present false
else
    echo "skip eval_smoke_mpi: no MPI build (make MPI=1 BUILD=build/mpi build/mpi/promptkv) or no mpirun"
fi

[ "$fail" = 0 ] || { echo "--- smoke log"; tail -n 5 "$tmp/smoke.log"; }
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
