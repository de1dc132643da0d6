/*
 * Compression, the cache <-> press adapter: what a prefill keeps of each
 * full-attention layer for a press (the probes: window queries, attention
 * sums), the press run on one layer (its rows handed over, its selection
 * kept), and the memory cap that the cache and the work buffers share.
 */
#include "engine/compress.h"

#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/threads.h"

/* ---------------------------------------------------------------- the memory cap */

/* Bytes of activations and scratch the session holds (the work buffers, the
 * press arena, the probes). */
uint64_t pkv_session_work_bytes(const pkv_session *s) {
    const pkv_hparams *hp = &s->model->hp;
    const pkv_work *w = &s->work;
    uint64_t per_tok = (uint64_t)hp->n_embd * 2 + (uint64_t)hp->n_head * (hp->head_dim_k + hp->head_dim_v) +
                       (uint64_t)hp->n_head_kv * (hp->head_dim_k + hp->head_dim_v) + 2 * (uint64_t)hp->n_ff + 1;
    uint64_t b = (uint64_t)w->n_tok_cap * per_tok * sizeof(float) + w->act_bytes;
    b += (uint64_t)w->hidden_cap * hp->n_embd * sizeof(float);
    b += (uint64_t)w->packed_cap * w->packed_row + (uint64_t)w->exp_cap;
    b += w->logit_rows ? (uint64_t)PKV_LOGIT_ROWS * hp->n_vocab * sizeof(float) : 0;
    b += w->attn_scratch_cap * sizeof(float) + s->arena.peak;
    for (int il = 0; il < hp->n_layer; il++) {
        const pkv_layer_probe *p = &s->probes[il];
        b += (uint64_t)p->window * ((uint64_t)hp->n_head * hp->head_dim_k + 1) * sizeof(float);
        b += (uint64_t)p->acc_rows * hp->n_head * sizeof(float);
        if (p->has_q_stats)
            b += (uint64_t)hp->n_head * hp->head_dim_k *
                 ((hp->head_dim_k + 1) * sizeof(double) + (PKV_QUERY_STATS_HEAD + s->opts.n_batch) * sizeof(float));
    }
    return b;
}

/* With a cap (pkv_session_opts.mem_cap_bytes), the KV cache plus activations
 * may not exceed it: a clear error instead of running the machine out of memory. */
int pkv_check_mem_cap(pkv_session *s, int layer, pkv_error *err) {
    uint64_t cache = pkv_kvcache_alloc_bytes(&s->cache), work = pkv_session_work_bytes(s);
    if (cache + work > s->peak_mem) s->peak_mem = cache + work;
    uint64_t cap = s->opts.mem_cap_bytes;
    if (!cap || cache + work <= cap) return 0;
    return pkv_fail(err, PKV_ERR_LIMIT,
                    "memory cap of %.1f MiB exceeded at layer %d: KV cache %.1f MiB + activations %.1f MiB",
                    cap / 1048576.0, layer, cache / 1048576.0, work / 1048576.0);
}

/* ---------------------------------------------------------------- probes: what a press needs */

pkv_probe_cfg pkv_probe_plan(const pkv_press_cfg *press, const pkv_probe_cfg *keep) {
    pkv_probe_cfg pc = {0};
    if (press) {
        pc.window = press->window;
        pc.attn_sums = press->ops->needs_attn_sum;
        pc.q_stats = press->ops->needs_query_stats;
    }
    if (keep) {
        if (keep->window > pc.window) pc.window = keep->window;
        pc.attn_sums |= keep->attn_sums;
        pc.q_stats |= keep->q_stats;
    }
    return pc;
}

