#!/usr/bin/env python3
"""Generate golden forward-pass fixtures for the engine (tests/fixtures/models/).

For each tiny model below this script
  1. builds a seeded random-weight float32 model with HF transformers,
  2. writes it as GGUF the way llama.cpp's convert_hf_to_gguf.py does (same metadata keys, tensor names,
     llama q/k row permutation, Gemma "+1" norm fold, tied output, rope_freqs for llama3 rope scaling,
     Phi-3's fused attn_qkv / ffn_up and LongRoPE factor tensors),
     once per weight type (F32, F16, Q8_0, ...; 2-D weights only, 1-D and *_norm.weight stay F32),
  3. loads the weights exactly as stored in that GGUF (dequantised) back into the HF model and records
     HF's logits for a 40-token prompt plus a 6-token greedy continuation (<model>-<type>.ref).
     The prompt (random non-control ids) is the first seeded candidate whose greedy steps all have a
     top-1/top-2 logit gap >= MIN_DECODE_MARGIN for every weight type of the model;
  4. for the Qwen3 and Phi-3 vocabularies, records the ids the reference tokenizers (HF tokenizers,
     sentencepiece) give for a few strings (<model>.tok, the format of tests/fixtures/tokenizer/*.ref).

.ref layout (little-endian):
    char magic[8] = "PKVREF1\\0"; int32 n_vocab; int32 n_prompt; int32 n_decode;
    int32 tokens[n_prompt + n_decode];
    float32 logits[(n_prompt + n_decode) * n_vocab];   // row t = logits after consuming tokens[0..t]

Only the PyPI packages pinned in tools/requirements.txt are used.  The K-quant quantisers (Q4_K, Q5_K,
Q6_K) are our own: gguf-py can dequantise those types but not quantise them.  Their byte layouts follow
engine-notes §2.2 and are checked here against gguf.quants.dequantize on every run.

Usage:  python tools/make-model-fixtures.py [--out DIR] [--models NAME ...] [--hf-dir DIR]
  --hf-dir also saves each HF checkpoint with tokenizer files, so that llama.cpp's converter can be run
  on it to cross-check the metadata and tensors written here.
"""
from __future__ import annotations

import argparse
import json
import math
import struct
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import regex
import torch
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import LlamaFileType as FT
from gguf import TokenType
import transformers

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "models"

N_VOCAB = 512
N_PROMPT = 40          # longer than the gemma sliding window (16) so both layer kinds matter
N_DECODE = 6
MAX_POSITIONS = 128    # context_length written to the GGUF; fixtures use 46 positions
REF_MAGIC = b"PKVREF1\0"
MIN_DECODE_MARGIN = 0.05   # logits; top-1 minus top-2 at every greedy decode step, every weight type
MAX_PROMPT_ATTEMPTS = 200

# ----------------------------------------------------------------------------------------------------
# Model specifications
# ----------------------------------------------------------------------------------------------------


@dataclass
class ModelSpec:
    name: str
    arch: str                     # GGUF general.architecture: llama | qwen2 | qwen3 | gemma3 | phi3
    seed: int
    weight_std: float             # std of projections, embeddings, biases (and of norm deviations)
    types: list[str]              # weight types to write, keys of WEIGHT_TYPES
    config: dict                  # HF config kwargs
    tokenizer: str                # "spm-llama" | "spm-gemma" | "spm-phi3" | "gpt2-qwen2" | "gpt2-qwen3"
    # further references of the first `n_prompt` prompt tokens, "<model>-<type><suffix>.ref": LongRoPE's
    # short factors apply to a sequence no longer than the original context
    short_refs: list[tuple[str, int]] = field(default_factory=list)
    tokenizer_ref: bool = False   # also write <model>.tok: the vocabulary's ids from the reference tokenizer


LLAMA_BASE = dict(
    vocab_size=N_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, intermediate_size=128, rms_norm_eps=1e-5,
    max_position_embeddings=MAX_POSITIONS, bos_token_id=1, eos_token_id=2, pad_token_id=None,
)

