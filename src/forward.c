/*
 * The forward pass, read top to bottom (engine-notes.md §3.1 for Gemma 3,
 * §3.4 for Llama and Qwen2).
 *
 * The pass is layer-major: all tokens of the call go through layer 0 (in
 * chunks of n_batch, so activations stay bounded), then layer 1, and so on.
 * The residual stream of the call is kept between layers. This lets a press
 * compress layer l's cache as soon as layer l has seen the whole prompt, so
 * only one layer's uncompressed K/V is alive at any time (design.md).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "error.h"
#include "session.h"

enum { LOGIT_ROWS = 16 }; /* logits computed this many rows at a time when every row is wanted */

/* ---------------------------------------------------------------- buffers */

static int grow(void **p, size_t bytes, pkv_error *err) {
    void *q = realloc(*p, bytes ? bytes : 1);
    if (!q) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory allocating %zu bytes of activations", bytes);
    *p = q;
    return 0;
}

static size_t max_matmul_scratch(const pkv_model *m, int n_tok) {
    const pkv_hparams *hp = &m->hp;
    int64_t widest = hp->n_embd;
    if (hp->n_ff > widest) widest = hp->n_ff;
    if ((int64_t)hp->n_head * hp->head_dim_v > widest) widest = (int64_t)hp->n_head * hp->head_dim_v;
    return (size_t)n_tok * (size_t)widest * sizeof(float) + 64;
}

static int ensure_chunk_buffers(pkv_session *s, int n_tok, pkv_error *err) {
    pkv_work *w = &s->work;
    if (w->n_tok_cap >= n_tok) return 0;
    const pkv_hparams *hp = &s->model->hp;
    size_t n = (size_t)n_tok;
    size_t q_dim = (size_t)hp->n_head * hp->head_dim_k, kv_dim = (size_t)hp->n_head_kv * hp->head_dim_k,
           v_dim = (size_t)hp->n_head_kv * hp->head_dim_v, att_dim = (size_t)hp->n_head * hp->head_dim_v;
    if (grow((void **)&w->x, n * hp->n_embd * sizeof(float), err) ||
        grow((void **)&w->q, n * q_dim * sizeof(float), err) ||
        grow((void **)&w->k, n * kv_dim * sizeof(float), err) ||
        grow((void **)&w->v, n * v_dim * sizeof(float), err) ||
        grow((void **)&w->att, n * att_dim * sizeof(float), err) ||
        grow((void **)&w->proj, n * hp->n_embd * sizeof(float), err) ||
        grow((void **)&w->gate, n * hp->n_ff * sizeof(float), err) ||
        grow((void **)&w->up, n * hp->n_ff * sizeof(float), err) ||
        grow((void **)&w->pos, n * sizeof(int32_t), err))
        return -1;
    w->act_bytes = max_matmul_scratch(s->model, n_tok);
    if (grow(&w->act, w->act_bytes, err)) return -1;
    w->n_tok_cap = n_tok;
    return 0;
}

static int ensure_hidden(pkv_session *s, int n, pkv_error *err) {
    pkv_work *w = &s->work;
    if (w->hidden_cap >= n) return 0;
    if (grow((void **)&w->hidden, (size_t)n * s->model->hp.n_embd * sizeof(float), err)) return -1;
    w->hidden_cap = n;
    return 0;
}

/* ---------------------------------------------------------------- one layer, one chunk */

static void matmul(pkv_session *s, const pkv_tensor *wt, const float *x, int n_tok, float *y) {
    pkv_matmul(&s->comp, wt, x, n_tok, y, s->work.act);
}

/* Per-head RMSNorm over head_dim (Gemma 3 QK-norm). */
static void head_norm(float *x, const pkv_tensor *w, int n_tok, int n_heads, int head_dim, float eps) {
    pkv_rmsnorm(x, x, w->data, head_dim, n_tok * n_heads, eps);
}

