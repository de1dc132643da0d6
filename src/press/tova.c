/*
 * TOVA (Oren et al. 2024), as kvpress's TOVAPress at prefill: the last query's
 * softmax attention over the rows, averaged over all query heads of the layer
 * (so every KV head ranks rows the same way); the last row is always kept.
 */
#include <string.h>

#include "base/error.h"
#include "press/press.h"

static int tova_forced_window(const void *p, int window) {
    (void)p;
    (void)window;
    return 1;
}

static int tova_score(const void *p, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    (void)p;
    int n = in->n_rows[0];
    for (int g = 1; g < in->n_head_kv; g++)
        if (in->n_rows[g] != n)
            return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                            "tova averages over all heads of a layer and needs the same rows in every head (layer %d)",
                            in->layer);
    float *avg = pkv_arena_alloc(in->arena, (size_t)n * sizeof(float));
    float *scratch = pkv_arena_alloc(in->arena, pkv_press_window_scratch_floats(n, 1) * sizeof(float));
    if (!avg || !scratch) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory scoring layer %d", in->layer);
    for (int h = 0; h < in->n_head; h++) pkv_press_window_attention(in, h, in->window - 1, scratch, avg);
    for (int j = 0; j < n; j++) avg[j] /= (float)in->n_head;
    for (int s = 0; s < sel->n_sel; s++) memcpy(sel->scores[s], avg, (size_t)n * sizeof(float));
    return 0;
}

const pkv_press_ops pkv_press_tova = {
    .name = "tova",
    .summary = "TOVA: the last query's attention, averaged over the layer's heads",
    .forced_window = tova_forced_window,
    .score = tova_score,
};
