#!/usr/bin/env python3
"""Generate reference fixtures for the KV-cache presses (tests/fixtures/press/).

For the tiny models `tiny-llama` and `tiny-qwen2` of tools/make-model-fixtures.py (rebuilt in float32
with that script's own functions, and checked tensor by tensor against the committed
tests/fixtures/models/<model>-f32.gguf) and a seeded 96-token prompt, this script writes

  <model>.tensors  post-RoPE window queries, keys, values and attention statistics of every layer,
                   taken from HF transformers (eager attention), so that the C presses can be tested
                   on exactly the tensors the references used;
  <model>.keep     the positions each press keeps, per layer and head:
                   * SnapKV with the official semantics (tools/snapkv_reference.py, docs/presses.md A.4-A.7)
                     on the dumped tensors, for ~40 option combinations;
                   * kvpress 0.5.5 (SnapKVPress, StreamingLLMPress, KnormPress, TOVAPress,
                     ObservedAttentionPress) run on the same HF model and prompt, with the kept indices
                     taken from the scores kvpress's ScorerPress ranks, and checked against the keys
                     kvpress leaves in the cache;
                   * kvpress 0.5.5's query-agnostic presses (KeyDiffPress, ExpectedAttentionPress,
                     KVzipPress; tools/query_agnostic_cases.py), each checked against the formula of
                     docs/presses.md Part E where one can be written from the model's tensors.

Before writing anything it asserts that snapkv_reference.py reproduces the hand examples of
docs/presses.md A.14, that its explicit pooling equals torch's avg_pool1d / max_pool1d, that the dumped
queries and keys reproduce HF's attention rows, and that every kvpress result equals the formula of
README.md applied to the dumped tensors (up to exact ties in kvpress's scores, which are recorded).

.tensors layout (little-endian): see tests/fixtures/press/README.md.

Usage:  python tools/make-press-fixtures.py [--out DIR] [--official-snapkv DIR]
  --official-snapkv DIR: a checkout of FasterDecoding/SnapKV; its SnapKVCluster.update_kv is then also
  run on every query_head case and must keep the same positions (optional cross-check, not needed to
  regenerate the files).
Needs the packages pinned in tools/requirements-kvpress.txt (kvpress 0.5.5 needs transformers < 5.3).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import gguf
import transformers
from kvpress import KnormPress, ObservedAttentionPress, SnapKVPress, StreamingLLMPress, TOVAPress
from kvpress.utils import compute_n_kept
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

TOOLS = Path(__file__).resolve().parent
REPO_ROOT = TOOLS.parent
sys.path.insert(0, str(TOOLS))
import query_agnostic_cases  # noqa: E402
import snapkv_reference as snap  # noqa: E402


def _load_model_fixtures_module():
    spec = importlib.util.spec_from_file_location("make_model_fixtures", TOOLS / "make-model-fixtures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


mf = _load_model_fixtures_module()

DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "press"
MODEL_DIR = REPO_ROOT / "tests" / "fixtures" / "models"
MODELS = ["tiny-llama", "tiny-qwen2"]
N_PROMPT = 96
W_MAX = 32
PROMPT_STREAM = 9600             # second word of the prompt's numpy seed [model seed, PROMPT_STREAM]
TENSORS_MAGIC = b"PKVPRS1\0"
NEAR_TIE_REL = 1e-5              # boundary gaps below this (relative) are reported as near ties

# ----------------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------------

# (budget C, window w, kernel) per (granularity, group_agg, pool); every option value appears, including
# C == L (96) and C > L (120, keep all).  The kv_head/mean/avg rows with kernel 5 and C = 24/48,
# w = 8/16 are the configurations kvpress's SnapKVPress runs below (ratios 0.75/0.5).
SNAP_GRID = {
    ("query_head", None, "avg"): [(24, 4, 1), (48, 16, 5), (95, 8, 3), (96, 16, 5), (120, 32, 7)],
    ("query_head", None, "max"): [(24, 8, 3), (48, 32, 7), (95, 32, 5), (24, 16, 1), (48, 4, 5)],
    ("kv_head", "mean", "avg"): [(24, 8, 5), (48, 8, 5), (24, 16, 5), (48, 16, 5), (95, 4, 7), (96, 32, 3)],
    ("kv_head", "mean", "max"): [(24, 4, 7), (48, 16, 3), (95, 16, 5), (120, 8, 5), (48, 32, 1)],
    ("kv_head", "max", "avg"): [(24, 16, 3), (48, 8, 7), (95, 32, 1), (96, 4, 5), (120, 16, 3)],
    ("kv_head", "max", "max"): [(24, 8, 5), (48, 4, 3), (95, 8, 7), (48, 16, 5), (96, 8, 3)],
    ("kv_head", "sum", "avg"): [(24, 4, 5), (48, 32, 5), (95, 16, 3), (120, 4, 1), (48, 8, 1)],
    ("kv_head", "sum", "max"): [(24, 16, 7), (48, 8, 5), (95, 4, 3), (120, 32, 5), (24, 8, 1)],
}

KVPRESS_RATIOS = (0.5, 0.75)
SNAP_KVPRESS_WINDOWS = (8, 16)
SNAP_KVPRESS_KERNEL = 5
STREAMING_SINKS = 4


@dataclass
class CaseResult:
    name: str
    attrs: str                           # "key=value ..." after press=
    kept: list[list[list[int]]]          # [layer][head] ascending positions
    ties: list[str]                      # "ties layer l head h p ..." / "near_ties ..." lines
    min_gap: float = float("inf")        # smallest relative gap at a kept/evicted boundary that is not a tie


def snap_params_list() -> list[snap.SnapKVParams]:
    out = []
    for (granularity, agg, pool), triples in SNAP_GRID.items():
        for budget, window, kernel in triples:
            out.append(snap.SnapKVParams(budget, window, kernel, pool, granularity, agg or "mean"))
    return out


def snap_case_name(p: snap.SnapKVParams) -> str:
    gran = "qh" if p.granularity == "query_head" else f"kv{p.group_agg}"
    return f"snap_c{p.budget}_w{p.window}_k{p.kernel}_{p.pool}_{gran}"


def snap_case_attrs(p: snap.SnapKVParams) -> str:
    attrs = f"press=snapkv budget={p.budget} window={p.window} kernel={p.kernel} pool={p.pool} " \
            f"granularity={p.granularity}"
    return attrs + (f" group_agg={p.group_agg}" if p.granularity == "kv_head" else "")


# ----------------------------------------------------------------------------------------------------
# Model and prompt
# ----------------------------------------------------------------------------------------------------


def build_model(name: str) -> tuple[torch.nn.Module, object, object]:
    """The seeded float32 HF model of make-model-fixtures.py, verified against the committed f32 GGUF."""
    spec = next(s for s in mf.MODEL_SPECS if s.name == name)
    torch.manual_seed(spec.seed)
    model = mf.make_hf_model(spec)                         # eager attention, seeded weights, eval()
    reader = gguf.GGUFReader(str(MODEL_DIR / f"{name}-f32.gguf"))
    stored = {t.name: np.asarray(t.data) for t in reader.tensors}
    plans = mf.plan_tensors(model, spec)
    assert {p.gguf_name for p in plans} == set(stored), f"{name}: tensor names differ from the GGUF"
    for plan in plans:
        data = stored[plan.gguf_name].reshape(plan.data.shape)
        assert np.array_equal(data, plan.data), f"{name}: {plan.gguf_name} differs from the committed GGUF"
    return model, spec, mf.build_vocab(spec.tokenizer)


def make_prompt(spec, vocab) -> list[int]:
    allowed = np.array(sorted(set(range(mf.N_VOCAB)) - vocab.control_ids()))
    rng = np.random.default_rng([spec.seed, PROMPT_STREAM])
    return [int(t) for t in rng.choice(allowed, size=N_PROMPT)]


@dataclass
class LayerTensors:
    q_window: torch.Tensor      # [Hq, W_MAX, d] post-RoPE
    keys: torch.Tensor          # [Hkv, L, d] post-RoPE
    values: torch.Tensor        # [Hkv, L, d]
    attn: torch.Tensor          # [Hq, L, L] eager attention probabilities
    q_pre: torch.Tensor         # [Hq, L, d] queries before RoPE (Expected Attention's statistics)


@torch.no_grad()
def capture_layers(model: torch.nn.Module, tokens: list[int]) -> list[LayerTensors]:
    """One prefill with hooks on every attention module: recompute q/k/v exactly as the module does."""
    layers = model.model.layers
    seen: dict[int, LayerTensors] = {}

    def hook(module, args, kwargs, output):
        hidden = kwargs["hidden_states"]
        cos, sin = kwargs["position_embeddings"]
        n_tok, d = hidden.shape[1], module.head_dim
        q = module.q_proj(hidden).view(1, n_tok, -1, d).transpose(1, 2)
        k = module.k_proj(hidden).view(1, n_tok, -1, d).transpose(1, 2)
        v = module.v_proj(hidden).view(1, n_tok, -1, d).transpose(1, 2)
        q_pre = q[0].clone()
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        assert output[1] is not None, "eager attention must return its probabilities"
        seen[module.layer_idx] = LayerTensors(q[0, :, -W_MAX:].clone(), k[0].clone(), v[0].clone(),
                                              output[1][0].clone(), q_pre)

    handles = [layer.self_attn.register_forward_hook(hook, with_kwargs=True) for layer in layers]
    try:
        cache = transformers.DynamicCache()
        model(input_ids=torch.tensor([tokens]), past_key_values=cache, use_cache=True, output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    out = [seen[i] for i in range(len(layers))]
    for i, lt in enumerate(out):
        cached_k, cached_v = cached_kv(cache, i)
        assert torch.equal(cached_k, lt.keys) and torch.equal(cached_v, lt.values), f"layer {i}: cache != k/v"
        # The dumped window queries and keys must reproduce HF's own attention rows (RoPE, scale, mask).
        probs = snap.window_probs(lt.q_window, lt.keys)
        diff = (probs - lt.attn[:, -W_MAX:, :]).abs().max().item()
        assert diff < 1e-6, f"layer {i}: recomputed window attention differs from HF by {diff}"
    return out


def cached_kv(cache, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    return cache.layers[layer].keys[0], cache.layers[layer].values[0]


def write_tensors(path: Path, layers: list[LayerTensors], tokens: list[int]) -> None:
    n_head, _, d = layers[0].q_window.shape
    n_head_kv = layers[0].keys.shape[0]
    with open(path, "wb") as f:
        f.write(TENSORS_MAGIC)
        f.write(struct.pack("<6i", len(layers), n_head, n_head_kv, d, N_PROMPT, W_MAX))
        for lt in layers:
            attn64 = lt.attn.to(torch.float64)
            attn_sum = attn64.sum(dim=1).to(torch.float32)         # over queries i (zero for i < j)
            attn_last = lt.attn[:, -1, :]
            for t in (lt.q_window, lt.keys, lt.values, attn_sum, attn_last):
                f.write(np.ascontiguousarray(t.numpy(), dtype="<f4").tobytes())
        f.write(np.asarray(tokens, dtype="<i4").tobytes())


def verify_tensors_file(path: Path, layers: list[LayerTensors], tokens: list[int]) -> None:
    """Parse the file back with the documented layout and check its internal consistency."""
    raw = path.read_bytes()
    assert raw[:8] == TENSORS_MAGIC
    n_layers, n_head, n_head_kv, d, n_keys, w_max = struct.unpack_from("<6i", raw, 8)
    per_layer = n_head * w_max * d + 2 * n_head_kv * n_keys * d + 2 * n_head * n_keys
    assert len(raw) == 32 + 4 * (n_layers * per_layer + n_keys), "file size != documented layout"
    floats = np.frombuffer(raw, dtype="<f4", count=n_layers * per_layer, offset=32)
    assert np.frombuffer(raw, dtype="<i4", offset=32 + 4 * n_layers * per_layer).tolist() == tokens
    for li in range(n_layers):
        off = li * per_layer
        parts = []
        for shape in ((n_head, w_max, d), (n_head_kv, n_keys, d), (n_head_kv, n_keys, d),
                      (n_head, n_keys), (n_head, n_keys)):
            size = int(np.prod(shape))
            parts.append(torch.from_numpy(floats[off: off + size].reshape(shape).copy()))
            off += size
        q_window, keys, values, attn_sum, attn_last = parts
        assert torch.equal(q_window, layers[li].q_window) and torch.equal(keys, layers[li].keys)
        assert torch.equal(values, layers[li].values)
        # every query row sums to 1, so the column sums over all L queries add up to L
        assert torch.allclose(attn_sum.to(torch.float64).sum(dim=1), torch.full((n_head,), float(n_keys),
                              dtype=torch.float64), atol=1e-4)
        assert torch.allclose(attn_last, snap.window_probs(q_window, keys)[:, -1, :], atol=1e-6)
        assert (attn_sum[:, -1] == attn_last[:, -1]).all()      # the last key is seen by the last query only


# ----------------------------------------------------------------------------------------------------
# Ties
# ----------------------------------------------------------------------------------------------------


def boundary_notes(scores: np.ndarray, n_kept: int, layer: int, head: int) -> list[str]:
    """Report an exact tie or a near tie (relative gap < NEAR_TIE_REL) across the kept/evicted boundary.

    Lists every position whose score equals (or is within the gap of) the boundary score."""
    if n_kept >= scores.shape[0]:
        return []
    s = scores.astype(np.float64)
    ordered = np.sort(s)[::-1]
    inside, outside = ordered[n_kept - 1], ordered[n_kept]
    scale = max(abs(inside), abs(outside), 1e-30)
    if inside == outside:
        involved = np.nonzero(s == inside)[0]
        return [f"ties layer {layer} head {head} " + " ".join(map(str, involved))]
    if inside - outside < NEAR_TIE_REL * scale:
        involved = np.nonzero(np.abs(s - inside) <= NEAR_TIE_REL * scale)[0]
        involved = np.union1d(involved, np.nonzero(np.abs(s - outside) <= NEAR_TIE_REL * scale)[0])
        return [f"near_ties layer {layer} head {head} gap={inside - outside:.3e} " + " ".join(map(str, involved))]
    return []


def relative_gap(scores: np.ndarray, n_kept: int) -> float:
    """(last kept score - first evicted score) / magnitude; inf when nothing is evicted, 0 for a tie."""
    if n_kept >= scores.shape[0]:
        return float("inf")
    ordered = np.sort(scores.astype(np.float64))[::-1]
    inside, outside = ordered[n_kept - 1], ordered[n_kept]
    return float((inside - outside) / max(abs(inside), abs(outside), 1e-30))


def nonzero_min_gap(rows: list[np.ndarray], n_kept: int) -> float:
    gaps = [relative_gap(r, n_kept) for r in rows]
    return min([g for g in gaps if g > 0], default=float("inf"))


def tie_positions(notes: list[str]) -> dict[tuple[int, int], set[int]]:
    out: dict[tuple[int, int], set[int]] = {}
    for line in notes:
        words = line.split()
        layer, head = int(words[2]), int(words[4])
        out[(layer, head)] = {int(x) for x in words[5:] if not x.startswith("gap=")}
    return out


def same_up_to_ties(a: list[int], b: list[int], involved: set[int]) -> bool:
    return set(a) - involved == set(b) - involved and len(a) == len(b)


# ----------------------------------------------------------------------------------------------------
# (a) official-semantics SnapKV from snapkv_reference.py
# ----------------------------------------------------------------------------------------------------


def reference_snap_cases(layers: list[LayerTensors]) -> list[CaseResult]:
    results = []
    for p in snap_params_list():
        kept, notes, rows = [], [], []
        for li, lt in enumerate(layers):
            kept.append(snap.select(lt.q_window, lt.keys, p))
            if N_PROMPT >= p.budget:
                scores = snap.pooled_scores(lt.q_window, lt.keys, p)
                rows += list(scores)
                for h, row in enumerate(scores):
                    notes += boundary_notes(row, p.budget - p.window, li, h)
        results.append(CaseResult(snap_case_name(p), snap_case_attrs(p), kept, notes,
                                  nonzero_min_gap(rows, p.budget - p.window)))
    return results


def check_pooling_against_torch() -> None:
    """snapkv_reference's explicit pooling == torch avg_pool1d (count_include_pad) / max_pool1d."""
    gen = torch.Generator().manual_seed(7)
    votes = torch.rand(3, 40, generator=gen)
    for kernel in (1, 3, 5, 7):
        pad = kernel // 2
        want_avg = F.avg_pool1d(votes.unsqueeze(0), kernel, stride=1, padding=pad)[0]
        want_max = F.max_pool1d(votes.unsqueeze(0), kernel, stride=1, padding=pad)[0]
        assert torch.allclose(snap.pool_scores(votes, kernel, "avg"), want_avg, rtol=1e-6, atol=1e-7)
        assert torch.equal(snap.pool_scores(votes, kernel, "max"), want_max)


