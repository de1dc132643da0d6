/*
 * The KV cache (docs/design.md "The cache layout"): per layer and per KV
 * head, a list of rows — key (post-RoPE), value, and the row's original
 * position. Heads of
 * one layer may hold different numbers of rows (a press keeps a different set
 * per head; AdaKV gives heads different budgets), and layers differ too.
 *
 * The sequence's logical length (n_pos, which drives RoPE for new tokens) is
 * the session's business; the cache only knows rows and their positions.
 */
#ifndef PKV_KVCACHE_H
#define PKV_KVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"
#include "promptkv.h"

/* One block per head (kvcache.c): cap rows of K, then cap rows of V, then
 * cap positions; k points at the block, v and pos into it. A row is stored in
 * the cache's type for keys or for values: f16, f32, or ggml's Q8_0/Q4_0
 * blocks of 32 elements (docs/design.md "The cache layout"). */
typedef struct {
    int n_rows;
    int cap;        /* rows allocated */
    void *k;        /* cap key rows of k_row bytes each */
    void *v;        /* cap value rows of v_row bytes each */
    int32_t *pos;   /* original position of each row */
    size_t bytes;   /* size of the block at k (at least what cap needs) */
} pkv_kv_head;

typedef struct {
    int n_heads;          /* KV heads (query heads after a per-query-head press) */
    int n_heads_kv;       /* the model's KV heads: what a cleared layer goes back to */
    int head_dim_k;
    int head_dim_v;
    size_t k_row, v_row;  /* bytes of one key row, one value row (pkv_cache_row_bytes) */
    int sliding_window;   /* 0: full attention; else rows older than the window are dropped */
    pkv_kv_head *heads;
} pkv_kv_layer;

typedef struct {
    pkv_cache_type type_k, type_v;
    pkv_type kern_k, kern_v; /* the same as the kernels' type ids (F16, F32, Q8_0, Q4_0) */
    int n_layers;
    pkv_kv_layer *layers;
} pkv_kvcache;

/* The kernels' type id of a cache type. */
pkv_type pkv_kvcache_kern_type(pkv_cache_type t);

/* Refuses an unknown type, and a head size that is not a multiple of the
 * block of a Q8_0/Q4_0 type (32), naming the layer, the size and the type. */
int pkv_kvcache_init(pkv_kvcache *c, pkv_cache_type type_k, pkv_cache_type type_v, int n_layers, int n_kv_heads,
                     int head_dim_k, int head_dim_v, const int *sliding_window_per_layer,
                     pkv_error *err);
void pkv_kvcache_free(pkv_kvcache *c);
void pkv_kvcache_clear(pkv_kvcache *c);

/* dst becomes a deep copy of src (same model and types); dst's rows are freed first. */
int pkv_kvcache_copy(pkv_kvcache *dst, const pkv_kvcache *src, pkv_error *err);

/* Loading a saved cache (kvfile.c), on a cleared cache: the layer gets
 * n_heads heads (the model's KV heads, or its query heads after a
 * per-query-head press), then each head its rows, copied from k, v and pos
 * (n_rows rows of each in the cache's types, any alignment; positions
 * little-endian int32). */
int pkv_kvcache_set_n_heads(pkv_kvcache *c, int layer, int n_heads, pkv_error *err);
int pkv_kvcache_put_rows(pkv_kvcache *c, int layer, int head, int n_rows, const void *k, const void *v, const void *pos,
                         pkv_error *err);

/* Make room for n more rows in every head of the layer. */
int pkv_kvcache_reserve(pkv_kvcache *c, int layer, int n_more, pkv_error *err);

/* Append n rows to every head of a layer: k/v are [n, n_heads_kv, head_dim]
 * floats (token-major, as projections produce them); a head of a layer split
 * per query head gets its KV head's row. Converts to the cache's types
 * (rounding to f16, or quantising to Q8_0 with the table's activation
 * quantiser and to Q4_0 with the reference quantiser, as llama.cpp stores a
 * quantised cache). Requires a prior reserve. */
void pkv_kvcache_append(pkv_kvcache *c, const pkv_kernels *kern, int layer, const float *k,
                        const float *v, const int32_t *pos, int n);

/* Keep only the listed rows of one head (indices into the current rows,
 * strictly increasing), compacting in place and shrinking the allocation to
 * n_keep + spare rows. This is how a press's selection becomes real memory
 * savings. */
