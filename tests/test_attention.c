/*
 * Tests for the tiled attention (src/cache/attention.c) and its block kernels
 * (att_stage, att_scores, att_accum in quant.h).
 *
 * The reference is the definition evaluated naively in double: for each
 * query, the rows of its KV head whose position is <= the query's (and
 * inside the sliding window), softmax of scale * q.k (optionally soft-capped)
 * over them, times the values. The caches are ragged: heads hold different
 * rows (as after a press), with gaps in their positions.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/prng.h"
#include "base/threads.h"
#include "cache/attention.h"
#include "cache/kvcache.h"
#include "kernels/f16.h"
#include "kernels/levels.h"
#include "test.h"

static float rng_sym(uint64_t *s) { return (float)((pkv_splitmix64(s) >> 40) * (2.0 / 16777216.0) - 1.0); }

static int n_levels(pkv_simd out[3]) {
    int n = 0;
    for (pkv_simd l = PKV_SIMD_SCALAR; l <= PKV_SIMD_AVX512; l++)
        if (l <= pkv_simd_detect()) out[n++] = l;
    return n;
}

static bool same_floats(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (pkv_f32_to_bits(a[i]) != pkv_f32_to_bits(b[i])) return false;
    return true;
}

/* ------------------------------------------------------------------ block kernels */

/* n_rows rows of dim random values in cache row type t (F32, F16, Q8_0,
 * Q4_0), quantised as the cache does it; NULL when dim does not fit t. */
static uint8_t *random_rows(pkv_type t, int n_rows, int dim, uint64_t *rng) {
    const size_t rb = pkv_att_row_bytes(t, dim);
    if ((t == PKV_TYPE_Q8_0 || t == PKV_TYPE_Q4_0) && dim % 32) return NULL;
    float *x = malloc((size_t)dim * sizeof(float));
    uint8_t *rows = malloc((size_t)n_rows * rb + 1);
    const pkv_kernels *k = pkv_kernels_get(PKV_SIMD_SCALAR);
    for (int r = 0; r < n_rows; r++) {
        for (int d = 0; d < dim; d++) x[d] = rng_sym(rng);
        if (r == 3) x[dim / 2] = 0.0f; /* a zero among the quants */
        uint8_t *dst = rows + (size_t)r * rb;
        if (t == PKV_TYPE_F32) memcpy(dst, x, (size_t)dim * sizeof(float));
        else if (t == PKV_TYPE_F16) pkv_f32_to_f16_scalar(x, (uint16_t *)dst, dim);
        else if (t == PKV_TYPE_Q8_0) k->quantize[PKV_TYPE_Q8_0](x, dst, dim);
        else pkv_quantize_row_ref(PKV_TYPE_Q4_0, x, dst, dim);
    }
    free(x);
    return rows;
}

static const char *type_label(pkv_type t) { return pkv_type_get(t)->name; }

/* The SIMD block kernels compute the scalar references' bits (fused
 * multiply-adds in order), for odd sizes too; the scalar table's kernels
 * (plain multiply-adds) agree with them to rounding. Staging gives each
 * element exactly as its type's dequantiser does, for every row type and
 * pair of key and value types (f32, f16, Q8_0, Q4_0), at every level. */
