/*
 * Models as data: hyper-parameters and weights of each architecture, read
 * from GGUF metadata (docs/engine.md §1.5, §1.6, §3). The forward pass that
 * runs them is in forward.c.
 */
#ifndef PKV_MODEL_H
#define PKV_MODEL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "format/gguf.h"
#include "kernels/ops.h"
#include "model/arch.h"
#include "kernels/tensor.h"
#include "promptkv.h"
#include "text/chat.h"
#include "text/tokenizer.h"

typedef struct {
    int n_vocab;
    int n_ctx_train;
    int n_embd;
    int n_layer;
    int n_ff;
    int n_head;
    int n_head_kv;
    int head_dim_k;
    int head_dim_v;
    float rms_eps;
    float attn_scale;          /* softmax scale on q.k */
    float embd_scale;          /* 1, or sqrt(n_embd) */
    pkv_rope_params rope_global;
    pkv_rope_params rope_local; /* sliding-window layers */
    int sliding_window;        /* 0: none */
    int swa_unapplied;         /* a stated window no layer applies (>= n_ctx_train): sessions
                                  longer than it are refused (docs/engine.md §3.6); 0: none */
    bool *layer_swa;           /* n_layer flags */
    int n_ctx_orig;            /* rope.scaling.original_context_length (default n_ctx_train) */
    const float *rope_long, *rope_short; /* LongRoPE factors (n_rot/2 each) or NULL */
    float final_logit_softcap; /* 0: off */
    float attn_logit_softcap;  /* 0: off */
} pkv_hparams;

typedef struct {
    pkv_tensor attn_norm;
    pkv_tensor wq, wk, wv, wo;
    pkv_tensor bq, bk, bv;           /* optional */
    pkv_tensor q_norm, k_norm;       /* optional */
    pkv_tensor post_attn_norm;       /* optional */
    pkv_tensor ffn_norm;
    pkv_tensor w_gate, w_up, w_down;
    pkv_tensor post_ffn_norm;        /* optional */
} pkv_layer_weights;

struct pkv_model {
    gguf_file file;
    const pkv_arch *arch;
    char arch_name[32];
    char name[128];
    pkv_hparams hp;
    pkv_tensor tok_embd;
    pkv_tensor output_norm;
    pkv_tensor output;               /* tok_embd when tied */
    pkv_tensor rope_freqs;           /* optional */
    pkv_tensor rope_long, rope_short; /* optional (phi3 LongRoPE) */
    pkv_layer_weights *layers;
    pkv_tokenizer *tok;
    pkv_chat_style chat;        /* the chat format (text/chat.h) */
    bool has_chat_template;     /* tokenizer.chat_template is present */
    const pkv_kernels *kern;
    void *x8_data;              /* the interleaved weights (interleave.c, mapped), or NULL */
    uint64_t x8_bytes;
    uint64_t n_params;
    uint64_t weight_bytes;
    _Atomic uint64_t fingerprint; /* pkv_model_fingerprint once computed; 0 before */
};

/* The RoPE a session of n_ctx positions applies to full and to sliding
 * layers: with LongRoPE, the long factors when n_ctx exceeds the original
 * context and the short ones otherwise, chosen once so that every cached key
 * and every later query agree (docs/engine.md §5.3). Refuses an n_ctx beyond
 * a sliding window the model states but does not apply (§3.6). */
int pkv_model_session_rope(const pkv_model *m, int n_ctx, pkv_rope_params *global, pkv_rope_params *local,
                           pkv_error *err);

/* Interleaves the matmul weights by 8 rows where model->kern has the decode
 * kernel for them (interleave.c); 0 or an error. */
int pkv_model_interleave(pkv_model *model, pkv_error *err);
void pkv_model_free_interleaved(pkv_model *model);

/* True for a layer that attends to all previous tokens (and so is pressed). */
static inline bool pkv_layer_is_full(const pkv_model *m, int layer) {
    return !(m->hp.layer_swa && m->hp.layer_swa[layer]);
}

#endif