def check_official_snapkv(official_dir: Path, layers: list[LayerTensors], cases: list[CaseResult]) -> int:
    """Run FasterDecoding/SnapKV's SnapKVCluster.update_kv on every query_head case; same kept sets."""
    path = official_dir / "snapkv" / "monkeypatch" / "snapkv_utils.py"
    spec = importlib.util.spec_from_file_location("official_snapkv_utils", path)
    official = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(official)
    by_name = {c.name: c for c in cases}
    n_checked = n_exact = 0
    for p in snap_params_list():
        if p.granularity != "query_head":
            continue
        case = by_name[snap_case_name(p)]
        ties = tie_positions(case.ties)
        for li, lt in enumerate(layers):
            n_head, _, d = lt.q_window.shape
            group = n_head // lt.keys.shape[0]
            keys = lt.keys.repeat_interleave(group, dim=0).unsqueeze(0)          # official: repeat first
            values = lt.values.repeat_interleave(group, dim=0).unsqueeze(0)
            queries = torch.zeros(1, n_head, N_PROMPT, d)
            queries[0, :, -W_MAX:] = lt.q_window                               # only the last w rows are used
            cluster = official.SnapKVCluster(window_size=p.window, max_capacity_prompt=p.budget,
                                             kernel_size=p.kernel, pooling=f"{p.pool}pool")
            out_k, _ = cluster.update_kv(keys, queries, values, None, group)
            for h in range(n_head):
                kept = []
                for row in out_k[0, h]:
                    match = torch.nonzero((keys[0, h] == row).all(dim=1)).flatten().tolist()
                    assert len(match) == 1, "key rows are not unique"
                    kept.append(match[0])
                assert len(kept) == len(set(kept))
                assert same_up_to_ties(sorted(kept), case.kept[li][h], ties.get((li, h), set())), \
                    f"{case.name} layer {li} head {h}: official {sorted(kept)} vs reference {case.kept[li][h]}"
                n_checked += 1
                n_exact += sorted(kept) == case.kept[li][h]
    return n_checked, n_exact


