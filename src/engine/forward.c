/*
 * The forward pass, read top to bottom (docs/engine.md §3.1 for Gemma 3,
 * §3.4 for Llama and Qwen2).
 *
 * The pass is layer-major: all tokens of the call go through layer 0 (in
 * chunks of n_batch, so activations stay bounded), then layer 1, and so on.
 * The residual stream of the call is kept between layers. A press therefore
 * compresses layer l's cache as soon as layer l has seen the whole prompt,
 * and only one layer's uncompressed K/V is alive at a time (docs/design.md).
 * Prefill attention always sees the full rows; only what decode reads is
 * compressed (docs/presses.md A.2).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cache/attention.h"
#include "engine/forward.h"
#include "engine/stream.h"

/* ---------------------------------------------------------------- buffers */

static int64_t widest_input(const pkv_model *m) {
    const pkv_hparams *hp = &m->hp;
    int64_t widest = hp->n_embd;
    if (hp->n_ff > widest) widest = hp->n_ff;
    if ((int64_t)hp->n_head * hp->head_dim_v > widest) widest = (int64_t)hp->n_head * hp->head_dim_v;
    return widest;
}

int pkv_work_reserve(const pkv_model *m, const pkv_pool *pool, pkv_work *w, int n_tok, pkv_error *err) {
    if (w->n_tok_cap >= n_tok) return 0;
    const pkv_hparams *hp = &m->hp;
    size_t n = (size_t)n_tok;
    size_t q_dim = (size_t)hp->n_head * hp->head_dim_k, kv_dim = (size_t)hp->n_head_kv * hp->head_dim_k,
           v_dim = (size_t)hp->n_head_kv * hp->head_dim_v, att_dim = (size_t)hp->n_head * hp->head_dim_v;
    if (pkv_work_grow((void **)&w->x, n * hp->n_embd * sizeof(float), err) ||
        pkv_work_grow((void **)&w->q, n * q_dim * sizeof(float), err) ||
        pkv_work_grow((void **)&w->k, n * kv_dim * sizeof(float), err) ||
        pkv_work_grow((void **)&w->v, n * v_dim * sizeof(float), err) ||
        pkv_work_grow((void **)&w->att, n * att_dim * sizeof(float), err) ||
        pkv_work_grow((void **)&w->proj, n * hp->n_embd * sizeof(float), err) ||
        pkv_work_grow((void **)&w->gate, n * hp->n_ff * sizeof(float), err) ||
        pkv_work_grow((void **)&w->up, n * hp->n_ff * sizeof(float), err) ||
        pkv_work_grow((void **)&w->pos, n * sizeof(int32_t), err))
        return -1;
    w->act_bytes = pkv_matmul_scratch_bytes(widest_input(m), n_tok, pkv_pool_size(pool));
    if (pkv_work_grow(&w->act, w->act_bytes, err)) return -1;
    w->n_tok_cap = n_tok;
    return 0;
}

void pkv_work_free(pkv_work *w) {
    free(w->x);
    free(w->q);
    free(w->k);
    free(w->v);
    free(w->att);
    free(w->proj);
    free(w->gate);
    free(w->up);
    free(w->act);
    free(w->pos);
    free(w->hidden);
    free(w->packed);
    free(w->packed_exp);
    pkv_spill_close(&w->spill);
    free(w->logit_rows);
    free(w->inv_freq_global);
    free(w->inv_freq_local);
    free(w->attn_scratch);
    memset(w, 0, sizeof *w);
}

static pkv_layer_ctx ctx_of(pkv_session *s) { return (pkv_layer_ctx){s->model, &s->comp, &s->work}; }

/* The call's token embeddings as its residual stream (engine/stream.h). */
static int embed_call(pkv_session *s, const int32_t *tokens, int n, pkv_error *err) {
    pkv_layer_ctx c = ctx_of(s);
    int step = s->work.packed_n ? s->opts.n_batch : n;
    for (int r0 = 0; r0 < n; r0 += step) {
        int nr = n - r0 < step ? n - r0 : step;
        float *rows = s->work.packed_n ? s->work.hidden : s->work.hidden + (int64_t)r0 * s->model->hp.n_embd;
        pkv_embed_rows(&c, tokens + r0, nr, rows);
        if (pkv_stream_keep(s, r0, nr, err)) return -1;
    }
    return 0;
}

