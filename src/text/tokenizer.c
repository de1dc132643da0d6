/*
 * Vocabulary loading (engine-notes.md §4.1), special-token splitting (§4.2)
 * and the encode/decode entry points. The SPM and BPE algorithms themselves
 * are in tok_spm.c and tok_bpe.c. Behaviour follows llama.cpp's
 * llama-vocab.cpp token for token; where it depends on hash-map iteration
 * order there, the lowest id is taken here (noted at each place). Not
 * replicated: llama.cpp's attribute tweaks keyed on model names (lstrip /
 * rstrip for jina, phi-3, modern-bert) and the gpt-oss / Gemma 4 specific
 * adjustments of the end-of-generation set.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "text/vocab.h"
#include "text/unicode.h"

enum { TOK_MAX_VOCAB = 1 << 24 }; /* far above any real vocabulary */

/* ---------------------------------------------------------------- vectors */

void tok_vec_init(tok_vec *v, size_t elem) {
    v->data = NULL;
    v->n = v->cap = 0;
    v->elem = elem;
}

void tok_vec_free(tok_vec *v) {
    free(v->data);
    v->data = NULL;
    v->n = v->cap = 0;
}

int tok_vec_reserve(tok_vec *v, size_t n) {
    if (n <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 16;
    while (cap < n) {
        if (cap > SIZE_MAX / 2 / v->elem) return -1;
        cap *= 2;
    }
    void *p = realloc(v->data, cap * v->elem);
    if (!p) return -1;
    v->data = p;
    v->cap = cap;
    return 0;
}

int tok_vec_push(tok_vec *v, const void *elem) {
    if (v->n == v->cap && tok_vec_reserve(v, v->n + 1)) return -1;
    memcpy((char *)v->data + v->n * v->elem, elem, v->elem);
    v->n++;
    return 0;
}

/* ---------------------------------------------------------------- heap */

static void swap_elems(char *a, char *b, size_t n) {
    char tmp[64];
    while (n) {
        size_t k = n < sizeof tmp ? n : sizeof tmp;
        memcpy(tmp, a, k);
        memcpy(a, b, k);
        memcpy(b, tmp, k);
        a += k;
        b += k;
        n -= k;
    }
}

int tok_heap_push(tok_vec *h, const void *elem, tok_before_fn before) {
    if (tok_vec_push(h, elem)) return -1;
    char *d = h->data;
    size_t e = h->elem;
    for (size_t i = h->n - 1; i > 0;) {
        size_t parent = (i - 1) / 2;
        if (!before(d + i * e, d + parent * e)) break;
        swap_elems(d + i * e, d + parent * e, e);
        i = parent;
    }
    return 0;
}

void tok_heap_pop(tok_vec *h, void *out, tok_before_fn before) {
    char *d = h->data;
    size_t e = h->elem;
    memcpy(out, d, e);
    h->n--;
    memcpy(d, d + h->n * e, e);
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        if (l < h->n && before(d + l * e, d + best * e)) best = l;
        if (r < h->n && before(d + r * e, d + best * e)) best = r;
        if (best == i) break;
        swap_elems(d + i * e, d + best * e, e);
        i = best;
    }
}

/* ---------------------------------------------------------------- hashing */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

uint64_t tok_hash(const char *s, size_t len, uint64_t seed) {
    uint64_t h = seed ^ (len * 0x9e3779b97f4a7c15ull);
    while (len >= 8) {
        uint64_t k;
        memcpy(&k, s, 8);
        h = (h ^ mix64(k)) * 0x100000001b3ull;
        s += 8;
        len -= 8;
    }
    uint64_t tail = 0;
    for (size_t i = 0; i < len; i++) tail |= (uint64_t)(unsigned char)s[i] << (8 * i);
    return mix64(h ^ tail ^ 0x27d4eb2f165667c5ull);
}

static int table_init(tok_table *t, uint64_t n_items) {
    uint64_t cap = 16;
    while (cap < 2 * n_items) cap *= 2;
    t->slots = calloc(cap, sizeof *t->slots);
    t->mask = cap - 1;
    return t->slots ? 0 : -1;
}

