#!/usr/bin/env python3
"""Independent reference of promptkv eval's task generators (docs/evaluation.md §1, §2).

Rebuilds every prompt from the documented PRNG (src/eval/rng.h), the word lists
(tests/data/words) and the construction rules of docs/evaluation.md, without using the
C code, and prints golden values for tests/test_eval_golden.c:

    FNV-1a-64 of context + question + answer_prefix, the segment lengths, the gold
    strings and the byte spans of the answer-bearing text.

usage: tools/eval-golden.py [--c]      (--c prints the C table used by the test)
Only the standard library is needed.
"""
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MASK = (1 << 64) - 1


# ------------------------------------------------------------------ PRNG (rng.h)

def fnv1a64(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & MASK
    return h


def eval_seed(task: str, length: int, sample: int, base: int) -> int:
    return fnv1a64(f"{task}/{length}/{sample}/{base}".encode())


class Rng:
    """xoshiro256** seeded with four splitmix64 outputs."""

    def __init__(self, seed: int):
        x = seed
        self.s = []
        for _ in range(4):
            x = (x + 0x9e3779b97f4a7c15) & MASK
            z = x
            z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & MASK
            z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & MASK
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def _rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & MASK

    def next(self) -> int:
        s = self.s
        result = (self._rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return result

    def below(self, n: int) -> int:
        threshold = ((1 << 64) - n) % n
        while True:
            x = self.next()
            if x >= threshold:
                return x % n

    def range(self, lo: int, hi: int) -> int:
        return lo + self.below(hi - lo + 1)

    def shuffle(self, a: list) -> None:
        for i in range(len(a) - 1, 0, -1):
            j = self.below(i + 1)
            a[i], a[j] = a[j], a[i]

    def distinct(self, n: int, k: int) -> list:
        out = []
        while len(out) < k:
            v = self.below(n)
            if v not in out:
                out.append(v)
        return out


# ------------------------------------------------------------------ words and prose

def read_words(name):
    with open(os.path.join(ROOT, "tests", "data", "words", name + ".txt")) as f:
        return [w.strip() for w in f if w.strip()]


ADJ, NOUN, VERB = read_words("adjectives"), read_words("nouns"), read_words("verbs")
POOL = sorted(set(ADJ + NOUN + VERB))
PROSE_SEED = 20240611

CLAUSES = [
    "the {A} {N} is {A}", "we {V} the {N}", "people {V} {a} {A} {N} near the {N}",
    "every {N} can {V} the {A} {N}", "you should {V} your {N} before the {N}",
    "they {V} and {V} with the {N}", "it is {A} to {V} the {N}", "I {V} that {N}",
    "no {N} will {V} without {a} {N}", "the {N} and the {N} are {A}",
    "our {A} {N} looks {A} today", "some friends {V} the {N} at night",
]
CONNECTORS = [", and ", ", but ", " because ", " when ", ", so ", " while "]
QUESTIONS = ["do you {V} the {A} {N}", "why should we {V} the {N}", "can {a} {N} {V} the {A} {N}"]


def fill(rng, tpl):
    words = tpl.split(" ")
    out = []
    article = False
    for w in words:
        if w == "{a}":
            article = True
            continue
        if w in ("{A}", "{N}", "{V}"):
            lst = {"{A}": ADJ, "{N}": NOUN, "{V}": VERB}[w]
            w = lst[rng.below(len(lst))]
            if article:
                out.append("an" if w[0] in "aeiou" else "a")
                article = False
        out.append(w)
    return " ".join(out)


def sentence(rng):
    kind = rng.below(10)
    if kind == 0:
        s = fill(rng, QUESTIONS[rng.below(3)]) + "?"
    else:
        s = fill(rng, CLAUSES[rng.below(len(CLAUSES))])
        n = 1
        while n < 3 and rng.below(3) == 0:
            s += CONNECTORS[rng.below(len(CONNECTORS))] + fill(rng, CLAUSES[rng.below(len(CLAUSES))])
            n += 1
        s += "!" if kind == 1 else "."
    return s[0].upper() + s[1:]


def prose_words(seed, n):
    rng = Rng(seed)
    words = []
    while len(words) < n:
        words.extend(sentence(rng).split(" "))
    return " ".join(words[:n])


def split_sentences(text):
    """Sentences end at . ? ! followed by a space, or at the end of the text."""
    out, i, n = [], 0, len(text)
    while i < n:
        while i < n and text[i] == " ":
            i += 1
        if i >= n:
            break
        b = i
        while i < n and not (text[i] in ".?!" and (i + 1 == n or text[i + 1] == " ")):
            i += 1
        e = i + 1 if i < n else n
        out.append(text[b:e])
        i = e
    return out


# ------------------------------------------------------------------ tasks

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
DEPTHS = [round(x) for x in (100 * i / 39 for i in range(40))]
CLASSIC_NEEDLE = "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."


class Item:
    def __init__(self):
        self.context = ""
        self.question = ""
        self.prefix = ""
        self.gold = []
        self.spans = []

    def add(self, text, needle=False):
        if needle:
            b = len(self.context.encode())
            self.context += text
            self.spans.append((b, len(self.context.encode())))
        else:
            self.context += text


def rand_text(rng, kind):
    if kind == "words":
        a = ADJ[rng.below(len(ADJ))]
        return a + "-" + NOUN[rng.below(len(NOUN))]
    if kind == "numbers":
        return str(rng.range(1000000, 9999999))
    hi, lo = rng.next(), rng.next()
    x = (hi << 64) | lo
    import uuid
    return str(uuid.UUID(int=x, version=4))


NIAH = {
    # name: haystack, key, value, keys, values, queries
    "niah_single_1": ("noise", "words", "numbers", 1, 1, 1),
    "niah_single_2": ("essay", "words", "numbers", 1, 1, 1),
    "niah_single_3": ("essay", "words", "uuids", 1, 1, 1),
    "niah_multikey_1": ("essay", "words", "numbers", 4, 1, 1),
    "niah_multikey_2": ("needle", "words", "numbers", 1, 1, 1),
    "niah_multikey_3": ("needle", "uuids", "uuids", 1, 1, 1),
    "niah_multivalue": ("essay", "words", "numbers", 1, 4, 1),
    "niah_multiquery": ("essay", "words", "numbers", 4, 1, 4),
    "niah_passkey_noise": ("noise", "words", "numbers", 1, 1, 1),
    "niah_passkey_essay": ("essay", "words", "numbers", 1, 1, 1),
    "niah_multiquestion": ("essay", "words", "numbers", 4, 1, 1),
}
# the multi-question tasks (docs/evaluation.md §2.5): questions asked of one context, one per item
MULTI_QUESTION = {"niah_multiquestion": 4, "longeval_multiquestion": 4}


def singular(s):
    for a, b in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
        s = s.replace(a, b)
    return s


def build_niah(name, rng, n, depth, asked=0):
    hay, kk, vk, nk, nv, nq = NIAH[name]
    nk = max(nk, nq)
    grid = depth is not None
    keys, needles = [], []
    for _ in range(nk):
        k = rand_text(rng, kk)
        while k in keys:
            k = rand_text(rng, kk)
        keys.append(k)
        for _ in range(nv):
            needles.append((k, rand_text(rng, vk)))
    drawn = list(needles)
    order = list(range(len(needles)))
    rng.shuffle(order)
    needles = [drawn[i] for i in order]
    single = nq * nv == 1
    tplural = vk
    tname = vk[:-1] if single else vk
    instr = "Some special magic {t} are hidden within the following text. Make sure to memorize it. " \
            "I will quiz you about the {t} afterwards.\n"
    question = "What are all the special magic {t} for {q} mentioned in the provided text?"
    prefix = " The special magic {t} for {q} mentioned in the provided text are"
    if single:
        instr, question, prefix = singular(instr), singular(question), singular(prefix)
    distract = []
    if hay == "needle":
        for _ in range(n):
            k = rand_text(rng, kk)
            while k in keys:
                k = rand_text(rng, kk)
            distract.append((k, rand_text(rng, vk)))
    it = Item()
    it.add(instr.replace("{t}", tname))

    def needle_text(k, v, record):
        it.add(f"One of the special magic {tplural} for {k} is: ")
        it.add(v, record)
        it.add(".")

    if hay == "essay":
        text = prose_words(PROSE_SEED, n)
        sents = split_sentences(text)
        if grid:
            pos = [math.floor(len(sents) * depth / 100.0)]
        else:
            didx = rng.distinct(40, len(needles))
            pos = sorted(math.floor(len(sents) * (DEPTHS[d] / 100.0)) for d in didx)
        bounds = [0] + pos + [len(sents)]
        for i in range(1, len(bounds)):
            if i > 1:
                it.add(" ")
            it.add(" ".join(sents[bounds[i - 1]:bounds[i]]))
            if i - 1 < len(needles):
                it.add(" ")
                needle_text(*needles[i - 1], True)
    else:
        if grid:
            pos = [math.floor(n * depth / 100.0)]
        else:
            pos = sorted(rng.distinct(n, len(needles)), reverse=True)
        # RULER: insert needles[i] at index pos[i], largest index first
        lines = [("noise", None)] * n if hay == "noise" else [("d", d) for d in distract]
        for i, p in enumerate(pos):
            lines.insert(p, ("needle", needles[i]))
        for j, (kind, val) in enumerate(lines):
            if j:
                it.add("\n")
            if kind == "noise":
                it.add(NOISE)
            elif kind == "d":
                needle_text(*val, False)
            else:
                needle_text(*val, True)
    it.add("\n")
    if name in MULTI_QUESTION:
        qidx = [rng.distinct(nk, MULTI_QUESTION[name])[asked]]
    else:
        qidx = rng.distinct(nk, nq)
    queries = [keys[i] for i in qidx]
    q = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
    it.question = question.replace("{t}", tname).replace("{q}", q)
    it.prefix = prefix.replace("{t}", tname).replace("{q}", q)
    # gold: the values of the queried keys in query order, each key's values in draw order
    by_key = {}
    for (k, v) in drawn:
        by_key.setdefault(k, []).append(v)
    it.gold = [v for k in queries for v in by_key[k]]
    gold_set = set(it.gold)
    ctx = it.context.encode()
    it.spans = [s for s in it.spans if ctx[s[0]:s[1]].decode() in gold_set]
    return it


def vt_names(rng, length):
    names = []
    while len(names) < 5:
        s = "".join(chr(ord("A") + rng.below(26)) for _ in range(length))
        if s not in names:
            names.append(s)
    return names


def vt_write(it, names, value, pos, n, record):
    it.add("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n")
    lines = [("noise", None)] * n
    chain = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j]} = VAR {names[j - 1]} " for j in range(1, 5)]
    for j in range(5):
        lines.insert(pos[j] + j, ("chain", chain[j]))
    for j, (kind, text) in enumerate(lines):
        if j:
            it.add("\n")
        it.add(NOISE if kind == "noise" else text, record and kind == "chain")
    it.add("\n")
    q = f"Question: Find all variables that are assigned the value {value} in the text above."
    p = (" Answer: According to the chain(s) of variable assignment in the text above, 5 variables are "
         f"assigned the value {value}, they are: ")
    return q, p


