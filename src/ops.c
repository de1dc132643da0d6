#include "ops.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- matmul */

static pkv_type act_type_of(const pkv_kernels *k, const pkv_tensor *w) {
    const pkv_type_info *ti = pkv_type_get(w->type);
    /* without a fused dot the row is dequantised and dotted with f32 activations */
    if (!k->vec_dot[w->type]) return PKV_TYPE_F32;
    return ti->act_type;
}

/* Scratch layout: the converted activations (at most 4 bytes per element, the
 * f32 case), then one dequantised weight row per thread for the f32 fallback. */
size_t pkv_matmul_scratch_bytes(int64_t k, int n_tok, int n_threads) {
    return ((size_t)n_tok + (size_t)n_threads) * (size_t)k * sizeof(float) + 64;
}

typedef struct {
    const pkv_kernels *kern;
    const pkv_tensor *w;
    const float *x;
    float *y;
    int n_tok;
    pkv_type act_type;
    uint64_t act_row_bytes;
    void *act;
    float *row_tmp; /* n_threads rows of K floats (fallback path) */
} matmul_job;

static void matmul_quantize_task(void *arg, int ith, int nth) {
    matmul_job *j = arg;
    int64_t t0, t1;
    pkv_split(j->n_tok, ith, nth, 1, &t0, &t1);
    int64_t K = j->w->ne[0];
    for (int64_t t = t0; t < t1; t++)
        j->kern->quantize[j->act_type](j->x + t * K, (char *)j->act + t * j->act_row_bytes, K);
}

/* Output rows are split across threads in blocks; inside a block each weight
 * row is dotted with every activation row while it is hot in L1. */
static void matmul_rows_task(void *arg, int ith, int nth) {
    matmul_job *j = arg;
    const pkv_tensor *w = j->w;
    int64_t K = w->ne[0], M = w->ne[1];
    int64_t m0, m1;
    pkv_split(M, ith, nth, 16, &m0, &m1);
    const char *wdata = w->data;
    if (j->act_type != PKV_TYPE_F32 || j->kern->vec_dot[w->type]) {
        pkv_vec_dot_fn dot = j->kern->vec_dot[w->type];
        for (int64_t m = m0; m < m1; m++) {
            const void *row = wdata + m * w->row_bytes;
            for (int t = 0; t < j->n_tok; t++)
                j->y[(int64_t)t * M + m] = dot(K, row, (const char *)j->act + t * j->act_row_bytes);
        }
        return;
    }
    /* fallback: dequantise the row, then an f32 dot */
    float *tmp = j->row_tmp + (size_t)ith * (size_t)K;
    for (int64_t m = m0; m < m1; m++) {
        j->kern->dequant[w->type](wdata + m * w->row_bytes, tmp, K);
        for (int t = 0; t < j->n_tok; t++) j->y[(int64_t)t * M + m] = j->kern->dot_f32(K, tmp, j->x + t * K);
    }
}

void pkv_matmul(const pkv_compute *c, const pkv_tensor *w, const float *x, int n_tok, float *y, void *scratch) {
    matmul_job j = {
        .kern = c->kern,
        .w = w,
        .x = x,
        .y = y,
        .n_tok = n_tok,
        .act_type = act_type_of(c->kern, w),
    };
    j.act_row_bytes = pkv_row_bytes(j.act_type, w->ne[0]);
    j.row_tmp = (float *)((char *)scratch + (((size_t)n_tok * (size_t)w->ne[0] * sizeof(float) + 63) & ~(size_t)63));
    if (j.act_type == PKV_TYPE_F32) {
        j.act = (void *)x; /* f32 activations are used as they are */
    } else {
        j.act = scratch;
        if (n_tok <= 2) matmul_quantize_task(&j, 0, 1);
        else pkv_pool_run(c->pool, matmul_quantize_task, &j);
    }
    pkv_pool_run(c->pool, matmul_rows_task, &j);
}

void pkv_get_row(const pkv_compute *c, const pkv_tensor *w, int64_t row, float *out) {
    c->kern->dequant[w->type]((const char *)w->data + row * w->row_bytes, out, w->ne[0]);
}

/* ---------------------------------------------------------------- elementwise */

void pkv_rmsnorm(float *out, const float *x, const float *weight, int n, int n_rows, float eps) {
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (int64_t)r * n;
        float *yr = out + (int64_t)r * n;
        double ss = 0.0; /* double: the sum of squares over thousands of values */
        for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float scale = (float)(1.0 / sqrt(ss / n + eps));
        if (weight)
            for (int i = 0; i < n; i++) yr[i] = xr[i] * scale * weight[i];
        else
            for (int i = 0; i < n; i++) yr[i] = xr[i] * scale;
    }
}

void pkv_add_bias(float *x, const float *bias, int n, int n_rows) {
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < n; i++) x[(int64_t)r * n + i] += bias[i];
}

void pkv_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (HF gelu_pytorch_tanh) */
void pkv_gelu_tanh_mul(float *gate, const float *up, int64_t n) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float x = gate[i];
        float g = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
        gate[i] = g * up[i];
    }
}

/* silu(x) = x / (1 + e^-x) */
void pkv_silu_mul(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = gate[i];
        gate[i] = x / (1.0f + expf(-x)) * up[i];
    }
}

/* ---------------------------------------------------------------- RoPE */

/* theta_i(pos) = pos * freq_scale * base^(-2i/n_rot) / ff_i   (engine-notes.md §5.1, §5.3) */
void pkv_rope_inv_freq(const pkv_rope_params *p, float *inv_freq) {
    int half = p->n_rot / 2;
    for (int i = 0; i < half; i++) {
        double f = pow((double)p->base, -2.0 * i / p->n_rot) * p->freq_scale;
        if (p->freq_factors) f /= p->freq_factors[i];
        inv_freq[i] = (float)f;
    }
}

void pkv_rope(float *x, int n_tok, int n_heads, int head_dim, const int32_t *pos, const pkv_rope_params *p,
              const float *inv_freq) {
    int half = p->n_rot / 2;
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < half; i++) {
            /* angle in double: positions reach 10^5 and more, f32 would lose the phase */
            double theta = (double)pos[t] * inv_freq[i];
            float cs = (float)cos(theta), sn = (float)sin(theta);
            for (int h = 0; h < n_heads; h++) {
                float *v = x + ((int64_t)t * n_heads + h) * head_dim;
                int a = p->mode == PKV_ROPE_NEOX ? i : 2 * i;
                int b = p->mode == PKV_ROPE_NEOX ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs - x1 * sn;
                v[b] = x0 * sn + x1 * cs;
            }
        }
    }
}

/* ---------------------------------------------------------------- softmax */

void pkv_softmax(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}
