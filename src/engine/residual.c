/* The residual stream in a smaller type (residual.h). F16: a power-of-two
 * scale is exact in binary floating point, so packing rounds each value once,
 * to f16's 11 significant bits (relative error at most 2^-11), whatever the
 * row's range. Q8_0: each block of 32 is rounded to 255 steps of its largest
 * value, the quantiser the matmuls already apply to their inputs. */
#include "engine/residual.h"

#include <math.h>
#include <string.h>

static const char *const NAMES[PKV_RESIDUAL_TYPE_COUNT] = {"f32", "f16", "q8_0"};

const char *pkv_residual_type_name(pkv_residual_type t) {
    return (unsigned)t < PKV_RESIDUAL_TYPE_COUNT ? NAMES[t] : "?";
}

bool pkv_residual_type_parse(const char *s, pkv_residual_type *out) {
    for (int t = 0; t < PKV_RESIDUAL_TYPE_COUNT; t++)
        if (s && !strcmp(s, NAMES[t])) {
            *out = (pkv_residual_type)t;
            return true;
        }
    return false;
}

size_t pkv_residual_row_bytes(pkv_residual_type t, int64_t d) {
    switch (t) {
    case PKV_RESIDUAL_F16: return (size_t)d * sizeof(uint16_t);
    case PKV_RESIDUAL_Q8_0: return d % QK8_0 ? 0 : (size_t)(d / QK8_0) * sizeof(block_q8_0);
    default: return 0;
    }
}

int pkv_residual_pack_row(const pkv_kernels *kern, pkv_residual_type t, float *row, int64_t d, void *out) {
    if (t == PKV_RESIDUAL_Q8_0) {
        kern->quantize[PKV_TYPE_Q8_0](row, out, d);
        return 0;
    }
    float amax = 0.0f;
    for (int64_t i = 0; i < d; i++) amax = fmaxf(amax, fabsf(row[i]));
    /* 2^15 leaves room for rounding up below f16's largest value, 65504 */
    int e = isfinite(amax) && amax >= 32768.0f ? ilogbf(amax) - 14 : 0;
    if (e)
        for (int64_t i = 0; i < d; i++) row[i] = ldexpf(row[i], -e);
    kern->f32_to_f16(row, out, d);
    return e;
}

void pkv_residual_unpack_row(const pkv_kernels *kern, pkv_residual_type t, const void *in, int e, int64_t d,
                             float *row) {
    if (t == PKV_RESIDUAL_Q8_0) {
        kern->dequant[PKV_TYPE_Q8_0](in, row, d);
        return;
    }
    kern->f16_to_f32(in, row, d);
    if (e)
        for (int64_t i = 0; i < d; i++) row[i] = ldexpf(row[i], e);
}