static bool str_eq(gguf_str a, const char *s, size_t len) {
    return a.len == len && memcmp(a.ptr, s, len) == 0;
}

int32_t tok_find(const pkv_tokenizer *tok, const char *s, size_t len) {
    const tok_table *t = &tok->by_text;
    for (uint64_t h = tok_hash(s, len, 0) & t->mask;; h = (h + 1) & t->mask) {
        uint32_t v = t->slots[h];
        if (!v) return -1;
        if (str_eq(tok->text[v - 1], s, len)) return (int32_t)(v - 1);
    }
}

/* Later ids replace earlier ones with the same text (llama.cpp assigns
 * token_to_id[text] = id in id order). */
static void text_table_insert(pkv_tokenizer *tok, int32_t id) {
    tok_table *t = &tok->by_text;
    gguf_str s = tok->text[id];
    for (uint64_t h = tok_hash(s.ptr, s.len, 0) & t->mask;; h = (h + 1) & t->mask) {
        uint32_t v = t->slots[h];
        if (!v || str_eq(tok->text[v - 1], s.ptr, s.len)) {
            t->slots[h] = (uint32_t)id + 1;
            return;
        }
    }
}

/* ---------------------------------------------------------------- trie */

static void trie_free(tok_trie *tr) {
    free(tr->node_token);
    free(tr->edge_key);
    free(tr->edge_child);
    memset(tr, 0, sizeof *tr);
}

static int64_t trie_child(const tok_trie *tr, uint32_t node, unsigned char byte) {
    uint64_t key = ((uint64_t)node << 8 | byte) + 1;
    for (uint64_t h = mix64(key) & tr->edge_mask;; h = (h + 1) & tr->edge_mask) {
        if (tr->edge_key[h] == key) return tr->edge_child[h];
        if (!tr->edge_key[h]) return -1;
    }
}

static uint32_t trie_add_child(tok_trie *tr, uint32_t node, unsigned char byte) {
    uint64_t key = ((uint64_t)node << 8 | byte) + 1;
    uint64_t h = mix64(key) & tr->edge_mask;
    while (tr->edge_key[h] && tr->edge_key[h] != key) h = (h + 1) & tr->edge_mask;
    if (!tr->edge_key[h]) {
        tr->edge_key[h] = key;
        tr->edge_child[h] = tr->n_nodes;
        tr->node_token[tr->n_nodes++] = -1;
    }
    return tr->edge_child[h];
}

static int trie_build(pkv_tokenizer *tok) {
    tok_trie *tr = &tok->trie;
    uint64_t max_nodes = 1;
    for (int32_t i = 0; i < tok->n_special; i++) max_nodes += tok->text[tok->special[i]].len;
    uint64_t cap = 16;
    while (cap < 2 * max_nodes) cap *= 2;
    tr->node_token = malloc(max_nodes * sizeof *tr->node_token);
    tr->edge_key = calloc(cap, sizeof *tr->edge_key);
    tr->edge_child = malloc(cap * sizeof *tr->edge_child);
    if (!tr->node_token || !tr->edge_key || !tr->edge_child) return -1;
    tr->edge_mask = cap - 1;
    tr->n_nodes = 1;
    tr->node_token[0] = -1;
    for (int32_t i = 0; i < tok->n_special; i++) {
        gguf_str s = tok->text[tok->special[i]];
        uint32_t node = 0;
        for (uint64_t j = 0; j < s.len; j++)
            node = trie_add_child(tr, node, (unsigned char)s.ptr[j]);
        tr->node_token[node] = tok->special[i];
        tr->first_byte[(unsigned char)s.ptr[0]] = true;
    }
    return 0;
}

/* ---------------------------------------------------------------- special tokens (§4.2) */

