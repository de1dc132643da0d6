#!/usr/bin/env python3
"""Rewrite the generated tables of docs/*.md from the committed result lines (standard library only).

usage: tools/docs-tables.py [--check] [DOC.md ...]        (default: every docs/*.md holding a marker)

A generated block in a page is

    <!-- table:NAME -->
    ...what the command of NAME prints...
    <!-- end -->

and NAME is one of TABLES below: the command is the one the page shows above the block, so a reader can
re-run it. With --check nothing is written and the exit status is 1 when a block is out of date.
"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPARE = [sys.executable, os.path.join("tools", "eval-compare.py")]
Q05 = "docs/results/qwen05-4k/results.jsonl.gz"
GRID = "docs/results/needle-grid/results.jsonl.gz"
QA = "docs/results/query-agnostic/results.jsonl.gz"
MQ = "docs/results/multi-question/results.jsonl.gz"
Q15 = "docs/results/qwen15-4k/results.jsonl.gz"

# NAME: (arguments of tools/eval-compare.py, whether the output goes in a code fence)
TABLES = {
    "qwen05-4k": ([Q05, "--pivot"], False),
    "qwen05-4k-paired": ([Q05, "--markdown"], False),
    "qwen05-4k-cost": ([Q05, "--cost"], True),
    "needle-grid": ([GRID, "--by", "length", "--markdown"], False),
    "needle-grid-depth": ([GRID, "--grid"], False),
    "needle-grid-cost": ([GRID, "--cost"], True),
    "qwen15-4k": ([Q15, "--pivot"], False),
    "query-agnostic": ([QA, "--pivot"], False),
    "query-agnostic-cost": ([QA, "--cost"], True),
    "multi-question": ([MQ, "--pivot"], False),
    "multi-question-cost": ([MQ, "--cost"], True),
    "qwen15-4k-paired": ([Q15, "--markdown"], False),
}

BLOCK = re.compile(r"(<!-- table:([A-Za-z0-9_.-]+) -->\n)(.*?)(<!-- end -->)", re.S)


def render(name):
    if name not in TABLES:
        raise SystemExit(f"docs-tables: unknown table '{name}' (known: {', '.join(sorted(TABLES))})")
    args, fenced = TABLES[name]
    out = subprocess.run(COMPARE + args, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    out = out.rstrip("\n") + "\n"
    return f"```\n{out}```\n" if fenced else out


def main(argv):
    check = "--check" in argv
    docs = [a for a in argv if a != "--check"] or sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    stale = 0
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        new = BLOCK.sub(lambda m: m.group(1) + render(m.group(2)) + m.group(4), text)
        if new == text:
            continue
        stale += 1
        if check:
            print(f"docs-tables: {os.path.relpath(doc, ROOT)} is out of date")
        else:
            with open(doc, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"docs-tables: rewrote {os.path.relpath(doc, ROOT)}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
