/*
 * KVzip (Kim et al., NeurIPS 2025), as kvpress 0.5.5's KVzipPress
 * (docs/presses.md Part E.3). After the prefill the engine makes the model
 * repeat the context chunk by chunk (docs/design.md "Reconstruction passes");
 * a context row scores the most attention any query of the pass repeating its
 * chunk pays it, over the query heads of its KV head, with the pass's softmax
 * taken over the sinks, that chunk and the pass itself (score_batch below).
 * Rows before the reconstructed context score 0; the first n_sink rows are
 * always kept. The rows to evict are the lowest scores of all pressed layers
 * and heads together (scope=global, kvpress's default) or of each layer's
 * heads together (scope=layer, kvpress's layerwise=True): heads, and in the
 * global scope layers, keep different numbers of rows.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/threads.h"
#include "press/press.h"

typedef struct {
    int n_sink;
    int chunk_size;
    int layerwise;
} kvzip_params;

static const pkv_press_choice SCOPES[] = {{"global", 0}, {"layer", 1}, {NULL, 0}};

#define P(field) offsetof(kvzip_params, field)
static const pkv_press_option KVZIP_OPTIONS[] = {
    {.key = "n_sink", .help = "first rows always kept, seen by every pass (default 4)", .type = PKV_OPT_INT,
     .offset = P(n_sink), .lo = 0, .hi = 1 << 20},
    {.key = "chunk_size", .help = "context tokens each reconstruction pass repeats (default 2048)", .type = PKV_OPT_INT,
     .offset = P(chunk_size), .lo = 1, .hi = 1 << 20},
    {.key = "scope", .help = "global (default: evict the lowest scores of all layers) | layer (of each layer)",
     .type = PKV_OPT_CHOICE, .offset = P(layerwise), .choices = SCOPES},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};
#undef P

static void kvzip_defaults(void *p) { *(kvzip_params *)p = (kvzip_params){.n_sink = 4, .chunk_size = 2048}; }

static int kvzip_chunk_size(const void *p) { return ((const kvzip_params *)p)->chunk_size; }
static int kvzip_n_sink(const void *p) { return ((const kvzip_params *)p)->n_sink; }

/* ---------------------------------------------------------------- scoring a pass */

typedef struct {
    const pkv_press_recon_batch *b;
    int n_keys;
    float *scratch;        /* per thread: queries transposed [head_dim][BK], logits [n_keys][BK] */
    size_t scratch_floats;
    float *best;           /* [n_head][n_chunk] max over the batch's queries */
} batch_job;

/* Query head h: for every query of the batch, softmax over the sinks, the
 * chunk and the pass's rows it can see (f32 exp, as kvpress's softmax), and
 * the largest probability each chunk row receives. PKV_ATT_BK queries at a
 * time: the attention kernel's score block with the keys as its rows and
 * the queries (scaled, transposed) as its columns gives s[key][query]. */
