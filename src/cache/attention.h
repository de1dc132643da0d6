/*
 * Attention of queries over one layer's KV cache rows. Rows of a head are in
 * ascending position order (kvcache.h), so the keys a query may see — causal,
 * and inside the window on sliding-window layers — are one contiguous range
 * [lo, hi) found by binary search: evicted rows are simply absent, nothing is
 * masked densely.
 *
 * The computation is tiled (flash attention with an online softmax): a tile
 * of queries — consecutive tokens times the query heads that share a KV head
 * — meets the keys in blocks of PKV_ATT_BK rows, aligned to multiples of
 * PKV_ATT_BK within the head, so every key block is converted and loaded once
 * per tile. A query's result depends only on its own range and that fixed
 * block grid, never on the tiling or the thread count. With one to a few
 * tokens (decode) the range is also cut into fixed chunks that threads take
 * separately, and the chunks' partial softmaxes are merged in order.
 */
#ifndef PKV_ATTENTION_H
#define PKV_ATTENTION_H

#include "cache/kvcache.h"
#include "kernels/ops.h"

typedef struct {
    int n_head;      /* query heads; query head h reads KV head h / (n_head / n_kv_heads) */
    float scale;     /* on q.k before the softmax */
    float softcap;   /* 0: off; else logits = softcap * tanh(logits / softcap) */
    /* Optional: acc_probs[h][row] += each query's attention probability on the
     * row (H2O's accumulated attention). Work is then split by head so the
     * sums do not depend on the thread count. */
    float *const *acc_probs;
} pkv_attn_params;

/* Floats of scratch pkv_attention needs for a layer with n_head query heads
 * and n_threads threads. */
size_t pkv_attention_scratch_floats(const pkv_kvcache *cache, int layer, int n_head, int n_threads);

/* q: [n_tok, n_head, head_dim_k] post-RoPE; q_pos: positions of the queries;
 * out: [n_tok, n_head, head_dim_v]; scratch: pkv_attention_scratch_floats. */
void pkv_attention(const pkv_compute *c, const pkv_kvcache *cache, int layer, const pkv_attn_params *p,
                   const float *q, const int32_t *q_pos, int n_tok, float *out, float *scratch);

/* Decode attention of n sequences at once, one query token each (a batched
 * step): sequence i's query rows q + i * n_head * head_dim_k at q_pos[i]
 * over caches[i]'s layer, its output at out + i * n_head * head_dim_v. All
 * sequences' work goes to the threads together; each output has the bits
 * pkv_attention gives that sequence alone. p->acc_probs must be NULL. */
size_t pkv_attention_batch_scratch_floats(const pkv_kvcache *const *caches, int n, int layer, int n_head, int n_threads);
void pkv_attention_batch(const pkv_compute *c, const pkv_kvcache *const *caches, int n, int layer,
                         const pkv_attn_params *p, const float *q, const int32_t *q_pos, float *out, float *scratch);

#endif
