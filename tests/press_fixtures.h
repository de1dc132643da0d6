/*
 * Helpers shared by the press and session tests: prompts of random tokens, a
 * press configuration from option pairs, and the layer tensors that tools/make-press-fixtures.py dumps from tiny HF
 * models (tests/fixtures/press/README.md, format "PKVPRS1").
 */
#ifndef PKV_TEST_PRESS_FIXTURES_H
#define PKV_TEST_PRESS_FIXTURES_H

#include <stdbool.h>
#include <stdint.h>

#include "promptkv.h"

/* n token ids in [3, n_vocab) from a linear congruential generator started
 * at state: prompts of random tokens, the same on every machine. */
void test_lcg_tokens(int32_t *t, int n, int n_vocab, uint32_t state);

/* A press with the options of kv, a NULL-terminated list of name, value
 * pairs (kv may be NULL). A failure fails the running test and gives NULL. */
pkv_press_cfg *test_press_cfg(const char *press, const char *const *kv);

typedef struct {
    int n_layers, n_head, n_head_kv, head_dim, L, w_max;
    float *data;
    /* per layer pointers into data */
    float **q, **k, **v, **attn_sum, **attn_last;
    int32_t tokens[512];
} press_dump;

bool press_dump_load(const char *path, press_dump *d);
void press_dump_free(press_dump *d);

#endif