# ----------------------------------------------------------------------------------------------------
# (b) kvpress 0.5.5
# ----------------------------------------------------------------------------------------------------


@torch.no_grad()
def run_kvpress(model, tokens: list[int], press, full_keys: list[torch.Tensor], exact: bool = True) -> tuple[list, list]:
    """Prefill with the press; return per layer the scores kvpress ranked [Hkv, L] and the kept indices.

    The indices are recomputed with the very call ScorerPress.compress makes (scores.topk(n_kept)) and
    checked against the keys kvpress left in the cache (which are in top-k order, not positional):
    bit-exact with eager attention (the run that made full_keys); to 1e-5 with another attention
    implementation, whose later layers see rounding-level different hidden states."""
    scores_by_layer: dict[int, torch.Tensor] = {}
    original_score = press.score

    def recording_score(module, *args, **kwargs):
        scores = original_score(module, *args, **kwargs)
        scores_by_layer[module.layer_idx] = scores.detach().clone()
        return scores

    press.score = recording_score
    cache = transformers.DynamicCache()
    with press(model):
        model(input_ids=torch.tensor([tokens]), past_key_values=cache, use_cache=True)
    n_kept = compute_n_kept(N_PROMPT, press.compression_ratio)
    all_scores, all_kept = [], []
    for li in range(len(full_keys)):
        scores = scores_by_layer[li][0]
        indices = scores.topk(n_kept, dim=-1).indices                       # as ScorerPress.compress
        cached_keys = cache.layers[li].keys[0]
        assert cached_keys.shape[1] == n_kept
        for h in range(scores.shape[0]):
            want = full_keys[li][h, indices[h]]
            same = torch.equal(cached_keys[h], want) if exact else torch.allclose(cached_keys[h], want, atol=1e-5)
            assert same, f"layer {li} head {h}: cache"
        all_scores.append(scores.numpy())
        all_kept.append([sorted(int(i) for i in row) for row in indices])
    return all_scores, all_kept


