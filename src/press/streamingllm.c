/*
 * StreamingLLM (Xiao et al. 2023): the first `sinks` rows (attention sinks)
 * and the most recent rows. As kvpress's StreamingLLMPress: no re-rotation of
 * positions (kvpress issue #158), budget = sinks + recent.
 */
#include <math.h>
#include <stddef.h>

#include "press/press.h"

typedef struct {
    int sinks;
} streaming_params;

static const pkv_press_option STREAMING_OPTIONS[] = {
    {.key = "sinks", .help = "initial rows always kept (default 4)", .type = PKV_OPT_INT,
     .offset = offsetof(streaming_params, sinks), .lo = 0, .hi = 1 << 20},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};

static void streaming_defaults(void *p) { ((streaming_params *)p)->sinks = 4; }

static int streaming_score(const void *pp, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    (void)err;
    const streaming_params *p = pp;
    for (int s = 0; s < sel->n_sel; s++) {
        int n = in->n_rows[pkv_sel_kv_head(in, sel, s)];
        /* sinks first, then recency: the top-k is sinks + the newest rows */
        for (int j = 0; j < n; j++) sel->scores[s][j] = j < p->sinks ? INFINITY : (float)j;
    }
    return 0;
}

const pkv_press_ops pkv_press_streamingllm = {
    .name = "streamingllm",
    .summary = "StreamingLLM: attention sinks + the most recent rows",
    .options = STREAMING_OPTIONS,
    .params_size = sizeof(streaming_params),
    .defaults = streaming_defaults,
    .score = streaming_score,
};
