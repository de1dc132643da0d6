#include "kernels/ops.h"

#include <math.h>
#include <string.h>

#include "kernels/repack.h"

/* ---------------------------------------------------------------- matmul
 *
 * Two paths. With few tokens (decode) each weight row is dotted with each
 * activation row by the fused vec_dot kernels (table.h), rows handed out to
 * threads in chunks: the weights stream through once, which is all a
 * memory-bound matrix-vector product can do. With more tokens (prefill) the
 * batched kernels take 8 rows x 16 tokens at a time (table.h "batched
 * matmul"): the activations are packed once, the output is cut into tiles of
 * (a panel of token groups, 8 rows), and each tile runs over K in chunks that
 * keep the unpacked rows in L1 and the panel in L2.
 *
 * Every output element is computed by one kernel in a fixed order whichever
 * thread runs its tile, so results do not depend on the thread count.
 */

enum {
    ITEMS_PER_THREAD = 8,      /* work items per thread on the vec_dot path, about (each whole runs of rows) */
    GEMM_MIN_TOK = 4,          /* the batched path from this many tokens on */
    PANEL_BYTES = 768 << 10,   /* packed activations one tile reads (kept in L2) */
    MAX_PANEL_GROUPS = 16,
    BLOCK_TILES = 4,           /* row tiles of a work item */
    /* activation rows of the decode path whose preparation for the
     * interleaved kernel is made once per job (table.h matvec_x8_prepare);
     * with more, every call prepares for itself */
    X8_PREP_MAX_TOK = 16,
};

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static pkv_type act_type_of(const pkv_kernels *k, const pkv_tensor *w) {
    const pkv_type_info *ti = pkv_type_get(w->type);
    /* without a fused dot the row is dequantised and dotted with f32 activations */
    if (!k->vec_dot[w->type]) return PKV_TYPE_F32;
    /* the interleaved decode kernel takes Q8_0 rows for every type (repack.h) */
    if (w->x8 && k->matvec_x8[w->type]) return PKV_TYPE_Q8_0;
    return ti->act_type;
}

static pkv_pack_kind gemm_pack_of(const pkv_kernels *k, const pkv_tensor *w, int n_tok) {
    /* the batched kernels are the fused dot products' batched form: a table
     * without the fused dot (tests' exact mode) has neither */
    if (n_tok < GEMM_MIN_TOK || !k->gemm[w->type] || !k->vec_dot[w->type]) return PKV_PACK_NONE;
    if (w->x8 && !k->matvec_x8[w->type]) return PKV_PACK_NONE; /* this table's gemm reads GGUF rows only */
    pkv_pack_kind kind = pkv_pack_kind_of(w->type);
    if (kind == PKV_PACK_NONE || w->ne[0] % pkv_pack_block_elems(kind) != 0) return PKV_PACK_NONE;
    return kind;
}

/* One type's prepared activations for the interleaved kernel. */
static size_t x8_prep_slot_bytes(int64_t k, int n_tok) {
    return align64(pkv_x8_prep_bytes(k, n_tok < X8_PREP_MAX_TOK ? n_tok : X8_PREP_MAX_TOK));
}

/* Per thread: a dequantised weight row (f32 fallback) or one quantised
 * activation row (packing), and the tile accumulators. */
static size_t per_thread_bytes(int64_t k) {
    return align64((size_t)k * sizeof(float)) +
           align64((size_t)MAX_PANEL_GROUPS * PKV_GEMM_ROWS * PKV_GEMM_TOK * sizeof(float));
}

/* Scratch layout: the converted or packed activations (at most 4 bytes per
 * element for 16-token groups: the f32 pack), then the per-thread areas. */
size_t pkv_matmul_scratch_bytes(int64_t k, int n_tok, int n_threads) {
    size_t groups = ((size_t)n_tok + PKV_GEMM_TOK - 1) / PKV_GEMM_TOK;
    return align64(groups * PKV_GEMM_TOK * (size_t)k * sizeof(float)) + (size_t)n_threads * per_thread_bytes(k) +
           PKV_MATMUL_MAX * x8_prep_slot_bytes(k, n_tok) + 64;
}

