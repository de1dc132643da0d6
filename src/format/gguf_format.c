#include "format/gguf_format.h"

const uint8_t gguf_vtype_size[GGUF_VT_COUNT] = {
    [GGUF_VT_UINT8] = 1,  [GGUF_VT_INT8] = 1,   [GGUF_VT_UINT16] = 2, [GGUF_VT_INT16] = 2,
    [GGUF_VT_UINT32] = 4, [GGUF_VT_INT32] = 4,  [GGUF_VT_FLOAT32] = 4, [GGUF_VT_BOOL] = 1,
    [GGUF_VT_UINT64] = 8, [GGUF_VT_INT64] = 8,  [GGUF_VT_FLOAT64] = 8,
};

const gguf_type_geometry gguf_type_table[GGML_TYPE_COUNT] = {
    [0] = {"F32", 1, 4},          [1] = {"F16", 1, 2},
    [2] = {"Q4_0", 32, 18},       [3] = {"Q4_1", 32, 20},
    [4] = {"Q4_2 (retired)", 0, 0}, [5] = {"Q4_3 (retired)", 0, 0},
    [6] = {"Q5_0", 32, 22},       [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},       [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84},     [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144},    [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},    [15] = {"Q8_K", 256, 292},
    [16] = {"IQ2_XXS", 256, 66},  [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},  [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},    [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},    [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},          [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},         [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},         [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},
    [31] = {"Q4_0_4_4 (retired)", 0, 0}, [32] = {"Q4_0_4_8 (retired)", 0, 0},
    [33] = {"Q4_0_8_8 (retired)", 0, 0},
    [34] = {"TQ1_0", 256, 54},    [35] = {"TQ2_0", 256, 66},
    [36] = {"IQ4_NL_4_4 (retired)", 0, 0}, [37] = {"IQ4_NL_4_8 (retired)", 0, 0},
    [38] = {"IQ4_NL_8_8 (retired)", 0, 0},
    [39] = {"MXFP4", 32, 17},     [40] = {"NVFP4", 64, 36},
    [41] = {"Q1_0", 128, 18},     [42] = {"Q2_0", 64, 18},
};

bool gguf_tensor_nbytes(uint32_t type, uint64_t ne0, uint64_t nelements, uint64_t *out) {
    const gguf_type_geometry *g = &gguf_type_table[type];
    if (ne0 % g->block_elems != 0) return false;
    /* ne0 divides by the block size, so the element count does too */
    return !__builtin_mul_overflow(nelements / g->block_elems, (uint64_t)g->block_bytes, out);
}

const char *gguf_vtype_name(gguf_vtype t) {
    static const char *const names[GGUF_VT_COUNT] = {
        "UINT8", "INT8",  "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
        "BOOL",  "STRING", "ARRAY", "UINT64", "INT64",  "FLOAT64"};
    return (unsigned)t < GGUF_VT_COUNT ? names[t] : "INVALID";
}