int pkv_work_attn_scratch(pkv_work *w, size_t need, pkv_error *err) {
    if (w->attn_scratch_cap >= need) return 0;
    need += need / 2; /* room for the rows decode will add */
    if (pkv_work_grow((void **)&w->attn_scratch, need * sizeof(float), err)) return -1;
    w->attn_scratch_cap = need;
    return 0;
}

static int ensure_attn_scratch(pkv_session *s, int layer, pkv_error *err) {
    size_t need = pkv_attention_scratch_floats(&s->cache, layer, s->model->hp.n_head, pkv_pool_size(s->pool));
    return pkv_work_attn_scratch(&s->work, need, err);
}

/* ---------------------------------------------------------------- one layer's blocks */

static void matmul(const pkv_layer_ctx *c, const pkv_tensor *wt, const float *x, int n_tok, float *y) {
    pkv_matmul(c->comp, wt, x, n_tok, y, c->work->act);
}

/* Per-head RMSNorm over head_dim (Gemma 3 QK-norm). */
static void head_norm(float *x, const pkv_tensor *w, int n_tok, int n_heads, int head_dim, float eps) {
    pkv_rmsnorm(x, x, w->data, head_dim, n_tok * n_heads, eps);
}

void pkv_layer_qkv(const pkv_layer_ctx *c, int il, const float *x, const int32_t *pos, int n_tok,
                   pkv_layer_probe *probe) {
    const pkv_hparams *hp = &c->model->hp;
    const pkv_layer_weights *L = &c->model->layers[il];
    pkv_work *w = c->work;
    pkv_rmsnorm(w->x, x, L->attn_norm.data, hp->n_embd, n_tok, hp->rms_eps);
    const pkv_tensor *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[3] = {w->q, w->k, w->v};
    pkv_matmul_n(c->comp, 3, qkv, w->x, n_tok, qkv_out, w->act);
    if (pkv_tensor_present(&L->bq)) {
        pkv_add_bias(w->q, L->bq.data, (int)L->bq.ne[0], n_tok);
        pkv_add_bias(w->k, L->bk.data, (int)L->bk.ne[0], n_tok);
        pkv_add_bias(w->v, L->bv.data, (int)L->bv.ne[0], n_tok);
    }
    if (pkv_tensor_present(&L->q_norm)) {
        head_norm(w->q, &L->q_norm, n_tok, hp->n_head, hp->head_dim_k, hp->rms_eps);
        head_norm(w->k, &L->k_norm, n_tok, hp->n_head_kv, hp->head_dim_k, hp->rms_eps);
    }
    /* Expected Attention's statistics are of the queries before RoPE */
    if (probe) pkv_probe_query_stats(probe, hp, c->comp, w->q, pos, n_tok);
}

void pkv_layer_rope(const pkv_layer_ctx *c, int il, int row, const int32_t *pos, int n_tok, const pkv_work *freqs) {
    const pkv_hparams *hp = &c->model->hp;
    bool swa = !pkv_layer_is_full(c->model, il);
    const pkv_rope_params *rope = swa ? &hp->rope_local : &hp->rope_global;
    const float *inv_freq = swa ? freqs->inv_freq_local : freqs->inv_freq_global;
    pkv_work *w = c->work;
    pkv_rope(w->q + (int64_t)row * hp->n_head * hp->head_dim_k, n_tok, hp->n_head, hp->head_dim_k, pos, rope,
             inv_freq);
    pkv_rope(w->k + (int64_t)row * hp->n_head_kv * hp->head_dim_k, n_tok, hp->n_head_kv, hp->head_dim_k, pos, rope,
             inv_freq);
}

