/*
 * The vocabulary (docs/engine.md §4.1): token texts, attributes and scores,
 * the text -> id table, BPE merges and their ranks, special tokens and their
 * trie, the end-of-generation set, built from a tok_vocab_desc (the GGUF keys,
 * vocab_gguf.c, or arrays made in memory by the tests). Also the small
 * containers the SPM and BPE algorithms share, the pre-tokenizer names and
 * the GPT-2 byte alphabet. Behaviour follows llama.cpp's llama-vocab.cpp;
 * where it depends on hash-map iteration order there, the lowest id is taken
 * here (noted at each place). Not replicated: llama.cpp's attribute tweaks
 * keyed on model names (lstrip / rstrip for jina, phi-3, modern-bert) and the
 * gpt-oss / Gemma 4 specific adjustments of the end-of-generation set.
 */
#include "text/vocab.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "text/unicode.h"

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

int tok_cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
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

int64_t tok_trie_child(const tok_trie *tr, uint32_t node, unsigned char byte) {
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

/* ---------------------------------------------------------------- names */

static bool name_is(const char *name, size_t len, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == len && memcmp(name, list[i], len) == 0) return true;
    return false;
}

tok_pre tok_pre_from_name(const char *name, size_t len, bool *ignore_merges, bool *add_bos) {
    /* pre-tokenizer names llama.cpp maps to these regexes */
    static const char *const llama3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                         "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"};
    static const char *const llama3_plain[] = {"dbrx", "smaug-bpe"};
    static const char *const qwen2[] = {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"};
    static const char *const gpt2[] = {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat",
                                       "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
                                       "modern-bert", "jina-v1-en", "jina-v2-code",
                                       "roberta-bpe", "mpt", "olmo", "jais", "trillion",
                                       "granite-docling"};
    *ignore_merges = false;
    *add_bos = false;
    if (name_is(name, len, llama3, sizeof llama3 / sizeof *llama3)) {
        *ignore_merges = true;
        *add_bos = true;
        return TOK_PRE_LLAMA3;
    }
    if (name_is(name, len, llama3_plain, sizeof llama3_plain / sizeof *llama3_plain))
        return TOK_PRE_LLAMA3;
    if (name_is(name, len, qwen2, sizeof qwen2 / sizeof *qwen2)) return TOK_PRE_QWEN2;
    if (name_is(name, len, gpt2, sizeof gpt2 / sizeof *gpt2)) return TOK_PRE_GPT2;
    /* "default", a missing name, and (as in the patched llama.cpp) any name
     * not known here */
    return TOK_PRE_DEFAULT;
}

/* ---------------------------------------------------------------- byte mapping */

/* Bytes GPT-2 maps to themselves: '!'..'~', 0xA1..0xAC, 0xAE..0xFF. */
static bool maps_to_itself(uint32_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The other 68 bytes get 256, 257, ... in byte order: 0x00..0x20 (33 of
 * them), 0x7F..0xA0 (34), 0xAD. */
uint32_t tok_bpe_byte_to_cp(uint8_t b) {
    if (maps_to_itself(b)) return b;
    if (b <= 0x20) return 256u + b;
    if (b >= 0x7F && b <= 0xA0) return 256u + 33u + (b - 0x7Fu);
    return 256u + 67u; /* 0xAD */
}

int tok_bpe_cp_to_byte(uint32_t cp) {
    if (cp < 256) return maps_to_itself(cp) ? (int)cp : -1;
    uint32_t n = cp - 256;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(0x7F + n - 33);
    if (n == 67) return 0xAD;
    return -1;
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
    qsort(tok->eog, (size_t)n, sizeof *tok->eog, tok_cmp_i32);
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