MODEL_SPECS = [
    ModelSpec(
        name="tiny-llama", arch="llama", seed=101, weight_std=0.2,
        types=["f32", "f16", "q8_0", "q4_0", "q5_0"], tokenizer="spm-llama",
        config=dict(LLAMA_BASE, tie_word_embeddings=False,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    ),
    ModelSpec(
        # original_max_position_embeddings 64 (not 32): with head_dim 16 and base 5e5 the pair wavelengths
        # are 6.3, 32.4, 167, ... so 64 puts one pair in each of the three llama3 regions
        # (kept, smoothly interpolated, divided by factor); 32 would leave the middle region empty.
        name="tiny-llama31", arch="llama", seed=102, weight_std=0.2,
        types=["f32", "f16", "q8_0"], tokenizer="spm-llama",
        config=dict(LLAMA_BASE, tie_word_embeddings=True,
                    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 64}),
    ),
    ModelSpec(
        name="tiny-qwen2", arch="qwen2", seed=103, weight_std=0.2,
        types=["f32", "f16", "q8_0"], tokenizer="gpt2-qwen2",
        config=dict(vocab_size=N_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128, rms_norm_eps=1e-6,
                    max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=False,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                    bos_token_id=N_VOCAB - 3, eos_token_id=N_VOCAB - 3, pad_token_id=N_VOCAB - 3),
    ),
    ModelSpec(
        # 6 layers: layers 0-4 sliding (window 16, rope base 1e4), layer 5 global (rope base 1e6),
        # i.e. llama.cpp's hard-coded pattern "il % 6 == 5 is global".
        name="tiny-gemma3", arch="gemma3", seed=104, weight_std=0.2,
        types=["f32", "f16", "q8_0"], tokenizer="spm-gemma",
        config=dict(vocab_size=N_VOCAB, hidden_size=64, num_hidden_layers=6, num_attention_heads=4,
                    num_key_value_heads=1, head_dim=32, intermediate_size=128, rms_norm_eps=1e-6,
                    max_position_embeddings=MAX_POSITIONS, sliding_window=16, query_pre_attn_scalar=32,
                    hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                    layer_types=["sliding_attention"] * 5 + ["full_attention"],
                    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                    pad_token_id=0, eos_token_id=1, bos_token_id=2),
    ),
    ModelSpec(
        # head_dim 32 with 4 heads: q is 128 wide over n_embd 64, as in Qwen3 (0.6B: 16 x 128 over 1024)
        name="tiny-qwen3", arch="qwen3", seed=106, weight_std=0.2,
        types=["f32", "f16", "q8_0"], tokenizer="gpt2-qwen3", tokenizer_ref=True,
        config=dict(vocab_size=N_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=32, intermediate_size=128, rms_norm_eps=1e-6,
                    max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=True,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                    bos_token_id=N_VOCAB - 5, eos_token_id=N_VOCAB - 3, pad_token_id=N_VOCAB - 5),
    ),
    ModelSpec(
        # every layer slides (window 16 < the 40-token prompt); RoPE on 8 of the 16 head dims
        # (partial_rotary_factor 0.5, as Phi-4-mini's 0.75)
        name="tiny-phi3", arch="phi3", seed=107, weight_std=0.2,
        types=["f32", "f16", "q8_0"], tokenizer="spm-phi3", tokenizer_ref=True,
        config=dict(vocab_size=N_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128, rms_norm_eps=1e-5,
                    max_position_embeddings=MAX_POSITIONS, original_max_position_embeddings=MAX_POSITIONS,
                    sliding_window=16, tie_word_embeddings=False,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                     "partial_rotary_factor": 0.5},
                    bos_token_id=1, eos_token_id=N_VOCAB - 8, pad_token_id=N_VOCAB - 8),
    ),
    ModelSpec(
        # LongRoPE ("su"): original context 32, trained 128, so the 46-token sequence takes the long
        # factors and the 32-token short reference the short ones; attention factor
        # sqrt(1 + ln 4 / ln 32) = 1.1832 from the 128/32 ratio; no window, tied output
        name="tiny-phi3-su", arch="phi3", seed=108, weight_std=0.2,
        types=["f32", "f16", "q8_0"], tokenizer="spm-phi3", short_refs=[("-short", 26)],
        config=dict(vocab_size=N_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=4, intermediate_size=128, rms_norm_eps=1e-5,
                    max_position_embeddings=MAX_POSITIONS, original_max_position_embeddings=32,
                    sliding_window=None, tie_word_embeddings=True,
                    rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                     "short_factor": [1.0, 1.02, 1.05, 1.1, 1.2, 1.35, 1.5, 1.7],
                                     "long_factor": [1.0, 1.3, 2.1, 3.6, 6.0, 9.5, 14.0, 19.0]},
                    bos_token_id=1, eos_token_id=N_VOCAB - 8, pad_token_id=N_VOCAB - 8),
    ),
    ModelSpec(
        # rows of 256 / 512 elements so that every 2-D weight can use the 256-element K-quant blocks
        name="tiny-llama-k", arch="llama", seed=105, weight_std=0.1,
        types=["q4_k", "q5_k", "q6_k"], tokenizer="spm-llama",
        config=dict(LLAMA_BASE, hidden_size=256, head_dim=64, intermediate_size=512,
                    tie_word_embeddings=False,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    ),
]

# weight type name -> (ggml type of 2-D weights, general.file_type)
WEIGHT_TYPES: dict[str, tuple[QT, FT]] = {
    "f32": (QT.F32, FT.ALL_F32),
    "f16": (QT.F16, FT.MOSTLY_F16),
    "q8_0": (QT.Q8_0, FT.MOSTLY_Q8_0),
    "q4_0": (QT.Q4_0, FT.MOSTLY_Q4_0),
    "q5_0": (QT.Q5_0, FT.MOSTLY_Q5_0),
    "q4_k": (QT.Q4_K, FT.MOSTLY_Q4_K_S),
    "q5_k": (QT.Q5_K, FT.MOSTLY_Q5_K_S),
    "q6_k": (QT.Q6_K, FT.MOSTLY_Q6_K),
}

# ----------------------------------------------------------------------------------------------------
# Tokenizer vocabularies
# ----------------------------------------------------------------------------------------------------

# Training text for the small BPE vocabularies (any fixed text works; it only makes the pieces plausible).
CORPUS = """\
The river starts in the hills above the town and runs west for three hundred miles before it reaches
the sea. In the spring the water is high and fast, and the farmers along the banks watch the weather
every morning. When the rain comes early, the fields are green by April; when it comes late, the
seeds wait in the dry ground and the people wait with them. The old bridge in the middle of the town
was built of stone more than two hundred years ago. It has seven arches, and the children of the town
learn to count them before they learn to read. Every summer there is a market on the bridge, with
bread, cheese, apples, honey, wool and fish from the boats that come up from the coast. The boats are
small and painted in bright colours: red, blue, yellow and green. Their owners know every turn of the
river and every sand bank that moves after a storm. In the autumn the leaves turn gold and the river
slows down. Mist rises from the water in the early morning, and the sound of the bells from the church
carries far across the valley. Some of the older houses near the water have their own steps down to
the river, where people once washed clothes and filled their buckets. Now most of those steps are
covered in moss, but the stones are still strong. In the winter the river sometimes freezes near the
edges, and the birds gather on the ice in the afternoon sun. The town keeps a record of the highest
floods on a wall by the mill: the marks go back to the year the mill was built, and each one has a date
and a short note written by the miller of that time. People still stop to read them when they walk past.
"""

# GPT-2 / Qwen2 pre-tokenizer regex (HF form of llama.cpp's "qwen2" pre-tokenizer, engine-notes §4.4)
QWEN2_PRETOKENIZE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                     r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPM_SPACE = "\u2581"


@dataclass
class Vocab:
    model: str                    # tokenizer.ggml.model
    pre: str                      # tokenizer.ggml.pre
    tokens: list[str]
    types: list[int]
    scores: list[float] | None = None
    merges: list[str] = field(default_factory=list)
    special_ids: dict[str, int] = field(default_factory=dict)   # bos/eos/unk/pad -> id
    add_bos: bool = True
    add_eos: bool = False
    add_space_prefix: bool | None = None                      # None: key not written

    def control_ids(self) -> set[int]:
        return {i for i, t in enumerate(self.types) if t in (TokenType.CONTROL, TokenType.UNKNOWN)}


