#!/usr/bin/env python3
"""One configuration of two evaluation runs, prompt by prompt (standard library only).

usage: tools/eval-pair.py A.jsonl[.gz] CONFIG_A B.jsonl[.gz] CONFIG_B [--mode MODE] [--seed N]

CONFIG is a line's "config" field (e.g. full, snapkv/r0.5, snapkv_q8_0/r0.5). The prompts that both runs
scored (joined on task, length, sample, depth and mode) are paired; printed: how many, each run's mean
score, the mean difference A - B with its 95% percentile-bootstrap interval (2000 draws over prompts),
prompts with the same score, won and lost by A, and each run's mean over all of its own prompts. It
compares what a run-wide setting changes (the cache type, the model file) where tools/eval-compare.py
compares presses within runs.
"""
import argparse
import importlib.util
import os
import random

# the result-line reader, the prompt key and the bootstrap are eval-compare.py's
_spec = importlib.util.spec_from_file_location("eval_compare", os.path.join(os.path.dirname(__file__), "eval-compare.py"))
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)


def load(path, config, mode):
    return {compare.prompt_key(d): d["score"] for d in compare.load([path])
            if d.get("config") == config and (not mode or d.get("mode") == mode)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("config_a")
    ap.add_argument("b")
    ap.add_argument("config_b")
    ap.add_argument("--mode", default="")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    a = load(args.a, args.config_a, args.mode)
    b = load(args.b, args.config_b, args.mode)
    keys = sorted(set(a) & set(b))
    if not keys:
        raise SystemExit("eval-pair: no prompt scored by both (check the configs and --mode)")
    rng = random.Random(args.seed)
    diff = [a[k] - b[k] for k in keys]
    lo, hi = compare.bootstrap(diff, rng)
    n = len(keys)
    print(f"paired prompts: {n}")
    print(f"A {args.config_a}: {sum(a[k] for k in keys) / n:.1f}   B {args.config_b}: {sum(b[k] for k in keys) / n:.1f}")
    print(f"A - B: {sum(diff) / n:+.1f} [{lo:+.1f}, {hi:+.1f}]; same {sum(d == 0 for d in diff)}, "
          f"A higher {sum(d > 0 for d in diff)}, A lower {sum(d < 0 for d in diff)}")
    for name, rows in (("A", a), ("B", b)):
        xs = list(rows.values())
        lo, hi = compare.bootstrap(xs, rng)
        print(f"{name} over its own {len(xs)} prompts: {sum(xs) / len(xs):.1f} [{lo:.1f}, {hi:.1f}]")


if __name__ == "__main__":
    main()