def build_vt(rng, n, n_aux, base):
    ex = Rng(eval_seed("vt-example", 500, 0, base))
    vt_names(ex, 3)
    ex_pos = sorted(ex.distinct(n_aux, 5))
    ex_names = vt_names(rng, 3)
    ex_value = rng.range(10000, 99998)
    it = Item()
    q, p = vt_write(it, ex_names, ex_value, ex_pos, n_aux, False)
    it.add(q + p + " " + " ".join(ex_names) + "\n")
    names = vt_names(rng, 5)
    value = rng.range(10000, 99998)
    pos = sorted(rng.distinct(n, 5))
    it.question, it.prefix = vt_write(it, names, value, pos, n, True)
    it.gold = names
    return it


CWE_INSTR = ("Below is a numbered list of words. In these words, some appear more often than others. "
             "Memorize the ones that appear most often.\n")
CWE_Q = "Question: What are the 10 most common words in the above list?"
CWE_P = " Answer: The top 10 words that appear most often in the list are:"


def cwe_list(rng, n_words, c, u):
    words = [POOL[i] for i in rng.distinct(len(POOL), n_words)]
    lst = words[:10] * c + words[10:] * u
    rng.shuffle(lst)
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(lst)), words


def build_cwe(rng, n, length):
    short = length < 4096
    c, u = (6, 1) if short else (30, 3)
    ex_n, ex_c, ex_u = (20, 3, 1) if short else (40, 10, 3)
    it = Item()
    text, ex = cwe_list(rng, ex_n, ex_c, ex_u)
    it.add(CWE_INSTR + text + "\n" + CWE_Q + CWE_P + "".join(f" {i + 1}. {w}" for i, w in enumerate(ex[:10])) + "\n")
    text, words = cwe_list(rng, n, c, u)
    it.add(CWE_INSTR + text + "\n")
    it.question, it.prefix, it.gold = CWE_Q, CWE_P, words[:10]
    return it


