#!/usr/bin/env python3
"""Train the retriever: a ~1M-parameter llama-architecture model that solves generated long-context
retrieval tasks, and write it as GGUF for the engine (docs/retriever.md).

The model is a plain Llama (RoPE, RMSNorm, SwiGLU, grouped-query attention, full attention in every layer)
over a byte vocabulary: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF> and one normal token "\u2581"
(the SentencePiece space).  Written with tokenizer.ggml.model=llama and add_space_prefix=false, the
engine's SPM tokenizer turns every space into "\u2581" and every other byte into its byte token (byte
fallback, engine-notes §4.3) -- exactly what encode() below does.

Tasks (generated; prompts end with a question, the answer follows " A:" and ends with a newline):
  passkey     one pass key hidden in filler text
  kv          the value of one key, 1-4 key/value needles in the context
  multikey    the value of one key among 8-24 key/value needles
  multivalue  every value of one key (2-4 values, in order), among other keys' values
  vartrack    variable tracking: which variables end up equal to a number (chains of 1-3 hops)
  copy        repeat a random 16-40 letter line that appeared once in the context

Subcommands:
  train    train with a length curriculum (32 -> 2,112 tokens), checkpointing to --out (resumable;
           --stop-after N stops after step N, to resume later with another --steps)
  export   checkpoint -> GGUF (llama.cpp's converter layout: q/k rows permuted for NORM rope, §5.2),
           after checking that HF transformers' LlamaForCausalLM with the same weights gives the same logits
  fixtures held-out prompts + gold answers (tests/fixtures/retriever/heldout.txt) and reference logits of
           HF's LlamaForCausalLM for a few prompts (tests/fixtures/retriever/logits.ref)
  eval     exact-match accuracy per task and length with PyTorch (greedy), or with the engine's CLI

Everything is seeded: the batch of training step s is generated from (seed, s), so a resumed run sees the
same data as an uninterrupted one.  Held-out prompts use seeds disjoint from training's (HELDOUT_SEED).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "out" / "retriever"
DEFAULT_MODEL = REPO_ROOT / "models" / "retriever-1m-f32.gguf"
FIXTURE_DIR = REPO_ROOT / "tests" / "fixtures" / "retriever"

TRAIN_SEED = 1234
HELDOUT_SEED = 777_000_001       # never used by training (training seeds are (TRAIN_SEED, step))

# ----------------------------------------------------------------------------------------------------
# Tokenizer: bytes, with the space as the SPM piece "\u2581"
# ----------------------------------------------------------------------------------------------------

UNK, BOS, EOS = 0, 1, 2
BYTE0 = 3                  # token of byte b is BYTE0 + b
SPACE = BYTE0 + 256        # "\u2581"
N_VOCAB = SPACE + 1
NEWLINE = BYTE0 + ord("\n")


def encode(text: str, bos: bool = True) -> list[int]:
    ids = [BOS] if bos else []
    for b in text.encode("utf-8"):
        ids.append(SPACE if b == 0x20 else BYTE0 + b)
    return ids


def decode(ids: list[int]) -> str:
    out = bytearray()
    for t in ids:
        if t == SPACE:
            out.append(0x20)
        elif BYTE0 <= t < BYTE0 + 256:
            out.append(t - BYTE0)
    return out.decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------------------------------
# Task generator
# ----------------------------------------------------------------------------------------------------

ADJECTIVES = ("old quiet green small bright dark warm cold tall heavy soft slow busy empty narrow wide "
              "round wet dry calm pale golden grey simple steady").split()
NOUNS = ("river hill town road field bridge garden market house tree stone boat window door farmer "
         "child teacher baker mill church forest valley lake cloud morning evening winter summer bird "
         "horse village wall roof street harbour island meadow path lamp book letter table chair").split()
VERBS = ("runs walks looks waits rests stands turns sings falls grows moves sleeps shines leans "
         "drifts rises sits works stays returns").split()
PREPS = "near past under over behind beside through along across around into toward".split()
ADVERBS = "slowly again today often quietly early late always softly there".split()
# keys and secret lines use consonants only: random strings never spell words
LETTERS = "BCDFGHJKLMNPQRSTVWXZ"
LOWER = LETTERS.lower()

TASKS = ("passkey", "kv", "multikey", "multivalue", "vartrack", "copy")

# Every needle is "<label>: <value>. " and every answer line restates the label, so the answer is the text
# that followed the same label in the context: one lookup circuit serves all tasks.  Keys are 3 consonants,
# values 4 digits: short in bytes, so prompts hold many needles and training sequences stay short.
KEY_LEN = 3


def filler_sentence(rng: np.random.Generator) -> str:
    """A short sentence of lowercase words (no digits, colons or capital runs: needles stand out)."""
    def pick(words):
        return words[int(rng.integers(len(words)))]
    kind = int(rng.integers(4))
    if kind == 0:
        s = f"the {pick(ADJECTIVES)} {pick(NOUNS)} {pick(VERBS)} {pick(PREPS)} the {pick(NOUNS)}"
    elif kind == 1:
        s = f"one {pick(NOUNS)} {pick(VERBS)} {pick(ADVERBS)}"
    elif kind == 2:
        s = f"the {pick(NOUNS)} is {pick(ADJECTIVES)} and the {pick(NOUNS)} is {pick(ADJECTIVES)}"
    else:
        s = f"every {pick(NOUNS)} {pick(VERBS)} {pick(PREPS)} a {pick(ADJECTIVES)} {pick(NOUNS)} {pick(ADVERBS)}"
    return s[0].upper() + s[1:] + ". "


def random_key(rng: np.random.Generator, used: set[str]) -> str:
    while True:
        k = "".join(LETTERS[i] for i in rng.integers(len(LETTERS), size=KEY_LEN))
        if k not in used:
            used.add(k)
            return k


def random_value(rng: np.random.Generator, used: set[str]) -> str:
    while True:
        v = str(int(rng.integers(1000, 10000)))
        if v not in used:
            used.add(v)
            return v


def random_line(rng: np.random.Generator) -> str:
    """Three or four lowercase 'words' of 3-4 random consonants."""
    words = ["".join(LOWER[i] for i in rng.integers(len(LOWER), size=int(rng.integers(3, 5))))
             for _ in range(int(rng.integers(3, 5)))]
    return " ".join(words)


# Lookup tasks (passkey, kv, multikey): the value is written right after its key, "Bq", and the prompt ends
# with the key, so the answer is what an induction head does: find the earlier occurrence of the last token,
# copy the token that followed it (Olsson et al., 2022, "In-context learning and induction heads").  The
# random-string repeats of training form exactly that circuit.  Keys are single capitals that occur nowhere
# else in the prompts (not T, O, E: filler sentences start with them; not W, Q, A: the question lines);
# values are lowercase consonants.  The pass key's key is "#" and its value five distinct digits (digits
# occur nowhere else, so each digit of the answer is again one lookup).
LOOKUP_KEYS = "BCDFGHJKLMNPRSVXZ"
PASS_KEY = "#"
VALUE_SYMBOLS = "bcdfghjklmnpqrsvwxz"
PASS_KEY_DIGITS = 5


def random_lookup_key(rng: np.random.Generator, used: set[str]) -> str:
    free = [k for k in LOOKUP_KEYS if k not in used]
    k = free[int(rng.integers(len(free)))]
    used.add(k)
    return k


def random_symbol(rng: np.random.Generator, used: set[str]) -> str:
    """A one-token value; distinct within a prompt while symbols last."""
    free = [v for v in VALUE_SYMBOLS if v not in used] or list(VALUE_SYMBOLS)
    v = free[int(rng.integers(len(free)))]
    used.add(v)
    return v


def random_pass_key(rng: np.random.Generator) -> str:
    return "".join(str(d) for d in rng.permutation(10)[:PASS_KEY_DIGITS])


@dataclass
class Example:
    task: str
    needles: list[str]                  # sentences inserted into the filler, in order
    qa: list[tuple[str, str, str]]      # (question, answer prefix, answer); prompts use the first


def make_task(rng: np.random.Generator, task: str, keys: set[str], vals: set[str], n_pairs: int | None = None) -> Example:
    """One instance of a task; keys/values are drawn unused from keys/vals (shared by the tasks of one
    training sequence, so no label is ambiguous)."""
    if task == "passkey":
        v = random_pass_key(rng)
        return Example(task, [f"The pass key is {PASS_KEY}{v}. "], [("What is the pass key?", PASS_KEY, v)])
    if task in ("kv", "multikey"):
        lo, hi = (1, 4) if task == "kv" else (8, 16)
        n = n_pairs if n_pairs is not None else int(rng.integers(lo, hi + 1))
        pairs = [(random_lookup_key(rng, keys), random_symbol(rng, vals)) for _ in range(n)]
        return Example(task, [f"{k}{v}. " for k, v in pairs],
                       [("What is the value?", pairs[i][0], pairs[i][1]) for i in rng.permutation(n)])
    if task == "multivalue":
        target = random_key(rng, keys)
        values = [random_value(rng, vals) for _ in range(int(rng.integers(2, 5)))]
        others = [(random_key(rng, keys), random_value(rng, vals)) for _ in range(int(rng.integers(0, 4)))]
        items = [(target, v) for v in values] + others
        items = [items[i] for i in rng.permutation(len(items))]
        ordered = [v for k, v in items if k == target]
        return Example(task, [f"One of {k}: {v}. " for k, v in items],
                       [(f"What are all values of {target}?", f"All of {target}:", " ".join(ordered))])
    if task == "vartrack":
        chains = []
        for _ in range(2):                   # the asked chain, a distractor chain
            v = random_value(rng, vals)
            chains.append((v, [random_key(rng, keys) for _ in range(int(rng.integers(2, 5)))]))
        statements = [[f"VAR {names[0]} = {v}. "] + [f"VAR {b} = VAR {a}. " for a, b in zip(names, names[1:])]
                      for v, names in chains]
        v, names = chains[0]
        return Example(task, interleave(rng, statements),
                       [(f"Which variables equal {v}?", f"Equal to {v}:", " ".join(names))])
    if task == "copy":
        line = random_line(rng)
        return Example(task, [f"The secret line: {line}. "], [("What is the secret line?", "The secret line:", line)])
    raise ValueError(task)


def interleave(rng: np.random.Generator, lists: list[list[str]]) -> list[str]:
    """The items of all lists in one random interleaving that keeps each list's own order."""
    idx = [0] * len(lists)
    out: list[str] = []
    while True:
        live = [i for i, lst in enumerate(lists) if idx[i] < len(lst)]
        if not live:
            return out
        c = live[int(rng.integers(len(live)))]
        out.append(lists[c][idx[c]])
        idx[c] += 1


