/* A row of the residual stream at 16 bits (pkv_session_opts.residual_f16):
 * f16 values times a power of two per row, so that rows with values far past
 * f16's range (65504) keep f16's relative precision instead of overflowing. */
#ifndef PKV_ENGINE_RESIDUAL_H
#define PKV_ENGINE_RESIDUAL_H

#include <stdint.h>

#include "kernels/table.h"

/* Packs row[0..d) into out and returns the row's exponent e (out holds row
 * times 2^-e); row is scaled in place. e >= 0 is the smallest with every
 * |value| * 2^-e < 2^15; rows holding inf or NaN keep e = 0 (they stay inf
 * and NaN). */
int pkv_residual_pack_row(const pkv_kernels *kern, float *row, int64_t d, uint16_t *out);

/* row[0..d) = in * 2^e. */
void pkv_residual_unpack_row(const pkv_kernels *kern, const uint16_t *in, int e, int64_t d, float *row);

#endif
