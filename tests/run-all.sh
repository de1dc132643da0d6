#!/usr/bin/env bash
# Runs every test suite and ends with one line "N passed, N failed" (the sum).
#   1. unit tests under ASan + UBSan (everything but the real-model tests)
#   2. all tests in the optimised build, real-model tests included (but the manual_ ones:
#      they need the 1.5B model, make test-qwen1.5b)
#   3. command-line tests (exit codes and messages on bad input), and every metadata
#      mutation of the fixture models through the ASan + UBSan CLI (tests/mutate-test.sh)
#   4. the HTTP server with the OpenAI client (tests/server-test.sh)
#   5. promptkv eval on a tiny model: smoke, kill -9 + resume, MPI when build/mpi/promptkv exists
#   6. the layout's rules on the sources: includes run down the layers, no file over 800 lines
# Run from the repository root after `make tests model`.
set -u
BUILD=${BUILD:-build}
total_pass=0
total_fail=0
failed_suites=()

run_suite() {
    local name=$1
    shift
    echo "=== $name: $*"
    local log
    log=$(mktemp)
    "$@" 2>&1 | tee "$log"
    local status=${PIPESTATUS[0]}
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    rm -f "$log"
    if [ -z "$line" ]; then
        echo "=== $name: no result line (exit status $status) — counted as one failure"
        total_fail=$((total_fail + 1))
        failed_suites+=("$name")
        return
    fi
    local p f
    p=$(echo "$line" | cut -d' ' -f1)
    f=$(echo "$line" | cut -d' ' -f3)
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    if [ "$f" != 0 ] || [ "$status" != 0 ]; then
        failed_suites+=("$name")
        if [ "$f" = 0 ]; then total_fail=$((total_fail + 1)); fi
    fi
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
run_suite "unit (asan+ubsan)" "$BUILD/san/test_runner" --exclude real_ --exclude slow_ --exclude manual_
run_suite "all (optimised)" "$BUILD/test_runner" --exclude manual_
run_suite "cli" tests/cli-test.sh "$BUILD/promptkv"
run_suite "mutated models (asan+ubsan)" tests/mutate-test.sh "$BUILD/san/promptkv" "$BUILD/gguf-edit"
run_suite "server" tests/server-test.sh "$BUILD/promptkv"
run_suite "eval smoke" tests/eval-smoke.sh "$BUILD/promptkv" "$BUILD/mpi/promptkv"
run_suite "layers" tests/layers-test.sh

if [ ${#failed_suites[@]} -gt 0 ]; then
    echo "failing suites: ${failed_suites[*]}"
fi
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