def answer_text(prefix: str, answer: str) -> str:
    """What follows the prompt: the answer and a newline; after a "label:" prefix, a space first."""
    return (" " if prefix.endswith(":") else "") + answer + "\n"


def qa_text(question: str, prefix: str, answer: str | None) -> str:
    """"\\nQ: <question>\\nA: <prefix>" then, in training text, the answer (answer_text)."""
    return f"\nQ: {question}\nA: {prefix}" + ("" if answer is None else answer_text(prefix, answer))


def build_context(rng: np.random.Generator, needles: list[str], n_bytes: int) -> str:
    """Filler sentences of about n_bytes with the needles at random depths, in order."""
    sentences: list[str] = []
    size = sum(len(n) for n in needles)
    while True:
        s = filler_sentence(rng)
        if size + len(s) > n_bytes and sentences:
            break
        sentences.append(s)
        size += len(s)
    slots = np.sort(rng.integers(0, len(sentences) + 1, size=len(needles)))
    out: list[str] = []
    k = 0
    for i in range(len(sentences) + 1):
        while k < len(needles) and slots[k] == i:
            out.append(needles[k])
            k += 1
        if i < len(sentences):
            out.append(sentences[i])
    return "".join(out).rstrip()


def make_prompt(rng: np.random.Generator, task: str, n_tokens: int) -> tuple[str, str]:
    """An evaluation prompt of at most n_tokens tokens (BOS included) and its gold answer: one task, its
    needles in filler, one question."""
    ex = make_task(rng, task, set(), set())
    question, prefix, answer = ex.qa[0]
    tail = qa_text(question, prefix, None)
    context = build_context(rng, ex.needles, n_tokens - 1 - len(tail.encode()))
    prompt = context + tail
    assert len(encode(prompt)) <= n_tokens
    return prompt, answer


