#!/usr/bin/env python3
"""kvpress parity: the engine's kept positions and answers against kvpress 0.5.5 on the same token ids.

For a set of seeded needle prompts (English prose from tests/data/english.txt with one "special magic
number" sentence inserted at a depth, and a question asking for it), this script

  1. runs `promptkv inspect --chat --json` once per press: the engine tokenizes the prompt with the model's
     chat template, presses the context and the question (query-aware, docs/design.md "The path of one
     request"), feeds the template's tail, and answers greedily; the JSON holds the token ids, the number
     of pressed tokens and the kept positions of every layer and KV head;
  2. loads the same GGUF into HF transformers (dequantised, float32) and, on exactly those token ids (never
     re-tokenized here), prefills the pressed tokens inside kvpress's `with press(model)` (what kvpress's
     pipeline does with its context), reads which positions kvpress left in each layer's cache, then feeds
     the template's tail at the original positions and answers greedily (kvpress's generate_answer);
  3. prints, per press, the Jaccard similarity of the kept sets per (layer, KV head) (mean and min over
     all heads of all prompts), where the positions kept by one side only lie in kvpress's own ranking
     (their distance from its top-k boundary), how often the two greedy answers are the same tokens, and
     how many answers of each side contain the needle's number.

Matched settings (docs/evaluation.md §0.3 and §7): the engine's --ratio is kvpress's compression_ratio
(both keep int(L * (1 - r)) rows per head, L = the pressed tokens); SnapKV-family presses use kvpress's
defaults on both sides (window 64, kernel 5, average pooling; the engine averages a KV head's query heads
before pooling, which for average pooling is kvpress's pool-then-average); StreamingLLM keeps 4 sinks;
H2O is kvpress's ObservedAttentionPress (attention received divided by the queries that saw the row);
PyramidKV is kvpress's get_layer_budget with beta 20; AdaKV is kvpress's AdaKVPress(alpha 0.2) around
SnapKV, the engine's head_budget=adaptive (KVCache-Factory's rule, docs/presses.md A.13: a different
formula, so its kept sets are compared but expected to differ more).

--fixture FILE writes, for the first --fixture-samples prompts and every press, the token ids and
kvpress's kept positions in the layout tests/fixtures/parity/README.md describes; tests/test_real_parity.c
presses those token ids with the engine and checks the Jaccard similarities.

Usage (from the repository root, after `make` and `make model`):
  python tools/kvpress-parity.py [--samples 30] [--presses snapkv,...] [--ratio 0.5] [--fixture FILE]
Needs the packages pinned in tools/requirements-kvpress.txt.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import random
import re
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from kvpress import (AdaKVPress, KnormPress, ObservedAttentionPress, PyramidKVPress, SnapKVPress,
                     StreamingLLMPress, TOVAPress)
from kvpress.utils import compute_n_kept

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = REPO_ROOT / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
DEFAULT_ENGINE = REPO_ROOT / "build" / "promptkv"
PROSE = REPO_ROOT / "tests" / "data" / "english.txt"
WORDS = REPO_ROOT / "tests" / "data" / "words"
FIXTURE_MAGIC = b"PKVPAR1\0"
SPEC_BYTES = 128                  # a case's name and engine options, NUL-padded, in the fixture
CHARS_PER_TOKEN = 4.4             # English prose under Qwen's BPE, to aim the prompt lengths

# kvpress defaults for the SnapKV family (kvpress/presses/snapkv_press.py), used on both sides
WINDOW, KERNEL, SINKS, PYRAMID_BETA, ADA_ALPHA = 64, 5, 4, 20, 0.2


@dataclass
class PressCase:
    name: str
    engine: list[str]             # engine press options key=value (pkv_press_cfg_set), ratio added
    make: object                  # ratio -> kvpress press
    attn: str = "eager"           # HF attention implementation kvpress needs for it


def press_cases() -> dict[str, PressCase]:
    snap = ["window=%d" % WINDOW, "kernel=%d" % KERNEL, "pool=avg"]
    cases = [
        PressCase("snapkv", ["press=snapkv"] + snap,
                  lambda r: SnapKVPress(compression_ratio=r, window_size=WINDOW, kernel_size=KERNEL)),
        PressCase("streamingllm", ["press=streamingllm", "sinks=%d" % SINKS],
                  lambda r: StreamingLLMPress(compression_ratio=r, n_sink=SINKS)),
        PressCase("knorm", ["press=knorm"], lambda r: KnormPress(compression_ratio=r)),
        PressCase("tova", ["press=tova"], lambda r: TOVAPress(compression_ratio=r)),
        PressCase("h2o", ["press=h2o"], lambda r: ObservedAttentionPress(compression_ratio=r)),
        PressCase("pyramidkv", ["press=snapkv"] + snap + ["layer_budget=pyramid", "pyramid_beta=%d" % PYRAMID_BETA],
                  lambda r: PyramidKVPress(compression_ratio=r, window_size=WINDOW, kernel_size=KERNEL,
                                           beta=PYRAMID_BETA)),
        # AdaKVPress masks keys at decode instead of dropping them, and refuses eager attention
        PressCase("adakv", ["press=snapkv"] + snap + ["head_budget=adaptive", "adaptive_floor=%g" % ADA_ALPHA],
                  lambda r: AdaKVPress(SnapKVPress(compression_ratio=r, window_size=WINDOW, kernel_size=KERNEL),
                                       alpha_safeguard=ADA_ALPHA), attn="sdpa"),
    ]
    return {c.name: c for c in cases}


# ----------------------------------------------------------------------------------------------------
# Prompts
# ----------------------------------------------------------------------------------------------------


@dataclass
class Sample:
    index: int
    target_tokens: int
    depth: float
    key: str
    number: str
    context: str
    question: str


def make_samples(n: int, lengths: list[int], seed: int) -> list[Sample]:
    """Needle prompts: a run of sentences of tests/data/english.txt (wrapping around) of about the target
    length, "The special magic number for KEY is NUMBER." inserted between two sentences at a depth."""
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", PROSE.read_text().replace("\n", " ")) if s.strip()]
    adjectives = (WORDS / "adjectives.txt").read_text().split()
    nouns = (WORDS / "nouns.txt").read_text().split()
    out = []
    for i in range(n):
        rng = random.Random(seed * 1_000_003 + i)
        target = lengths[i % len(lengths)]
        start = rng.randrange(len(sentences))
        chosen, chars = [], 0
        while chars < target * CHARS_PER_TOKEN:
            s = sentences[(start + len(chosen)) % len(sentences)]
            chosen.append(s)
            chars += len(s) + 1
        depth = rng.choice([0.1, 0.3, 0.5, 0.7, 0.9])
        key = f"{rng.choice(adjectives)} {rng.choice(nouns)}"
        number = str(rng.randrange(1_000_000, 10_000_000))
        at = max(1, round(depth * len(chosen)))
        chosen.insert(at, f"The special magic number for the {key} is {number}.")
        question = (f"What is the special magic number for the {key} mentioned in the text? "
                    "Answer with the number only.")
        out.append(Sample(i, target, depth, key, number, " ".join(chosen), question))
    return out


# ----------------------------------------------------------------------------------------------------
# The engine
# ----------------------------------------------------------------------------------------------------


def run_engine(args, sample: Sample, case: PressCase, ratio: float, workdir: Path) -> dict:
    ctx = workdir / f"ctx{sample.index}.txt"
    if not ctx.exists():
        ctx.write_text(sample.context)
    out = workdir / "engine.json"
    opts = case.engine[1:] + [f"ratio={ratio}"]
    cmd = [str(args.engine), "inspect", "-m", str(args.model), "-f", str(ctx), "-q", sample.question, "--chat",
           "--press", case.engine[0].split("=", 1)[1], "-n", str(args.n_predict), "-t", str(args.threads),
           "--cache-type", args.cache_type, "--json", str(out)]
    for o in opts:
        cmd += ["--press-opt", o]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    report = json.loads(out.read_text())
    report["kept"] = [[set(h) for h in layer["heads"]] for layer in report["layers"]]
    return report


# ----------------------------------------------------------------------------------------------------
# HF transformers + kvpress
# ----------------------------------------------------------------------------------------------------


def load_hf(model_path: Path):
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    # the GGUF loader's own progress bar (tqdm, not transformers' switch)
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    gguf_utils.tqdm = lambda items, **kwargs: items
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(model_path.parent), gguf_file=model_path.name, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_path.parent), gguf_file=model_path.name)
    return model, tokenizer


def stop_ids(tokenizer) -> set[int]:
    """End-of-generation tokens the engine recognises for this model (src/text/vocab.c: eos and the
    llama.cpp list by text); for Qwen <|endoftext|>, <|im_end|> and the FIM pad/repo/file tokens."""
    names = ["<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|fim_pad|>", "<|repo_name|>",
             "<|file_sep|>", "<end_of_turn>", "</s>", "<eos>"]
    vocab = tokenizer.get_vocab()
    ids = {vocab[n] for n in names if n in vocab}
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def row_index(full: torch.Tensor, kept: torch.Tensor) -> list[list[int]]:
    """Positions of the rows of kept [H, n, d] in full [H, L, d], per head, ascending (every row of
    kvpress's compressed cache is an exact copy of one row of the full cache: keys.gather)."""
    out = []
    for h in range(full.shape[0]):
        where = {full[h, j].numpy().tobytes(): j for j in range(full.shape[1])}
        assert len(where) == full.shape[1], "two identical key rows: positions cannot be recovered"
        pos = sorted(where[kept[h, i].numpy().tobytes()] for i in range(kept.shape[1]))
        assert len(set(pos)) == len(pos)
        out.append(pos)
    return out


@torch.no_grad()
def run_kvpress(model, tokens: list[int], n_press: int, case: PressCase, ratio: float, n_predict: int,
                stops: set[int]) -> tuple[list[list[set[int]]], list[torch.Tensor], list[int]]:
    """kvpress on tokens[:n_press]; returns the kept positions per layer and KV head, the scores kvpress
    ranked per layer [KV heads, n_press], and the greedy answer after tokens[n_press:] (kvpress's
    KVPressTextGenerationPipeline.generate_answer)."""
    # AdaKVPress leaves its pruned indices on the attention modules, and kvpress's attention patch only
    # clears them in a prefill it sees (not in eager attention): clear them, or the next run masks them
    for layer in model.model.layers:
        layer.self_attn.masked_key_indices = None
    model.set_attn_implementation(case.attn)
    press = case.make(ratio)
    kept: dict[int, list[set[int]]] = {}
    scores: dict[int, torch.Tensor] = {}
    original = press.compress
    scorer = press.press if isinstance(press, AdaKVPress) else press
    original_score = scorer.score

    def recording_score(module, *args, **kwargs):
        out = original_score(module, *args, **kwargs)
        scores[module.layer_idx] = out[0].detach().clone()   # AdaKVPress then edits its scores in place
        return out

    def recording(module, hidden_states, keys, values, attentions, kwargs):
        new_keys, new_values = original(module, hidden_states, keys, values, attentions, kwargs)
        if isinstance(press, AdaKVPress):
            # kvpress keeps every row and masks the pruned ones at decode (attention_patch.py)
            _, heads, seq = module.masked_key_indices
            n_kv, length = keys.shape[1], keys.shape[2]
            pruned = [set() for _ in range(n_kv)]
            for h, j in zip(heads.tolist(), seq.tolist()):
                pruned[h].add(j)
            kept[module.layer_idx] = [set(range(length)) - p for p in pruned]
        else:
            kept[module.layer_idx] = [set(p) for p in row_index(keys[0], new_keys[0])]
        return new_keys, new_values

    press.compress = recording
    scorer.score = recording_score
    cache = transformers.DynamicCache()
    with press(model):
        model.model(input_ids=torch.tensor([tokens[:n_press]]), past_key_values=cache)
    layers = [kept[i] for i in range(len(kept))]
    if not isinstance(press, (AdaKVPress, PyramidKVPress)):
        n_kept = compute_n_kept(n_press, ratio)
        assert all(len(h) == n_kept for layer in layers for h in layer), f"{case.name}: kvpress kept != {n_kept}"
    # The rest of the prompt at the original positions, then greedy decoding (kvpress's generate_answer),
    # one token per forward under sdpa: a one-token query needs no mask, so layers whose caches hold
    # different numbers of rows (PyramidKV) work; one token at a time is the same causal attention.
    model.set_attn_implementation("sdpa")
    answer, pos = [], n_press
    feed = list(tokens[n_press:])
    while True:
        for tok in feed:
            logits = model(input_ids=torch.tensor([[tok]]), past_key_values=cache,
                           position_ids=torch.tensor([[pos]])).logits
            pos += 1
        nxt = int(logits[0, -1].argmax())
        if nxt in stops:
            break
        answer.append(nxt)
        if len(answer) == n_predict:
            break
        feed = [nxt]
    model.set_attn_implementation("eager")
    return layers, [scores[i] for i in range(len(scores))], answer


# ----------------------------------------------------------------------------------------------------
# Comparison and output
# ----------------------------------------------------------------------------------------------------


def jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def boundary_distances(engine: set[int], kvpress: set[int], scores: torch.Tensor) -> list[int]:
    """For each position kept by one side only, how far it lies from kvpress's top-k boundary in kvpress's
    own ranking (1: the first position evicted, or the last one kept): small numbers mean the two sides
    disagree only on rows whose scores are nearly tied, as rounding does."""
    order = torch.argsort(scores.to(torch.float64), descending=True, stable=True).tolist()
    rank = {p: i for i, p in enumerate(order)}
    n_kept = len(kvpress)
    return [rank[p] - n_kept + 1 if p in engine else n_kept - rank[p] for p in engine ^ kvpress]


@dataclass
class PressResult:
    jaccards: list[float] = field(default_factory=list)       # per (sample, layer, head)
    per_sample: list[float] = field(default_factory=list)     # mean over the sample's heads
    same_answer: int = 0
    pass_engine: int = 0
    pass_kvpress: int = 0
    agree_pass: int = 0
    n: int = 0
    size_diff: int = 0                                        # heads whose kept counts differ
    swap_ranks: list[int] = field(default_factory=list)       # boundary distance of each position kept by one side


def percentile(values: list[int], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def write_fixture(path: Path, n_layers: int, n_heads: int, prompts: list[tuple[list[int], int]],
                  cases: list[tuple[str, list[list[list[set[int]]]]]]) -> None:
    """Layout: tests/fixtures/parity/README.md."""
    with open(path, "wb") as f:
        f.write(FIXTURE_MAGIC)
        f.write(struct.pack("<4i", n_layers, n_heads, len(prompts), len(cases)))
        for tokens, n_press in prompts:
            f.write(struct.pack("<2i", len(tokens), n_press))
            f.write(struct.pack(f"<{len(tokens)}i", *tokens))
        for spec, kept in cases:
            raw = spec.encode()
            assert len(raw) < SPEC_BYTES, spec
            f.write(raw + b"\0" * (SPEC_BYTES - len(raw)))
            for (tokens, n_press), layers in zip(prompts, kept):
                assert len(layers) == n_layers and all(len(heads) == n_heads for heads in layers)
                for heads in layers:
                    for positions in heads:
                        bits = bytearray((n_press + 7) // 8)
                        for p in positions:
                            bits[p // 8] |= 1 << (p % 8)
                        f.write(bytes(bits))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--engine", type=Path, default=DEFAULT_ENGINE)
    ap.add_argument("--presses", default=",".join(press_cases()), help="comma list (default: %(default)s)")
    ap.add_argument("--ratio", type=float, default=0.5, help="compression ratio (default %(default)s)")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--lengths", default="512,1024,2048", help="target prompt lengths in tokens, cycled")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-predict", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-type", default="f16", choices=["f16", "f32"], help="the engine's KV cache type")
    ap.add_argument("--fixture", type=Path, help="write the parity fixture (token ids, kvpress kept sets)")
    ap.add_argument("--fixture-samples", type=int, default=3, help="first N prompts in the fixture")
    ap.add_argument("--report", type=Path, help="write every per-sample figure as JSON")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    all_cases = press_cases()
    names = args.presses.split(",")
    unknown = [n for n in names if n not in all_cases]
    if unknown:
        ap.error(f"unknown press {unknown[0]} (known: {', '.join(all_cases)})")
    lengths = [int(x) for x in args.lengths.split(",")]
    samples = make_samples(args.samples, lengths, args.seed)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"kvpress {importlib.metadata.version('kvpress')}; model {args.model.name}; ratio {args.ratio}; "
          f"{len(samples)} prompts; engine cache {args.cache_type}", flush=True)
    t0 = time.time()
    model, tokenizer = load_hf(args.model)
    stops = stop_ids(tokenizer)
    print(f"HF model loaded in {time.time() - t0:.0f} s", flush=True)

    results = {n: PressResult() for n in names}
    fixture_prompts: list[tuple[list[int], int]] = []
    fixture_kept: dict[str, list] = {n: [] for n in names}
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        for s in samples:
            for name in names:
                case = all_cases[name]
                eng = run_engine(args, s, case, args.ratio, Path(tmp))
                tokens, n_press = eng["tokens"], eng["n_compressed"]
                kv_kept, kv_scores, kv_answer = run_kvpress(model, tokens, n_press, case, args.ratio, args.n_predict, stops)
                assert len(kv_kept) == len(eng["kept"]), "layer counts differ"
                r = results[name]
                js = [jaccard(a, b) for la, lb in zip(eng["kept"], kv_kept) for a, b in zip(la, lb)]
                r.size_diff += sum(len(a) != len(b) for la, lb in zip(eng["kept"], kv_kept) for a, b in zip(la, lb))
                r.jaccards += js
                r.per_sample.append(sum(js) / len(js))
                for la, lb, sc in zip(eng["kept"], kv_kept, kv_scores):
                    for a, b, row in zip(la, lb, sc):
                        r.swap_ranks += boundary_distances(a, b, row)
                eng_text, kv_text = eng["answer"]["text"], tokenizer.decode(kv_answer, skip_special_tokens=True)
                p_eng, p_kv = s.number in eng_text, s.number in kv_text
                r.n += 1
                r.same_answer += eng["answer"]["tokens"] == kv_answer
                r.pass_engine += p_eng
                r.pass_kvpress += p_kv
                r.agree_pass += p_eng == p_kv
                report.append({"sample": s.index, "press": name, "n_tokens": len(tokens), "n_compressed": n_press,
                               "depth": s.depth, "mean_jaccard": r.per_sample[-1], "min_jaccard": min(js),
                               "engine_answer": eng_text, "kvpress_answer": kv_text, "gold": s.number,
                               "same_tokens": eng["answer"]["tokens"] == kv_answer})
                print(f"  sample {s.index:2d} ({n_press:4d} tokens pressed, depth {s.depth:.1f}) {name:12s} "
                      f"Jaccard mean {r.per_sample[-1]:.3f} min {min(js):.3f}; answers "
                      f"{'same' if eng['answer']['tokens'] == kv_answer else 'differ'}: engine {eng_text!r}"
                      f"{' ok' if p_eng else ''}, kvpress {kv_text!r}{' ok' if p_kv else ''}", flush=True)
                if s.index < args.fixture_samples:
                    if name == names[0]:
                        fixture_prompts.append((tokens, n_press))
                    assert fixture_prompts[s.index] == (tokens, n_press), "the engine's token ids changed"
                    fixture_kept[name].append(kv_kept)
                n_layers, n_heads = len(kv_kept), len(kv_kept[0])

    print(f"\nkvpress parity, {args.model.name}, ratio {args.ratio}, {len(samples)} prompts "
          f"({args.lengths} tokens), engine cache {args.cache_type}, {time.time() - t0:.0f} s")
    print(f"{'press':13s} {'mean J':>7s} {'min J':>6s} {'heads<0.9':>9s} {'same answer':>11s} "
          f"{'needle found: engine':>21s} {'kvpress':>8s} {'agree':>6s}  boundary distance of differing "
          "positions (median / 99th pct / max ranks)")
    for name, r in results.items():
        low = sum(j < 0.9 for j in r.jaccards)
        print(f"{name:13s} {sum(r.jaccards) / len(r.jaccards):7.3f} {min(r.jaccards):6.3f} "
              f"{low:4d}/{len(r.jaccards):<4d} {r.same_answer:5d}/{r.n:<5d} {r.pass_engine:15d}/{r.n:<5d} "
              f"{r.pass_kvpress:3d}/{r.n:<4d} {r.agree_pass:3d}/{r.n}"
              + f"  {percentile(r.swap_ranks, 50)} / {percentile(r.swap_ranks, 99)} / {percentile(r.swap_ranks, 100)}"
              + f" of {len(r.swap_ranks)}"
              + (f"  (kept counts differ on {r.size_diff} heads)" if r.size_diff else ""))
    if args.report:
        args.report.write_text(json.dumps(report, indent=1) + "\n")
    if args.fixture:
        cases = [(f"{n} " + " ".join(all_cases[n].engine + [f"ratio={args.ratio}"]), fixture_kept[n]) for n in names]
        write_fixture(args.fixture, n_layers, n_heads, fixture_prompts, cases)
        print(f"wrote {args.fixture} ({args.fixture.stat().st_size} bytes: {len(fixture_prompts)} prompts, "
              f"{len(cases)} presses)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
