"""kvpress 0.5.5's query-agnostic presses on the tiny models, for tools/make-press-fixtures.py.

KeyDiffPress, ExpectedAttentionPress and KVzipPress are run on the seeded HF model and prompt of the
fixture script; the kept positions per layer and KV head become `.keep` cases (docs/presses.md Part E,
tests/fixtures/press/README.md). Every case is also checked against the formula of docs/presses.md
written out here in float64 from the model's own tensors (KeyDiff, Expected Attention), so the
documented semantics and kvpress agree; KVzip's reconstruction is kvpress's own, checked for its
budget arithmetic and for leaving the cache as it found it.

KVzipPress asks `AutoTokenizer.from_pretrained(model.config.name_or_path)` for the tokenizer; the
tiny models have none on a hub, so the script hands it the tiny vocabulary's own reference
tokenizer (sentencepiece for tiny-llama, HF `tokenizers` for tiny-qwen2, from the files that
tools/make-model-fixtures.py exports); neither has a chat template, so kvpress frames each pass
with a newline.
"""
from __future__ import annotations

import math
import tempfile
import types
from pathlib import Path

import numpy as np
import sentencepiece
import tokenizers
import torch
import transformers
from kvpress import ExpectedAttentionPress, KeyDiffPress, KVzipPress
from kvpress.utils import compute_n_kept
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

KEYDIFF_RATIOS = (0.5, 0.75)

# name, ratio, ExpectedAttentionPress keyword arguments (the defaults, and two variants that move every option)
EA_CONFIGS = [
    ("kvpress_expected_attention_r0.5", 0.5, {}),
    ("kvpress_expected_attention_r0.75", 0.75, {}),
    ("kvpress_expected_attention_meanonly_r0.5", 0.5,
     dict(n_future_positions=64, n_sink=0, use_covariance=False, use_vnorm=False)),
    ("kvpress_expected_attention_eps_r0.75", 0.75, dict(n_future_positions=200, n_sink=8, epsilon=0.01)),
]
EA_DEFAULTS = dict(n_future_positions=512, n_sink=4, use_covariance=True, use_vnorm=True, epsilon=0.0)

# name, ratio, KVzipPress keyword arguments: chunk_size 40 cuts the 96-token prompt into 40 + 40 + 16
KVZIP_CONFIGS = [
    ("kvpress_kvzip_c40_r0.5", 0.5, dict(chunk_size=40)),
    ("kvpress_kvzip_c40_r0.75", 0.75, dict(chunk_size=40)),
    ("kvpress_kvzip_c40_layer_r0.5", 0.5, dict(chunk_size=40, layerwise=True)),
    ("kvpress_kvzip_r0.75", 0.75, {}),
]


class ReferenceTokenizer:
    """What KVzipPress asks of a tokenizer: chat_template and encode(text, return_tensors, add_special_tokens)."""

    chat_template = None

    def __init__(self, directory: Path):
        if (directory / "tokenizer.model").exists():
            self.sp = sentencepiece.SentencePieceProcessor(model_file=str(directory / "tokenizer.model"))
            self.tk = None
        else:
            self.sp = None
            self.tk = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))

    def encode(self, text, return_tensors=None, add_special_tokens=False):
        assert not add_special_tokens
        ids = self.sp.encode(text) if self.sp else self.tk.encode(text, add_special_tokens=False).ids
        return torch.tensor([ids], dtype=torch.long)


# ----------------------------------------------------------------------------------------------------
# Formulas (docs/presses.md E.1, E.2) in float64
# ----------------------------------------------------------------------------------------------------


def keydiff_formula(lt) -> np.ndarray:
    k = lt.keys.numpy().astype(np.float64)                              # [Hkv, L, d]
    unit = k / np.linalg.norm(k, axis=-1, keepdims=True)
    anchor = unit.mean(axis=1, keepdims=True)
    cos = (k * anchor).sum(-1) / (np.linalg.norm(k, axis=-1) * np.linalg.norm(anchor, axis=-1))
    return -cos