def build_fwe(rng, n, length):
    v = (length - 50) // 50
    vocab = []
    while len(vocab) < v:
        w = "".join(chr(ord("a") + rng.below(26)) for _ in range(6))
        if w not in vocab:
            vocab.append(w)
    vocab.sort()
    rng.shuffle(vocab)
    vocab[0] = "..."
    zeta2 = math.pi ** 2 / 6
    occ = []
    for k in range(1, v + 1):
        occ += [vocab[k - 1]] * int(math.floor(n * k ** -2.0 / zeta2))
    rng.shuffle(occ)
    it = Item()
    it.add("Read the following coded text and track the frequency of each coded word. Find the three most "
           "frequently appeared coded words. " + " ".join(occ) + "\n")
    it.question = ("Question: Do not provide any explanation. Please ignore the dots '....'. What are the three "
                   "most frequently appeared words in the above coded text?")
    it.prefix = " Answer: According to the coded text above, the three most frequently appeared words are:"
    it.gold = vocab[1:4]
    return it


def build_longeval(rng, n, task="longeval_lines", question=0):
    keys, values = [], []
    for _ in range(n):
        k = rand_text(rng, "words")
        while k in keys:
            k = rand_text(rng, "words")
        keys.append(k)
        values.append(rng.range(10000, 99999))
    target = rng.distinct(n, MULTI_QUESTION[task])[question] if task in MULTI_QUESTION else rng.below(n)
    it = Item()
    it.add("Below is a record of lines I want you to remember. Each line begins with 'line <line index>' and "
           "contains a '<REGISTER_CONTENT>' at the end of the line as a numerical value. For each line index, "
           "memorize its corresponding <REGISTER_CONTENT>. At the end of the record, I will ask you to retrieve "
           "the corresponding <REGISTER_CONTENT> of a certain line index. Now the record start:\n\n")
    for i in range(n):
        it.add(f"line {keys[i]}: REGISTER_CONTENT is <")
        it.add(str(values[i]), i == target)
        it.add(">\n")
    it.question = (f"\nNow the record is over. Tell me what is the <REGISTER_CONTENT> in line {keys[target]}? "
                   "I need the number.")
    it.prefix = f" Answer: The <REGISTER_CONTENT> in line {keys[target]} is"
    it.gold = [str(values[target])]
    return it


