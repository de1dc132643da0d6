#!/usr/bin/env bash
# Command-line tests: bad input must give a one-line error naming the problem
# and a non-zero exit code, never a crash. usage: tests/cli-test.sh PROMPTKV [GGUF_EDIT]
set -u
bin=${1:-build/promptkv}
edit=${2:-$(dirname "$bin")/gguf-edit}
tiny=tests/fixtures/models/tiny-llama-f32.gguf
gemma=models/gemma-3-270m-q4_k_m.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

# expect NAME EXIT_CODE STDERR_REGEX -- COMMAND...
expect() {
    local name=$1 want_code=$2 pattern=$3
    shift 4
    local err code
    err=$("$@" 2>&1 >/dev/null)
    code=$?
    local lines
    lines=$(printf '%s\n' "$err" | grep -c 'error')
    if [ "$code" = "$want_code" ] && printf '%s' "$err" | grep -Eq -- "$pattern"; then
        pass=$((pass + 1))
        echo "ok   cli_$name"
    else
        fail=$((fail + 1))
        echo "FAIL cli_$name: exit $code (want $want_code), stderr: $err"
    fi
    # an error is one line (usage text may follow it)
    if [ "$want_code" != 0 ] && [ "$lines" -gt 1 ]; then
        fail=$((fail + 1))
        echo "FAIL cli_${name}_one_line: $lines lines of error output"
    fi
}

# expect_out NAME STDOUT_REGEX -- COMMAND...   (exit 0)
expect_out() {
    local name=$1 pattern=$2
    shift 3
    local out code
    out=$("$@" 2>/dev/null)
    code=$?
    if [ "$code" = 0 ] && printf '%s' "$out" | grep -Eq -- "$pattern"; then
        pass=$((pass + 1))
        echo "ok   cli_$name"
    else
        fail=$((fail + 1))
        echo "FAIL cli_$name: exit $code, stdout: ${out:0:300}"
    fi
}

expect no_command 2 'usage' -- "$bin"
expect unknown_command 2 "unknown command 'frobnicate'" -- "$bin" frobnicate
expect_out help_run 'usage: promptkv run' -- "$bin" run --help
expect_out help_info 'usage: promptkv info' -- "$bin" info --help
expect_out help_tokenize 'usage: promptkv tokenize' -- "$bin" tokenize --help
expect_out help_perplexity 'usage: promptkv perplexity' -- "$bin" perplexity --help
expect run_no_model 2 'model is required' -- "$bin" run -p hi
expect run_unknown_flag 2 "unknown option '--frob'" -- "$bin" run -m "$tiny" -p hi --frob
expect run_bad_int 2 "-n expects an integer" -- "$bin" run -m "$tiny" -p hi -n ten
expect run_bad_threads 2 "-t must be in" -- "$bin" run -m "$tiny" -p hi -t 0
expect run_missing_file 1 "nope.gguf: cannot open" -- "$bin" run -m "$tmp/nope.gguf" -p hi
expect run_missing_prompt_file 1 "cannot open .*nope.txt" -- "$bin" run -m "$tiny" -f "$tmp/nope.txt"

# a truncated model, a wrong magic, an empty file
head -c 1000 "$tiny" > "$tmp/truncated.gguf"
expect truncated_model 1 "truncated.gguf" -- "$bin" run -m "$tmp/truncated.gguf" -p hi
{ printf 'GGUX'; tail -c +5 "$tiny"; } > "$tmp/magic.gguf"
expect wrong_magic 1 "magic" -- "$bin" info "$tmp/magic.gguf"
: > "$tmp/empty.gguf"
expect empty_model 1 "empty.gguf" -- "$bin" info "$tmp/empty.gguf"

# a FIFO as the model: refused at once (opening it must not wait for a writer)
mkfifo "$tmp/fifo.gguf"
expect model_fifo 1 "fifo.gguf: not a regular file \(a model must be a GGUF file, not a pipe\)" -- \
    timeout 10 "$bin" run -m "$tmp/fifo.gguf" -p hi
expect info_fifo 1 "not a regular file" -- timeout 10 "$bin" info "$tmp/fifo.gguf"
expect model_directory 1 "not a regular file \(a model must be a GGUF file, not a directory\)" -- \
    "$bin" run -m "$tmp" -p hi

