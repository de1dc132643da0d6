/* What session.c offers the rest of the engine beyond the public API. */
#ifndef PKV_ENGINE_SESSION_H
#define PKV_ENGINE_SESSION_H

#include <stdbool.h>

#include "promptkv.h"

/* A press compresses the first prefill of a session, and every later one in
 * recompress mode (docs/presses.md D.5): what pkv_prefill decides. */
bool pkv_session_press_applies(const pkv_session *s, const pkv_press_cfg *press);

/* A decode step's bookkeeping before its compute (the batched step,
 * batch.c): check_step says whether the session can take the token (whole,
 * the token in the vocabulary, room in the context); take_token records it,
 * and the probes go stale. */
int pkv_session_check_step(const pkv_session *s, int32_t token, pkv_error *err);
int pkv_session_take_token(pkv_session *s, int32_t token, pkv_error *err);

typedef struct pkv_recon_prompts pkv_recon_prompts;

/* Where the context starts in a prompt and the instructions a
 * reconstruction press (KVzip) feeds after it, tokenized by the request
 * layer: what such a press needs beyond the tokens (pkv_recon_press,
 * engine/reconstruct.h). */
typedef struct {
    int begin;
    const pkv_recon_prompts *passes; /* NULL for any other press */
} pkv_context_frame;

/* A prefill whose press runs on the full layers when apply_press is set,
 * whatever its mode and the session's length, and pkv_session_copy, with
 * the prompt's frame (NULL: the context is every token, and no press that
 * reconstructs); the copy also takes the tokens src's cache holds (a
 * reconstruction press feeds them again). */
int pkv_session_prefill_framed(pkv_session *s, const int32_t *tokens, int n, const pkv_press_cfg *press,
                               bool apply_press, const pkv_context_frame *frame, pkv_prefill_stats *stats,
                               pkv_error *err);
int pkv_session_copy_framed(pkv_session *dst, const pkv_session *src, const pkv_press_cfg *press,
                            const int32_t *tokens, int n, const pkv_context_frame *frame, pkv_prefill_stats *stats,
                            pkv_error *err);

#endif