TEST(attn_block_kernels_levels_bit_identical) {
    uint64_t rng = 1;
    pkv_simd lv[3];
    const int nl = n_levels(lv);
    const int dks[] = {16, 24, 256, 67, 32, 64, 96}, dvs[] = {40, 256, 16, 9, 64, 128, 32};
    const int nqs[] = {1, 3, 8, 13, 64}, ns[] = {16, 5, 1};
    const pkv_type pairs[][2] = {{PKV_TYPE_F32, PKV_TYPE_F32},   {PKV_TYPE_F16, PKV_TYPE_F16},
                                 {PKV_TYPE_Q8_0, PKV_TYPE_Q8_0}, {PKV_TYPE_Q4_0, PKV_TYPE_Q4_0},
                                 {PKV_TYPE_Q8_0, PKV_TYPE_F16},  {PKV_TYPE_F32, PKV_TYPE_Q4_0}};
    enum { MAXD = 256, MAXQ = 64 };
    static float q[MAXQ * MAXD], kt[3][MAXD * 16], vt[3][16 * MAXD], s[3][MAXQ * 16], o[3][MAXQ * MAXD], p[MAXQ * 16];
    static float kdq[16 * MAXD], vdq[16 * MAXD];
    float alpha[MAXQ];
    int n_staged_quant = 0;
    const pkv_kernels *sk = pkv_kernels_get(PKV_SIMD_SCALAR);
    for (int di = 0; di < 7; di++)
        for (size_t pi = 0; pi < sizeof pairs / sizeof *pairs; pi++) {
            const int dk = dks[di], dv = dvs[di];
            const pkv_type tk = pairs[pi][0], tv = pairs[pi][1];
            uint8_t *krows = random_rows(tk, 16, dk, &rng), *vrows = random_rows(tv, 16, dv, &rng);
            if (!krows || !vrows) {
                free(krows), free(vrows);
                continue;
            }
            n_staged_quant += tk == PKV_TYPE_Q8_0 || tk == PKV_TYPE_Q4_0 || tv == PKV_TYPE_Q8_0 || tv == PKV_TYPE_Q4_0;
            /* what the staged block must hold: each row through its type's dequantiser */
            sk->dequant[tk](krows, kdq, 16 * dk);
            sk->dequant[tv](vrows, vdq, 16 * dv);
            for (int i = 0; i < MAXQ * MAXD; i++) q[i] = rng_sym(&rng);
            for (int i = 0; i < MAXQ * 16; i++) p[i] = rng_sym(&rng) > 0 ? rng_sym(&rng) * rng_sym(&rng) : 0.0f;
            for (int i = 0; i < MAXQ; i++) alpha[i] = 0.5f + 0.5f * rng_sym(&rng);
            for (int ni = 0; ni < 3; ni++)
                for (int qi = 0; qi < 5; qi++) {
                    const int n = ns[ni], nq = nqs[qi];
                    static float s_ref[MAXQ * 16], o_ref[MAXQ * MAXD];
                    for (int li = 0; li < nl; li++) {
                        const pkv_kernels *k = pkv_kernels_get(lv[li]);
                        k->att_stage(krows, vrows, n, dk, dv, tk, tv, kt[li], vt[li]);
                        k->att_scores(nq, dk, q, kt[li], s[li]);
                        for (int i = 0; i < nq * dv; i++) o[li][i] = q[i % (MAXQ * MAXD)];
                        k->att_accum(nq, dv, p, alpha, vt[li], o[li]);
                        if (li == 0) {
                            pkv_att_scores_ref(nq, dk, q, kt[0], s_ref);
                            for (int i = 0; i < nq * dv; i++) o_ref[i] = q[i % (MAXQ * MAXD)];
                            pkv_att_accum_ref(nq, dv, p, alpha, vt[0], o_ref);
                            double worst = 0.0;
                            for (int i = 0; i < nq * 16; i++) worst = fmax(worst, fabs(s[0][i] - s_ref[i]));
                            for (int i = 0; i < nq * dv; i++) worst = fmax(worst, fabs(o[0][i] - o_ref[i]));
                            CHECK_MSG(worst <= 1e-5 * dk, "scalar block kernels vs reference: %.3g (dk %d)", worst, dk);
                            /* the staged block is the cache rows dequantised, keys transposed, zero past n */
                            bool ok = true;
                            for (int j = 0; j < 16; j++) {
                                for (int d = 0; d < dk; d++)
                                    ok &= pkv_f32_to_bits(kt[0][d * 16 + j]) ==
                                          pkv_f32_to_bits(j < n ? kdq[j * dk + d] : 0.0f);
                                for (int e = 0; e < dv; e++)
                                    ok &= pkv_f32_to_bits(vt[0][j * dv + e]) ==
                                          pkv_f32_to_bits(j < n ? vdq[j * dv + e] : 0.0f);
                            }
                            CHECK_MSG(ok, "att_stage %s/%s rows wrong (dk %d dv %d, n %d)", type_label(tk),
                                      type_label(tv), dk, dv, n);
                            continue;
                        }
                        CHECK_MSG(same_floats(kt[0], kt[li], (size_t)dk * 16) && same_floats(vt[0], vt[li], (size_t)16 * dv),
                                  "att_stage %s differs (%s/%s, dk %d dv %d n %d)", pkv_simd_name(lv[li]), type_label(tk),
                                  type_label(tv), dk, dv, n);
                        CHECK_MSG(same_floats(s_ref, s[li], (size_t)nq * 16), "att_scores %s differs (dk %d nq %d)",
                                  pkv_simd_name(lv[li]), dk, nq);
                        CHECK_MSG(same_floats(o_ref, o[li], (size_t)nq * dv), "att_accum %s differs (dv %d nq %d)",
                                  pkv_simd_name(lv[li]), dv, nq);
                    }
                }
            free(krows), free(vrows);
        }
    CHECK(n_staged_quant >= 12); /* the quantised pairs ran at several sizes, not skipped */
}

/* The running state a block meets, the same in both copies: per query row
 * the first block (m = -inf, l = 0, as salt picks) or a later one, and
 * random output rows. */
static void random_block_state(int nq, int dv, int salt, uint64_t *rng, float *m0, float *m1, float *l0, float *l1,
                               float *o0, float *o1) {
    for (int i = 0; i < nq; i++) {
        const bool first = (i + salt) % 3 == 0;
        m0[i] = m1[i] = first ? -INFINITY : rng_sym(rng) * 4.0f;
        l0[i] = l1[i] = first ? 0.0f : 1.0f + rng_sym(rng);
    }
    for (int i = 0; i < nq * dv; i++) o0[i] = o1[i] = rng_sym(rng);
}

