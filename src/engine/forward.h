/* The forward pass (forward.c). */
#ifndef PKV_ENGINE_FORWARD_H
#define PKV_ENGINE_FORWARD_H

#include "engine/compress.h"
#include "engine/state.h"

/* Called with the logits of each requested row. */
typedef void (*pkv_row_logits_fn)(void *user, int index, const float *logits);

/* Runs n tokens through the model at positions n_pos.. (layer by layer over
 * chunks of n_batch tokens), appending to the cache. probe says what the full
 * layers keep for presses; press, if not NULL, compresses each full layer once
 * it has seen all n tokens. Logits of the last token land in s->logits; with
 * row_fn, every token's logits are passed to it in order. */
int pkv_forward(pkv_session *s, const int32_t *tokens, int n, const pkv_press_cfg *press,
                const pkv_probe_cfg *probe, pkv_row_logits_fn row_fn, void *user, pkv_compress_stats *stats,
                pkv_error *err);

/* ---------------------------------------------------------------- the blocks of a layer
 * What one layer computes besides the cache, on rows of work's buffers: the
 * session's forward pass and the batched decode step (batch.c, one row per
 * session) both run them. */
typedef struct {
    const pkv_model *model;
    const pkv_compute *comp;
    pkv_work *work;
} pkv_layer_ctx;

/* work's chunk buffers for n_tok rows (pool: the threads the matmuls use). */
int pkv_work_reserve(const pkv_model *m, const pkv_pool *pool, pkv_work *w, int n_tok, pkv_error *err);
/* Frees every buffer of w (and zeroes it). */
void pkv_work_free(pkv_work *w);
/* w's attention scratch of at least need floats (grown with room for the
 * rows decode will add). */
int pkv_work_attn_scratch(pkv_work *w, size_t need, pkv_error *err);
/* Token embeddings of n tokens into hidden's rows (times embd_scale). */
void pkv_embed_rows(const pkv_layer_ctx *c, const int32_t *tokens, int n, float *hidden);
/* The attention sub-layer's input norm and Q, K, V of rows x (bias, QK-norm;
 * probe, when given, takes the pre-RoPE query statistics) into work q, k, v. */
void pkv_layer_qkv(const pkv_layer_ctx *c, int il, const float *x, const int32_t *pos, int n_tok,
                   pkv_layer_probe *probe);
/* RoPE on n_tok rows of work q and k from row `row`, with freqs' frequencies
 * (a session's: LongRoPE's depend on its context length). */
void pkv_layer_rope(const pkv_layer_ctx *c, int il, int row, const int32_t *pos, int n_tok, const pkv_work *freqs);
/* x += the output projection of work att (and the post-attention norm). */
void pkv_layer_attn_out(const pkv_layer_ctx *c, int il, float *x, int n_tok);
/* x += the feed-forward block of x (GeGLU or SwiGLU). */
void pkv_layer_ffn(const pkv_layer_ctx *c, int il, float *x, int n_tok);
/* logits of n_rows rows of the residual stream h (final norm, output, softcap). */
void pkv_layer_logits(const pkv_layer_ctx *c, const float *h, int n_rows, float *logits);

#endif
