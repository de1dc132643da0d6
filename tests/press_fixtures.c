/* Helpers shared by the press and session tests; see press_fixtures.h. */
#include "press_fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

void test_lcg_tokens(int32_t *t, int n, int n_vocab, uint32_t state) {
    for (int i = 0; i < n; i++) {
        state = state * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((state >> 8) % (uint32_t)(n_vocab - 3));
    }
}

pkv_press_cfg *test_press_cfg(const char *press, const char *const *kv) {
    pkv_error err;
    pkv_press_cfg *cfg = pkv_press_cfg_new(press, &err);
    if (!cfg) {
        test_fail(__FILE__, __LINE__, "%s: %s", press, err.msg);
        return NULL;
    }
    for (int i = 0; kv && kv[i]; i += 2)
        if (pkv_press_cfg_set(cfg, kv[i], kv[i + 1], &err)) {
            test_fail(__FILE__, __LINE__, "%s=%s: %s", kv[i], kv[i + 1], err.msg);
            pkv_press_cfg_free(cfg);
            return NULL;
        }
    return cfg;
}

bool press_dump_load(const char *path, press_dump *d) {
    memset(d, 0, sizeof *d);
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char magic[8];
    int32_t h[6];
    bool ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, "PKVPRS1", 8) && fread(h, 4, 6, f) == 6 &&
              h[4] <= (int32_t)(sizeof d->tokens / sizeof d->tokens[0]);
    if (ok) {
        d->n_layers = h[0], d->n_head = h[1], d->n_head_kv = h[2], d->head_dim = h[3], d->L = h[4], d->w_max = h[5];
        size_t qn = (size_t)d->n_head * d->w_max * d->head_dim, kn = (size_t)d->n_head_kv * d->L * d->head_dim;
        size_t an = (size_t)d->n_head * d->L;
        size_t per_layer = qn + 2 * kn + 2 * an;
        d->data = malloc(per_layer * d->n_layers * sizeof(float));
        d->q = calloc((size_t)d->n_layers, sizeof(float *));
        d->k = calloc((size_t)d->n_layers, sizeof(float *));
        d->v = calloc((size_t)d->n_layers, sizeof(float *));
        d->attn_sum = calloc((size_t)d->n_layers, sizeof(float *));
        d->attn_last = calloc((size_t)d->n_layers, sizeof(float *));
        ok = d->data && d->q && d->k && d->v && d->attn_sum && d->attn_last &&
             fread(d->data, sizeof(float), per_layer * d->n_layers, f) == per_layer * d->n_layers &&
             fread(d->tokens, 4, (size_t)d->L, f) == (size_t)d->L;
        for (int l = 0; ok && l < d->n_layers; l++) {
            d->q[l] = d->data + per_layer * l;
            d->k[l] = d->q[l] + qn;
            d->v[l] = d->k[l] + kn;
            d->attn_sum[l] = d->v[l] + kn;
            d->attn_last[l] = d->attn_sum[l] + an;
        }
    }
    fclose(f);
    return ok;
}

void press_dump_free(press_dump *d) {
    free(d->data);
    free(d->q);
    free(d->k);
    free(d->v);
    free(d->attn_sum);
    free(d->attn_last);
}