static bool same_block_state(int nq, int dv, const float *m0, const float *m1, const float *l0, const float *l1,
                             const float *o0, const float *o1) {
    return same_floats(m0, m1, (size_t)nq) && same_floats(l0, l1, (size_t)nq) && same_floats(o0, o1, (size_t)nq * dv);
}

/* att_block (the fused whole-block step) computes pkv_att_block_ref's bits:
 * rows in fours and every remainder, value widths in 64-lane passes and
 * masked tails, the first block (m = -inf, l = 0) and later ones, scores
 * large enough that the running max moves. A level that has the kernel is
 * checked; the AVX-512 table has it. */
TEST(attn_block_fused_equals_reference) {
    enum { MAXD = 256, MAXQ = 64 };
    static float q[MAXQ * MAXD], kt[MAXD * 16], vt[16 * MAXD], o[2][MAXQ * MAXD];
    float m[2][MAXQ], l[2][MAXQ];
    const int dks[] = {16, 64, 67, 128, 256}, dvs[] = {9, 16, 40, 64, 96, 120, 128, 200, 256}, nqs[] = {1, 2, 3, 4, 5, 7, 8, 13, 63, 64};
    uint64_t rng = 7;
    pkv_simd lv[3];
    const int nl = n_levels(lv);
    int checked = 0;
    for (int li = 0; li < nl; li++) {
        const pkv_kernels *k = pkv_kernels_get(lv[li]);
        if (lv[li] == PKV_SIMD_AVX512) CHECK(k->att_block != NULL);
        if (!k->att_block) continue;
        for (int di = 0; di < (int)(sizeof dks / sizeof *dks); di++)
            for (int vi = 0; vi < (int)(sizeof dvs / sizeof *dvs); vi++)
                for (int qi = 0; qi < (int)(sizeof nqs / sizeof *nqs); qi++) {
                    const int dk = dks[di], dv = dvs[vi], nq = nqs[qi];
                    for (int i = 0; i < dk * 16; i++) kt[i] = rng_sym(&rng) * (qi % 2 ? 8.0f : 1.0f);
                    for (int i = 0; i < 16 * dv; i++) vt[i] = rng_sym(&rng);
                    for (int i = 0; i < nq * dk; i++) q[i] = rng_sym(&rng);
                    random_block_state(nq, dv, vi, &rng, m[0], m[1], l[0], l[1], o[0], o[1]);
                    const float scale = 1.0f / sqrtf((float)dk);
                    pkv_att_block_ref(nq, dk, dv, q, kt, vt, scale, m[0], l[0], o[0]);
                    k->att_block(nq, dk, dv, q, kt, vt, scale, m[1], l[1], o[1]);
                    CHECK_MSG(same_block_state(nq, dv, m[0], m[1], l[0], l[1], o[0], o[1]),
                              "att_block %s differs from the reference (dk %d dv %d nq %d)", pkv_simd_name(lv[li]), dk,
                              dv, nq);
                    checked++;
                }
    }
    CHECK(pkv_simd_detect() < PKV_SIMD_AVX512 || checked > 0);
}

/* att_block_f16 (whole blocks of f16 cache rows read where they lie) has the
 * bits of staging each block (the scalar att_stage) and pkv_att_block_ref,
 * block after block, at AVX2 and AVX-512: 1..8 query rows (in fours and
 * every remainder), one to three blocks, key widths of one to sixteen
 * 16-lane chunks, value widths of 16 to 256 (passes of 64 and what is left),
 * first and later blocks. A swapped pair of lanes in an in-register
 * transpose, or a value row read from the wrong place, changes the scores or
 * the outputs. */
