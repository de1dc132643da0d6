#!/usr/bin/env python3
"""Press variants side by side from promptkv eval result lines, with 95% intervals (standard library only).

usage: tools/eval-compare.py RESULTS.jsonl [RESULTS.jsonl ...] [--ref PRESS] [--mode MODE] [--tasks LIST]
                             [--by budget|task|length] [--markdown] [--seed N]

For every press (the eval's label: a press name or LABEL of LABEL=PRESS:...) and budget or ratio, over the
prompts of the files (joined on task, length, sample, depth and mode):

  score     mean task score (0-100) and its 95% interval (percentile bootstrap over prompts, 2000 draws)
  vs ref    the paired difference to the reference press at the same budget (--ref, default snapkv): mean
            and 95% bootstrap interval, and prompts won / lost / tied
  needle    mean fraction of needle tokens kept per layer and head (the eval's needle_kept)
  dNLL      mean increase of the gold answer's negative log-likelihood per token over the full cache
  n         prompts

--by task|length splits every row by task or length as well.
"""
import argparse
import json
import math
import random
import sys
from collections import defaultdict


def load(paths):
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return rows


def size_label(r):
    if r["press"] == "none":
        return "full"
    return "r%g" % r["ratio"] if r["ratio"] > 0 else "b%d" % r["budget"]


def prompt_key(r):
    return (r["task"], r["length"], r["sample"], r.get("depth"), r["mode"])


def bootstrap(values, rng, draws=2000):
    n = len(values)
    if n == 0:
        return (math.nan, math.nan)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(draws))
    return (means[int(0.025 * draws)], means[int(0.975 * draws) - 1])


def mean(v):
    v = [x for x in v if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(v) / len(v) if v else math.nan


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--ref", default="snapkv")
    ap.add_argument("--mode")
    ap.add_argument("--tasks")
    ap.add_argument("--by", choices=["budget", "task", "length"], default="budget")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rows = load(a.results)
    if a.mode:
        rows = [r for r in rows if r["mode"] == a.mode]
    if a.tasks:
        keep = set(a.tasks.split(","))
        rows = [r for r in rows if r["task"] in keep]
    if not rows:
        sys.exit("eval-compare: no result lines")
    rng = random.Random(a.seed)
    # (group, press, size) -> prompt -> row
    cells = defaultdict(dict)
    for r in rows:
        group = r["mode"] if a.by == "budget" else "%s %s" % (r["mode"], r["task"] if a.by == "task" else r["length"])
        cells[(group, r["press"], size_label(r))][prompt_key(r)] = r
    groups = list(dict.fromkeys(k[0] for k in cells))
    presses = list(dict.fromkeys(k[1] for k in cells))
    sizes = sorted({k[2] for k in cells if k[2] != "full"}, key=lambda s: (s[0] != "b", float(s[1:])))
    head = ["group", "press", "size", "score", "95% CI", "vs %s" % a.ref, "95% CI", "won/lost/tied", "needle", "dNLL", "n"]
    out = []
    for g in groups:
        full = cells.get((g, "none", "full"), {})
        if full:
            sc = [r["score"] for r in full.values()]
            lo, hi = bootstrap(sc, rng)
            out.append([g, "full", "-", "%.1f" % mean(sc), "%.1f-%.1f" % (lo, hi), "", "", "", "1.000", "0", str(len(sc))])
        for s in sizes:
            ref = cells.get((g, a.ref, s), {})
            for p in presses:
                if p == "none" or (g, p, s) not in cells:
                    continue
                c = cells[(g, p, s)]
                sc = [r["score"] for r in c.values()]
                lo, hi = bootstrap(sc, rng)
                diff, wlt = "", ""
                dlo = dhi = math.nan
                common = [k for k in c if k in ref]
                if p != a.ref and common:
                    d = [c[k]["score"] - ref[k]["score"] for k in common]
                    dlo, dhi = bootstrap(d, rng)
                    diff = "%+.1f" % mean(d)
                    wlt = "%d/%d/%d" % (sum(x > 0 for x in d), sum(x < 0 for x in d), sum(x == 0 for x in d))
                needle = mean([r.get("needle_kept") for r in c.values()])
                dnll = mean([r.get("nll_diff") for r in c.values()])
                out.append([g, p, s, "%.1f" % mean(sc), "%.1f-%.1f" % (lo, hi), diff,
                            "" if not diff else "%+.1f-%+.1f" % (dlo, dhi), wlt,
                            "%.3f" % needle if not math.isnan(needle) else "-", "%.3f" % dnll if not math.isnan(dnll) else "-",
                            str(len(sc))])
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in out:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(str(x[i])) for x in out + [head]) for i in range(len(head))]
        for r in [head] + out:
            print("  ".join(str(x).ljust(widths[i]) for i, x in enumerate(r)))


if __name__ == "__main__":
    main()
