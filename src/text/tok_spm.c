/*
 * SentencePiece-style tokenization ("llama", docs/engine.md §4.3) as
 * llama.cpp's llm_tokenizer_spm_session does it: spaces become U+2581, the
 * text is split into UTF-8 characters, and adjacent symbols are merged
 * highest-score pair first (ties: leftmost) while the merged text is a
 * vocabulary token. Symbols left that are not tokens fall back to byte
 * tokens <0xXX> (or the byte as a one-byte token); a byte with neither is an
 * error naming it.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "text/tok_spm.h"
#include "text/unicode.h"

static const char k_space_mark[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 */

typedef struct {
    int32_t prev, next;
    uint32_t start, n; /* n == 0: merged into its left neighbour */
} spm_symbol;

typedef struct {
    float score;
    int32_t left, right;
    uint32_t size;
} spm_bigram;

/* Highest score first; equal scores: leftmost first. */
static bool bigram_before(const void *pa, const void *pb) {
    const spm_bigram *a = pa, *b = pb;
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct {
    const pkv_tokenizer *tok;
    const char *text; /* the escaped fragment */
    tok_vec symbols;  /* spm_symbol */
    tok_vec heap;     /* spm_bigram */
} spm_session;

/* Queues the pair if its concatenation is a vocabulary token. Symbols are
 * adjacent in the text, so the pair's text is one contiguous span. */
static int try_bigram(spm_session *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const spm_symbol *sym = s->symbols.data;
    uint32_t size = sym[left].n + sym[right].n;
    int32_t id = tok_find(s->tok, s->text + sym[left].start, size);
    if (id < 0) return 0;
    spm_bigram b = {s->tok->score[id], left, right, size};
    return tok_heap_push(&s->heap, &b, bigram_before);
}

static int split_symbols(spm_session *s, size_t len) {
    for (size_t off = 0; off < len;) {
        size_t n = pkv_utf8_len((unsigned char)s->text[off]);
        if (n > len - off) n = len - off;
        int32_t i = (int32_t)s->symbols.n;
        spm_symbol sym = {i - 1, off + n == len ? -1 : i + 1, (uint32_t)off, (uint32_t)n};
        if (tok_vec_push(&s->symbols, &sym)) return -1;
        off += n;
    }
    return 0;
}

static int merge_symbols(spm_session *s) {
    for (int32_t i = 1; i < (int32_t)s->symbols.n; i++)
        if (try_bigram(s, i - 1, i)) return -1;
    spm_symbol *sym = s->symbols.data;
    while (s->heap.n) {
        spm_bigram b;
        tok_heap_pop(&s->heap, &b, bigram_before);
        spm_symbol *l = &sym[b.left], *r = &sym[b.right];
        /* stale: a side was merged away or grew since the pair was queued */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (try_bigram(s, l->prev, b.left) || try_bigram(s, b.left, l->next)) return -1;
    }
    return 0;
}

/* A final symbol: its token, or one byte token per byte. Every merged symbol
 * is a token (a pair is only queued when its text is one), so only single
 * characters reach the byte fallback; llama.cpp's "resegment" through the
 * merge history therefore always ends here too. */
static int emit_symbol(spm_session *s, const spm_symbol *sym, tok_out *out, pkv_error *err) {
    const pkv_tokenizer *tok = s->tok;
    int32_t id = tok_find(tok, s->text + sym->start, sym->n);
    if (id >= 0) {
        tok_emit(out, id);
        return 0;
    }
    for (uint32_t i = 0; i < sym->n; i++) {
        unsigned char byte = (unsigned char)s->text[sym->start + i];
        id = tok->byte_token[byte];
        /* llama.cpp fails here too (its byte_to_token throws): no byte is
         * dropped or replaced by the unknown token without a word */
        if (id < 0)
            return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                            "tokenize: byte 0x%02X has no token in this vocabulary (neither <0x%02X> nor the "
                            "byte itself)",
                            byte, byte);
        tok_emit(out, id);
    }
    return 0;
}

/* The fragment with an optional leading space, every ' ' replaced by U+2581. */
static char *escape_spaces(const char *text, size_t len, bool space_prefix, size_t *out_len) {
    size_t n = space_prefix ? 3 : 0;
    for (size_t i = 0; i < len; i++) n += text[i] == ' ' ? 3 : 1;
    char *buf = malloc(n ? n : 1);
    if (!buf) return NULL;
    size_t j = 0;
    if (space_prefix) {
        memcpy(buf, k_space_mark, 3);
        j = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + j, k_space_mark, 3);
            j += 3;
        } else {
            buf[j++] = text[i];
        }
    }
    *out_len = n;
    return buf;
}

int tok_spm_encode(const pkv_tokenizer *tok, const char *text, size_t len, bool space_prefix,
                   tok_out *out, pkv_error *err) {
    size_t n;
    char *escaped = escape_spaces(text, len, space_prefix, &n);
    if (!escaped) return pkv_fail(err, PKV_ERR_NOMEM, "SPM: out of memory (%zu bytes)", len);
    if (n > UINT32_MAX / 2) {
        free(escaped);
        return pkv_fail(err, PKV_ERR_LIMIT, "SPM: fragment of %zu bytes is too long", len);
    }
    spm_session s = {tok, escaped, {0}, {0}};
    tok_vec_init(&s.symbols, sizeof(spm_symbol));
    tok_vec_init(&s.heap, sizeof(spm_bigram));
    int rc = split_symbols(&s, n) || merge_symbols(&s) ? -1 : 0;
    if (rc) pkv_fail(err, PKV_ERR_NOMEM, "SPM: out of memory (%zu bytes)", len);
    const spm_symbol *sym = s.symbols.data;
    for (int32_t i = s.symbols.n ? 0 : -1; rc == 0 && i >= 0; i = sym[i].next)
        rc = emit_symbol(&s, &sym[i], out, err);
    tok_vec_free(&s.symbols);
    tok_vec_free(&s.heap);
    free(escaped);
    return rc;
}
