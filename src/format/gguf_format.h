/* Facts of the GGUF format the reader and the writer share (docs/engine.md
 * §1.1-§1.4): limits, value-type sizes, the block geometry of every ggml type
 * id, alignment arithmetic. */
#ifndef PKV_GGUF_FORMAT_H
#define PKV_GGUF_FORMAT_H

#include <stdbool.h>
#include <stdint.h>

#include "format/gguf_types.h"

enum {
    GGUF_MAGIC_LE = 0x46554747, /* "GGUF" read as a little-endian u32 (§1.1) */
    GGUF_VERSION_MAX = 3,
    GGUF_MAX_KEY = 65535,       /* §1.1 */
    GGML_TYPE_COUNT = 43,       /* ggml's GGML_TYPE_COUNT (§1.3) */
    /* smallest encodings, used to bound counts before allocating:
     * kv = key length u64 + 1 key byte + type u32 + 1 value byte;
     * tensor info = name length u64 (empty name) + n_dims u32 + one dim u64
     *               + type u32 + offset u64 */
    MIN_KV_BYTES = 8 + 1 + 4 + 1,
    MIN_TENSOR_INFO_BYTES = 8 + 4 + 8 + 4 + 8,
    MIN_STRING_BYTES = 8
};

/* Encoded size of each scalar value type; 0 for STRING and ARRAY (§1.2). */
extern const uint8_t gguf_vtype_size[GGUF_VT_COUNT];

/* Block geometry of every ggml type id below GGML_TYPE_COUNT, from
 * ggml-common.h / ggml.c type_traits (§1.3). Retired ids have block_elems ==
 * 0. Private to the format: quant.c (pkv_type_get) owns what the engine can
 * compute. */
typedef struct {
    const char *name;
    uint16_t block_elems;
    uint16_t block_bytes;
} gguf_type_geometry;

extern const gguf_type_geometry gguf_type_table[GGML_TYPE_COUNT];

static inline bool gguf_is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* x rounded up to a multiple of a power of two; false on overflow. */
static inline bool gguf_align_up(uint64_t x, uint64_t alignment, uint64_t *out) {
    uint64_t sum;
    if (__builtin_add_overflow(x, alignment - 1, &sum)) return false;
    *out = sum & ~(alignment - 1);
    return true;
}

/* Bytes of a tensor with nelements elements of ggml type `type` whose row
 * length is ne0; false when ne0 is not a whole number of blocks or the size
 * overflows. The type must be known and not retired. */
bool gguf_tensor_nbytes(uint32_t type, uint64_t ne0, uint64_t nelements, uint64_t *out);

static inline bool gguf_vtype_is_unsigned(gguf_vtype t) {
    return t == GGUF_VT_UINT8 || t == GGUF_VT_UINT16 || t == GGUF_VT_UINT32 || t == GGUF_VT_UINT64;
}
static inline bool gguf_vtype_is_signed(gguf_vtype t) {
    return t == GGUF_VT_INT8 || t == GGUF_VT_INT16 || t == GGUF_VT_INT32 || t == GGUF_VT_INT64;
}
static inline bool gguf_vtype_is_float(gguf_vtype t) { return t == GGUF_VT_FLOAT32 || t == GGUF_VT_FLOAT64; }

#endif
