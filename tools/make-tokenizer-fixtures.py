#!/usr/bin/env python3
"""Generate the tokenizer test fixtures in tests/fixtures/tokenizer/.

Usage: python tools/make-tokenizer-fixtures.py [OUT_DIR]
Needs the Python packages regex, tokenizers, sentencepiece, gguf, jinja2.

Every expected value comes from an independent implementation:
  pretok.ref        pre-tokenizer pieces from the `regex` module applied to
                    the regexes of docs/engine.md §4.4 (llama.cpp's forms)
  bpe-llama3.gguf   tiny byte-level BPE vocabularies trained here with HF
  bpe-qwen2.gguf    `tokenizers` (pre-tokenizer = the Llama 3 / Qwen2 split
                    regex, then ByteLevel), written as GGUF tokenizer keys
  bpe-*.ref         token ids HF `tokenizers` gives for STRINGS
  spm.gguf          a tiny SentencePiece BPE model (byte fallback, user-defined
                    and control pieces) written llama-style
  spm.ref           token ids from `sentencepiece` itself
  chat.ref          chat renderings by jinja2 of the official templates below
  gemma3-270m.inp   the strings tools/make-tokenizer-ref-llamacpp.sh feeds to
                    llama.cpp's llama-tokenize for gemma3-270m.ref
  qwen2.5-coder.inp the same for qwen2.5-coder.ref (Qwen2.5-Coder 0.5B and
                    1.5B Instruct share the vocabulary)

SentencePiece vs llama.cpp: llama.cpp's SPM tokenizer does no normalization
except ' ' -> U+2581 and adds the leading space only when the GGUF says so
(add_space_prefix). The model is therefore trained with the identity
normalization rule, add_dummy_prefix=False and remove_extra_whitespaces=False,
and written with add_space_prefix=false; then the two agree. SentencePiece
never treats control-piece text in the input as the control token, which is
llama.cpp's parse_special=false, so spm.ref records only that mode.

File formats (one record per line, fields separated by tabs; text fields
escaped: printable ASCII except '\\' as is, every other byte as \\xHH and
'\\' as '\\\\'):
  pretok.ref:  P <pre> <text> / S <piece>...
  *.ref ids:   T <text> / <add_special><parse_special> <id id ...>
  chat.ref:    C <family> <name> / M <role> <content> / E <expected> or
               X (the template raises) / S <system_end byte offset>
"""
import io
import json
import os
import sys

import jinja2
import regex
import sentencepiece as spm
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from tokenizers import processors, trainers

import gguf

# ---------------------------------------------------------------- escaping


def esc(data: bytes) -> str:
    out = []
    for c in data:
        if c == 0x5C:
            out.append("\\\\")
        elif 0x20 <= c < 0x7F:
            out.append(chr(c))
        else:
            out.append("\\x%02x" % c)
    return "".join(out)


def esc_str(s: str) -> str:
    return esc(s.encode("utf-8"))


# ---------------------------------------------------------------- pre-tokenizer regexes

