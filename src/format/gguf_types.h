/* The value types of GGUF metadata (docs/engine.md §1.2), which the reader,
 * the writer and the format's shared facts (gguf_format.h) all name. */
#ifndef PKV_GGUF_TYPES_H
#define PKV_GGUF_TYPES_H

typedef enum {
    GGUF_VT_UINT8 = 0,
    GGUF_VT_INT8 = 1,
    GGUF_VT_UINT16 = 2,
    GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4,
    GGUF_VT_INT32 = 5,
    GGUF_VT_FLOAT32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_UINT64 = 10,
    GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
    GGUF_VT_COUNT
} gguf_vtype;

/* "UINT8", "STRING", ...; "INVALID" outside the enum (gguf_format.c). */
const char *gguf_vtype_name(gguf_vtype t);

#endif