typedef struct {
    int32_t id; /* -1: raw text */
    size_t off, len;
} tok_fragment;

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

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
    qsort(ranks, g->ranks.n, sizeof *ranks, cmp_i32);
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
            int64_t child = trie_child(tr, node, (unsigned char)text[q]);
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

void pkv_tokenizer_free(pkv_tokenizer *tok) {
    if (!tok) return;
    free(tok->text);
    free(tok->score);
    free(tok->attr);
    free(tok->by_text.slots);
    free(tok->merge_left);
    free(tok->merge_right);
    free(tok->merge_by_pair.slots);
    free(tok->special);
    free(tok->special_rank);
    trie_free(&tok->trie);
    free(tok->eog);
    free(tok->arena);
    free(tok);
}

/* ---------------------------------------------------------------- building */

void tok_vocab_desc_init(tok_vocab_desc *desc) {
    memset(desc, 0, sizeof *desc);
    desc->bos = desc->eos = desc->unk = desc->eot = desc->eom = desc->pad = TOK_ID_ABSENT;
    desc->add_bos = desc->add_eos = desc->add_space_prefix = -1;
}

static uint8_t attr_from_type(int32_t type) {
    switch (type) {
    case PKV_TOKTYPE_NORMAL: return TOK_ATTR_NORMAL;
    case PKV_TOKTYPE_UNKNOWN: return TOK_ATTR_UNKNOWN;
    case PKV_TOKTYPE_CONTROL: return TOK_ATTR_CONTROL;
    case PKV_TOKTYPE_USER_DEFINED: return TOK_ATTR_USER_DEFINED;
    case PKV_TOKTYPE_UNUSED: return TOK_ATTR_UNUSED;
    case PKV_TOKTYPE_BYTE: return TOK_ATTR_BYTE;
    default: return TOK_ATTR_UNDEFINED;
    }
}

/* Token texts; an empty one becomes "[EMPTY_<id>]" as in llama.cpp. */
static int build_texts(pkv_tokenizer *tok, const tok_vocab_desc *d) {
    size_t n = (size_t)d->n_vocab, arena_size = 0;
    for (size_t i = 0; i < n; i++)
        if (d->tokens[i].len == 0) arena_size += 24;
    tok->text = malloc(n * sizeof *tok->text);
    tok->score = malloc(n * sizeof *tok->score);
    tok->attr = malloc(n);
    if (arena_size) tok->arena = malloc(arena_size);
    if (!tok->text || !tok->score || !tok->attr || (arena_size && !tok->arena)) return -1;
    char *a = tok->arena;
    for (size_t i = 0; i < n; i++) {
        tok->text[i] = d->tokens[i];
        if (d->tokens[i].len == 0) {
            int w = snprintf(a, 24, "[EMPTY_%zu]", i);
            tok->text[i] = (gguf_str){a, (uint64_t)w};
            a += w;
        }
        tok->score[i] = d->scores ? d->scores[i] : 0.0f;
        tok->attr[i] = d->types ? attr_from_type(d->types[i]) : TOK_ATTR_NORMAL;
    }
    if (table_init(&tok->by_text, n)) return -1;
    for (size_t i = 0; i < n; i++) text_table_insert(tok, (int32_t)i);
    return 0;
}

/* ---- BPE merges: "left right", split at the first space after byte 0 */

static int32_t merge_find(const pkv_tokenizer *tok, const char *l, size_t ll, const char *r,
                          size_t rl, uint64_t h) {
    const tok_table *t = &tok->merge_by_pair;
    for (h &= t->mask;; h = (h + 1) & t->mask) {
        uint32_t v = t->slots[h];
        if (!v) return -1;
        if (str_eq(tok->merge_left[v - 1], l, ll) && str_eq(tok->merge_right[v - 1], r, rl))
            return (int32_t)(v - 1);
    }
}

static uint64_t pair_hash(const char *l, size_t ll, const char *r, size_t rl) {
    return tok_hash(r, rl, tok_hash(l, ll, 0x5bd1e995u));
}

