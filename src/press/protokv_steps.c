/*
 * ProtoKV's steps on one head's keys that need none of the press's options
 * (docs/presses.md B.0): the local similarity and outlier degree (steps
 * 1-2), the SAT candidates (3), the hash's bandwidth and buckets (4), the
 * nearest prototype (6). protokv.c builds the prototypes and clusters with
 * them.
 */
#include <math.h>
#include <stdlib.h>

#include "base/prng.h"
#include "press/protokv_steps.h"

/* unit[i] = k_i / |k_i| (zero rows stay zero), norms in double */
void pkv_protokv_unit_vectors(const float *keys, int n, int dim, float *unit, double *norm) {
    for (int i = 0; i < n; i++) {
        const float *k = keys + (size_t)i * dim;
        double ss = 0.0;
        for (int j = 0; j < dim; j++) ss += (double)k[j] * k[j];
        norm[i] = sqrt(ss);
        float inv = norm[i] > 0.0 ? (float)(1.0 / norm[i]) : 0.0f;
        for (int j = 0; j < dim; j++) unit[(size_t)i * dim + j] = k[j] * inv;
    }
}

/* Step 1: S(i), every pair within kappa computed once. */
void pkv_protokv_local_similarity(const pkv_kernels *kern, const float *unit, const double *norm, int n, int dim,
                                  int kappa, bool edge_zero, double *sim) {
    for (int i = 0; i < n; i++) sim[i] = norm[i] > 0.0 ? 1.0 : 0.0;
    for (int o = 1; o <= kappa && o < n; o++)
        for (int i = 0; i + o < n; i++) {
            double c = kern->dot_f32(dim, unit + (size_t)i * dim, unit + (size_t)(i + o) * dim);
            sim[i] += c;
            sim[i + o] += c;
        }
    for (int i = 0; i < n; i++) {
        int before = i < kappa ? i : kappa, after = n - 1 - i < kappa ? n - 1 - i : kappa;
        sim[i] /= edge_zero ? 2.0 * kappa + 1.0 : (double)(before + after + 1);
    }
}

/* Step 2: theta = -z (sign=similar: +z), population standard deviation. */
void pkv_protokv_outlier_degree(const double *sim, int n, bool similar, double *theta) {
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < n; i++) mean += sim[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (sim[i] - mean) * (sim[i] - mean);
    double sd = sqrt(var / n);
    for (int i = 0; i < n; i++) {
        double z = sd > 0.0 ? (sim[i] - mean) / sd : 0.0;
        theta[i] = similar ? z : -z;
    }
}