# prompt files: an endless one is refused at the cap; a pipe is still read
expect prompt_file_dev_zero 1 "/dev/zero is larger than the 64 MiB limit for a text file" -- \
    timeout 30 "$bin" run -m "$tiny" -f /dev/zero -n 1
expect tokenize_file_dev_zero 1 "/dev/zero is larger than the 64 MiB limit" -- \
    timeout 30 "$bin" tokenize -m "$tiny" -f /dev/zero
expect_out prompt_file_from_pipe '[0-9]+ [0-9]+' -- sh -c "printf 'Hello world' | \"$bin\" tokenize -m \"$tiny\" -f /dev/stdin"

# more ids than bytes: each invalid UTF-8 byte is U+FFFD for the byte-level BPE,
# three byte characters that this vocabulary never merges, so 518 bytes give
# 3 x 518 = 1554 ids (the id buffer used to hold the byte count + 16)
head -c 518 /dev/zero | tr '\0' '\377' > "$tmp/ff.txt"
count=$("$bin" tokenize -m tests/fixtures/models/tiny-qwen2-f32.gguf -f "$tmp/ff.txt" | wc -w)
if [ "$count" = 1554 ]; then pass=$((pass + 1)); echo "ok   cli_tokenize_three_ids_per_byte"
else fail=$((fail + 1)); echo "FAIL cli_tokenize_three_ids_per_byte: $count ids, want 1554"; fi
expect_out run_three_ids_per_byte '.' -- sh -c "\"$bin\" run -m tests/fixtures/models/tiny-qwen2-f32.gguf \
    -f \"$tmp/ff.txt\" -c 2048 -n 1 2>&1 >/dev/null | grep 'prompt tokens: *1554'"

# perplexity tokenizes into a buffer that grows (it used to assume one id per byte and read past its buffer)
expect perplexity_three_ids_per_byte 0 'perplexity: 1554 tokens, chunks of 64' -- \
    "$bin" perplexity -m tests/fixtures/models/tiny-qwen2-f32.gguf -f "$tmp/ff.txt" -c 64 -t 1

