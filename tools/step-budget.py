#!/usr/bin/env python3
"""How fast a batched decode step could be on this machine, from the kernels' measured rates (standard library only).

usage: tools/step-budget.py MODEL [--rows 8] [--threads 2] [--depth 576] [--one-stream T/S ...]
                            [--promptkv build/promptkv] [--bench-dot build/bench-dot] [--reps 4] [--runs 3]

A step of R streams multiplies every weight matrix by R activation rows and attends over each stream's
cache. This tool prices that work with the engine's own kernels, timed alone on one thread:
  * per weight type in MODEL (`promptkv info --tensors`), the interleaved kernel with R rows on a matrix
    too large for the caches (`bench-dot TYPE K M --x8 --rows R`, M chosen for 64 Mi weights, more than
    the last-level cache holds at any of these types), the fastest of RUNS runs, in ns per 32-element
    block and activation row: the rate at which a step's matrices, which stream from memory, are multiplied;
  * attention's float multiply-adds (layers x query heads x DEPTH cache rows x head dim x 2, per token) at
    the FMA instruction's ceiling (`bench-dot peak`), a bound no kernel passes.
The weights' time plus that attention bound, split perfectly over THREADS threads, gives the most tokens a
second the step could produce with the kernels as they are and nothing else costing time (no norms, no
waits). Each kernel is timed on one thread with the memory to itself, where a step's threads share it: the
bound is, if anything, high. With --one-stream T/S it prints what 4x each one-stream rate would need. The int8 instruction's
ceiling is printed beside, for the kernels' efficiency. docs/server.md "What bounds the batched step" reads
this tool's output.
"""
import argparse
import re
from collections import defaultdict
import subprocess
import sys

BLOCK = 32  # elements per block in bench-dot's rate


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"step-budget: {' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()[:300]}")
    return p.stdout


def grab(pattern, text, what):
    """The groups of pattern's first match in a command's output, or a one-line error naming what is missing."""
    m = re.search(pattern, text, re.M)
    if not m:
        sys.exit(f"step-budget: no {what} (pattern {pattern!r})")
    return m.groups()


