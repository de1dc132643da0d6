/* ProtoKV's steps, exposed for tests (brute force against the blocked
 * assignment, the seeded hash) and for the selection benchmark. */
#ifndef PKV_PRESS_PROTOKV_H
#define PKV_PRESS_PROTOKV_H

#include <stdint.h>

#include "press/press.h"

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
