/* K-norm (Devoto et al. 2024, kvpress KnormPress): keep the rows whose keys have
 * the smallest L2 norm (score = -|k|, in fp32). */
#include <math.h>

#include "press/press.h"

static int knorm_score(const void *p, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    (void)p;
    (void)err;
    for (int s = 0; s < sel->n_sel; s++) {
        int g = pkv_sel_kv_head(in, sel, s);
        const float *k = pkv_press_keys(in, g);
        for (int j = 0; j < in->n_rows[g]; j++) {
            const float *row = k + (size_t)j * in->head_dim_k;
            double ss = 0.0;
            for (int d = 0; d < in->head_dim_k; d++) ss += (double)row[d] * row[d];
            sel->scores[s][j] = -(float)sqrt(ss);
        }
    }
    return 0;
}

const pkv_press_ops pkv_press_knorm = {
    .name = "knorm",
    .summary = "K-norm: keep the rows with the smallest key norm",
    .score = knorm_score,
};
