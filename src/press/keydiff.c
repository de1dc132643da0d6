/*
 * KeyDiff (Park et al. 2025), as kvpress 0.5.5's KeyDiffPress
 * (docs/presses.md Part E.1): per KV head, the anchor is the mean of the
 * unit-normalised keys of all rows; a row scores minus the cosine similarity
 * of its key to the anchor, so the keys least like the average are kept. No
 * attention, no window, nothing forced. Norms in double, as an exact
 * computation that float32 PyTorch approximates.
 */
#include <math.h>

#include "base/error.h"
#include "press/press.h"

/* torch.nn.functional.normalize: x / max(|x|, 1e-12) */
static double normalize_denominator(double norm) { return norm > 1e-12 ? norm : 1e-12; }

static int keydiff_score(const void *p, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    (void)p;
    int dim = in->head_dim_k;
    double *anchor = pkv_arena_alloc(in->arena, (size_t)dim * sizeof(double));
    if (!anchor) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory scoring layer %d", in->layer);
    for (int s = 0; s < sel->n_sel; s++) {
        int g = pkv_sel_kv_head(in, sel, s);
        int n = in->n_rows[g];
        const float *k = pkv_press_keys(in, g);
        for (int d = 0; d < dim; d++) anchor[d] = 0.0;
        for (int j = 0; j < n; j++) {
            const float *row = k + (size_t)j * dim;
            double ss = 0.0;
            for (int d = 0; d < dim; d++) ss += (double)row[d] * row[d];
            double inv = 1.0 / normalize_denominator(sqrt(ss));
            for (int d = 0; d < dim; d++) anchor[d] += row[d] * inv;
        }
        double an = 0.0;
        for (int d = 0; d < dim; d++) {
            anchor[d] /= n;
            an += anchor[d] * anchor[d];
        }
        an = sqrt(an);
        if (an < 1e-8) an = 1e-8;
        /* torch.nn.functional.cosine_similarity: x.y / (max(|x|, 1e-8) max(|y|, 1e-8)) */
        for (int j = 0; j < n; j++) {
            const float *row = k + (size_t)j * dim;
            double dot = 0.0, ss = 0.0;
            for (int d = 0; d < dim; d++) {
                dot += row[d] * anchor[d];
                ss += (double)row[d] * row[d];
            }
            double norm = sqrt(ss);
            sel->scores[s][j] = (float)(-dot / ((norm > 1e-8 ? norm : 1e-8) * an));
        }
    }
    return 0;
}

const pkv_press_ops pkv_press_keydiff = {
    .name = "keydiff",
    .summary = "KeyDiff: keep the keys least similar to the head's mean key direction (no attention)",
    .score = keydiff_score,
};
