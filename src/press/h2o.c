/*
 * H2O-style heavy hitters at prefill (kvpress ObservedAttentionPress): the
 * attention every row received from all prompt queries, accumulated during
 * the prefill, divided by the number of queries that could see the row
 * (normalize=count, default) or not (normalize=none, H2O's plain sum), mean
 * over the query heads of a KV head. `recent` rows at the end are always kept
 * (H2O's recent window; 0 by default as kvpress).
 */
#include <stddef.h>
#include <string.h>

#include "base/error.h"
#include "press/press.h"

typedef struct {
    int normalize; /* divide by the queries that saw the row */
    int recent;
} h2o_params;

static const pkv_press_choice NORMALIZE[] = {{"count", 1}, {"none", 0}, {NULL, 0}};

static const pkv_press_option H2O_OPTIONS[] = {
    {.key = "normalize", .help = "count (default: divide by the queries that saw the row, as kvpress) | none (H2O's sum)",
     .type = PKV_OPT_CHOICE, .offset = offsetof(h2o_params, normalize), .choices = NORMALIZE},
    {.key = "recent", .help = "newest rows always kept (default 0)", .type = PKV_OPT_INT,
     .offset = offsetof(h2o_params, recent), .lo = 0, .hi = 1 << 20},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};

static void h2o_defaults(void *p) { *(h2o_params *)p = (h2o_params){.normalize = true}; }

static int h2o_forced_window(const void *p, int window) {
    (void)window;
    return ((const h2o_params *)p)->recent;
}

static int h2o_score(const void *pp, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    const h2o_params *p = pp;
    if (!in->attn_sum) return pkv_fail(err, PKV_ERR_INTERNAL, "h2o needs the accumulated prefill attention");
    int group = in->n_head / in->n_head_kv;
    for (int s = 0; s < sel->n_sel; s++) {
        int g = pkv_sel_kv_head(in, sel, s);
        int n = in->n_rows[g];
        float *score = sel->scores[s];
        memset(score, 0, (size_t)n * sizeof(float));
        int h0 = sel->per_query_head ? s : g * group, h1 = sel->per_query_head ? s + 1 : (g + 1) * group;
        for (int h = h0; h < h1; h++)
            for (int j = 0; j < n; j++) {
                float a = in->attn_sum[h][j];
                if (p->normalize) a /= (float)(in->attn_count[g][j] > 0 ? in->attn_count[g][j] : 1);
                score[j] += a;
            }
        for (int j = 0; j < n; j++) score[j] /= (float)(h1 - h0);
    }
    return 0;
}

const pkv_press_ops pkv_press_h2o = {
    .name = "h2o",
    .summary = "H2O heavy hitters: attention accumulated over all prompt queries",
    .options = H2O_OPTIONS,
    .params_size = sizeof(h2o_params),
    .defaults = h2o_defaults,
    .forced_window = h2o_forced_window,
    .needs_attn_sum = true,
    .score = h2o_score,
};
