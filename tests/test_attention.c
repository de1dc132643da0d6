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

/* The SIMD block kernels compute the scalar references' bits (fused
 * multiply-adds in order), for odd sizes too; the scalar table's kernels
 * (plain multiply-adds) agree with them to rounding. */
TEST(attn_block_kernels_levels_bit_identical) {
    uint64_t rng = 1;
    pkv_simd lv[3];
    const int nl = n_levels(lv);
    const int dks[] = {16, 24, 256, 67}, dvs[] = {40, 256, 16, 9}, nqs[] = {1, 3, 8, 13, 64}, ns[] = {16, 5, 1};
    enum { MAXD = 256, MAXQ = 64 };
    static float q[MAXQ * MAXD], kt[3][MAXD * 16], vt[3][16 * MAXD], s[3][MAXQ * 16], o[3][MAXQ * MAXD], p[MAXQ * 16];
    static uint16_t k16[16 * MAXD], v16[16 * MAXD];
    static float k32[16 * MAXD], v32[16 * MAXD];
    float alpha[MAXQ];
    for (int di = 0; di < 4; di++) {
        const int dk = dks[di], dv = dvs[di];
        for (int i = 0; i < 16 * MAXD; i++) {
            k32[i] = rng_sym(&rng), v32[i] = rng_sym(&rng);
            k16[i] = pkv_f32_to_f16(k32[i]), v16[i] = pkv_f32_to_f16(v32[i]);
        }
        for (int i = 0; i < MAXQ * MAXD; i++) q[i] = rng_sym(&rng);
        for (int i = 0; i < MAXQ * 16; i++) p[i] = rng_sym(&rng) > 0 ? rng_sym(&rng) * rng_sym(&rng) : 0.0f;
        for (int i = 0; i < MAXQ; i++) alpha[i] = 0.5f + 0.5f * rng_sym(&rng);
        for (int ni = 0; ni < 3; ni++)
            for (int f16 = 0; f16 < 2; f16++)
                for (int qi = 0; qi < 5; qi++) {
                    const int n = ns[ni], nq = nqs[qi];
                    static float s_ref[MAXQ * 16], o_ref[MAXQ * MAXD];
                    for (int li = 0; li < nl; li++) {
                        const pkv_kernels *k = pkv_kernels_get(lv[li]);
                        k->att_stage(f16 ? (const void *)k16 : k32, f16 ? (const void *)v16 : v32, n, dk, dv, f16 ? 2 : 4,
                                     kt[li], vt[li]);
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
                            /* the staged block is the cache rows, transposed, zero past n */
                            bool ok = true;
                            for (int j = 0; j < 16; j++)
                                for (int d = 0; d < dk; d++) {
                                    const float want = j < n ? (f16 ? pkv_f16_to_f32(k16[j * dk + d]) : k32[j * dk + d]) : 0.0f;
                                    ok &= kt[0][d * 16 + j] == want;
                                }
                            CHECK_MSG(ok, "att_stage keys wrong (dk %d, n %d)", dk, n);
                            continue;
                        }
                        CHECK_MSG(same_floats(kt[0], kt[li], (size_t)dk * 16) && same_floats(vt[0], vt[li], (size_t)16 * dv),
                                  "att_stage %s differs (dk %d dv %d n %d)", pkv_simd_name(lv[li]), dk, dv, n);
                        CHECK_MSG(same_floats(s_ref, s[li], (size_t)nq * 16), "att_scores %s differs (dk %d nq %d)",
                                  pkv_simd_name(lv[li]), dk, nq);
                        CHECK_MSG(same_floats(o_ref, o[li], (size_t)nq * dv), "att_accum %s differs (dv %d nq %d)",
                                  pkv_simd_name(lv[li]), dv, nq);
                    }
                }
    }
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
    const int dks[] = {16, 64, 67, 128, 256}, dvs[] = {9, 16, 40, 64, 96, 128, 200, 256}, nqs[] = {1, 2, 3, 4, 5, 7, 8, 13, 63, 64};
    uint64_t rng = 7;
    pkv_simd lv[3];
    const int nl = n_levels(lv);
    int checked = 0;
    for (int li = 0; li < nl; li++) {
        const pkv_kernels *k = pkv_kernels_get(lv[li]);
        if (lv[li] == PKV_SIMD_AVX512) CHECK(k->att_block != NULL);
        if (!k->att_block) continue;
        for (int di = 0; di < 5; di++)
            for (int vi = 0; vi < 8; vi++)
                for (int qi = 0; qi < 10; qi++) {
                    const int dk = dks[di], dv = dvs[vi], nq = nqs[qi];
                    for (int i = 0; i < dk * 16; i++) kt[i] = rng_sym(&rng) * (qi % 2 ? 8.0f : 1.0f);
                    for (int i = 0; i < 16 * dv; i++) vt[i] = rng_sym(&rng);
                    for (int i = 0; i < nq * dk; i++) q[i] = rng_sym(&rng);
                    for (int i = 0; i < nq; i++) {
                        const bool first = (i + vi) % 3 == 0;
                        m[0][i] = m[1][i] = first ? -INFINITY : rng_sym(&rng) * 4.0f;
                        l[0][i] = l[1][i] = first ? 0.0f : 1.0f + rng_sym(&rng);
                    }
                    for (int i = 0; i < nq * dv; i++) o[0][i] = o[1][i] = rng_sym(&rng);
                    const float scale = 1.0f / sqrtf((float)dk);
                    pkv_att_block_ref(nq, dk, dv, q, kt, vt, scale, m[0], l[0], o[0]);
                    k->att_block(nq, dk, dv, q, kt, vt, scale, m[1], l[1], o[1]);
                    CHECK_MSG(same_floats(m[0], m[1], (size_t)nq) && same_floats(l[0], l[1], (size_t)nq) &&
                                  same_floats(o[0], o[1], (size_t)nq * dv),
                              "att_block %s differs from the reference (dk %d dv %d nq %d)", pkv_simd_name(lv[li]), dk,
                              dv, nq);
                    checked++;
                }
    }
    CHECK(pkv_simd_detect() < PKV_SIMD_AVX512 || checked > 0);
}