def formula_scores(press_name: str, lt: LayerTensors, ratio: float, window: int = 0) -> np.ndarray:
    """The scores of README.md's formulas on the dumped tensors, [Hkv, L] (window/last token forced)."""
    n_head, n_head_kv = lt.attn.shape[0], lt.keys.shape[0]
    group = n_head // n_head_kv
    big = np.float64(1e9)                  # any value above every score: forced positions
    if press_name == "snapkv":
        params = snap.SnapKVParams(N_PROMPT, window, SNAP_KVPRESS_KERNEL, "avg", "kv_head", "mean")
        pooled = snap.pooled_scores(lt.q_window, lt.keys, params).astype(np.float64)
        return np.concatenate([pooled, np.full((n_head_kv, window), big)], axis=1)
    if press_name == "streamingllm":
        n_kept = compute_n_kept(N_PROMPT, ratio)
        s = np.ones((n_head_kv, N_PROMPT))
        s[:, STREAMING_SINKS: STREAMING_SINKS + N_PROMPT - n_kept] = 0
        return s
    if press_name == "knorm":
        return -np.linalg.norm(lt.keys.numpy().astype(np.float64), axis=-1)
    if press_name == "tova":
        last = lt.attn[:, -1, :-1].numpy().astype(np.float64).mean(axis=0)
        return np.tile(np.append(last, big), (n_head_kv, 1))
    if press_name == "h2o":
        observed = lt.attn.numpy().astype(np.float64).sum(axis=1) / np.arange(N_PROMPT, 0, -1)
        return observed.reshape(n_head_kv, group, N_PROMPT).mean(axis=1)
    raise ValueError(press_name)


