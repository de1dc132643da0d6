/* What session.c offers the rest of the engine beyond the public API. */
#ifndef PKV_ENGINE_SESSION_H
#define PKV_ENGINE_SESSION_H

#include <stdbool.h>

#include "promptkv.h"

/* pkv_prefill with the decision made by the caller: press (checked when not
 * NULL) runs on the full layers when apply_press is set, whatever its mode
 * and the session's length. */
int pkv_session_prefill(pkv_session *s, const int32_t *tokens, int n, const pkv_press_cfg *press, bool apply_press,
                        pkv_prefill_stats *stats, pkv_error *err);

/* Where the context starts in a prompt and whether a chat template frames
 * it: what a reconstruction press (KVzip) needs beyond the tokens
 * (pkv_recon_press, engine/reconstruct.h). */
typedef struct {
    int begin;
    bool chat;
} pkv_context_frame;

/* pkv_session_prefill and pkv_session_copy with the prompt's frame (NULL:
 * the context is every token, no chat template); the copy also takes the
 * tokens src's cache holds (a reconstruction press feeds them again). */
int pkv_session_prefill_framed(pkv_session *s, const int32_t *tokens, int n, const pkv_press_cfg *press,
                               bool apply_press, const pkv_context_frame *frame, pkv_prefill_stats *stats,
                               pkv_error *err);
int pkv_session_copy_framed(pkv_session *dst, const pkv_session *src, const pkv_press_cfg *press,
                            const int32_t *tokens, int n, const pkv_context_frame *frame, pkv_prefill_stats *stats,
                            pkv_error *err);

#endif
