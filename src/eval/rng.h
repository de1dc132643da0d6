/*
 * The evaluation's random numbers (docs/evaluation.md §0.5): xoshiro256** seeded
 * through splitmix64, one stream per (task, length, sample). Every draw the
 * generators make goes through the few functions below, so an independent
 * implementation (tools/eval-golden.py) reproduces the prompts byte for byte.
 *
 *   seed(task, length, sample, base) = FNV-1a-64 of the text
 *                                      "<task>/<length>/<sample>/<base>"
 *   state[i] = splitmix64 outputs 1..4 started from that seed
 *   below(n)  = x % n for the first next() x >= (2^64 - n) % n (no modulo bias)
 *   shuffle   = Fisher-Yates from the last element: swap a[i], a[below(i+1)]
 *   distinct(n, k) = k draws of below(n), redrawing values already drawn,
 *                    in draw order
 */
#ifndef PKV_EVAL_RNG_H
#define PKV_EVAL_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "base/prng.h" /* pkv_rng, pkv_rng_seed, pkv_rng_next */

uint64_t pkv_fnv1a64(const void *data, size_t len);
/* Continues an FNV-1a-64 hash over more bytes (start with PKV_FNV_OFFSET). */
uint64_t pkv_fnv1a64_more(uint64_t h, const void *data, size_t len);
#define PKV_FNV_OFFSET 0xcbf29ce484222325ULL

uint64_t pkv_eval_seed(const char *task, int length, int sample, uint64_t base_seed);

/* Uniform in [0, n); n > 0. */
uint64_t pkv_rng_below(pkv_rng *rng, uint64_t n);
/* Uniform in [lo, hi], inclusive. */
int64_t pkv_rng_range(pkv_rng *rng, int64_t lo, int64_t hi);
/* Fisher-Yates over an array of pointers / of ints. */
void pkv_rng_shuffle_ptr(pkv_rng *rng, const char **a, size_t n);
void pkv_rng_shuffle_int(pkv_rng *rng, int *a, size_t n);
/* k distinct values of [0, n) in draw order (k <= n). */
void pkv_rng_distinct(pkv_rng *rng, int n, int k, int *out);

#endif
