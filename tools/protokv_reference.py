#!/usr/bin/env python3
"""Brute-force reference of ProtoKV as docs/presses.md B.0 specifies it (numpy, float64).

Written from the spec text (docs/presses.md B.0) and the definitions below, not from the
engine's C code, so that the kept sets it computes can test src/press/protokv.c.  Everything is done the
slow, obvious way: full cosine matrices, explicit loops, float64.

Per layer and KV head g, on the prefix [0, P) of post-RoPE keys (P = L - w; the window of the last w rows is
always kept), with C = budget (rows per head, window included) and k = C - w prefix rows to keep:

  1  S(i)   = (1 / D(i)) * sum_{j : |j-i| <= kappa, 0 <= j < P} cos(k_i, k_j)      self included
            D(i) = number of such j (edge="exist", default) or 2 kappa + 1 (edge="zero")
  2  z(i)   = (S(i) - mean S) / std S   (population std; std 0 -> z = 0);  theta = -z (sign="deviate") or +z
  3  O      = top m rows by theta, ties to the lower position (m clamped to P); or {i : theta(i) > beta}
  4  sigma  = median of the pairwise Euclidean distances of the keys in O (numpy.median; 1 if |O| < 2 or 0),
            or the given number.  W[i][j] = normal() / sigma (r x d, row-major), then b[i] = 2 pi unif()
            with the seeded stream below.  bit_i = cos(W_i . k + b_i) > 0 (i.e. phi_i > 0), bucket =
            sum_{i=1..r} 2^(r-i) bit_i  mod 2^r.  One prototype per non-empty bucket in bucket order:
            c = sum k / ||sum k||.
  5  R rows of the prefix not in O, in position order; v_eff = min(v, R) chunks, chunk c = ranks
            [floor(c R / v_eff), floor((c+1) R / v_eff)); prototype = sum k / ||sum k||.  Default v = 500 - 2^r;
            chunk=N instead asks for v = ceil(R / N).
  6  every prefix row i joins argmax_c cos(k_i, c) over [SAT prototypes..., chunk prototypes...] (first wins);
            assign="local": over the SAT prototypes and the chunks c with |c - home(i)| <= reach, home(i) = the
            chunk of rank min(#{non-candidate rows before i}, R - 1).
  7  vote(i) = sum_{h in group(g)} sum_{r < w} q_{h,r} . k_i   (score="logit", raw, no scale), or
            sum_{h in group(g)} sum_{r < w} softmax_j(q_{h,r} . k_j / sqrt(d), causal in the window)[i]
            (score="attn", SnapKV's vote, A.4 S1-S4); kernel K > 1 pools the votes along positions as SnapKV's
            S5 (avg: zero padding, divisor K; max: over the rows that exist).  psi(c) = sum, mean or max of the
            votes of its rows (agg).
  8  sinks: the rows at positions < sinks are kept and count against the budget, as the window does.
     mix = 1: clusters with at least one row, by psi descending, ties to the lower cluster index; keep a cluster
            whole while its rows not already kept fit the slots left; overflow="fill": the first cluster that does
            not fit gives its best-voted rows (ties to the lower position) to the remaining slots and selection
            stops; overflow="skip": it is passed over and later clusters that fit whole are still taken.
     mix < 1: rows not already kept ranked by (1 - mix) vote(i) + mix psi(cluster(i)), ties to the larger vote,
            then the lower position; the best fill the slots.
     keep = chosen prefix rows + the window rows P..L-1, ascending.  L <= C keeps every row.

Seeded random numbers (the engine draws the same ones):
  state  = seed ^ ((layer + 1) << 32) ^ ((head + 1) * 0x9e3779b97f4a7c15)        (mod 2^64)
  next() = splitmix64: state += 0x9e3779b97f4a7c15; z = state; z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9;
           z = (z ^ z >> 27) * 0x94d049bb133111eb; return z ^ z >> 31                (all mod 2^64)
  unif() = (next() >> 11) * 2^-53                                                   in [0, 1)
  normal() = sqrt(-2 ln(1 - unif())) * cos(2 pi unif())     (Box-Muller, cosine branch; the two unif() in order)

Run directly for the self-checks (hand examples of each step).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
TOTAL_PROTOTYPES = 500


@dataclass(frozen=True)
class ProtoKVOptions:
    m: int = 32
    beta: float | None = None        # threshold instead of top m
    kappa: int = 5
    edge: str = "exist"              # exist | zero
    sign: str = "deviate"            # deviate (theta = -z) | similar (theta = +z)
    r: int = 2
    v: int | None = None             # a count of chunk prototypes instead of chunk; with chunk None too: 500 - 2^r
    sigma: float | None = None       # None: median pairwise distance of the candidates
    chunk: int | None = 16           # rows per chunk prototype; None: v chunk prototypes
    assign: str = "local"            # local | global
    reach: int = 1                   # assign=local: chunks on each side
    score: str = "attn"              # attn | logit
    kernel: int = 7                  # positional pooling of the votes (odd)
    pool: str = "max"                # max | avg
    agg: str = "mean"                # mean | sum | max
    mix: float = 1.0                 # 1: whole clusters; < 1: rows by (1 - mix) vote + mix psi
    overflow: str = "fill"           # fill | skip
    sinks: int = 0                   # first rows always kept

    def chunks(self, rest: int) -> int:
        # a count v replaces the chunk size (the engine: whichever of v and chunk is set last)
        if self.v is not None:
            return self.v
        if self.chunk is not None:
            return max(1, -(-rest // self.chunk))
        return max(1, TOTAL_PROTOTYPES - (1 << self.r))


class SplitMix64:
    def __init__(self, state: int):
        self.state = state & MASK64

    def next(self) -> int:
        self.state = (self.state + GOLDEN) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def unif(self) -> float:
        return (self.next() >> 11) * 2.0**-53

    def normal(self) -> float:
        u1 = 1.0 - self.unif()
        u2 = self.unif()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def lsh_draw(seed: int, layer: int, head: int, r: int, dim: int, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    state = (seed ^ ((layer + 1) << 32) ^ (((head + 1) * GOLDEN) & MASK64)) & MASK64
    rng = SplitMix64(state)
    W = np.array([rng.normal() / sigma for _ in range(r * dim)], dtype=np.float64).reshape(r, dim)
    b = np.array([2.0 * math.pi * rng.unif() for _ in range(r)], dtype=np.float64)
    return W, b


def cos_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    out = np.zeros((a.shape[0], b.shape[0]))
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            if na[i] > 0 and nb[j] > 0:
                out[i, j] = float(a[i] @ b[j]) / (na[i] * nb[j])
    return out


def local_similarity(keys: np.ndarray, kappa: int, edge: str) -> np.ndarray:
    P = keys.shape[0]
    cos = cos_matrix(keys, keys)
    S = np.zeros(P)
    for i in range(P):
        js = [j for j in range(i - kappa, i + kappa + 1) if 0 <= j < P]
        # cos(k_i, k_i) is 1 exactly (0 for a zero key), not a rounded k.k / |k|^2
        self_cos = 1.0 if np.linalg.norm(keys[i]) > 0 else 0.0
        S[i] = sum(self_cos if j == i else cos[i, j] for j in js) / (len(js) if edge == "exist" else 2 * kappa + 1)
    return S


def outlier_degree(S: np.ndarray, sign: str) -> np.ndarray:
    mean = S.mean()
    sd = math.sqrt(((S - mean) ** 2).mean())
    z = (S - mean) / sd if sd > 0 else np.zeros_like(S)
    return -z if sign == "deviate" else z


def normalised_sum(rows: np.ndarray) -> np.ndarray:
    s = rows.sum(axis=0)
    n = np.linalg.norm(s)
    return s / n if n > 0 else s


@dataclass
class HeadResult:
    keep: list[int]
    sat: list[int] = field(default_factory=list)
    buckets: list[int] = field(default_factory=list)      # bucket of each SAT, same order
    cluster: list[int] = field(default_factory=list)      # cluster of each prefix row
    margins: dict[str, float] = field(default_factory=dict)


def row_votes(q_group: np.ndarray, keys_all: np.ndarray, P: int, score: str) -> np.ndarray:
    """q_group: [G, w, d] window queries of the KV head's query heads; keys_all: [L, d]."""
    G, w, d = q_group.shape
    votes = np.zeros(P)
    for h in range(G):
        for r in range(w):
            q = q_group[h, r]
            if score == "logit":
                votes += keys_all[:P] @ q
            else:
                visible = P + r + 1                                   # causal inside the window
                z = keys_all[:visible] @ q / math.sqrt(d)
                p = np.exp(z - z.max())
                p /= p.sum()
                votes += p[:P]
    return votes