TEST(attn_block_f16_equals_staged) {
    enum { MAXD = 256, MAXQ = PKV_ATT_F16_MAX_Q, MAXB = 3 };
    static float q[MAXQ * MAXD], kt[MAXD * 16], vt[16 * MAXD], kf[MAXB * 16 * MAXD], vf[MAXB * 16 * MAXD],
        o[2][MAXQ * MAXD];
    static uint16_t kh[MAXB * 16 * MAXD], vh[MAXB * 16 * MAXD];
    float m[2][MAXQ], l[2][MAXQ];
    const int dks[] = {16, 64, 128, 256}, dvs[] = {16, 48, 64, 80, 128, 256};
    const pkv_kernels *sk = pkv_kernels_get(PKV_SIMD_SCALAR);
    uint64_t rng = 11;
    pkv_simd lv[3];
    const int nl = n_levels(lv);
    int checked = 0;
    for (int li = 0; li < nl; li++) {
        const pkv_kernels *k = pkv_kernels_get(lv[li]);
        if (lv[li] >= PKV_SIMD_AVX2) CHECK(k->att_block_f16 != NULL);
        if (!k->att_block_f16) continue;
        for (int di = 0; di < 4; di++)
            for (int vi = 0; vi < 6; vi++)
                for (int nq = 1; nq <= MAXQ; nq++)
                    for (int nb = 1; nb <= MAXB; nb++) {
                        const int dk = dks[di], dv = dvs[vi];
                        for (int i = 0; i < nb * 16 * dk; i++) kf[i] = rng_sym(&rng) * (nq % 2 ? 8.0f : 1.0f);
                        for (int i = 0; i < nb * 16 * dv; i++) vf[i] = rng_sym(&rng);
                        sk->f32_to_f16(kf, kh, nb * 16 * dk);
                        sk->f32_to_f16(vf, vh, nb * 16 * dv);
                        for (int i = 0; i < nq * dk; i++) q[i] = rng_sym(&rng);
                        random_block_state(nq, dv, vi, &rng, m[0], m[1], l[0], l[1], o[0], o[1]);
                        const float scale = 1.0f / sqrtf((float)dk);
                        for (int b = 0; b < nb; b++) {
                            sk->att_stage(kh + b * 16 * dk, vh + b * 16 * dv, 16, dk, dv, PKV_TYPE_F16, PKV_TYPE_F16,
                                          kt, vt);
                            pkv_att_block_ref(nq, dk, dv, q, kt, vt, scale, m[0], l[0], o[0]);
                        }
                        k->att_block_f16(nq, dk, dv, q, kh, vh, nb, scale, m[1], l[1], o[1]);
                        CHECK_MSG(same_block_state(nq, dv, m[0], m[1], l[0], l[1], o[0], o[1]),
                                  "att_block_f16 %s differs from staging and the reference (dk %d dv %d nq %d, %d blocks)",
                                  pkv_simd_name(lv[li]), dk, dv, nq, nb);
                        checked++;
                    }
    }
    CHECK(checked == (pkv_simd_detect() >= PKV_SIMD_AVX512 ? 2 : pkv_simd_detect() >= PKV_SIMD_AVX2 ? 1 : 0) * 4 * 6 *
                         MAXQ * MAXB);
}

/* ------------------------------------------------------------------ full attention */

typedef struct {
    int n_head, n_kv, dk, dv, window;
    pkv_cache_type type_k, type_v;
    float softcap;
} geometry;

/* A one-layer cache whose heads hold ragged rows: n_prompt tokens appended,
 * then each head keeps its own subset (ascending, with gaps). */
static bool make_cache(pkv_kvcache *c, const geometry *g, int n_prompt, uint64_t *rng) {
    pkv_error err;
    const int windows[1] = {g->window};
    if (pkv_kvcache_init(c, g->type_k, g->type_v, 1, g->n_kv, g->dk, g->dv, windows, &err)) return false;
    const pkv_kernels *kern = pkv_kernels_get(PKV_SIMD_SCALAR);
    float *k = malloc((size_t)n_prompt * g->n_kv * g->dk * sizeof(float));
    float *v = malloc((size_t)n_prompt * g->n_kv * g->dv * sizeof(float));
    int32_t *pos = malloc((size_t)n_prompt * sizeof(int32_t));
    for (size_t i = 0; i < (size_t)n_prompt * g->n_kv * g->dk; i++) k[i] = rng_sym(rng) * 2.0f;
    for (size_t i = 0; i < (size_t)n_prompt * g->n_kv * g->dv; i++) v[i] = rng_sym(rng);
    for (int t = 0; t < n_prompt; t++) pos[t] = t;
    bool ok = !pkv_kvcache_reserve(c, 0, n_prompt, &err);
    if (ok) pkv_kvcache_append(c, kern, 0, k, v, pos, n_prompt);
    int32_t *keep = malloc((size_t)n_prompt * sizeof(int32_t));
    for (int h = 0; h < g->n_kv && ok; h++) {
        int n = 0;
        for (int r = 0; r < n_prompt; r++)
            if (h == 0 || pkv_splitmix64(rng) % 4 != 0) keep[n++] = r; /* head 0 keeps all, the others ~3/4 */
        ok = !pkv_kvcache_keep_rows(c, 0, h, keep, n, 4, &err);
    }
    free(k), free(v), free(pos), free(keep);
    return ok;
}

/* A cache row as the scalar dequantiser reads it (f16 and f32 rows exactly). */
static void row_floats(pkv_type t, const void *row, int dim, double *out) {
    float x[512];
    pkv_kernels_get(PKV_SIMD_SCALAR)->dequant[t](row, x, dim);
    for (int d = 0; d < dim; d++) out[d] = x[d];
}