void pkv_layer_attn_out(const pkv_layer_ctx *c, int il, float *x, int n_tok) {
    const pkv_hparams *hp = &c->model->hp;
    const pkv_layer_weights *L = &c->model->layers[il];
    pkv_work *w = c->work;
    matmul(c, &L->wo, w->att, n_tok, w->proj);
    if (pkv_tensor_present(&L->post_attn_norm))
        pkv_rmsnorm(w->proj, w->proj, L->post_attn_norm.data, hp->n_embd, n_tok, hp->rms_eps);
    pkv_add(x, w->proj, (int64_t)n_tok * hp->n_embd);
}

/* Feed-forward block: GeGLU (Gemma) or SwiGLU (Llama, Qwen2). */
void pkv_layer_ffn(const pkv_layer_ctx *c, int il, float *x, int n_tok) {
    const pkv_model *m = c->model;
    const pkv_hparams *hp = &m->hp;
    const pkv_layer_weights *L = &m->layers[il];
    pkv_work *w = c->work;

    pkv_rmsnorm(w->x, x, L->ffn_norm.data, hp->n_embd, n_tok, hp->rms_eps);
    const pkv_tensor *gate_up[2] = {&L->w_gate, &L->w_up};
    float *gate_up_out[2] = {w->gate, w->up};
    pkv_matmul_n(c->comp, 2, gate_up, w->x, n_tok, gate_up_out, w->act);
    /* rowwise (the batched step): each row split as a one-row call splits it,
     * so that its vector and tail elements are the same bits as alone */
    int n_calls = c->comp->rowwise ? n_tok : 1;
    int64_t per_call = (int64_t)(n_tok / n_calls) * hp->n_ff;
    for (int r = 0; r < n_calls; r++) {
        float *g = w->gate + r * per_call;
        const float *u = w->up + r * per_call;
        if (m->arch->act == PKV_ACT_GELU_TANH) pkv_gelu_tanh_mul(c->comp, g, u, per_call);
        else pkv_silu_mul(c->comp, g, u, per_call);
    }
    matmul(c, &L->w_down, w->gate, n_tok, w->proj);
    if (pkv_tensor_present(&L->post_ffn_norm))
        pkv_rmsnorm(w->proj, w->proj, L->post_ffn_norm.data, hp->n_embd, n_tok, hp->rms_eps);
    pkv_add(x, w->proj, (int64_t)n_tok * hp->n_embd);
}

void pkv_layer_logits(const pkv_layer_ctx *c, const float *h, int n_rows, float *logits) {
    const pkv_model *m = c->model;
    pkv_work *w = c->work;
    pkv_rmsnorm(w->x, h, m->output_norm.data, m->hp.n_embd, n_rows, m->hp.rms_eps);
    matmul(c, &m->output, w->x, n_rows, logits);
    float cap = m->hp.final_logit_softcap;
    if (cap > 0.0f)
        for (int64_t i = 0; i < (int64_t)n_rows * m->hp.n_vocab; i++) logits[i] = cap * tanhf(logits[i] / cap);
}

void pkv_embed_rows(const pkv_layer_ctx *c, const int32_t *tokens, int n, float *hidden) {
    const pkv_hparams *hp = &c->model->hp;
    for (int t = 0; t < n; t++) {
        float *row = hidden + (int64_t)t * hp->n_embd;
        pkv_get_row(c->comp, &c->model->tok_embd, tokens[t], row);
        if (hp->embd_scale != 1.0f)
            for (int i = 0; i < hp->n_embd; i++) row[i] *= hp->embd_scale;
    }
}

/* ---------------------------------------------------------------- one layer, one chunk */

/* Attention block of layer il for the chunk's tokens at positions pos; x is
 * the chunk's slice of the residual stream, updated in place. */