# llama.cpp's forms (docs/engine.md §4.4): the (?i:...) contraction group is
# written with explicit case classes.
CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA3 = (CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"]
PRE_REGEXES = {"llama3": [LLAMA3], "qwen2": [QWEN2], "gpt-2": [GPT2], "default": DEFAULT}

# The regexes as the HF tokenizer.json files of Llama 3 and Qwen2 write them.
HF_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
HF_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def split_isolated(pieces, pattern):
    """Each match and each gap between matches becomes a piece."""
    out = []
    for piece in pieces:
        pos = 0
        for m in regex.finditer(pattern, piece):
            if m.start() > pos:
                out.append(piece[pos:m.start()])
            out.append(m.group())
            pos = m.end()
        if pos < len(piece):
            out.append(piece[pos:])
    return out


def pretokenize(pre, text):
    pieces = [text] if text else []
    for pattern in PRE_REGEXES[pre]:
        pieces = split_isolated(pieces, pattern)
    return pieces


PRETOK_CASES = [
    # contractions
    "I'm you're we've they'll he'd it's don't",
    "I'M YOU'RE WE'VE THEY'LL HE'D IT'S DON'T",
    "'s 'S 'x 'Re rock'n'roll ''s",
    # digits: 1-3 vs single, other number categories
    "1 12 123 1234 1234567",
    "3.14159 x1y22z333 2024-01-31",
    "\u0663\u0664\u0665 \u0661\u0662\u0663\u0664 \u2460\u2461\u2462\u2463 \u216b",
    # letters of many scripts, combining marks
    "\u00c4pfel \u00fcber Stra\u00dfe",
    "\u043d\u0435\u0449\u043e \u043d\u0430 \u0411\u044a\u043b\u0433\u0430\u0440\u0441\u043a\u0438",
    "\u4f60\u597d\u4e16\u754c\u3053\u3093\u306b\u3061\u306f \ud55c\uad6d\uc5b4",
    "e\u0301te \u0928\u092e\u0938\u094d\u0924\u0947 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    # punctuation and symbol runs
    "Hello!!! ...wait?! a-->b x = y + z;",
    "foo(bar[0]){} $$$ ^^^ ~~~ ||| `tick`",
    "\u00abquote\u00bb \u201edeutsch\u201c \u2014 \u2026",
    "!!\n\n...\r\n?? \n",
    # newlines
    "a\nb a\n\nb a\r\nb",
    "\n\n\n",
    " \n \t\n ",
    "line1\n  line2\n\tline3\n",
    # whitespace runs, \s+(?!\S)
    "a  b   c \t d",
    "   leading",
    "trailing   ",
    "  ",
    " ",
    "\t",
    "x\u00a0y a\u3000b x\u2003\u2003y",
    "\x0b\x0c end",
    "a \u00a0 b",
    # code
    "def f(x):\n    return x**2  # square\n",
    "int main(void) { return 0; }",
    "if (a && b || !c) {\n\tx += 1;\n}",
    # emoji and mixed
    "\U0001f999.cpp \U0001f600\U0001f600",
    "\U0001f636\u200d\U0001f32b\ufe0f \u2705 \U0001f468\u200d\U0001f469\u200d\U0001f467",
    "Hello, y'all! How are you \U0001f601 ?\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e",
    "w048 7tuijk dsdfhu",
]

# ---------------------------------------------------------------- test strings for ids

STRINGS = [
    "",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n\n",
    "\t\n",
    "Hello world",
    " Hello world",
    "Hello World!",
    "Hello, world! How are you?",
    "  leading and trailing  ",
    "I'm sure it's fine, isn't it? WE'LL SEE.",
    "3 33 333 3333 33333 1234567890",
    "version 1.2.3, pi=3.14159, 2+2=4",
    "\u00c4pfel und Birnen, \u00fcber die Stra\u00dfe",
    "\u043d\u0435\u0449\u043e \u043d\u0430 \u0411\u044a\u043b\u0433\u0430\u0440\u0441\u043a\u0438",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c",
    "\u1780\u17b6\u1793\u17cb\u178f\u17c2\u1796\u17b7\u179f\u17c1\u179f",
    "\U0001f999 llama.cpp \U0001f600",
    "\U0001f680 (normal) \U0001f636\u200d\U0001f32b\ufe0f (multiple emojis concatenated) \u2705",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; i++) {\n\tsum += x[i];\n}",
    "if x == 1:\n\tprint('one')\n\n\nelse:\n        pass",
    "<html><body><p>Hi &amp; bye</p></body></html>",
    "path/to/file.txt; C:\\Users\\me",
    "e\u0301te na\u00efve caf\u00e9",
    "a" + " " * 40 + "b",
    "x" + "\n" * 12 + "y",
    "tabs\t\t\tand spaces   mixed \t \n",
    "\u00a0non-breaking\u00a0space and\u3000ideographic",
    "Hello, y'all! How are you \U0001f601 ?\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e",
    "w048 7tuijk dsdfhu",
    "'s 'S 're 'RE 'll don't",
    "$$$ ^^^ ~~~ ||| +++ <=> ``` ***",
    "...!!!???---===",
    "\u00bfQu\u00e9? \u00a1S\u00ed! \u00ab\u00e7a\u00bb",
    "email: someone@example.com, url: https://example.org/a?b=c&d=e",
]

