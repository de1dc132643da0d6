/*
 * Byte-level BPE ("gpt2", docs/engine.md §4.4): pre-tokenizer scanners and
 * rank-ordered merging (the GPT-2 byte alphabet is in vocab.c), as llama.cpp's
 * llm_tokenizer_bpe_session and unicode_regex_split do it.
 *
 * The pre-tokenizer regexes are matched by hand-written scanners that follow
 * the regex semantics alternative by alternative (first alternative that
 * matches wins, quantifiers greedy, backtracking worked out per case in the
 * comments). Categories come from unicode.h.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "text/tok_bpe.h"
#include "text/unicode.h"

/* ---------------------------------------------------------------- codepoints */

typedef struct {
    uint32_t *cp;
    uint16_t *fl;
    size_t *off; /* byte offset of each codepoint; off[n] = length */
    size_t n;
} cp_text;

static void cp_text_free(cp_text *t) {
    free(t->cp);
    free(t->fl);
    free(t->off);
}

static int cp_text_decode(const char *s, size_t len, cp_text *t) {
    t->cp = malloc((len + 1) * sizeof *t->cp);
    t->fl = malloc((len + 1) * sizeof *t->fl);
    t->off = malloc((len + 1) * sizeof *t->off);
    t->n = 0;
    if (!t->cp || !t->fl || !t->off) return -1;
    for (size_t i = 0; i < len;) {
        size_t used;
        uint32_t cp = pkv_utf8_decode(s + i, len - i, &used);
        t->cp[t->n] = cp;
        t->fl[t->n] = pkv_unicode_flags(cp);
        t->off[t->n] = i;
        t->n++;
        i += used;
    }
    t->off[t->n] = len;
    return 0;
}

/* Flags at pos, 0 past the end of the piece being split. */
static uint16_t fl_at(const cp_text *t, size_t pos, size_t end) {
    return pos < end ? t->fl[pos] : 0;
}

static bool is_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