static int attention_block(pkv_session *s, int il, float *x, const int32_t *pos, int n_tok, float *const *acc,
                           pkv_layer_probe *probe, pkv_error *err) {
    const pkv_hparams *hp = &s->model->hp;
    pkv_work *w = &s->work;
    pkv_layer_ctx c = ctx_of(s);
    pkv_layer_qkv(&c, il, x, pos, n_tok, probe);
    pkv_layer_rope(&c, il, 0, pos, n_tok, w);

    if (pkv_kvcache_reserve(&s->cache, il, n_tok, err)) return -1;
    pkv_kvcache_append(&s->cache, s->comp.kern, il, w->k, w->v, pos, n_tok);
    if (ensure_attn_scratch(s, il, err)) return -1;
    if (pkv_check_mem_cap(s, il, err)) return -1;

    pkv_attn_params ap = {
        .n_head = hp->n_head, .scale = hp->attn_scale, .softcap = hp->attn_logit_softcap, .acc_probs = acc};
    pkv_attention(&s->comp, &s->cache, il, &ap, w->q, pos, n_tok, w->att, w->attn_scratch);
    pkv_layer_attn_out(&c, il, x, n_tok);
    return 0;
}

/* ---------------------------------------------------------------- the pass */

/* Buffers for a call of n tokens, and its tokens checked against the vocabulary. */
static int prepare_call(pkv_session *s, const int32_t *tokens, int n, bool every_row, pkv_error *err) {
    const pkv_hparams *hp = &s->model->hp;
    if (s->broken)
        return pkv_fail(err, PKV_ERR_ARG,
                        "an earlier call on this session stopped midway (interrupted or out of memory): reset it first");
    int chunk_cap = n < s->opts.n_batch ? n : s->opts.n_batch;
    if (pkv_work_reserve(s->model, s->pool, &s->work, chunk_cap < PKV_LOGIT_ROWS ? PKV_LOGIT_ROWS : chunk_cap, err))
        return -1;
    if (pkv_stream_open(s, n, err)) return -1;
    if (every_row && !s->work.logit_rows &&
        pkv_work_grow((void **)&s->work.logit_rows, (size_t)PKV_LOGIT_ROWS * hp->n_vocab * sizeof(float), err))
        return -1;
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= hp->n_vocab)
            return pkv_fail(err, PKV_ERR_ARG, "token %d at index %d is outside the vocabulary [0, %d)", tokens[t],
                            t, hp->n_vocab);
    return 0;
}

/* Layer il over the call's n tokens, chunk by chunk; probe (may be NULL)
 * keeps the window queries and, when it was sized for them, the attention
 * sums (pkv_probe_prepare). */
static int layer(pkv_session *s, int il, int n, pkv_layer_probe *probe, pkv_error *err) {
    const pkv_hparams *hp = &s->model->hp;
    pkv_work *w = &s->work;
    int n_batch = s->opts.n_batch;
    pkv_layer_ctx c = ctx_of(s);
    /* A full-attention layer's rows for the whole call at once: a head's block
     * grown chunk by chunk moves its values to their new offset and leaves the
     * pages they held resident, half as much again as the rows themselves
     * (src/cache/kvcache.c; docs/compression.md). */
    if (pkv_layer_is_full(s->model, il) && pkv_kvcache_reserve(&s->cache, il, n, err)) return -1;
    for (int c0 = 0; c0 < n; c0 += n_batch) {
        int nc = n - c0 < n_batch ? n - c0 : n_batch;
        for (int t = 0; t < nc; t++) w->pos[t] = s->n_pos + c0 + t;
        float *x = pkv_stream_rows(s, c0, nc, err);
        if (!x) return -1;
        if (attention_block(s, il, x, w->pos, nc, probe && probe->acc_rows ? probe->acc : NULL, probe, err)) return -1;
        if (probe) pkv_probe_capture(probe, hp, w->q, w->pos, c0, nc);
        /* a reconstruction pass: the press scores the context by these queries */
        if (s->recon && pkv_layer_is_full(s->model, il) && pkv_recon_observe(s, il, w->q, c0, nc, err)) return -1;
        pkv_layer_ffn(&c, il, x, nc);
        if (pkv_stream_keep(s, c0, nc, err)) return -1;
        /* sliding-window layers keep only what the next chunk can see */
        pkv_kvcache_trim_window(&s->cache, il, s->n_pos + c0 + nc);
        if (s->opts.between_chunks) s->opts.between_chunks(s->opts.between_chunks_user);
    }
    return 0;
}

