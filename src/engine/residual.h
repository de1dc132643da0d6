/* A row of the residual stream kept between layers in a smaller type
 * (pkv_session_opts.residual_type): f16 values times a power of two per row,
 * so rows with values far past f16's range (65504) keep f16's relative
 * precision instead of overflowing; or ggml's Q8_0 blocks (32 values, an f16
 * scale each), whose scale already follows the values. */
#ifndef PKV_ENGINE_RESIDUAL_H
#define PKV_ENGINE_RESIDUAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/table.h"
#include "promptkv.h"

/* Bytes of one packed row of d values; 0 when the type cannot hold it (Q8_0:
 * d a multiple of 32) or holds nothing packed (f32). */
size_t pkv_residual_row_bytes(pkv_residual_type t, int64_t d);

/* Packs row[0..d) into out (pkv_residual_row_bytes) and returns the row's
 * exponent e; row may be changed. F16: out holds row times 2^-e, e >= 0 the
 * smallest with every |value| * 2^-e < 2^15; rows holding inf or NaN keep e =
 * 0 (they stay inf and NaN). Q8_0: e = 0. */
int pkv_residual_pack_row(const pkv_kernels *kern, pkv_residual_type t, float *row, int64_t d, void *out);

/* row[0..d) from a packed row and its exponent. */
void pkv_residual_unpack_row(const pkv_kernels *kern, pkv_residual_type t, const void *in, int e, int64_t d,
                             float *row);

#endif