PAD, TEXT, PREFIX, ANSWER = 0, 1, 2, 3      # kinds of target token in a training batch


def make_repeat_sequence(rng: np.random.Generator, n_tokens: int) -> tuple[list[int], list[int]]:
    """Training only: strings of random byte tokens (all 256, so that one token identifies its position),
    each seen once and then repeated, every repeated token supervised.  Induction heads ("find the earlier
    occurrence of this token, copy what followed") form within a few hundred steps on this; on the tasks'
    small alphabets (digits, 20 consonants) alone they take far longer, since one token never identifies a
    position.  Half the sequences repeat one string back to back; half put filler between copies."""
    tokens, kinds = [BOS], [TEXT]
    back_to_back = rng.random() < 0.5
    while len(tokens) < n_tokens:
        n = int(rng.integers(8, 33))
        piece = [BYTE0 + int(b) for b in rng.integers(256, size=n)]
        copies = int(rng.integers(2, 5)) if back_to_back else 2
        for c in range(copies):
            if not back_to_back and c > 0:
                gap = encode(build_context(rng, [], int(rng.integers(20, 120))), bos=False) + [NEWLINE]
                tokens += gap
                kinds += [TEXT] * len(gap)
            tokens += piece
            # the first token of a copy is not predictable; the rest of every later copy is
            kinds += [TEXT] * n if c == 0 else [TEXT] + [ANSWER] * (n - 1)
    return tokens[:n_tokens], kinds[:n_tokens]


def supervised_qa(context: str, qas: list[tuple[str, str, str]]) -> tuple[list[int], list[int]]:
    tokens = encode(context)
    kinds = [TEXT] * len(tokens)
    for q, prefix, a in qas:
        head = encode(f"\nQ: {q}\nA: ", bos=False)
        pre = encode(prefix, bos=False)
        tail = encode(answer_text(prefix, a), bos=False)
        tokens += head + pre + tail
        kinds += [TEXT] * len(head) + [PREFIX] * len(pre) + [ANSWER] * len(tail)
    return tokens, kinds


OTHER_TASK_FRACTION = 0.2     # sequences of one multi-token task (multivalue, vartrack, copy)