typedef struct {
    const pkv_kernels *kern;
    const float *x;
    int n_tok;
    int64_t K;
    char *thread_area; /* n_threads x per_thread_bytes(K) */
    size_t thread_bytes;
    /* weights of this job, their outputs and where their items start */
    int n_w;
    const pkv_tensor *w[PKV_MATMUL_MAX];
    float *y[PKV_MATMUL_MAX];
    int64_t item0[PKV_MATMUL_MAX + 1];
    int64_t row_chunk[PKV_MATMUL_MAX]; /* vec_dot path: rows per item */
    /* vec_dot path */
    pkv_type act_type;
    uint64_t act_row_bytes;
    const void *act;
    char *prep_area;                       /* PKV_MATMUL_MAX slots of x8_prep_slot_bytes */
    const void *x8_prep[PKV_MATMUL_MAX];   /* per weight: its type's prepared activations, or NULL */
    /* batched path */
    pkv_pack_kind pack;
    uint64_t group_bytes;
    int n_groups, panel_groups, n_panels;
    int64_t k_chunk;
    void *packed;
} matmul_job;

static float *thread_floats(const matmul_job *j, int ith) { return (float *)(j->thread_area + (size_t)ith * j->thread_bytes); }
static float *thread_acc(const matmul_job *j, int ith) {
    return (float *)(j->thread_area + (size_t)ith * j->thread_bytes + align64((size_t)j->K * sizeof(float)));
}

/* Which weight an item belongs to, and the item's index inside it. */
static int item_weight(const matmul_job *j, int64_t item, int64_t *local) {
    int i = 0;
    while (item >= j->item0[i + 1]) i++;
    *local = item - j->item0[i];
    return i;
}

static void quantize_item(void *arg, int64_t t, int ith) {
    matmul_job *j = arg;
    (void)ith;
    j->kern->quantize[j->act_type](j->x + t * j->K, (char *)j->act + t * j->act_row_bytes, j->K);
}

/* Row m of a weight as floats, in the file's layout or interleaved by 8. */
static void weight_row_f32(const pkv_kernels *k, const pkv_tensor *w, int64_t m, float *out) {
    const char *data = w->data;
    const pkv_x8_group grp = pkv_x8_group_of(w->type, data, w->ne[0], w->ne[1], m / PKV_X8_ROWS);
    if (w->x8) pkv_x8_dequant_row(w->type, &grp, (int)(m % PKV_X8_ROWS), out);
    else k->dequant[w->type](data + m * w->row_bytes, out, w->ne[0]);
}

/* Rows [m0, m0 + row_chunk) of one weight, dotted with every activation row
 * while each weight row is hot in L1. */