/* The last token's logits into s->logits; with row_fn, every token's to it. */
static int output_logits(pkv_session *s, int n, pkv_row_logits_fn row_fn, void *user, pkv_error *err) {
    const pkv_hparams *hp = &s->model->hp;
    pkv_work *w = &s->work;
    pkv_layer_ctx c = ctx_of(s);
    if (!row_fn) {
        const float *last = pkv_stream_rows(s, n - 1, 1, err);
        if (!last) return -1;
        pkv_layer_logits(&c, last, 1, s->logits);
        return 0;
    }
    for (int r0 = 0; r0 < n; r0 += PKV_LOGIT_ROWS) {
        int nr = n - r0 < PKV_LOGIT_ROWS ? n - r0 : PKV_LOGIT_ROWS;
        const float *rows = pkv_stream_rows(s, r0, nr, err);
        if (!rows) return -1;
        pkv_layer_logits(&c, rows, nr, w->logit_rows);
        for (int r = 0; r < nr; r++) row_fn(user, r0 + r, w->logit_rows + (int64_t)r * hp->n_vocab);
    }
    memcpy(s->logits, w->logit_rows + (int64_t)((n - 1) % PKV_LOGIT_ROWS) * hp->n_vocab,
           (size_t)hp->n_vocab * sizeof(float));
    return 0;
}

/* The pass (pkv_forward gives its buffers back, whether it failed or not). */
static int forward_call(pkv_session *s, const int32_t *tokens, int n, const pkv_press_cfg *press,
                        const pkv_probe_cfg *probe_cfg, pkv_row_logits_fn row_fn, void *user,
                        pkv_compress_stats *stats, pkv_error *err) {
    if (stats) memset(stats, 0, sizeof *stats);
    if (prepare_call(s, tokens, n, row_fn != NULL, err)) return -1;
    if (press && !press->ops) press = NULL;
    pkv_probe_cfg pc = pkv_probe_plan(press, probe_cfg);
    s->probes_ok = false;
    s->probe_gen++;

    if (embed_call(s, tokens, n, err)) return -1;
    /* from here on a failure leaves layers at different lengths: the session needs a reset */
    s->broken = true;
    for (int il = 0; il < s->model->hp.n_layer; il++) {
        if (atomic_load(&s->interrupted)) return pkv_fail(err, PKV_ERR_INTERRUPTED, "interrupted at layer %d", il);
        /* sliding-window layers are never pressed (D.6): only full layers are probed */
        pkv_layer_probe *probe = pc.window > 0 && pkv_layer_is_full(s->model, il) ? &s->probes[il] : NULL;
        if (probe && pkv_probe_prepare(s, il, &pc, n, err)) return -1;
        if (layer(s, il, n, probe, err)) return -1;
        if (probe && press && pkv_compress_layer(s, probe, press, il, stats, err)) return -1;
    }
    if (output_logits(s, n, row_fn, user, err)) return -1;

    s->n_pos += n;
    s->broken = false;
    /* the probes describe an uncompressed cache only if no press ran */
    s->probes_ok = pc.window > 0 && !press;
    return 0;
}

int pkv_forward(pkv_session *s, const int32_t *tokens, int n, const pkv_press_cfg *press,
                const pkv_probe_cfg *probe_cfg, pkv_row_logits_fn row_fn, void *user, pkv_compress_stats *stats,
                pkv_error *err) {
    int rc = forward_call(s, tokens, n, press, probe_cfg, row_fn, user, stats, err);
    /* a long prompt's residual stream (and its spill file) and the press's scratch are not needed by decode */
    pkv_stream_release(s);
    pkv_arena_free(&s->arena);
    return rc;
}
