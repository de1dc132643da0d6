#!/usr/bin/env bash
# The evaluation runs behind docs/results.md and docs/protokv.md, by name, so
# that every figure there can be re-run with one command.
#
#   tools/eval-runs.sh NAME [EVAL FLAGS...]     e.g. tools/eval-runs.sh qwen05-4k --resume
#   tools/eval-runs.sh --list
#
# Each run writes out/NAME/ (results.jsonl, run.json, summary tables, plots);
# extra flags go to `promptkv eval` (--resume continues a run that was
# stopped; -t N sets the threads). The committed results are
# docs/results/NAME/results.jsonl.gz: `tools/eval-runs.sh --save NAME` copies
# them there (with the summary tables and plots), `--restore NAME` puts them
# back in out/NAME so that `NAME --resume` continues the committed run. The
# runs are long on a CPU (see each run's cost in docs/results.md); all are
# resumable.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PROMPTKV:-build/promptkv}
q05=models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
q15=models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf

# ProtoKV development variants (docs/protokv.md, "Development split"): the
# options of src/press/protokv.c spelled out, so that a run does not depend
# on the defaults of the day
# The seed's first reading but for the vote pooling, which rounds 1, 3 and 4
# take from the eval's --kernel/--pool (a press item's own options come after
# them); round 2 has no pooling (kernel=1), as the first reading.
G="protokv:assign=global:chunk=none" # global assignment to 500 prototypes
A="protokv:score=attn:assign=local"  # + chunk=N:agg=X
dev_r1() {
    local p="none,snapkv,streamingllm,pk=$G:score=logit:agg=sum,pk_attn=$G:score=attn:agg=sum"
    p="$p,pk_attn_mean=$G:score=attn:agg=mean,pk_attn_max=$G:score=attn:agg=max"
    p="$p,max_c16L=$A:chunk=16:agg=max,max_c8L=$A:chunk=8:agg=max"
    p="$p,max_c32L=$A:chunk=32:agg=max,mean_c16L=$A:chunk=16:agg=mean"
    p="$p,sum_c16L=$A:chunk=16:agg=sum,lmean_c16L=protokv:score=logit:assign=local:chunk=16:agg=mean"
    p="$p,max_c16G=protokv:score=attn:assign=global:chunk=16:agg=max"
    p="$p,mix5_c16L=$A:chunk=16:agg=max:kernel=5:mix=0.5,max_c16L_s4=$A:chunk=16:agg=max:sinks=4"
    echo "$p"
}

