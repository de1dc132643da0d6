#!/usr/bin/env python3
"""Headline tables of a promptkv eval run, from its summary.csv (standard library only).

usage: tools/eval-headline.py DIR/summary.csv

Prints, per mode, the average score (unweighted mean over tasks, as summary.md's "avg") and the relative
retention (mean of score / full score over the tasks where the full cache scores at least 50, as summary.md)
of each press at each budget and ratio, beside the full cache. The numbers are summary.csv's, reshaped.
"""
import csv
import sys
from collections import defaultdict

FULL_MIN = 50.0  # summary.md's threshold for the retention headline (docs/evaluation.md 5.2)


def config_label(row):
    if row["press"] == "none":
        return "full"
    if float(row["ratio"]) > 0:
        return "r%g" % float(row["ratio"])
    return "b%d" % int(float(row["budget"]))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2])
    rows = [r for r in csv.DictReader(open(sys.argv[1], newline="")) if r["length"] == "all"]
    # (mode, press, label) -> task -> (score, full score)
    cells = defaultdict(dict)
    for r in rows:
        cells[(r["mode"], r["press"], config_label(r))][r["task"]] = (float(r["score"]), float(r["full_score"]))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    presses = [p for p in dict.fromkeys(r["press"] for r in rows) if p != "none"]
    labels = list(dict.fromkeys(config_label(r) for r in rows if r["press"] != "none"))
    labels.sort(key=lambda s: (s[0] != "b", float(s[1:])))
    for mode in modes:
        full = cells[(mode, "none", "full")]
        full_avg = sum(s for s, _ in full.values()) / len(full)
        counted = sorted(t for t, (s, _) in full.items() if s >= FULL_MIN)
        print("### %s\n" % mode)
        print("Average score over %d tasks (full cache: %.1f); in brackets, relative retention %% over the %d "
              "tasks where the full cache scores at least %g.\n" % (len(full), full_avg, len(counted), FULL_MIN))
        print("| press | " + " | ".join(labels) + " |")
        print("|---|" + "---:|" * len(labels))
        for press in presses:
            out = []
            for label in labels:
                c = cells.get((mode, press, label))
                if not c:
                    out.append("–")
                    continue
                avg = sum(s for s, _ in c.values()) / len(c)
                rel = [c[t][0] / c[t][1] * 100 for t in counted if t in c]
                out.append("%.1f (%s)" % (avg, "%.0f%%" % (sum(rel) / len(rel)) if rel else "–"))
            print("| %s | %s |" % (press, " | ".join(out)))
        print()


if __name__ == "__main__":
    main()