static void score_head(void *arg, int64_t item, int thread) {
    enum { BK = PKV_ATT_BK };
    batch_job *j = arg;
    const pkv_press_recon_batch *b = j->b;
    int h = (int)item, g = h / (b->n_head / b->n_head_kv), d = b->head_dim;
    const pkv_kernels *k = b->comp->kern;
    float *qt = j->scratch + (size_t)thread * j->scratch_floats, *s = qt + (size_t)d * BK;
    float *best = j->best + (size_t)h * b->n_chunk;
    float scale = (float)(1.0 / sqrt((double)d)); /* kvpress: / sqrt(head_dim) */
    for (int c = 0; c < b->n_chunk; c++) best[c] = 0.0f;
    int before = b->n_sink + b->n_chunk + b->first_query; /* keys every query of the batch sees */
    for (int t0 = 0; t0 < b->n_query; t0 += BK) {
        int nq = b->n_query - t0 < BK ? b->n_query - t0 : BK;
        for (int e = 0; e < d; e++)
            for (int i = 0; i < BK; i++)
                qt[e * BK + i] = i < nq ? b->q[((size_t)(t0 + i) * b->n_head + h) * d + e] * scale : 0.0f;
        int first_new = before + t0, most = first_new + nq; /* query i sees keys [0, first_new + i] */
        k->att_scores(most, d, b->keys[g], qt, s);
        float mx[BK];
        for (int i = 0; i < BK; i++) mx[i] = -INFINITY;
        for (int r = 0; r < first_new; r++) /* every query sees these */
            for (int i = 0; i < BK; i++) mx[i] = s[(size_t)r * BK + i] > mx[i] ? s[(size_t)r * BK + i] : mx[i];
        for (int r = first_new; r < most; r++) /* the block's own rows: causal */
            for (int i = r - first_new; i < BK; i++) mx[i] = s[(size_t)r * BK + i] > mx[i] ? s[(size_t)r * BK + i] : mx[i];
        for (int i = nq; i < BK; i++) mx[i] = 0.0f;
        for (int r = 0; r < most; r++)
            for (int i = 0; i < BK; i++) s[(size_t)r * BK + i] -= mx[i];
        k->exp_f32((int64_t)most * BK, s, s);
        double sum[BK] = {0};
        for (int r = 0; r < first_new; r++)
            for (int i = 0; i < BK; i++) sum[i] += s[(size_t)r * BK + i];
        for (int r = first_new; r < most; r++)
            for (int i = r - first_new; i < BK; i++) sum[i] += s[(size_t)r * BK + i];
        float inv[BK];
        for (int i = 0; i < BK; i++) inv[i] = i < nq ? (float)(1.0 / sum[i]) : 0.0f;
        for (int c = 0; c < b->n_chunk; c++) {
            const float *row = s + (size_t)(b->n_sink + c) * BK;
            for (int i = 0; i < nq; i++) {
                float pr = row[i] * inv[i];
                if (pr > best[c]) best[c] = pr;
            }
        }
    }
}

static int kvzip_score_batch(const void *p, const pkv_press_recon_batch *b, pkv_error *err) {
    (void)p;
    int threads = pkv_pool_size(b->comp->pool);
    batch_job j = {.b = b, .n_keys = b->n_sink + b->n_chunk + b->first_query + b->n_query};
    j.scratch_floats = (size_t)(b->head_dim + j.n_keys) * PKV_ATT_BK;
    j.scratch = pkv_arena_alloc(b->arena, (size_t)(threads > 0 ? threads : 1) * j.scratch_floats * sizeof(float));
    j.best = pkv_arena_alloc(b->arena, (size_t)b->n_head * b->n_chunk * sizeof(float) + 4);
    if (!j.scratch || !j.best) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory scoring layer %d's pass", b->layer);
    pkv_pool_for(b->comp->pool, b->n_head, score_head, &j);
    /* max over the query heads of each KV head, and over the batches */
    int group = b->n_head / b->n_head_kv;
    for (int h = 0; h < b->n_head; h++) {
        float *out = b->chunk_scores[h / group];
        const float *best = j.best + (size_t)h * b->n_chunk;
        for (int c = 0; c < b->n_chunk; c++)
            if (best[c] > out[c]) out[c] = best[c];
    }
    return 0;
}

static const pkv_press_recon_ops KVZIP_RECON = {
    .first_prompt = "\n\nRepeat the previous context exactly.",
    .next_prompt = "\n\nRepeat the part of the previous context exactly, starting with",
    .overlap = 8,
    .chunk_size = kvzip_chunk_size,
    .n_sink = kvzip_n_sink,
    .score_batch = kvzip_score_batch,
};

/* ---------------------------------------------------------------- selection */

