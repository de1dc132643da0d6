/*
 * The vocabulary a tokenizer works on (docs/engine.md §4.1), and the helpers
 * the text/ files share: vocab.c builds it (from vocab_gguf.c's GGUF keys or
 * from arrays in memory), tok_spm.c and tok_bpe.c encode with it, tokenizer.c
 * splits special tokens and decodes. The struct is visible to those files and
 * to the unit tests; the rest of the engine holds a pkv_tokenizer pointer and
 * goes through tokenizer.h.
 */
#ifndef PKV_VOCAB_H
#define PKV_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "promptkv.h"

typedef struct pkv_tokenizer pkv_tokenizer;

typedef enum { PKV_TOK_SPM, PKV_TOK_BPE } pkv_tok_kind;

/* Token types as tokenizer.ggml.token_type stores them. */
enum {
    PKV_TOKTYPE_NORMAL = 1,
    PKV_TOKTYPE_UNKNOWN = 2,
    PKV_TOKTYPE_CONTROL = 3,
    PKV_TOKTYPE_USER_DEFINED = 4,
    PKV_TOKTYPE_UNUSED = 5,
    PKV_TOKTYPE_BYTE = 6
};

enum { TOK_MAX_VOCAB = 1 << 24 }; /* far above any real vocabulary */

/* Builds the tokenizer from the file's tokenizer.* keys (vocab_gguf.c). The
 * strings stay pointers into the mapped file, so f must outlive the tokenizer. */
pkv_tokenizer *pkv_tokenizer_load(const gguf_file *f, pkv_error *err);
void pkv_tokenizer_free(pkv_tokenizer *tok);

/* Token attributes as llama.cpp keeps them: a bit set derived from the
 * GGUF token type, later amended by text-based detection (§4.1). */
enum {
    TOK_ATTR_UNDEFINED = 0,
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5
};

/* Pre-tokenizer families (§4.4). */
typedef enum {
    TOK_PRE_DEFAULT = 0, /* four regexes one after another */
    TOK_PRE_LLAMA3,      /* \p{N}{1,3} digits, case-insensitive contractions */
    TOK_PRE_QWEN2,       /* as llama3 with single digits */
    TOK_PRE_GPT2         /* the original GPT-2 regex */
} tok_pre;

enum { TOK_ID_ABSENT = -2 }; /* in tok_vocab_desc: key not present */

/* A growable array; the helpers below fail only on allocation failure. */
typedef struct {
    void *data;
    size_t n, cap, elem;
} tok_vec;

/* Open addressing; a slot holds value + 1 (0 = empty). */
typedef struct {
    uint32_t *slots;
    uint64_t mask;
} tok_table;

/* Special-token trie: edges live in a hash keyed by (node, byte). */
typedef struct {
    int32_t *node_token; /* token id ending at the node, or -1 */
    uint32_t n_nodes;
    uint64_t *edge_key; /* (node << 8 | byte) + 1, 0 = empty */
    uint32_t *edge_child;
    uint64_t edge_mask;
    bool first_byte[256];
} tok_trie;

struct pkv_tokenizer {
    pkv_tok_kind kind;
    int32_t n_vocab;
    gguf_str *text; /* owned array; the bytes live in the file or in arena */
    float *score;
    uint8_t *attr;
    tok_table by_text; /* text -> id; a repeated text maps to its last id */

    /* BPE (§4.4) */
    tok_pre pre;
    bool ignore_merges;
    int32_t n_merges;
    gguf_str *merge_left, *merge_right;
    tok_table merge_by_pair; /* (left, right) -> rank; first occurrence wins */

    /* special tokens (§4.2): control, user-defined and unknown tokens in
     * priority order (longer text first, then lower id) */
    int32_t *special;
    int32_t n_special;
    int32_t *special_rank; /* by id; -1 for ordinary tokens */
    tok_trie trie;

    int32_t bos, eos, unk, eot, eom, pad; /* -1 when absent */
    bool add_bos, add_eos, add_space_prefix;
    int32_t byte_token[256]; /* byte fallback token per byte, or -1 */
    int32_t *eog;            /* sorted end-of-generation ids */
    int32_t n_eog;

    char *arena; /* owned bytes (placeholder texts) */
};

/* What a vocabulary is built from: the GGUF keys (§4.1) or, in tests, arrays
 * made in memory. Arrays are borrowed for the duration of the build; the token
 * and merge bytes must outlive the tokenizer. */
typedef struct {
    pkv_tok_kind kind;
    gguf_str pre; /* ptr NULL: key absent */
    int32_t n_vocab;
    const gguf_str *tokens;
    const float *scores;  /* NULL: all 0 */
    const int32_t *types; /* NULL: all normal */
    int32_t n_merges;
    const gguf_str *merges;
    int64_t bos, eos, unk, eot, eom, pad; /* TOK_ID_ABSENT or the key's value */
    int add_bos, add_eos, add_space_prefix; /* -1 absent, else 0/1 */
} tok_vocab_desc;

void tok_vocab_desc_init(tok_vocab_desc *desc);
pkv_tokenizer *tok_build(const tok_vocab_desc *desc, pkv_error *err);

/* ---------------------------------------------------------------- helpers */

void tok_vec_init(tok_vec *v, size_t elem);
void tok_vec_free(tok_vec *v);
int tok_vec_reserve(tok_vec *v, size_t n);
int tok_vec_push(tok_vec *v, const void *elem);
#define TOK_VEC_AT(v, type, i) (((type *)(v)->data)[i])

/* A binary heap in a tok_vec: `before(a, b)` is true when a must pop first.
 * The SPM and BPE merge loops both pop their best bigram from one. */
typedef bool (*tok_before_fn)(const void *a, const void *b);
int tok_heap_push(tok_vec *h, const void *elem, tok_before_fn before);
/* Copies the top element into out and removes it; h must not be empty. */
void tok_heap_pop(tok_vec *h, void *out, tok_before_fn before);

uint64_t tok_hash(const char *s, size_t len, uint64_t seed);

/* Id of the token whose text is s[0..len), or -1. */
int32_t tok_find(const pkv_tokenizer *tok, const char *s, size_t len);

/* The special-token trie's child of node along byte, or -1. */
int64_t tok_trie_child(const tok_trie *tr, uint32_t node, unsigned char byte);

/* qsort order of int32_t values. */
int tok_cmp_i32(const void *a, const void *b);

/* Collects output ids; n counts all of them, only the first max are stored. */
typedef struct {
    int32_t *out;
    int64_t max;
    int64_t n;
} tok_out;

static inline void tok_emit(tok_out *o, int32_t id) {
    if (o->n < o->max) o->out[o->n] = id;
    o->n++;
}

/* ---------------------------------------------------------------- BPE vocabulary */

/* Rank of the merge (left, right), or -1. */
int32_t tok_bpe_rank(const pkv_tokenizer *tok, const char *l, size_t ll, const char *r, size_t rl);

/* GPT-2 byte-level mapping: byte -> codepoint, and back (-1 if none). */
uint32_t tok_bpe_byte_to_cp(uint8_t byte);
int tok_bpe_cp_to_byte(uint32_t cp);

/* The pre-tokenizer family tokenizer.ggml.pre names (§4.4). */
tok_pre tok_pre_from_name(const char *name, size_t len, bool *ignore_merges, bool *add_bos);

#endif