int32_t tok_bpe_rank(const pkv_tokenizer *tok, const char *l, size_t ll, const char *r, size_t rl) {
    if (!tok->n_merges) return -1;
    return merge_find(tok, l, ll, r, rl, pair_hash(l, ll, r, rl));
}

static int build_merges(pkv_tokenizer *tok, const tok_vocab_desc *d) {
    size_t n = (size_t)d->n_merges;
    tok->merge_left = malloc((n ? n : 1) * sizeof(gguf_str));
    tok->merge_right = malloc((n ? n : 1) * sizeof(gguf_str));
    if (!tok->merge_left || !tok->merge_right || table_init(&tok->merge_by_pair, n)) return -1;
    tok->n_merges = d->n_merges;
    for (size_t i = 0; i < n; i++) {
        gguf_str m = d->merges[i];
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        /* no separator: llama.cpp stores an empty pair that never matches */
        gguf_str l = {m.ptr, sp ? (uint64_t)(sp - m.ptr) : 0};
        gguf_str r = {sp ? sp + 1 : m.ptr, sp ? m.len - l.len - 1 : 0};
        tok->merge_left[i] = l;
        tok->merge_right[i] = r;
        if (!sp) continue;
        uint64_t h = pair_hash(l.ptr, l.len, r.ptr, r.len);
        if (merge_find(tok, l.ptr, l.len, r.ptr, r.len, h) >= 0) continue; /* first rank wins */
        tok_table *t = &tok->merge_by_pair;
        for (h &= t->mask; t->slots[h]; h = (h + 1) & t->mask) {}
        t->slots[h] = (uint32_t)i + 1;
    }
    return 0;
}

/* ---- special ids, defaults and text-based detection (§4.1) */

/* The key's id (tok_build has checked it lies in the vocabulary), or the
 * default when the key is absent; a default outside the vocabulary is
 * disabled. */
static int32_t id_or_default(int64_t key_value, int32_t def, int32_t n_vocab) {
    if (def >= n_vocab) def = -1;
    return key_value == TOK_ID_ABSENT ? def : (int32_t)key_value;
}

/* A special-token id in the file must name a token: one outside the
 * vocabulary is refused (not replaced by a default, as llama.cpp does with a
 * warning), so a model never ends or pads on a token other than the one its
 * file says. */
static int check_special_ids(const tok_vocab_desc *d, pkv_error *err) {
    const struct {
        int64_t id;
        const char *key;
    } ids[] = {
        {d->bos, "tokenizer.ggml.bos_token_id"},     {d->eos, "tokenizer.ggml.eos_token_id"},
        {d->unk, "tokenizer.ggml.unknown_token_id"}, {d->eot, "tokenizer.ggml.eot_token_id"},
        {d->eom, "tokenizer.ggml.eom_token_id"},     {d->pad, "tokenizer.ggml.padding_token_id"},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].id != TOK_ID_ABSENT && (ids[i].id < 0 || ids[i].id >= d->n_vocab))
            return pkv_fail(err, PKV_ERR_FORMAT, "%s = %lld is outside the vocabulary [0, %d)", ids[i].key,
                            (long long)ids[i].id, d->n_vocab);
    return 0;
}

/* Lowest id among the tokens with one of these texts, or -1. */
static int32_t find_any(const pkv_tokenizer *tok, const char *const *texts, size_t n) {
    int32_t best = -1;
    for (size_t i = 0; i < n; i++) {
        int32_t id = tok_find(tok, texts[i], strlen(texts[i]));
        if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    return best;
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Texts llama.cpp recognises (DeepSeek's use U+FF5C and U+2581). */
#define FW_BAR "\xef\xbd\x9c"
#define SP_MARK "\xe2\x96\x81"

static const char *const k_eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<" FW_BAR "end" SP_MARK "of" SP_MARK "sentence" FW_BAR ">",
    "<end_of_utterance>"};
static const char *const k_eom_texts[] = {"<|eom_id|>"};
static const char *const k_fim_pre_texts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<" FW_BAR "fim" SP_MARK "begin" FW_BAR ">",
    "<PRE>", SP_MARK "<PRE>", "<|code_prefix|>", "<|prefix|>"};
static const char *const k_fim_suf_texts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<" FW_BAR "fim" SP_MARK "hole" FW_BAR ">",
    "<SUF>", SP_MARK "<SUF>", "<|code_suffix|>", "<|suffix|>"};
