/* The architecture table (docs/engine.md §3, §3.4-§3.6, §5.1). */
#include <stdio.h>
#include <string.h>

#include "model/arch.h"
#include "promptkv.h"

static const pkv_arch ARCHS[] = {
    {
        /* Llama 2/3, Mistral: GGUF q/k rows are permuted back to Meta's
         * interleaved order, so RoPE pairs (2i, 2i+1) (§5.2). */
        .name = "llama",
        .rope_mode = PKV_ROPE_NORM,
        .act = PKV_ACT_SILU,
    },
    {
        .name = "qwen2",
        .rope_mode = PKV_ROPE_NEOX,
        .act = PKV_ACT_SILU,
        .qkv_bias = true,
    },
    {
        /* Qwen2 without biases, with RMSNorm of every q and k head before RoPE (§3.5) */
        .name = "qwen3",
        .rope_mode = PKV_ROPE_NEOX,
        .act = PKV_ACT_SILU,
        .qk_norm = true,
    },
    {
        .name = "gemma3",
        .rope_mode = PKV_ROPE_NEOX,
        .act = PKV_ACT_GELU_TANH,
        .qk_norm = true,
        .post_norms = true,
        .embd_scale_sqrt = true,
        .swa = PKV_SWA_GEMMA3,
        .swa_rope_base = 10000.0f,
    },
    {
        /* Phi-3/3.5/4: fused attn_qkv and gate/up tensors, LongRoPE (§3.6) */
        .name = "phi3",
        .rope_mode = PKV_ROPE_NEOX,
        .act = PKV_ACT_SILU,
        .fused_gate_up = true,
        .long_short_rope = true,
        .swa = PKV_SWA_ALL,
    },
};
enum { N_ARCHS = sizeof ARCHS / sizeof ARCHS[0] };

const pkv_arch *pkv_arch_find(const char *name, size_t len) {
    for (int i = 0; i < N_ARCHS; i++)
        if (strlen(ARCHS[i].name) == len && memcmp(ARCHS[i].name, name, len) == 0) return &ARCHS[i];
    return NULL;
}

const char *pkv_supported_arch(int i) { return i >= 0 && i < N_ARCHS ? ARCHS[i].name : NULL; }

void pkv_arch_list(char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < N_ARCHS && len < n; i++) {
        int k = snprintf(buf + len, n - len, "%s%s", i ? ", " : "", ARCHS[i].name);
        if (k < 0) break;
        len += (size_t)k;
    }
}