static void dot_item(void *arg, int64_t item, int ith) {
    matmul_job *j = arg;
    int64_t chunk;
    const int wi = item_weight(j, item, &chunk);
    const pkv_tensor *w = j->w[wi];
    float *y = j->y[wi];
    const int64_t K = j->K, M = w->ne[1];
    const int64_t rc = j->row_chunk[wi], m0 = chunk * rc, m1 = m0 + rc < M ? m0 + rc : M;
    const char *wdata = w->data;
    pkv_vec_dot_fn dot = j->kern->vec_dot[w->type];
    pkv_vec_dot_rows_fn dot_rows = j->kern->vec_dot_rows[w->type];
    pkv_matvec_x8_fn matvec_x8 = j->kern->matvec_x8[w->type];
    if (w->x8 && dot && matvec_x8) {
        /* interleaved rows: m0 starts a run, and m1 ends one or the matrix
         * (row chunks are whole runs, kernels/repack.h) */
        matvec_x8(K, wdata + m0 * w->row_bytes, m1 - m0, j->act, j->act_row_bytes, j->n_tok, j->x8_prep[wi], y + m0,
                  M);
        return;
    }
    if (!w->x8 && dot && dot_rows && j->n_tok > 1) {
        /* each weight row unpacked once for every activation row; the same bits as dot row by row */
        for (int64_t m = m0; m < m1; m++)
            dot_rows(K, wdata + m * w->row_bytes, j->act, j->act_row_bytes, j->n_tok, y + m, M);
        return;
    }
    if (!w->x8 && dot) {
        for (int64_t m = m0; m < m1; m++) {
            const void *row = wdata + m * w->row_bytes;
            for (int t = 0; t < j->n_tok; t++) y[(int64_t)t * M + m] = dot(K, row, (const char *)j->act + t * j->act_row_bytes);
        }
        return;
    }
    /* fallback (a table without the fused dot, or interleaved rows without
     * this table's kernel): dequantise the row, then an f32 dot */
    float *tmp = thread_floats(j, ith);
    for (int64_t m = m0; m < m1; m++) {
        weight_row_f32(j->kern, w, m, tmp);
        for (int t = 0; t < j->n_tok; t++) y[(int64_t)t * M + m] = j->kern->dot_f32(K, tmp, j->x + t * K);
    }
}

/* The interleaved kernel's preparation of the activation rows, once for
 * each type among the job's interleaved weights instead of in each of the
 * many calls a matrix is cut into (table.h matvec_x8_prepare). */
static void prepare_x8(matmul_job *j) {
    for (int i = 0; i < j->n_w; i++) j->x8_prep[i] = NULL;
    if (!j->kern->matvec_x8_prepare || j->n_tok > X8_PREP_MAX_TOK || j->act_type != PKV_TYPE_Q8_0) return;
    const size_t slot = x8_prep_slot_bytes(j->K, j->n_tok);
    for (int i = 0; i < j->n_w; i++) {
        const pkv_tensor *w = j->w[i];
        if (!w->x8 || !j->kern->matvec_x8[w->type]) continue;
        for (int e = 0; e < i && !j->x8_prep[i]; e++)
            if (j->x8_prep[e] && j->w[e]->type == w->type) j->x8_prep[i] = j->x8_prep[e];
        if (j->x8_prep[i]) continue;
        void *p = j->prep_area + (size_t)i * slot;
        j->kern->matvec_x8_prepare(w->type, j->K, j->act, j->act_row_bytes, j->n_tok, p);
        j->x8_prep[i] = p;
    }
}

/* Matmuls of weights sharing one activation type on the vec_dot path. */
static void run_dot_path(const pkv_compute *c, matmul_job *j) {
    j->act_row_bytes = pkv_row_bytes(j->act_type, j->K);
    if (j->act_type == PKV_TYPE_F32) {
        j->act = j->x; /* f32 activations are used as they are */
    } else {
        void *act = j->packed;
        j->act = act;
        if (j->n_tok <= 2)
            for (int t = 0; t < j->n_tok; t++) quantize_item(j, t, 0);
        else pkv_pool_for(c->pool, j->n_tok, quantize_item, j);
    }
    prepare_x8(j);
    j->item0[0] = 0;
    /* large items: each thread streams long contiguous runs of rows, which
     * the hardware prefetchers follow (a row's result does not depend on
     * the item it is computed in) */
    const int64_t nth = pkv_pool_size(c->pool);
    for (int i = 0; i < j->n_w; i++) {
        const int64_t M = j->w[i]->ne[1];
        int64_t rc = (M + nth * ITEMS_PER_THREAD - 1) / (nth * ITEMS_PER_THREAD);
        rc = (rc + PKV_X8_RUN_ROWS - 1) / PKV_X8_RUN_ROWS * PKV_X8_RUN_ROWS; /* whole runs (kernels/repack.h) */
        j->row_chunk[i] = rc;
        j->item0[i + 1] = j->item0[i] + (M + rc - 1) / rc;
    }
    pkv_pool_for_in_order(c->pool, j->item0[j->n_w], dot_item, j);
}