def build_classic(sample, n, depth):
    sents = split_sentences(prose_words(PROSE_SEED + sample, n))
    at = math.floor(len(sents) * depth / 100.0)
    it = Item()
    it.add("This is a very long story book: <book> ")
    parts = sents[:at] + [None] + sents[at:]
    for i, s in enumerate(parts):
        if i:
            it.add(" ")
        if s is None:
            it.add(CLASSIC_NEEDLE, True)
        else:
            it.add(s)
    it.add(" </book>.\n")
    it.question = " Based on the content of the book, Question: What is the best thing to do in San Francisco?\n"
    it.prefix = "Answer:"
    it.gold = [CLASSIC_NEEDLE]
    return it


GRID = {"niah_passkey_noise", "niah_passkey_essay", "niah_classic"}


def build(task, length, sample, n, n_aux=0, depth=None, base=0, question=0):
    key = f"{task}:{depth:g}" if task in GRID else task
    rng = Rng(eval_seed(key, length, sample, base))
    if task in NIAH:
        return build_niah(task, rng, n, depth if task in GRID else None, question)
    if task == "vt":
        return build_vt(rng, n, n_aux, base)
    if task == "cwe":
        return build_cwe(rng, n, length)
    if task == "fwe":
        return build_fwe(rng, n, length)
    if task in ("longeval_lines", "longeval_multiquestion"):
        return build_longeval(rng, n, task, question)
    if task == "niah_classic":
        return build_classic(sample, n, depth)
    raise ValueError(task)