def kvpress_cases(model, tokens: list[int], layers: list[LayerTensors]) -> list[CaseResult]:
    full_keys = [lt.keys for lt in layers]
    configs = []
    for ratio in KVPRESS_RATIOS:
        for window in SNAP_KVPRESS_WINDOWS:
            configs.append(("snapkv", ratio, window,
                            lambda r=ratio, w=window: SnapKVPress(compression_ratio=r, window_size=w,
                                                                  kernel_size=SNAP_KVPRESS_KERNEL)))
    for ratio in KVPRESS_RATIOS:
        configs.append(("streamingllm", ratio, 0, lambda r=ratio: StreamingLLMPress(r, n_sink=STREAMING_SINKS)))
    for ratio in KVPRESS_RATIOS:
        configs.append(("knorm", ratio, 0, lambda r=ratio: KnormPress(r)))
    for ratio in KVPRESS_RATIOS:
        configs.append(("tova", ratio, 0, lambda r=ratio: TOVAPress(r)))
    for ratio in KVPRESS_RATIOS:
        configs.append(("h2o", ratio, 0, lambda r=ratio: ObservedAttentionPress(r)))

    results = []
    for press_name, ratio, window, make in configs:
        n_kept = compute_n_kept(N_PROMPT, ratio)
        scores, kept = run_kvpress(model, tokens, make(), full_keys)
        notes = [n for li, s in enumerate(scores) for h, row in enumerate(s) for n in boundary_notes(row, n_kept, li, h)]
        ties = tie_positions(notes)
        # The attention-based presses also have a path without the eager attention matrix
        # (SnapKVPress/TOVAPress recompute the window attention from the queries): it must agree.
        if press_name in ("snapkv", "tova"):
            model.set_attn_implementation("sdpa")
            try:
                _, kept_sdpa = run_kvpress(model, tokens, make(), full_keys, exact=False)
            finally:
                model.set_attn_implementation("eager")
            for li in range(len(kept)):
                for h in range(len(kept[li])):
                    assert same_up_to_ties(kept[li][h], kept_sdpa[li][h], ties.get((li, h), set())), \
                        f"{press_name} {ratio}: eager and sdpa paths keep different positions"
        # kvpress == our written-down formula on the dumped tensors (ties lower position).
        for li, lt in enumerate(layers):
            ours = formula_scores(press_name, lt, ratio, window)
            for h in range(ours.shape[0]):
                mine = snap.top_k_lower_position(ours[h], n_kept)
                assert same_up_to_ties(mine, kept[li][h], ties.get((li, h), set())), \
                    f"{press_name} ratio {ratio} layer {li} head {h}: formula {mine} vs kvpress {kept[li][h]}"
        name = f"kvpress_{press_name}" + (f"_w{window}" if press_name == "snapkv" else "") + f"_r{ratio}"
        attrs = f"press={press_name} source=kvpress ratio={ratio} budget={n_kept}"
        if press_name == "snapkv":
            attrs += f" window={window} kernel={SNAP_KVPRESS_KERNEL} pool=avg granularity=kv_head group_agg=mean"
        if press_name == "streamingllm":
            attrs += f" n_sink={STREAMING_SINKS}"
        results.append(CaseResult(name, attrs, kept, notes,
                                  nonzero_min_gap([row for s in scores for row in s], n_kept)))
    return results