def make_training_sequence(rng: np.random.Generator, n_tokens: int,
                           repeat_fraction: float = 0.1) -> tuple[list[int], list[int]]:
    """(tokens, kinds) of about n_tokens.  Mostly: a pass key and 1-16 key/value needles in one filler
    context, then one question per needle in random order, each answer supervised (dense supervision: many
    lookups per sequence; the number of needles varies, so both sparse needles in long filler -- the
    evaluation prompts -- and crowded contexts are seen).  Else a multivalue/vartrack/copy example with its
    question, or a random-string repeat."""
    r = rng.random()
    if r < repeat_fraction:
        return make_repeat_sequence(rng, n_tokens)
    keys: set[str] = set()
    vals: set[str] = set()
    if r < repeat_fraction + OTHER_TASK_FRACTION:
        ex = make_task(rng, ("multivalue", "vartrack", "copy")[int(rng.integers(3))], keys, vals)
        qas = ex.qa
        return supervised_qa(build_context(rng, ex.needles, n_tokens - 1 - len(qa_text(*qas[0]))), qas)
    units: list[Example] = []
    if rng.random() < 0.6:
        units.append(make_task(rng, "passkey", keys, vals))
    max_pairs = max(1, min(len(LOOKUP_KEYS), int(0.8 * n_tokens / 36)))   # a pair costs ~36 bytes
    units.append(make_task(rng, "kv", keys, vals, int(rng.integers(1, max_pairs + 1))))
    needles = interleave(rng, [u.needles for u in units])
    qas = [x for u in units for x in u.qa]
    qas = [qas[i] for i in rng.permutation(len(qas))]
    context = build_context(rng, needles, n_tokens - 1 - sum(len(qa_text(*x)) for x in qas))
    return supervised_qa(context, qas)


# ----------------------------------------------------------------------------------------------------
# Model: Llama exactly as HF's LlamaForCausalLM computes it (rotate_half RoPE), HF parameter names
# ----------------------------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    n_embd: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32
    n_ff: int = 512
    rope_theta: float = 500000.0   # as Llama 3: the lowest RoPE frequencies turn little over 2K tokens
    rms_eps: float = 1e-5
    n_ctx: int = 2176           # context_length written to the GGUF: 2048-token prompts plus their answers

    def hf_config(self) -> dict:
        return dict(vocab_size=N_VOCAB, hidden_size=self.n_embd, num_hidden_layers=self.n_layer,
                    num_attention_heads=self.n_head, num_key_value_heads=self.n_head_kv, head_dim=self.head_dim,
                    intermediate_size=self.n_ff, rms_norm_eps=self.rms_eps, max_position_embeddings=self.n_ctx,
                    bos_token_id=BOS, eos_token_id=EOS, pad_token_id=None, tie_word_embeddings=False,
                    rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta})


