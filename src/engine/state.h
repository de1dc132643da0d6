/* A session's state: the cache, the work buffers, the probes a press reads.
 * Shared by session.c (the public API), forward.c (the forward pass) and
 * compress.c (the cache <-> press adapter); nothing else sees it. */
#ifndef PKV_ENGINE_STATE_H
#define PKV_ENGINE_STATE_H

#include <stdatomic.h>
#include <stdlib.h>

#include "base/arena.h"
#include "base/error.h"
#include "base/spill.h"
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

    /* The call's residual stream between layers (engine/stream.h): f32 rows
     * in hidden, or rows of opts.residual_type packed in memory or in a
     * spill file (opts.residual_spill_dir), hidden then holding the chunk
     * being computed. */
    float *hidden;      /* [n_tokens or a chunk, n_embd] */
    int64_t hidden_cap;
    int packed_n;       /* rows of the call kept packed or spilled; 0: the stream is f32 in hidden */
    size_t packed_row;  /* bytes of a kept row */
    uint8_t *packed;    /* packed rows: all packed_n of them, or with a spill file one chunk's */
    int64_t packed_cap; /* rows packed holds */
    int8_t *packed_exp; /* [packed_n] each row's power-of-two scale (f16 rows) */
    int64_t exp_cap;
    pkv_spill spill;    /* when open, the rows live in this file */
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
    float **acc;        /* [n_head] -> attention summed over the call's queries, per row */
    int64_t acc_rows;   /* rows each acc array covers (the layer's rows at the end of the call); 0: no sums kept */
    int n_new;          /* tokens of the call */
    int32_t first_pos;  /* position of the call's first token */
    /* Pre-RoPE query statistics of the call (Expected Attention), when kept:
     * sums of q and q q^T per query head, the first PKV_QUERY_STATS_HEAD
     * queries themselves, and a chunk's queries transposed (scratch). */
    bool has_q_stats;
    double *q_sum, *q_sq;   /* [n_head][head_dim_k], [n_head][head_dim_k][head_dim_k] */
    float *q_head;          /* [PKV_QUERY_STATS_HEAD][n_head][head_dim_k] */
    float *q_t;             /* [n_head][head_dim_k][n_batch] */
} pkv_layer_probe;

typedef struct pkv_recon_state pkv_recon_state;
typedef struct pkv_recon_memo pkv_recon_memo;

struct pkv_session {
    pkv_model *model;
    pkv_session_opts opts;   /* opts.residual_spill_dir points to spill_dir */
    char *spill_dir;         /* the session's copy of the spill directory's name, or NULL */
    pkv_pool *pool;
    pkv_compute comp;
    pkv_kvcache cache;
    int n_pos;        /* logical length: next token's position */
    int32_t *tokens;  /* [n_pos] the tokens read so far, what a saved cache records (docs/cache-file.md) */
    int tokens_cap;
    float *logits;    /* [n_vocab], last token */
    pkv_work work;
    pkv_arena arena;  /* per-layer press scratch */
    pkv_layer_probe *probes;  /* [n_layer]; probes_ok when the last prefill kept them uncompressed */
    bool probes_ok;
    /* Reconstruction presses (engine/reconstruct.c): the pass being run, and
     * once they are done the scores the press reads; NULL otherwise. */
    pkv_recon_state *recon;
    const float *const *const *recon_scores;
    /* The reconstruction scores last computed from this session's probes,
     * for copies of it pressed again (engine/reconstruct.h); probe_gen counts
     * the calls that change the cache, so that a memo of an older cache is
     * never read. */
    pkv_recon_memo *recon_memo;
    uint64_t probe_gen;
    uint64_t peak_mem;        /* most KV cache + activations bytes seen */
    bool broken;              /* a call failed midway; only a reset helps */
    atomic_int interrupted; /* set from a signal handler or another thread (lock-free) */
};

/* Logits are computed this many rows at a time when every row is wanted. */
enum { PKV_LOGIT_ROWS = 16 };

/* Grows a work buffer to bytes (contents kept); the error names activations. */
static inline int pkv_work_grow(void **p, size_t bytes, pkv_error *err) {
    void *q = realloc(*p, bytes ? bytes : 1);
    if (!q) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory allocating %zu bytes of activations", bytes);
    *p = q;
    return 0;
}

#endif
