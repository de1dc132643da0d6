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
import gzip
import json
import random


def load(path, config, mode):
    opener = gzip.open if path.endswith(".gz") else open
    rows = {}
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line)
            if d.get("config") != config or (mode and d.get("mode") != mode):
                continue
            rows[(d["task"], d["length"], d["sample"], d.get("depth"), d["mode"])] = d["score"]
    return rows


def interval(xs, rng, draws=2000):
    means = sorted(sum(rng.choice(xs) for _ in xs) / len(xs) for _ in range(draws))
    return means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


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
    lo, hi = interval(diff, rng)
    n = len(keys)
    print(f"paired prompts: {n}")
    print(f"A {args.config_a}: {sum(a[k] for k in keys) / n:.1f}   B {args.config_b}: {sum(b[k] for k in keys) / n:.1f}")
    print(f"A - B: {sum(diff) / n:+.1f} [{lo:+.1f}, {hi:+.1f}]; same {sum(d == 0 for d in diff)}, "
          f"A higher {sum(d > 0 for d in diff)}, A lower {sum(d < 0 for d in diff)}")
    for name, rows in (("A", a), ("B", b)):
        xs = list(rows.values())
        lo, hi = interval(xs, rng)
        print(f"{name} over its own {len(xs)} prompts: {sum(xs) / len(xs):.1f} [{lo:.1f}, {hi:.1f}]")


if __name__ == "__main__":
    main()
