/* The residual stream of a forward call between layers (stream.h). */
#include "engine/stream.h"

#include "engine/residual.h"

/* Whether a call of n tokens keeps its stream outside work.hidden. */
static bool kept_elsewhere(const pkv_session *s, int n) {
    return (s->opts.residual_type != PKV_RESIDUAL_F32 || s->opts.residual_spill_dir) && n > s->opts.n_batch;
}

static bool f32_rows(const pkv_session *s) { return s->opts.residual_type == PKV_RESIDUAL_F32; }

int pkv_stream_open(pkv_session *s, int n, pkv_error *err) {
    pkv_work *w = &s->work;
    int64_t d = s->model->hp.n_embd;
    pkv_spill_close(&w->spill);
    w->packed_n = 0;
    int64_t hidden_rows = n;
    if (kept_elsewhere(s, n)) {
        bool spill = s->opts.residual_spill_dir != NULL;
        hidden_rows = s->opts.n_batch > PKV_LOGIT_ROWS ? s->opts.n_batch : PKV_LOGIT_ROWS;
        w->packed_row = f32_rows(s) ? (size_t)d * sizeof(float) : pkv_residual_row_bytes(s->opts.residual_type, d);
        /* f32 rows go to the file straight from hidden; packed ones through a chunk of packed */
        int64_t packed_rows = !spill ? n : f32_rows(s) ? 0 : hidden_rows;
        if (w->packed_cap < packed_rows) {
            if (pkv_work_grow((void **)&w->packed, (size_t)packed_rows * w->packed_row, err)) return -1;
            w->packed_cap = packed_rows;
        }
        if (!f32_rows(s) && w->exp_cap < n) {
            if (pkv_work_grow((void **)&w->packed_exp, (size_t)n * sizeof(int8_t), err)) return -1;
            w->exp_cap = n;
        }
        if (spill && pkv_spill_open(&w->spill, s->opts.residual_spill_dir, err)) return -1;
        w->packed_n = n;
    }
    if (w->hidden_cap >= hidden_rows) return 0;
    if (pkv_work_grow((void **)&w->hidden, (size_t)hidden_rows * d * sizeof(float), err)) return -1;
    w->hidden_cap = hidden_rows;
    return 0;
}

float *pkv_stream_rows(pkv_session *s, int r0, int nr, pkv_error *err) {
    pkv_work *w = &s->work;
    int64_t d = s->model->hp.n_embd;
    if (!w->packed_n) return w->hidden + r0 * d;
    size_t row = w->packed_row;
    const uint8_t *src = w->packed + (size_t)r0 * row;
    if (w->spill.open) {
        void *into = f32_rows(s) ? (void *)w->hidden : (void *)w->packed;
        if (pkv_spill_read(&w->spill, into, (size_t)nr * row, (int64_t)r0 * (int64_t)row, err)) return NULL;
        if (f32_rows(s)) return w->hidden;
        src = w->packed;
    }
    for (int r = 0; r < nr; r++)
        pkv_residual_unpack_row(s->comp.kern, s->opts.residual_type, src + (size_t)r * row, w->packed_exp[r0 + r], d,
                                w->hidden + r * d);
    return w->hidden;
}

int pkv_stream_keep(pkv_session *s, int r0, int nr, pkv_error *err) {
    pkv_work *w = &s->work;
    int64_t d = s->model->hp.n_embd;
    if (!w->packed_n) return 0;
    size_t row = w->packed_row;
    int64_t off = (int64_t)r0 * (int64_t)row;
    if (f32_rows(s)) return pkv_spill_write(&w->spill, w->hidden, (size_t)nr * row, off, err);
    uint8_t *dst = w->spill.open ? w->packed : w->packed + (size_t)r0 * row;
    for (int r = 0; r < nr; r++)
        w->packed_exp[r0 + r] =
            (int8_t)pkv_residual_pack_row(s->comp.kern, s->opts.residual_type, w->hidden + r * d, d, dst + (size_t)r * row);
    return w->spill.open ? pkv_spill_write(&w->spill, dst, (size_t)nr * row, off, err) : 0;
}

void pkv_stream_release(pkv_session *s) {
    pkv_work *w = &s->work;
    pkv_spill_close(&w->spill);
    if (w->hidden_cap > s->opts.n_batch) {
        free(w->hidden);
        w->hidden = NULL;
        w->hidden_cap = 0;
    }
    free(w->packed);
    free(w->packed_exp);
    w->packed = NULL;
    w->packed_exp = NULL;
    w->packed_cap = w->exp_cap = 0;
    w->packed_n = 0;
}
