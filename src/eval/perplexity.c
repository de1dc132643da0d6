/*
 * Perplexity exactly as llama.cpp's tools/perplexity measures it (so the two
 * engines can be compared on the same file): chunks of n_ctx tokens, each from
 * an empty cache with BOS in front, the second half of each chunk scored.
 */
#include "eval/perplexity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "promptkv.h"

typedef struct {
    const int32_t *targets; /* token that follows each position of the chunk, -1 for none */
    int first;              /* first scored position */
    int n_vocab;
    double nll, nll2;
    long count;
} ppl_acc;

/* -log softmax(logits)[target], in double */
static void score_row(void *user, int index, const float *logits) {
    ppl_acc *a = user;
    if (index < a->first || a->targets[index] < 0) return;
    float mx = logits[0];
    for (int i = 1; i < a->n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < a->n_vocab; i++) sum += exp((double)logits[i] - mx);
    double nll = -((double)logits[a->targets[index]] - mx - log(sum));
    a->nll += nll;
    a->nll2 += nll * nll;
    a->count++;
}

int pkv_perplexity(pkv_session *s, const int32_t *tokens, int n_tokens, int n_ctx, int max_chunks,
                   void (*progress)(void *user, int chunk, double ppl), void *user, pkv_ppl_result *out,
                   pkv_error *err) {
    pkv_error_clear(err);
    if (n_ctx < 4) return pkv_fail(err, PKV_ERR_ARG, "perplexity context %d is too small (at least 4)", n_ctx);
    if (n_tokens < 2 * n_ctx)
        return pkv_fail(err, PKV_ERR_ARG, "%d tokens; perplexity with a context of %d needs at least %d", n_tokens,
                        n_ctx, 2 * n_ctx);
    int n_chunks = n_tokens / n_ctx;
    if (max_chunks > 0 && max_chunks < n_chunks) n_chunks = max_chunks;
    int32_t *chunk = malloc((size_t)n_ctx * sizeof *chunk);
    int32_t *targets = malloc((size_t)n_ctx * sizeof *targets);
    if (!chunk || !targets) {
        free(chunk);
        free(targets);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    }
    ppl_acc acc = {.targets = targets, .first = n_ctx / 2, .n_vocab = pkv_n_vocab(pkv_session_model(s))};
    int32_t bos = pkv_token_bos(pkv_session_model(s));
    /* the text was tokenized with BOS iff its first token is BOS */
    bool add_bos = bos >= 0 && tokens[0] == bos;
    int rc = 0;
    for (int c = 0; c < n_chunks && rc == 0; c++) {
        const int32_t *src = tokens + (size_t)c * n_ctx;
        memcpy(chunk, src, (size_t)n_ctx * sizeof *chunk);
        if (add_bos) chunk[0] = bos;
        /* the last position has no target inside the chunk: n_ctx - 1 - first tokens are scored */
        for (int j = 0; j < n_ctx; j++) targets[j] = j + 1 < n_ctx ? src[j + 1] : -1;
        pkv_session_reset(s);
        rc = pkv_eval(s, chunk, n_ctx, score_row, &acc, err);
        if (rc == 0 && progress) progress(user, c + 1, exp(acc.nll / acc.count));
    }
    free(chunk);
    free(targets);
    if (rc) return rc;
    double mean = acc.nll / acc.count, var = acc.nll2 / acc.count - mean * mean;
    out->ppl = exp(mean);
    out->ppl_err = var > 0 && acc.count > 1 ? out->ppl * sqrt(var / (acc.count - 1)) : 0.0;
    out->n_chunks = n_chunks;
    out->n_scored = acc.count;
    return 0;
}
