/*
 * The arithmetic of a transformer layer: matmul, RMSNorm, RoPE, activations,
 * softmax and attention. Knows nothing about GGUF, models or presses; every
 * function takes the kernel table and thread pool it runs on.
 */
#ifndef PKV_OPS_H
#define PKV_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/threads.h"
#include "kernels/quant.h"
#include "kernels/tensor.h"

typedef struct {
    const pkv_kernels *kern;
    pkv_pool *pool;
    /* Matmuls take the per-row dot path whatever the row count: each weight
     * row is still read once for all rows, and every row's result has the
     * bits a one-row matmul gives (the batched decode step: each stream as
     * if alone). Off: from a few rows on, the packed batched kernels. */
    bool rowwise;
} pkv_compute;

/* ---------------------------------------------------------------- matmul */

/* Bytes of scratch pkv_matmul needs for n_tok activation rows of length k
 * (the weight's row length) with n_threads threads. */
size_t pkv_matmul_scratch_bytes(int64_t k, int n_tok, int n_threads);

/* y[t, m] = sum_k W[m, k] x[t, k]   for t < n_tok, m < w->ne[1].
 * x: n_tok rows of w->ne[0] floats; y: n_tok rows of w->ne[1] floats.
 * Weight rows are dotted with activations converted to the weight type's
 * activation format (table.h), as llama.cpp does; if the kernel table has no
 * fused dot for the type, rows are dequantised and dotted in f32. */
void pkv_matmul(const pkv_compute *c, const pkv_tensor *w, const float *x, int n_tok, float *y,
                void *scratch);

/* Several matmuls of one input (Q, K and V; gate and up) as one job per
 * activation format: the input is converted once and the threads meet once.
 * Every w[i]->ne[0] must be equal; at most PKV_MATMUL_MAX weights. */
#define PKV_MATMUL_MAX 4
void pkv_matmul_n(const pkv_compute *c, int n_w, const pkv_tensor *const *w, const float *x, int n_tok,
                  float *const *y, void *scratch);

/* Gathers row `row` of an embedding matrix (any computable type) as floats. */
void pkv_get_row(const pkv_compute *c, const pkv_tensor *w, int64_t row, float *out);

/* ---------------------------------------------------------------- elementwise */

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], for n_rows rows of n.
 * weight may be NULL (no scaling). out may alias x. */
void pkv_rmsnorm(float *out, const float *x, const float *weight, int n, int n_rows, float eps);

/* x[t, i] += bias[i] */
void pkv_add_bias(float *x, const float *bias, int n, int n_rows);

/* y += x */
void pkv_add(float *y, const float *x, int64_t n);

/* GeGLU / SwiGLU: gate[i] = act(gate[i]) * up[i] (formulas: table.h) */
void pkv_gelu_tanh_mul(const pkv_compute *c, float *gate, const float *up, int64_t n);
void pkv_silu_mul(const pkv_compute *c, float *gate, const float *up, int64_t n);

/* ---------------------------------------------------------------- RoPE */

typedef enum {
    PKV_ROPE_NORM = 0, /* pairs (2i, 2i+1): llama GGUF weights (docs/engine.md §5.2) */
    PKV_ROPE_NEOX = 2  /* pairs (i, i + n_rot/2): qwen2, gemma3 */
} pkv_rope_mode;

typedef struct {
    pkv_rope_mode mode;
    int n_rot;             /* rotated dims (<= head_dim); the rest are copied */
    float base;            /* theta base */
    float freq_scale;      /* linear scaling: 1/factor */
    const float *freq_factors; /* rope_freqs.weight (n_rot/2) or NULL: theta_i /= ff_i */
    float attn_factor;     /* multiplies cos and sin (rope.scaling.attn_factor, LongRoPE's
                              magnitude scale); 0 means 1, so a zeroed set is plain RoPE */
} pkv_rope_params;

/* Precomputed inverse frequencies theta_i / pos for one parameter set. */
void pkv_rope_inv_freq(const pkv_rope_params *p, float *inv_freq /* n_rot/2 */);

/* Rotates n_heads vectors of head_dim at each of n_tok positions in place:
 * x[t, h, :] at position pos[t]. */
void pkv_rope(float *x, int n_tok, int n_heads, int head_dim, const int32_t *pos,
              const pkv_rope_params *p, const float *inv_freq);

/* ---------------------------------------------------------------- softmax */

/* In place, numerically stable; returns the sum of exp before normalising. */
void pkv_softmax(float *x, int n);

#endif
