/*
 * Special-token splitting (docs/engine.md §4.2) and the encode/decode entry
 * points. The vocabulary is built in vocab.c, the SPM and BPE algorithms are
 * in tok_spm.c and tok_bpe.c. Behaviour follows llama.cpp's llama-vocab.cpp
 * token for token.
 */
#include "text/tokenizer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "text/tok_bpe.h"
#include "text/tok_spm.h"
#include "text/unicode.h"

/* ---------------------------------------------------------------- special tokens (§4.2) */

typedef struct {
    int32_t id; /* -1: raw text */
    size_t off, len;
} tok_fragment;

static int cmp_fragment_pos(const void *a, const void *b) {
    const tok_fragment *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

/*
 * llama.cpp takes the special tokens one at a time, longest text first, and
 * cuts every leftmost non-overlapping occurrence out of the text fragments
 * still raw. Rescanning the whole text once per special token would cost
 * (number of special tokens) x (text length), so the text is first walked
 * once with the trie to find groups: maximal spans covered by overlapping
 * occurrences. An occurrence never overlaps one from another group, so each
 * group is resolved on its own, with llama.cpp's procedure restricted to the
 * group's span and to the tokens that occur in it.
 */
typedef struct {
    size_t begin, end;   /* span of the current group */
    tok_vec ranks;       /* int32: distinct ranks occurring in it */
    uint8_t *rank_seen;  /* by rank */
    uint8_t *taken;      /* by text byte: already cut out as a special token */
} special_groups;

static int take_occurrences(const pkv_tokenizer *tok, const char *text, special_groups *g,
                            int32_t rank, tok_vec *accepted) {
    int32_t id = tok->special[rank];
    gguf_str t = tok->text[id];
    for (size_t pos = g->begin; pos < g->end;) {
        while (pos < g->end && g->taken[pos]) pos++;
        size_t raw_end = pos;
        while (raw_end < g->end && !g->taken[raw_end]) raw_end++;
        for (size_t q = pos; raw_end - q >= t.len;) {
            const char *hit = memmem(text + q, raw_end - q, t.ptr, t.len);
            if (!hit) break;
            size_t at = (size_t)(hit - text);
            memset(g->taken + at, 1, t.len);
            tok_fragment frag = {id, at, t.len};
            if (tok_vec_push(accepted, &frag)) return -1;
            q = at + t.len;
        }
        pos = raw_end;
    }
    return 0;
}

static int resolve_group(const pkv_tokenizer *tok, const char *text, special_groups *g,
                         tok_vec *accepted) {
    int32_t *ranks = g->ranks.data;
    qsort(ranks, g->ranks.n, sizeof *ranks, tok_cmp_i32);
    size_t first = accepted->n;
    for (size_t i = 0; i < g->ranks.n; i++) {
        if (take_occurrences(tok, text, g, ranks[i], accepted)) return -1;
        g->rank_seen[ranks[i]] = 0;
    }
    qsort((tok_fragment *)accepted->data + first, accepted->n - first, sizeof(tok_fragment),
          cmp_fragment_pos);
    g->ranks.n = 0;
    return 0;
}

static bool special_allowed(const pkv_tokenizer *tok, int32_t id, bool parse_special) {
    /* user-defined tokens are split out even without parse_special */
    return parse_special || !(tok->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN));
}

/* Adds an occurrence [p, end) of the token with this rank to the group. */
static int note_occurrence(const pkv_tokenizer *tok, special_groups *g, size_t len, int32_t rank,
                           size_t p, size_t end) {
    if (!g->taken) {
        g->taken = calloc(len, 1);
        g->rank_seen = calloc((size_t)tok->n_special, 1);
        if (!g->taken || !g->rank_seen) return -1;
    }
    if (g->ranks.n == 0) g->begin = p;
    if (end > g->end) g->end = end;
    if (g->rank_seen[rank]) return 0;
    g->rank_seen[rank] = 1;
    return tok_vec_push(&g->ranks, &rank);
}

static int find_special(const pkv_tokenizer *tok, const char *text, size_t len,
                        bool parse_special, tok_vec *accepted) {
    const tok_trie *tr = &tok->trie;
    special_groups g = {0, 0, {0}, NULL, NULL};
    tok_vec_init(&g.ranks, sizeof(int32_t));
    int rc = 0;
    for (size_t p = 0; p < len && rc == 0; p++) {
        if (g.ranks.n && p >= g.end) rc = resolve_group(tok, text, &g, accepted);
        if (rc || !tr->first_byte[(unsigned char)text[p]]) continue;
        uint32_t node = 0;
        for (size_t q = p; q < len && rc == 0; q++) {
            int64_t child = tok_trie_child(tr, node, (unsigned char)text[q]);
            if (child < 0) break;
            node = (uint32_t)child;
            int32_t id = tr->node_token[node];
            if (id >= 0 && special_allowed(tok, id, parse_special))
                rc = note_occurrence(tok, &g, len, tok->special_rank[id], p, q + 1);
        }
    }
    if (rc == 0 && g.ranks.n) rc = resolve_group(tok, text, &g, accepted);
    tok_vec_free(&g.ranks);
    free(g.rank_seen);
    free(g.taken);
    return rc;
}