run() {
    local name=$1
    shift
    case $name in
    qwen05-4k) # docs/results.md's main table: kvpress's leaderboard protocol at 4K
        "$bin" eval -m $q05 \
            --tasks niah_single_1,niah_single_2,niah_single_3,niah_multikey_2,niah_multivalue,niah_multiquery,vt,cwe,fwe,longeval_lines \
            --lengths 4096 --samples 10 \
            --press none,snapkv,streamingllm,h2o,tova,knorm,random,snapkv+pyramid=snapkv:layer_budget=pyramid,snapkv+adaptive=snapkv:head_budget=adaptive,protokv \
            --budgets none --ratios 0.25,0.5,0.75,0.875 --window 64 --kernel 5 --pool avg \
            --mode query_agnostic,query_aware -o out/$name "$@" ;;
    kv-q8) # SnapKV at ratio 0.5 with Q8_0 cache rows, on the main table's prompts (its f16 lines are the reference)
        "$bin" eval -m $q05 \
            --tasks niah_single_1,niah_single_2,niah_single_3,niah_multikey_2,niah_multivalue,niah_multiquery,vt,cwe,fwe,longeval_lines \
            --lengths 4096 --samples 10 --press snapkv_q8_0=snapkv \
            --budgets none --ratios 0.5 --window 64 --kernel 5 --pool avg --cache-type q8_0 \
            --mode query_aware -o out/$name "$@" ;;
    query-agnostic) # the presses that need no question against query-agnostic SnapKV at 4K (docs/presses.md Part E)
        "$bin" eval -m $q05 \
            --tasks niah_single_1,niah_single_2,niah_single_3,niah_multikey_2,niah_multivalue,niah_multiquery,longeval_lines \
            --lengths 4096 --samples 5 --press none,snapkv,streamingllm,kvzip,expected_attention,keydiff \
            --budgets none --ratios 0.25,0.5,0.75,0.875 --window 64 --kernel 5 --pool avg \
            --mode query_agnostic -o out/$name "$@" ;;
    multi-question) # several questions of one context, the question excluded (docs/evaluation.md §2.5)
        "$bin" eval -m $q05 \
            --tasks niah_multiquestion,longeval_multiquestion --lengths 4096 --samples 5 \
            --press none,snapkv,streamingllm,tova,knorm,protokv,kvzip,keydiff,expected_attention \
            --budgets none --ratios 0.25,0.5,0.75,0.875 --window 64 --kernel 5 --pool avg \
            --mode query_agnostic -o out/$name "$@" ;;
    protokv-heldout-budgets) # ProtoKV against SnapKV at fixed budgets, held-out seed and tasks
        "$bin" eval -m $q05 --seed 0 \
            --tasks niah_single_1,niah_single_3,niah_multikey_2,niah_multikey_3,longeval_lines \
            --lengths 2048,4096 --samples 3 --press none,snapkv,protokv,streamingllm \
            --budgets 64,128,256,512 --window 32 --kernel 7 --pool max \
            --mode query_aware,query_agnostic -o out/$name "$@" ;;
    protokv-heldout-15b) # ProtoKV against SnapKV on the 1.5B model, held-out seed and tasks, query-aware
        "$bin" eval -m $q15 --seed 0 --tasks niah_single_1,niah_single_3,niah_multikey_2 \
            --lengths 4096 --samples 2 --press none,snapkv,protokv --budgets 128,256,512 --window 32 --kernel 7 \
            --pool max --mode query_aware -o out/$name "$@" ;;
    qwen15-4k) # the 1.5B subset: needle tasks at 4K, three presses, four ratios
        "$bin" eval -m $q15 \
            --tasks niah_single_1,niah_single_2,niah_single_3,niah_multikey_2,niah_multivalue,niah_multiquery \
            --lengths 4096 --samples 10 --press none,snapkv,protokv,streamingllm \
            --budgets none --ratios 0.25,0.5,0.75,0.875 --window 64 --kernel 5 --pool avg \
            --mode query_agnostic,query_aware -o out/$name "$@" ;;
    needle-grid) # the seed's needle setting: depth x length at budget 128
        "$bin" eval -m $q05 --tasks niah_passkey_essay --niah-lengths 2048,4096,8192 --niah-depths 0,10,20,30,40,50,60,70,80,90,100 \
            --niah-samples 3 --press none,snapkv,protokv,streamingllm --budgets 128 --window 32 --kernel 7 --pool max \
            --mode query_aware -o out/$name "$@" ;;
    protokv-dev-r1) # development round 1: 2K, query-aware, seed 101
        "$bin" eval -m $q05 --seed 101 \
            --tasks niah_single_2,niah_single_3,niah_multikey_1,niah_multivalue,niah_multiquery --lengths 2048 --samples 3 \
            --press "$(dev_r1)" --budgets 128,256 --window 64 --kernel 5 --pool avg --mode query_aware -o out/$name "$@" ;;
    protokv-dev-r2) # development round 2: 2K, both modes, window 32, seed 101
        local n=kernel=1:pool=avg
        local p="none,snapkv,snapkv_k5avg=snapkv:kernel=5:pool=avg,streamingllm,pk=$G:score=logit:agg=sum:$n"
        p="$p,c16max=$A:$n:chunk=16:agg=max,c16mean=$A:$n:chunk=16:agg=mean,c16sum=$A:$n:chunk=16:agg=sum"
        p="$p,c16maxG=protokv:score=attn:assign=global:$n:chunk=16:agg=max,c24max=$A:$n:chunk=24:agg=max"
        p="$p,c16max_s4=$A:$n:chunk=16:agg=max:sinks=4,c16mean_nosat=$A:$n:chunk=16:agg=mean:m=0"
        "$bin" eval -m $q05 --seed 101 \
            --tasks niah_single_2,niah_single_3,niah_multikey_1,niah_multivalue,niah_multiquery --lengths 2048 --samples 3 \
            --press "$p" --budgets 64,128,256 --ratios 0.75 --window 32 --mode query_aware,query_agnostic \
            -o out/$name "$@" ;;
    protokv-dev-r3) # development round 3: 4K, both modes, kvpress settings, seed 101
        local p="none,snapkv,c16mean=$A:chunk=16:agg=mean,c16sum=$A:chunk=16:agg=sum,c16max=$A:chunk=16:agg=max"
        p="$p,c24mean=$A:chunk=24:agg=mean,c16mean_s4=$A:chunk=16:agg=mean:sinks=4"
        "$bin" eval -m $q05 --seed 101 \
            --tasks niah_single_2,niah_multikey_1,niah_multivalue,niah_multiquery,vt --lengths 4096 --samples 2 \
            --press "$p" --budgets 128,256 --ratios 0.75,0.875 --window 64 --kernel 5 --pool avg \
            --mode query_aware,query_agnostic -o out/$name "$@" ;;
    protokv-dev-r4) # development round 4: 2K, query-aware, SnapKV's official settings, seed 101
        local p="none,snapkv,c16mean=$A:chunk=16:agg=mean,c16max=$A:chunk=16:agg=max"
        p="$p,c24mean=$A:chunk=24:agg=mean,c24max=$A:chunk=24:agg=max"
        "$bin" eval -m $q05 --seed 101 \
            --tasks niah_single_2,niah_single_3,niah_multikey_1,niah_multivalue,niah_multiquery --lengths 2048 --samples 3 \
            --press "$p" --budgets 64,128,256 --window 32 --kernel 7 --pool max --mode query_aware -o out/$name "$@" ;;
    *)
        echo "eval-runs: unknown run '$name' (tools/eval-runs.sh --list)" >&2
        return 2 ;;
    esac
}