static void pack_item(void *arg, int64_t g, int ith) {
    matmul_job *j = arg;
    int n = j->n_tok - (int)g * PKV_GEMM_TOK;
    if (n > PKV_GEMM_TOK) n = PKV_GEMM_TOK;
    pkv_gemm_pack(j->kern, j->pack, j->x + g * PKV_GEMM_TOK * j->K, j->K, n, j->K,
                  (char *)j->packed + (size_t)g * j->group_bytes, thread_floats(j, ith));
}

/* One work item: a panel of token groups times BLOCK_TILES tiles of
 * PKV_GEMM_ROWS rows. The kernels write the last K chunk's results straight
 * into y, group by group, so the stores overlap the next group's work. */
static void gemm_item(void *arg, int64_t item, int ith) {
    matmul_job *j = arg;
    int64_t local;
    const int wi = item_weight(j, item, &local);
    const pkv_tensor *w = j->w[wi];
    float *y = j->y[wi];
    const int64_t M = w->ne[1], n_blocks = (M + BLOCK_TILES * PKV_GEMM_ROWS - 1) / (BLOCK_TILES * PKV_GEMM_ROWS);
    const int64_t panel = local / n_blocks, mb = (local % n_blocks) * BLOCK_TILES * PKV_GEMM_ROWS;
    const int g0 = (int)panel * j->panel_groups;
    const int n_groups = j->n_groups - g0 < j->panel_groups ? j->n_groups - g0 : j->panel_groups;
    float *acc = thread_acc(j, ith);
    pkv_gemm_fn gemm = j->kern->gemm[w->type];
    const int t0 = g0 * PKV_GEMM_TOK;
    for (int tile = 0; tile < BLOCK_TILES; tile++) {
        const int64_t m0 = mb + tile * PKV_GEMM_ROWS;
        if (m0 >= M) break;
        pkv_gemm_args a = {
            .w = (const char *)w->data + m0 * w->row_bytes,
            .row_bytes = w->row_bytes,
            .x8 = w->x8 ? pkv_x8_group_of(w->type, w->data, j->K, M, m0 / PKV_X8_ROWS) : (pkv_x8_group){0},
            .n_rows = M - m0 < PKV_GEMM_ROWS ? (int)(M - m0) : PKV_GEMM_ROWS,
            .act = (const char *)j->packed + (size_t)g0 * j->group_bytes,
            .group_bytes = j->group_bytes,
            .n_groups = n_groups,
            .acc = acc,
            .ldy = M,
            .y_tokens = j->n_tok - t0,
        };
        for (int64_t k0 = 0; k0 < j->K; k0 += j->k_chunk) {
            a.k0 = k0;
            a.k1 = k0 + j->k_chunk < j->K ? k0 + j->k_chunk : j->K;
            a.init = k0 == 0;
            a.y = a.k1 == j->K ? y + (int64_t)t0 * M + m0 : NULL;
            gemm(&a);
        }
    }
}

/* Matmuls of weights sharing one pack on the batched path. */
static void run_gemm_path(const pkv_compute *c, matmul_job *j) {
    j->group_bytes = pkv_pack_group_bytes(j->pack, j->K);
    j->n_groups = (j->n_tok + PKV_GEMM_TOK - 1) / PKV_GEMM_TOK;
    int panel = (int)(PANEL_BYTES / j->group_bytes);
    if (panel < 1) panel = 1;
    if (panel > MAX_PANEL_GROUPS) panel = MAX_PANEL_GROUPS;
    if (panel > j->n_groups) panel = j->n_groups;
    j->panel_groups = panel;
    j->n_panels = (j->n_groups + panel - 1) / panel;
    j->k_chunk = pkv_pack_max_chunk(j->pack);
    pkv_pool_for(c->pool, j->n_groups, pack_item, j);
    /* items: weight-major, then panel-major, so threads running at the same
     * time read the same panel */
    j->item0[0] = 0;
    for (int i = 0; i < j->n_w; i++)
        j->item0[i + 1] = j->item0[i] + (int64_t)j->n_panels * ((j->w[i]->ne[1] + BLOCK_TILES * PKV_GEMM_ROWS - 1) /
                                                                (BLOCK_TILES * PKV_GEMM_ROWS));
    pkv_pool_for(c->pool, j->item0[j->n_w], gemm_item, j);
}

