/*
 * One decode step for several sessions at once (docs/design.md "Batched
 * decode"). Decoding one token is bound by reading the weights; a step of n
 * sessions reads every weight matrix once for the n rows (the matmuls of a
 * prefill chunk of n tokens), while each row's attention reads its own
 * session's cache — ragged per layer and head, pressed by its own press — at
 * its own position. The batch owns the buffers and threads of the step; the
 * sessions keep their caches, tokens and logits, and end exactly as n
 * pkv_decode calls would leave them, bit for bit: the matmuls take the
 * per-row dot path (pkv_compute.rowwise: each weight row read once, dotted
 * with every row's activations as a one-row matmul dots them), and the
 * activations are split per row as one row is.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cache/attention.h"
#include "engine/compress.h"
#include "engine/forward.h"
#include "engine/session.h"
#include "engine/state.h"

struct pkv_batch {
    const pkv_model *model;
    pkv_pool *pool;
    pkv_compute comp;
    pkv_work work;       /* the step's rows: one per session */
    float *hidden;       /* [cap][n_embd] the residual stream of the step */
    float *logits;       /* [cap][n_vocab] */
    const pkv_kvcache **caches; /* [cap] the step's sessions' caches */
    int cap;
};

pkv_batch *pkv_batch_new(pkv_model *model, int n_threads, pkv_error *err) {
    pkv_error_clear(err);
    if (!model) {
        pkv_fail(err, PKV_ERR_ARG, "pkv_batch_new: no model");
        return NULL;
    }
    pkv_batch *b = calloc(1, sizeof *b);
    if (!b || !(b->pool = pkv_pool_new(n_threads))) {
        free(b);
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory creating a batch");
        return NULL;
    }
    b->model = model;
    b->comp = (pkv_compute){.kern = model->kern, .pool = b->pool, .rowwise = true};
    return b;
}

void pkv_batch_free(pkv_batch *b) {
    if (!b) return;
    pkv_work_free(&b->work);
    free(b->hidden);
    free(b->logits);
    free(b->caches);
    pkv_pool_free(b->pool);
    free(b);
}

static int reserve(pkv_batch *b, int n, pkv_error *err) {
    const pkv_hparams *hp = &b->model->hp;
    if (pkv_work_reserve(b->model, b->pool, &b->work, n, err)) return -1;
    if (n <= b->cap) return 0;
    if (pkv_work_grow((void **)&b->hidden, (size_t)n * hp->n_embd * sizeof(float), err) ||
        pkv_work_grow((void **)&b->logits, (size_t)n * hp->n_vocab * sizeof(float), err) ||
        pkv_work_grow((void **)&b->caches, (size_t)n * sizeof *b->caches, err))
        return -1;
    b->cap = n;
    return 0;
}

/* The attention scratch of the step's layer il. */
static int attn_scratch(pkv_batch *b, int n, int il, pkv_error *err) {
    size_t need = pkv_attention_batch_scratch_floats(b->caches, n, il, b->model->hp.n_head, pkv_pool_size(b->pool));
    return pkv_work_attn_scratch(&b->work, need, err);
}

static int check_sessions(const pkv_batch *b, pkv_session *const *ss, int n, pkv_error *err) {
    if (n < 1) return pkv_fail(err, PKV_ERR_ARG, "pkv_batch_decode: no sessions");
    for (int i = 0; i < n; i++) {
        if (!ss[i]) return pkv_fail(err, PKV_ERR_ARG, "pkv_batch_decode: session %d is NULL", i);
        if (ss[i]->model != b->model)
            return pkv_fail(err, PKV_ERR_ARG, "pkv_batch_decode: session %d is of another model than the batch", i);
        for (int j = 0; j < i; j++)
            if (ss[j] == ss[i]) return pkv_fail(err, PKV_ERR_ARG, "pkv_batch_decode: session %d is also session %d", i, j);
    }
    return 0;
}

/* Layer il for the step's rows: shared matmuls, each row's attention on its
 * own session's cache. */
static int step_layer(pkv_batch *b, pkv_session *const *ss, int n, int il, pkv_error *err) {
    const pkv_hparams *hp = &b->model->hp;
    pkv_work *w = &b->work;
    pkv_layer_ctx c = {b->model, &b->comp, w};
    pkv_layer_qkv(&c, il, b->hidden, w->pos, n, NULL);
    size_t kv_row = (size_t)hp->n_head_kv * hp->head_dim_k, v_row = (size_t)hp->n_head_kv * hp->head_dim_v;
    for (int i = 0; i < n; i++) {
        pkv_session *s = ss[i];
        pkv_layer_rope(&c, il, i, &w->pos[i], 1, &s->work);
        if (pkv_kvcache_reserve(&s->cache, il, 1, err)) return -1;
        pkv_kvcache_append(&s->cache, b->comp.kern, il, w->k + i * kv_row, w->v + i * v_row, &w->pos[i], 1);
        if (pkv_check_mem_cap(s, il, err)) return -1;
    }
    if (attn_scratch(b, n, il, err)) return -1;
    pkv_attn_params ap = {.n_head = hp->n_head, .scale = hp->attn_scale, .softcap = hp->attn_logit_softcap};
    pkv_attention_batch(&b->comp, b->caches, n, il, &ap, w->q, w->pos, w->att, w->attn_scratch);
    pkv_layer_attn_out(&c, il, b->hidden, n);
    pkv_layer_ffn(&c, il, b->hidden, n);
    /* sliding-window layers keep only what the next step can see */
    for (int i = 0; i < n; i++) pkv_kvcache_trim_window(&ss[i]->cache, il, w->pos[i] + 1);
    return 0;
}

int pkv_batch_decode(pkv_batch *b, pkv_session *const *sessions, const int32_t *tokens, int n, pkv_error *err) {
    pkv_error_clear(err);
    if (check_sessions(b, sessions, n, err) || reserve(b, n, err)) return -1;
    /* every session checked before any changes: a refused step leaves them all as they were */
    for (int i = 0; i < n; i++) {
        if (atomic_load(&sessions[i]->interrupted))
            return pkv_fail(err, PKV_ERR_INTERRUPTED, "pkv_batch_decode: session %d was interrupted", i);
        if (pkv_session_check_step(sessions[i], tokens[i], err)) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return pkv_fail(err, err->code, "pkv_batch_decode: session %d: %s", i, msg);
        }
    }
    for (int i = 0; i < n; i++) {
        if (pkv_session_take_token(sessions[i], tokens[i], err)) return -1;
        b->work.pos[i] = sessions[i]->n_pos;
        b->caches[i] = &sessions[i]->cache;
    }
    pkv_layer_ctx c = {b->model, &b->comp, &b->work};
    pkv_embed_rows(&c, tokens, n, b->hidden);
    /* from here on a failure leaves layers at different lengths: every session needs a reset */
    for (int i = 0; i < n; i++) sessions[i]->broken = true;
    for (int il = 0; il < b->model->hp.n_layer; il++)
        if (step_layer(b, sessions, n, il, err)) return -1;
    pkv_layer_logits(&c, b->hidden, n, b->logits);
    const pkv_hparams *hp = &b->model->hp;
    for (int i = 0; i < n; i++) {
        pkv_session *s = sessions[i];
        memcpy(s->logits, b->logits + (size_t)i * hp->n_vocab, (size_t)hp->n_vocab * sizeof(float));
        s->n_pos++;
        s->broken = false;
    }
    return 0;
}
