/*
 * Compression, the cache <-> press adapter (compress.c): the probes a prefill
 * keeps for a press, the press run on one layer, and the memory cap. The
 * forward pass calls it at the points of a layer where a press needs
 * something; the session calls it to press a copy (one prefill, many presses).
 */
#ifndef PKV_ENGINE_COMPRESS_H
#define PKV_ENGINE_COMPRESS_H

#include "engine/state.h"

/* What a prefill keeps for presses (pkv_layer_probe): the queries of its last
 * `window` tokens and, optionally, attention sums. */
typedef struct {
    int window;
    bool attn_sums;
    bool q_stats; /* pre-RoPE query statistics (Expected Attention) */
} pkv_probe_cfg;

/* What compression did during a call. */
typedef struct {
    bool compressed;
    double press_seconds;
    int64_t rows_before, rows_after; /* rows of the pressed layers, summed over heads */
} pkv_compress_stats;

/* What the full layers must keep in a call: for its press (NULL: none) now
 * and, keep (may be NULL), for copies pressed later. */
pkv_probe_cfg pkv_probe_plan(const pkv_press_cfg *press, const pkv_probe_cfg *keep);

/* Sizes layer il's probe for a call of n_new tokens: `window` queries and, if
 * asked, attention sums over the rows the layer will hold at the end of it. */
int pkv_probe_prepare(pkv_session *s, int il, const pkv_probe_cfg *pc, int n_new, pkv_error *err);

/* Copies the post-RoPE queries q of chunk tokens [c0, c0 + nc) that fall in
 * the window into the probe. */
void pkv_probe_capture(pkv_layer_probe *p, const pkv_hparams *hp, const float *q, const int32_t *pos, int c0,
                       int nc);

/* Adds the pre-RoPE queries q ([n_tok][n_head][head_dim_k]) of call tokens at
 * positions pos to the probe's statistics (when it keeps them). */
void pkv_probe_query_stats(pkv_layer_probe *p, const pkv_hparams *hp, const pkv_compute *comp, const float *q,
                           const int32_t *pos, int n_tok);

/* Runs a press on layer il of s from a probe (s's own, or one of the session
 * s was copied from) and keeps only its selection in the cache. */
int pkv_compress_layer(pkv_session *s, const pkv_layer_probe *probe, const pkv_press_cfg *press, int il,
                       pkv_compress_stats *stats, pkv_error *err);

/* A reconstruction pass being run (engine/reconstruct.c, docs/design.md
 * "Reconstruction passes"): what the press's score_batch reads of it. */
struct pkv_recon_state {
    const pkv_press_cfg *press;
    int ctx_rows;      /* rows of every head before the pass: the context */
    int n_sink;        /* sink rows this pass's softmax sees */
    int chunk_begin, n_chunk;
    float ***scores;   /* [n_layer] -> [n_head_kv] -> [ctx_rows]; NULL for sliding layers */
    float *keys;       /* gathered keys of one head */
    int64_t keys_cap;
};

/* The forward pass calls this after layer il's attention over a chunk of a
 * pass (s->recon set): q are the chunk's post-RoPE queries, [c0, c0 + nc) its
 * tokens within the pass; the press scores the context rows by them. */
int pkv_recon_observe(pkv_session *s, int il, const float *q, int c0, int nc, pkv_error *err);

/* Bytes of activations and scratch the session holds (work buffers, press
 * arena, probes). */
uint64_t pkv_session_work_bytes(const pkv_session *s);

/* With a cap (pkv_session_opts.mem_cap_bytes), the KV cache plus activations
 * may not exceed it (PKV_ERR_LIMIT naming the layer); records the peak. */
int pkv_check_mem_cap(pkv_session *s, int layer, pkv_error *err);

#endif
