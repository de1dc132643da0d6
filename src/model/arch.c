/* The architecture table (docs/engine.md §3, §3.4, §5.1). */
#include <string.h>

#include "model/arch.h"

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
        .name = "gemma3",
        .rope_mode = PKV_ROPE_NEOX,
        .act = PKV_ACT_GELU_TANH,
        .qk_norm = true,
        .post_norms = true,
        .embd_scale_sqrt = true,
        .swa_pattern_6 = true,
        .swa_rope_base = 10000.0f,
    },
};

const pkv_arch *pkv_arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (strlen(ARCHS[i].name) == len && memcmp(ARCHS[i].name, name, len) == 0) return &ARCHS[i];
    return NULL;
}
