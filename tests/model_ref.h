/*
 * The golden reference files of the tiny models (tests/fixtures/models/<name>.ref,
 * written by tools/make-model-fixtures.py): "PKVREF1\0", n_vocab, n_prompt,
 * n_decode (int32), the tokens (the prompt, then the decode steps), then HF
 * transformers' logits for every one of them, row by row.
 */
#ifndef PKV_TEST_MODEL_REF_H
#define PKV_TEST_MODEL_REF_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int n_vocab, n_prompt, n_decode;
    int32_t *tokens;
    float *logits; /* (n_prompt + n_decode) rows; NULL when loaded without them */
} ref_data;

/* with_logits false: the header and the tokens only. */
bool ref_load(const char *path, bool with_logits, ref_data *r);
void ref_free(ref_data *r);

#endif