# (task, length, sample, units, aux, depth): sizes chosen to cover every branch
CASES = [
    ("niah_single_1", 1024, 0, 12, 0, None),
    ("niah_single_1", 1024, 3, 40, 0, None),
    ("niah_single_2", 1024, 1, 300, 0, None),
    ("niah_single_3", 2048, 2, 250, 0, None),
    ("niah_multikey_1", 1024, 0, 400, 0, None),
    ("niah_multikey_2", 1024, 4, 30, 0, None),
    ("niah_multikey_3", 4096, 0, 9, 0, None),
    ("niah_multivalue", 1024, 2, 350, 0, None),
    ("niah_multiquery", 2048, 1, 333, 0, None),
    ("vt", 1024, 0, 20, 9, None),
    ("vt", 4096, 3, 60, 12, None),
    ("cwe", 1024, 0, 45, 0, None),
    ("cwe", 4096, 1, 30, 0, None),
    ("fwe", 1024, 0, 300, 0, None),
    ("fwe", 4096, 2, 700, 0, None),
    ("longeval_lines", 1024, 0, 25, 0, None),
    ("niah_passkey_noise", 512, 0, 15, 0, 0.0),
    ("niah_passkey_noise", 512, 0, 15, 0, 100.0),
    ("niah_passkey_essay", 1024, 0, 200, 0, 50.0),
    ("niah_passkey_essay", 1024, 1, 200, 0, 100.0),
    ("niah_classic", 2048, 0, 300, 0, 25.0),
    ("niah_classic", 2048, 1, 300, 0, 0.0),
] + [("niah_multiquestion", 2048, 1, 333, 0, None, q) for q in range(4)] \
  + [("longeval_multiquestion", 1024, 2, 25, 0, None, q) for q in range(4)]


def main():
    c_table = "--c" in sys.argv
    for case in CASES:
        (task, length, sample, n, aux, depth), question = case[:6], (case[6] if len(case) > 6 else 0)
        it = build(task, length, sample, n, aux, depth, question=question)
        full = (it.context + it.question + it.prefix).encode()
        h = fnv1a64(full)
        ctx_len = len(it.context.encode())
        q_len = len(it.question.encode())
        p_len = len(it.prefix.encode())
        spans = it.spans
        if c_table:
            d = "-1" if depth is None else f"{depth:g}"
            gold = ", ".join('"%s"' % g for g in it.gold)
            sp = ", ".join(f"{{{b}, {e}}}" for b, e in spans)
            print(f'    {{"{task}", {length}, {sample}, {n}, {aux}, {d}, 0x{h:016x}ULL, {ctx_len}, {q_len}, {p_len},')
            print(f'     {len(it.gold)}, {{{gold}}}, {len(spans)}, {{{sp}}}, {question}}},')
        else:
            print(task, length, sample, n, aux, depth, question, f"{h:016x}", ctx_len, q_len, p_len, it.gold, spans)


if __name__ == "__main__":
    main()