/* Naive attention in double; also returns the largest |v| for tolerances. */
static void naive_attention(const pkv_kvcache *c, const geometry *g, const float *q, const int32_t *qpos, int n_tok,
                            float scale, double *out) {
    const pkv_kv_layer *L = &c->layers[0];
    const int group = g->n_head / L->n_heads;
    double *w = malloc(((size_t)L->heads[0].n_rows + 1) * sizeof(double)), kv[512];
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < g->n_head; h++) {
            const pkv_kv_head *kh = &L->heads[h / group];
            const float *qv = q + ((size_t)t * g->n_head + h) * g->dk;
            double *o = out + ((size_t)t * g->n_head + h) * g->dv;
            double mx = -INFINITY, sum = 0.0;
            for (int r = 0; r < kh->n_rows; r++) {
                w[r] = NAN;
                const int32_t p = kh->pos[r];
                if (p > qpos[t] || (g->window > 0 && p <= qpos[t] - g->window)) continue;
                double s = 0.0;
                row_floats(c->kern_k, pkv_kv_key(L, kh, r), g->dk, kv);
                for (int d = 0; d < g->dk; d++) s += (double)qv[d] * kv[d];
                s *= scale;
                if (g->softcap > 0.0f) s = g->softcap * tanh(s / g->softcap);
                w[r] = s;
                if (s > mx) mx = s;
            }
            for (int e = 0; e < g->dv; e++) o[e] = 0.0;
            for (int r = 0; r < kh->n_rows; r++)
                if (!isnan(w[r])) sum += w[r] = exp(w[r] - mx);
            for (int r = 0; r < kh->n_rows; r++) {
                if (isnan(w[r])) continue;
                row_floats(c->kern_v, pkv_kv_value(L, kh, r), g->dv, kv);
                for (int e = 0; e < g->dv; e++) o[e] += w[r] / sum * kv[e];
            }
        }
    free(w);
}

static float *run_attention(const pkv_kvcache *c, const geometry *g, pkv_simd level, int n_threads, const float *q,
                            const int32_t *qpos, int n_tok, float scale, float *const *acc) {
    pkv_pool *pool = pkv_pool_new(n_threads);
    pkv_compute comp = {.kern = pkv_kernels_get(level), .pool = pool};
    float *scratch = malloc(pkv_attention_scratch_floats(c, 0, g->n_head, n_threads) * sizeof(float));
    float *out = malloc((size_t)n_tok * g->n_head * g->dv * sizeof(float));
    pkv_attn_params p = {.n_head = g->n_head, .scale = scale, .softcap = g->softcap, .acc_probs = acc};
    pkv_attention(&comp, c, 0, &p, q, qpos, n_tok, out, scratch);
    free(scratch);
    pkv_pool_free(pool);
    return out;
}

/* Queries: the prompt's last tokens (prefill), or new positions past it
 * (decode), or positions among the rows (a chunk of a longer prefill). */
static void make_queries(const geometry *g, int n_prompt, int n_tok, int kind, float *q, int32_t *qpos, uint64_t *rng) {
    for (size_t i = 0; i < (size_t)n_tok * g->n_head * g->dk; i++) q[i] = rng_sym(rng);
    for (int t = 0; t < n_tok; t++) qpos[t] = kind == 0 ? n_prompt - n_tok + t : kind == 1 ? n_prompt + 3 + t : n_prompt / 3 + 2 * t;
}

/* Against the naive reference over the rows as the cache holds them
 * (quantised rows dequantised in double): GQA groups of 1, 4 and 8 (one
 * tile holding several tokens or a slice of heads), sliding windows,
 * soft-capping, f16, f32, Q8_0 and Q4_0 rows and mixed key and value types,
 * prefill and decode shapes, every SIMD level; the SIMD levels agree bit for
 * bit. */
