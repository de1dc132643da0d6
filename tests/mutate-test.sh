#!/usr/bin/env bash
# The hostile-metadata property: every mutation of the committed fixture
# models (tools/gguf-edit.c --mutations: each numeric metadata value set to 0,
# -1, NaN, +inf, -inf and huge, integers also as floats and as per-layer arrays
# one longer than block_count, numeric arrays filled with each of those, every
# token id one past the vocabulary) either runs `run --temp 1 -n 4` to the end
# or is refused with a one-line error; under ASan + UBSan, with no sanitizer
# report and no hang (30 s timeout). One test per fixture model.
# usage: tests/mutate-test.sh SANITIZED_PROMPTKV GGUF_EDIT
set -u
bin=${1:-build/san/promptkv}
edit=${2:-build/gguf-edit}
fixtures="tiny-llama-f32 tiny-llama31-f32 tiny-qwen2-f32 tiny-gemma3-f32 tiny-llama-q4_0 tiny-llama-k-q4_k"
fixtures+=" tiny-qwen3-f32 tiny-phi3-f32 tiny-phi3-su-f32"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

# a distinct exit code for sanitizer reports (ASan's default, 1, is the CLI's runtime error)
export ASAN_OPTIONS=detect_leaks=1:exitcode=86:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=86

# check_one FILE WHAT: prints "ran", "refused" or "FAIL <why>" for one mutated model
check_one() {
    local file=$1 what=$2 err code
    err=$(timeout 30 "$bin" run -m "$file" -p "Hello world, hello" --temp 1 -n 4 -t 1 2>&1 >/dev/null)
    code=$?
    local errors
    errors=$(printf '%s\n' "$err" | grep -c 'error')
    if printf '%s' "$err" | grep -Eq 'Sanitizer|runtime error|LeakSanitizer'; then
        echo "FAIL $what: sanitizer report: $(printf '%s' "$err" | grep -E 'Sanitizer|runtime error' | head -n 2)"
    elif [ "$code" = 124 ]; then
        echo "FAIL $what: no answer within 30 s"
    elif [ "$code" = 0 ]; then
        if [ "$errors" = 0 ]; then echo "ran"; else echo "FAIL $what: exit 0 with an error: $err"; fi
    elif [ "$code" = 1 ] || [ "$code" = 2 ]; then
        if [ "$errors" = 1 ] && printf '%s' "$err" | grep -q '^promptkv run: error: '; then
            echo "refused"
        else
            echo "FAIL $what: exit $code without exactly one error line: ${err:0:400}"
        fi
    else
        echo "FAIL $what: exit $code: ${err:0:400}"
    fi
}
export -f check_one
export bin

for name in $fixtures; do
    model=tests/fixtures/models/$name.gguf
    dir=$tmp/$name
    mkdir -p "$dir"
    if ! "$edit" --mutations "$model" "$dir" > "$dir.list" 2> "$dir.err"; then
        fail=$((fail + 1))
        echo "FAIL mutate_$name: gguf-edit: $(cat "$dir.err")"
        continue
    fi
    # two at a time (the CI machine's cores); NUL-separated "FILE<TAB>WHAT" pairs
    tr '\n' '\0' < "$dir.list" |
        xargs -0 -P 2 -n 1 bash -c 'f=${0%%	*}; w=${0#*	}; printf "%s\n" "$(check_one "$f" "$w")"' \
            > "$dir.results"
    total=$(wc -l < "$dir.list")
    ran=$(grep -c '^ran$' "$dir.results")
    refused=$(grep -c '^refused$' "$dir.results")
    if [ "$((ran + refused))" = "$total" ] && [ "$total" -gt 0 ]; then
        pass=$((pass + 1))
        echo "ok   mutate_$name ($total mutated files: $ran ran, $refused refused with one line)"
    else
        fail=$((fail + 1))
        echo "FAIL mutate_$name ($total mutated files: $ran ran, $refused refused)"
        grep '^FAIL' "$dir.results" | head -n 20
    fi
done

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