/* Attention block of layer il for n_tok tokens at positions pos; x is the
 * chunk's slice of the residual stream, updated in place. */
static int attention_block(pkv_session *s, int il, float *x, const int32_t *pos, int n_tok, pkv_error *err) {
    const pkv_model *m = s->model;
    const pkv_hparams *hp = &m->hp;
    const pkv_layer_weights *L = &m->layers[il];
    pkv_work *w = &s->work;
    bool swa = !pkv_layer_is_full(m, il);

    pkv_rmsnorm(w->x, x, L->attn_norm.data, hp->n_embd, n_tok, hp->rms_eps);
    matmul(s, &L->wq, w->x, n_tok, w->q);
    matmul(s, &L->wk, w->x, n_tok, w->k);
    matmul(s, &L->wv, w->x, n_tok, w->v);
    if (pkv_tensor_present(&L->bq)) {
        pkv_add_bias(w->q, L->bq.data, (int)L->bq.ne[0], n_tok);
        pkv_add_bias(w->k, L->bk.data, (int)L->bk.ne[0], n_tok);
        pkv_add_bias(w->v, L->bv.data, (int)L->bv.ne[0], n_tok);
    }
    if (pkv_tensor_present(&L->q_norm)) {
        head_norm(w->q, &L->q_norm, n_tok, hp->n_head, hp->head_dim_k, hp->rms_eps);
        head_norm(w->k, &L->k_norm, n_tok, hp->n_head_kv, hp->head_dim_k, hp->rms_eps);
    }
    const pkv_rope_params *rope = swa ? &hp->rope_local : &hp->rope_global;
    const float *inv_freq = swa ? w->inv_freq_local : w->inv_freq_global;
    pkv_rope(w->q, n_tok, hp->n_head, hp->head_dim_k, pos, rope, inv_freq);
    pkv_rope(w->k, n_tok, hp->n_head_kv, hp->head_dim_k, pos, rope, inv_freq);

    if (pkv_kvcache_reserve(&s->cache, il, n_tok, err)) return -1;
    pkv_kvcache_append(&s->cache, s->comp.kern, il, w->k, w->v, pos, n_tok);

    pkv_attn_params ap = {.n_head = hp->n_head, .scale = hp->attn_scale, .softcap = hp->attn_logit_softcap};
    pkv_attention(&s->comp, &s->cache, il, &ap, w->q, pos, n_tok, w->att);
    matmul(s, &L->wo, w->att, n_tok, w->proj);
    if (pkv_tensor_present(&L->post_attn_norm))
        pkv_rmsnorm(w->proj, w->proj, L->post_attn_norm.data, hp->n_embd, n_tok, hp->rms_eps);
    pkv_add(x, w->proj, (int64_t)n_tok * hp->n_embd);
    return 0;
}

/* Feed-forward block: GeGLU (Gemma) or SwiGLU (Llama, Qwen2). */
static void ffn_block(pkv_session *s, int il, float *x, int n_tok) {
    const pkv_model *m = s->model;
    const pkv_hparams *hp = &m->hp;
    const pkv_layer_weights *L = &m->layers[il];
    pkv_work *w = &s->work;

    pkv_rmsnorm(w->x, x, L->ffn_norm.data, hp->n_embd, n_tok, hp->rms_eps);
    matmul(s, &L->w_gate, w->x, n_tok, w->gate);
    matmul(s, &L->w_up, w->x, n_tok, w->up);
    if (m->arch->act == PKV_ACT_GELU_TANH) pkv_gelu_tanh_mul(w->gate, w->up, (int64_t)n_tok * hp->n_ff);
    else pkv_silu_mul(w->gate, w->up, (int64_t)n_tok * hp->n_ff);
    matmul(s, &L->w_down, w->gate, n_tok, w->proj);
    if (pkv_tensor_present(&L->post_ffn_norm))
        pkv_rmsnorm(w->proj, w->proj, L->post_ffn_norm.data, hp->n_embd, n_tok, hp->rms_eps);
    pkv_add(x, w->proj, (int64_t)n_tok * hp->n_embd);
}

