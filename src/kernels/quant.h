/*
 * Weight types: what each ggml type is (name, block size, whether the engine
 * computes with it), row sizes, and the reference quantisers. The types'
 * block layouts and the kernel table are in table.h, which this header
 * includes for the rest of the engine.
 */
#ifndef PKV_QUANT_H
#define PKV_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/table.h"

typedef struct {
    const char *name;  /* "Q4_K" */
    int block_elems;   /* elements per block (1 for plain types) */
    int block_bytes;   /* bytes per block */
    bool computable;   /* the engine can run matmuls with it as a weight */
    pkv_type act_type; /* format activations are converted to for vec_dot */
} pkv_type_info;

/* Info for a type id, or NULL for an unknown/retired id. Known-but-not-
 * computable types (e.g. IQ4_XS) return info with computable == false so
 * messages can name them. */
const pkv_type_info *pkv_type_get(uint32_t type);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown. */
uint64_t pkv_row_bytes(uint32_t type, int64_t n);

/* Reference quantisers used by tests, by tools that write GGUF files
 * (promptkv synth) and for Q4_0 KV-cache rows (cache/kvcache.c):
 * round-to-nearest like ggml's quantize_row_*_ref. */
void pkv_quantize_row_ref(pkv_type type, const float *src, void *dst, int64_t n);

#endif