/* Zeroed query statistics for a call (sums, the first queries, scratch). */
static int prepare_query_stats(pkv_session *s, pkv_layer_probe *p, pkv_error *err) {
    const pkv_hparams *hp = &s->model->hp;
    size_t hd = (size_t)hp->n_head * hp->head_dim_k;
    if (pkv_work_grow((void **)&p->q_sum, hd * sizeof(double), err) ||
        pkv_work_grow((void **)&p->q_sq, hd * hp->head_dim_k * sizeof(double), err) ||
        pkv_work_grow((void **)&p->q_head, hd * PKV_QUERY_STATS_HEAD * sizeof(float), err) ||
        pkv_work_grow((void **)&p->q_t, hd * (size_t)s->opts.n_batch * sizeof(float), err))
        return -1;
    memset(p->q_sum, 0, hd * sizeof(double));
    memset(p->q_sq, 0, hd * hp->head_dim_k * sizeof(double));
    p->has_q_stats = true;
    return 0;
}

/* Sizes layer il's probe for this call: `window` queries and, if asked,
 * attention sums over the rows the layer will hold at the end of the call. */
int pkv_probe_prepare(pkv_session *s, int il, const pkv_probe_cfg *pc, int n_new, pkv_error *err) {
    const pkv_hparams *hp = &s->model->hp;
    pkv_layer_probe *p = &s->probes[il];
    p->window = pc->window < n_new ? pc->window : n_new;
    p->n_new = n_new;
    p->first_pos = s->n_pos;
    if (pkv_work_grow((void **)&p->q, (size_t)hp->n_head * p->window * hp->head_dim_k * sizeof(float), err) ||
        pkv_work_grow((void **)&p->q_pos, (size_t)p->window * sizeof(int32_t), err))
        return -1;
    p->has_q_stats = false;
    if (pc->q_stats && prepare_query_stats(s, p, err)) return -1;
    if (!pc->attn_sums) {
        p->acc_rows = 0;
        return 0;
    }
    if (!p->acc) {
        p->acc = calloc((size_t)hp->n_head, sizeof(float *));
        if (!p->acc) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for attention sums of layer %d", il);
    }
    int64_t rows = (int64_t)pkv_kvcache_max_head_rows(&s->cache, il) + n_new;
    /* every query head has its own sums, sized to the layer's largest head */
    for (int h = 0; h < hp->n_head; h++) {
        if (pkv_work_grow((void **)&p->acc[h], (size_t)rows * sizeof(float) + 4, err)) return -1;
        memset(p->acc[h], 0, (size_t)rows * sizeof(float));
    }
    p->acc_rows = rows;
    return 0;
}

