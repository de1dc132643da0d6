/*
 * StreamingLLM (Xiao et al. 2023): the first `sinks` rows (attention sinks)
 * and the most recent rows. As kvpress's StreamingLLMPress: no re-rotation of
 * positions (kvpress issue #158), budget = sinks + recent.
 */
#include <math.h>
#include <string.h>

#include "press/baselines_common.h"
#include "press/press.h"

typedef struct {
    int sinks;
} streaming_params;

static const pkv_press_option STREAMING_OPTIONS[] = {
    {"sinks", "initial rows always kept (default 4)"},
    {NULL, NULL},
};

static void streaming_defaults(void *p) { ((streaming_params *)p)->sinks = 4; }

static int streaming_set(void *p, const char *key, const char *value, pkv_error *err) {
    if (strcmp(key, "sinks")) return 1;
    return press_parse_count("streamingllm", key, value, 1 << 20, &((streaming_params *)p)->sinks, err);
}

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
    .set_option = streaming_set,
    .score = streaming_score,
};