# special-token strings per vocabulary (added to STRINGS for that fixture)
BPE_LLAMA3_SPECIAL = [
    "<|begin_of_text|>Hello<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>",
    "x<|end_of_text|>y <user_tok> z<user_tok>",
]
BPE_QWEN2_SPECIAL = [
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "a<|endoftext|>b <user_tok>c",
]
SPM_SPECIAL = [
    "<start_of_turn>user\nHi<end_of_turn>",
    "a<user1>b <user1> <user1><user1>",
    "<s> </s> <unk>",
]

GEMMA_EXTRA = [
    b"<start_of_turn>user\nWrite a poem<end_of_turn>\n<start_of_turn>model\n",
    b"<bos>Hello<eos>",
    b"<unused5> <pad> <mask> [multimodal]",
    b"<table><tr><td>1</td></tr></table>",
    b"<start_of_image>x<end_of_image>",
    b" " * 70 + b"end",
    b"\n" * 33,
    b"\t" * 35 + b"x",
    b"\xef\xbf\xbf \xf4\x8f\xbf\xbd \xee\x80\x80",   # U+FFFF, U+10FFFD, U+E000
    b"\x01\x02\x7f",
    b"bad utf-8: \xff\xfe \xc3( \xe2\x82",
    b"\xf0\x93\x80\x80 \xf0\x9d\x95\xab",               # U+13000, U+1D56B
    b"a</s>b <s>c</b> <eos>",   # </s> is user-defined in Gemma 3 yet an end-of-generation text
    b"windows\r\nline\r\n\r\n end \n\n\n\n  \n",
    b"<start_of_turn><end_of_turn><start_of_turn>",
    b"<<start_of_turn>>  <end_of_turn \xe2\x96\x81\xe2\x96\x81x",
]

# Qwen2.5-Coder's byte-level BPE with the qwen2 pre-tokenizer (digits one by one, contractions
# case-insensitively, letters with a leading non-letter, newline runs): strings for
# tools/make-tokenizer-ref-llamacpp.sh, which writes qwen2.5-coder.ref from llama.cpp's llama-tokenize
QWEN_EXTRA = [
    b"<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    b"<|endoftext|>x<|im_end|>y <|im_start|>",
    b"<|fim_prefix|>def f(x):\n    <|fim_suffix|>\n    return y<|fim_middle|>",
    b"<|repo_name|>promptkv<|file_sep|>src/main.c\n<|file_sep|>",
    b"<|im_start <|im_start| |im_start|> <| im_end |> <|unknown_tok|>",
    b"123456789012345678901234567890 0.000001 1e-9 -42 +7 3,141,592 \xd9\xa3\xd9\xa4 \xe2\x85\xa7 \xc2\xb2",
    b"I'M YOU'RE they'VE we'D it'S She'Ll don'T ''s 'x '",
    b"mixed\xd0\xbb\xd0\xb0\xd1\x82\xd0\xb8\xd0\xbd\xd0\xb8\xd1\x86\xd0\xb0 and \xce\xb1\xce\xb2\xce\xb3123\xe4\xb8\xad\xe6\x96\x87abc",
    b"\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87 "
    b"\xe0\xb8\xaa\xe0\xb8\xa7\xe0\xb8\xb1\xe0\xb8\xaa\xe0\xb8\x94\xe0\xb8\xb5 \xec\x95\x88\xeb\x85\x95\xed\x95\x98\xec\x84\xb8\xec\x9a\x94",
    b"\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 \xf0\x9f\x87\xa9\xf0\x9f\x87\xaa "
    b"\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbf!!",
    b"  \n  \n\n   \n\t\n \t \n\n\n\n    x   \n",
    b" " * 70 + b"end" + b"\t" * 9 + b"\n" * 17,
    b"windows\r\nline\r\n\r\n end \r\n\r\n\r\n",
    b"template <typename T>\nstd::vector<T> f(const T& x) { return {x, x}; }  // C++\n",
    b'{"key": [1, 2.5, null, true], "nested": {"a": "b\\n"}}',
    b"#!/bin/sh\nfor f in *.c; do gcc -O2 \"$f\" -o \"${f%.c}\" && ./\"${f%.c}\"; done 2>&1 | tee log",
    b"re.compile(r'^(?P<name>[A-Za-z_]\\w*)\\s*=\\s*(\\d+)$')",
    b"    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n\n\n",
    b"bad utf-8: \xff\xfe \xc3( \xe2\x82 \xf0\x9f",
    b"\xef\xbf\xbf \xf4\x8f\xbf\xbd \xee\x80\x80 \x01\x02\x7f",
]