def protokv_head(keys_all: np.ndarray, q_group: np.ndarray, window: int, budget: int, opt: ProtoKVOptions,
                 seed: int, layer: int, head: int) -> HeadResult:
    """Kept rows of one KV head (keys_all [L, d] post-RoPE, float64)."""
    L, d = keys_all.shape
    if L <= budget:
        return HeadResult(keep=list(range(L)))
    P = L - window
    keys = keys_all[:P]
    margins: dict[str, float] = {}

    # 1-3
    S = local_similarity(keys, opt.kappa, opt.edge)
    theta = outlier_degree(S, opt.sign)
    if opt.beta is not None:
        sat = [i for i in range(P) if theta[i] > opt.beta]
        margins["sat"] = float(np.min(np.abs(theta - opt.beta)))
    else:
        order = sorted(range(P), key=lambda i: (-theta[i], i))
        m = min(opt.m, P)
        sat = sorted(order[:m])
        margins["sat"] = float(theta[order[m - 1]] - theta[order[m]]) if 0 < m < P else math.inf
        if np.all(theta == 0.0):
            margins["sat"] = math.inf          # std S = 0 (kappa 0): exact ties, the lower-position rule decides

    # 4
    if opt.sigma is not None:
        sigma = opt.sigma
    else:
        dists = [float(np.linalg.norm(keys[a] - keys[b])) for ai, a in enumerate(sat) for b in sat[ai + 1:]]
        sigma = float(np.median(dists)) if dists else 1.0
        if sigma <= 0:
            sigma = 1.0
    W, b = lsh_draw(seed, layer, head, opt.r, d, sigma)
    buckets = []
    lsh_margin = math.inf
    for i in sat:
        a = W @ keys[i] + b
        bits = [1 if math.cos(x) > 0 else 0 for x in a]
        lsh_margin = min([lsh_margin] + [abs(math.cos(x)) for x in a])
        buckets.append(sum(bit << (opt.r - 1 - t) for t, bit in enumerate(bits)) % (1 << opt.r))
    margins["lsh"] = lsh_margin
    protos = []
    for bucket in range(1 << opt.r):
        members = [i for i, bk in zip(sat, buckets) if bk == bucket]
        if members:
            protos.append(normalised_sum(keys[members]))
    n_sat_protos = len(protos)

    # 5
    sat_set = set(sat)
    rest = [i for i in range(P) if i not in sat_set]
    R = len(rest)
    v = min(opt.chunks(R), R)
    for c in range(v):
        lo, hi = c * R // v, (c + 1) * R // v
        protos.append(normalised_sum(keys[rest[lo:hi]]))
    protos_arr = np.array(protos)

    # 6
    cos = cos_matrix(keys, protos_arr)
    allowed = np.ones_like(cos, dtype=bool)
    if opt.assign == "local" and v > 0:
        chunk_of_rank = [c for c in range(v) for _ in range(c * R // v, (c + 1) * R // v)]
        rank = 0
        for i in range(P):
            home = chunk_of_rank[min(rank, R - 1)]
            if i not in sat_set:
                rank += 1
            for c in range(v):
                allowed[i, n_sat_protos + c] = abs(c - home) <= opt.reach
    masked = np.where(allowed, cos, -np.inf)
    cluster = [int(np.argmax(masked[i])) for i in range(P)]                # argmax: first of equal maxima
    if protos_arr.shape[0] > 1:
        srt = np.sort(masked, axis=1)
        gaps = srt[:, -1] - srt[:, -2]
        margins["assign"] = float(np.min(gaps[np.isfinite(gaps)])) if np.isfinite(gaps).any() else math.inf
    else:
        margins["assign"] = math.inf

    # 7
    votes = row_votes(q_group, keys_all, P, opt.score)
    if opt.kernel > 1:
        p = opt.kernel // 2
        if opt.pool == "avg":
            votes = np.array([sum(votes[j] for j in range(i - p, i + p + 1) if 0 <= j < P) / opt.kernel
                              for i in range(P)])
        else:
            votes = np.array([max(votes[j] for j in range(i - p, i + p + 1) if 0 <= j < P) for i in range(P)])
    n_clusters = protos_arr.shape[0]
    size = np.zeros(n_clusters, dtype=int)
    members_of: list[list[int]] = [[] for _ in range(n_clusters)]
    for i in range(P):
        size[cluster[i]] += 1
        members_of[cluster[i]].append(i)
    psi = np.zeros(n_clusters)
    for c in range(n_clusters):
        if size[c]:
            vals = [votes[i] for i in members_of[c]]
            psi[c] = sum(vals) if opt.agg == "sum" else (sum(vals) / len(vals) if opt.agg == "mean" else max(vals))

    # 8
    live = [c for c in range(n_clusters) if size[c] > 0]
    order_c = sorted(live, key=lambda c: (-psi[c], c))
    scale = max(abs(psi[c]) for c in live) or 1.0
    margins["psi"] = min([math.inf] + [abs(psi[order_c[t]] - psi[order_c[t + 1]]) / scale
                                       for t in range(len(order_c) - 1)])
    sinks = {i for i in range(P) if i < opt.sinks}
    free = budget - window - len(sinks)
    chosen: set[int] = set(sinks)
    if opt.mix < 1.0:
        key = {i: (1.0 - opt.mix) * votes[i] + opt.mix * psi[cluster[i]] for i in range(P)}
        ranked = sorted((i for i in range(P) if i not in sinks), key=lambda i: (-key[i], -votes[i], i))
        if 0 < free < len(ranked):
            a, b2 = ranked[free - 1], ranked[free]
            margins["mix"] = abs(key[a] - key[b2]) / (max(abs(x) for x in key.values()) or 1.0)
        chosen.update(ranked[:max(free, 0)])
        free = 0
    for c in order_c:
        if free <= 0:
            break
        members = [i for i in range(P) if cluster[i] == c and i not in sinks]
        if len(members) <= free:
            chosen.update(members)
            free -= len(members)
        elif opt.overflow == "fill":
            ranked = sorted(members, key=lambda i: (-votes[i], i))
            if free < len(ranked):
                vs = abs(votes[ranked[free - 1]] - votes[ranked[free]])
                margins["fill"] = vs / (max(abs(votes[i]) for i in members) or 1.0)
            chosen.update(ranked[:free])
            free = 0
    keep = sorted(chosen) + list(range(P, L))
    return HeadResult(keep=keep, sat=sat, buckets=buckets, cluster=cluster, margins=margins)


# ----------------------------------------------------------------------------------------------------
# self-checks: small hand-computable examples of each step
# ----------------------------------------------------------------------------------------------------


def _check_splitmix() -> None:
    # splitmix64 from state 0: the published first outputs of the generator (Vigna's reference code)
    rng = SplitMix64(0)
    assert rng.next() == 0xE220A8397B1DCDAF
    assert rng.next() == 0x6E789E6AA1B965F4
    assert rng.next() == 0x06C45D188009454F


def _check_similarity() -> None:
    # three orthogonal-ish rows: cos matrix is the identity, so S = 1 / D(i)
    keys = np.eye(3)
    assert np.allclose(local_similarity(keys, 1, "exist"), [1 / 2, 1 / 3, 1 / 2])
    assert np.allclose(local_similarity(keys, 1, "zero"), [1 / 3, 1 / 3, 1 / 3])
    # a row that deviates from equal neighbours has the lowest S and the highest theta
    keys = np.array([[1.0, 0.0]] * 5 + [[0.0, 1.0]] + [[1.0, 0.0]] * 5)
    theta = outlier_degree(local_similarity(keys, 2, "exist"), "deviate")
    assert int(np.argmax(theta)) == 5


def _check_chunks() -> None:
    # R = 7 rows into v = 3 chunks: ranks [0, 2), [2, 4), [4, 7)
    R, v = 7, 3
    assert [(c * R // v, (c + 1) * R // v) for c in range(v)] == [(0, 2), (2, 4), (4, 7)]


def self_check() -> None:
    _check_splitmix()
    _check_similarity()
    _check_chunks()


if __name__ == "__main__":
    self_check()
    print("protokv_reference: self-checks passed")
