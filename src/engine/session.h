/* The session's insides, shared by session.c (the public API) and forward.c. */
#ifndef PKV_SESSION_H
#define PKV_SESSION_H

#include <stdatomic.h>

#include "base/arena.h"
#include "cache/kvcache.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "press/press.h"

/* Buffers for one forward pass, grown on demand and kept between calls. */
typedef struct {
    int n_tok_cap;   /* tokens the chunk buffers hold */
    float *x;        /* [n_batch, n_embd] normed input of a sub-layer */
    float *q, *k, *v;
    float *att;      /* [n_batch, n_head * head_dim_v] */
    float *proj;     /* [n_batch, n_embd] output of attn_output / ffn_down */
    float *gate, *up;
    void *act;       /* quantised activations for matmuls */
    size_t act_bytes;
    int32_t *pos;

    float *hidden;   /* [n_tokens, n_embd] residual stream of the whole call (layer-major) */
    int64_t hidden_cap;
    float *logit_rows; /* [LOGIT_ROWS, n_vocab] */
    float *inv_freq_global, *inv_freq_local;
    float *attn_scratch; /* per-thread softmax rows */
    size_t attn_scratch_cap;

} pkv_work;

/* What a prefill keeps of each full-attention layer so that a press can run on
 * it: at the end of the layer in the same call, or later on a copy of the
 * session (pkv_session_copy: one prefill, many presses). */
typedef struct {
    int window;         /* queries kept: those of the call's last `window` tokens */
    float *q;           /* [n_head][window][head_dim_k] post-RoPE */
    int32_t *q_pos;     /* [window] */
    float **acc;        /* [n_head] -> attention summed over the call's queries, per row; NULL if not kept */
    int64_t acc_rows;   /* rows each acc array covers (the layer's rows at the end of the call) */
    int n_new;          /* tokens of the call */
    int32_t first_pos;  /* position of the call's first token */
} pkv_layer_probe;

struct pkv_session {
    pkv_model *model;
    pkv_session_opts opts;
    pkv_pool *pool;
    pkv_compute comp;
    pkv_kvcache cache;
    int n_pos;        /* logical length: next token's position */
    float *logits;    /* [n_vocab], last token */
    pkv_work work;
    pkv_arena arena;  /* per-layer press scratch */
    pkv_layer_probe *probes;  /* [n_layer]; probes_ok when the last prefill kept them uncompressed */
    bool probes_ok;
    uint64_t peak_mem;        /* most KV cache + activations bytes seen */
    bool broken;              /* a call failed midway; only a reset helps */
    atomic_int interrupted; /* set from a signal handler or another thread (lock-free) */
};

/* Called with the logits of each requested row. */
typedef void (*pkv_row_logits_fn)(void *user, int index, const float *logits);

typedef struct {
    bool compressed;
    double press_seconds;
    int64_t rows_before, rows_after; /* rows of the pressed layers, summed over heads */
} pkv_forward_stats;

/* Runs n tokens through the model at positions n_pos.. (layer by layer over
 * chunks of n_batch tokens), appending to the cache; with a press, each
 * full-attention layer is compressed once it has seen all n tokens. Logits of
 * the last token land in s->logits; with row_fn, every token's logits are
 * passed to it in order. */
/* What to keep for presses (pkv_layer_probe): window queries and, optionally,
 * attention sums. press, if not NULL, runs on each full layer at its end. */
typedef struct {
    int window;
    bool attn_sums;
} pkv_probe_cfg;

int pkv_forward(pkv_session *s, const int32_t *tokens, int n, const pkv_press_cfg *press,
                const pkv_probe_cfg *probe, pkv_row_logits_fn row_fn, void *user, pkv_forward_stats *stats,
                pkv_error *err);

/* Runs a press on layer il of s from a probe (s's own, or one of the session
 * s was copied from). */
int pkv_press_layer(pkv_session *s, const pkv_layer_probe *probe, const pkv_press_cfg *press, int il,
                    pkv_forward_stats *stats, pkv_error *err);

#endif
