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

#endif