/* Splits text into raw fragments and special tokens, in text order. */
static int partition(const pkv_tokenizer *tok, const char *text, size_t len, bool parse_special,
                     tok_vec *frags) {
    tok_vec specials;
    tok_vec_init(&specials, sizeof(tok_fragment));
    if (find_special(tok, text, len, parse_special, &specials)) {
        tok_vec_free(&specials);
        return -1;
    }
    size_t pos = 0;
    int rc = 0;
    for (size_t i = 0; i <= specials.n && rc == 0; i++) {
        size_t end = i < specials.n ? TOK_VEC_AT(&specials, tok_fragment, i).off : len;
        if (end > pos) {
            tok_fragment raw = {-1, pos, end - pos};
            rc = tok_vec_push(frags, &raw);
        }
        if (i < specials.n && rc == 0) {
            tok_fragment sp = TOK_VEC_AT(&specials, tok_fragment, i);
            rc = tok_vec_push(frags, &sp);
            pos = sp.off + sp.len;
        }
    }
    tok_vec_free(&specials);
    return rc;
}

/* ---------------------------------------------------------------- encode */

static int encode_fragments(const pkv_tokenizer *tok, const char *text, const tok_vec *frags,
                            tok_out *out, pkv_error *err) {
    bool prev_special = true; /* SPM: the first fragment gets the space prefix */
    for (size_t i = 0; i < frags->n; i++) {
        tok_fragment f = TOK_VEC_AT(frags, tok_fragment, i);
        if (f.id >= 0) {
            tok_emit(out, f.id);
            prev_special = true;
            continue;
        }
        int rc = tok->kind == PKV_TOK_SPM
                     ? tok_spm_encode(tok, text + f.off, f.len,
                                      tok->add_space_prefix && prev_special, out, err)
                     : tok_bpe_encode(tok, text + f.off, f.len, out, err);
        if (rc) return -1;
        prev_special = false;
    }
    return 0;
}

int pkv_tokenizer_encode(const pkv_tokenizer *tok, const char *text, size_t len, bool add_special,
                         bool parse_special, int32_t *out, int max_tokens, pkv_error *err) {
    if (!tok || (!text && len) || max_tokens < 0 || (!out && max_tokens > 0))
        return pkv_fail(err, PKV_ERR_ARG, "tokenize: bad argument");
    tok_out o = {out, max_tokens, 0};
    if (add_special && tok->add_bos) {
        if (tok->bos < 0)
            return pkv_fail(err, PKV_ERR_FORMAT, "tokenize: add_bos set but no BOS token");
        tok_emit(&o, tok->bos);
    }
    tok_vec frags;
    tok_vec_init(&frags, sizeof(tok_fragment));
    int rc = len ? partition(tok, text, len, parse_special, &frags) : 0;
    if (rc) pkv_fail(err, PKV_ERR_NOMEM, "tokenize: out of memory splitting %zu bytes", len);
    else rc = encode_fragments(tok, text, &frags, &o, err);
    tok_vec_free(&frags);
    if (rc) return -1;
    if (add_special && tok->add_eos) {
        if (tok->eos < 0)
            return pkv_fail(err, PKV_ERR_FORMAT, "tokenize: add_eos set but no EOS token");
        tok_emit(&o, tok->eos);
    }
    if (o.n > INT_MAX)
        return pkv_fail(err, PKV_ERR_LIMIT, "tokenize: %lld tokens exceed the int range",
                        (long long)o.n);
    return (int)o.n;
}

/* ---------------------------------------------------------------- decode */

static int copy_piece(const char *s, size_t len, char *buf, int buf_len) {
    if (len > INT_MAX) return -1;
    if (buf && buf_len > 0) memcpy(buf, s, len < (size_t)buf_len ? len : (size_t)buf_len);
    return (int)len;
}

