#include "attention.h"

#include <math.h>
#include <string.h>

typedef struct {
    const pkv_kernels *kern;
    const pkv_kvcache *cache;
    const pkv_kv_layer *layer;
    const pkv_attn_params *p;
    const float *q;
    const int32_t *q_pos;
    int n_tok;
    float *out;
    float *scratch;             /* n_threads x scratch_per_thread floats */
    size_t scratch_per_thread;
} attn_job;

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

static void attend_one(const attn_job *j, int t, int h, float *scores) {
    const pkv_kv_layer *L = j->layer;
    const pkv_kvcache *c = j->cache;
    int group = j->p->n_head / L->n_heads;
    const pkv_kv_head *kh = &L->heads[h / group];
    int dk = L->head_dim_k, dv = L->head_dim_v;
    int32_t qp = j->q_pos[t];
    int hi = lower_bound(kh->pos, kh->n_rows, qp + 1);
    int lo = L->sliding_window > 0 ? lower_bound(kh->pos, hi, qp - L->sliding_window + 1) : 0;
    const float *q = j->q + ((int64_t)t * j->p->n_head + h) * dk;
    float *o = j->out + ((int64_t)t * j->p->n_head + h) * dv;
    memset(o, 0, (size_t)dv * sizeof(float));
    if (hi <= lo) return;
    int n = hi - lo;
    const pkv_kernels *k = j->kern;
    float mx = -INFINITY;
    for (int r = 0; r < n; r++) {
        const void *krow = pkv_kv_key(c, L, kh, lo + r);
        float s = c->type == PKV_CACHE_F32 ? k->dot_f32(dk, krow, q) : k->dot_f16_f32(dk, krow, q);
        s *= j->p->scale;
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
    if (j->p->acc_probs) {
        float *acc = j->p->acc_probs[h] + lo;
        for (int r = 0; r < n; r++) acc[r] += scores[r] * inv;
    }
    for (int r = 0; r < n; r++) {
        const void *vrow = pkv_kv_value(c, L, kh, lo + r);
        if (c->type == PKV_CACHE_F32) k->axpy_f32(dv, scores[r] * inv, vrow, o);
        else k->axpy_f16(dv, scores[r] * inv, vrow, o);
    }
}

static void attn_task(void *arg, int ith, int nth) {
    attn_job *j = arg;
    float *scores = j->scratch + (size_t)ith * j->scratch_per_thread;
    if (j->p->acc_probs) {
        /* accumulating: one thread per head, queries in order */
        int64_t h0, h1;
        pkv_split(j->p->n_head, ith, nth, 1, &h0, &h1);
        for (int64_t h = h0; h < h1; h++)
            for (int t = 0; t < j->n_tok; t++) attend_one(j, t, (int)h, scores);
        return;
    }
    int64_t n_pairs = (int64_t)j->n_tok * j->p->n_head;
    int64_t b, e;
    pkv_split(n_pairs, ith, nth, 1, &b, &e);
    for (int64_t i = b; i < e; i++) attend_one(j, (int)(i / j->p->n_head), (int)(i % j->p->n_head), scores);
}

size_t pkv_attention_scratch_floats(const pkv_kvcache *cache, int layer, int n_threads) {
    const pkv_kv_layer *L = &cache->layers[layer];
    size_t max_rows = 1;
    for (int h = 0; h < L->n_heads; h++)
        if ((size_t)L->heads[h].n_rows > max_rows) max_rows = (size_t)L->heads[h].n_rows;
    return max_rows * (size_t)n_threads;
}

void pkv_attention(const pkv_compute *c, const pkv_kvcache *cache, int layer, const pkv_attn_params *p,
                   const float *q, const int32_t *q_pos, int n_tok, float *out, float *scratch) {
    attn_job j = {c->kern, cache, &cache->layers[layer], p, q, q_pos, n_tok, out, scratch, 0};
    j.scratch_per_thread = pkv_attention_scratch_floats(cache, layer, 1);
    pkv_pool_run(c->pool, attn_task, &j);
}