static const char *const k_fim_mid_texts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<" FW_BAR "fim" SP_MARK "end" FW_BAR ">",
    "<MID>", SP_MARK "<MID>", "<|code_middle|>", "<|middle|>"};
static const char *const k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                              "[PAD]"};
static const char *const k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                              "<REPO>", "<reponame>"};
static const char *const k_fim_sep_texts[] = {"<|file_sep|>"};
/* Tokens that end generation, recognised by text (llama.cpp's list). */
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<" FW_BAR "end" SP_MARK "of" SP_MARK "sentence" FW_BAR ">", "[e~["};

/* A token detected by text becomes a control token (llama.cpp overrides the
 * type so that it is split out and rendered as special). */
static int32_t detect_by_text(pkv_tokenizer *tok, int32_t current, const char *const *texts,
                              size_t n) {
    if (current >= 0) return current;
    int32_t id = find_any(tok, texts, n);
    if (id >= 0) tok->attr[id] |= TOK_ATTR_CONTROL;
    return id;
}

static int build_eog(pkv_tokenizer *tok, int32_t fim_pad, int32_t fim_rep, int32_t fim_sep) {
    size_t cap = COUNT(k_eog_texts) + 6;
    tok->eog = malloc(cap * sizeof *tok->eog);
    if (!tok->eog) return -1;
    int32_t n = 0;
    int32_t fixed[] = {fim_pad, fim_rep, fim_sep, tok->eos, tok->eot, tok->eom};
    for (size_t i = 0; i < COUNT(fixed); i++)
        if (fixed[i] >= 0) tok->eog[n++] = fixed[i];
    for (size_t i = 0; i < COUNT(k_eog_texts); i++) {
        int32_t id = tok_find(tok, k_eog_texts[i], strlen(k_eog_texts[i]));
        if (id < 0) continue;
        tok->attr[id] |= TOK_ATTR_CONTROL;
        tok->eog[n++] = id;
    }
    qsort(tok->eog, (size_t)n, sizeof *tok->eog, cmp_i32);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (m == 0 || tok->eog[m - 1] != tok->eog[i]) tok->eog[m++] = tok->eog[i];
    tok->n_eog = m;
    return 0;
}

static void detect_special_ids(pkv_tokenizer *tok, const tok_vocab_desc *d, int32_t *fim_pad,
                               int32_t *fim_rep, int32_t *fim_sep) {
    int32_t n = tok->n_vocab;
    tok->eot = id_or_default(d->eot, -1, n);
    tok->eom = id_or_default(d->eom, -1, n);
    tok->pad = id_or_default(d->pad, -1, n);
    /* where several texts are present llama.cpp takes whichever its hash map
     * yields first; the lowest id is taken here */
    tok->eot = detect_by_text(tok, tok->eot, k_eot_texts, COUNT(k_eot_texts));
    tok->eom = detect_by_text(tok, tok->eom, k_eom_texts, COUNT(k_eom_texts));
    detect_by_text(tok, -1, k_fim_pre_texts, COUNT(k_fim_pre_texts));
    detect_by_text(tok, -1, k_fim_suf_texts, COUNT(k_fim_suf_texts));
    detect_by_text(tok, -1, k_fim_mid_texts, COUNT(k_fim_mid_texts));
    *fim_pad = detect_by_text(tok, -1, k_fim_pad_texts, COUNT(k_fim_pad_texts));
    *fim_rep = detect_by_text(tok, -1, k_fim_rep_texts, COUNT(k_fim_rep_texts));
    *fim_sep = detect_by_text(tok, -1, k_fim_sep_texts, COUNT(k_fim_sep_texts));
}

typedef struct {
    int32_t id;
    uint64_t len;
} special_key;

static int cmp_special_key(const void *a, const void *b) {
    const special_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1; /* longer first */
    return (x->id > y->id) - (x->id < y->id);               /* then lower id */
}

static int build_special(pkv_tokenizer *tok) {
    int32_t n = tok->n_vocab, count = 0;
    for (int32_t i = 0; i < n; i++)
        if (tok->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) count++;
    special_key *keys = malloc(((size_t)count + 1) * sizeof *keys);
    tok->special = malloc(((size_t)count + 1) * sizeof *tok->special);
    tok->special_rank = malloc((size_t)n * sizeof *tok->special_rank);
    if (!keys || !tok->special || !tok->special_rank) {
        free(keys);
        return -1;
    }
    count = 0;
    for (int32_t i = 0; i < n; i++) {
        tok->special_rank[i] = -1;
        if (tok->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))
            keys[count++] = (special_key){i, tok->text[i].len};
    }
    /* llama.cpp sorts by length only (std::sort, not stable); equal-length
     * special texts never overlap in the vocabularies examined, and lower id
     * first makes the order well defined */
    qsort(keys, (size_t)count, sizeof *keys, cmp_special_key);
    for (int32_t r = 0; r < count; r++) {
        tok->special[r] = keys[r].id;
        tok->special_rank[keys[r].id] = r;
    }
    tok->n_special = count;
    free(keys);
    return trie_build(tok);
}

static void build_byte_tokens(pkv_tokenizer *tok) {
    for (int b = 0; b < 256; b++) {
        if (tok->kind == PKV_TOK_SPM) {
            char hex[8], raw = (char)b;
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            int32_t id = tok_find(tok, hex, 6);
            tok->byte_token[b] = id >= 0 ? id : tok_find(tok, &raw, 1);
        } else {
            char utf8[4];
            size_t n = pkv_utf8_encode(tok_bpe_byte_to_cp((uint8_t)b), utf8);
            tok->byte_token[b] = tok_find(tok, utf8, n);
        }
    }
}

static void set_defaults(pkv_tokenizer *tok, const tok_vocab_desc *d) {
    int32_t n = tok->n_vocab;
    bool pre_add_bos = false;
    if (tok->kind == PKV_TOK_SPM) {
        tok->bos = id_or_default(d->bos, 1, n);
        tok->eos = id_or_default(d->eos, 2, n);
        tok->unk = id_or_default(d->unk, 0, n);
        tok->add_bos = true;
        tok->add_space_prefix = true;
    } else {
        const char *pre = d->pre.ptr ? d->pre.ptr : "";
        size_t pre_len = d->pre.ptr ? d->pre.len : 0;
        tok->pre = tok_pre_from_name(pre, pre_len, &tok->ignore_merges, &pre_add_bos);
        tok->bos = id_or_default(d->bos, 11, n);
        tok->eos = id_or_default(d->eos, 11, n);
        tok->unk = id_or_default(d->unk, -1, n);
        tok->add_bos = pre_add_bos;
        tok->add_space_prefix = false;
    }
    tok->add_eos = false;
    if (d->add_space_prefix >= 0) tok->add_space_prefix = d->add_space_prefix;
    if (d->add_bos >= 0) tok->add_bos = d->add_bos;
    if (d->add_eos >= 0) tok->add_eos = d->add_eos;
}

pkv_tokenizer *tok_build(const tok_vocab_desc *d, pkv_error *err) {
    if (d->n_vocab <= 0 || d->n_vocab > TOK_MAX_VOCAB) {
        pkv_fail(err, PKV_ERR_FORMAT, "tokenizer.ggml.tokens: %d tokens (need 1..%d)", d->n_vocab,
                 TOK_MAX_VOCAB);
        return NULL;
    }
    if (d->kind == PKV_TOK_BPE && d->n_merges < 0) {
        pkv_fail(err, PKV_ERR_FORMAT, "tokenizer.ggml.merges: bad count");
        return NULL;
    }
    if (check_special_ids(d, err)) return NULL;
    pkv_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) goto nomem;
    tok->kind = d->kind;
    tok->n_vocab = d->n_vocab;
    if (build_texts(tok, d)) goto nomem;
    set_defaults(tok, d);
    if (tok->kind == PKV_TOK_BPE && build_merges(tok, d)) goto nomem;
    int32_t fim_pad, fim_rep, fim_sep;
    detect_special_ids(tok, d, &fim_pad, &fim_rep, &fim_sep);
    if (build_eog(tok, fim_pad, fim_rep, fim_sep)) goto nomem;
    if (build_special(tok)) goto nomem;
    build_byte_tokens(tok);
    return tok;
nomem:
    pkv_tokenizer_free(tok);
    pkv_fail(err, PKV_ERR_NOMEM, "tokenizer: out of memory building a %d-token vocabulary",
             d->n_vocab);
    return NULL;
}