void pkv_matmul_n(const pkv_compute *c, int n_w, const pkv_tensor *const *w, const float *x, int n_tok,
                  float *const *y, void *scratch) {
    const int64_t K = w[0]->ne[0];
    const size_t groups = ((size_t)n_tok + PKV_GEMM_TOK - 1) / PKV_GEMM_TOK;
    matmul_job base = {
        .kern = c->kern,
        .x = x,
        .n_tok = n_tok,
        .K = K,
        .packed = scratch,
        .thread_area = (char *)scratch + align64(groups * PKV_GEMM_TOK * (size_t)K * sizeof(float)),
        .thread_bytes = per_thread_bytes(K),
    };
    base.prep_area = base.thread_area + (size_t)pkv_pool_size(c->pool) * base.thread_bytes;
    bool done[PKV_MATMUL_MAX] = {false};
    /* weights sharing a path and an activation format run as one job */
    for (int i = 0; i < n_w; i++) {
        if (done[i]) continue;
        matmul_job j = base;
        j.pack = c->rowwise ? PKV_PACK_NONE : gemm_pack_of(c->kern, w[i], n_tok);
        j.act_type = act_type_of(c->kern, w[i]);
        for (int k = i; k < n_w; k++) {
            if (done[k]) continue;
            pkv_pack_kind pk = c->rowwise ? PKV_PACK_NONE : gemm_pack_of(c->kern, w[k], n_tok);
            if (pk != j.pack || (pk == PKV_PACK_NONE && act_type_of(c->kern, w[k]) != j.act_type)) continue;
            j.w[j.n_w] = w[k];
            j.y[j.n_w] = y[k];
            j.n_w++;
            done[k] = true;
        }
        if (j.pack != PKV_PACK_NONE) run_gemm_path(c, &j);
        else run_dot_path(c, &j);
    }
}

void pkv_matmul(const pkv_compute *c, const pkv_tensor *w, const float *x, int n_tok, float *y, void *scratch) {
    pkv_matmul_n(c, 1, &w, x, n_tok, &y, scratch);
}

void pkv_get_row(const pkv_compute *c, const pkv_tensor *w, int64_t row, float *out) {
    weight_row_f32(c->kern, w, row, out);
}

/* ---------------------------------------------------------------- elementwise */

/* Sum of squares in 16 float partial sums (as a vectorised fp32 reduction
 * does), added up in double. */
static double sum_squares(const float *x, int n) {
    float part[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) part[k] += x[i + k] * x[i + k];
    double ss = 0.0;
    for (int k = 0; k < 16; k++) ss += part[k];
    for (; i < n; i++) ss += (double)x[i] * x[i];
    return ss;
}

/* GNU C vectors of 4 floats (SSE in the portable build); loads and stores
 * through memcpy, so any alignment and out == x are fine. */
typedef float v4f __attribute__((vector_size(16)));

static inline v4f load4(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

void pkv_rmsnorm(float *out, const float *x, const float *weight, int n, int n_rows, float eps) {
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (int64_t)r * n;
        float *yr = out + (int64_t)r * n;
        const float scale = (float)(1.0 / sqrt(sum_squares(xr, n) / n + eps));
        const v4f vs = {scale, scale, scale, scale};
        int i = 0;
        for (; i + 4 <= n; i += 4) {
            v4f v = load4(xr + i) * vs;
            if (weight) v *= load4(weight + i);
            memcpy(yr + i, &v, sizeof v);
        }
        for (; i < n; i++) yr[i] = weight ? xr[i] * scale * weight[i] : xr[i] * scale;
    }
}