def learn_bpe(words: Counter, n_new_tokens: int, known: set[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """Greedy BPE on word counts (words are tuples of symbols) until n_new_tokens new symbols exist.

    Returns (merges in rank order, new token strings in creation order).  Ties are broken by the pair's
    text so the result is deterministic."""
    words = Counter(words)
    merges: list[tuple[str, str]] = []
    new_tokens: list[str] = []
    known = set(known)
    while len(new_tokens) < n_new_tokens:
        pairs: Counter = Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            raise RuntimeError("corpus too small for the requested vocabulary size")
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merged = best[0] + best[1]
        merges.append(best)
        if merged not in known:
            known.add(merged)
            new_tokens.append(merged)
        updated: Counter = Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            updated[tuple(out)] += count
        words = updated
    return merges, new_tokens


def build_spm_vocab(specials: list[tuple[str, int, float]], special_ids: dict[str, int],
                    add_space_prefix: bool | None, tail: list[tuple[str, int, float]] = (),
                    add_bos: bool = True) -> Vocab:
    """SentencePiece-BPE style vocab: specials, 256 byte tokens <0xXX>, merged pieces, single characters,
    then the `tail` (added tokens and padding, as the converter appends them for Phi-3).

    Scores decrease with merge rank (what llama.cpp's SPM tokenizer needs to reproduce BPE order);
    single characters come last with the lowest scores, as in Llama 2's vocabulary."""
    tokens = [s[0] for s in specials]
    types = [s[1] for s in specials]
    scores = [s[2] for s in specials]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(TokenType.BYTE)
        scores.append(0.0)
    words = Counter(tuple(SPM_SPACE + w) for w in CORPUS.split())
    chars = sorted({c for w in words for c in w})
    n_merged = N_VOCAB - len(tokens) - len(chars) - len(tail)
    _, pieces = learn_bpe(words, n_merged, set(chars))
    for rank, piece in enumerate(pieces + chars):
        tokens.append(piece)
        types.append(TokenType.NORMAL)
        scores.append(-float(rank))
    for text, ttype, score in tail:
        tokens.append(text)
        types.append(ttype)
        scores.append(score)
    assert len(tokens) == N_VOCAB and len(set(tokens)) == N_VOCAB
    return Vocab(model="llama", pre="default", tokens=tokens, types=types, scores=scores,
                 special_ids=special_ids, add_bos=add_bos, add_eos=False, add_space_prefix=add_space_prefix)


def gpt2_bytes_to_unicode() -> list[tuple[int, str]]:
    """GPT-2's byte -> printable character table, in GPT-2's vocabulary order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) \
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


def build_gpt2_vocab(user_defined: tuple[str, ...] = (), eos: str = "<|endoftext|>") -> Vocab:
    """Byte-level BPE vocab like Qwen2's: 256 byte characters, learned merges, then 3 control tokens and
    the user-defined ones (Qwen3's <think> and </think>: added tokens that are not special, which the
    converter types USER_DEFINED and every tokenizer splits out of any text)."""
    table = gpt2_bytes_to_unicode()
    byte_char = dict(table)
    tokens = [c for _, c in table]
    controls = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    specials = controls + list(user_defined)
    words: Counter = Counter()
    for piece in regex.findall(QWEN2_PRETOKENIZE, CORPUS):
        words[tuple(byte_char[b] for b in piece.encode("utf-8"))] += 1
    merges, new_tokens = learn_bpe(words, N_VOCAB - len(tokens) - len(specials), set(tokens))
    tokens += new_tokens + specials
    types = ([TokenType.NORMAL] * (N_VOCAB - len(specials)) + [TokenType.CONTROL] * len(controls)
             + [TokenType.USER_DEFINED] * len(user_defined))
    eot = tokens.index("<|endoftext|>")
    assert len(tokens) == N_VOCAB and len(set(tokens)) == N_VOCAB
    return Vocab(model="gpt2", pre="qwen2", tokens=tokens, types=types,
                 merges=[f"{a} {b}" for a, b in merges],
                 special_ids={"bos": eot, "eos": tokens.index(eos), "pad": eot}, add_bos=False, add_eos=False)


def build_vocab(kind: str) -> Vocab:
    if kind == "spm-llama":
        return build_spm_vocab([("<unk>", TokenType.UNKNOWN, 0.0), ("<s>", TokenType.CONTROL, 0.0),
                                ("</s>", TokenType.CONTROL, 0.0)],
                               {"bos": 1, "eos": 2, "unk": 0}, add_space_prefix=None)
    if kind == "spm-gemma":
        return build_spm_vocab([("<pad>", TokenType.CONTROL, -1000.0), ("<eos>", TokenType.CONTROL, -1000.0),
                                ("<bos>", TokenType.CONTROL, -1000.0), ("<unk>", TokenType.UNKNOWN, -1000.0)],
                               {"bos": 2, "eos": 1, "unk": 3, "pad": 0}, add_space_prefix=False)
    if kind == "spm-phi3":
        # Phi-3's added tokens (special, so CONTROL, score -1000) and the converter's [PAD<id>] padding
        # up to the embedding rows (UNUSED, score -10000); eos <|endoftext|>, no BOS added
        added = ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>", "<|system|>"]
        pads = [f"[PAD{i}]" for i in range(N_VOCAB - 3, N_VOCAB)]
        tail = [(t, TokenType.CONTROL, -1000.0) for t in added] + [(t, TokenType.UNUSED, -10000.0) for t in pads]
        eot = N_VOCAB - len(tail)
        return build_spm_vocab([("<unk>", TokenType.UNKNOWN, 0.0), ("<s>", TokenType.CONTROL, 0.0),
                                ("</s>", TokenType.CONTROL, 0.0)],
                               {"bos": 1, "eos": eot, "unk": 0, "pad": eot}, add_space_prefix=None, tail=tail,
                               add_bos=False)
    if kind == "gpt2-qwen2":
        return build_gpt2_vocab()
    if kind == "gpt2-qwen3":
        return build_gpt2_vocab(user_defined=("<think>", "</think>"), eos="<|im_end|>")
    raise ValueError(kind)


# ----------------------------------------------------------------------------------------------------
# HF model
# ----------------------------------------------------------------------------------------------------


def make_hf_model(spec: ModelSpec) -> torch.nn.Module:
    if spec.arch == "llama":
        config = transformers.LlamaConfig(**spec.config)
        model = transformers.LlamaForCausalLM(config)
    elif spec.arch == "qwen2":
        config = transformers.Qwen2Config(**spec.config)
        model = transformers.Qwen2ForCausalLM(config)
    elif spec.arch == "qwen3":
        config = transformers.Qwen3Config(**spec.config)
        model = transformers.Qwen3ForCausalLM(config)
        assert config.layer_types == ["full_attention"] * config.num_hidden_layers, config.layer_types
    elif spec.arch == "phi3":
        config = transformers.Phi3Config(**spec.config)
        model = transformers.Phi3ForCausalLM(config)
    elif spec.arch == "gemma3":
        config = transformers.Gemma3TextConfig(**spec.config)
        model = transformers.Gemma3ForCausalLM(config)
        # llama.cpp: layer il is sliding iff il % 6 < 5 (engine-notes §3.2)
        expected = ["sliding_attention" if il % 6 < 5 else "full_attention" for il in range(6)]
        assert config.layer_types == expected, config.layer_types
    else:
        raise ValueError(spec.arch)
    model.set_attn_implementation("eager")     # plain softmax(QK^T)V in float32, no fused kernels
    init_weights(model, spec)
    return model.eval()


def is_norm(name: str) -> bool:
    return name.endswith("norm.weight")


def init_weights(model: torch.nn.Module, spec: ModelSpec) -> None:
    """Seeded, deliberately large weights so that logits are far from uniform and tests are sensitive.

    Norm weights are 1 +- std as effective multipliers; Gemma stores w with the model using (1 + w)."""
    gen = torch.Generator().manual_seed(spec.seed)
    with torch.no_grad():
        for name, param in model.named_parameters():    # tied lm_head is the same parameter, listed once
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32) * spec.weight_std
            if is_norm(name):
                param.copy_(noise if spec.arch == "gemma3" else 1.0 + noise)
            else:
                param.copy_(noise)


# ----------------------------------------------------------------------------------------------------
# HF -> GGUF tensor mapping (mirrors convert_hf_to_gguf.py for these five architectures)
# ----------------------------------------------------------------------------------------------------


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Converter's LlamaModel.permute: per head, rows (j, j + d/2) become rows (2j, 2j+1) (engine-notes §5.2)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LAYER_NAMES_COMMON = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
LAYER_NAMES_LLAMA = {**LAYER_NAMES_COMMON, "post_attention_layernorm.weight": "ffn_norm.weight"}
LAYER_NAMES_QWEN3 = {
    **LAYER_NAMES_LLAMA,
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
}
# Phi-3 keeps HF's fused projections: qkv_proj (q rows, then k, then v) and gate_up_proj (gate rows, then
# up) become attn_qkv and ffn_up as they are
LAYER_NAMES_PHI3 = {
    **LAYER_NAMES_LLAMA,
    "self_attn.qkv_proj.weight": "attn_qkv.weight",
    "mlp.gate_up_proj.weight": "ffn_up.weight",
}
LAYER_NAMES_GEMMA3 = {
    **LAYER_NAMES_COMMON,
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}


@dataclass
class TensorPlan:
    gguf_name: str
    hf_name: str | None                          # None for generated tensors (rope_freqs)
    data: np.ndarray                             # float32, numpy (= PyTorch) shape, GGUF content
    to_hf: Callable[[np.ndarray], np.ndarray]    # GGUF content -> HF parameter


def gguf_name_of(hf_name: str, arch: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    parts = hf_name.split(".")
    assert parts[:2] == ["model", "layers"], hf_name
    table = {"gemma3": LAYER_NAMES_GEMMA3, "qwen3": LAYER_NAMES_QWEN3, "phi3": LAYER_NAMES_PHI3}.get(
        arch, LAYER_NAMES_LLAMA)
    return f"blk.{parts[2]}.{table['.'.join(parts[3:])]}"


def llama3_rope_factors(rope: dict, head_dim: int) -> np.ndarray:
    """Converter's LlamaModel.generate_extra_tensors (engine-notes §5.3): per-pair divisor of theta.

    Computed with the converter's own float32 torch arithmetic so that the stored values match its output
    bit for bit."""
    base = rope["rope_theta"]
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old_ctx = rope["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32).numpy()


def plan_tensors(model: torch.nn.Module, spec: ModelSpec) -> list[TensorPlan]:
    cfg = spec.config
    plans: list[TensorPlan] = []
    rope = cfg.get("rope_parameters", {})
    if spec.arch == "llama" and rope.get("rope_type") == "llama3":
        plans.append(TensorPlan("rope_freqs.weight", None, llama3_rope_factors(rope, cfg["head_dim"]),
                                lambda a: a))
    if spec.arch == "phi3" and rope.get("long_factor"):
        # converter's Phi3MiniModel.generate_extra_tensors: the two factor lists as F32 tensors, first
        for kind in ("long", "short"):
            plans.append(TensorPlan(f"rope_factors_{kind}.weight", None,
                                    torch.tensor(rope[f"{kind}_factor"], dtype=torch.float32).numpy(), lambda a: a))
    state = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    if cfg.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    n_head, n_head_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    for hf_name, w in state.items():
        gname = gguf_name_of(hf_name, spec.arch)
        to_hf: Callable[[np.ndarray], np.ndarray] = lambda a: a
        if spec.arch == "llama" and hf_name.endswith(("q_proj.weight", "q_proj.bias")):
            w, to_hf = llama_permute(w, n_head), (lambda a, n=n_head: llama_unpermute(a, n))
        elif spec.arch == "llama" and hf_name.endswith(("k_proj.weight", "k_proj.bias")):
            w, to_hf = llama_permute(w, n_head_kv), (lambda a, n=n_head_kv: llama_unpermute(a, n))
        elif spec.arch == "gemma3" and is_norm(hf_name):
            # Gemma3RMSNorm multiplies by (1 + w); the converter folds the 1 into every norm, q/k norms too
            w, to_hf = w + np.float32(1.0), (lambda a: a - np.float32(1.0))
        plans.append(TensorPlan(gname, hf_name, np.ascontiguousarray(w, dtype=np.float32), to_hf))
    return plans


def stored_type(plan: TensorPlan, weight_type: QT) -> QT:
    """Converter rule: 1-D tensors and *_norm.weight stay F32; other weights take the file's type."""
    if plan.data.ndim <= 1 or plan.gguf_name.endswith("_norm.weight"):
        return QT.F32
    return weight_type


# ----------------------------------------------------------------------------------------------------
# Quantisation
# ----------------------------------------------------------------------------------------------------

QK_K = 256


def _f16(x: np.ndarray) -> np.ndarray:
    """Round to fp16 and back: the value the file will actually hold."""
    return x.astype(np.float16).astype(np.float32)


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, a / np.where(b != 0, b, 1), 0).astype(np.float32)


def _pack_k_scales(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """Pack 8 6-bit scales and 8 6-bit mins per super-block into 12 bytes (engine-notes §2.2)."""
    sc = sc.astype(np.uint8)
    mn = mn.astype(np.uint8)
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
    return out


def _quantize_k_asym(blocks: np.ndarray, qmax: int) -> tuple[np.ndarray, ...]:
    """Shared Q4_K/Q5_K step: per 32-element sub-block x ~= d*sc*q - dmin*m with q in [0, qmax].

    Returns (d, dmin as fp16-rounded float32 [nb], sc, m [nb, 8] ints, q [nb, 8, 32] ints)."""
    nb = blocks.shape[0]
    x = blocks.reshape(nb, 8, 32)
    lo = np.minimum(x.min(axis=-1), 0.0)             # min is subtracted, so keep it <= 0 (m >= 0)
    hi = x.max(axis=-1)
    sub_scale = (hi - lo) / qmax
    sub_min = -lo
    d = _f16(sub_scale.max(axis=-1) / 63.0)
    dmin = _f16(sub_min.max(axis=-1) / 63.0)
    sc = np.clip(np.rint(_safe_div(sub_scale, d[:, None])), 0, 63)
    m = np.clip(np.rint(_safe_div(sub_min, dmin[:, None])), 0, 63)
    eff_scale = (d[:, None] * sc).astype(np.float32)
    eff_min = (dmin[:, None] * m).astype(np.float32)
    q = np.clip(np.rint(_safe_div(x + eff_min[..., None], eff_scale[..., None])), 0, qmax)
    return d, dmin, sc.astype(np.int32), m.astype(np.int32), q.astype(np.uint8)


def _dequant_k_asym(d, dmin, sc, m, q) -> np.ndarray:
    """What a correct reader must produce; computed in the same float32 order as gguf-py."""
    ds = (d[:, None] * sc.astype(np.float32)).astype(np.float32)[..., None]
    dm = (dmin[:, None] * m.astype(np.float32)).astype(np.float32)[..., None]
    return (ds * q.astype(np.float32) - dm).reshape(q.shape[0], QK_K)


def quantize_q4_k(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K (144 B): d f16 @0, dmin f16 @2, scales[12] @4, qs[128] @16.
    Sub-blocks 2k / 2k+1 are the low / high nibbles of qs[32k .. 32k+31]."""
    d, dmin, sc, m, q = _quantize_k_asym(blocks, 15)
    nb = blocks.shape[0]
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(nb, 128)
    raw = np.concatenate([d.astype(np.float16).view(np.uint8).reshape(nb, 2),
                          dmin.astype(np.float16).view(np.uint8).reshape(nb, 2),
                          _pack_k_scales(sc, m), qs], axis=1)
    return raw, _dequant_k_asym(d, dmin, sc, m, q)


def quantize_q5_k(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q5_K (176 B): d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48.
    Low 4 bits as Q4_K; bit 4 of element l of sub-block j is bit j of qh[l]."""
    d, dmin, sc, m, q = _quantize_k_asym(blocks, 31)
    nb = blocks.shape[0]
    low = q & 15
    qs = (low[:, 0::2, :] | (low[:, 1::2, :] << 4)).reshape(nb, 128)
    high = (q >> 4).astype(np.uint8)                               # [nb, 8 sub-blocks, 32]
    qh = np.zeros((nb, 32), dtype=np.uint8)
    for j in range(8):
        qh |= high[:, j, :] << j
    raw = np.concatenate([d.astype(np.float16).view(np.uint8).reshape(nb, 2),
                          dmin.astype(np.float16).view(np.uint8).reshape(nb, 2),
                          _pack_k_scales(sc, m), qh, qs], axis=1)
    return raw, _dequant_k_asym(d, dmin, sc, m, q)


def quantize_q6_k(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q6_K (210 B): ql[128] @0, qh[64] @128, scales int8[16] @192, d f16 @208.
    Element e: h = e/128, c = (e%128)/32, l = e%32; low nibble in ql[64h + 32(c&1) + l] (high nibble if
    c >= 2), top 2 bits are bits 2c..2c+1 of qh[32h + l]; value d * scales[e/16] * (q - 32)."""
    nb = blocks.shape[0]
    x = blocks.reshape(nb, 16, 16)
    sub_scale = np.abs(x).max(axis=-1) / 31.0
    d = _f16(sub_scale.max(axis=-1) / 127.0)
    sc = np.clip(np.rint(_safe_div(sub_scale, d[:, None])), -128, 127)
    eff = (d[:, None] * sc).astype(np.float32)
    q = (np.clip(np.rint(_safe_div(x, eff[..., None])), -32, 31) + 32).astype(np.uint8).reshape(nb, 2, 4, 32)
    ql = np.empty((nb, 2, 64), dtype=np.uint8)
    ql[:, :, 0:32] = (q[:, :, 0, :] & 15) | ((q[:, :, 2, :] & 15) << 4)
    ql[:, :, 32:64] = (q[:, :, 1, :] & 15) | ((q[:, :, 3, :] & 15) << 4)
    qh = np.zeros((nb, 2, 32), dtype=np.uint8)
    for c in range(4):
        qh |= (q[:, :, c, :] >> 4) << (2 * c)
    raw = np.concatenate([ql.reshape(nb, 128), qh.reshape(nb, 64), sc.astype(np.int8).view(np.uint8),
                          d.astype(np.float16).view(np.uint8).reshape(nb, 2)], axis=1)
    deq = (eff[..., None] * (q.reshape(nb, 16, 16).astype(np.float32) - 32.0)).reshape(nb, QK_K)
    return raw, deq


K_QUANTIZERS = {QT.Q4_K: quantize_q4_k, QT.Q5_K: quantize_q5_k, QT.Q6_K: quantize_q6_k}


def quantize_k(data: np.ndarray, qtype: QT) -> tuple[np.ndarray, np.ndarray]:
    rows, cols = data.shape
    assert cols % QK_K == 0, f"row length {cols} is not a multiple of {QK_K}"
    raw, deq = K_QUANTIZERS[qtype](data.reshape(-1, QK_K).astype(np.float32))
    return raw.reshape(rows, -1), deq.reshape(rows, cols)


def check_k_quantizers() -> None:
    """Our K-quant byte layouts must decode, through gguf-py's independent dequantiser, to exactly the
    values our quantiser intended, and those must approximate the input within the format's step."""
    rng = np.random.default_rng(7)
    x = rng.normal(0, 0.3, size=(64, 512)).astype(np.float32)
    x[0] = 0.0                                     # all-zero rows must not produce NaN/inf
    x[1, :256] = np.abs(x[1, :256])                # non-negative block: min clamps to 0
    x[2, :256] = 5.0                               # constant block
    for qtype, max_step in ((QT.Q4_K, 1 / 15), (QT.Q5_K, 1 / 31), (QT.Q6_K, 1 / 31)):
        raw, intended = quantize_k(x, qtype)
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        assert raw.shape == (64, 512 // block * type_size), raw.shape
        decoded = gguf.quants.dequantize(raw, qtype)
        assert np.array_equal(decoded, intended), f"{qtype.name}: layout mismatch with gguf-py"
        span = np.ptp(x.reshape(-1, 32), axis=1) + np.abs(x.reshape(-1, 32)).max(axis=1)
        err = np.abs(decoded - x).reshape(-1, 32).max(axis=1)
        # one quantisation step plus the rounding of the 6-bit scales/mins and the fp16 super-scales
        assert np.all(err <= span * max_step * 1.5 + 1e-6), f"{qtype.name}: error too large"
        assert np.all(np.isfinite(decoded))


def encode_tensor(data: np.ndarray, qtype: QT) -> tuple[np.ndarray, np.ndarray]:
    """Return (array to write, float32 values a reader must see)."""
    if qtype == QT.F32:
        return data, data
    if qtype == QT.F16:
        raw = data.astype(np.float16)
        return raw, raw.astype(np.float32)
    if qtype in K_QUANTIZERS:
        raw, deq = quantize_k(data, qtype)
        assert np.array_equal(gguf.quants.dequantize(raw, qtype), deq)
        return raw, deq
    raw = gguf.quants.quantize(data, qtype)
    return raw, gguf.quants.dequantize(raw, qtype).reshape(data.shape)


# ----------------------------------------------------------------------------------------------------
# GGUF writing
# ----------------------------------------------------------------------------------------------------


def phi3_rope_attn_factor(cfg: dict) -> float:
    """Converter's Phi3MiniModel.generate_extra_tensors for su / longrope: sqrt(1 + ln s / ln n_orig) with
    s = max_position_embeddings / original_max_position_embeddings (1 when s <= 1). HF's longrope
    attention_factor computes the same from the same ratio (its `factor` is unset)."""
    scale = cfg["max_position_embeddings"] / cfg["original_max_position_embeddings"]
    if scale <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(scale) / math.log(cfg["original_max_position_embeddings"]))


def write_metadata_phi3(w: gguf.GGUFWriter, spec: ModelSpec, file_type: FT) -> None:
    """Phi3MiniModel.set_gguf_parameters (which does not call TextModel's): its keys in its order, the
    original context always, rope.dimension_count from partial_rotary_factor, sliding_window 0 when
    the config has none; then attn_factor from generate_extra_tensors when there are long factors."""
    cfg = spec.config
    rope = cfg["rope_parameters"]
    n_embd, n_head = cfg["hidden_size"], cfg["num_attention_heads"]
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(spec.name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_rope_scaling_orig_ctx_len(cfg["original_max_position_embeddings"])
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_head_count(n_head)
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_dimension_count(int(rope.get("partial_rotary_factor", 1.0) * n_embd) // n_head)
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_file_type(file_type)
    w.add_sliding_window(cfg["sliding_window"] or 0)
    if rope.get("long_factor"):
        w.add_rope_scaling_attn_factors(phi3_rope_attn_factor(cfg))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)


def write_metadata(w: gguf.GGUFWriter, spec: ModelSpec, file_type: FT) -> None:
    """Model keys in the order and with the value types convert_hf_to_gguf.py uses (TextModel plus the
    LlamaModel / Qwen2Model / Qwen3Model / Gemma3Model overrides; Phi-3 has its own)."""
    if spec.arch == "phi3":
        write_metadata_phi3(w, spec, file_type)
        return
    cfg = spec.config
    rope = cfg["rope_parameters"]
    full_rope = rope.get("full_attention", rope)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(spec.name)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(full_rope["rope_theta"])
    if "sliding_attention" in rope:
        w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if "head_dim" in cfg:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_file_type(file_type)
    if spec.arch == "llama":
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(cfg["head_dim"])
    if spec.arch == "gemma3":
        w.add_sliding_window(cfg["sliding_window"])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)


def write_tokenizer(w: gguf.GGUFWriter, vocab: Vocab) -> None:
    w.add_tokenizer_model(vocab.model)
    w.add_tokenizer_pre(vocab.pre)
    w.add_token_list(vocab.tokens)
    if vocab.scores is not None:
        w.add_token_scores(vocab.scores)
    w.add_token_types(vocab.types)
    if vocab.merges:
        w.add_token_merges(vocab.merges)
    for kind in ("bos", "eos", "unk", "pad"):
        if kind in vocab.special_ids:
            getattr(w, f"add_{kind}_token_id")(vocab.special_ids[kind])
    w.add_add_bos_token(vocab.add_bos)
    w.add_add_eos_token(vocab.add_eos)
    if vocab.add_space_prefix is not None:
        w.add_add_space_prefix(vocab.add_space_prefix)


def write_gguf(path: Path, spec: ModelSpec, vocab: Vocab, file_type: FT,
               tensors: list[tuple[str, np.ndarray, QT]]) -> None:
    w = gguf.GGUFWriter(str(path), spec.arch)
    write_metadata(w, spec, file_type)
    write_tokenizer(w, vocab)
    for name, raw, qtype in tensors:
        w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ----------------------------------------------------------------------------------------------------
# Reference logits
# ----------------------------------------------------------------------------------------------------


@torch.no_grad()
def logits_of(model: torch.nn.Module, tokens: list[int]) -> np.ndarray:
    out = model(input_ids=torch.tensor([tokens], dtype=torch.long), use_cache=False)
    return out.logits[0].to(torch.float32).numpy()


def reference_run(model: torch.nn.Module, prompt: list[int]) -> tuple[list[int], np.ndarray]:
    """Greedy continuation of N_DECODE tokens, then logits of every position of the whole sequence.

    Each step runs the whole sequence without a cache, so LongRoPE (which HF switches by the length of
    the sequence) sees the final length's factors at every position, as the engine does."""
    tokens = list(prompt)
    for _ in range(N_DECODE):
        tokens.append(int(np.argmax(logits_of(model, tokens)[-1])))
    logits = logits_of(model, tokens)
    assert logits.shape == (len(prompt) + N_DECODE, N_VOCAB)
    assert [int(t) for t in np.argmax(logits[len(prompt) - 1:-1], axis=1)] == tokens[len(prompt):]
    return tokens, logits


def write_ref(path: Path, tokens: list[int], logits: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(REF_MAGIC)
        f.write(struct.pack("<iii", N_VOCAB, len(tokens) - N_DECODE, N_DECODE))
        f.write(np.asarray(tokens, dtype="<i4").tobytes())
        f.write(np.ascontiguousarray(logits, dtype="<f4").tobytes())


def make_prompt(spec: ModelSpec, vocab: Vocab, attempt: int) -> list[int]:
    allowed = np.array(sorted(set(range(N_VOCAB)) - vocab.control_ids()))
    rng = np.random.default_rng([spec.seed, attempt])
    return [int(t) for t in rng.choice(allowed, size=N_PROMPT)]


def decode_margin(logits: np.ndarray) -> float:
    """Smallest top-1 minus top-2 logit over the rows that chose the decode tokens."""
    top2 = np.sort(logits[len(logits) - N_DECODE - 1:-1], axis=1)[:, -2:]
    return float((top2[:, 1] - top2[:, 0]).min())


# ----------------------------------------------------------------------------------------------------
# Optional HF checkpoint export (for running llama.cpp's converter as a cross-check)
# ----------------------------------------------------------------------------------------------------


def _pb_varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _pb_field(num: int, wire: int, payload: bytes) -> bytes:
    return _pb_varint((num << 3) | wire) + payload


def _pb_bytes(num: int, data: bytes) -> bytes:
    return _pb_field(num, 2, _pb_varint(len(data)) + data)


def _pb_int(num: int, value: int) -> bytes:
    return _pb_field(num, 0, _pb_varint(value))


def sentencepiece_model_proto(vocab: Vocab) -> bytes:
    """Serialise the SPM vocab as a sentencepiece ModelProto (field numbers of sentencepiece_model.proto:
    pieces=1 {piece=1, score=2, type=3}, trainer_spec=2 {model_type=3, vocab_size=4, byte_fallback=35,
    unk/bos/eos/pad_id=40..43, unk/bos/eos/pad_piece=45..48}, normalizer_spec=3 {name=1, add_dummy_prefix=3,
    remove_extra_whitespaces=4, escape_whitespaces=5})."""
    out = bytearray()
    for text, score, ttype in zip(vocab.tokens, vocab.scores, vocab.types):
        piece = _pb_bytes(1, text.encode("utf-8")) + _pb_field(2, 5, struct.pack("<f", score)) + _pb_int(3, ttype)
        out += _pb_bytes(1, piece)
    trainer = _pb_int(3, 2) + _pb_int(4, len(vocab.tokens)) + _pb_int(35, 1)
    for i, kind in enumerate(("unk", "bos", "eos", "pad")):
        token_id = vocab.special_ids.get(kind, -1)
        trainer += _pb_int(40 + i, token_id)
        if token_id >= 0:
            trainer += _pb_bytes(45 + i, vocab.tokens[token_id].encode("utf-8"))
    out += _pb_bytes(2, trainer)
    add_prefix = 0 if vocab.add_space_prefix is False else 1
    normalizer = _pb_bytes(1, b"identity") + _pb_int(3, add_prefix) + _pb_int(4, 0) + _pb_int(5, 1)
    out += _pb_bytes(3, normalizer)
    return bytes(out)


def gpt2_tokenizer_json(vocab: Vocab) -> dict:
    n_regular = sum(1 for t in vocab.types if t == TokenType.NORMAL)
    return {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": vocab.tokens[i], "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": vocab.types[i] == TokenType.CONTROL}
                         for i in range(n_regular, len(vocab.tokens))],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PRETOKENIZE}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(vocab.tokens[:n_regular])},
                  "merges": [m.split(" ") for m in vocab.merges]},
    }


def export_hf(model: torch.nn.Module, spec: ModelSpec, vocab: Vocab, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    tok_config: dict = {"add_bos_token": vocab.add_bos, "add_eos_token": vocab.add_eos}
    if vocab.model == "llama":
        (directory / "tokenizer.model").write_bytes(sentencepiece_model_proto(vocab))
        config = json.loads((directory / "config.json").read_text())
        config["unk_token_id"] = vocab.special_ids["unk"]
        (directory / "config.json").write_text(json.dumps(config, indent=2))
    else:
        (directory / "tokenizer.json").write_text(json.dumps(gpt2_tokenizer_json(vocab), ensure_ascii=False))
        tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (directory / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))


# ----------------------------------------------------------------------------------------------------


def generate(spec: ModelSpec, out_dir: Path, hf_dir: Path | None) -> list[dict]:
    """Write <model>-<type>.gguf and .ref for every type of one model; return one summary row per file."""
    torch.manual_seed(spec.seed)
    vocab = build_vocab(spec.tokenizer)
    model = make_hf_model(spec)
    assert model.get_input_embeddings().weight.shape[0] == len(vocab.tokens)
    if hf_dir is not None:
        export_hf(model, spec, vocab, hf_dir / spec.name)
    if spec.tokenizer_ref:
        with tempfile.TemporaryDirectory() as tmp:
            export_hf(model, spec, vocab, Path(tmp))
            write_tokenizer_ref(out_dir / f"{spec.name}.tok", spec, tokenizer_refs(vocab, spec, Path(tmp)))
    plans = plan_tensors(model, spec)
    original = {k: v.clone() for k, v in model.state_dict().items()}

    stored_weights = {}         # type name -> HF state dict holding the values as stored in the GGUF
    for type_name in spec.types:
        weight_type, file_type = WEIGHT_TYPES[type_name]
        tensors, as_stored = [], {}
        for plan in plans:
            qtype = stored_type(plan, weight_type)
            raw, values = encode_tensor(plan.data, qtype)
            tensors.append((plan.gguf_name, raw, qtype))
            if plan.hf_name is not None:
                as_stored[plan.hf_name] = torch.from_numpy(np.ascontiguousarray(plan.to_hf(values)))
        write_gguf(out_dir / f"{spec.name}-{type_name}.gguf", spec, vocab, file_type, tensors)
        stored_weights[type_name] = as_stored

    # Pick the first prompt whose greedy continuation is clear-cut for every weight type (and every
    # short reference), so that an engine whose logits differ from HF's by rounding-level amounts
    # still picks the same decode tokens.
    for attempt in range(MAX_PROMPT_ATTEMPTS):
        prompt = make_prompt(spec, vocab, attempt)
        runs = {}
        for type_name, as_stored in stored_weights.items():
            model.load_state_dict(original)
            model.load_state_dict(as_stored, strict=False)     # a tied lm_head follows the embedding
            runs[type_name] = reference_run(model, prompt)
            for suffix, n_prompt in spec.short_refs:
                runs[type_name + suffix] = reference_run(model, prompt[:n_prompt])
        if min(decode_margin(logits) for _, logits in runs.values()) >= MIN_DECODE_MARGIN:
            break
    else:
        raise RuntimeError(f"{spec.name}: no prompt with decode margins >= {MIN_DECODE_MARGIN}")
    model.load_state_dict(original)

    summary = []
    for type_name, (tokens, logits) in runs.items():
        stem = f"{spec.name}-{type_name}"
        write_ref(out_dir / f"{stem}.ref", tokens, logits)
        summary.append({"file": stem, "max_abs_logit": float(np.abs(logits).max()),
                        "logit_std": float(logits.std()), "decode_margin": decode_margin(logits),
                        "prompt_attempt": attempt, "decode": tokens[len(tokens) - N_DECODE:]})
    return summary


# ----------------------------------------------------------------------------------------------------
# Tokenizer references for the vocabularies of the newer architectures
# ----------------------------------------------------------------------------------------------------

TOKENIZER_CASES = [
    "The river starts in the hills above the town and runs west.",
    "Seven arches, 200 years: bread, cheese & honey at the caf\u00e9!",
    "  two  spaces\nand a newline\tand a tab",
    "<think>the marks go back</think> to the year",
    "<|user|>Hello<|end|>",
    "<|im_start|>user\nWhen does the river slow down?<|im_end|>",
]


def tokenizer_refs(vocab: Vocab, spec: ModelSpec, directory: Path) -> list[tuple[str, dict[str, list[int]]]]:
    """Ids of TOKENIZER_CASES from the reference tokenizers, on the files export_hf writes: sentencepiece
    for an SPM vocab (flags 00 and 10: no special-token parsing, which sentencepiece never does; add_bos
    decides the 10 case) and HF tokenizers for a BPE vocab (flags 01: it always splits out added tokens;
    00 too when the text holds no control-token text, since user-defined tokens split in both modes)."""
    cases = []
    if vocab.model == "llama":
        import sentencepiece
        sp = sentencepiece.SentencePieceProcessor(model_proto=(directory / "tokenizer.model").read_bytes())
        bos = [vocab.special_ids["bos"]] if vocab.add_bos else []
        for text in TOKENIZER_CASES:
            ids = sp.encode(text)
            cases.append((text, {"00": ids, "10": bos + ids}))
    else:
        import tokenizers
        tok = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
        controls = [t for t, ty in zip(vocab.tokens, vocab.types) if ty == TokenType.CONTROL]
        for text in TOKENIZER_CASES:
            ids = tok.encode(text, add_special_tokens=False).ids
            variants = {"01": ids, "11": ids}      # add_bos is false: add_special adds nothing
            if not any(c in text for c in controls):
                variants["00"] = ids
            cases.append((text, variants))
    return cases


def esc_text(data: bytes) -> str:
    """tools/make-tokenizer-fixtures.py's escaping: printable ASCII as is but '\\' doubled, other bytes \\xHH."""
    return "".join("\\\\" if c == 0x5C else chr(c) if 0x20 <= c < 0x7F else "\\x%02x" % c for c in data)


def write_tokenizer_ref(path: Path, spec: ModelSpec, cases) -> None:
    """The ids format of tests/fixtures/tokenizer/*.ref (T <text> / <add_special><parse_special> <ids>)."""
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(f"# {spec.name}: ids from the reference tokenizer (tools/make-model-fixtures.py)\n")
        for text, variants in cases:
            f.write(f"T\t{esc_text(text.encode('utf-8'))}\n")
            for flags in sorted(variants, reverse=True):
                f.write(f"{flags}\t{' '.join(str(i) for i in variants[flags])}\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    ap.add_argument("--models", nargs="*", default=None, help="subset of model names")
    ap.add_argument("--hf-dir", type=Path, default=None, help="also save HF checkpoints + tokenizers here")
    args = ap.parse_args()

    torch.set_num_threads(1)             # fixed reduction order -> reproducible float32 logits
    torch.use_deterministic_algorithms(True)
    check_k_quantizers()
    args.out.mkdir(parents=True, exist_ok=True)
    specs = [s for s in MODEL_SPECS if args.models is None or s.name in args.models]
    if args.models is not None and len(specs) != len(args.models):
        ap.error(f"unknown model in {args.models}; known: {[s.name for s in MODEL_SPECS]}")
    print("| file | max abs logit | logit std | min decode margin | prompt attempt | decode tokens |")
    print("| --- | --- | --- | --- | --- | --- |")
    for spec in specs:
        for row in generate(spec, args.out, args.hf_dir):
            print(f"| {row['file']} | {row['max_abs_logit']:.3f} | {row['logit_std']:.3f} | "
                  f"{row['decode_margin']:.4f} | {row['prompt_attempt']} | {' '.join(map(str, row['decode']))} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
