#include "attention.h"

#include <math.h>
#include <stdlib.h>
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
    for (int r = 0; r < n; r++) {
        const void *vrow = pkv_kv_value(c, L, kh, lo + r);
        if (c->type == PKV_CACHE_F32) k->axpy_f32(dv, scores[r] * inv, vrow, o);
        else k->axpy_f16(dv, scores[r] * inv, vrow, o);
    }
}

static void attn_task(void *arg, int ith, int nth) {
    attn_job *j = arg;
    int64_t n_pairs = (int64_t)j->n_tok * j->p->n_head;
    int64_t b, e;
    pkv_split(n_pairs, ith, nth, 1, &b, &e);
    if (b >= e) return;
    int max_rows = 0;
    for (int h = 0; h < j->layer->n_heads; h++)
        if (j->layer->heads[h].n_rows > max_rows) max_rows = j->layer->heads[h].n_rows;
    float *scores = malloc((size_t)(max_rows ? max_rows : 1) * sizeof(float));
    if (!scores) return;
    for (int64_t i = b; i < e; i++) attend_one(j, (int)(i / j->p->n_head), (int)(i % j->p->n_head), scores);
    free(scores);
}

void pkv_attention(const pkv_compute *c, const pkv_kvcache *cache, int layer, const pkv_attn_params *p,
                   const float *q, const int32_t *q_pos, int n_tok, float *out) {
    attn_job j = {c->kern, cache, &cache->layers[layer], p, q, q_pos, n_tok, out};
    pkv_pool_run(c->pool, attn_task, &j);
}
