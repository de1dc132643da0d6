#include "cache/attention.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum {
    TILE_Q = 64,         /* query rows (tokens x heads) of a tile */
    DECODE_MAX_TOK = 4,  /* up to this many tokens, key ranges are cut into chunks */
    MAX_CHUNKS = 16,     /* chunks of one tile's key range */
    MIN_CHUNK = 256,     /* rows of a chunk at least (a multiple of PKV_ATT_BK) */
};

/* first row index with pos >= target */
static int lower_bound(const int32_t *pos, int n, int32_t target) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (pos[mid] < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The rows [*lo, *hi) of a head that a query at position qp sees. */
static void visible_rows(const pkv_kv_layer *L, const pkv_kv_head *kh, int32_t qp, int *lo, int *hi) {
    *hi = lower_bound(kh->pos, kh->n_rows, qp + 1);
    *lo = L->sliding_window > 0 ? lower_bound(kh->pos, *hi, qp - L->sliding_window + 1) : 0;
}

/* ---------------------------------------------------------------- accumulated probabilities (H2O) */

/* With acc_probs every query's probabilities are added to the rows' sums. The
 * outputs come from the tiled path (so a press that keeps everything changes
 * nothing); the sums are a second pass, one head per work part and queries
 * in order, so they do not depend on the thread count. */
typedef struct {
    const pkv_kernels *kern;
    const pkv_kvcache *cache;
    const pkv_kv_layer *layer;
    const pkv_attn_params *p;
    const float *q;
    const int32_t *q_pos;
    int n_tok;
    float *scratch;             /* per part: a row of scores, then one key row as f32 */
    size_t scratch_per_thread;
} probs_job;

/* q.k of one cache row: in place for f32 and f16 rows; a quantised row is
 * dequantised first (the values the tiled path stages), then dotted in f32. */
static float key_dot(const pkv_kernels *k, const pkv_kvcache *c, int dk, const void *krow, const float *q, float *key) {
    switch (c->kern_k) {
    case PKV_TYPE_F32: return k->dot_f32(dk, krow, q);
    case PKV_TYPE_F16: return k->dot_f16_f32(dk, krow, q);
    default: k->dequant[c->kern_k](krow, key, dk); return k->dot_f32(dk, key, q);
    }
}

static void add_probs(const probs_job *j, int t, int h, float *scores, float *key) {
    const pkv_kv_layer *L = j->layer;
    const pkv_kvcache *c = j->cache;
    int group = j->p->n_head / L->n_heads;
    const pkv_kv_head *kh = &L->heads[h / group];
    int dk = L->head_dim_k;
    int lo, hi;
    visible_rows(L, kh, j->q_pos[t], &lo, &hi);
    if (hi <= lo) return;
    const float *q = j->q + ((int64_t)t * j->p->n_head + h) * dk;
    int n = hi - lo;
    const pkv_kernels *k = j->kern;
    float mx = -INFINITY;
    for (int r = 0; r < n; r++) {
        float s = key_dot(k, c, dk, pkv_kv_key(L, kh, lo + r), q, key) * j->p->scale;
        if (j->p->softcap > 0.0f) s = j->p->softcap * tanhf(s / j->p->softcap);
        scores[r] = s;
        if (s > mx) mx = s;
    }
    double sum = 0.0;
    for (int r = 0; r < n; r++) {
        scores[r] = expf(scores[r] - mx);
        sum += scores[r];
    }
    float inv = (float)(1.0 / sum);
    float *acc = j->p->acc_probs[h] + lo;
    for (int r = 0; r < n; r++) acc[r] += scores[r] * inv;
}

static void probs_task(void *arg, int part, int n_parts) {
    probs_job *j = arg;
    float *scores = j->scratch + (size_t)part * j->scratch_per_thread;
    float *key = scores + j->scratch_per_thread - (size_t)j->layer->head_dim_k;
    int64_t h0, h1;
    pkv_split(j->p->n_head, part, n_parts, 1, &h0, &h1);
    for (int64_t h = h0; h < h1; h++)
        for (int t = 0; t < j->n_tok; t++) add_probs(j, t, (int)h, scores, key);
}

static size_t max_rows_of(const pkv_kv_layer *L) {
    size_t max_rows = 1;
    for (int h = 0; h < L->n_heads; h++)
        if ((size_t)L->heads[h].n_rows > max_rows) max_rows = (size_t)L->heads[h].n_rows;
    return max_rows;
}

/* Floats of one part of the accumulated-probabilities pass. */
static size_t probs_floats(const pkv_kv_layer *L) { return max_rows_of(L) + (size_t)L->head_dim_k; }

/* ---------------------------------------------------------------- tiled path */

typedef struct {
    const pkv_kernels *kern;
    const pkv_kvcache *cache;
    const pkv_kv_layer *L;
    const pkv_attn_params *p;
    const float *q;
    const int32_t *q_pos;
    int n_tok;
    float *out;
    int group;      /* query heads per KV head */
    int slice;      /* query heads per tile */
    int n_slices;
    int tile_tok;   /* tokens per tile */
    int n_tiles;
    int n_chunks;   /* work units per tile: MAX_CHUNKS when chunked, else 1 */
    int tile_rows;  /* query rows of a full tile (chunked: partials per chunk) */
    float *scratch;
    size_t per_thread;
    float *partials; /* chunked: [tile unit][MAX_CHUNKS][TILE_Q][dv + 2] */
} tile_job;

/* One tile: its queries, their visible ranges and the key rows it covers. */
typedef struct {
    int kv_head, t0, nt, h0, nh, nq;
    int lo[TILE_Q], hi[TILE_Q]; /* per token of the tile */
    int row0, row1;             /* aligned start and end of all the tile's ranges */
} tile;

/* One thread's scratch: the tile's queries, a staged key/value block, the
 * block's scores, and the running softmax state of every query row. */
typedef struct {
    float *q;     /* [TILE_Q][dk] */
    float *kt;    /* [dk][PKV_ATT_BK] */
    float *vt;    /* [PKV_ATT_BK][dv] */
    float *s;     /* [TILE_Q][PKV_ATT_BK] */
    float *alpha; /* [TILE_Q] */
    float *m;     /* [TILE_Q] running max */
    float *l;     /* [TILE_Q] running sum */
    float *o;     /* [TILE_Q][dv] unnormalised output */
} tile_scratch;

/* A thread's scratch starts at the next 64-byte boundary of its share (the
 * callers' buffers come from the heap, 16-byte aligned): the kernels load
 * and store whole 512-bit rows of o, q and the scores, and a row split
 * across two cache lines cost the decode step's attention 3% (docs/server.md,
 * "Measured: concurrent streams"). With dk and dv multiples of 16 every
 * array below then starts on a boundary too. */
enum { SCRATCH_ALIGN_FLOATS = 16 };

static size_t per_thread_floats(int dk, int dv) {
    return (size_t)TILE_Q * dk + (size_t)dk * PKV_ATT_BK + (size_t)PKV_ATT_BK * dv + (size_t)TILE_Q * PKV_ATT_BK +
           3 * (size_t)TILE_Q + (size_t)TILE_Q * dv + SCRATCH_ALIGN_FLOATS;
}

static tile_scratch scratch_of(float *base, int dk, int dv) {
    tile_scratch t;
    const uintptr_t a = (uintptr_t)base, align = SCRATCH_ALIGN_FLOATS * sizeof(float);
    base += ((align - a % align) % align) / sizeof(float);
    t.q = base;
    t.kt = t.q + (size_t)TILE_Q * dk;
    t.vt = t.kt + (size_t)dk * PKV_ATT_BK;
    t.s = t.vt + (size_t)PKV_ATT_BK * dv;
    t.alpha = t.s + (size_t)TILE_Q * PKV_ATT_BK;
    t.m = t.alpha + TILE_Q;
    t.l = t.m + TILE_Q;
    t.o = t.l + TILE_Q;
    return t;
}

static void tile_setup(const tile_job *j, int64_t base_unit, tile *tl) {
    /* tile-major, the last tokens' tiles first: causally they see the most
     * keys, and starting with the longest work items balances the threads */
    const int per_tile = j->L->n_heads * j->n_slices;
    const int ti = j->n_tiles - 1 - (int)(base_unit / per_tile), rest = (int)(base_unit % per_tile);
    const int si = rest % j->n_slices;
    tl->kv_head = rest / j->n_slices;
    tl->t0 = ti * j->tile_tok;
    tl->nt = j->n_tok - tl->t0 < j->tile_tok ? j->n_tok - tl->t0 : j->tile_tok;
    tl->h0 = tl->kv_head * j->group + si * j->slice;
    tl->nh = j->group - si * j->slice < j->slice ? j->group - si * j->slice : j->slice;
    tl->nq = tl->nt * tl->nh;
    const pkv_kv_head *kh = &j->L->heads[tl->kv_head];
    int lo_min = kh->n_rows, hi_max = 0;
    for (int t = 0; t < tl->nt; t++) {
        visible_rows(j->L, kh, j->q_pos[tl->t0 + t], &tl->lo[t], &tl->hi[t]);
        if (tl->hi[t] > tl->lo[t]) {
            if (tl->lo[t] < lo_min) lo_min = tl->lo[t];
            if (tl->hi[t] > hi_max) hi_max = tl->hi[t];
        }
    }
    if (hi_max == 0) lo_min = 0;
    tl->row0 = lo_min / PKV_ATT_BK * PKV_ATT_BK;
    tl->row1 = hi_max > tl->row0 ? hi_max : tl->row0;
}

/* Rows per chunk of a chunked tile: at least MIN_CHUNK, at most MAX_CHUNKS chunks. */
static int chunk_rows(const tile *tl) {
    const int span = tl->row1 - tl->row0;
    int ch = (span + MAX_CHUNKS - 1) / MAX_CHUNKS;
    ch = (ch + PKV_ATT_BK - 1) / PKV_ATT_BK * PKV_ATT_BK;
    return ch < MIN_CHUNK ? MIN_CHUNK : ch;
}

/* GNU C vectors of 4 floats: SSE in the portable build, the same at every
 * SIMD level of the kernel tables. */
typedef float v4f __attribute__((vector_size(16)));

/* A whole block of scores seen by one query (no soft-cap): scale, the new
 * running max, exp arguments in place and the rescale argument. Returns the
 * new max. */
static float softmax_block_start(float *si, float scale, float m, float *alpha_arg) {
    const v4f vs = {scale, scale, scale, scale};
    v4f v[PKV_ATT_BK / 4];
    float bm = m;
    for (int c = 0; c < PKV_ATT_BK / 4; c++) {
        memcpy(&v[c], si + 4 * c, sizeof v[c]);
        v[c] *= vs;
        for (int e = 0; e < 4; e++) bm = v[c][e] > bm ? v[c][e] : bm;
    }
    const v4f vm = {bm, bm, bm, bm};
    for (int c = 0; c < PKV_ATT_BK / 4; c++) {
        v[c] -= vm;
        memcpy(si + 4 * c, &v[c], sizeof v[c]);
    }
    *alpha_arg = m - bm;
    return bm;
}

static float block_sum(const float *si) {
    v4f acc = {0, 0, 0, 0};
    for (int c = 0; c < PKV_ATT_BK / 4; c++) {
        v4f v;
        memcpy(&v, si + 4 * c, sizeof v);
        acc += v;
    }
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* Runs the tile's queries over key rows [r0, r1) (aligned start): m, l and
 * the unnormalised o of each query row i = token * nh + head. */
static void tile_attend(const tile_job *j, const tile *tl, int r0, int r1, const tile_scratch *ts) {
    const pkv_kv_layer *L = j->L;
    const pkv_kvcache *c = j->cache;
    const pkv_kernels *k = j->kern;
    const pkv_kv_head *kh = &L->heads[tl->kv_head];
    const int dk = L->head_dim_k, dv = L->head_dim_v, nq = tl->nq;
    float *qb = ts->q, *kt = ts->kt, *vt = ts->vt, *s = ts->s, *alpha = ts->alpha, *m = ts->m, *l = ts->l, *o = ts->o;
    for (int t = 0; t < tl->nt; t++)
        memcpy(qb + (size_t)t * tl->nh * dk, j->q + ((size_t)(tl->t0 + t) * j->p->n_head + tl->h0) * dk,
               (size_t)tl->nh * dk * sizeof(float));
    for (int i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    memset(o, 0, (size_t)nq * dv * sizeof(float));
    const float scale = j->p->scale, cap = j->p->softcap;
    /* a decode tile's few query rows read whole f16 blocks where they lie
     * (the same bits as staged) */
    const bool f16_direct = k->att_block_f16 && c->kern_k == PKV_TYPE_F16 && c->kern_v == PKV_TYPE_F16 &&
                            nq <= PKV_ATT_F16_MAX_Q && dk % 16 == 0 && dv % 16 == 0;
    /* the blocks [whole0, whole1) are seen whole by every query row of the
     * tile: there a fused kernel takes the steps below in one pass */
    int whole0 = r1, whole1 = r0;
    if ((k->att_block || f16_direct) && cap == 0.0f) {
        whole0 = r0, whole1 = r1;
        for (int t = 0; t < tl->nt; t++) {
            if (tl->lo[t] > whole0) whole0 = tl->lo[t];
            if (tl->hi[t] < whole1) whole1 = tl->hi[t];
        }
    }
    int ja[TILE_Q], jb[TILE_Q];
    for (int kb = r0; kb < r1; kb += PKV_ATT_BK) {
        const int n = kh->n_rows - kb < PKV_ATT_BK ? kh->n_rows - kb : PKV_ATT_BK;
        const bool whole = kb >= whole0 && kb + PKV_ATT_BK <= whole1;
        if (whole && f16_direct) {
            const int nb = (whole1 - kb) / PKV_ATT_BK; /* the rest of the whole blocks, in one call */
            k->att_block_f16(nq, dk, dv, qb, pkv_kv_key(L, kh, kb), pkv_kv_value(L, kh, kb), nb, scale, m, l, o);
            kb += (nb - 1) * PKV_ATT_BK;
            continue;
        }
        k->att_stage(pkv_kv_key(L, kh, kb), pkv_kv_value(L, kh, kb), n, dk, dv, c->kern_k, c->kern_v, kt, vt);
        if (whole) {
            k->att_block(nq, dk, dv, qb, kt, vt, scale, m, l, o);
            continue;
        }
        k->att_scores(nq, dk, qb, kt, s);
        /* online softmax: the new running max, the rescale factor of what
         * came before, and the block's weights (exp arguments first) */
        for (int i = 0; i < nq; i++) {
            const int t = i / tl->nh;
            int a = tl->lo[t] > r0 ? tl->lo[t] : r0, b = tl->hi[t] < r1 ? tl->hi[t] : r1;
            a = a - kb > 0 ? a - kb : 0;
            b = b - kb < n ? b - kb : n;
            ja[i] = a, jb[i] = b;
            float *si = s + i * PKV_ATT_BK;
            if (a >= b) {
                alpha[i] = 0.0f; /* e^0 = 1: nothing changes */
                continue;
            }
            if (a == 0 && b == PKV_ATT_BK && cap == 0.0f) {
                m[i] = softmax_block_start(si, scale, m[i], &alpha[i]);
                continue;
            }
            float bm = -INFINITY;
            for (int jj = a; jj < b; jj++) {
                float v = si[jj] * scale;
                if (cap > 0.0f) v = cap * tanhf(v / cap);
                si[jj] = v;
                if (v > bm) bm = v;
            }
            const float mn = bm > m[i] ? bm : m[i];
            for (int jj = a; jj < b; jj++) si[jj] -= mn;
            alpha[i] = m[i] - mn;
            m[i] = mn;
        }
        k->exp_f32((int64_t)nq * PKV_ATT_BK, s, s);
        k->exp_f32(nq, alpha, alpha);
        for (int i = 0; i < nq; i++) {
            float *si = s + i * PKV_ATT_BK;
            if (ja[i] == 0 && jb[i] == PKV_ATT_BK) {
                l[i] = l[i] * alpha[i] + block_sum(si);
                continue;
            }
            float sum = 0.0f;
            for (int jj = 0; jj < PKV_ATT_BK; jj++) {
                if (jj < ja[i] || jj >= jb[i]) si[jj] = 0.0f;
                sum += si[jj];
            }
            l[i] = l[i] * alpha[i] + sum;
        }
        k->att_accum(nq, dv, s, alpha, vt, o);
    }
}

/* dst = src / d, four lanes at a time (the same IEEE divisions as a scalar
 * loop). */
static void divide_row(float *dst, const float *src, float d, int n) {
    const v4f vd = {d, d, d, d};
    int e = 0;
    for (; e + 4 <= n; e += 4) {
        v4f v;
        memcpy(&v, src + e, sizeof v);
        v /= vd;
        memcpy(dst + e, &v, sizeof v);
    }
    for (; e < n; e++) dst[e] = src[e] / d;
}

static void tile_write(const tile_job *j, const tile *tl, const float *l, const float *o) {
    const int dv = j->L->head_dim_v;
    for (int i = 0; i < tl->nq; i++) {
        const int t = i / tl->nh, h = tl->h0 + i % tl->nh;
        float *dst = j->out + ((size_t)(tl->t0 + t) * j->p->n_head + h) * dv;
        const float *src = o + (size_t)i * dv;
        if (l[i] > 0.0f) divide_row(dst, src, l[i], dv);
        else memset(dst, 0, (size_t)dv * sizeof(float));
    }
}

static float *partial_of(const tile_job *j, int64_t base_unit, int chunk, int i) {
    const size_t stride = (size_t)j->L->head_dim_v + 2;
    return j->partials + (((size_t)base_unit * MAX_CHUNKS + (size_t)chunk) * (size_t)j->tile_rows + (size_t)i) * stride;
}

static void tile_item(void *arg, int64_t unit, int ith) {
    const tile_job *j = arg;
    const int dk = j->L->head_dim_k, dv = j->L->head_dim_v;
    const tile_scratch ts = scratch_of(j->scratch + (size_t)ith * j->per_thread, dk, dv);
    tile tl;
    const int64_t base_unit = unit / j->n_chunks;
    tile_setup(j, base_unit, &tl);
    if (j->n_chunks == 1) {
        tile_attend(j, &tl, tl.row0, tl.row1, &ts);
        tile_write(j, &tl, ts.l, ts.o);
        return;
    }
    const int chunk = (int)(unit % j->n_chunks), ch = chunk_rows(&tl);
    const int r0 = tl.row0 + chunk * ch, r1 = r0 + ch < tl.row1 ? r0 + ch : tl.row1;
    if (r0 >= r1) return; /* the merge knows this chunk is empty */
    tile_attend(j, &tl, r0, r1, &ts);
    if (tl.row1 - tl.row0 <= ch) { /* the only chunk: what the merge would compute */
        tile_write(j, &tl, ts.l, ts.o);
        return;
    }
    for (int i = 0; i < tl.nq; i++) {
        float *pt = partial_of(j, base_unit, chunk, i);
        pt[0] = ts.m[i];
        pt[1] = ts.l[i];
        memcpy(pt + 2, ts.o + (size_t)i * dv, (size_t)dv * sizeof(float));
    }
}

/* Combines a chunked tile's partial softmaxes in chunk order. */
static void merge_item(void *arg, int64_t base_unit, int ith) {
    const tile_job *j = arg;
    (void)ith;
    const int dv = j->L->head_dim_v;
    tile tl;
    tile_setup(j, base_unit, &tl);
    const int ch = chunk_rows(&tl);
    const int n_chunks = tl.row1 > tl.row0 ? (tl.row1 - tl.row0 + ch - 1) / ch : 0;
    if (n_chunks == 1) return; /* written by its only chunk */
    for (int i = 0; i < tl.nq; i++) {
        const int t = i / tl.nh, h = tl.h0 + i % tl.nh;
        float *dst = j->out + ((size_t)(tl.t0 + t) * j->p->n_head + h) * dv;
        float mx = -INFINITY;
        for (int c = 0; c < n_chunks; c++) {
            const float *pt = partial_of(j, base_unit, c, i);
            if (pt[1] > 0.0f && pt[0] > mx) mx = pt[0];
        }
        memset(dst, 0, (size_t)dv * sizeof(float));
        if (mx == -INFINITY) continue;
        float lsum = 0.0f;
        for (int c = 0; c < n_chunks; c++) {
            const float *pt = partial_of(j, base_unit, c, i);
            if (!(pt[1] > 0.0f)) continue;
            float w = pt[0] - mx;
            j->kern->exp_f32(1, &w, &w);
            lsum += w * pt[1];
            for (int e = 0; e < dv; e++) dst[e] += w * pt[2 + e]; /* plain C: the same bits at every SIMD level */
        }
        divide_row(dst, dst, lsum, dv);
    }
}

/* Whether some tile of a chunked call spans several chunks (or none: its
 * queries see no rows and get zeros from the merge). */
static bool needs_merge(const tile_job *j, int64_t n_base) {
    for (int64_t u = 0; u < n_base; u++) {
        tile tl;
        tile_setup(j, u, &tl);
        if (tl.row1 - tl.row0 > chunk_rows(&tl) || tl.row1 <= tl.row0) return true;
    }
    return false;
}

/* ---------------------------------------------------------------- entry points */

/* Chunked calls have at most DECODE_MAX_TOK tokens; their tiles hold at most
 * twice the call's query rows (a tile of tokens times a slice of heads, the
 * last ones partly filled). */
static size_t partial_floats(const pkv_kv_layer *L, int n_head) {
    return 4 * (size_t)DECODE_MAX_TOK * (size_t)n_head * MAX_CHUNKS * ((size_t)L->head_dim_v + 2);
}

size_t pkv_attention_scratch_floats(const pkv_kvcache *cache, int layer, int n_head, int n_threads) {
    const pkv_kv_layer *L = &cache->layers[layer];
    const size_t rows_path = probs_floats(L) * (size_t)n_threads;
    const size_t tiled = (size_t)n_threads * per_thread_floats(L->head_dim_k, L->head_dim_v) + partial_floats(L, n_head);
    return rows_path > tiled ? rows_path : tiled;
}

/* The geometry of one call's tiles (everything but the buffers). */
static tile_job job_of(const pkv_compute *c, const pkv_kvcache *cache, int layer, const pkv_attn_params *p,
                       const float *q, const int32_t *q_pos, int n_tok, float *out) {
    const pkv_kv_layer *L = &cache->layers[layer];
    tile_job j = {
        .kern = c->kern,
        .cache = cache,
        .L = L,
        .p = p,
        .q = q,
        .q_pos = q_pos,
        .n_tok = n_tok,
        .out = out,
        .group = p->n_head / L->n_heads,
        .per_thread = per_thread_floats(L->head_dim_k, L->head_dim_v),
    };
    j.slice = j.group < TILE_Q ? j.group : TILE_Q;
    j.n_slices = (j.group + j.slice - 1) / j.slice;
    j.tile_tok = TILE_Q / j.slice;
    j.n_tiles = (n_tok + j.tile_tok - 1) / j.tile_tok;
    j.n_chunks = n_tok <= DECODE_MAX_TOK ? MAX_CHUNKS : 1;
    j.tile_rows = (n_tok < j.tile_tok ? n_tok : j.tile_tok) * j.slice;
    return j;
}

static int64_t base_units(const tile_job *j) { return (int64_t)j->L->n_heads * j->n_tiles * j->n_slices; }

void pkv_attention(const pkv_compute *c, const pkv_kvcache *cache, int layer, const pkv_attn_params *p,
                   const float *q, const int32_t *q_pos, int n_tok, float *out, float *scratch) {
    const pkv_kv_layer *L = &cache->layers[layer];
    tile_job j = job_of(c, cache, layer, p, q, q_pos, n_tok, out);
    j.scratch = scratch;
    j.partials = scratch + (size_t)pkv_pool_size(c->pool) * j.per_thread;
    const int64_t n_base = base_units(&j);
    pkv_pool_for(c->pool, n_base * j.n_chunks, tile_item, &j);
    if (j.n_chunks > 1 && needs_merge(&j, n_base)) pkv_pool_for(c->pool, n_base, merge_item, &j);
    if (p->acc_probs) {
        probs_job pj = {c->kern, cache, L, p, q, q_pos, n_tok, scratch, probs_floats(L)};
        pkv_pool_run(c->pool, probs_task, &pj);
    }
}

/* ---------------------------------------------------------------- several sequences, one token each */

/* Sequences of one pass of the pool in pkv_attention_batch. */
enum { BATCH_PASS = 16 };

/* The units of every sequence of a pass, one after another: unit u belongs
 * to the sequence i with first[i] <= u < first[i + 1]. */
typedef struct {
    tile_job jobs[BATCH_PASS];
    int64_t first[BATCH_PASS + 1];
    int n;
    bool merge; /* first[] counts base units (the merge pass), else units */
    bool whole;  /* first[] counts base units, each run whole: its chunks in turn, then their merge */
} batch_job;

static void batch_item(void *arg, int64_t unit, int ith) {
    const batch_job *b = arg;
    int i = 0;
    while (unit >= b->first[i + 1]) i++;
    const tile_job *j = &b->jobs[i];
    const int64_t u = unit - b->first[i];
    if (b->whole) {
        for (int c = 0; c < j->n_chunks; c++) tile_item((void *)j, u * j->n_chunks + c, ith);
        if (j->n_chunks > 1) merge_item((void *)j, u, ith);
    } else if (b->merge) {
        merge_item((void *)j, u, ith);
    } else {
        tile_item((void *)j, u, ith);
    }
}

/* Whether a pass runs each tile whole (its chunks one after another on one
 * thread, then their merge) instead of spreading the chunks over the threads
 * and merging in a second pass: where there are tiles enough to share out
 * (4 a thread) and none is more than half a thread's share of the rows. The
 * chunks, their partial sums and the merge are the same either way, so are
 * the bits; whole, a thread reads a tile's rows as one stream and the pass
 * needs one fork-join instead of two — 3–9% of Qwen 0.5B's 8-stream step
 * (docs/server.md, "Measured: concurrent streams"). */
static bool whole_tiles(const batch_job *b, int n_threads) {
    int64_t units = 0, rows = 0, largest = 0;
    for (int i = 0; i < b->n; i++)
        for (int64_t u = 0; u < base_units(&b->jobs[i]); u++) {
            tile tl;
            tile_setup(&b->jobs[i], u, &tl);
            const int64_t span = tl.row1 - tl.row0;
            units++, rows += span;
            if (span > largest) largest = span;
        }
    return units >= 4 * (int64_t)n_threads && largest * 2 * n_threads <= rows;
}

/* The largest per-thread scratch and partials of n one-token calls on layer
 * `layer`: every pass of pkv_attention_batch lays them out with these strides. */
static void batch_strides(const pkv_compute *c, const pkv_kvcache *const *caches, int n, int layer,
                          const pkv_attn_params *p, size_t *per_thread, size_t *partials) {
    *per_thread = 0, *partials = 0;
    for (int i = 0; i < n; i++) {
        const tile_job j = job_of(c, caches[i], layer, p, NULL, NULL, 1, NULL);
        const size_t f = (size_t)base_units(&j) * MAX_CHUNKS * (size_t)j.tile_rows * ((size_t)j.L->head_dim_v + 2);
        if (j.per_thread > *per_thread) *per_thread = j.per_thread;
        if (f > *partials) *partials = f;
    }
}

size_t pkv_attention_batch_scratch_floats(const pkv_kvcache *const *caches, int n, int layer, int n_head, int n_threads) {
    const pkv_attn_params p = {.n_head = n_head};
    const pkv_compute c = {0};
    size_t per_thread, partials;
    batch_strides(&c, caches, n, layer, &p, &per_thread, &partials);
    return (size_t)n_threads * per_thread + (size_t)(n < BATCH_PASS ? n : BATCH_PASS) * partials;
}

void pkv_attention_batch(const pkv_compute *c, const pkv_kvcache *const *caches, int n, int layer,
                         const pkv_attn_params *p, const float *q, const int32_t *q_pos, float *out, float *scratch) {
    const pkv_kv_layer *L0 = &caches[0]->layers[layer];
    const size_t q_row = (size_t)p->n_head * L0->head_dim_k, out_row = (size_t)p->n_head * L0->head_dim_v;
    size_t per_thread, partials;
    batch_strides(c, caches, n, layer, p, &per_thread, &partials);
    for (int i0 = 0; i0 < n; i0 += BATCH_PASS) {
        batch_job b = {.n = n - i0 < BATCH_PASS ? n - i0 : BATCH_PASS};
        bool merge = false;
        for (int i = 0; i < b.n; i++) {
            tile_job *j = &b.jobs[i];
            const int s = i0 + i;
            *j = job_of(c, caches[s], layer, p, q + (size_t)s * q_row, &q_pos[s], 1, out + (size_t)s * out_row);
            j->scratch = scratch;
            j->per_thread = per_thread;
            j->partials = scratch + (size_t)pkv_pool_size(c->pool) * per_thread + (size_t)i * partials;
        }
        b.whole = whole_tiles(&b, pkv_pool_size(c->pool));
        for (int i = 0; i < b.n; i++) {
            const tile_job *j = &b.jobs[i];
            b.first[i + 1] = b.first[i] + base_units(j) * (b.whole ? 1 : j->n_chunks);
            merge = merge || (!b.whole && needs_merge(j, base_units(j)));
        }
        pkv_pool_for(c->pool, b.first[b.n], batch_item, &b);
        if (!merge) continue;
        b.merge = true;
        for (int i = 0; i < b.n; i++) b.first[i + 1] = b.first[i] + base_units(&b.jobs[i]);
        pkv_pool_for(c->pool, b.first[b.n], batch_item, &b);
    }
}
