#!/usr/bin/env python3
"""Writes tests/fixtures/protokv/: ProtoKV kept sets from the brute-force reference and budget-allocation
figures from the original PyramidKV / AdaKV code.  See tests/fixtures/protokv/README.md.

  <model>.keep     tools/protokv_reference.py on tests/fixtures/press/<model>.tensors, ~16 option sets
  pyramid.txt      per-layer budgets: KVCache-Factory PyramidKVCluster.update_kv (budget C) and
                   kvpress 0.5.5 PyramidKVPress.get_layer_budget (compression ratio)
  adakv.txt        per-head budgets: KVCache-Factory AdaKVCluster.update_kv, with the scores it ranked

Needs numpy (the .keep files) and, for the budget files, torch, transformers and kvpress 0.5.5
(tools/requirements-kvpress.txt) plus a checkout of KVCache-Factory (https://github.com/Zefan-Cai/KVCache-Factory,
commit c97f9d7 was used):

  .venv-kvpress/bin/python tools/make-protokv-fixtures.py --kvcache-factory path/to/KVCache-Factory
  python3 tools/make-protokv-fixtures.py --keep-only          # the .keep files alone (numpy)
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import protokv_reference as ref  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "protokv"
MODELS = ("tiny-llama", "tiny-qwen2")

# Decision margins below these are reported as fragile: a float32 engine (relative error ~1e-6) could decide
# differently there.  Theta is a z-score (O(1)); cosines are in [-1, 1]; psi and votes are relative.
FRAGILE = {"sat": 1e-4, "lsh": 1e-6, "assign": 1e-5, "psi": 1e-6, "fill": 1e-6}

# The seed's first reading (the options' defaults before docs/protokv.md's development split): the cases
# below test the mechanics on it, so they spell it out; their own options come after and override it.
FIRST_READING = dict(assign="global", score="logit", agg="sum", kernel=1, pool="avg", chunk="none")

# (name, budget, window, seed, options); every case but the first two is FIRST_READING + its options
CASES = [
    ("chosen_defaults_c48_w8", 48, 8, 0, {}),
    ("first_reading_c48_w8", 48, 8, 0, dict(FIRST_READING)),
] + [(name, budget, window, seed, {**FIRST_READING, **opts}) for name, budget, window, seed, opts in [
    ("m8_r2_v16_c48_w8", 48, 8, 0, dict(m=8, r=2, v=16)),
    ("m8_r1_v8_c24_w4", 24, 4, 0, dict(m=8, r=1, v=8)),
    ("m12_r3_v12_k3_c64_w16", 64, 16, 0, dict(m=12, r=3, v=12, kappa=3)),
    ("edge_zero", 48, 8, 0, dict(m=8, r=2, v=16, edge="zero")),
    ("sign_similar", 48, 8, 0, dict(m=8, r=2, v=16, sign="similar")),
    ("beta_1", 48, 8, 0, dict(beta=1.0, r=2, v=16)),
    ("sigma_2.5", 48, 8, 0, dict(m=8, r=2, v=16, sigma=2.5)),
    ("score_attn", 48, 8, 0, dict(m=8, r=2, v=16, score="attn")),
    ("agg_mean", 48, 8, 0, dict(m=8, r=2, v=16, agg="mean")),
    ("overflow_skip", 48, 8, 0, dict(m=8, r=2, v=16, overflow="skip")),
    ("skip_mean_k1_c32_w4", 32, 4, 0, dict(m=16, r=2, v=6, kappa=1, overflow="skip", agg="mean")),
    ("seed7_c40_w8", 40, 8, 7, dict(m=8, r=2, v=16)),
    ("attn_k2_c56_w32", 56, 32, 3, dict(m=6, r=2, v=10, score="attn", kappa=2)),
    ("m4_r4_v20_k0_c48_w8", 48, 8, 0, dict(m=4, r=4, v=20, kappa=0)),
    ("keep_all_c96_w8", 96, 8, 0, dict(m=8, r=2, v=16)),
    ("evict_one_c95_w16", 95, 16, 0, dict(m=8, r=2, v=16)),
    ("chunk8_c48_w8", 48, 8, 0, dict(m=8, r=2, chunk=8)),
    ("chunk6_local_c48_w8", 48, 8, 0, dict(m=8, r=2, chunk=6, assign="local")),
    ("chunk4_local_reach2_c40_w8", 40, 8, 0, dict(m=8, r=2, chunk=4, assign="local", reach=2, score="attn")),
    ("local_v12_reach0_c48_w8", 48, 8, 0, dict(m=8, r=2, v=12, assign="local", reach=0)),
    ("agg_max_attn_c48_w8", 48, 8, 0, dict(m=8, r=2, v=16, score="attn", agg="max")),
    ("kernel5_avg_c48_w8", 48, 8, 0, dict(m=8, r=2, v=16, score="attn", kernel=5, pool="avg")),
    ("kernel3_max_c40_w4", 40, 4, 0, dict(m=8, r=2, v=16, score="attn", kernel=3, pool="max", agg="mean")),
    ("mix0_kernel5_c48_w8", 48, 8, 0, dict(m=8, r=2, v=16, score="attn", kernel=5, mix=0.0)),
    ("mix05_max_chunk8_c48_w8", 48, 8, 0, dict(m=8, r=2, chunk=8, assign="local", score="attn", agg="max", mix=0.5)),
    ("sinks4_chunk8_c48_w8", 48, 8, 0, dict(m=8, r=2, chunk=8, assign="local", score="attn", agg="max", sinks=4)),
    ("sinks2_skip_c32_w4", 32, 4, 0, dict(m=8, r=2, v=10, overflow="skip", sinks=2)),
    ("no_sat_chunk8_c48_w8", 48, 8, 0, dict(m=0, chunk=8, assign="local", score="attn", agg="mean")),
]]


# ----------------------------------------------------------------------------------------------------
# the press dumps (format: tests/fixtures/press/README.md)
# ----------------------------------------------------------------------------------------------------


def load_tensors(path: Path) -> dict:
    data = path.read_bytes()
    assert data[:8] == b"PKVPRS1\0", path
    n_layers, n_head, n_head_kv, head_dim, L, w_max = struct.unpack_from("<6i", data, 8)
    off = 8 + 24
    floats = np.frombuffer(data, dtype="<f4", offset=off)
    layers = []
    p = 0
    for _ in range(n_layers):
        q = floats[p:p + n_head * w_max * head_dim].reshape(n_head, w_max, head_dim)
        p += q.size
        k = floats[p:p + n_head_kv * L * head_dim].reshape(n_head_kv, L, head_dim)
        p += k.size
        p += n_head_kv * L * head_dim + 2 * n_head * L                     # values, attn_sum, attn_last
        layers.append((q.astype(np.float64), k.astype(np.float64)))
    return dict(n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim, L=L, w_max=w_max, layers=layers)


def case_line(name: str, budget: int, window: int, seed: int, opts: dict) -> str:
    items = [f"budget={budget}", f"window={window}", f"seed={seed}"] + [f"{k}={v}" for k, v in opts.items()]
    return f"case {name} press=protokv " + " ".join(items)


def keep_cases(model: str) -> tuple[list[str], int, list[str]]:
    t = load_tensors(ROOT / "tests" / "fixtures" / "press" / f"{model}.tensors")
    group = t["n_head"] // t["n_head_kv"]
    lines, fragile = [], []
    n_sel = 0
    for name, budget, window, seed, opts in CASES:
        opt = ref.ProtoKVOptions(**{k: (None if v == "none" else v) for k, v in opts.items()})
        lines.append(case_line(name, budget, window, seed, opts))
        for layer, (q, k) in enumerate(t["layers"]):
            for g in range(t["n_head_kv"]):
                q_group = q[g * group:(g + 1) * group, t["w_max"] - window:, :]
                res = ref.protokv_head(k[g], q_group, window, budget, opt, seed, layer, g)
                n_sel += 1
                lines.append(f"layer {layer} head {g} keep " + " ".join(map(str, res.keep)))
                if res.sat:
                    lines.append(f"sat layer {layer} head {g} " + " ".join(map(str, res.sat)))
                    lines.append(f"bucket layer {layer} head {g} " + " ".join(map(str, res.buckets)))
                if res.cluster:
                    lines.append(f"cluster layer {layer} head {g} " + " ".join(map(str, res.cluster)))
                if res.margins:
                    lines.append(f"# margins layer {layer} head {g} " +
                                 " ".join(f"{k}={v:.3g}" for k, v in sorted(res.margins.items())))
                for key, lim in FRAGILE.items():
                    if res.margins.get(key, math.inf) < lim:
                        fragile.append(f"{model} {name} layer {layer} head {g}: {key} margin "
                                       f"{res.margins[key]:.3g} < {lim:g}")
        lines.append("end")
    return lines, n_sel, fragile


def write_keep(model: str) -> None:
    lines, n_sel, fragile = keep_cases(model)
    header = [f"# ProtoKV kept sets of tools/protokv_reference.py on tests/fixtures/press/{model}.tensors",
              "# written by tools/make-protokv-fixtures.py; format: tests/fixtures/protokv/README.md"]
    (OUT / f"{model}.keep").write_text("\n".join(header + lines) + "\n")
    print(f"{model}.keep: {len(CASES)} cases, {n_sel} head selections")
    for f in fragile:
        print("  fragile:", f)


# ----------------------------------------------------------------------------------------------------
# budget allocation: the original code
# ----------------------------------------------------------------------------------------------------


def load_kvcache_factory(path: Path):
    spec = importlib.util.spec_from_file_location("pyramidkv_utils", path / "pyramidkv" / "pyramidkv_utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pyramid_transcribed(C: int, w: int, L: int, N: int, layer: int, beta: int) -> int:
    """A.13 by hand (integer arithmetic): rows kept, window included; L for 'keep everything'."""
    min_num = (C - w) // beta
    max_num = (C - w) * 2 - min_num
    if max_num >= L - w:
        max_num = L - w
        min_num = (C - w) * 2 - max_num
    steps = (max_num - min_num) // (N - 1)
    if L < C:
        return L
    if L < (C - w) * 2:
        return C
    return max_num - layer * steps + w


PYRAMID_BUDGET_CASES = [  # (N layers, C, w, L, beta)
    (32, 128, 8, 8000, 20), (32, 128, 8, 300, 20), (32, 128, 8, 200, 20), (32, 128, 8, 100, 20),
    (2, 48, 8, 96, 20), (3, 256, 32, 3660, 20), (3, 256, 32, 500, 20), (8, 64, 4, 1000, 5),
    (5, 40, 32, 96, 20), (4, 100, 16, 150, 3), (24, 512, 32, 4096, 20), (6, 96, 8, 96, 20),
]
PYRAMID_RATIO_CASES = [  # (N layers, ratio, w, L, beta)
    (32, 0.5, 64, 8000, 20), (32, 0.9, 64, 8000, 20), (32, 0.75, 32, 4096, 20), (3, 0.5, 32, 3660, 20),
    (2, 0.5, 8, 96, 20), (2, 0.25, 4, 96, 2), (3, 0.9, 16, 20000, 20), (18, 0.8, 32, 2000, 10),
    (1, 0.5, 8, 1000, 20), (32, 0.98, 64, 8000, 20), (4, 0.6, 8, 777, 4),
]


def pyramid_figures(kvf) -> list[str]:
    import torch
    from kvpress.presses.pyramidkv_press import PyramidKVPress

    lines = ["# pyramid budget N C w L beta layer rows   (KVCache-Factory PyramidKVCluster.update_kv: rows left)",
             "# pyramid ratio N r w L beta layer rows   (kvpress 0.5.5 PyramidKVPress.get_layer_budget)"]
    g = torch.Generator().manual_seed(2024)
    n = 0
    for N, C, w, L, beta in PYRAMID_BUDGET_CASES:
        H, d = 2, 8
        k = torch.randn(1, H, L, d, generator=g)
        q = torch.randn(1, H, L, d, generator=g)
        v = torch.randn(1, H, L, d, generator=g)
        for layer in range(N):
            cl = kvf.PyramidKVCluster(num_hidden_layers=N, window_size=w, max_capacity_prompt=C, kernel_size=5,
                                      pooling="avgpool", beta=beta, layer_idx=layer)
            ko, _ = cl.update_kv(k, q, v, None, 1)
            rows = ko.shape[-2]
            assert rows == pyramid_transcribed(C, w, L, N, layer, beta), (N, C, w, L, beta, layer, rows)
            lines.append(f"pyramid budget {N} {C} {w} {L} {beta} {layer} {rows}")
            n += 1
    for N, r, w, L, beta in PYRAMID_RATIO_CASES:
        press = PyramidKVPress(compression_ratio=r, window_size=w, beta=beta)
        for layer in range(N):
            module = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=N), layer_idx=layer)
            rows = press.get_layer_budget(module, L)
            lines.append(f"pyramid ratio {N} {r} {w} {L} {beta} {layer} {rows}")
            n += 1
    print(f"pyramid.txt: {n} layer budgets")
    return lines


ADAKV_CASES = [  # (heads, L, C, w, alpha, seed)
    (4, 96, 48, 8, 0.2, 1), (8, 200, 64, 16, 0.2, 2), (2, 96, 24, 4, 0.5, 3), (8, 300, 100, 32, 0.5, 4),
    (4, 64, 60, 8, 0.2, 5), (6, 128, 40, 8, 0.0, 6), (6, 128, 40, 8, 1.0, 7), (3, 50, 64, 8, 0.2, 8),
    (16, 256, 48, 8, 0.3, 9), (1, 100, 40, 8, 0.2, 10),
    # alpha 0.5 with odd shares: n_h * 0.5 + floor(B / 2) ends in .5, where torch.round goes to even
    (8, 120, 41, 8, 0.5, 11), (12, 150, 33, 6, 0.5, 12),
]


def adakv_figures(kvf) -> list[str]:
    import torch

    lines = ["# adakv H L C w alpha   then 'scores <head> <P floats>' and 'rows <H ints>' "
             "(KVCache-Factory AdaKVCluster.update_kv)"]
    for H, L, C, w, alpha, seed in ADAKV_CASES:
        g = torch.Generator().manual_seed(seed)
        d = 8
        k = torch.randn(1, H, L, d, generator=g)
        q = torch.randn(1, H, L, d, generator=g) * 2.0
        v = torch.randn(1, H, L, d, generator=g)
        cl = kvf.AdaKVCluster(window_size=w, kernel_size=7, pooling="maxpool", max_capacity_prompt=C, floor=alpha,
                              layer_idx=0, num_hidden_layers=1)
        scores = cl.calcul_attn_sore(k, q)[0]                                 # [H, P] what update_kv ranks
        cl.update_kv(k, q, v)
        rows = [int(x) for x in cl.head_lens.tolist()]
        B = C - w
        if alpha == 0.5 and B <= scores.shape[-1]:
            # heads whose share n_h is odd: n_h / 2 + floor(B / 2) ends in .5 (torch.round: half to even)
            top = np.argsort(-scores.reshape(-1).numpy(), kind="stable")[:H * B] // scores.shape[-1]
            odd = sum(1 for h in range(H) if int((top == h).sum()) % 2 == 1)
            print(f"  adakv H={H} B={B} alpha=0.5: {odd} heads round a .5")
        # a tie across heads at the global boundary would make the counts depend on topk's order
        B = C - w
        if B <= scores.shape[-1]:
            flat = np.sort(scores.reshape(-1).numpy())[::-1]
            kth = H * B
            if kth < flat.size:
                assert flat[kth - 1] != flat[kth] or len({h for h in range(H) if (scores[h] == flat[kth]).any()}) == 1
        lines.append(f"adakv {H} {L} {C} {w} {alpha}")
        for h in range(H):
            lines.append(f"scores {h} " + " ".join(f"{float(x):.9g}" for x in scores[h].tolist()))
        lines.append("rows " + " ".join(map(str, rows)))
    print(f"adakv.txt: {len(ADAKV_CASES)} layers")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvcache-factory", type=Path, help="checkout of Zefan-Cai/KVCache-Factory")
    ap.add_argument("--keep-only", action="store_true", help="write only the .keep files")
    args = ap.parse_args()
    ref.self_check()
    OUT.mkdir(parents=True, exist_ok=True)
    for model in MODELS:
        write_keep(model)
    if args.keep_only:
        return 0
    if not args.kvcache_factory:
        ap.error("--kvcache-factory DIR is needed for pyramid.txt and adakv.txt (or --keep-only)")
    kvf = load_kvcache_factory(args.kvcache_factory)
    (OUT / "pyramid.txt").write_text("\n".join(pyramid_figures(kvf)) + "\n")
    (OUT / "adakv.txt").write_text("\n".join(adakv_figures(kvf)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
