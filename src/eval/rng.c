/* xoshiro256** with splitmix64 seeding (Blackman and Vigna), FNV-1a-64. See rng.h. */
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

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void pkv_rng_seed(pkv_rng *rng, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t pkv_rng_next(pkv_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
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
