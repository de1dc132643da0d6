/* The architectures the engine runs, as data (docs/engine.md §3, §3.4,
 * §5.1): the table is in arch.c. */
#ifndef PKV_MODEL_ARCH_H
#define PKV_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/ops.h"

typedef enum { PKV_ACT_SILU, PKV_ACT_GELU_TANH } pkv_activation;

/* What distinguishes one architecture from another. A new architecture is
 * one entry of this table (arch.c) plus, at most, a small function. */
typedef struct {
    const char *name;          /* general.architecture */
    pkv_rope_mode rope_mode;
    pkv_activation act;
    bool qkv_bias;             /* qwen2: attn_q/k/v.bias */
    bool qk_norm;              /* gemma3: attn_q_norm / attn_k_norm per head */
    bool post_norms;           /* gemma3: post_attention_norm, post_ffw_norm */
    bool embd_scale_sqrt;      /* gemma: x = embd * sqrt(n_embd) */
    bool swa_pattern_6;        /* gemma3: layer il is sliding iff il % 6 < 5 */
    float swa_rope_base;       /* gemma3 local layers: 10000 (hard-coded upstream) */
} pkv_arch;

const pkv_arch *pkv_arch_find(const char *name, size_t len);

#endif