int pkv_protokv_cmp_ranked_row(const void *a, const void *b) {
    const pkv_protokv_ranked_row *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int cmp_int32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Step 3: the candidates, ascending position; returns their number or -1. */
int pkv_protokv_sat_candidates(const double *theta, int n, bool use_beta, double beta, int m, pkv_arena *arena,
                               int32_t *sat) {
    int n_sat = 0;
    if (use_beta) {
        for (int i = 0; i < n; i++)
            if (theta[i] > beta) sat[n_sat++] = i;
        return n_sat;
    }
    pkv_protokv_ranked_row *rows = pkv_arena_alloc(arena, (size_t)n * sizeof *rows);
    if (!rows) return -1;
    for (int i = 0; i < n; i++) rows[i] = (pkv_protokv_ranked_row){theta[i], i};
    qsort(rows, (size_t)n, sizeof *rows, pkv_protokv_cmp_ranked_row);
    n_sat = m < n ? m : n;
    for (int i = 0; i < n_sat; i++) sat[i] = rows[i].idx;
    qsort(sat, (size_t)n_sat, sizeof *sat, cmp_int32);
    return n_sat;
}

/* Median pairwise Euclidean distance of the candidates' keys (numpy's median:
 * the mean of the two middle values for an even count); 1 when undefined. */
double pkv_protokv_median_distance(const float *keys, int dim, const int32_t *sat, int n_sat, pkv_arena *arena) {
    long n_pairs = (long)n_sat * (n_sat - 1) / 2;
    if (n_pairs < 1) return 1.0;
    double *dist = pkv_arena_alloc(arena, (size_t)n_pairs * sizeof *dist);
    if (!dist) return -1.0;
    long k = 0;
    for (int a = 0; a < n_sat; a++)
        for (int b = a + 1; b < n_sat; b++) {
            const float *x = keys + (size_t)sat[a] * dim, *y = keys + (size_t)sat[b] * dim;
            double ss = 0.0;
            for (int j = 0; j < dim; j++) ss += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
            dist[k++] = sqrt(ss);
        }
    qsort(dist, (size_t)n_pairs, sizeof *dist, cmp_double);
    double med = n_pairs % 2 ? dist[n_pairs / 2] : 0.5 * (dist[n_pairs / 2 - 1] + dist[n_pairs / 2]);
    return med > 0.0 ? med : 1.0;
}

/*
 * The hash's random numbers, reproduced bit for bit by
 * tools/protokv_reference.py:
 *   state = seed ^ ((layer + 1) << 32) ^ ((head + 1) * 0x9e3779b97f4a7c15)   (mod 2^64)
 *   next() = splitmix64 (pkv_splitmix64); unif() = (next() >> 11) * 2^-53 in [0, 1)
 *   normal() = sqrt(-2 ln(1 - unif())) * cos(2 pi unif())   (Box-Muller, cosine branch; two draws, in order)
 *   W[i][j] = normal() / sigma for i < r, j < dim (row-major), then b[i] = 2 pi unif() for i < r.
 */
static double unif(uint64_t *state) { return (double)(pkv_splitmix64(state) >> 11) * 0x1p-53; }

void pkv_protokv_lsh_draw(uint64_t seed, int layer, int head, int r, int dim, double sigma, double *W, double *b) {
    uint64_t state = seed ^ ((uint64_t)(layer + 1) << 32) ^ (uint64_t)(head + 1) * 0x9e3779b97f4a7c15ull;
    const double two_pi = 6.283185307179586;
    for (int i = 0; i < r * dim; i++) {
        double u1 = 1.0 - unif(&state), u2 = unif(&state);
        W[i] = sqrt(-2.0 * log(u1)) * cos(two_pi * u2) / sigma;
    }
    for (int i = 0; i < r; i++) b[i] = two_pi * unif(&state);
}

int pkv_protokv_lsh_bucket(const double *W, const double *b, int r, int dim, const float *key) {
    int bucket = 0;
    for (int i = 0; i < r; i++) {
        double a = b[i];
        for (int j = 0; j < dim; j++) a += W[(size_t)i * dim + j] * key[j];
        /* H = sum_i 2^(r-i) h_i (1-based i) mod 2^r: the first bit is the most significant */
        bucket = bucket << 1 | (cos(a) > 0.0);
    }
    return bucket;
}

enum { TILE_ROWS = 64, TILE_PROTOS = 32 };

void pkv_protokv_nearest(const pkv_kernels *kern, const float *unit_rows, int n, const float *protos, int n_protos,
                         int dim, int32_t *cluster) {
    float best[TILE_ROWS];
    for (int r0 = 0; r0 < n; r0 += TILE_ROWS) {
        int r1 = r0 + TILE_ROWS < n ? r0 + TILE_ROWS : n;
        for (int i = r0; i < r1; i++) {
            best[i - r0] = -INFINITY;
            cluster[i] = 0;
        }
        /* a tile of prototypes stays in cache while the tile of rows passes over it */
        for (int c0 = 0; c0 < n_protos; c0 += TILE_PROTOS) {
            int c1 = c0 + TILE_PROTOS < n_protos ? c0 + TILE_PROTOS : n_protos;
            for (int i = r0; i < r1; i++) {
                const float *u = unit_rows + (size_t)i * dim;
                float b = best[i - r0];
                int32_t arg = cluster[i];
                for (int c = c0; c < c1; c++) {
                    float s = kern->dot_f32(dim, u, protos + (size_t)c * dim);
                    if (s > b) {
                        b = s;
                        arg = c;
                    }
                }
                best[i - r0] = b;
                cluster[i] = arg;
            }
        }
    }
}