/* ---------------------------------------------------------------- GGUF loading (§4.1) */

static int get_id_key(const gguf_file *f, const char *key, int64_t *out, pkv_error *err) {
    uint32_t v;
    int rc = gguf_get_u32(f, key, &v, err);
    if (rc < 0) return -1;
    *out = rc == 0 ? (int64_t)v : TOK_ID_ABSENT;
    return 0;
}

static int get_bool_key(const gguf_file *f, const char *key, int *out, pkv_error *err) {
    bool v;
    int rc = gguf_get_bool(f, key, &v, err);
    if (rc < 0) return -1;
    *out = rc == 0 ? (int)v : -1;
    return 0;
}

static int get_array(const gguf_file *f, const char *key, gguf_vtype elem, bool required,
                     const gguf_value **out, pkv_error *err) {
    int rc = gguf_get_arr(f, key, out, err);
    if (rc < 0) return -1;
    if (rc == 1) {
        *out = NULL;
        if (required) return pkv_fail(err, PKV_ERR_FORMAT, "%s: key %s missing", f->path, key);
        return 0;
    }
    if ((*out)->v.arr.elem_type != elem &&
        !(elem == GGUF_VT_FLOAT32 && (*out)->v.arr.elem_type == GGUF_VT_INT32))
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: %s has element type %s, expected %s", f->path,
                        key, gguf_vtype_name((*out)->v.arr.elem_type), gguf_vtype_name(elem));
    return 0;
}

