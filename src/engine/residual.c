/* The residual stream at 16 bits (residual.h). A power-of-two scale is exact
 * in binary floating point, so packing rounds each value once, to f16's 11
 * significant bits (relative error at most 2^-11), whatever the row's range. */
#include "engine/residual.h"

#include <math.h>

int pkv_residual_pack_row(const pkv_kernels *kern, float *row, int64_t d, uint16_t *out) {
    float amax = 0.0f;
    for (int64_t i = 0; i < d; i++) amax = fmaxf(amax, fabsf(row[i]));
    /* 2^15 leaves room for rounding up below f16's largest value, 65504 */
    int e = isfinite(amax) && amax >= 32768.0f ? ilogbf(amax) - 14 : 0;
    if (e)
        for (int64_t i = 0; i < d; i++) row[i] = ldexpf(row[i], -e);
    kern->f32_to_f16(row, out, d);
    return e;
}

void pkv_residual_unpack_row(const pkv_kernels *kern, const uint16_t *in, int e, int64_t d, float *row) {
    kern->f16_to_f32(in, row, d);
    if (e)
        for (int64_t i = 0; i < d; i++) row[i] = ldexpf(row[i], e);
}