case ${1:-} in
--list)
    sed -n 's/^    \([a-z0-9-]*\)) # \(.*\)/\1\t\2/p' "$0" ;;
--save)
    [ $# -eq 2 ] || { echo "usage: tools/eval-runs.sh --save NAME" >&2; exit 2; }
    mkdir -p "docs/results/$2"
    gzip -9 -n -c "out/$2/results.jsonl" > "docs/results/$2/results.jsonl.gz"
    cp "out/$2/run.json" "docs/results/$2/run.json"
    # the summary tables and plots, rewritten from every line so far
    "$bin" eval --report-only -o "out/$2" > /dev/null
    for f in summary.md summary.csv timing.csv accuracy_query_agnostic.svg accuracy_query_aware.svg; do
        [ -f "out/$2/$f" ] && cp "out/$2/$f" "docs/results/$2/$f"
    done
    echo "docs/results/$2: $(wc -l < "out/$2/results.jsonl") result lines" ;;
--restore)
    # out/NAME from the committed lines, so that `NAME --resume` continues the committed run
    [ $# -eq 2 ] || { echo "usage: tools/eval-runs.sh --restore NAME" >&2; exit 2; }
    [ -f "docs/results/$2/results.jsonl.gz" ] || { echo "eval-runs: no docs/results/$2/results.jsonl.gz" >&2; exit 2; }
    if [ -s "out/$2/results.jsonl" ]; then
        echo "eval-runs: out/$2/results.jsonl exists; resume it or move it away first" >&2; exit 2
    fi
    mkdir -p "out/$2"
    gzip -dc "docs/results/$2/results.jsonl.gz" > "out/$2/results.jsonl"
    cp "docs/results/$2/run.json" "out/$2/run.json"
    echo "out/$2: $(wc -l < "out/$2/results.jsonl") result lines; continue with tools/eval-runs.sh $2 --resume" ;;
"" | -h | --help)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' ;;
*)
    run "$@" ;;
esac