typedef struct {
    float *scores;
    int32_t *types;
} loaded_arrays;

static int read_numeric_arrays(const gguf_file *f, uint64_t n, loaded_arrays *a, pkv_error *err) {
    const gguf_value *scores, *types;
    if (get_array(f, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, false, &scores, err) ||
        get_array(f, "tokenizer.ggml.token_type", GGUF_VT_INT32, false, &types, err))
        return -1;
    if (types && types->v.arr.elem_type != GGUF_VT_INT32)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: tokenizer.ggml.token_type is not int32", f->path);
    if (scores && scores->v.arr.count < n)
        return pkv_fail(err, PKV_ERR_FORMAT,
                        "%s: tokenizer.ggml.scores has %llu entries < %llu tokens", f->path,
                        (unsigned long long)scores->v.arr.count, (unsigned long long)n);
    if (types && types->v.arr.count < n)
        return pkv_fail(err, PKV_ERR_FORMAT,
                        "%s: tokenizer.ggml.token_type has %llu entries < %llu tokens", f->path,
                        (unsigned long long)types->v.arr.count, (unsigned long long)n);
    if (scores && !(a->scores = malloc(n * sizeof *a->scores)))
        return pkv_fail(err, PKV_ERR_NOMEM, "%s: out of memory for scores", f->path);
    if (types && !(a->types = malloc(n * sizeof *a->types)))
        return pkv_fail(err, PKV_ERR_NOMEM, "%s: out of memory for token types", f->path);
    for (uint64_t i = 0; scores && i < n; i++)
        a->scores[i] = scores->v.arr.elem_type == GGUF_VT_FLOAT32
                           ? (float)gguf_arr_f64(scores, i)
                           : (float)gguf_arr_i64(scores, i);
    for (uint64_t i = 0; types && i < n; i++) a->types[i] = (int32_t)gguf_arr_i64(types, i);
    return 0;
}

