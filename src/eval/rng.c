/* FNV-1a-64 seeds and the draws built on xoshiro256** (src/base/prng.c). See rng.h. */
#include "eval/rng.h"

#include <stdio.h>

uint64_t pkv_fnv1a64_more(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t pkv_fnv1a64(const void *data, size_t len) { return pkv_fnv1a64_more(PKV_FNV_OFFSET, data, len); }

uint64_t pkv_eval_seed(const char *task, int length, int sample, uint64_t base_seed) {
    char text[256];
    int n = snprintf(text, sizeof text, "%s/%d/%d/%llu", task, length, sample, (unsigned long long)base_seed);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof text) n = (int)sizeof text - 1;
    return pkv_fnv1a64(text, (size_t)n);
}

uint64_t pkv_rng_below(pkv_rng *rng, uint64_t n) {
    /* reject the lowest (2^64 mod n) values so every residue is equally likely */
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t x = pkv_rng_next(rng);
        if (x >= threshold) return x % n;
    }
}

int64_t pkv_rng_range(pkv_rng *rng, int64_t lo, int64_t hi) {
    return lo + (int64_t)pkv_rng_below(rng, (uint64_t)(hi - lo) + 1);
}

void pkv_rng_shuffle_ptr(pkv_rng *rng, const char **a, size_t n) {
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)pkv_rng_below(rng, i + 1);
        const char *t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void pkv_rng_shuffle_int(pkv_rng *rng, int *a, size_t n) {
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)pkv_rng_below(rng, i + 1);
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void pkv_rng_distinct(pkv_rng *rng, int n, int k, int *out) {
    for (int i = 0; i < k; i++) {
        for (;;) {
            int v = (int)pkv_rng_below(rng, (uint64_t)n);
            int seen = 0;
            for (int j = 0; j < i && !seen; j++) seen = out[j] == v;
            if (!seen) {
                out[i] = v;
                break;
            }
        }
    }
}