# --residual-type f16: chunks of 64 tokens read 16 at a time keep their residual stream at 16 bits;
# the perplexity moves (the option took effect) but by less than 1%
ppl_of() { "$bin" perplexity -m tests/fixtures/models/tiny-qwen2-f32.gguf -f "$tmp/ff.txt" -c 64 -b 16 -t 1 "$@" \
    2>&1 | sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p'; }
p32=$(ppl_of) p16=$(ppl_of --residual-type f16)
if awk -v a="$p32" -v b="$p16" 'BEGIN { d = (b - a) / a; exit !(a > 0 && d != 0 && d < 1e-2 && d > -1e-2) }'; then
    pass=$((pass + 1)); echo "ok   cli_perplexity_residual_f16"
else fail=$((fail + 1)); echo "FAIL cli_perplexity_residual_f16: ppl $p16 with the option, $p32 without"; fi
expect perplexity_residual_type_unknown 2 "--residual-type must be f32, f16 or q8_0, got 'bf16'" -- \
    "$bin" perplexity -m tests/fixtures/models/tiny-qwen2-f32.gguf -f "$tmp/ff.txt" --residual-type bf16
expect run_residual_type_unknown 2 "--residual-type must be f32, f16 or q8_0, got 'q4_0'" -- \
    "$bin" run -m tests/fixtures/models/tiny-qwen2-f32.gguf -p hi --residual-type q4_0
# --residual-spill DIR: the f32 stream kept in a file gives the same perplexity to the last digit, the
# f16 stream spilled the f16 one's; the directory is left empty (in the working tree: /tmp may be tmpfs)
spill=$(mktemp -d pkv-spill-cli-XXXXXX)
ps32=$(ppl_of --residual-spill "$spill") ps16=$(ppl_of --residual-spill "$spill" --residual-type f16)
if [ -n "$p32" ] && [ "$ps32" = "$p32" ] && [ "$ps16" = "$p16" ] && [ -z "$(ls -A "$spill")" ]; then
    pass=$((pass + 1)); echo "ok   cli_perplexity_residual_spill"
else fail=$((fail + 1)); echo "FAIL cli_perplexity_residual_spill: ppl $ps32 / $ps16 spilled, $p32 / $p16 not"; fi
rmdir "$spill"
expect run_residual_spill_missing 1 "spill directory $tmp/none: No such file or directory" -- \
    "$bin" run -m tests/fixtures/models/tiny-qwen2-f32.gguf -p hi --residual-spill "$tmp/none"
expect run_residual_spill_file 1 "spill directory $tiny: not a directory" -- \
    "$bin" run -m tests/fixtures/models/tiny-qwen2-f32.gguf -p hi --residual-spill "$tiny"

# NaN weights pass the load checks; every step's logits are NaN: a clean
# error naming the step in every sampling mode, never a token
"$edit" "$tiny" "$tmp/nan.gguf" --fill output_norm.weight nan
expect nan_logits_greedy 1 "non-finite logits at step 0" -- "$bin" run -m "$tmp/nan.gguf" -p hi -n 4
expect nan_logits_temp 1 "non-finite logits at step 0" -- "$bin" run -m "$tmp/nan.gguf" -p hi -n 4 --temp 1
expect nan_logits_top_k 1 "non-finite logits at step 0" -- "$bin" run -m "$tmp/nan.gguf" -p hi --temp 1 --top-k 5
expect nan_logits_top_p 1 "non-finite logits at step 0" -- "$bin" run -m "$tmp/nan.gguf" -p hi --temp 1 --top-p 0.9
expect nan_logits_min_p 1 "non-finite logits at step 0" -- "$bin" run -m "$tmp/nan.gguf" -p hi --temp 1 --min-p 0.1

# float metadata: refused naming the key
"$edit" "$tiny" "$tmp/eps.gguf" --set llama.attention.layer_norm_rms_epsilon f32 -1e-5
expect negative_rms_eps 1 "key llama.attention.layer_norm_rms_epsilon = -1e-05 must be > 0" -- \
    "$bin" run -m "$tmp/eps.gguf" -p hi --temp 1
"$edit" "$tiny" "$tmp/bos.gguf" --set tokenizer.ggml.bos_token_id u32 512
expect bos_outside_vocabulary 1 "tokenizer.ggml.bos_token_id = 512 is outside the vocabulary \[0, 512\)" -- \
    "$bin" info "$tmp/bos.gguf"

# crafted bad files (tools/make-bad-fixtures.py)
expect unknown_arch 1 "unsupported architecture 'mamba' \(supported: llama, qwen2, qwen3, gemma3, phi3\)" -- \
    "$bin" info tests/fixtures/bad/unknown-arch.gguf
expect_out info_lists_architectures 'Supported architectures \(general.architecture\): llama, qwen2, qwen3, gemma3, phi3' \
    -- "$bin" info --help
expect_out info_longrope 'rope scaling: +longrope, original context 32' -- \
    "$bin" info tests/fixtures/models/tiny-phi3-su-f32.gguf
# YaRN (Qwen3's long-context files) is refused naming the key and the value
"$edit" tests/fixtures/models/tiny-qwen3-f32.gguf "$tmp/yarn.gguf" --set qwen3.rope.scaling.type str yarn
expect yarn_refused 1 "key qwen3.rope.scaling.type = 'yarn' is not supported" -- "$bin" info "$tmp/yarn.gguf"
expect unknown_quant_type 1 "type" -- "$bin" info tests/fixtures/bad/unknown-type.gguf
expect absurd_dimension 1 "dim" -- "$bin" info tests/fixtures/bad/absurd-dim.gguf

# a prompt longer than the context
expect prompt_too_long 1 "exceed the context length 8" -- "$bin" run -m "$tiny" -c 8 -n 1 \
    -p "one two three four five six seven eight nine ten eleven twelve"

# the real model
expect_out info_gemma 'architecture: +gemma3' -- "$bin" info "$gemma"
expect_out run_gemma_greedy '[A-Za-z]' -- "$bin" run -m "$gemma" -p "The capital of France is" -n 8 -t 2

# tools/step-budget.py's counts on Gemma 3 270M, by hand: per layer Q and O 640 x 1024, K and V 640 x 256,
# gate, up and down 640 x 2048 (5,570,560 multiply-adds) x 18 layers, plus the tied 640 x 262144 embedding
# as the output matrix: 268,042,240; attention at 576 rows, 4 heads x 256 x 2 x (3 full layers x 576 +
# 15 sliding ones x their 512-row window): 19,267,584
budget=(python3 tools/step-budget.py "$gemma" --promptkv "$bin" --bench-dot "$(dirname "$bin")/bench-dot" --runs 1 --reps 1)
expect_out step_budget_gemma_weights '^weights: 268\.0 M multiply-adds per token' -- "${budget[@]}"
expect_out step_budget_gemma_attention '^attention at depth 576: 19\.3 M float multiply-adds' -- "${budget[@]}"
expect_out run_gemma_chat '[A-Za-z]' -- "$bin" run -m "$gemma" --chat --system "Answer in one word." \
    -p "What colour is the sky on a clear day?" -n 6 -t 2
expect_out run_gemma_press 'press: +snapkv budget=64' -- sh -c "\"$bin\" run -m \"$gemma\" -p \"\$(head -c 3000 tests/data/english.txt)\" -n 2 -t 2 --press snapkv --budget 64 2>&1 >/dev/null"
expect press_unknown 2 "unknown press 'snapk'" -- "$bin" run -m "$tiny" -p hi --press snapk --budget 8
# the presses that need no question (docs/presses.md Part E): listed, their options checked, KVzip's refusal
expect_out help_press_eval 'kvzip +KVzip' -- "$bin" eval --help-press
expect press_ea_n_sink 2 "n_sink must be an integer in \[0, 64\]" -- "$bin" run -m "$tiny" -p hi --press expected_attention --ratio 0.5 --press-opt n_sink=65
expect press_kvzip_sliding 1 "sliding window" -- "$bin" run -m tests/fixtures/models/tiny-gemma3-f32.gguf -p "the river runs past the mill" --press kvzip --ratio 0.5 -n 2
expect press_even_kernel 2 "odd" -- "$bin" run -m "$tiny" -p hi --press snapkv --budget 64 --kernel 4
expect press_zero_kernel 2 "odd" -- "$bin" run -m "$tiny" -p hi --press snapkv --budget 64 --kernel 0
expect press_budget_le_window 2 "larger than the observation window 32" -- "$bin" run -m "$tiny" -p hi --press snapkv --budget 32
expect press_bad_ratio 2 "ratio must be in \\[0, 1\\)" -- "$bin" run -m "$tiny" -p hi --press snapkv --ratio 1.5
expect press_no_budget 2 "needs a budget" -- "$bin" run -m "$tiny" -p hi --press snapkv
expect press_opts_without_press 2 "without --press" -- "$bin" run -m "$tiny" -p hi --budget 64
expect press_agnostic_needs_question 2 "needs a question" -- "$bin" run -m "$tiny" -p hi --press snapkv --budget 64 --mode query_agnostic

expect_out inspect_rows 'layer +heads +rows kept per head' -- "$bin" inspect -m "$tiny" \
    -p "$(head -c 600 tests/data/english.txt)" -c 512 --press snapkv --budget 24 --window 8 --html "$tmp/inspect.html"
expect_out inspect_html_counts 'kept by [0-9]+ of 4 heads' -- cat "$tmp/inspect.html"
expect inspect_needs_press 2 "choose a press" -- "$bin" inspect -m "$tiny" -p hi
# --json: the prompt's ids and segments, per layer and KV head the kept positions (ascending, all
# below the compressed length, the budget of them), and the greedy answer
"$bin" inspect -m "$tiny" -p "$(head -c 600 tests/data/english.txt)" -q " Who kept the light?" -c 512 \
    --press snapkv --budget 24 --window 8 --mode query_agnostic -n 4 --json "$tmp/inspect.json" > /dev/null 2>&1
expect_out inspect_json '^ok 2 layers' -- python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["mode"] == "query_agnostic" and r["n_compressed"] == r["context_end"] < r["n_tokens"] == len(r["tokens"])
for layer in r["layers"]:
    assert len(layer["heads"]) == 2
    for kept in layer["heads"]:
        assert len(kept) == 24 and kept == sorted(set(kept)) and 0 <= kept[0] and kept[-1] < r["n_compressed"]
        assert kept[-8:] == list(range(r["n_compressed"] - 8, r["n_compressed"]))  # the window
assert len(r["answer"]["tokens"]) == 4 and isinstance(r["answer"]["text"], str)
print("ok", len(r["layers"]), "layers")' "$tmp/inspect.json"
expect_out inspect_json_stdout '"layers": \[' -- "$bin" inspect -m "$tiny" -p "$(head -c 300 tests/data/english.txt)" \
    -c 512 --press streamingllm --budget 16 --json -
expect inspect_system_needs_chat 2 "needs --chat" -- "$bin" inspect -m "$tiny" -p hi --system x --press knorm --budget 4

# bench and synth
expect_out help_bench 'usage: promptkv bench' -- "$bin" bench --help
expect_out bench_tiny '\| tg4@d64 +\| snapkv budget=40' -- "$bin" bench -m "$tiny" -p 32 -n 8 -r 2 -t 2 \
    --depths 64 --depth-gen 4 --press snapkv --budget 40 --window 8 --membw-size 16M --svg "$tmp/bench.svg" \
    --csv "$tmp/bench.csv"
expect_out bench_svg '<polyline' -- cat "$tmp/bench.svg"
expect_out bench_csv_rows '^tg4@d64,depth,"snapkv budget=40 window=8",64,4,2,2,' -- cat "$tmp/bench.csv"
expect_out bench_paired '^tg4@d32 x3 paired \(none\): 3 streams / 1 stream, repetition by repetition: median [0-9.]+x' -- \
    "$bin" bench -m "$tiny" -p 0 -n 0 --streams 3 --paired --stream-depth 32 --depth-gen 4 -r 2 -t 2 --no-membw
expect bench_paired_no_streams 2 '--paired needs --streams' -- "$bin" bench -m "$tiny" -p 0 -n 0 --paired
expect bench_paired_one_stream 2 'stream counts must be >= 2' -- "$bin" bench -m "$tiny" -p 0 -n 0 --streams 1,2 --paired
expect_out bench_csv_stdout '^test,kind,press,n_prompt' -- "$bin" bench -m "$tiny" -p 16 -n 0 -r 1 -o csv
expect_out bench_mem '\| none \| 64: ' -- "$bin" bench -m "$tiny" --mem 1G --mem-probe 64,128 -t 2 \
    --presses none,snapkv:budget=40:window=8
expect_out bench_membw_only 'memory read bandwidth .* 1 thread [0-9.]+ GB/s' -- "$bin" bench --membw-only -t 1 --membw-size 16M
expect bench_membw_size_too_small 1 'membw: buffer >= 4 KiB' -- "$bin" bench --membw-only -t 1 --membw-size 100
# the report's first line is ended before the error's own line
expect_out bench_membw_error_on_its_own_line '^promptkv bench: error: membw' -- \
    sh -c "\"$bin\" bench --membw-only -t 1 --membw-size 100 2>&1 | tail -n 1"
expect bench_no_model 2 'a model is required' -- "$bin" bench -p 16
expect bench_bad_list 2 '--depths expects an integer' -- "$bin" bench -m "$tiny" --depths 64,x
expect bench_bad_press 2 "unknown press 'snapk'" -- "$bin" bench -m "$tiny" --presses none,snapk:budget=40
expect bench_bad_press_opt 2 "is not KEY=VALUE" -- "$bin" bench -m "$tiny" --presses snapkv:budget
expect bench_bad_output 2 '-o must be md or csv' -- "$bin" bench -m "$tiny" -o json
expect bench_budget_below_window 2 'budget 4 must be larger than the observation window 8' -- "$bin" bench -m "$tiny" \
    --presses none,snapkv:budget=4:window=8 --depths 64
expect bench_zero_depth 2 '--depths must be in \[1, ' -- "$bin" bench -m "$tiny" --depths 64,0
expect bench_zero_prompt 2 '-p must be in \[1, ' -- "$bin" bench -m "$tiny" -p 0,16
expect bench_negative_gen 2 '-n must be in \[0, ' -- "$bin" bench -m "$tiny" -n -1
expect_out help_synth 'usage: promptkv synth' -- "$bin" synth --help
expect_out synth_list 'llama-3.2-1b +meta-llama/Llama-3.2-1B' -- "$bin" synth --list
expect synth_unknown_shape 2 "unknown shape 'llama-9b'" -- "$bin" synth llama-9b -o "$tmp/x.gguf"
expect synth_bad_type 2 '--type must be one of' -- "$bin" synth llama-3.2-1b --type q3_z -o "$tmp/x.gguf"
expect synth_no_output 2 'need a SHAPE and -o FILE' -- "$bin" synth llama-3.2-1b
expect synth_unwritable 1 'cannot create' -- "$bin" synth qwen2.5-0.5b --type f32 -o "$tmp/no/such/dir/x.gguf"
# saved caches (docs/cache-file.md): the context compressed once and saved, then loaded with the question
# after it, prints what the whole prompt prints; a damaged or foreign file is one error line
doc="the cat sat on the mat while the rain fell softly on the roof of the house by the sea"
saved_run() {
    "$bin" run -m "$tiny" -p "$doc" -q " and then" --press snapkv --budget 12 --window 4 --mode query_agnostic \
        -n 12 --save-cache "$tmp/doc.pkvc" 2>/dev/null > "$tmp/live.txt" &&
        "$bin" run -m "$tiny" --load-cache "$tmp/doc.pkvc" -q " and then" -n 12 2>/dev/null > "$tmp/loaded.txt" &&
        [ -s "$tmp/live.txt" ] && cmp -s "$tmp/live.txt" "$tmp/loaded.txt" && echo same
}
expect_out save_load_cache_same_text '^same$' -- saved_run
expect_out load_cache_reports_press 'press "snapkv budget=12 window=4 mode=query_agnostic"' -- \
    sh -c "'$bin' run -m '$tiny' --load-cache '$tmp/doc.pkvc' -n 2 2>&1"
if [ -f "$tmp/doc.pkvc" ]; then
    size=$(stat -c %s "$tmp/doc.pkvc")
    head -c $((size - 1)) "$tmp/doc.pkvc" > "$tmp/short.pkvc"
    expect load_cache_truncated 1 "short.pkvc: truncated: the header says $size bytes, the file has $((size - 1))" -- \
        "$bin" run -m "$tiny" --load-cache "$tmp/short.pkvc" -q x
    { head -c 200 "$tmp/doc.pkvc"; printf 'Z'; tail -c +202 "$tmp/doc.pkvc"; } > "$tmp/altered.pkvc"
    expect load_cache_altered 1 "altered.pkvc: checksum mismatch .*: the file was altered or damaged" -- \
        "$bin" run -m "$tiny" --load-cache "$tmp/altered.pkvc" -q x
    expect load_cache_other_model 1 "doc.pkvc: saved from another model file of the same shape" -- \
        "$bin" run -m tests/fixtures/models/tiny-llama-f16.gguf --load-cache "$tmp/doc.pkvc" -q x
    expect load_cache_other_shape 1 "doc.pkvc: saved from another model \(2 layers" -- \
        "$bin" run -m tests/fixtures/models/tiny-gemma3-f32.gguf --load-cache "$tmp/doc.pkvc" -q x
    expect load_cache_cache_type 1 "saved with an f16 cache; this session's is f32" -- \
        "$bin" run -m "$tiny" --cache-type f32 --load-cache "$tmp/doc.pkvc" -q x
fi
expect load_cache_not_a_cache 1 "tiny-llama-f32.gguf: not a promptkv saved cache" -- \
    "$bin" run -m "$tiny" --load-cache "$tiny" -q x
expect load_cache_missing 1 "nope.pkvc: cannot open" -- "$bin" run -m "$tiny" --load-cache "$tmp/nope.pkvc"
expect load_cache_with_press 2 "--load-cache takes the saved cache as it is" -- \
    "$bin" run -m "$tiny" --load-cache "$tmp/doc.pkvc" --press snapkv --budget 8 -q x
expect load_cache_two_prompts 2 "at most one of -p TEXT or -f FILE after --load-cache" -- \
    "$bin" run -m "$tiny" --load-cache "$tmp/doc.pkvc" -p a -f "$tmp/doc.pkvc"
expect save_cache_unwritable 1 "no/dir/x.pkvc: cannot create a file beside it" -- \
    "$bin" run -m "$tiny" -p "$doc" -n 1 --save-cache "$tmp/no/dir/x.pkvc"
# quantised cache rows (docs/design.md "The cache layout"): --cache-type sets keys and values, -ctk/-ctv each;
# a Q8_0 row of 32 elements is 34 bytes against f16's 64, so the same run holds 72/132 of the bytes
qwen3=tests/fixtures/models/tiny-qwen3-f32.gguf
cache_bytes() { "$bin" run -m "$qwen3" -p "hello world this is" -n 4 --ignore-eos -t 1 "$@" 2>&1 >/dev/null |
    sed -n 's/^kv cache now: .*(\([0-9]*\) bytes)$/\1/p'; }
b16=$(cache_bytes)
b8=$(cache_bytes --cache-type q8_0)
b84=$(cache_bytes -ctk q8_0 --cache-type-v q4_0)
if [ -n "$b16" ] && [ -n "$b8" ] && [ $((b8 * 132)) = $((b16 * 72)) ] && [ $((b84 * 132)) = $((b16 * 56)) ]; then
    pass=$((pass + 1)); echo "ok   cli_run_cache_type_q8_0"
else
    fail=$((fail + 1)); echo "FAIL cli_run_cache_type_q8_0: f16 $b16 bytes, q8_0 $b8, q8_0 keys and q4_0 values $b84"
fi
expect run_cache_type_head_size 1 "layer 0: key head size 16 is not a multiple of 32, the block of q8_0 cache rows" -- \
    "$bin" run -m "$tiny" -p hi --cache-type q8_0
expect run_cache_type_value_head_size 1 "layer 0: value head size 16 is not a multiple of 32, the block of q4_0" -- \
    "$bin" run -m "$tiny" -p hi -ctv q4_0
expect run_cache_type_unknown 2 "--cache-type must be f16, f32, q8_0 or q4_0, got 'q5_0'" -- \
    "$bin" run -m "$qwen3" -p hi --cache-type q5_0
expect perplexity_cache_type_unknown 2 "--cache-type-k must be f16, f32, q8_0 or q4_0, got 'int8'" -- \
    "$bin" perplexity -m "$qwen3" -f "$tmp/x.txt" --cache-type-k int8
expect eval_cache_type_unknown 2 "-ctv must be f16, f32, q8_0 or q4_0, got 'Q8_0'" -- \
    "$bin" eval -m "$qwen3" -ctv Q8_0
expect_out inspect_cache_type_q8_0 'cache [0-9.]+ MiB full' -- \
    "$bin" inspect -m "$qwen3" -p "one two three four five six seven" --press snapkv --budget 4 --window 2 --cache-type q8_0
"$bin" run -m "$qwen3" -p "$doc" -n 1 --cache-type q8_0 --save-cache "$tmp/q8.pkvc" >/dev/null 2>&1
expect load_cache_q8_0_into_f16 1 "q8.pkvc: saved with a q8_0 cache; this session's is f16 \(--cache-type q8_0\)" -- \
    "$bin" run -m "$qwen3" --load-cache "$tmp/q8.pkvc" -q x
expect load_cache_q8_0 0 "loaded cache: " -- "$bin" run -m "$qwen3" --load-cache "$tmp/q8.pkvc" -q x -n 2 -ctk q8_0 -ctv q8_0

# the demo of make run, on tiny models (its table, whatever they answer): an instruct layout with every layer
# pressed, and a base-model layout on a model with sliding-window layers
demo() {
    local model=$1
    shift
    env THREADS=2 PARAGRAPHS=4 BUDGET=48 "$@" tools/demo.sh "$bin" "$model"
}
expect_out demo_every_layer '^streamingllm \(baseline\) .* [0-9.]+ MiB +[0-9.]+ MiB \([0-9.]+x\) +[0-9.]+ ms' -- \
    demo tests/fixtures/models/tiny-qwen2-f32.gguf
expect_out demo_sliding_layers 'full attention \(pressed\): 1 of 6; the other 5 are' -- \
    demo tests/fixtures/models/tiny-gemma3-f32.gguf CHAT=off

# chat formats (docs/engine.md §4.7): a name or a template text with --chat-template, the template in the file
expect chat_template_unknown 1 'chat template \(first line "nonsense"\) is not a format promptkv knows \(names: chatml, ' -- \
    "$bin" run -m "$tiny" -p hi --chat --chat-template nonsense
expect chat_no_format 1 "has no chat template and no known chat format; name one \(--chat-template\)" -- \
    "$bin" run -m "$tiny" -p hi --chat
"$edit" "$tiny" "$tmp/unknown-template.gguf" --set tokenizer.chat_template str \
    $'{% for m in messages %}<|turn|>{{ m.content }}\n{% endfor %}'
expect chat_gguf_unknown_template 1 'its chat template \(first line "\{% for m in messages %\}<\|turn\|>\{\{ m.content \}\}"\) is not' -- \
    "$bin" run -m "$tmp/unknown-template.gguf" -p hi --chat
expect chat_template_override_run 0 '^prompt tokens: +[0-9]+' -- \
    "$bin" run -m "$tmp/unknown-template.gguf" -p hi --chat --chat-template gemma -n 1
# the file's template (Llama 2 chat's, from tests/fixtures/chat/templates.ref) detected: run --chat feeds jinja2's
# rendering, tokenized in its segments (system prompt, the user's text, the template's tail)
fixture_field() { # TEMPLATE_KEY CASE LETTER: that line's field of templates.ref, unescaped to a file
    awk -F'\t' -v key="$1" -v case_="$2" -v letter="$3" '
        $1 == "T" { t = ($2 == key) } $1 == "C" { c = ($2 == case_) }
        t && $1 == letter && (letter == "T" || c) { print (letter == "T" ? $4 : $2); exit }' tests/fixtures/chat/templates.ref
}
printf '%b' "$(fixture_field llama-2-chat x T)" > "$tmp/llama2.jinja"
"$edit" "$tiny" "$tmp/llama2-chat.gguf" --set tokenizer.chat_template str "$(cat "$tmp/llama2.jinja")"
expect_out chat_gguf_template_info 'chat format: +llama2-sys \(from tokenizer.chat_template\)' -- \
    "$bin" info "$tmp/llama2-chat.gguf"
printf '%b' "$(fixture_field llama-2-chat system_user E)" > "$tmp/want.txt"
sys_end=$(fixture_field llama-2-chat system_user S)
head -c "$sys_end" "$tmp/want.txt" > "$tmp/want-system.txt"
user_at=$(( sys_end + $(tail -c +$((sys_end + 1)) "$tmp/want.txt" | grep -bo 'Hi there' | head -n1 | cut -d: -f1) ))
tail -c +$((user_at + 1)) "$tmp/want.txt" | head -c 8 > "$tmp/want-user.txt"
tail -c +$((user_at + 9)) "$tmp/want.txt" > "$tmp/want-tail.txt"
n_want=0
for part in system user tail; do
    n_want=$((n_want + $("$bin" tokenize -m "$tmp/llama2-chat.gguf" --no-special -f "$tmp/want-$part.txt" | wc -w)))
done
got=$("$bin" run -m "$tmp/llama2-chat.gguf" --chat --system "You are terse." -p "Hi there" -n 1 2>&1 >/dev/null)
if [ "$(cat "$tmp/want-user.txt")" = "Hi there" ] && printf '%s' "$got" | grep -Eq "^prompt tokens: +$n_want\$"; then
    pass=$((pass + 1)); echo "ok   cli_chat_gguf_template_run"
else
    fail=$((fail + 1)); echo "FAIL cli_chat_gguf_template_run: want $n_want prompt tokens, got: $got"
fi
# the protected system prompt is the rendering's system block
expect_out chat_gguf_template_protect '"system_end": [1-9]' -- "$bin" inspect -m "$tmp/llama2-chat.gguf" --chat \
    --system "You are terse." -p "Hi there" --press snapkv --budget 40 --protect-system --json -

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