CORPUS = """
The quick brown fox jumps over the lazy dog. A tokenizer splits text into pieces, and a
byte pair encoding merges the most frequent pairs of symbols until the vocabulary is full.
Hello world! Hello, world. How are you today? I'm fine, thanks; you're kind. We've seen
that they'll come back, and he'd said it's not over. Don't worry: it isn't hard.
Numbers appear everywhere: 0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000 2024 3.14159 42 365 1234567.
def add(a, b):
    return a + b

for (int i = 0; i < n; i++) {
    sum += x[i];
}
if x == 1:
    print('one')
else:
    pass
The model reads the prompt, computes attention over every token, and stores keys and values
in a cache. Compression keeps the rows that matter and drops the rest, so long prompts fit.
Hello again, world. The weather is nice and the sun is shining over the hills and the river.
Users write questions; the assistant writes answers. Questions and answers alternate in turns.
Apfel und Birnen sind gesund. Die Strasse ist lang. Uber den Wolken muss die Freiheit wohl
grenzenlos sein. Le chat est sur la table. La vie est belle. El perro come la comida.
Privet, kak dela? Vse horosho. Ni hao, shijie. Konnichiwa.
email someone@example.com or visit https://example.org/index.html?page=2&lang=en today.
<html><body><p>Paragraph</p></body></html> <div class="main">content</div>
Path: /usr/local/bin/python3 and C:\\Windows\\System32 are directories; files end in .txt .c .h.
Some punctuation... and more!!! Really??? Yes -- no -- maybe. (Parentheses) [brackets] {braces}.
Math: x = y + z * 2 - 1 / 3; a <= b >= c != d == e. Money: $100, 50%, #tag, @user, ^caret, ~tilde.
"""


def corpus_lines():
    lines = [ln for ln in CORPUS.split("\n") if ln.strip()]
    # repeat with small variations so pair counts differ
    out = []
    for k in range(3):
        for i, ln in enumerate(lines):
            if (i + k) % 3 != 0:
                out.append(ln)
    return out + lines


# ---------------------------------------------------------------- writers


def write_ids_ref(path, header, cases):
    """cases: list of (text_bytes, {flags: ids})"""
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(f"# {header}\n")
        for text, variants in cases:
            f.write(f"T\t{esc(text)}\n")
            for flags in sorted(variants, reverse=True):
                f.write(f"{flags}\t{' '.join(str(i) for i in variants[flags])}\n")


def write_pretok(out_dir):
    path = os.path.join(out_dir, "pretok.ref")
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(f"# pre-tokenizer pieces from the Python regex module {regex.__version__}\n")
        for pre in PRE_REGEXES:
            for text in PRETOK_CASES:
                pieces = pretokenize(pre, text)
                assert "".join(pieces) == text
                f.write(f"P\t{pre}\t{esc_str(text)}\n")
                f.write("S\t" + "\t".join(esc_str(p) for p in pieces) + "\n")


# ---------------------------------------------------------------- BPE (HF tokenizers)


def train_bpe(pattern, specials, user_defined, ignore_merges, vocab_size):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, min_frequency=1,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus_lines(), trainer)
    tok.add_tokens([AddedToken(u, special=False, normalized=False) for u in user_defined])
    return tok


def bpe_vocab(tok, specials, user_defined):
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    assert all(t is not None for t in tokens)
    types = []
    for t in tokens:
        types.append(3 if t in specials else 4 if t in user_defined else 1)
    model = json.loads(tok.to_str())["model"]
    merges = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in model["merges"]]
    return tokens, types, merges