TEST(attn_matches_naive_reference) {
    const geometry geos[] = {
        {8, 2, 32, 24, 0, PKV_CACHE_F32, PKV_CACHE_F32, 0.0f},    {8, 2, 32, 24, 20, PKV_CACHE_F16, PKV_CACHE_F16, 0.0f},
        {4, 1, 256, 256, 0, PKV_CACHE_F16, PKV_CACHE_F16, 0.0f},  {8, 1, 16, 16, 37, PKV_CACHE_F32, PKV_CACHE_F32, 5.0f},
        {3, 3, 64, 64, 0, PKV_CACHE_F16, PKV_CACHE_F16, 0.0f},    {8, 2, 64, 32, 0, PKV_CACHE_Q8_0, PKV_CACHE_Q8_0, 0.0f},
        {4, 1, 128, 128, 20, PKV_CACHE_Q4_0, PKV_CACHE_Q4_0, 0.0f}, {8, 2, 32, 24, 0, PKV_CACHE_Q8_0, PKV_CACHE_F16, 5.0f},
    };
    const int toks[] = {1, 2, 37, 70};
    uint64_t rng = 21;
    pkv_simd lv[3];
    const int nl = n_levels(lv);
    for (size_t gi = 0; gi < sizeof geos / sizeof *geos; gi++) {
        const geometry *g = &geos[gi];
        const int n_prompt = gi == 2 ? 100 : 150; /* 100 rows of 256 dimensions: still several key blocks */
        pkv_kvcache c;
        REQUIRE(make_cache(&c, g, n_prompt, &rng));
        for (size_t ti = 0; ti < sizeof toks / sizeof *toks; ti++)
            for (int kind = 0; kind < 3; kind++) {
                const int n_tok = gi == 2 && toks[ti] > 37 ? 17 : toks[ti];
                float *q = malloc((size_t)n_tok * g->n_head * g->dk * sizeof(float));
                int32_t *qpos = malloc((size_t)n_tok * sizeof(int32_t));
                double *want = malloc((size_t)n_tok * g->n_head * g->dv * sizeof(double));
                make_queries(g, n_prompt, n_tok, kind, q, qpos, &rng);
                const float scale = 1.0f / sqrtf((float)g->dk);
                naive_attention(&c, g, q, qpos, n_tok, scale, want);
                float *first = NULL;
                for (int li = 0; li < nl; li++) {
                    float *got = run_attention(&c, g, lv[li], 2, q, qpos, n_tok, scale, NULL);
                    double worst = 0.0;
                    for (size_t i = 0; i < (size_t)n_tok * g->n_head * g->dv; i++)
                        if (fabs(got[i] - want[i]) > worst) worst = fabs(got[i] - want[i]);
                    CHECK_MSG(worst <= 2e-6, "geometry %zu, %d tokens (kind %d), %s: max error %.3g", gi, n_tok, kind,
                              pkv_simd_name(lv[li]), worst);
                    if (lv[li] == PKV_SIMD_SCALAR) free(got);
                    else if (!first) first = got;
                    else {
                        CHECK_MSG(same_floats(first, got, (size_t)n_tok * g->n_head * g->dv),
                                  "geometry %zu, %d tokens: %s differs from %s", gi, n_tok, pkv_simd_name(lv[li]),
                                  pkv_simd_name(lv[1]));
                        free(got);
                    }
                }
                free(first), free(q), free(qpos), free(want);
            }
        pkv_kvcache_free(&c);
    }
}

/* 1, 2 and 3 threads give the same bits: a prefill shape, and a decode
 * shape long enough to be cut into chunks that threads take separately. */
TEST(attn_thread_count_invariant) {
    const geometry g = {4, 1, 64, 64, 0, PKV_CACHE_F16, PKV_CACHE_F16, 0.0f};
    uint64_t rng = 33;
    pkv_kvcache c;
    REQUIRE(make_cache(&c, &g, 2000, &rng));
    const int toks[] = {1, 3, 40};
    for (int ti = 0; ti < 3; ti++) {
        const int n_tok = toks[ti];
        float *q = malloc((size_t)n_tok * g.n_head * g.dk * sizeof(float));
        int32_t qpos[40];
        make_queries(&g, 2000, n_tok, 1, q, qpos, &rng);
        float *one = run_attention(&c, &g, PKV_SIMD_AUTO, 1, q, qpos, n_tok, 0.125f, NULL);
        for (int nt = 2; nt <= 3; nt++) {
            float *got = run_attention(&c, &g, PKV_SIMD_AUTO, nt, q, qpos, n_tok, 0.125f, NULL);
            CHECK_MSG(same_floats(one, got, (size_t)n_tok * g.n_head * g.dv), "%d tokens: %d threads differ from 1", n_tok, nt);
            free(got);
        }
        double *want = malloc((size_t)n_tok * g.n_head * g.dv * sizeof(double));
        naive_attention(&c, &g, q, qpos, n_tok, 0.125f, want);
        double worst = 0.0;
        for (size_t i = 0; i < (size_t)n_tok * g.n_head * g.dv; i++)
            if (fabs(one[i] - want[i]) > worst) worst = fabs(one[i] - want[i]);
        CHECK_MSG(worst <= 2e-6, "%d tokens over 2000 rows: max error %.3g", n_tok, worst);
        free(one), free(q), free(want);
    }
    pkv_kvcache_free(&c);
}

/* Decode attention of several sequences at once (a batched step) gives each
 * sequence the bits it gets alone: 18 sequences (more than one pass of the
 * pool), ragged heads of 5 to 700 rows (several chunks and their merge, a
 * last block partly filled), one query before every row, f16 and Q8_0 rows,
 * every SIMD level, 1 to 3 threads. */
