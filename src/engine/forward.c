/*
 * The forward pass, read top to bottom (engine-notes.md §3.1 for Gemma 3,
 * §3.4 for Llama and Qwen2).
 *
 * The pass is layer-major: all tokens of the call go through layer 0 (in
 * chunks of n_batch, so activations stay bounded), then layer 1, and so on.
 * The residual stream of the call is kept between layers. A press therefore
 * compresses layer l's cache as soon as layer l has seen the whole prompt,
 * and only one layer's uncompressed K/V is alive at a time (design.md).
 * Prefill attention always sees the full rows; only what decode reads is
 * compressed (algorithms.md A.2).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "cache/attention.h"
#include "engine/session.h"

enum { LOGIT_ROWS = 16 }; /* logits computed this many rows at a time when every row is wanted */

/* ---------------------------------------------------------------- buffers */

static int grow(void **p, size_t bytes, pkv_error *err) {
    void *q = realloc(*p, bytes ? bytes : 1);
    if (!q) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory allocating %zu bytes of activations", bytes);
    *p = q;
    return 0;
}

static int64_t widest_input(const pkv_model *m) {
    const pkv_hparams *hp = &m->hp;
    int64_t widest = hp->n_embd;
    if (hp->n_ff > widest) widest = hp->n_ff;
    if ((int64_t)hp->n_head * hp->head_dim_v > widest) widest = (int64_t)hp->n_head * hp->head_dim_v;
    return widest;
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
    w->act_bytes = pkv_matmul_scratch_bytes(widest_input(s->model), n_tok, pkv_pool_size(s->pool));
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

static int ensure_attn_scratch(pkv_session *s, int layer, pkv_error *err) {
    size_t need = pkv_attention_scratch_floats(&s->cache, layer, s->model->hp.n_head, pkv_pool_size(s->pool));
    if (s->work.attn_scratch_cap >= need) return 0;
    need += need / 2; /* room for the rows decode will add */
    if (grow((void **)&s->work.attn_scratch, need * sizeof(float), err)) return -1;
    s->work.attn_scratch_cap = need;
    return 0;
}

/* ---------------------------------------------------------------- the memory cap */

/* Bytes of activations and scratch the session holds (the work buffers, the
 * press arena, the probes). */
static uint64_t work_bytes(const pkv_session *s) {
    const pkv_hparams *hp = &s->model->hp;
    const pkv_work *w = &s->work;
    uint64_t per_tok = (uint64_t)hp->n_embd * 2 + (uint64_t)hp->n_head * (hp->head_dim_k + hp->head_dim_v) +
                       (uint64_t)hp->n_head_kv * (hp->head_dim_k + hp->head_dim_v) + 2 * (uint64_t)hp->n_ff + 1;
    uint64_t b = (uint64_t)w->n_tok_cap * per_tok * sizeof(float) + w->act_bytes;
    b += (uint64_t)w->hidden_cap * hp->n_embd * sizeof(float);
    b += w->logit_rows ? (uint64_t)LOGIT_ROWS * hp->n_vocab * sizeof(float) : 0;
    b += w->attn_scratch_cap * sizeof(float) + s->arena.peak;
    for (int il = 0; il < hp->n_layer; il++) {
        const pkv_layer_probe *p = &s->probes[il];
        b += (uint64_t)p->window * ((uint64_t)hp->n_head * hp->head_dim_k + 1) * sizeof(float);
        b += (uint64_t)p->acc_rows * hp->n_head * sizeof(float);
    }
    return b;
}

/* With a cap (pkv_session_opts.mem_cap_bytes), the KV cache plus activations
 * may not exceed it: a clear error instead of running the machine out of memory. */
static int check_mem_cap(pkv_session *s, int layer, pkv_error *err) {
    uint64_t cache = pkv_kvcache_alloc_bytes(&s->cache), work = work_bytes(s);
    if (cache + work > s->peak_mem) s->peak_mem = cache + work;
    uint64_t cap = s->opts.mem_cap_bytes;
    if (!cap || cache + work <= cap) return 0;
    return pkv_fail(err, PKV_ERR_LIMIT,
                    "memory cap of %.1f MiB exceeded at layer %d: KV cache %.1f MiB + activations %.1f MiB",
                    cap / 1048576.0, layer, cache / 1048576.0, work / 1048576.0);
}

uint64_t pkv_session_mem_bytes(const pkv_session *s) { return pkv_kvcache_alloc_bytes(&s->cache) + work_bytes(s); }

uint64_t pkv_session_peak_mem_bytes(const pkv_session *s) { return s->peak_mem; }

/* ---------------------------------------------------------------- probes: what a press needs */

/* Sizes layer il's probe for this call: `window` queries and, if asked,
 * attention sums over the rows the layer will hold at the end of the call. */
static int probe_prepare(pkv_session *s, int il, const pkv_probe_cfg *pc, int n_new, pkv_error *err) {
    const pkv_hparams *hp = &s->model->hp;
    pkv_layer_probe *p = &s->probes[il];
    p->window = pc->window < n_new ? pc->window : n_new;
    p->n_new = n_new;
    p->first_pos = s->n_pos;
    if (grow((void **)&p->q, (size_t)hp->n_head * p->window * hp->head_dim_k * sizeof(float), err) ||
        grow((void **)&p->q_pos, (size_t)p->window * sizeof(int32_t), err))
        return -1;
    if (!pc->attn_sums) {
        p->acc_rows = 0;
        return 0;
    }
    const pkv_kv_layer *L = &s->cache.layers[il];
    if (!p->acc) {
        p->acc = calloc((size_t)hp->n_head, sizeof(float *));
        if (!p->acc) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for attention sums of layer %d", il);
    }
    int64_t rows = 0;
    for (int h = 0; h < L->n_heads; h++)
        if (L->heads[h].n_rows > rows) rows = L->heads[h].n_rows;
    rows += n_new;
    /* every query head has its own sums, sized to the layer's largest head */
    for (int h = 0; h < hp->n_head; h++) {
        if (grow((void **)&p->acc[h], (size_t)rows * sizeof(float) + 4, err)) return -1;
        memset(p->acc[h], 0, (size_t)rows * sizeof(float));
    }
    p->acc_rows = rows;
    return 0;
}

/* Copies the post-RoPE queries of the chunk's window tokens into the probe. */
static void probe_capture(pkv_layer_probe *p, const pkv_hparams *hp, const float *q, const int32_t *pos, int c0,
                          int nc) {
    int first = p->n_new - p->window;
    for (int t = 0; t < nc; t++) {
        int r = c0 + t - first;
        if (r < 0) continue;
        p->q_pos[r] = pos[t];
        for (int h = 0; h < hp->n_head; h++)
            memcpy(p->q + ((size_t)h * p->window + r) * hp->head_dim_k,
                   q + ((size_t)t * hp->n_head + h) * hp->head_dim_k, (size_t)hp->head_dim_k * sizeof(float));
    }
}

/* Runs the press on layer il from a probe and keeps only its selection in the cache. */
int pkv_press_layer(pkv_session *s, const pkv_layer_probe *probe, const pkv_press_cfg *cfg, int il,
                    pkv_forward_stats *stats, pkv_error *err) {
    double t0 = pkv_now_seconds();
    const pkv_hparams *hp = &s->model->hp;
    pkv_kvcache *c = &s->cache;
    pkv_kv_layer *L = &c->layers[il];
    const pkv_press_ops *ops = cfg->ops;
    pkv_arena *arena = &s->arena;
    pkv_arena_reset(arena);
    int nkv = L->n_heads;
    if (nkv != hp->n_head_kv)
        return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                        "layer %d already holds one head per query head; recompressing it is not supported", il);
    if (ops->needs_attn_sum && !probe->acc_rows)
        return pkv_fail(err, PKV_ERR_ARG, "press %s needs attention sums that this prefill did not keep", ops->name);
    /* the press window: the newest queries of those kept */
    int window = cfg->window < probe->window ? cfg->window : probe->window;
    if (window < 1) window = 1;
    const float *q = probe->q;
    if (window < probe->window) {
        float *sub = pkv_arena_alloc(arena, (size_t)hp->n_head * window * hp->head_dim_k * sizeof(float));
        if (!sub) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory pressing layer %d", il);
        for (int h = 0; h < hp->n_head; h++)
            memcpy(sub + (size_t)h * window * hp->head_dim_k,
                   probe->q + ((size_t)h * probe->window + probe->window - window) * hp->head_dim_k,
                   (size_t)window * hp->head_dim_k * sizeof(float));
        q = sub;
    }

    int *n_rows = pkv_arena_alloc(arena, (size_t)nkv * sizeof(int));
    const float **keys = pkv_arena_alloc(arena, (size_t)nkv * sizeof(float *));
    const float **values = pkv_arena_alloc(arena, (size_t)nkv * sizeof(float *));
    const int32_t **pos = pkv_arena_alloc(arena, (size_t)nkv * sizeof(int32_t *));
    int32_t **counts = pkv_arena_alloc(arena, (size_t)nkv * sizeof(int32_t *));
    if (!n_rows || !keys || !values || !pos || !counts)
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory pressing layer %d", il);
    for (int g = 0; g < nkv; g++) {
        pkv_kv_head *h = &L->heads[g];
        n_rows[g] = h->n_rows;
        pos[g] = h->pos;
        if (c->type == PKV_CACHE_F32) {
            /* presses read f32 rows: an f32 cache is handed over as it is */
            keys[g] = h->k;
            values[g] = h->v;
        } else {
            float *k = pkv_arena_alloc(arena, (size_t)h->n_rows * L->head_dim_k * sizeof(float) + 4);
            if (!k) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory reading layer %d keys", il);
            pkv_kvcache_read_k(c, s->comp.kern, il, g, k);
            keys[g] = k;
            if (ops->needs_values) {
                float *v = pkv_arena_alloc(arena, (size_t)h->n_rows * L->head_dim_v * sizeof(float) + 4);
                if (!v) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory reading layer %d values", il);
                pkv_kvcache_read_v(c, s->comp.kern, il, g, v);
                values[g] = v;
            }
        }
        if (ops->needs_attn_sum) {
            if (h->n_rows > probe->acc_rows)
                return pkv_fail(err, PKV_ERR_INTERNAL, "layer %d: attention sums cover %lld rows, the head has %d", il,
                                (long long)probe->acc_rows, h->n_rows);
            /* queries of the call that could see each row (causal) */
            counts[g] = pkv_arena_alloc(arena, (size_t)h->n_rows * sizeof(int32_t) + 4);
            if (!counts[g]) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory pressing layer %d", il);
            int32_t end = probe->first_pos + probe->n_new;
            for (int j = 0; j < h->n_rows; j++)
                counts[g][j] = h->pos[j] < probe->first_pos ? probe->n_new : end - h->pos[j];
        }
    }
    /* the layer schedule (PyramidKV) runs over the pressed, full-attention layers */
    int press_layer = 0, n_press_layers = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        if (!pkv_layer_is_full(s->model, l)) continue;
        if (l < il) press_layer++;
        n_press_layers++;
    }
    pkv_press_input in = {
        .layer = il,
        .n_layers = hp->n_layer,
        .press_layer = press_layer,
        .n_press_layers = n_press_layers,
        .n_head = hp->n_head,
        .n_head_kv = nkv,
        .head_dim_k = L->head_dim_k,
        .head_dim_v = L->head_dim_v,
        .attn_scale = hp->attn_scale,
        .window = window,
        .q_window = q,
        .q_pos = probe->q_pos + (probe->window - window),
        .n_rows = n_rows,
        .keys = keys,
        .values = ops->needs_values ? values : NULL,
        .pos = pos,
        .attn_sum = ops->needs_attn_sum ? (const float *const *)probe->acc : NULL,
        .attn_count = ops->needs_attn_sum ? (const int32_t *const *)counts : NULL,
        .comp = &s->comp,
        .arena = arena,
        .seed = cfg->seed,
    };
    pkv_press_selection sel;
    if (pkv_press_run(cfg, &in, &sel, err)) return -1;
    if (check_mem_cap(s, il, err)) return -1; /* the press's scratch counts too */

    int64_t before = pkv_kvcache_layer_rows(c, il);
    if (sel.per_query_head) {
        if (pkv_kvcache_split_heads(c, il, sel.n_sel, (const int32_t *const *)sel.keep, sel.n_keep, 16, err))
            return -1;
    } else {
        for (int g = 0; g < nkv; g++)
            if (pkv_kvcache_keep_rows(c, il, g, sel.keep[g], sel.n_keep[g], 16, err)) return -1;
    }
    if (stats) {
        stats->compressed = true;
        stats->rows_before += before;
        stats->rows_after += pkv_kvcache_layer_rows(c, il);
        stats->press_seconds += pkv_now_seconds() - t0;
    }
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

