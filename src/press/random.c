/* Random eviction, seeded: a floor for every other press. The stream depends on
 * (seed, layer, head) only, so the same seed gives the same selection at any
 * thread count. */
#include "base/prng.h"
#include "press/press.h"

static int random_score(const void *p, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    (void)p;
    (void)err;
    for (int s = 0; s < sel->n_sel; s++) {
        uint64_t state = in->seed ^ ((uint64_t)(in->layer + 1) << 32) ^ (uint64_t)(s + 1) * 0x9e3779b97f4a7c15ull;
        int n = in->n_rows[pkv_sel_kv_head(in, sel, s)];
        for (int j = 0; j < n; j++) sel->scores[s][j] = (float)((pkv_splitmix64(&state) >> 40) * (1.0 / 16777216.0));
    }
    return 0;
}

const pkv_press_ops pkv_press_random = {
    .name = "random",
    .summary = "random eviction (seeded): the floor every press must beat",
    .score = random_score,
};