def write_bpe_fixture(out_dir, name, arch, pre, pattern, specials, user_defined, ignore_merges,
                      bos, eos, add_bos, extra_strings):
    tok = train_bpe(pattern, specials, user_defined, ignore_merges, 800)
    tokens, types, merges = bpe_vocab(tok, specials, user_defined)
    ids = {t: i for i, t in enumerate(tokens)}
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, ids[bos])])

    w = gguf.GGUFWriter(os.path.join(out_dir, f"{name}.gguf"), arch)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(ids[bos])
    w.add_eos_token_id(ids[eos])
    if not add_bos:
        w.add_add_bos_token(False)  # as the converter writes it for Qwen2
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    cases = []
    for s in STRINGS + extra_strings:
        variants = {}
        for add_special in (True, False):
            for parse_special in (True, False):
                tok.encode_special_tokens = not parse_special
                enc = tok.encode(s, add_special_tokens=add_special)
                variants[f"{int(add_special)}{int(parse_special)}"] = enc.ids
        tok.encode_special_tokens = False
        cases.append((s.encode("utf-8"), variants))
    import tokenizers
    write_ids_ref(os.path.join(out_dir, f"{name}.ref"),
                  f"token ids from HF tokenizers {tokenizers.__version__} for {name}.gguf", cases)
    print(f"{name}: {len(tokens)} tokens, {len(merges)} merges")


# ---------------------------------------------------------------- SPM (sentencepiece)

SPM_USER_DEFINED = ["<user1>", "<tab2>"]
SPM_CONTROL = ["<start_of_turn>", "<end_of_turn>"]


def write_spm_fixture(out_dir):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_lines()), model_writer=model, model_type="bpe",
        vocab_size=700, byte_fallback=True, character_coverage=1.0,
        user_defined_symbols=SPM_USER_DEFINED, control_symbols=SPM_CONTROL,
        add_dummy_prefix=False, normalization_rule_name="identity",
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    n = sp.get_piece_size()
    tokens = [sp.id_to_piece(i) for i in range(n)]
    scores = [sp.get_score(i) for i in range(n)]
    types = []
    for i, t in enumerate(tokens):
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif t in SPM_USER_DEFINED:
            types.append(4)
        elif sp.is_unused(i):
            types.append(5)
        elif sp.is_byte(i):
            types.append(6)
        else:
            types.append(1)

    w = gguf.GGUFWriter(os.path.join(out_dir, "spm.gguf"), "llama")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    cases = []
    for s in STRINGS + SPM_SPECIAL:
        cases.append((s.encode("utf-8"), {
            "10": sp.encode(s, add_bos=True),
            "00": sp.encode(s),
        }))
    write_ids_ref(os.path.join(out_dir, "spm.ref"),
                  f"token ids from sentencepiece {spm.__version__} for spm.gguf", cases)
    print(f"spm: {n} pieces")


# ---------------------------------------------------------------- chat templates

# google/gemma-3-*-it, tokenizer_config.json "chat_template" (docs/engine.md §4.6)
GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""

# meta-llama/Meta-Llama-3-8B-Instruct, tokenizer_config.json "chat_template"
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")

# Qwen/Qwen2-7B-Instruct, tokenizer_config.json "chat_template"
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

CHAT_FAMILIES = {
    "gemma": (GEMMA3_TEMPLATE, "<bos>"),
    "llama3": (LLAMA3_TEMPLATE, "<|begin_of_text|>"),
    "chatml": (CHATML_TEMPLATE, ""),
}

CHAT_CASES = {
    "single_user": [("user", "Test")],
    "system_user": [("system", "You are terse."), ("user", "Hi there")],
    "multi_turn": [("system", "Be brief.\n"), ("user", "  What is 2+2?  "),
                   ("assistant", "4\n"), ("user", "\tAnd 3+3?\n\n")],
    "no_system_turns": [("user", "Hello"), ("assistant", "Hi! How can I help?"),
                        ("user", "Tell me a joke.")],
    "unicode": [("system", "R\u00e9ponds en fran\u00e7ais \U0001f600"),
                ("user", "\u00a0\u3000Caf\u00e9 \u4f60\u597d\u3000\u00a0")],
    "control_chars": [("user", "\x1c\x1dsep\x1e\x1f"), ("assistant", " ok "), ("user", "x")],
    "empty_content": [("system", ""), ("user", "")],
    "two_users": [("user", "one"), ("user", "two")],
    "assistant_first": [("assistant", "I speak first"), ("user", "ok")],
}


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def render_chat(template, bos, messages):
    # the environment HF transformers uses for apply_chat_template
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    msgs = [{"role": r, "content": c} for r, c in messages]
    return env.from_string(template).render(messages=msgs, bos_token=bos,
                                            add_generation_prompt=True)


