#!/usr/bin/env python3
"""Press variants side by side from promptkv eval result lines, with 95% intervals (standard library only).

usage: tools/eval-compare.py RESULTS.jsonl[.gz] [RESULTS.jsonl[.gz] ...] [--ref PRESS] [--mode MODE] [--tasks LIST]
                             [--samples A-B] [--by budget|task|length] [--markdown | --pivot | --cost | --grid] [--seed N]

For every press (the eval's label: a press name or LABEL of LABEL=PRESS:...) and budget or ratio, over the
prompts of the files (joined on task, length, sample, depth and mode):

  score     mean task score (0-100) and its 95% interval (percentile bootstrap over prompts, 2000 draws)
  vs ref    the paired difference to the reference press at the same budget (--ref, default snapkv): mean
            and 95% bootstrap interval, and prompts won / lost / tied
  needle    mean fraction of needle tokens kept per layer and head (the eval's needle_kept)
  dNLL      mean increase of the gold answer's negative log-likelihood per token over the full cache
  n         prompts

--samples A-B keeps the prompts of samples A to B (indices as in the result lines): the cost of the lines one
machine state wrote, for instance.
--by task|length splits every row by task or length as well.
--grid prints the needle grid instead: per mode, press and size, a table of mean score by depth (rows) and
length (columns), over the samples of each cell.
"""
import argparse
import gzip
import json
import math
import random
import sys
from collections import defaultdict


def load(paths):
    rows = []
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
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


def quantiles(v):
    v = sorted(v)
    return v[len(v) // 2], v[int(0.1 * (len(v) - 1))], v[int(0.9 * (len(v) - 1))]


def print_cost(rows):
    """A prompt is prefilled once per mode (its full-cache line carries the prefill); every other line is one
    configuration on a copy of that cache: copy, press, the question (query-agnostic) and the decode."""
    prefill = [r["time"]["prefill_s"] for r in rows if r["press"] == "none" and "time" in r]
    per_cfg = [sum(r["time"].get(k, 0) for k in ("copy_s", "press_s", "question_s", "decode_s"))
               for r in rows if r["press"] != "none" and "time" in r]
    steps = [r["time"].get("decode_steps", 0) for r in rows if "time" in r]
    print("result lines %d, prompts x modes %d" % (len(rows), len(prefill)))
    if prefill:
        print("prefill s per prompt: median %.1f (10%%-90%%: %.1f-%.1f)" % quantiles(prefill))
    if per_cfg:
        print("s per configuration (copy + press + question + decode): median %.2f (10%%-90%%: %.2f-%.2f)" %
              quantiles(per_cfg))
    if steps:
        print("decoded tokens per line: median %d (10%%-90%%: %d-%d)" % quantiles(steps))


def print_grid(rows):
    rows = [r for r in rows if r.get("depth") is not None]
    if not rows:
        sys.exit("eval-compare: no needle-grid lines (lines with a depth)")
    cells = defaultdict(list)  # (mode, press, size) -> (depth, length) -> scores
    for r in rows:
        cells[(r["mode"], r["press"], size_label(r), r["depth"], r["length"])].append(r["score"])
    tables = list(dict.fromkeys(k[:3] for k in cells))
    depths = sorted({k[3] for k in cells})
    lengths = sorted({k[4] for k in cells})
    for mode, press, size in tables:
        name = "full cache" if press == "none" else "%s %s" % (press, size)
        n = [len(cells[(mode, press, size, d, l)]) for d in depths for l in lengths
             if (mode, press, size, d, l) in cells]
        print("**%s, %s** (samples per cell: %s)\n" % (name, mode, "/".join(str(x) for x in sorted(set(n)))))
        print("| depth % | " + " | ".join(str(l) for l in lengths) + " |")
        print("|---" * (len(lengths) + 1) + "|")
        for d in depths:
            row = []
            for l in lengths:
                sc = cells.get((mode, press, size, d, l))
                row.append("%.0f" % mean(sc) if sc else "")
            print("| %g | " % d + " | ".join(row) + " |")
        col = []
        for l in lengths:
            sc = [x for d in depths for x in cells.get((mode, press, size, d, l), [])]
            col.append("**%.1f**" % mean(sc) if sc else "")
        print("| mean | " + " | ".join(col) + " |")
        print()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--ref", default="snapkv")
    ap.add_argument("--mode")
    ap.add_argument("--tasks")
    ap.add_argument("--samples", help="A-B: only samples A..B (inclusive)")
    ap.add_argument("--by", choices=["budget", "task", "length"], default="budget")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--cost", action="store_true",
                    help="the run's cost: prompts, result lines, prefill seconds per prompt, seconds per configuration")
    ap.add_argument("--pivot", action="store_true",
                    help="markdown, one table per group: a row per press, a column per size, mean [95%% CI]")
    ap.add_argument("--grid", action="store_true",
                    help="markdown, the needle grid: per press and size, mean score by depth x length")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rows = load(a.results)
    if a.mode:
        rows = [r for r in rows if r["mode"] == a.mode]
    if a.tasks:
        keep = set(a.tasks.split(","))
        rows = [r for r in rows if r["task"] in keep]
    if a.samples:
        lo, sep, hi = a.samples.partition("-")
        try:
            lo, hi = int(lo), int(hi if sep else lo)
        except ValueError:
            sys.exit("eval-compare: --samples wants A-B (sample indices), got '%s'" % a.samples)
        rows = [r for r in rows if lo <= r["sample"] <= hi]
    if not rows:
        sys.exit("eval-compare: no result lines")
    if a.cost:
        print_cost(rows)
        return
    if a.grid:
        print_grid(rows)
        return
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
    if a.pivot:
        for g in groups:
            gs = [s for s in sizes if any((g, p, s) in cells for p in presses)]
            print("**%s**\n" % g)
            print("| press | " + " | ".join(gs) + " | prompts |")
            print("|---" * (len(gs) + 2) + "|")
            full = cells.get((g, "none", "full"), {})
            if full:
                sc = [r["score"] for r in full.values()]
                lo, hi = bootstrap(sc, rng)
                print("| full cache | " + " | ".join("%.1f [%.0f-%.0f]" % (mean(sc), lo, hi) for _ in gs) +
                      " | %d |" % len(sc))
            for p in presses:
                if p == "none":
                    continue
                row, ns = [], set()
                for s in gs:
                    c = cells.get((g, p, s))
                    if not c:
                        row.append("")
                        continue
                    sc = [r["score"] for r in c.values()]
                    lo, hi = bootstrap(sc, rng)
                    row.append("%.1f [%.0f-%.0f]" % (mean(sc), lo, hi))
                    ns.add(len(sc))
                print("| %s | " % p + " | ".join(row) + " | %s |" % "/".join(str(n) for n in sorted(ns)))
            print()
    elif a.markdown:
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