@torch.no_grad()
def mean_rotation(model, n_keys: int, n_future: int, d: int) -> torch.Tensor:
    """The mean over positions [L, L + n_future) of HF's RoPE rotation, column a = mean of e_a rotated."""
    positions = torch.arange(n_keys, n_keys + n_future).unsqueeze(0)
    cos, sin = model.model.rotary_emb(torch.zeros(1, dtype=torch.float32), positions)
    basis = torch.eye(d).unsqueeze(1).unsqueeze(0).expand(1, d, n_future, d).contiguous()  # [1, a, pos, d]
    rotated, _ = apply_rotary_pos_emb(basis, basis, cos, sin)
    return rotated[0].double().mean(dim=1).T                            # [d, d]: R[:, a] = mean_p R_p e_a


def expected_attention_formula(model, lt, n_future_positions, n_sink, use_covariance, use_vnorm,
                               epsilon) -> np.ndarray:
    n_head, n_keys, d = lt.q_pre.shape
    n_head_kv = lt.keys.shape[0]
    q = lt.q_pre[:, n_sink:].double()
    mu = q.mean(dim=1)
    centred = q - mu[:, None]
    cov = centred.transpose(1, 2) @ centred / q.shape[1]
    rot = mean_rotation(model, n_keys, n_future_positions, d)
    mu = mu @ rot.T
    cov = rot @ cov @ rot.T
    keys = lt.keys[:, n_sink:].double()
    group = n_head // n_head_kv
    rows = []
    for h in range(n_head):
        k = keys[h // group]
        z = k @ mu[h] / math.sqrt(d)
        if use_covariance:
            z = z + ((k @ cov[h]) * k).sum(-1) / d / 2
        rows.append(z)
    z = torch.stack(rows)
    p = torch.softmax(z, dim=-1).view(n_head_kv, group, -1).mean(dim=1)
    if use_vnorm:
        p = (p + epsilon) * lt.values[:, n_sink:].double().norm(dim=-1)
    return torch.cat([torch.full((n_head_kv, n_sink), math.inf, dtype=torch.float64), p], dim=1).numpy()


# ----------------------------------------------------------------------------------------------------
# KVzip
# ----------------------------------------------------------------------------------------------------


@torch.no_grad()
def run_kvzip(model, tokens: list[int], tokenizer: ReferenceTokenizer, ratio: float, kwargs: dict):
    """KVzipPress on one prefill: its scores [layers, Hkv, L] (sinks as +inf) and kept positions per layer and head.

    KVzip evicts by masking (module.masked_key_indices, kvpress's attention_patch); the kept positions are
    the rest. Its compress_post refuses eager attention, hence sdpa for this run."""
    import kvpress.presses.kvzip_press as kvzip_module
    saved = kvzip_module.AutoTokenizer
    kvzip_module.AutoTokenizer = types.SimpleNamespace(from_pretrained=lambda *a, **k: tokenizer)
    press = KVzipPress(compression_ratio=ratio, **kwargs)
    captured = {}
    original_post = press.compress_post

    def capture_scores(m):
        captured["scores"] = press.score_val.clone()
        original_post(m)

    press.compress_post = capture_scores
    model.set_attn_implementation("sdpa")
    n_keys = len(tokens)
    try:
        cache = transformers.DynamicCache()
        with press(model):
            model(input_ids=torch.tensor([tokens]), past_key_values=cache, use_cache=True)
        kept = []
        for li, layer in enumerate(model.model.layers):
            assert cache.layers[li].keys.shape[2] == n_keys, "the passes must leave the context's rows only"
            _, heads, rows = layer.self_attn.masked_key_indices
            n_head_kv = cache.layers[li].keys.shape[1]
            kept.append([sorted(set(range(n_keys)) - set(rows[heads == g].tolist())) for g in range(n_head_kv)])
            layer.self_attn.masked_key_indices = None
    finally:
        model.set_attn_implementation("eager")
        kvzip_module.AutoTokenizer = saved
    scores = captured["scores"][:, 0].double().numpy()                  # [layers, Hkv, L]
    scores[..., : press.n_sink] = np.inf
    return scores, kept


def kvzip_boundary(scores: np.ndarray, n_pruned: int) -> tuple[float, list[tuple[int, int, int]]]:
    """Relative gap between the last evicted and the first kept score of one pool, and the entries that tie there."""
    flat = scores.reshape(-1)
    order = np.sort(flat)
    inside, outside = order[n_pruned], order[n_pruned - 1]
    if inside == outside:
        idx = np.nonzero(flat == inside)[0]
        return 0.0, [tuple(int(x) for x in np.unravel_index(i, scores.shape)) for i in idx]
    return float((inside - outside) / max(abs(inside), abs(outside), 1e-30)), []


# ----------------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------------


def options_attrs(options: dict) -> str:
    out = []
    for key, value in options.items():
        if key == "layerwise":
            out.append(f"scope={'layer' if value else 'global'}")
        elif isinstance(value, bool):
            out.append(f"{key}={'true' if value else 'false'}")
        else:
            out.append(f"{key}={value}")
    return " ".join(out)


def query_agnostic_cases(fx, model, spec, vocab, tokens: list[int], layers) -> list:
    """The kvpress cases of KeyDiff, Expected Attention and KVzip; fx is the fixture script's module."""
    n_keys = len(tokens)
    full_keys = [lt.keys for lt in layers]
    results = []

    def add_scorer_case(name, press_name, ratio, make, formula, attrs):
        n_kept = compute_n_kept(n_keys, ratio)
        scores, kept = fx.run_kvpress(model, tokens, make(), full_keys)
        notes = [n for li, s in enumerate(scores) for h, row in enumerate(s)
                 for n in fx.boundary_notes(row, n_kept, li, h)]
        ties = fx.tie_positions(notes)
        for li, lt in enumerate(layers):
            ours = formula(lt)
            for h in range(ours.shape[0]):
                mine = fx.snap.top_k_lower_position(ours[h], n_kept)
                assert fx.same_up_to_ties(mine, kept[li][h], ties.get((li, h), set())), \
                    f"{name} layer {li} head {h}: formula {mine} vs kvpress {kept[li][h]}"
        line = f"press={press_name} source=kvpress ratio={ratio} budget={n_kept}" + (f" {attrs}" if attrs else "")
        results.append(fx.CaseResult(name, line, kept, notes,
                                     fx.nonzero_min_gap([row for s in scores for row in s], n_kept)))

    for ratio in KEYDIFF_RATIOS:
        add_scorer_case(f"kvpress_keydiff_r{ratio}", "keydiff", ratio, lambda r=ratio: KeyDiffPress(r),
                        keydiff_formula, "")
    for name, ratio, options in EA_CONFIGS:
        full = {**EA_DEFAULTS, **options}
        add_scorer_case(name, "expected_attention", ratio,
                        lambda r=ratio, o=options: ExpectedAttentionPress(compression_ratio=r, **o),
                        lambda lt, o=full: expected_attention_formula(model, lt, **o), options_attrs(full))

    with tempfile.TemporaryDirectory() as tmp:
        fx.mf.export_hf(model, spec, vocab, Path(tmp))
        tokenizer = ReferenceTokenizer(Path(tmp))
    for name, ratio, options in KVZIP_CONFIGS:
        scores, kept = run_kvzip(model, tokens, tokenizer, ratio, options)
        n_layers, n_head_kv, _ = scores.shape
        layerwise = options.get("layerwise", False)
        pools = [scores[li:li + 1] for li in range(n_layers)] if layerwise else [scores]
        min_gap = math.inf
        for pool in pools:
            n_pruned = int(pool.size * ratio)
            gap, tied = kvzip_boundary(pool, n_pruned)
            assert not tied, f"{name}: a tie at the eviction boundary {tied}"
            min_gap = min(min_gap, gap)
            # kvpress's budget: the pool's int(numel * ratio) lowest are evicted, the rest kept
        n_kept_total = sum(len(h) for heads in kept for h in heads)
        expected = scores.size - (sum(int(p.size * ratio) for p in pools))
        assert n_kept_total == expected, f"{name}: kept {n_kept_total}, expected {expected}"
        n_kept = compute_n_kept(n_keys, ratio)                  # the per-head budget our options name
        assert n_kept * n_layers * n_head_kv == expected, "the pool's budget must equal the per-head budgets summed"
        full_options = {"n_sink": 4, "chunk_size": 2048, "layerwise": False, **options}
        line = f"press=kvzip source=kvpress ratio={ratio} budget={n_kept} {options_attrs(full_options)}"
        results.append(fx.CaseResult(name, line, kept, [], min_gap))
    return results