/* ---------------------------------------------------------------- logits */

/* logits[r] = output . rmsnorm(h[r]) for n_rows rows. */
static void compute_logits(pkv_session *s, const float *h, int n_rows, float *logits) {
    const pkv_model *m = s->model;
    pkv_work *w = &s->work;
    pkv_rmsnorm(w->x, h, m->output_norm.data, m->hp.n_embd, n_rows, m->hp.rms_eps);
    matmul(s, &m->output, w->x, n_rows, logits);
    float cap = m->hp.final_logit_softcap;
    if (cap > 0.0f)
        for (int64_t i = 0; i < (int64_t)n_rows * m->hp.n_vocab; i++) logits[i] = cap * tanhf(logits[i] / cap);
}

/* ---------------------------------------------------------------- the pass */

int pkv_forward(pkv_session *s, const int32_t *tokens, int n, pkv_row_logits_fn row_fn, void *user, pkv_error *err) {
    const pkv_model *m = s->model;
    const pkv_hparams *hp = &m->hp;
    pkv_work *w = &s->work;
    int n_batch = s->opts.n_batch;
    int chunk_cap = n < n_batch ? n : n_batch;
    if (ensure_chunk_buffers(s, chunk_cap < LOGIT_ROWS ? LOGIT_ROWS : chunk_cap, err)) return -1;
    if (ensure_hidden(s, n, err)) return -1;
    if (row_fn && !w->logit_rows &&
        grow((void **)&w->logit_rows, (size_t)LOGIT_ROWS * hp->n_vocab * sizeof(float), err))
        return -1;

    /* embeddings: x = token_embd[tok] * embd_scale */
    for (int t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= hp->n_vocab)
            return pkv_fail(err, PKV_ERR_ARG, "token %d at index %d is outside the vocabulary [0, %d)", tokens[t],
                            t, hp->n_vocab);
    }
    for (int t = 0; t < n; t++) {
        float *row = w->hidden + (int64_t)t * hp->n_embd;
        pkv_get_row(&s->comp, &m->tok_embd, tokens[t], row);
        if (hp->embd_scale != 1.0f)
            for (int i = 0; i < hp->n_embd; i++) row[i] *= hp->embd_scale;
    }

    for (int il = 0; il < hp->n_layer; il++) {
        if (s->interrupted) return pkv_fail(err, PKV_ERR_INTERRUPTED, "interrupted at layer %d", il);
        for (int c0 = 0; c0 < n; c0 += n_batch) {
            int nc = n - c0 < n_batch ? n - c0 : n_batch;
            for (int t = 0; t < nc; t++) w->pos[t] = s->n_pos + c0 + t;
            float *x = w->hidden + (int64_t)c0 * hp->n_embd;
            if (attention_block(s, il, x, w->pos, nc, err)) return -1;
            ffn_block(s, il, x, nc);
            /* sliding-window layers keep only what the next chunk can see */
            pkv_kvcache_trim_window(&s->cache, il, s->n_pos + c0 + nc);
        }
    }

    if (row_fn) {
        for (int r0 = 0; r0 < n; r0 += LOGIT_ROWS) {
            int nr = n - r0 < LOGIT_ROWS ? n - r0 : LOGIT_ROWS;
            compute_logits(s, w->hidden + (int64_t)r0 * hp->n_embd, nr, w->logit_rows);
            for (int r = 0; r < nr; r++) row_fn(user, r0 + r, w->logit_rows + (int64_t)r * hp->n_vocab);
        }
        memcpy(s->logits, w->logit_rows + (int64_t)((n - 1) % LOGIT_ROWS) * hp->n_vocab,
               (size_t)hp->n_vocab * sizeof(float));
    } else {
        compute_logits(s, w->hidden + (int64_t)(n - 1) * hp->n_embd, 1, s->logits);
    }
    s->n_pos += n;
    return 0;
}