void pkv_add_bias(float *x, const float *bias, int n, int n_rows) {
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < n; i++) x[(int64_t)r * n + i] += bias[i];
}

void pkv_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* Elementwise work in items of this many elements (decode's few thousand run inline). */
enum { ELEMENTWISE_ITEM = 1 << 15 };

typedef struct {
    void (*fn)(int64_t n, float *gate, const float *up);
    float *gate;
    const float *up;
    int64_t n;
} gated_job;

static void gated_item(void *arg, int64_t item, int ith) {
    const gated_job *j = arg;
    (void)ith;
    const int64_t i0 = item * ELEMENTWISE_ITEM, n = j->n - i0 < ELEMENTWISE_ITEM ? j->n - i0 : ELEMENTWISE_ITEM;
    j->fn(n, j->gate + i0, j->up + i0);
}

static void run_gated(const pkv_compute *c, void (*fn)(int64_t, float *, const float *), float *gate, const float *up,
                      int64_t n) {
    gated_job j = {fn, gate, up, n};
    pkv_pool_for(c->pool, (n + ELEMENTWISE_ITEM - 1) / ELEMENTWISE_ITEM, gated_item, &j);
}

void pkv_gelu_tanh_mul(const pkv_compute *c, float *gate, const float *up, int64_t n) {
    run_gated(c, c->kern->gelu_tanh_mul, gate, up, n);
}

void pkv_silu_mul(const pkv_compute *c, float *gate, const float *up, int64_t n) {
    run_gated(c, c->kern->silu_mul, gate, up, n);
}

/* ---------------------------------------------------------------- RoPE */

/* theta_i(pos) = pos * freq_scale * base^(-2i/n_rot) / ff_i   (docs/engine.md §5.1, §5.3) */
void pkv_rope_inv_freq(const pkv_rope_params *p, float *inv_freq) {
    int half = p->n_rot / 2;
    for (int i = 0; i < half; i++) {
        double f = pow((double)p->base, -2.0 * i / p->n_rot) * p->freq_scale;
        if (p->freq_factors) f /= p->freq_factors[i];
        inv_freq[i] = (float)f;
    }
}

enum { ROPE_MAX_PAIRS = 512 };

/* The angles are pos * inv_freq in double (positions reach 10^5 and more, f32
 * would lose the phase). Consecutive positions advance each (cos, sin) pair
 * by a rotation of inv_freq, in double (the error after thousands of steps
 * stays ~1e-13), so sin and cos are evaluated once per call and frequency
 * rather than once per token. */
void pkv_rope(float *x, int n_tok, int n_heads, int head_dim, const int32_t *pos, const pkv_rope_params *p,
              const float *inv_freq) {
    const int half = p->n_rot / 2;
    /* the rotated dims are scaled by attn_factor, the copied ones are not
     * (docs/engine.md §5.3); by 1.0 exactly when the file states none */
    const double mscale = p->attn_factor > 0.0f ? (double)p->attn_factor : 1.0;
    double c[ROPE_MAX_PAIRS], s[ROPE_MAX_PAIRS], c_step[ROPE_MAX_PAIRS], s_step[ROPE_MAX_PAIRS];
    const bool recur = half <= ROPE_MAX_PAIRS;
    if (recur)
        for (int i = 0; i < half; i++) {
            c_step[i] = cos((double)inv_freq[i]);
            s_step[i] = sin((double)inv_freq[i]);
        }
    for (int t = 0; t < n_tok; t++) {
        const bool next = recur && t > 0 && pos[t] == pos[t - 1] + 1;
        for (int i = 0; i < half; i++) {
            double ct, st;
            if (next) {
                ct = c[i] * c_step[i] - s[i] * s_step[i];
                st = s[i] * c_step[i] + c[i] * s_step[i];
            } else {
                const double theta = (double)pos[t] * inv_freq[i];
                ct = cos(theta);
                st = sin(theta);
            }
            if (recur) c[i] = ct, s[i] = st;
            const float cs = (float)(ct * mscale), sn = (float)(st * mscale);
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