static int read_desc_keys(const gguf_file *f, tok_vocab_desc *d, pkv_error *err) {
    gguf_str pre;
    int rc = gguf_get_str(f, "tokenizer.ggml.pre", &pre, err);
    if (rc < 0) return -1;
    if (rc == 0) d->pre = pre;
    if (get_id_key(f, "tokenizer.ggml.bos_token_id", &d->bos, err) ||
        get_id_key(f, "tokenizer.ggml.eos_token_id", &d->eos, err) ||
        get_id_key(f, "tokenizer.ggml.unknown_token_id", &d->unk, err) ||
        get_id_key(f, "tokenizer.ggml.eot_token_id", &d->eot, err) ||
        get_id_key(f, "tokenizer.ggml.eom_token_id", &d->eom, err) ||
        get_id_key(f, "tokenizer.ggml.padding_token_id", &d->pad, err) ||
        get_bool_key(f, "tokenizer.ggml.add_bos_token", &d->add_bos, err) ||
        get_bool_key(f, "tokenizer.ggml.add_eos_token", &d->add_eos, err) ||
        get_bool_key(f, "tokenizer.ggml.add_space_prefix", &d->add_space_prefix, err))
        return -1;
    return 0;
}

pkv_tokenizer *pkv_tokenizer_load(const gguf_file *f, pkv_error *err) {
    gguf_str model;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model, err);
    if (rc) {
        if (rc == 1) pkv_fail(err, PKV_ERR_FORMAT, "%s: key tokenizer.ggml.model missing", f->path);
        return NULL;
    }
    tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    if (gguf_str_eq(model, "llama")) d.kind = PKV_TOK_SPM;
    else if (gguf_str_eq(model, "gpt2")) d.kind = PKV_TOK_BPE;
    else {
        char name[64];
        gguf_str_copy(model, name, sizeof name);
        pkv_fail(err, PKV_ERR_UNSUPPORTED,
                 "%s: tokenizer.ggml.model '%s' not supported (llama, gpt2)", f->path, name);
        return NULL;
    }
    const gguf_value *tokens, *merges = NULL;
    if (get_array(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, true, &tokens, err)) return NULL;
    if (tokens->v.arr.count == 0 || tokens->v.arr.count > TOK_MAX_VOCAB) {
        pkv_fail(err, PKV_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries (need 1..%d)",
                 f->path, (unsigned long long)tokens->v.arr.count, TOK_MAX_VOCAB);
        return NULL;
    }
    if (d.kind == PKV_TOK_BPE &&
        get_array(f, "tokenizer.ggml.merges", GGUF_VT_STRING, true, &merges, err))
        return NULL;
    if (merges && merges->v.arr.count > INT32_MAX) {
        pkv_fail(err, PKV_ERR_FORMAT, "%s: tokenizer.ggml.merges has too many entries", f->path);
        return NULL;
    }
    d.n_vocab = (int32_t)tokens->v.arr.count;
    d.tokens = tokens->v.arr.strs;
    if (merges) {
        d.n_merges = (int32_t)merges->v.arr.count;
        d.merges = merges->v.arr.strs;
    }
    loaded_arrays a = {NULL, NULL};
    pkv_tokenizer *tok = NULL;
    if (read_numeric_arrays(f, tokens->v.arr.count, &a, err) == 0 &&
        read_desc_keys(f, &d, err) == 0) {
        d.scores = a.scores;
        d.types = a.types;
        tok = tok_build(&d, err);
        if (!tok && err) { /* name the file, as the other load errors do */
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            pkv_fail(err, err->code, "%s: %s", f->path, msg);
        }
    }
    free(a.scores);
    free(a.types);
    return tok;
}