static int kvzip_score(const void *pp, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    const kvzip_params *p = pp;
    if (!in->recon_scores) return pkv_fail(err, PKV_ERR_INTERNAL, "kvzip needs the reconstruction passes' scores");
    int rank = in->n_press_layers > 0 ? in->press_layer : in->layer;
    for (int s = 0; s < sel->n_sel; s++) {
        int g = pkv_sel_kv_head(in, sel, s);
        for (int r = 0; r < in->n_rows[g]; r++)
            sel->scores[s][r] = r < p->n_sink || sel->forced[s][r] ? INFINITY : in->recon_scores[rank][g][r];
    }
    return 0;
}

/* A row of the pool: evicted in order of score ascending, then position,
 * head and layer descending (so ties keep the lower position, as the shared
 * top-k does). */
typedef struct {
    float score;
    int32_t row;
    int16_t head, layer;
} pooled;

static int cmp_evict(const void *a, const void *b) {
    const pooled *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    if (x->row != y->row) return x->row > y->row ? -1 : 1;
    if (x->head != y->head) return x->head > y->head ? -1 : 1;
    return (x->layer < y->layer) - (x->layer > y->layer);
}

static int kvzip_select(const void *pp, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    const kvzip_params *p = pp;
    int rank = in->n_press_layers > 0 ? in->press_layer : in->layer;
    int n_layers = in->n_press_layers > 0 ? in->n_press_layers : in->n_layers;
    int first = p->layerwise ? rank : 0, last = p->layerwise ? rank + 1 : n_layers;
    int64_t kept = 0, total = 0;
    for (int s = 0; s < sel->n_sel; s++) {
        kept += sel->budget[s] < in->n_rows[s] ? sel->budget[s] : in->n_rows[s];
        total += in->n_rows[s];
    }
    if (!p->layerwise) {
        kept = sel->all_layers_budget;
        total *= n_layers;
    }
    int64_t n_evict = total - kept;
    pooled *pool = malloc((size_t)(total > 0 ? total : 1) * sizeof *pool);
    if (!pool) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory selecting rows of layer %d", in->layer);
    int64_t m = 0;
    for (int l = first; l < last; l++)
        for (int s = 0; s < sel->n_sel; s++)
            for (int r = 0; r < in->n_rows[s]; r++) {
                /* another layer's rows sit at the same positions: the same rows are forced */
                float v = l == rank ? sel->scores[s][r]
                                    : (r < p->n_sink || sel->forced[s][r] ? INFINITY : in->recon_scores[l][s][r]);
                pool[m++] = (pooled){v, r, (int16_t)s, (int16_t)l};
            }
    if (n_evict > 0 && n_evict < m) qsort(pool, (size_t)m, sizeof *pool, cmp_evict);
    for (int s = 0; s < sel->n_sel; s++) {
        sel->keep[s] = pkv_arena_alloc(in->arena, (size_t)in->n_rows[s] * sizeof(int32_t) + 4);
        if (!sel->keep[s]) {
            free(pool);
            return pkv_fail(err, PKV_ERR_NOMEM, "out of memory selecting rows of layer %d", in->layer);
        }
        for (int r = 0; r < in->n_rows[s]; r++) sel->keep[s][r] = 1; /* marks first, indices below */
    }
    for (int64_t i = 0; i < n_evict && i < m; i++)
        if (pool[i].layer == rank && pool[i].score != INFINITY) sel->keep[pool[i].head][pool[i].row] = 0;
    free(pool);
    for (int s = 0; s < sel->n_sel; s++) {
        int n = 0;
        for (int r = 0; r < in->n_rows[s]; r++)
            if (sel->keep[s][r]) sel->keep[s][n++] = r;
        sel->n_keep[s] = n;
    }
    return 0;
}

const pkv_press_ops pkv_press_kvzip = {
    .name = "kvzip",
    .summary = "KVzip: the attention each row gets while the model repeats the context (prefills again; no "
               "question needed)",
    .options = KVZIP_OPTIONS,
    .params_size = sizeof(kvzip_params),
    .defaults = kvzip_defaults,
    .recon = &KVZIP_RECON,
    .score = kvzip_score,
    .select = kvzip_select,
};