def model_shape(promptkv, model):
    """Multiply-adds per token by weight type, K of each type's largest share, and the attention shape."""
    out = run([promptkv, "info", "--tensors", model])
    tensors = [(m.group(1), m.group(2), int(m.group(3)), int(m.group(4)))
               for m in re.finditer(r"^(\S+\.weight)\s+(\w+)\s+(\d+) x (\d+)\s", out, re.M)]
    has_output = any(name == "output.weight" for name, _, _, _ in tensors)
    macs, k_macs = defaultdict(int), defaultdict(lambda: defaultdict(int))
    for name, typ, k, n in tensors:
        # token_embd is a lookup, multiplied only when it is also the output matrix (tied embeddings)
        multiplied = (name.startswith("blk.") or name == "output.weight"
                      or (name == "token_embd.weight" and not has_output))
        if typ in ("F32", "F16", "BF16") or not multiplied:
            continue
        macs[typ] += k * n
        k_macs[typ][k] += k * n
    if not macs:
        sys.exit(f"step-budget: no quantized weight matrices found in {model}")
    layers, sliding, window = grab(r"^layers:\s+(\d+) \((\d+) sliding-window, window (\d+)", out,
                                   "layers line in promptkv info's output")
    heads, head_dim = grab(r"^heads:\s+(\d+) query, \d+ key/value.*head dim (\d+)", out,
                           "heads line in promptkv info's output")
    shape = dict(layers=int(layers), sliding=int(sliding), window=int(window), heads=int(heads),
                 head_dim=int(head_dim))
    main_k = {t: max(ks, key=ks.get) for t, ks in k_macs.items()}
    return macs, main_k, shape


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--rows", type=int, default=8, help="streams in the step (activation rows)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depth", type=int, default=576, help="cache rows each stream attends over")
    ap.add_argument("--one-stream", type=float, nargs="*", default=[], help="one-stream rates to set 4x against")
    ap.add_argument("--promptkv", default="build/promptkv")
    ap.add_argument("--bench-dot", default="build/bench-dot")
    ap.add_argument("--reps", type=int, default=4, help="passes over the matrix per bench-dot run")
    ap.add_argument("--runs", type=int, default=3, help="bench-dot runs per type, the fastest taken")
    a = ap.parse_args()

    macs, main_k, shape = model_shape(a.promptkv, a.model)
    peak = run([a.bench_dot, "peak"])
    fma = float(grab(r"f32 FMA, 256-bit: ([\d.]+) G", peak, "f32 FMA ceiling in bench-dot peak's output")[0])
    dot = float(grab(r"vpdpbusd\), 512-bit: ([\d.]+) G", peak, "512-bit vpdpbusd ceiling in bench-dot peak's output")[0])
    print(f"one thread's ceilings: int8 dot product {dot:.1f} G multiply-adds/s, f32 FMA {fma:.1f} G")

    total_macs = sum(macs.values())
    weights_s = 0.0  # one thread's seconds per token
    print(f"\n| type | multiply-adds per token | K | kernel, {a.rows} rows, streaming | of the int8 ceiling | ms per token, one thread |")
    print("| ---- | ---: | ---: | ---: | ---: | ---: |")
    for typ in sorted(macs, key=macs.get, reverse=True):
        k = main_k[typ]
        m = -(-64 * 2**20 // (8 * k)) * 8  # a multiple of 8 rows; 64 Mi weights: 36 MiB at Q4_K, beyond the 32 MiB L3 here
        cmd = [a.bench_dot, typ.lower(), str(k), str(m), "--x8", "--rows", str(a.rows), "--reps", str(a.reps)]
        # the fastest of a few runs: the host's memory speed varies, and the bound should not be low for it
        ns = min(float(grab(r"([\d.]+) ns per 32-element block and row", run(cmd), "kernel rate in bench-dot's output")[0])
                 for _ in range(a.runs))
        t = macs[typ] * ns / BLOCK * 1e-9
        weights_s += t
        eff = (BLOCK / ns) / dot  # G multiply-adds/s against the ceiling
        print(f"| {typ} | {macs[typ] / 1e6:.1f} M | {k} | {ns:.3f} ns per block and row | {eff:.0%} | {t * 1e3:.3f} |")

    full = shape["layers"] - shape["sliding"]
    rows_swa = min(a.depth, shape["window"]) if shape["sliding"] else 0
    att_fma = shape["heads"] * shape["head_dim"] * 2 * (full * a.depth + shape["sliding"] * rows_swa)
    att_s = att_fma / (fma * 1e9)
    per_token = (weights_s + att_s) / a.threads
    print(f"\nweights: {total_macs / 1e6:.1f} M multiply-adds per token, {weights_s / a.threads * 1e3:.3f} ms on "
          f"{a.threads} threads at the rates above ({total_macs / weights_s / 1e9 / dot:.0%} of the int8 ceiling)")
    print(f"attention at depth {a.depth}: {att_fma / 1e6:.1f} M float multiply-adds per token, at least "
          f"{att_s / a.threads * 1e3:.3f} ms on {a.threads} threads (the FMA ceiling)")
    bound = 1.0 / per_token
    print(f"the step's bound with these kernels and nothing else: {per_token * 1e3:.3f} ms per token, "
          f"{bound:.1f} t/s at most")
    all_ceiling = 1.0 / ((total_macs / (dot * 1e9) + att_s) / a.threads)
    print(f"the same with every weight kernel at the int8 ceiling: {all_ceiling:.1f} t/s at most")
    for r in a.one_stream:
        need = 4 * r
        verdict = "within" if need <= bound else "beyond"
        print(f"4x one stream at {r:.1f} t/s: {need:.1f} t/s, {need / bound:.0%} of the bound ({verdict} it)")


if __name__ == "__main__":
    main()