def system_end(family, bos, messages, rendered):
    """Byte offset just past the system prompt's rendering, 0 if none."""
    data = rendered.encode("utf-8")
    if family == "chatml":
        end = data.index(b"<|im_end|>\n") + len(b"<|im_end|>\n")
        assert data.startswith(b"<|im_start|>system\n")
        return end
    if messages[0][0] != "system":
        return 0
    system = messages[0][1]
    if family == "gemma":
        if len(messages) == 1:
            return 0
        prefix = (bos + "<start_of_turn>" + ("model" if messages[1][0] == "assistant"
                                             else messages[1][0]) + "\n").encode("utf-8")
        part = (system + "\n\n").encode("utf-8")
        assert data.startswith(prefix + part)
        return len(prefix + part)
    prefix = (bos + "<|start_header_id|>system<|end_header_id|>\n\n").encode("utf-8")
    part = (system.strip() + "<|eot_id|>").encode("utf-8")
    assert data.startswith(prefix + part)
    return len(prefix + part)


def write_chat(out_dir):
    path = os.path.join(out_dir, "chat.ref")
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(f"# chat renderings by jinja2 {jinja2.__version__} of the official templates "
                "in tools/make-tokenizer-fixtures.py\n")
        for family, (template, bos) in CHAT_FAMILIES.items():
            for name, messages in CHAT_CASES.items():
                f.write(f"C\t{family}\t{name}\n")
                for role, content in messages:
                    f.write(f"M\t{role}\t{esc_str(content)}\n")
                try:
                    rendered = render_chat(template, bos, messages)
                except TemplateError:
                    f.write("X\n")
                    continue
                f.write(f"E\t{esc_str(rendered)}\n")
                f.write(f"S\t{system_end(family, bos, messages, rendered)}\n")


# ---------------------------------------------------------------- gemma inputs


def write_gemma_inputs(out_dir):
    path = os.path.join(out_dir, "gemma3-270m.inp")
    with open(path, "w", encoding="ascii", newline="\n") as f:
        for s in STRINGS:
            f.write(esc(s.encode("utf-8")) + "\n")
        for s in GEMMA_EXTRA:
            f.write(esc(s) + "\n")


def write_qwen_inputs(out_dir):
    path = os.path.join(out_dir, "qwen2.5-coder.inp")
    with open(path, "w", encoding="ascii", newline="\n") as f:
        for s in STRINGS + BPE_QWEN2_SPECIAL[:1]:
            f.write(esc(s.encode("utf-8")) + "\n")
        for s in QWEN_EXTRA:
            f.write(esc(s) + "\n")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tokenizer"
    os.makedirs(out_dir, exist_ok=True)
    write_pretok(out_dir)
    write_bpe_fixture(out_dir, "bpe-llama3", "llama", "llama-bpe", HF_LLAMA3,
                      ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                       "<|end_header_id|>", "<|eot_id|>"], ["<user_tok>"], True,
                      "<|begin_of_text|>", "<|end_of_text|>", True, BPE_LLAMA3_SPECIAL)
    write_bpe_fixture(out_dir, "bpe-qwen2", "qwen2", "qwen2", HF_QWEN2,
                      ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], ["<user_tok>"], False,
                      "<|endoftext|>", "<|im_end|>", False, BPE_QWEN2_SPECIAL)
    write_spm_fixture(out_dir)
    write_chat(out_dir)
    write_gemma_inputs(out_dir)
    write_qwen_inputs(out_dir)


if __name__ == "__main__":
    main()
