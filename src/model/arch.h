/* The architectures the engine runs, as data (docs/engine.md §3, §3.4-§3.6,
 * §5.1): the table is in arch.c. */
#ifndef PKV_MODEL_ARCH_H
#define PKV_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/ops.h"

typedef enum { PKV_ACT_SILU, PKV_ACT_GELU_TANH } pkv_activation;

/* Which layers slide when the file states attention.sliding_window > 0. */
typedef enum {
    PKV_SWA_NONE = 0,  /* the key is ignored: every layer attends to all tokens */
    PKV_SWA_GEMMA3,    /* layer il slides iff il % 6 < 5 (docs/engine.md §3.2) */
    PKV_SWA_ALL        /* phi3: every layer (docs/engine.md §3.6) */
} pkv_swa_pattern;

/* What distinguishes one architecture from another. A new architecture is
 * one entry of this table (arch.c) plus, at most, a small function. */
typedef struct {
    const char *name;          /* general.architecture */
    pkv_rope_mode rope_mode;
    pkv_activation act;
    bool qkv_bias;             /* qwen2: attn_q/k/v.bias */
    bool qk_norm;              /* gemma3, qwen3: attn_q_norm / attn_k_norm per head */
    bool post_norms;           /* gemma3: post_attention_norm, post_ffw_norm */
    bool embd_scale_sqrt;      /* gemma: x = embd * sqrt(n_embd) */
    bool fused_gate_up;        /* phi3: ffn_up holds the gate rows, then the up rows */
    bool long_short_rope;      /* phi3: LongRoPE's rope_factors_long / rope_factors_short */
    pkv_swa_pattern swa;
    float swa_rope_base;       /* gemma3 local layers: 10000 (hard-coded upstream) */
} pkv_arch;

const pkv_arch *pkv_arch_find(const char *name, size_t len);

/* "llama, qwen2, ..." for messages. */
void pkv_arch_list(char *buf, size_t n);

#endif