/* Attention block of layer il for the chunk's tokens at positions pos; x is
 * the chunk's slice of the residual stream, updated in place. */
static int attention_block(pkv_session *s, int il, float *x, const int32_t *pos, int n_tok, float *const *acc,
                           pkv_error *err) {
    const pkv_model *m = s->model;
    const pkv_hparams *hp = &m->hp;
    const pkv_layer_weights *L = &m->layers[il];
    pkv_work *w = &s->work;
    bool swa = !pkv_layer_is_full(m, il);

    pkv_rmsnorm(w->x, x, L->attn_norm.data, hp->n_embd, n_tok, hp->rms_eps);
    const pkv_tensor *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[3] = {w->q, w->k, w->v};
    pkv_matmul_n(&s->comp, 3, qkv, w->x, n_tok, qkv_out, s->work.act);
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
    if (ensure_attn_scratch(s, il, err)) return -1;
    if (check_mem_cap(s, il, err)) return -1;

    pkv_attn_params ap = {
        .n_head = hp->n_head, .scale = hp->attn_scale, .softcap = hp->attn_logit_softcap, .acc_probs = acc};
    pkv_attention(&s->comp, &s->cache, il, &ap, w->q, pos, n_tok, w->att, w->attn_scratch);
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
    const pkv_tensor *gate_up[2] = {&L->w_gate, &L->w_up};
    float *gate_up_out[2] = {w->gate, w->up};
    pkv_matmul_n(&s->comp, 2, gate_up, w->x, n_tok, gate_up_out, s->work.act);
    if (m->arch->act == PKV_ACT_GELU_TANH) pkv_gelu_tanh_mul(&s->comp, w->gate, w->up, (int64_t)n_tok * hp->n_ff);
    else pkv_silu_mul(&s->comp, w->gate, w->up, (int64_t)n_tok * hp->n_ff);
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

int pkv_forward(pkv_session *s, const int32_t *tokens, int n, const pkv_press_cfg *press,
                const pkv_probe_cfg *probe_cfg, pkv_row_logits_fn row_fn, void *user, pkv_forward_stats *stats,
                pkv_error *err) {
    const pkv_model *m = s->model;
    const pkv_hparams *hp = &m->hp;
    pkv_work *w = &s->work;
    int n_batch = s->opts.n_batch;
    int chunk_cap = n < n_batch ? n : n_batch;
    if (stats) memset(stats, 0, sizeof *stats);
    if (s->broken)
        return pkv_fail(err, PKV_ERR_ARG,
                        "an earlier call on this session stopped midway (interrupted or out of memory): reset it first");
    if (ensure_chunk_buffers(s, chunk_cap < LOGIT_ROWS ? LOGIT_ROWS : chunk_cap, err)) return -1;
    if (ensure_hidden(s, n, err)) return -1;
    if (row_fn && !w->logit_rows &&
        grow((void **)&w->logit_rows, (size_t)LOGIT_ROWS * hp->n_vocab * sizeof(float), err))
        return -1;
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= hp->n_vocab)
            return pkv_fail(err, PKV_ERR_ARG, "token %d at index %d is outside the vocabulary [0, %d)", tokens[t],
                            t, hp->n_vocab);
    if (press && !press->ops) press = NULL;
    /* what the full layers must keep for the press (now) and for copies (later) */
    pkv_probe_cfg pc = {0};
    if (press) {
        pc.window = press->window;
        pc.attn_sums = press->ops->needs_attn_sum;
    }
    if (probe_cfg) {
        if (probe_cfg->window > pc.window) pc.window = probe_cfg->window;
        pc.attn_sums |= probe_cfg->attn_sums;
    }
    bool probing = pc.window > 0;
    s->probes_ok = false;

    /* embeddings: x = token_embd[tok] * embd_scale */
    for (int t = 0; t < n; t++) {
        float *row = w->hidden + (int64_t)t * hp->n_embd;
        pkv_get_row(&s->comp, &m->tok_embd, tokens[t], row);
        if (hp->embd_scale != 1.0f)
            for (int i = 0; i < hp->n_embd; i++) row[i] *= hp->embd_scale;
    }

    /* from here on a failure leaves layers at different lengths: the session needs a reset */
    s->broken = true;
    for (int il = 0; il < hp->n_layer; il++) {
        if (atomic_load(&s->interrupted)) return pkv_fail(err, PKV_ERR_INTERRUPTED, "interrupted at layer %d", il);
        /* sliding-window layers are never pressed (D.6): only full layers are probed */
        bool probed = probing && pkv_layer_is_full(m, il);
        pkv_layer_probe *probe = &s->probes[il];
        if (probed && probe_prepare(s, il, &pc, n, err)) return -1;
        for (int c0 = 0; c0 < n; c0 += n_batch) {
            int nc = n - c0 < n_batch ? n - c0 : n_batch;
            for (int t = 0; t < nc; t++) w->pos[t] = s->n_pos + c0 + t;
            float *x = w->hidden + (int64_t)c0 * hp->n_embd;
            if (attention_block(s, il, x, w->pos, nc, probed && pc.attn_sums ? probe->acc : NULL, err)) return -1;
            if (probed) probe_capture(probe, hp, w->q, w->pos, c0, nc);
            ffn_block(s, il, x, nc);
            /* sliding-window layers keep only what the next chunk can see */
            pkv_kvcache_trim_window(&s->cache, il, s->n_pos + c0 + nc);
        }
        if (probed && press && pkv_press_layer(s, probe, press, il, stats, err)) return -1;
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
    s->broken = false;
    /* the probes describe an uncompressed cache only if no press ran */
    s->probes_ok = probing && !press;
    /* a long prompt's residual stream and press scratch are not needed by decode: give them back */
    if (w->hidden_cap > n_batch) {
        free(w->hidden);
        w->hidden = NULL;
        w->hidden_cap = 0;
    }
    pkv_arena_free(&s->arena);
    return 0;
}