def check_kvpress_snap_matches_reference(kv_cases: list[CaseResult], ref_cases: list[CaseResult]) -> int:
    """kvpress SnapKV (mean over window, pool, mean over group) == reference kv_head/mean/avg, same C."""
    by_attrs = {c.attrs: c for c in ref_cases}
    n = 0
    for case in kv_cases:
        if "press=snapkv" not in case.attrs:
            continue
        words = dict(w.split("=") for w in case.attrs.split())
        params = snap.SnapKVParams(int(words["budget"]), int(words["window"]), int(words["kernel"]),
                                   "avg", "kv_head", "mean")
        ref = by_attrs[snap_case_attrs(params)]
        ties = tie_positions(case.ties + ref.ties)
        for li, heads in enumerate(case.kept):
            for h, kept in enumerate(heads):
                assert same_up_to_ties(kept, ref.kept[li][h], ties.get((li, h), set())), \
                    f"{case.name}: kvpress {kept} vs reference {ref.kept[li][h]}"
                n += 1
    return n


# ----------------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------------


def write_keep(path: Path, model_name: str, tokens: list[int], cases: list[CaseResult]) -> None:
    lines = [f"# Kept positions per press case for {model_name} (tools/make-press-fixtures.py; "
             "tests/fixtures/press/README.md).",
             f"prompt {len(tokens)} " + " ".join(map(str, tokens))]
    for case in cases:
        lines.append(f"case {case.name} {case.attrs}")
        for li, heads in enumerate(case.kept):
            for h, kept in enumerate(heads):
                lines.append(f"layer {li} head {h} keep " + " ".join(map(str, kept)))
        lines += case.ties
        lines.append("end")
    path.write_text("\n".join(lines) + "\n")