TEST(attn_batch_equals_one_by_one) {
    enum { N = 18 };
    const geometry geos[] = {{14, 2, 64, 64, 0, PKV_CACHE_F16, PKV_CACHE_F16, 0.0f},
                             {8, 2, 32, 24, 0, PKV_CACHE_Q8_0, PKV_CACHE_F16, 0.0f}};
    const int lens[N] = {5, 700, 16, 257, 300, 31, 512, 129, 640, 17, 400, 1, 90, 600, 256, 33, 450, 520};
    uint64_t rng = 77;
    pkv_simd lv[3];
    const int nl = n_levels(lv);
    for (size_t gi = 0; gi < sizeof geos / sizeof *geos; gi++) {
        const geometry *g = &geos[gi];
        pkv_kvcache c[N];
        const pkv_kvcache *cp[N];
        const size_t q_row = (size_t)g->n_head * g->dk, o_row = (size_t)g->n_head * g->dv;
        float *q = malloc(N * q_row * sizeof(float));
        int32_t qpos[N];
        for (int i = 0; i < N; i++) {
            REQUIRE(make_cache(&c[i], g, lens[i], &rng));
            cp[i] = &c[i];
            make_queries(g, lens[i], 1, 1, q + i * q_row, &qpos[i], &rng);
        }
        qpos[11] = -1; /* sees no row: zeros */
        const float scale = 1.0f / sqrtf((float)g->dk);
        for (int li = 0; li < nl; li++)
            for (int nt = 1; nt <= 3; nt++) {
                pkv_pool *pool = pkv_pool_new(nt);
                pkv_compute comp = {.kern = pkv_kernels_get(lv[li]), .pool = pool};
                pkv_attn_params p = {.n_head = g->n_head, .scale = scale};
                float *out = malloc(N * o_row * sizeof(float));
                float *scratch = malloc(pkv_attention_batch_scratch_floats(cp, N, 0, g->n_head, nt) * sizeof(float));
                pkv_attention_batch(&comp, cp, N, 0, &p, q, qpos, out, scratch);
                for (int i = 0; i < N; i++) {
                    float *one = run_attention(&c[i], g, lv[li], nt, q + i * q_row, &qpos[i], 1, scale, NULL);
                    CHECK_MSG(same_floats(one, out + i * o_row, o_row),
                              "geometry %zu, %s, %d threads: sequence %d (%d rows) differs from its call alone", gi,
                              pkv_simd_name(lv[li]), nt, i, lens[i]);
                    free(one);
                }
                for (size_t e = 0; e < o_row; e++) CHECK(out[11 * o_row + e] == 0.0f);
                free(out), free(scratch);
                pkv_pool_free(pool);
            }
        for (int i = 0; i < N; i++) pkv_kvcache_free(&c[i]);
        free(q);
    }
}

/* A query that sees no row (before every kept position) gets zeros. */
TEST(attn_empty_range_is_zero) {
    const geometry g = {2, 1, 16, 16, 4, PKV_CACHE_F32, PKV_CACHE_F32, 0.0f};
    uint64_t rng = 5;
    pkv_kvcache c;
    REQUIRE(make_cache(&c, &g, 40, &rng));
    /* the window (4) ends before the rows kept: drop the last 10 rows of head 0 */
    int32_t keep[30];
    pkv_error err;
    for (int i = 0; i < 30; i++) keep[i] = i;
    REQUIRE(!pkv_kvcache_keep_rows(&c, 0, 0, keep, 30, 0, &err));
    float q[2 * 2 * 16];
    for (int i = 0; i < 64; i++) q[i] = rng_sym(&rng);
    const int32_t qpos[2] = {45, 31}; /* 45 sees nothing (window 42..45); 31 sees 28, 29 */
    float *out = run_attention(&c, &g, PKV_SIMD_AUTO, 2, q, qpos, 2, 0.25f, NULL);
    for (int i = 0; i < 2 * 16; i++) CHECK(out[i] == 0.0f);
    bool nonzero = false;
    for (int i = 2 * 16; i < 4 * 16; i++) nonzero |= out[i] != 0.0f;
    CHECK(nonzero);
    free(out);
    pkv_kvcache_free(&c);
}

/* With accumulated probabilities (H2O) the outputs are those of the plain
 * path, each query adds a distribution (sum 1) over the rows it sees, and
 * the sums do not depend on the thread count. */
TEST(attn_acc_probs) {
    const geometry g = {4, 2, 32, 32, 0, PKV_CACHE_F16, PKV_CACHE_F16, 0.0f};
    uint64_t rng = 8;
    pkv_kvcache c;
    REQUIRE(make_cache(&c, &g, 90, &rng));
    const int n_tok = 30;
    float q[30 * 4 * 32];
    int32_t qpos[30];
    make_queries(&g, 90, n_tok, 0, q, qpos, &rng);
    float *plain = run_attention(&c, &g, PKV_SIMD_AUTO, 2, q, qpos, n_tok, 0.2f, NULL);
    float *sums[2][4];
    for (int run = 0; run < 2; run++) {
        for (int h = 0; h < 4; h++) sums[run][h] = calloc(100, sizeof(float));
        float *out = run_attention(&c, &g, PKV_SIMD_AUTO, run + 1, q, qpos, n_tok, 0.2f, sums[run]);
        CHECK(same_floats(plain, out, (size_t)n_tok * 4 * 32));
        free(out);
    }
    for (int h = 0; h < 4; h++) {
        double total = 0.0;
        for (int r = 0; r < 100; r++) total += sums[0][h][r];
        CHECK_NEAR(total, n_tok, 1e-4);
        CHECK(same_floats(sums[0][h], sums[1][h], 100));
        free(sums[0][h]), free(sums[1][h]);
    }
    free(plain);
    pkv_kvcache_free(&c);
}