int pkv_kvcache_keep_rows(pkv_kvcache *c, int layer, int head, const int32_t *rows, int n_keep,
                          int spare, pkv_error *err);

/* Per-query-head selection (SnapKV granularity query_head): the layer gets
 * n_new_heads heads, head s holding rows[s] (ascending) of old head
 * s / (n_new_heads / n_heads). */
int pkv_kvcache_split_heads(pkv_kvcache *c, int layer, int n_new_heads, const int32_t *const *rows,
                            const int *n_keep, int spare, pkv_error *err);

/* Sliding-window layers: drop rows no future query can see (position <=
 * next_pos - window). Amortised: compacts only once the dead rows are at
 * least as many as the live ones, so a decode step costs O(1) rows. */
void pkv_kvcache_trim_window(pkv_kvcache *c, int layer, int next_pos);

/* Keys/values of one head as floats: rows [0, n_rows) into dst (n_rows x
 * dim), dequantised by the table's kernels. */
void pkv_kvcache_read_k(const pkv_kvcache *c, const pkv_kernels *kern, int layer, int head,
                        float *dst);
void pkv_kvcache_read_v(const pkv_kvcache *c, const pkv_kernels *kern, int layer, int head,
                        float *dst);

/* Bytes allocated (capacity, not only used rows): what the cache costs in memory. */
uint64_t pkv_kvcache_alloc_bytes(const pkv_kvcache *c);

/* Bytes held: every row's key, value and position, all layers and heads. */
uint64_t pkv_kvcache_bytes(const pkv_kvcache *c);
/* Bytes of one row (key + value + position) in a layer. */
uint64_t pkv_kvcache_row_bytes(const pkv_kvcache *c, int layer);
/* Rows in a layer summed over heads. */
int64_t pkv_kvcache_layer_rows(const pkv_kvcache *c, int layer);

/* The shape and rows of a layer, for code outside the cache (which goes
 * through these, never through the structs above). */
static inline int pkv_kvcache_n_layers(const pkv_kvcache *c) { return c->n_layers; }
static inline int pkv_kvcache_n_heads(const pkv_kvcache *c, int layer) { return c->layers[layer].n_heads; }
static inline int pkv_kvcache_head_dim_k(const pkv_kvcache *c, int layer) { return c->layers[layer].head_dim_k; }
static inline int pkv_kvcache_head_dim_v(const pkv_kvcache *c, int layer) { return c->layers[layer].head_dim_v; }
static inline int pkv_kvcache_head_rows(const pkv_kvcache *c, int layer, int head) {
    return c->layers[layer].heads[head].n_rows;
}
/* Original positions of a head's rows, ascending. */
static inline const int32_t *pkv_kvcache_head_pos(const pkv_kvcache *c, int layer, int head) {
    return c->layers[layer].heads[head].pos;
}
/* Rows of the layer's largest head. */
static inline int pkv_kvcache_max_head_rows(const pkv_kvcache *c, int layer) {
    int rows = 0;
    for (int h = 0; h < c->layers[layer].n_heads; h++)
        if (c->layers[layer].heads[h].n_rows > rows) rows = c->layers[layer].heads[h].n_rows;
    return rows;
}
/* Keys and values of a head as n_rows x dim floats in place when that part
 * of the cache is f32; NULL otherwise (read a copy with pkv_kvcache_read_k/v). */
static inline const float *pkv_kvcache_head_k_f32(const pkv_kvcache *c, int layer, int head) {
    return c->type_k == PKV_CACHE_F32 ? (const float *)c->layers[layer].heads[head].k : NULL;
}
static inline const float *pkv_kvcache_head_v_f32(const pkv_kvcache *c, int layer, int head) {
    return c->type_v == PKV_CACHE_F32 ? (const float *)c->layers[layer].heads[head].v : NULL;
}

/* Row `row` of a head's keys or values, in the cache's type. */
static inline const void *pkv_kv_key(const pkv_kv_layer *l, const pkv_kv_head *h, int row) {
    return (const char *)h->k + (size_t)row * l->k_row;
}
static inline const void *pkv_kv_value(const pkv_kv_layer *l, const pkv_kv_head *h, int row) {
    return (const char *)h->v + (size_t)row * l->v_row;
}

#endif