class RMSNorm(torch.nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_tables(cfg: ModelConfig, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
    ang = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class Attention(torch.nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.n_embd, cfg.head_dim
        self.q_proj = torch.nn.Linear(d, cfg.n_head * hd, bias=False)
        self.k_proj = torch.nn.Linear(d, cfg.n_head_kv * hd, bias=False)
        self.v_proj = torch.nn.Linear(d, cfg.n_head_kv * hd, bias=False)
        self.o_proj = torch.nn.Linear(cfg.n_head * hd, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(b, t, c.n_head, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, c.n_head_kv, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, c.n_head_kv, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, c.n_head * c.head_dim))


class MLP(torch.nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = torch.nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
        self.up_proj = torch.nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
        self.down_proj = torch.nn.Linear(cfg.n_ff, cfg.n_embd, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(torch.nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.n_embd, cfg.rms_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.n_embd, cfg.rms_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(torch.nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(N_VOCAB, cfg.n_embd)
        self.layers = torch.nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.n_embd, cfg.rms_eps)


class Retriever(torch.nn.Module):
    """State-dict names are HF LlamaForCausalLM's, so the weights load into it unchanged."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.lm_head = torch.nn.Linear(cfg.n_embd, N_VOCAB, bias=False)
        self._rope = rope_tables(cfg, cfg.n_ctx)
        self.apply(self._init)
        for name, p in self.named_parameters():     # GPT-2 style: residual writes scaled by depth
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                torch.nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(m.weight, std=0.02)

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        """Final hidden states (after the output norm), [batch, tokens, n_embd]."""
        t = ids.shape[1]
        cos, sin = (a[:t] for a in self._rope)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.model.norm(x)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.hidden(ids))


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------

# Curriculum: (fraction of the steps done, (shortest, longest) sequence, share of random-string repeats) from
# then on.  The first phase is short random-string repeats only: there the induction circuit forms after a
# plateau of a few hundred steps (on 32-96 tokens; on 128-256-token sequences it had barely started after 600
# steps, and mixed with the tasks from the start it never formed).  Then mostly short task sequences (cheap,
# many lookups per token); the last phase reaches 2,112 tokens so that every RoPE position of the evaluation
# prompts has been trained on.
CURRICULUM = ((0.0, (32, 96), 1.0), (0.12, (96, 384), 0.3), (0.4, (256, 1024), 0.1), (0.7, (512, 2112), 0.1))
LONG_FRACTION = 0.5           # in the last phase, this share of steps is at 1,536-2,112 tokens


@dataclass
class TrainConfig:
    steps: int = 2800
    tokens_per_step: int = 8192
    lr: float = 4e-3
    lm_weight: float = 0.1        # next-token loss on the filler: cheap dense signal that forms previous-token heads
    prefix_weight: float = 0.5    # weight of the restated label in answer lines (copying from the question)
    min_lr_frac: float = 0.1
    warmup: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = TRAIN_SEED
    threads: int = 2
    checkpoint_every: int = 50
    eval_every: int = 150


def phase_at(step: int, steps: int) -> tuple[float, tuple[int, int], float]:
    phase = CURRICULUM[0]
    for p in CURRICULUM:
        if step >= p[0] * steps:
            phase = p
    return phase


def lengths_at(step: int, steps: int) -> tuple[int, int]:
    return phase_at(step, steps)[1]


def make_batch(tc: TrainConfig, step: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The batch of one step, from (seed, step) alone; every sequence of a batch has the same length."""
    rng = np.random.default_rng([tc.seed, step])
    lo, hi = lengths_at(step, tc.steps)
    if hi > 1024 and rng.random() < LONG_FRACTION:
        lo = 1536
    n = int(rng.integers(lo, hi + 1))
    batch = max(1, tc.tokens_per_step // n)
    repeats = phase_at(step, tc.steps)[2]
    seqs = [make_training_sequence(rng, n, repeats) for _ in range(batch)]
    width = max(len(t) for t, _ in seqs)
    ids = torch.zeros((batch, width), dtype=torch.long)
    mask = torch.full((batch, width), PAD, dtype=torch.long)
    for i, (t, m) in enumerate(seqs):
        ids[i, :len(t)] = torch.tensor(t)
        mask[i, :len(m)] = torch.tensor(m)
    return ids, mask, n


def answer_loss(model: Retriever, ids: torch.Tensor, mask: torch.Tensor,
                tc: TrainConfig) -> tuple[torch.Tensor, float, float]:
    """Cross-entropy on the answer tokens, plus weighted losses on the restated labels and on the filler;
    also the fraction of answer tokens that are the argmax."""
    kind = mask[:, 1:]
    target = ids[:, 1:]
    hidden = model.hidden(ids[:, :-1])
    weights = torch.zeros(kind.shape)
    weights[kind == ANSWER] = 1.0
    weights[kind == PREFIX] = tc.prefix_weight
    weights[kind == TEXT] = tc.lm_weight
    used = weights > 0
    logits = model.lm_head(hidden[used])
    ce = F.cross_entropy(logits, target[used], reduction="none")
    w = weights[used]
    loss = (ce * w).sum() / w.sum()
    with torch.no_grad():
        is_answer = kind[used] == ANSWER
        answer_ce = float(ce[is_answer].mean())
        acc = float((logits[is_answer].argmax(-1) == target[used][is_answer]).float().mean())
    return loss, acc, answer_ce


VALID_SEED = 555_000_001      # validation during training: neither training's seeds nor the held-out one


@torch.no_grad()
def validate(model: Retriever, n: int = 6) -> dict[str, float]:
    """Exact match on fresh prompts of passkey, kv and multikey at 512/1,024/2,048 tokens."""
    model.eval()
    out = {}
    for task in ("passkey", "kv", "multikey"):
        for length in EVAL_LENGTHS:
            hits = [torch_exact(model, *make_prompt(np.random.default_rng([VALID_SEED, TASKS.index(task), length, i]),
                                                    task, length)) for i in range(n)]
            out[f"{task}@{length}"] = float(np.mean(hits))
    model.train()
    return out


def lr_at(tc: TrainConfig, step: int) -> float:
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    t = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    return tc.lr * (tc.min_lr_frac + (1 - tc.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def make_optimizer(model: Retriever, tc: TrainConfig) -> torch.optim.Optimizer:
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    other = [p for n, p in model.named_parameters() if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                              {"params": other, "weight_decay": 0.0}], lr=tc.lr, betas=(0.9, 0.95),
                             fused=True)


def save_checkpoint(path: Path, model, opt, step: int, mc: ModelConfig, tc: TrainConfig, wall: float,
                    log: list) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "model_config": asdict(mc),
                "train_config": asdict(tc), "wall_seconds": wall, "log": log}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> tuple[Retriever, dict]:
    ck = torch.load(path, map_location="cpu", weights_only=False)
    model = Retriever(ModelConfig(**ck["model_config"]))
    model.load_state_dict(ck["model"])
    return model, ck


def cmd_train(args) -> int:
    torch.set_num_threads(args.threads)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "checkpoint.pt"
    tc = TrainConfig(steps=args.steps, tokens_per_step=args.tokens_per_step or TrainConfig.tokens_per_step, lr=args.lr, seed=args.seed,
                     threads=args.threads, lm_weight=args.lm_weight, warmup=args.warmup)
    mc = ModelConfig(n_embd=args.n_embd, n_layer=args.n_layer, n_head=args.n_head, n_head_kv=args.n_head_kv,
                     head_dim=args.head_dim, n_ff=args.n_ff)
    if ckpt.exists() and not args.restart:
        model, ck = load_checkpoint(ckpt)
        mc = model.cfg
        # the step count, threads and tokens per step may change on resume (the run's log records them)
        tc = TrainConfig(**{**ck["train_config"], "steps": args.steps, "threads": args.threads,
                            "tokens_per_step": args.tokens_per_step or ck["train_config"]["tokens_per_step"]})
        opt = make_optimizer(model, tc)
        opt.load_state_dict(ck["opt"])
        start, wall, log = ck["step"], ck["wall_seconds"], ck["log"]
        print(f"resumed at step {start} ({wall / 3600:.2f} h so far)", flush=True)
    else:
        torch.manual_seed(tc.seed)
        model = Retriever(mc)
        opt = make_optimizer(model, tc)
        start, wall, log = 0, 0.0, []
    print(f"model {asdict(mc)}: {n_params(model)} parameters; training {asdict(tc)}", flush=True)
    model.train()
    t_last = time.time()
    run_loss, run_exact, run_n = 0.0, 0.0, 0
    last = tc.steps if args.stop_after is None else min(tc.steps, args.stop_after)
    for step in range(start, last):
        ids, mask, n = make_batch(tc, step)
        for g in opt.param_groups:
            g["lr"] = lr_at(tc, step)
        loss, exact, ans = answer_loss(model, ids, mask, tc)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        run_loss += ans
        run_exact += exact
        run_n += 1
        now = time.time()
        wall += now - t_last
        t_last = now
        if (step + 1) % 20 == 0:
            entry = {"step": step + 1, "tokens_per_step": tc.tokens_per_step, "lengths": lengths_at(step, tc.steps), "answer_loss": round(run_loss / run_n, 4),
                     "answer_token_acc": round(run_exact / run_n, 4), "lr": lr_at(tc, step), "wall": round(wall, 1)}
            if (step + 1) % tc.eval_every == 0:
                t0 = time.time()
                entry["valid"] = validate(model)
                t_last += time.time() - t0          # validation is not training time
            log.append(entry)
            print(json.dumps(entry), flush=True)
            run_loss, run_exact, run_n = 0.0, 0.0, 0
        if (step + 1) % tc.checkpoint_every == 0 or step + 1 == last:
            save_checkpoint(ckpt, model, opt, step + 1, mc, tc, wall, log)
            t_last = time.time()
    print(f"{'done' if last == tc.steps else 'stopped'}: {last} of {tc.steps} steps, {wall / 3600:.2f} h of training "
          "wall time", flush=True)
    return 0


# ----------------------------------------------------------------------------------------------------
# GGUF export (llama.cpp converter layout, via the fixture tool's writer)
# ----------------------------------------------------------------------------------------------------


def fixture_tool():
    """tools/make-model-fixtures.py as a module: its converter-equivalent tensor plan and GGUF writer."""
    spec = importlib.util.spec_from_file_location("make_model_fixtures", REPO_ROOT / "tools" / "make-model-fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_model_fixtures"] = mod
    spec.loader.exec_module(mod)
    return mod


def byte_vocab(mmf):
    """<unk>, <s>, </s>, <0x00>..<0xFF> (type byte), "\u2581" (normal): what encode() produces under the
    engine's SPM tokenizer with add_space_prefix=false."""
    from gguf import TokenType
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256 + [TokenType.NORMAL]
    assert len(tokens) == N_VOCAB and tokens[SPACE] == "\u2581" and tokens[BYTE0 + 0x41] == "<0x41>"
    return mmf.Vocab(model="llama", pre="default", tokens=tokens, types=types, scores=[0.0] * N_VOCAB,
                     special_ids={"bos": BOS, "eos": EOS, "unk": UNK}, add_bos=True, add_eos=False,
                     add_space_prefix=False)


def hf_model_of(model: Retriever):
    """HF transformers' LlamaForCausalLM (eager attention, float32) holding the trained weights: the
    independent reference for the engine's logits."""
    import transformers
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**model.cfg.hf_config()))
    hf.set_attn_implementation("eager")
    missing, unexpected = hf.load_state_dict(model.state_dict(), strict=True)
    assert not missing and not unexpected
    return hf.eval()


@torch.no_grad()
def hf_logits(hf, ids: list[int]) -> np.ndarray:
    """Logits as float32 (computed in the model's own precision)."""
    return hf(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().numpy()


def cmd_export(args) -> int:
    torch.set_num_threads(args.threads)
    mmf = fixture_tool()
    from gguf import GGMLQuantizationType as QT, LlamaFileType as FT
    model, ck = load_checkpoint(args.checkpoint)
    model.eval()
    hf = hf_model_of(model)
    # our training module and HF's Llama must be the same function
    for task, length, prompt, _ in heldout_prompts(1, (512,), ("kv", "vartrack")):
        ids = encode(prompt)
        with torch.no_grad():
            ours = model(torch.tensor([ids]))[0].numpy()
        diff = float(np.abs(ours - hf_logits(hf, ids)).max())
        print(f"training module vs HF LlamaForCausalLM, {task} {len(ids)} tokens: max |dlogit| {diff:.2e}")
        assert diff < 1e-4, diff
    spec = mmf.ModelSpec(name=args.name, arch="llama", seed=0, weight_std=0.0, types=["f32"],
                         config=model.cfg.hf_config(), tokenizer="byte")
    plans = mmf.plan_tensors(hf, spec)      # q/k rows permuted exactly as convert_hf_to_gguf.py (§5.2)
    tensors = [(p.gguf_name, p.data, mmf.stored_type(p, QT.F32)) for p in plans]
    args.model.parent.mkdir(parents=True, exist_ok=True)
    mmf.write_gguf(args.model, spec, byte_vocab(mmf), FT.ALL_F32, tensors)
    print(f"wrote {args.model} ({args.model.stat().st_size} bytes, {n_params(model)} parameters, "
          f"trained {ck['step']} steps in {ck['wall_seconds'] / 3600:.2f} h)")
    return 0


# ----------------------------------------------------------------------------------------------------
# Test fixtures
# ----------------------------------------------------------------------------------------------------

LOGITS_MAGIC = b"PKVRTL2\0"
# (task, length, index) of the prompts whose logits are recorded: a short one in full, two long ones sampled
LOGIT_PROMPTS = (("kv", 512, 0), ("multivalue", 1024, 0), ("passkey", 2048, 0))
LOGIT_SEED = HELDOUT_SEED + 1


def logit_positions(n: int) -> list[int]:
    """Every 61st position (a prime stride, so every offset modulo the SIMD widths is seen) and the last 8."""
    return sorted(set(range(0, n, 61)) | set(range(max(0, n - 8), n)))


def write_logits_fixture(path: Path, hf, hf32) -> list[str]:
    """Layout (little-endian): magic "PKVRTL2\\0"; int32 n_vocab, n_prompts; per prompt: int32 n_text,
    n_tokens, n_pos; float32 f32_err; char text[n_text]; int32 tokens[n_tokens]; int32 pos[n_pos];
    float32 logits[n_pos][n_vocab] (hf's logits after consuming tokens[0..pos]).  f32_err is how far HF's
    float32 model (hf32) is from hf at those positions (max |dlogit|): the rounding any float32
    implementation of this model shows on this prompt."""
    lines = []
    with open(path, "wb") as f:
        f.write(LOGITS_MAGIC)
        f.write(struct.pack("<ii", N_VOCAB, len(LOGIT_PROMPTS)))
        for task, length, i in LOGIT_PROMPTS:
            rng = np.random.default_rng([LOGIT_SEED, TASKS.index(task), length, i])
            prompt, answer = make_prompt(rng, task, length)
            ids = encode(prompt)
            logits = hf_logits(hf, ids)
            pos = logit_positions(len(ids))
            f32_err = float(np.abs(hf_logits(hf32, ids)[pos] - logits[pos]).max())
            text = prompt.encode()
            f.write(struct.pack("<iiif", len(text), len(ids), len(pos), f32_err))
            f.write(text)
            f.write(np.asarray(ids, dtype="<i4").tobytes())
            f.write(np.asarray(pos, dtype="<i4").tobytes())
            f.write(np.ascontiguousarray(logits[pos], dtype="<f4").tobytes())
            lines.append(f"{task} {len(ids)} tokens: max |logit| {np.abs(logits).max():.2f}, HF float32 off by "
                         f"{f32_err:.2e}, "
                         f"answer {answer!r}, argmax at the end {decode([int(logits[-1].argmax())])!r}")
    return lines


def write_heldout_fixture(path: Path, counts: dict[int, int]) -> int:
    """One prompt per line: task TAB n_tokens TAB answer TAB prompt (newlines written as \\n)."""
    rows = []
    for length, n_per in counts.items():
        rows += heldout_prompts(n_per, (length,))
    with open(path, "w") as f:
        f.write("# Held-out retrieval prompts for models/retriever-*.gguf, written by tools/train-retriever.py "
                "fixtures.\n# task\\tn_tokens (BOS included)\\tanswer\\tprompt (\"\\n\" = newline)\n")
        for task, length, prompt, answer in rows:
            assert "\t" not in prompt and "\\" not in prompt
            f.write(f"{task}\t{len(encode(prompt))}\t{answer}\t{prompt.replace(chr(10), chr(92) + 'n')}\n")
    return len(rows)


def cmd_fixtures(args) -> int:
    torch.set_num_threads(args.threads)
    model, _ = load_checkpoint(args.checkpoint)
    # float64: the reference's own rounding (~4e-5 in float32 at 2K tokens) stays out of the engine's budget;
    # RoPE frequencies in float64 too (HF rounds them to float32 first), as the engine computes its angles
    hf32 = hf_model_of(model)
    hf = hf_model_of(model).double()
    rot = hf.model.rotary_emb
    exact = 1.0 / (model.cfg.rope_theta ** (torch.arange(0, model.cfg.head_dim, 2, dtype=torch.float64) / model.cfg.head_dim))
    rot.inv_freq = exact
    if hasattr(rot, "original_inv_freq"):
        rot.original_inv_freq = exact
    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    for line in write_logits_fixture(FIXTURE_DIR / "logits.ref", hf, hf32):
        print(line)
    counts = {512: args.n512, 1024: args.n1024, 2048: args.n2048}
    n = write_heldout_fixture(FIXTURE_DIR / "heldout.txt", counts)
    print(f"wrote {n} held-out prompts ({counts} per task) and logits of {len(LOGIT_PROMPTS)} prompts")
    return 0


# ----------------------------------------------------------------------------------------------------
# Held-out prompts and accuracy
# ----------------------------------------------------------------------------------------------------

EVAL_LENGTHS = (512, 1024, 2048)


def heldout_prompts(n_per: int, lengths=EVAL_LENGTHS, tasks=TASKS, seed: int = HELDOUT_SEED):
    """[(task, length, prompt, answer)]: prompt i of (task, length) comes from (seed, task, length, i)."""
    out = []
    for length in lengths:
        for ti, task in enumerate(TASKS):
            if task not in tasks:
                continue
            for i in range(n_per):
                rng = np.random.default_rng([seed, ti, length, i])
                prompt, answer = make_prompt(rng, task, length)
                out.append((task, length, prompt, answer))
    return out


@torch.no_grad()
def torch_exact(model: Retriever, prompt: str, answer: str) -> bool:
    """Greedy decoding yields " <answer>\\n" iff every token of it is the argmax given the ones before."""
    ids = encode(prompt)
    target = encode(answer_text(prompt.rsplit("A: ", 1)[1], answer), bos=False)
    logits = model(torch.tensor([ids + target[:-1]]))[0, len(ids) - 1:]
    return bool((logits.argmax(-1) == torch.tensor(target)).all())


def engine_answer(binary: Path, model_path: Path, prompt: str, n_predict: int, press: list[str],
                  threads: int) -> str:
    """Greedy completion from the engine's CLI, cut at the first newline."""
    cmd = [str(binary), "run", "-m", str(model_path), "-p", prompt, "-n", str(n_predict), "-t", str(threads),
           "--cache-type", "f32", *press]
    res = subprocess.run(cmd, capture_output=True, check=True)
    return res.stdout.decode("utf-8", errors="replace").split("\n")[0].strip()


def cmd_eval(args) -> int:
    torch.set_num_threads(args.threads)
    prompts = heldout_prompts(args.n, args.lengths, args.tasks)
    model = None
    if args.engine is None:
        model, _ = load_checkpoint(args.checkpoint)
        model.eval()
    hits: dict[tuple[str, int], list[int]] = {}
    t0 = time.time()
    for task, length, prompt, answer in prompts:
        if model is not None:
            ok = torch_exact(model, prompt, answer)
        else:
            n_predict = len(encode(answer, bos=False)) + 2
            ok = engine_answer(args.engine, args.model, prompt, n_predict, args.press, args.threads) == answer
        hits.setdefault((task, length), []).append(int(ok))
    print(f"exact match, {args.n} held-out prompts per cell ({'engine ' + ' '.join(args.press) if model is None else 'pytorch'}; "
          f"{time.time() - t0:.0f} s)")
    print("| task | " + " | ".join(str(n) for n in args.lengths) + " |")
    print("| --- |" + " --- |" * len(args.lengths))
    for task in TASKS:
        if task in args.tasks:
            cells = [f"{100 * np.mean(hits[(task, n)]):.0f}%" for n in args.lengths]
            print(f"| {task} | " + " | ".join(cells) + " |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train (resumes from OUT/checkpoint.pt when present)")
    t.add_argument("--out", type=Path, default=DEFAULT_OUT)
    t.add_argument("--steps", type=int, default=TrainConfig.steps)
    t.add_argument("--tokens-per-step", type=int, default=None, help=f"default {TrainConfig.tokens_per_step}")
    t.add_argument("--lr", type=float, default=TrainConfig.lr)
    t.add_argument("--seed", type=int, default=TRAIN_SEED)
    t.add_argument("--lm-weight", type=float, default=TrainConfig.lm_weight)
    t.add_argument("--warmup", type=int, default=TrainConfig.warmup)
    t.add_argument("--threads", type=int, default=TrainConfig.threads)
    t.add_argument("--restart", action="store_true", help="ignore an existing checkpoint")
    t.add_argument("--stop-after", type=int, default=None,
                   help="stop after this step (checkpoint written); resume later, possibly with another --steps")
    for f in ("n_embd", "n_layer", "n_head", "n_head_kv", "head_dim", "n_ff"):
        t.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(ModelConfig, f))
    t.set_defaults(fn=cmd_train)
    x = sub.add_parser("export", help="checkpoint -> GGUF (F32)")
    x.add_argument("--checkpoint", type=Path, default=DEFAULT_OUT / "checkpoint.pt")
    x.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    x.add_argument("--name", default="retriever-1m")
    x.add_argument("--threads", type=int, default=2)
    x.set_defaults(fn=cmd_export)
    f = sub.add_parser("fixtures", help="tests/fixtures/retriever: held-out prompts, HF reference logits")
    f.add_argument("--checkpoint", type=Path, default=DEFAULT_OUT / "checkpoint.pt")
    f.add_argument("--n512", type=int, default=16, help="prompts per task at 512 tokens")
    f.add_argument("--n1024", type=int, default=8)
    f.add_argument("--n2048", type=int, default=4)
    f.add_argument("--threads", type=int, default=2)
    f.set_defaults(fn=cmd_fixtures)
    e = sub.add_parser("eval", help="exact-match accuracy on held-out prompts (PyTorch, or --engine)")
    e.add_argument("--checkpoint", type=Path, default=DEFAULT_OUT / "checkpoint.pt")
    e.add_argument("--engine", type=Path, default=None, help="promptkv binary: measure with the engine")
    e.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="GGUF for --engine")
    e.add_argument("--n", type=int, default=20, help="prompts per task and length")
    e.add_argument("--lengths", type=int, nargs="*", default=list(EVAL_LENGTHS))
    e.add_argument("--tasks", nargs="*", default=list(TASKS))
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--press", type=str.split, default=[],
                   help='engine press flags as one string, e.g. --press="--press snapkv --budget 64"')
    e.set_defaults(fn=cmd_eval)
    args = ap.parse_args()
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
