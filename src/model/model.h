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
    bool *layer_swa;           /* n_layer flags */
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
    pkv_layer_weights *layers;
    pkv_tokenizer *tok;
    pkv_chat_family chat;
    bool has_chat_template;     /* tokenizer.chat_template is present */
    bool has_chat_system;       /* chat_system holds the template's default system prompt */
    char chat_system[256];
    const pkv_kernels *kern;
    uint64_t n_params;
    uint64_t weight_bytes;
    _Atomic uint64_t fingerprint; /* pkv_model_fingerprint once computed; 0 before */
};

/* True for a layer that attends to all previous tokens (and so is pressed). */
static inline bool pkv_layer_is_full(const pkv_model *m, int layer) {
    return !(m->hp.layer_swa && m->hp.layer_swa[layer]);
}

#endif