/* Copies the post-RoPE queries of the chunk's window tokens into the probe. */
void pkv_probe_capture(pkv_layer_probe *p, const pkv_hparams *hp, const float *q, const int32_t *pos, int c0,
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

/* One query head of a chunk: its queries transposed, then the sums of q and,
 * from dot products of the columns, of q q^T (f32 within the chunk, double
 * across chunks). */
typedef struct {
    pkv_layer_probe *p;
    const pkv_hparams *hp;
    const pkv_kernels *kern;
    const float *q;
    int n_tok;
} qstats_job;

static void qstats_head(void *arg, int64_t item, int thread) {
    (void)thread;
    const qstats_job *j = arg;
    int h = (int)item, d = j->hp->head_dim_k, n = j->n_tok, nh = j->hp->n_head;
    float *qt = j->p->q_t + (size_t)h * d * n;
    double *sum = j->p->q_sum + (size_t)h * d, *sq = j->p->q_sq + (size_t)h * d * d;
    for (int t = 0; t < n; t++)
        for (int a = 0; a < d; a++) qt[(size_t)a * n + t] = j->q[((size_t)t * nh + h) * d + a];
    for (int a = 0; a < d; a++) {
        const float *ca = qt + (size_t)a * n;
        double s = 0.0;
        for (int t = 0; t < n; t++) s += ca[t];
        sum[a] += s;
        for (int b = a; b < d; b++) {
            double v = j->kern->dot_f32(n, ca, qt + (size_t)b * n);
            sq[(size_t)a * d + b] += v;
            if (b != a) sq[(size_t)b * d + a] += v;
        }
    }
}

void pkv_probe_query_stats(pkv_layer_probe *p, const pkv_hparams *hp, const pkv_compute *comp, const float *q,
                           const int32_t *pos, int n_tok) {
    if (!p->has_q_stats) return;
    size_t hd = (size_t)hp->n_head * hp->head_dim_k;
    for (int t = 0; t < n_tok; t++) {
        int idx = pos[t] - p->first_pos;
        if (idx >= 0 && idx < PKV_QUERY_STATS_HEAD) memcpy(p->q_head + (size_t)idx * hd, q + (size_t)t * hd, hd * sizeof(float));
    }
    qstats_job j = {p, hp, comp->kern, q, n_tok};
    pkv_pool_for(comp->pool, hp->n_head, qstats_head, &j);
}

/* The rows of layer il's KV heads as the press reads them: counts, positions,
 * f32 keys (and values when asked), and for attention-sum presses the number
 * of the call's queries that could see each row (causal). */
typedef struct {
    int *n_rows;
    const float **keys, **values;
    const int32_t **pos;
    int32_t **counts;
    pkv_press_key_source key_source; /* keys not stored as f32, one head at a time */
    struct key_reader {
        const pkv_kvcache *cache;
        const pkv_kernels *kern;
        int layer;
    } reader;
} layer_rows;

static void read_head_keys(void *user, int g, float *dst) {
    const struct key_reader *r = user;
    pkv_kvcache_read_k(r->cache, r->kern, r->layer, g, dst);
}

static int gather_rows(pkv_session *s, const pkv_layer_probe *probe, const pkv_press_ops *ops, int il, layer_rows *r,
                       pkv_error *err) {
    const pkv_kvcache *c = &s->cache;
    pkv_arena *arena = &s->arena;
    int nkv = pkv_kvcache_n_heads(c, il);
    r->n_rows = pkv_arena_alloc(arena, (size_t)nkv * sizeof(int));
    r->keys = pkv_arena_alloc(arena, (size_t)nkv * sizeof(float *));
    r->values = pkv_arena_alloc(arena, (size_t)nkv * sizeof(float *));
    r->pos = pkv_arena_alloc(arena, (size_t)nkv * sizeof(int32_t *));
    r->counts = pkv_arena_alloc(arena, (size_t)nkv * sizeof(int32_t *));
    if (!r->n_rows || !r->keys || !r->values || !r->pos || !r->counts)
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory pressing layer %d", il);
    /* f16 and quantised keys: one head's f32 copy at a time, unless the press
     * reads every head at once */
    r->reader = (struct key_reader){c, s->comp.kern, il};
    r->key_source = (pkv_press_key_source){.read = read_head_keys, .user = &r->reader, .loaded = -1};
    if (!ops->keys_all_heads && !pkv_kvcache_head_k_f32(c, il, 0)) {
        int n_max = 0;
        for (int g = 0; g < nkv; g++)
            if (pkv_kvcache_head_rows(c, il, g) > n_max) n_max = pkv_kvcache_head_rows(c, il, g);
        r->key_source.buf = pkv_arena_alloc(arena, (size_t)n_max * pkv_kvcache_head_dim_k(c, il) * sizeof(float) + 4);
        if (!r->key_source.buf) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory reading layer %d keys", il);
    }
    for (int g = 0; g < nkv; g++) {
        int n = pkv_kvcache_head_rows(c, il, g);
        r->n_rows[g] = n;
        r->pos[g] = pkv_kvcache_head_pos(c, il, g);
        /* presses read f32 rows: f32 keys or values are handed over as they
         * are, f16 and quantised ones are read into a copy (the two types may differ) */
        r->keys[g] = pkv_kvcache_head_k_f32(c, il, g);
        r->values[g] = pkv_kvcache_head_v_f32(c, il, g);
        if (!r->keys[g] && !r->key_source.buf) {
            float *k = pkv_arena_alloc(arena, (size_t)n * pkv_kvcache_head_dim_k(c, il) * sizeof(float) + 4);
            if (!k) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory reading layer %d keys", il);
            pkv_kvcache_read_k(c, s->comp.kern, il, g, k);
            r->keys[g] = k;
        }
        if (!r->values[g] && ops->needs_values) {
            float *v = pkv_arena_alloc(arena, (size_t)n * pkv_kvcache_head_dim_v(c, il) * sizeof(float) + 4);
            if (!v) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory reading layer %d values", il);
            pkv_kvcache_read_v(c, s->comp.kern, il, g, v);
            r->values[g] = v;
        }
        if (ops->needs_attn_sum) {
            if (n > probe->acc_rows)
                return pkv_fail(err, PKV_ERR_INTERNAL, "layer %d: attention sums cover %lld rows, the head has %d", il,
                                (long long)probe->acc_rows, n);
            r->counts[g] = pkv_arena_alloc(arena, (size_t)n * sizeof(int32_t) + 4);
            if (!r->counts[g]) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory pressing layer %d", il);
            int32_t end = probe->first_pos + probe->n_new;
            for (int j = 0; j < n; j++)
                r->counts[g][j] = r->pos[g][j] < probe->first_pos ? probe->n_new : end - r->pos[g][j];
        }
    }
    return 0;
}

/* Rank of layer il among the full-attention layers, and their number: the
 * layer schedule (PyramidKV) runs over the pressed layers. */
static void press_layer_rank(const pkv_model *m, int il, int *rank, int *n_pressed) {
    *rank = *n_pressed = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        if (!pkv_layer_is_full(m, l)) continue;
        if (l < il) (*rank)++;
        (*n_pressed)++;
    }
}