def summarize(model_name: str, cases: list[CaseResult]) -> None:
    n_ties = sum(1 for c in cases for t in c.ties if t.startswith("ties"))
    n_near = sum(1 for c in cases for t in c.ties if t.startswith("near_ties"))
    print(f"{model_name}: {len(cases)} cases, {n_ties} exact-tie lines, {n_near} near-tie lines")
    print(f"  smallest non-tie relative boundary gap: SnapKV reference "
          f"{min(c.min_gap for c in cases if c.name.startswith('snap_')):.2e}, "
          + ", ".join(f"{c.name} {c.min_gap:.2e}" for c in cases if c.name.startswith("kvpress_")))
    for c in cases:
        for t in c.ties:
            print(f"  {c.name}: {t}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    ap.add_argument("--official-snapkv", type=Path, default=None,
                    help="checkout of FasterDecoding/SnapKV for an extra cross-check of the query_head cases")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    snap.check_hand_examples()
    check_pooling_against_torch()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"kvpress {importlib.metadata.version('kvpress')}")
    print("snapkv_reference: A.14 hand examples and pooling checks pass")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        model, spec, vocab = build_model(name)
        tokens = make_prompt(spec, vocab)
        layers = capture_layers(model, tokens)
        write_tensors(args.out / f"{name}.tensors", layers, tokens)
        verify_tensors_file(args.out / f"{name}.tensors", layers, tokens)
        ref_cases = reference_snap_cases(layers)
        kv_cases = kvpress_cases(model, tokens, layers)
        n_cross = check_kvpress_snap_matches_reference(kv_cases, ref_cases)
        print(f"{name}: kvpress SnapKV == reference kv_head/mean/avg on {n_cross} (layer, head) selections")
        if args.official_snapkv is not None:
            n_off, n_same = check_official_snapkv(args.official_snapkv, layers, ref_cases)
            print(f"{name}: official SnapKVCluster.update_kv == reference on {n_off} (layer, query head) "
                  f"selections ({n_same} identical, the rest differ only inside recorded exact ties)")
        qa_cases = query_agnostic_cases.query_agnostic_cases(sys.modules[__name__], model, spec, vocab, tokens, layers)
        cases = ref_cases + kv_cases + qa_cases
        write_keep(args.out / f"{name}.keep", name, tokens, cases)
        summarize(name, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
