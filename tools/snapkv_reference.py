#!/usr/bin/env python3
"""Reference SnapKV selection with the official code's semantics (docs/presses.md A.4-A.7, Part D).

Written from the spec, not from any implementation, so that it can serve as an independent reference
for the engine's C press.  Everything is computed in float32 (A.15) with torch; only the ranking step
uses numpy.

Pipeline for one layer (positions are 0-based, window rows r = 0..w-1 are positions P + r, P = L - w):
  S0  L < C: keep every position (no scoring).  L >= C: compress (L == C keeps the same set).
  S1  z[h,r,j] = <q_{P+r}^h, k_j^{g(h)}> / sqrt(d)           for every query head h and every key j < L
  S2  z[h,r,j] = -inf for j > P + r                          (causal mask on the window's own block)
  S3  a = softmax over all L keys, in float32
  S4  v[h,j] = sum_r a[h,r,j]                                prefix columns j < P only (SUM, not mean)
  --  granularity kv_head: v[g,j] = agg_{h in group g} v[h,j], agg in {mean, max, sum}, BEFORE pooling
  S5  avg pool: zero padding, divisor always kernel (count_include_pad); max pool: padding never wins
  S6  top-k with k = C - w, ties to the LOWER position
  out sorted kept prefix positions ++ window positions P..L-1

granularity query_head is the official code (KV heads repeated to query heads, one selection per query
head); kv_head stores one selection per KV head (g(h) = h // G, HF repeat_kv layout).

Run directly to check the hand examples of docs/presses.md A.14:  python tools/snapkv_reference.py
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

POOLS = ("avg", "max")
GRANULARITIES = ("query_head", "kv_head")
GROUP_AGGS = ("mean", "max", "sum")


@dataclass(frozen=True)
class SnapKVParams:
    budget: int                    # C: positions kept per stored head, window included
    window: int                    # w: observation window (last w prompt positions)
    kernel: int                    # odd pooling kernel; 1 = no pooling
    pool: str = "avg"              # avg | max
    granularity: str = "query_head"  # query_head (official) | kv_head
    group_agg: str = "mean"        # kv_head only: mean | max | sum over the query heads of a group

    def check(self) -> None:
        if self.budget - self.window <= 0:
            raise ValueError(f"budget {self.budget} must exceed window {self.window} (official assert C - w > 0)")
        if self.kernel < 1 or self.kernel % 2 == 0:
            raise ValueError(f"kernel {self.kernel} must be odd (even kernels give P+1 pooled values, A.4 S5)")
        if self.pool not in POOLS or self.granularity not in GRANULARITIES or self.group_agg not in GROUP_AGGS:
            raise ValueError(f"bad option in {self}")


# ----------------------------------------------------------------------------------------------------
# S1-S3: window attention probabilities
# ----------------------------------------------------------------------------------------------------


def window_probs(q_window: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """a[h, r, j]: softmax over all L keys of the last w queries (S1-S3), float32.

    q_window: [Hq, w, d] post-RoPE queries of positions L-w..L-1; keys: [Hkv, L, d] post-RoPE keys."""
    n_head, w, d = q_window.shape
    n_head_kv, n_keys, _ = keys.shape
    if n_head % n_head_kv != 0 or w > n_keys:
        raise ValueError(f"shapes q {tuple(q_window.shape)} k {tuple(keys.shape)}")
    group = n_head // n_head_kv
    q = q_window.to(torch.float32)
    k = keys.to(torch.float32).repeat_interleave(group, dim=0)          # query head h reads KV head h // G
    z = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(d)                # [Hq, w, L]
    prefix = n_keys - w
    rows = torch.arange(w).view(w, 1)
    cols = torch.arange(n_keys).view(1, n_keys)
    masked = cols > prefix + rows                                        # key after the query's position
    z = z.masked_fill(masked, float("-inf"))
    return torch.softmax(z, dim=-1, dtype=torch.float32)


# ----------------------------------------------------------------------------------------------------
# S4-S6
# ----------------------------------------------------------------------------------------------------


def votes_from_probs(probs: torch.Tensor) -> torch.Tensor:
    """v[h, j] = sum over the w window rows of a[h, r, j] for prefix keys j < P (S4)."""
    _, w, n_keys = probs.shape
    return probs[:, :, : n_keys - w].to(torch.float32).sum(dim=1)


def group_votes(votes: torch.Tensor, n_head_kv: int, group_agg: str) -> torch.Tensor:
    """Aggregate per-query-head votes [Hq, P] over each KV head's group -> [Hkv, P] (A.5, Part D.2)."""
    n_head, prefix = votes.shape
    grouped = votes.view(n_head_kv, n_head // n_head_kv, prefix)
    if group_agg == "mean":
        return grouped.mean(dim=1)
    if group_agg == "max":
        return grouped.max(dim=1).values
    if group_agg == "sum":
        return grouped.sum(dim=1)
    raise ValueError(group_agg)


def pool_scores(votes: torch.Tensor, kernel: int, pool: str) -> torch.Tensor:
    """1-D pooling along positions, stride 1, padding kernel // 2 (S5), written out explicitly.

    avg: zero padding and divisor always `kernel`; max: the maximum over the in-range neighbours."""
    n_rows, prefix = votes.shape
    half = kernel // 2
    out = torch.empty_like(votes)
    for i in range(prefix):
        lo, hi = max(0, i - half), min(prefix, i + half + 1)
        span = votes[:, lo:hi]
        out[:, i] = span.sum(dim=1) / kernel if pool == "avg" else span.max(dim=1).values
    return out


def top_k_lower_position(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the k largest scores, ties to the lower position, returned in ascending order (S6)."""
    positions = np.arange(scores.shape[0])
    order = np.lexsort((positions, -scores.astype(np.float64)))         # last key is primary
    return sorted(int(i) for i in order[:k])


# ----------------------------------------------------------------------------------------------------
# Whole selection
# ----------------------------------------------------------------------------------------------------


def select_from_votes(votes: torch.Tensor, n_keys: int, n_head_kv: int, params: SnapKVParams) -> list[list[int]]:
    """Kept positions per stored head from per-query-head prefix votes [Hq, P] (S5-S6 and the window).

    Returns one ascending list per query head (granularity query_head) or per KV head (kv_head)."""
    params.check()
    w, n_head = params.window, votes.shape[0]
    n_stored = n_head if params.granularity == "query_head" else n_head_kv
    if n_keys < params.budget:                                           # S0: short prompt, keep all
        return [list(range(n_keys)) for _ in range(n_stored)]
    prefix = n_keys - w
    if votes.shape[1] != prefix:
        raise ValueError(f"votes cover {votes.shape[1]} positions, expected P = {prefix}")
    if params.granularity == "kv_head":
        votes = group_votes(votes, n_head_kv, params.group_agg)
    scores = pool_scores(votes.to(torch.float32), params.kernel, params.pool).numpy()
    k = params.budget - w
    window_positions = list(range(prefix, n_keys))
    return [top_k_lower_position(row, k) + window_positions for row in scores]


def select(q_window: torch.Tensor, keys: torch.Tensor, params: SnapKVParams) -> list[list[int]]:
    """Official-semantics SnapKV selection for one layer.

    q_window: [Hq, >= w, d] post-RoPE queries of the LAST prompt positions (only the last w rows are
    used); keys: [Hkv, L, d] post-RoPE keys of the whole prompt."""
    params.check()
    n_head_kv, n_keys, _ = keys.shape
    if n_keys < params.budget:
        n_stored = q_window.shape[0] if params.granularity == "query_head" else n_head_kv
        return [list(range(n_keys)) for _ in range(n_stored)]
    probs = window_probs(q_window[:, -params.window:, :], keys)
    return select_from_votes(votes_from_probs(probs), n_keys, n_head_kv, params)


def pooled_scores(q_window: torch.Tensor, keys: torch.Tensor, params: SnapKVParams) -> np.ndarray:
    """The S5 scores the top-k ranks, [stored heads, P] (for tie and margin reporting)."""
    n_head_kv = keys.shape[0]
    votes = votes_from_probs(window_probs(q_window[:, -params.window:, :], keys))
    if params.granularity == "kv_head":
        votes = group_votes(votes, n_head_kv, params.group_agg)
    return pool_scores(votes, params.kernel, params.pool).numpy()


# ----------------------------------------------------------------------------------------------------
# docs/presses.md A.14 hand examples
# ----------------------------------------------------------------------------------------------------


def _sixteenths(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32) / 16.0


def check_a14_1_and_2() -> None:
    """A.14.1 (avg pool from probabilities) and A.14.2 (max pool tie test)."""
    probs = _sixteenths([[5, 1, 1, 2, 3, 1, 1, 1, 1, 0, 0, 0],
                         [4, 1, 0, 1, 5, 1, 0, 2, 1, 1, 0, 0],
                         [3, 0, 1, 1, 2, 3, 1, 1, 2, 1, 1, 0],
                         [4, 1, 1, 0, 2, 2, 0, 3, 1, 1, 0, 1]]).unsqueeze(0)    # one head, w = 4, L = 12
    votes = votes_from_probs(probs)
    assert torch.equal(votes[0] * 16, torch.tensor([16., 3, 3, 4, 12, 7, 2, 7])), votes
    pooled = pool_scores(votes, 3, "avg")[0]
    expect = torch.tensor([19., 22, 10, 19, 23, 21, 16, 9]) / 48
    assert torch.allclose(pooled, expect, atol=1e-7), pooled
    avg = SnapKVParams(budget=7, window=4, kernel=3, pool="avg")
    assert select_from_votes(votes, 12, 1, avg) == [[1, 4, 5, 8, 9, 10, 11]]
    no_pool = SnapKVParams(budget=7, window=4, kernel=1, pool="avg")   # {0, 4, 5/7 tie} -> lower wins: 5
    assert select_from_votes(votes, 12, 1, no_pool) == [[0, 4, 5, 8, 9, 10, 11]]
    # A.14.2
    assert torch.equal(pool_scores(votes, 3, "max")[0] * 16, torch.tensor([16., 16, 4, 12, 12, 12, 7, 7]))
    assert select_from_votes(votes, 12, 1, SnapKVParams(9, 4, 3, "max")) == [[0, 1, 3, 4, 5, 8, 9, 10, 11]]
    assert select_from_votes(votes, 12, 1, SnapKVParams(7, 4, 3, "max")) == [[0, 1, 3, 8, 9, 10, 11]]


def check_a14_3() -> None:
    """A.14.3: raw Q/K, scaling by 1/sqrt(d), the window's causal mask, softmax over the whole prompt."""
    keys = torch.tensor([[[-1., -2], [-2, -2], [-2, 1], [2, -1], [-1, -2], [-1, -1], [0, -2], [1, 1]]])
    q_window = torch.tensor([[[2., 2], [-2, 0]]])
    probs = window_probs(q_window, keys)[0]
    expect = torch.tensor([[0.003188, 0.000775, 0.053944, 0.912674, 0.003188, 0.013115, 0.013115, 0],
                           [0.086632, 0.356339, 0.356339, 0.001245, 0.086632, 0.086632, 0.021062, 0.005120]])
    assert torch.allclose(probs, expect, atol=1e-5), probs
    assert probs[0, 7].item() == 0.0
    votes = votes_from_probs(window_probs(q_window, keys))
    expect_votes = torch.tensor([0.089820, 0.357114, 0.410283, 0.913919, 0.089820, 0.099747])
    assert torch.allclose(votes[0], expect_votes, atol=1e-5), votes
    assert torch.allclose(pool_scores(votes, 3, "avg")[0],
                          torch.tensor([0.148978, 0.285739, 0.560439, 0.471341, 0.367829, 0.063189]), atol=1e-5)
    assert torch.allclose(pool_scores(votes, 3, "max")[0],
                          torch.tensor([0.357114, 0.410283, 0.913919, 0.913919, 0.913919, 0.099747]), atol=1e-5)
    assert select(q_window, keys, SnapKVParams(5, 2, 3, "avg")) == [[2, 3, 4, 6, 7]]
    assert select(q_window, keys, SnapKVParams(5, 2, 3, "max")) == [[2, 3, 4, 6, 7]]
    assert select(q_window, keys, SnapKVParams(5, 2, 1, "avg")) == [[1, 2, 3, 6, 7]]
    # Mask regression check: without the causal mask row 6 would put 0.789653 on key 7 and avg3 -> {1,2,3}.
    unmasked = torch.softmax(torch.matmul(q_window, keys.transpose(1, 2)) / math.sqrt(2), dim=-1)
    assert abs(unmasked[0, 0, 7].item() - 0.789653) < 1e-5
    assert torch.allclose(pool_scores(votes_from_probs(unmasked), 3, "avg")[0],
                          torch.tensor([0.147935, 0.270497, 0.305803, 0.216070, 0.123305, 0.058898]), atol=1e-5)
    assert select_from_votes(votes_from_probs(unmasked), 8, 1, SnapKVParams(5, 2, 3, "avg")) == [[1, 2, 3, 6, 7]]


def check_a14_4() -> None:
    """A.14.4: two query heads sharing one KV head."""
    votes = _sixteenths([[8, 0, 1, 6, 6, 1, 0, 2], [7, 2, 0, 0, 1, 3, 7, 8]])    # L = 10, w = 2, P = 8
    assert torch.equal(pool_scores(votes, 3, "avg") * 48,
                       torch.tensor([[8., 9, 7, 13, 13, 7, 3, 2], [9., 9, 2, 1, 4, 11, 18, 15]]))
    official = SnapKVParams(5, 2, 3, "avg", "query_head")
    assert select_from_votes(votes, 10, 1, official) == [[1, 3, 4, 8, 9], [5, 6, 7, 8, 9]]
    for agg in ("mean", "sum"):
        params = SnapKVParams(5, 2, 3, "avg", "kv_head", agg)
        assert select_from_votes(votes, 10, 1, params) == [[1, 5, 6, 8, 9]], agg
    mean_pooled = pool_scores(group_votes(votes, 1, "mean"), 3, "avg") * 48
    assert torch.equal(mean_pooled, torch.tensor([[8.5, 9, 4.5, 7, 8.5, 9, 10.5, 8.5]]))


def check_a14_5() -> None:
    """A.14.5: budget edge cases, w = 4, C = 7, kernel 3 avg."""
    params = SnapKVParams(7, 4, 3, "avg")
    assert select_from_votes(torch.zeros(1, 2), 6, 1, params) == [[0, 1, 2, 3, 4, 5]]          # L < C
    assert select_from_votes(_sixteenths([[3, 9, 4]]), 7, 1, params) == [list(range(7))]       # L == C
    votes = _sixteenths([[14, 1, 5, 3]])                                                       # L = 8
    assert torch.equal(pool_scores(votes, 3, "avg") * 48, torch.tensor([[15., 20, 9, 8]]))
    assert select_from_votes(votes, 8, 1, params) == [[0, 1, 2, 4, 5, 6, 7]]


def check_hand_examples() -> None:
    """Assert that this reference reproduces all five A.14 examples."""
    check_a14_1_and_2()
    check_a14_3()
    check_a14_4()
    check_a14_5()


if __name__ == "__main__":
    check_hand_examples()
    print("docs/presses.md A.14.1-A.14.5: all hand examples reproduced")