/* [^\s\p{L}\p{N}]: any codepoint of the piece that is none of those */
static bool is_other(uint16_t fl) {
    return fl && !(fl & (PKV_UFLAG_WHITESPACE | PKV_UFLAG_LETTER | PKV_UFLAG_NUMBER));
}

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d at pos (any_case: the [sS]... form); length or 0. */
static size_t contraction_len(const cp_text *t, size_t pos, size_t end, bool any_case) {
    if (t->cp[pos] != '\'' || pos + 1 >= end) return 0;
    uint32_t a = t->cp[pos + 1], b = pos + 2 < end ? t->cp[pos + 2] : 0;
    if (any_case) {
        a = ascii_lower(a);
        b = ascii_lower(b);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

static int emit_end(tok_vec *ends, size_t end) { return tok_vec_push(ends, &end); }

/*
 * Whitespace alternatives shared by the llama3 and gpt-2 regexes, at a
 * position where nothing earlier matched:
 *   \s*[\r\n]+   (llama3 only): greedy \s* backs off to the last \r or \n of
 *                the whitespace run, so the match ends just after it;
 *   \s+(?!\S)    a run followed by a non-space backs off one codepoint (the
 *                last space then leads the next word); at the piece end the
 *                whole run matches;
 *   \s+          (llama3 only) a single space before a non-space. In gpt-2
 *                that space matches nothing and is left as a one-codepoint
 *                gap, which is the same piece.
 * A codepoint no alternative matches is a piece of its own.
 */
static size_t whitespace_end(const cp_text *t, size_t pos, size_t end, bool newline_rule) {
    size_t n_ws = 0, after_newline = 0;
    while (fl_at(t, pos + n_ws, end) & PKV_UFLAG_WHITESPACE) {
        if (is_newline(t->cp[pos + n_ws])) after_newline = pos + n_ws + 1;
        n_ws++;
    }
    if (newline_rule && after_newline) return after_newline;
    if (n_ws > 1 && pos + n_ws < end) return pos + n_ws - 1;
    if (n_ws > 0) return pos + n_ws;
    return pos + 1;
}

/*
 * llama3 / qwen2:
 *   (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
 *   |[^\r\n\p{L}\p{N}]?\p{L}+ |\p{N}{1,3} (qwen2: \p{N})
 *   | ?[^\s\p{L}\p{N}]+[\r\n]* |\s*[\r\n]+ |\s+(?!\S) |\s+
 */
static int split_llama3(const cp_text *t, size_t begin, size_t end, size_t max_digits,
                        tok_vec *ends) {
    for (size_t pos = begin; pos < end;) {
        uint32_t cp = t->cp[pos];
        uint16_t fl = t->fl[pos];
        size_t n = contraction_len(t, pos, end, true);
        if (n) {
            pos += n;
        } else if ((fl & PKV_UFLAG_LETTER) ||
                   (!is_newline(cp) && !(fl & PKV_UFLAG_NUMBER) &&
                    (fl_at(t, pos + 1, end) & PKV_UFLAG_LETTER))) {
            /* a letter run, or one leading non-letter non-digit then letters */
            pos++;
            while (fl_at(t, pos, end) & PKV_UFLAG_LETTER) pos++;
        } else if (fl & PKV_UFLAG_NUMBER) {
            for (n = 0; n < max_digits && (fl_at(t, pos, end) & PKV_UFLAG_NUMBER); n++) pos++;
        } else if (is_other(fl_at(t, pos + (cp == ' '), end))) {
            /* " ?" takes the space only when the run follows it */
            pos += cp == ' ';
            while (is_other(fl_at(t, pos, end))) pos++;
            while (pos < end && is_newline(t->cp[pos])) pos++;
        } else {
            pos = whitespace_end(t, pos, end, true);
        }
        if (emit_end(ends, pos)) return -1;
    }
    return 0;
}

/* gpt-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static int split_gpt2(const cp_text *t, size_t begin, size_t end, tok_vec *ends) {
    for (size_t pos = begin; pos < end;) {
        size_t n = contraction_len(t, pos, end, false);
        size_t start = pos + (t->cp[pos] == ' ');
        uint16_t fl = fl_at(t, start, end);
        if (n) {
            pos += n;
        } else if (fl & PKV_UFLAG_LETTER) {
            for (pos = start; fl_at(t, pos, end) & PKV_UFLAG_LETTER;) pos++;
        } else if (fl & PKV_UFLAG_NUMBER) {
            for (pos = start; fl_at(t, pos, end) & PKV_UFLAG_NUMBER;) pos++;
        } else if (is_other(fl)) {
            for (pos = start; is_other(fl_at(t, pos, end));) pos++;
        } else {
            pos = whitespace_end(t, pos, end, false);
        }
        if (emit_end(ends, pos)) return -1;
    }
    return 0;
}

/* A regex that is one class repeated ([...]+) splits a piece into alternating
 * matched runs and unmatched gaps: a boundary wherever membership changes. */
static int split_class_runs(const cp_text *t, size_t begin, size_t end,
                            bool (*member)(uint32_t cp, uint16_t fl), tok_vec *ends) {
    for (size_t pos = begin; pos < end;) {
        bool in = member(t->cp[pos], t->fl[pos]);
        while (pos < end && member(t->cp[pos], t->fl[pos]) == in) pos++;
        if (emit_end(ends, pos)) return -1;
    }
    return 0;
}

/* [\p{P}\$\+<=>\^~\|]+ */
static bool is_punct_run_member(uint32_t cp, uint16_t fl) {
    return (fl & PKV_UFLAG_PUNCT) || (cp < 128 && cp && strchr("$+<=>^~|", (int)cp));
}

/* \p{N}+ */
static bool is_number(uint32_t cp, uint16_t fl) {
    (void)cp;
    return (fl & PKV_UFLAG_NUMBER) != 0;
}

/* [0-9][0-9][0-9]: matches taken left to right, the rest are gaps */
static int split_ascii_triples(const cp_text *t, size_t begin, size_t end, tok_vec *ends) {
    size_t gap_start = begin;
    for (size_t pos = begin; pos < end;) {
        bool triple = pos + 3 <= end;
        for (size_t k = 0; triple && k < 3; k++)
            triple = t->cp[pos + k] >= '0' && t->cp[pos + k] <= '9';
        if (!triple) {
            pos++;
            continue;
        }
        if (pos > gap_start && emit_end(ends, pos)) return -1;
        pos += 3;
        if (emit_end(ends, pos)) return -1;
        gap_start = pos;
    }
    if (end > gap_start && emit_end(ends, end)) return -1;
    return 0;
}

typedef enum {
    STAGE_LLAMA3,
    STAGE_QWEN2,
    STAGE_GPT2,
    STAGE_PUNCT,
    STAGE_DIGITS,
    STAGE_TRIPLES
} stage;

static int run_stage(stage s, const cp_text *t, size_t begin, size_t end, tok_vec *ends) {
    switch (s) {
    case STAGE_LLAMA3: return split_llama3(t, begin, end, 3, ends);
    case STAGE_QWEN2: return split_llama3(t, begin, end, 1, ends);
    case STAGE_GPT2: return split_gpt2(t, begin, end, ends);
    case STAGE_PUNCT: return split_class_runs(t, begin, end, is_punct_run_member, ends);
    case STAGE_DIGITS: return split_class_runs(t, begin, end, is_number, ends);
    case STAGE_TRIPLES: return split_ascii_triples(t, begin, end, ends);
    }
    return -1;
}

/* Each regex further splits the pieces of the one before (§4.4); ends holds
 * piece ends as codepoint indices. */
static int split_codepoints(tok_pre pre, const cp_text *t, tok_vec *ends) {
    static const stage k_default[] = {STAGE_PUNCT, STAGE_GPT2, STAGE_DIGITS, STAGE_TRIPLES};
    stage single;
    const stage *stages = k_default;
    size_t n_stages = 4;
    if (pre != TOK_PRE_DEFAULT) {
        single = pre == TOK_PRE_LLAMA3  ? STAGE_LLAMA3
                 : pre == TOK_PRE_QWEN2 ? STAGE_QWEN2
                                        : STAGE_GPT2;
        stages = &single;
        n_stages = 1;
    }
    ends->n = 0;
    if (t->n == 0) return 0;
    if (emit_end(ends, t->n)) return -1;
    tok_vec next;
    tok_vec_init(&next, sizeof(size_t));
    int rc = 0;
    for (size_t s = 0; s < n_stages && rc == 0; s++) {
        next.n = 0;
        size_t begin = 0;
        for (size_t i = 0; i < ends->n && rc == 0; i++) {
            size_t end = TOK_VEC_AT(ends, size_t, i);
            rc = run_stage(stages[s], t, begin, end, &next);
            begin = end;
        }
        tok_vec tmp = *ends;
        *ends = next;
        next = tmp;
    }
    tok_vec_free(&next);
    return rc;
}

int tok_pretokenize(tok_pre pre, const char *text, size_t len, tok_vec *ends, pkv_error *err) {
    cp_text t;
    int rc = cp_text_decode(text, len, &t);
    if (rc == 0) rc = split_codepoints(pre, &t, ends);
    for (size_t i = 0; rc == 0 && i < ends->n; i++)
        TOK_VEC_AT(ends, size_t, i) = t.off[TOK_VEC_AT(ends, size_t, i)];
    cp_text_free(&t);
    if (rc) return pkv_fail(err, PKV_ERR_NOMEM, "pre-tokenizer: out of memory (%zu bytes)", len);
    return 0;
}

/* ---------------------------------------------------------------- merging */

typedef struct {
    int32_t prev, next;
    uint32_t start, n; /* n == 0: merged into its left neighbour */
} bpe_symbol;

typedef struct {
    int32_t rank;
    int32_t left, right;
    uint32_t size;
} bpe_bigram;

/* Lowest rank first; equal ranks: leftmost first. */
static bool bigram_before(const void *pa, const void *pb) {
    const bpe_bigram *a = pa, *b = pb;
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

typedef struct {
    tok_vec word;    /* char: the byte-encoded piece */
    tok_vec symbols; /* bpe_symbol */
    tok_vec heap;    /* bpe_bigram */
} bpe_scratch;

static int try_bigram(const pkv_tokenizer *tok, bpe_scratch *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const char *w = s->word.data;
    bpe_symbol *sym = s->symbols.data;
    int32_t rank = tok_bpe_rank(tok, w + sym[left].start, sym[left].n, w + sym[right].start,
                                sym[right].n);
    if (rank < 0) return 0;
    bpe_bigram b = {rank, left, right, sym[left].n + sym[right].n};
    return tok_heap_push(&s->heap, &b, bigram_before);
}

/* A final symbol (byte-encoded text): its token, or one token per byte
 * character. llama.cpp looks up each byte of the encoded text as a one-byte
 * token instead and silently drops the bytes that have none (every character
 * above U+007F among them); here each character is looked up whole, and an
 * input byte whose character is not a token is an error naming it. With a
 * complete byte alphabet (every real byte-level vocabulary) both agree:
 * every merge result is a token. */
static int emit_symbol(const pkv_tokenizer *tok, const char *text, size_t n, tok_out *out, pkv_error *err) {
    int32_t id = tok_find(tok, text, n);
    if (id >= 0) {
        tok_emit(out, id);
        return 0;
    }
    for (size_t i = 0; i < n;) {
        size_t used;
        uint32_t cp = pkv_utf8_decode(text + i, n - i, &used);
        id = tok_find(tok, text + i, used);
        if (id < 0) {
            int byte = tok_bpe_cp_to_byte(cp);
            return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                            "tokenize: byte 0x%02X has no token in this vocabulary (its byte-level character "
                            "U+%04X is not a token)",
                            byte < 0 ? 0 : byte, cp);
        }
        tok_emit(out, id);
        i += used;
    }
    return 0;
}

static int merge_word(const pkv_tokenizer *tok, bpe_scratch *s, tok_out *out, pkv_error *err) {
    const char *w = s->word.data;
    size_t len = s->word.n;
    if (tok->ignore_merges) {
        int32_t id = tok_find(tok, w, len);
        if (id >= 0) {
            tok_emit(out, id);
            return 0;
        }
    }
    s->symbols.n = 0;
    s->heap.n = 0;
    for (size_t off = 0; off < len;) {
        size_t n = pkv_utf8_len((unsigned char)w[off]);
        if (n > len - off) n = len - off;
        int32_t i = (int32_t)s->symbols.n;
        bpe_symbol sym = {i - 1, off + n == len ? -1 : i + 1, (uint32_t)off, (uint32_t)n};
        if (tok_vec_push(&s->symbols, &sym)) return -1;
        off += n;
    }
    for (int32_t i = 1; i < (int32_t)s->symbols.n; i++)
        if (try_bigram(tok, s, i - 1, i)) return -1;
    bpe_symbol *sym = s->symbols.data;
    while (s->heap.n) {
        bpe_bigram b;
        tok_heap_pop(&s->heap, &b, bigram_before);
        bpe_symbol *l = &sym[b.left], *r = &sym[b.right];
        /* stale: a side was merged away or grew since the pair was queued */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (try_bigram(tok, s, l->prev, b.left) || try_bigram(tok, s, b.left, l->next)) return -1;
    }
    for (size_t i = 0; i < s->symbols.n; i++)
        if (sym[i].n && emit_symbol(tok, w + sym[i].start, sym[i].n, out, err)) return 1;
    return 0;
}

/* Builds the byte-encoded form of codepoints [b, e): each codepoint is
 * re-encoded as UTF-8 (an invalid input byte became U+FFFD), then each byte
 * is replaced by the UTF-8 of its GPT-2 codepoint. */
static int encode_piece(const cp_text *t, size_t b, size_t e, tok_vec *word) {
    word->n = 0;
    for (size_t i = b; i < e; i++) {
        char utf8[4];
        size_t n = pkv_utf8_encode(t->cp[i], utf8);
        for (size_t k = 0; k < n; k++) {
            char mapped[4];
            size_t m = pkv_utf8_encode(tok_bpe_byte_to_cp((uint8_t)utf8[k]), mapped);
            if (tok_vec_reserve(word, word->n + m)) return -1;
            memcpy((char *)word->data + word->n, mapped, m);
            word->n += m;
        }
    }
    return 0;
}

int tok_bpe_encode(const pkv_tokenizer *tok, const char *text, size_t len, tok_out *out,
                   pkv_error *err) {
    /* symbol offsets are 32-bit; an input byte becomes at most 6 encoded bytes
     * (an invalid one is U+FFFD: 3 UTF-8 bytes, each a 2-byte character) */
    if (len > UINT32_MAX / 8)
        return pkv_fail(err, PKV_ERR_LIMIT, "BPE: fragment of %zu bytes is too long", len);
    cp_text t;
    tok_vec ends;
    bpe_scratch s;
    tok_vec_init(&ends, sizeof(size_t));
    tok_vec_init(&s.word, 1);
    tok_vec_init(&s.symbols, sizeof(bpe_symbol));
    tok_vec_init(&s.heap, sizeof(bpe_bigram));
    int rc = cp_text_decode(text, len, &t);
    if (rc == 0) rc = split_codepoints(tok->pre, &t, &ends);
    size_t begin = 0;
    for (size_t i = 0; rc == 0 && i < ends.n; i++) {
        size_t end = TOK_VEC_AT(&ends, size_t, i);
        rc = encode_piece(&t, begin, end, &s.word);
        if (rc == 0) rc = merge_word(tok, &s, out, err); /* 1: a byte without a token (err set) */
        begin = end;
    }
    cp_text_free(&t);
    tok_vec_free(&ends);
    tok_vec_free(&s.word);
    tok_vec_free(&s.symbols);
    tok_vec_free(&s.heap);
    if (rc > 0) return -1;
    if (rc) return pkv_fail(err, PKV_ERR_NOMEM, "BPE: out of memory encoding %zu bytes", len);
    return 0;
}
