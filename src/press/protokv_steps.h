/* ProtoKV's steps on one head's keys (protokv_steps.c), for the press
 * (protokv.c), the tests (brute force against the blocked assignment, the
 * seeded hash) and the selection benchmark. */
#ifndef PKV_PRESS_PROTOKV_STEPS_H
#define PKV_PRESS_PROTOKV_STEPS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/arena.h"
#include "press/press.h"

/* unit[i] = keys[i] / |keys[i]| (zero rows stay zero), norm[i] = |keys[i]| in double. */
void pkv_protokv_unit_vectors(const float *keys, int n, int dim, float *unit, double *norm);
/* Step 1: sim[i] = mean cosine of row i with the rows within kappa, self
 * included; edge_zero divides by 2 kappa + 1 at the edges too. */
void pkv_protokv_local_similarity(const pkv_kernels *kern, const float *unit, const double *norm, int n, int dim,
                                  int kappa, bool edge_zero, double *sim);
/* Step 2: theta = -z of sim (similar: +z), population standard deviation. */
void pkv_protokv_outlier_degree(const double *sim, int n, bool similar, double *theta);
/* Step 3: the SAT candidates in ascending position, the m rows of largest
 * theta (ties to the lower position) or, with use_beta, every row with
 * theta > beta; returns their number, or -1 when the arena is out of memory. */
int pkv_protokv_sat_candidates(const double *theta, int n, bool use_beta, double beta, int m, pkv_arena *arena,
                               int32_t *sat);
/* Step 4's bandwidth: the median pairwise distance of the candidates' keys;
 * 1 when undefined, -1 when the arena is out of memory. */
double pkv_protokv_median_distance(const float *keys, int dim, const int32_t *sat, int n_sat, pkv_arena *arena);

/* A row ranked by a score; pkv_protokv_cmp_ranked_row sorts by key
 * descending, ties to the lower index (qsort). */
typedef struct {
    double key;
    int32_t idx;
} pkv_protokv_ranked_row;
int pkv_protokv_cmp_ranked_row(const void *a, const void *b);

/* Nearest prototype by cosine (B.0 step 6), blocked as a small matrix product:
 * unit_rows [n][dim] and protos [n_protos][dim] are unit vectors (or zero);
 * cluster[i] = the first index of the largest unit_rows[i] . protos[c]. */
void pkv_protokv_nearest(const pkv_kernels *kern, const float *unit_rows, int n, const float *protos, int n_protos,
                         int dim, int32_t *cluster);

/* The random-Fourier-feature hash of (seed, layer, head) (B.0 step 4):
 * W [r][dim] with entries N(0, 1/sigma^2), b [r] uniform in [0, 2 pi). */
void pkv_protokv_lsh_draw(uint64_t seed, int layer, int head, int r, int dim, double sigma, double *W, double *b);

/* Bucket of a key: bit i (most significant first) is cos(W_i . key + b_i) > 0. */
int pkv_protokv_lsh_bucket(const double *W, const double *b, int r, int dim, const float *key);

#endif