/* ------------------------------------------------------------------ full attention */

typedef struct {
    int n_head, n_kv, dk, dv, window;
    pkv_cache_type type;
    float softcap;
} geometry;

/* A one-layer cache whose heads hold ragged rows: n_prompt tokens appended,
 * then each head keeps its own subset (ascending, with gaps). */
static bool make_cache(pkv_kvcache *c, const geometry *g, int n_prompt, uint64_t *rng) {
    pkv_error err;
    const int windows[1] = {g->window};
    if (pkv_kvcache_init(c, g->type, 1, g->n_kv, g->dk, g->dv, windows, &err)) return false;
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

static float cache_val(const pkv_kvcache *c, const void *row, int d) {
    return c->type == PKV_CACHE_F16 ? pkv_f16_to_f32(((const uint16_t *)row)[d]) : ((const float *)row)[d];
}

/* Naive attention in double; also returns the largest |v| for tolerances. */
static void naive_attention(const pkv_kvcache *c, const geometry *g, const float *q, const int32_t *qpos, int n_tok,
                            float scale, double *out) {
    const pkv_kv_layer *L = &c->layers[0];
    const int group = g->n_head / L->n_heads;
    double *w = malloc(((size_t)L->heads[0].n_rows + 1) * sizeof(double));
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
                const void *krow = pkv_kv_key(c, L, kh, r);
                for (int d = 0; d < g->dk; d++) s += (double)qv[d] * cache_val(c, krow, d);
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
                const void *vrow = pkv_kv_value(c, L, kh, r);
                for (int e = 0; e < g->dv; e++) o[e] += w[r] / sum * cache_val(c, vrow, e);
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

/* Against the naive reference: GQA groups of 1, 4 and 8 (one tile holding
 * several tokens or a slice of heads), sliding windows, soft-capping, f16 and
 * f32 caches, prefill and decode shapes, every SIMD level; the SIMD levels
 * agree bit for bit. */
TEST(attn_matches_naive_reference) {
    const geometry geos[] = {
        {8, 2, 32, 24, 0, PKV_CACHE_F32, 0.0f},  {8, 2, 32, 24, 20, PKV_CACHE_F16, 0.0f},
        {4, 1, 256, 256, 0, PKV_CACHE_F16, 0.0f}, {8, 1, 16, 16, 37, PKV_CACHE_F32, 5.0f},
        {3, 3, 64, 64, 0, PKV_CACHE_F16, 0.0f},
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
    const geometry g = {4, 1, 64, 64, 0, PKV_CACHE_F16, 0.0f};
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

/* A query that sees no row (before every kept position) gets zeros. */
TEST(attn_empty_range_is_zero) {
    const geometry g = {2, 1, 16, 16, 4, PKV_CACHE_F32, 0.0f};
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
    const geometry g = {4, 2, 32, 32, 0, PKV_CACHE_F16, 0.0f};
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