/* Attention over quantised rows is attention over those rows dequantised:
 * an f32 cache holding the Q8_0/Q4_0 cache's rows as its dequantiser gives
 * them produces the same outputs and the same accumulated probabilities
 * (H2O), bit for bit, at every SIMD level, prefill and decode shapes, with a
 * window and a soft-cap: the staging is exact and the rest is the f32 path. */
TEST(attn_quantised_rows_equal_their_dequantisation) {
    const geometry geos[] = {
        {8, 2, 64, 32, 0, PKV_CACHE_Q8_0, PKV_CACHE_Q8_0, 0.0f},
        {4, 1, 128, 128, 20, PKV_CACHE_Q4_0, PKV_CACHE_Q4_0, 0.0f},
        {8, 2, 32, 64, 0, PKV_CACHE_Q8_0, PKV_CACHE_F16, 5.0f},
        {4, 2, 32, 32, 0, PKV_CACHE_F32, PKV_CACHE_Q4_0, 0.0f},
    };
    uint64_t rng = 77;
    pkv_simd lv[3];
    const int nl = n_levels(lv);
    const pkv_kernels *sk = pkv_kernels_get(PKV_SIMD_SCALAR);
    for (size_t gi = 0; gi < sizeof geos / sizeof *geos; gi++) {
        const geometry *g = &geos[gi];
        const geometry gf = {g->n_head, g->n_kv, g->dk, g->dv, g->window, PKV_CACHE_F32, PKV_CACHE_F32, g->softcap};
        pkv_kvcache qc, fc;
        pkv_error err;
        REQUIRE(make_cache(&qc, g, 120, &rng));
        const int windows[1] = {g->window};
        REQUIRE(pkv_kvcache_init(&fc, PKV_CACHE_F32, PKV_CACHE_F32, 1, g->n_kv, g->dk, g->dv, windows, &err) == 0);
        for (int h = 0; h < g->n_kv; h++) {
            const int n = qc.layers[0].heads[h].n_rows;
            float *k = malloc((size_t)n * g->dk * sizeof(float) + 4), *v = malloc((size_t)n * g->dv * sizeof(float) + 4);
            pkv_kvcache_read_k(&qc, sk, 0, h, k);
            pkv_kvcache_read_v(&qc, sk, 0, h, v);
            REQUIRE(pkv_kvcache_put_rows(&fc, 0, h, n, k, v, qc.layers[0].heads[h].pos, &err) == 0);
            free(k), free(v);
        }
        const int toks[] = {1, 3, 40};
        for (int ti = 0; ti < 3; ti++)
            for (int li = 0; li < nl; li++) {
                const int n_tok = toks[ti];
                float *q = malloc((size_t)n_tok * g->n_head * g->dk * sizeof(float));
                int32_t qpos[40];
                make_queries(g, 120, n_tok, ti == 2 ? 0 : 1, q, qpos, &rng);
                float *sums[2][8];
                for (int s = 0; s < 2; s++)
                    for (int h = 0; h < g->n_head; h++) sums[s][h] = calloc(128, sizeof(float));
                float *a = run_attention(&qc, g, lv[li], 2, q, qpos, n_tok, 0.2f, sums[0]);
                float *b = run_attention(&fc, &gf, lv[li], 2, q, qpos, n_tok, 0.2f, sums[1]);
                CHECK_MSG(same_floats(a, b, (size_t)n_tok * g->n_head * g->dv),
                          "geometry %zu (%s/%s), %d tokens, %s: outputs differ from the dequantised rows'", gi,
                          pkv_cache_type_name(g->type_k), pkv_cache_type_name(g->type_v), n_tok, pkv_simd_name(lv[li]));
                bool same = true;
                for (int h = 0; h < g->n_head; h++) same &= same_floats(sums[0][h], sums[1][h], 128);
                CHECK_MSG(same, "geometry %zu, %d tokens, %s: accumulated probabilities differ", gi, n_tok,
                          pkv_simd_name(lv[li]));
                for (int s = 0; s < 2; s++)
                    for (int h = 0; h < g->n_head; h++) free(sums[s][h]);
                free(a), free(b), free(q);
            }
        pkv_kvcache_free(&qc);
        pkv_kvcache_free(&fc);
    }
}
