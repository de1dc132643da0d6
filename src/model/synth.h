/*
 * Random-weight GGUF files with the exact shapes of real models (docs/design.md
 * "Models": for speed, random weights with real shapes; speed does not depend
 * on the values of the weights).
 *
 * The file is what llama.cpp's converter would write for the architecture
 * (docs/engine.md §1.5, §1.6): the same tensor names, shapes and metadata,
 * 2-D weights in one chosen type (F16, Q8_0, Q4_K, ...; rows a K-quant's
 * 256-element blocks do not divide fall back as llama-quantize does), 1-D
 * tensors in F32.
 * Weights are approximately normal with a small standard deviation, RMSNorm
 * multipliers are 1. The tokenizer is a byte-level SentencePiece vocabulary
 * (unk, BOS, EOS, the 256 byte tokens <0x00>..<0xFF>) padded to the model's
 * real vocabulary size with unique placeholder pieces, so any text tokenizes
 * (to bytes) and the embedding and output matrices have their real sizes.
 */
#ifndef PKV_SYNTH_H
#define PKV_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/quant.h"
#include "promptkv.h"

/* The shape of a model: what its config.json says that matters for the GGUF. */
typedef struct {
    const char *name;        /* short name for the command line: "llama-3.2-1b" */
    const char *source;      /* the model whose shape this is: "meta-llama/Llama-3.2-1B" */
    const char *arch;        /* general.architecture: "llama" or "qwen2" */
    int n_vocab;
    int n_ctx_train;
    int n_embd;
    int n_layer;
    int n_ff;
    int n_head;
    int n_head_kv;
    int head_dim;
    float rope_theta;
    float rms_eps;
    bool tied_embeddings;    /* no output.weight: the LM head is token_embd */
    bool qkv_bias;           /* qwen2: attn_q/k/v.bias */
    /* Llama 3 rope scaling (HF rope_type "llama3"), written as rope_freqs.weight
     * the way the converter does; factor 0 = none. */
    float rope_llama3_factor;
    float rope_llama3_low_freq_factor;
    float rope_llama3_high_freq_factor;
    int rope_llama3_original_ctx;
} pkv_synth_shape;

/* Built-in shapes, i = 0, 1, ... until NULL. */
const pkv_synth_shape *pkv_synth_shape_at(int i);
/* A built-in shape by name (case-insensitive), or NULL. */
const pkv_synth_shape *pkv_synth_shape_find(const char *name);

typedef struct {
    pkv_type type;      /* of the 2-D weights: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K */
    uint64_t seed;
    float weight_std;   /* standard deviation of the weights; <= 0: 0.02 */
    int n_threads;      /* <= 0: all CPUs */
} pkv_synth_opts;

void pkv_synth_opts_default(pkv_synth_opts *opts);

/* Checks that the shape is consistent and that every 2-D weight's rows are
 * whole blocks of the chosen type (or of its fallback). */
int pkv_synth_check(const pkv_synth_shape *shape, pkv_type type, pkv_error *err);

/* Bytes the file's tensors will take (the file adds metadata and padding). */
uint64_t pkv_synth_tensor_bytes(const pkv_synth_shape *shape, pkv_type type);

/* Writes the model to path. The whole tensor data is held in memory until the
 * file is written (about the file's size). */
int pkv_synth_write(const pkv_synth_shape *shape, const pkv_synth_opts *opts, const char *path,
                    pkv_error *err);

/* rope_freqs.weight for Llama 3 rope scaling: n_rot/2 factors by which each
 * pair's wavelength is stretched (llama.cpp's converter, LlamaModel
 * generate_extra_tensors). */
void pkv_synth_llama3_rope_factors(const pkv_synth_shape *shape, float *factors /* head_dim/2 */);

#endif
