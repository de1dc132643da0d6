/*
 * The library's pseudo-random numbers: splitmix64 (a one-word stream, used
 * directly for seeded presses, synthetic weights and benchmark tokens) and
 * xoshiro256** seeded through splitmix64 (Blackman and Vigna), used by the
 * sampler and the evaluation's generators. Deterministic by seed on every
 * machine; no hidden state.
 */
#ifndef PKV_PRNG_H
#define PKV_PRNG_H

#include <stdint.h>

/* Advances *state and returns the next splitmix64 output. */
uint64_t pkv_splitmix64(uint64_t *state);

typedef struct {
    uint64_t s[4];
} pkv_rng;

/* state[i] = splitmix64 outputs 1..4 started from seed */
void pkv_rng_seed(pkv_rng *rng, uint64_t seed);
uint64_t pkv_rng_next(pkv_rng *rng);
/* Uniform in [0, 1) with 53 random bits. */
double pkv_rng_uniform(pkv_rng *rng);

#endif