int pkv_compress_layer(pkv_session *s, const pkv_layer_probe *probe, const pkv_press_cfg *cfg, int il,
                       pkv_compress_stats *stats, pkv_error *err) {
    double t0 = pkv_now_seconds();
    const pkv_hparams *hp = &s->model->hp;
    pkv_kvcache *c = &s->cache;
    const pkv_press_ops *ops = cfg->ops;
    pkv_arena_reset(&s->arena);
    int nkv = pkv_kvcache_n_heads(c, il);
    if (nkv != hp->n_head_kv)
        return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                        "layer %d already holds one head per query head; recompressing it is not supported", il);
    if (ops->needs_attn_sum && !probe->acc_rows)
        return pkv_fail(err, PKV_ERR_ARG, "press %s needs attention sums that this prefill did not keep", ops->name);
    /* the press window: the newest queries of those kept, read in place */
    if (probe->window < 1) return pkv_fail(err, PKV_ERR_INTERNAL, "layer %d: the prefill kept no window queries", il);
    int window = cfg->window < probe->window ? cfg->window : probe->window;
    if (window < 1) window = 1;
    int first = probe->window - window;
    layer_rows rows;
    if (gather_rows(s, probe, ops, il, &rows, err)) return -1;
    int press_layer, n_press_layers;
    press_layer_rank(s->model, il, &press_layer, &n_press_layers);
    pkv_press_input in = {
        .layer = il,
        .n_layers = hp->n_layer,
        .press_layer = press_layer,
        .n_press_layers = n_press_layers,
        .n_head = hp->n_head,
        .n_head_kv = nkv,
        .head_dim_k = pkv_kvcache_head_dim_k(c, il),
        .head_dim_v = pkv_kvcache_head_dim_v(c, il),
        .attn_scale = hp->attn_scale,
        .window = window,
        .q_window = probe->q + (size_t)first * hp->head_dim_k,
        .q_head_rows = probe->window,
        .q_pos = probe->q_pos + first,
        .n_rows = rows.n_rows,
        .keys = rows.keys,
        .key_source = &rows.key_source,
        .values = ops->needs_values ? rows.values : NULL,
        .pos = rows.pos,
        .attn_sum = ops->needs_attn_sum ? (const float *const *)probe->acc : NULL,
        .attn_count = ops->needs_attn_sum ? (const int32_t *const *)rows.counts : NULL,
        .comp = &s->comp,
        .arena = &s->arena,
        .seed = cfg->seed,
    };
    if (ops->needs_query_stats) {
        if (!probe->has_q_stats)
            return pkv_fail(err, PKV_ERR_ARG, "press %s needs query statistics that this prefill did not keep",
                            ops->name);
        in.q_stats_n = probe->n_new;
        in.q_sum = probe->q_sum;
        in.q_sq = probe->q_sq;
        in.q_head_n = probe->n_new < PKV_QUERY_STATS_HEAD ? probe->n_new : PKV_QUERY_STATS_HEAD;
        in.q_head = probe->q_head;
        in.rope = &hp->rope_global; /* presses run on full-attention layers only */
        in.rope_inv_freq = s->work.inv_freq_global;
    }
    if (ops->recon) {
        if (!s->recon_scores)
            return pkv_fail(err, PKV_ERR_INTERNAL, "press %s presses after its reconstruction passes", ops->name);
        in.recon_scores = s->recon_scores;
    }
    pkv_press_selection sel;
    if (pkv_press_run(cfg, &in, &sel, err)) return -1;
    if (pkv_check_mem_cap(s, il, err)) return -1; /* the press's scratch counts too */

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

