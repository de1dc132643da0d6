/* Perplexity of a text file as llama.cpp's llama-perplexity measures it (perplexity.c). */
#ifndef PKV_EVAL_PERPLEXITY_H
#define PKV_EVAL_PERPLEXITY_H

#include "promptkv.h"

/* llama.cpp's llama-perplexity method: tokens (already tokenized with BOS)
 * are cut into chunks of n_ctx; each chunk runs from an empty cache with its
 * first token replaced by BOS (when the model adds one), and the second half
 * of each chunk is scored. Needs at least 2 x n_ctx tokens. progress (may be
 * NULL) is called after each chunk with the running perplexity. */
typedef struct {
    double ppl;
    double ppl_err;  /* llama-perplexity's +/- estimate */
    int n_chunks;
    long n_scored;
} pkv_ppl_result;

int pkv_perplexity(pkv_session *session, const int32_t *tokens, int n_tokens, int n_ctx, int max_chunks,
                   void (*progress)(void *user, int chunk, double ppl), void *user, pkv_ppl_result *out,
                   pkv_error *err);

#endif