/* "<0xXX>" -> XX; -1 if the text has another form. */
static int byte_token_value(gguf_str s) {
    if (s.len != 6 || memcmp(s.ptr, "<0x", 3) != 0 || s.ptr[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s.ptr[i];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Appends at most cap bytes to buf, always counting the full length. */
typedef struct {
    char *buf;
    size_t cap, n;
} piece_writer;

static void piece_put(piece_writer *w, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++, w->n++)
        if (w->n < w->cap) w->buf[w->n] = s[i];
}

/* SPM: U+2581 stands for a space. */
static void decode_spm_text(gguf_str s, piece_writer *w) {
    for (uint64_t i = 0; i < s.len;) {
        if (i + 3 <= s.len && memcmp(s.ptr + i, "\xe2\x96\x81", 3) == 0) {
            piece_put(w, " ", 1);
            i += 3;
        } else {
            piece_put(w, s.ptr + i, 1);
            i++;
        }
    }
}

/* BPE: every codepoint stands for one byte (GPT-2 byte-level mapping). A
 * codepoint outside the mapping is rendered as llama.cpp does. */
static void decode_bpe_text(gguf_str s, piece_writer *w) {
    for (uint64_t i = 0; i < s.len;) {
        size_t used;
        uint32_t cp = pkv_utf8_decode(s.ptr + i, s.len - i, &used);
        int byte = tok_bpe_cp_to_byte(cp);
        if (byte >= 0) {
            char c = (char)byte;
            piece_put(w, &c, 1);
        } else {
            char utf8[4], hex[16];
            size_t n = pkv_utf8_encode(cp, utf8);
            piece_put(w, "[UNK_BYTE_0x", 12);
            for (size_t k = 0; k < n; k++) {
                snprintf(hex, sizeof hex, "%02x", (unsigned char)utf8[k]);
                piece_put(w, hex, 2);
            }
            piece_put(w, s.ptr, s.len);
            piece_put(w, "]", 1);
        }
        i += used;
    }
}

int pkv_tokenizer_piece(const pkv_tokenizer *tok, int32_t id, bool render_special, char *buf,
                        int buf_len) {
    if (!tok || id < 0 || id >= tok->n_vocab) return -1;
    uint8_t attr = tok->attr[id];
    gguf_str s = tok->text[id];
    if (attr & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL)) {
        if (!render_special) return 0;
        return copy_piece(s.ptr, s.len, buf, buf_len);
    }
    if (attr & TOK_ATTR_USER_DEFINED) return copy_piece(s.ptr, s.len, buf, buf_len);
    if (attr & TOK_ATTR_NORMAL) {
        piece_writer w = {buf, buf && buf_len > 0 ? (size_t)buf_len : 0, 0};
        if (tok->kind == PKV_TOK_SPM) decode_spm_text(s, &w);
        else decode_bpe_text(s, &w);
        return w.n > INT_MAX ? -1 : (int)w.n;
    }
    if (attr & TOK_ATTR_BYTE) {
        int v = byte_token_value(s);
        if (v < 0) return 0;
        char c = (char)v;
        return copy_piece(&c, 1, buf, buf_len);
    }
    return 0; /* unused and undefined tokens render as nothing */
}

/* ---------------------------------------------------------------- accessors */

pkv_tok_kind pkv_tokenizer_kind(const pkv_tokenizer *tok) { return tok->kind; }
int pkv_tokenizer_n_vocab(const pkv_tokenizer *tok) { return tok->n_vocab; }

const char *pkv_tokenizer_text(const pkv_tokenizer *tok, int32_t id, size_t *len) {
    if (!tok || id < 0 || id >= tok->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = tok->text[id].len;
    return tok->text[id].ptr;
}

int pkv_tokenizer_type(const pkv_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_vocab) return 0;
    uint8_t a = tok->attr[id];
    if (a & TOK_ATTR_CONTROL) return PKV_TOKTYPE_CONTROL;
    if (a & TOK_ATTR_USER_DEFINED) return PKV_TOKTYPE_USER_DEFINED;
    if (a & TOK_ATTR_UNKNOWN) return PKV_TOKTYPE_UNKNOWN;
    if (a & TOK_ATTR_BYTE) return PKV_TOKTYPE_BYTE;
    if (a & TOK_ATTR_UNUSED) return PKV_TOKTYPE_UNUSED;
    if (a & TOK_ATTR_NORMAL) return PKV_TOKTYPE_NORMAL;
    return 0;
}

int32_t pkv_tokenizer_find(const pkv_tokenizer *tok, const char *text) {
    return tok && text ? tok_find(tok, text, strlen(text)) : -1;
}

int32_t pkv_tokenizer_bos(const pkv_tokenizer *tok) { return tok->bos; }
int32_t pkv_tokenizer_eos(const pkv_tokenizer *tok) { return tok->eos; }
bool pkv_tokenizer_add_bos(const pkv_tokenizer *tok) { return tok->add_bos; }

bool pkv_tokenizer_is_eog(const pkv_tokenizer *tok, int32_t id) {
    int32_t lo = 0, hi = tok->n_eog;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (tok->eog[mid] == id) return true;
        if (tok->eog[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return false;
}

