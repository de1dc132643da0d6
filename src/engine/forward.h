/* The forward pass (forward.c). */
#ifndef PKV_ENGINE_FORWARD_H
#define PKV_ENGINE_FORWARD_H

#include "engine/compress.h"
#include "engine/state.h"

/* Called with the logits of each requested row. */
typedef void (*pkv_row_logits_fn)(void *user, int index, const float *logits);

/* Runs n tokens through the model at positions n_pos.. (layer by layer over
 * chunks of n_batch tokens), appending to the cache. probe says what the full
 * layers keep for presses; press, if not NULL, compresses each full layer once
 * it has seen all n tokens. Logits of the last token land in s->logits; with
 * row_fn, every token's logits are passed to it in order. */
int pkv_forward(pkv_session *s, const int32_t *tokens, int n, const pkv_press_cfg *press,
                const pkv_probe_cfg *probe, pkv_row_logits_fn row_fn, void *user, pkv_compress_stats *stats,
                pkv_error *err);

#endif