/* ---------------------------------------------------------------- a reconstruction pass: the press scores by its queries */

int pkv_recon_observe(pkv_session *s, int il, const float *q, int c0, int nc, pkv_error *err) {
    pkv_recon_state *r = s->recon;
    const pkv_hparams *hp = &s->model->hp;
    const pkv_kvcache *c = &s->cache;
    int nkv = pkv_kvcache_n_heads(c, il), d = pkv_kvcache_head_dim_k(c, il);
    int n_keys = r->n_sink + r->n_chunk + c0 + nc;
    if ((int64_t)nkv * n_keys > r->keys_cap) {
        float *k = realloc(r->keys, (size_t)nkv * n_keys * d * sizeof(float));
        if (!k) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for layer %d's pass keys", il);
        r->keys = k;
        r->keys_cap = (int64_t)nkv * n_keys;
    }
    pkv_arena_reset(&s->arena);
    const float *key_ptr[64];
    float *score_ptr[64];
    if (nkv > 64) return pkv_fail(err, PKV_ERR_UNSUPPORTED, "kvzip: layer %d has %d KV heads (at most 64)", il, nkv);
    for (int g = 0; g < nkv; g++) {
        int rows = pkv_kvcache_head_rows(c, il, g);
        const float *all = pkv_kvcache_head_k_f32(c, il, g);
        if (!all) {
            float *tmp = pkv_arena_alloc(&s->arena, (size_t)rows * d * sizeof(float) + 4);
            if (!tmp) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory reading layer %d's keys", il);
            pkv_kvcache_read_k(c, s->comp.kern, il, g, tmp);
            all = tmp;
        }
        /* the sinks, the chunk, the pass so far: three runs of rows */
        float *dst = r->keys + (size_t)g * n_keys * d;
        size_t row = (size_t)d * sizeof(float);
        memcpy(dst, all, (size_t)r->n_sink * row);
        memcpy(dst + (size_t)r->n_sink * d, all + (size_t)r->chunk_begin * d, (size_t)r->n_chunk * row);
        memcpy(dst + (size_t)(r->n_sink + r->n_chunk) * d, all + (size_t)r->ctx_rows * d, (size_t)(c0 + nc) * row);
        key_ptr[g] = dst;
        score_ptr[g] = r->scores[il][g] + r->chunk_begin;
    }
    pkv_press_recon_batch b = {
        .layer = il,
        .n_head = hp->n_head,
        .n_head_kv = nkv,
        .head_dim = d,
        .n_query = nc,
        .first_query = c0,
        .q = q,
        .n_sink = r->n_sink,
        .n_chunk = r->n_chunk,
        .keys = key_ptr,
        .chunk_scores = score_ptr,
        .comp = &s->comp,
        .arena = &s->arena,
    };
    if (r->press->ops->recon->score_batch(r->press->params, &b, err)) return -1;
    return pkv_check_mem_cap(s, il, err);
}
