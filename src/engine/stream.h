/* The residual stream of a forward call between layers.
 *
 * Layer-major, the residual stream of every token of the call is alive
 * between layers: n_embd floats per token, the largest thing a long pressed
 * prefill holds (docs/compression.md, "The longest prompt that fits a memory
 * cap"). A call longer than one chunk can keep it elsewhere, and only the
 * chunk being computed is f32 (work.hidden):
 *   - packed in memory, with opts.residual_type f16 or q8_0 (engine/residual.h:
 *     f16 with a power-of-two scale per token, since Qwen2's outlier channels
 *     reach the thousands); the cost is one rounding per layer, f16's relative
 *     2^-11 or Q8_0's blocks, the quantiser every matmul already applies to
 *     its inputs;
 *   - in a spill file on disk, with opts.residual_spill_dir (base/spill.h): its
 *     rows in f32 (the same bits as in memory) or packed as above; the cost is
 *     reading and writing the stream once a layer.
 * Otherwise the whole stream is f32 rows of work.hidden, changed in place. */
#ifndef PKV_ENGINE_STREAM_H
#define PKV_ENGINE_STREAM_H

#include "engine/state.h"

/* Buffers (and the spill file) for a call of n tokens. */
int pkv_stream_open(pkv_session *s, int n, pkv_error *err);
/* Rows [r0, r0 + nr) as f32 (nr at most a chunk, or PKV_LOGIT_ROWS): in place,
 * or unpacked or read into work.hidden. NULL when the spill file failed. */
float *pkv_stream_rows(pkv_session *s, int r0, int nr, pkv_error *err);
/* Rows [r0, r0 + nr), changed by a layer in what pkv_stream_rows returned,
 * back where the stream keeps them (nothing to do when it is f32 in place). */
int pkv_stream_keep(pkv_session *s, int r0, int nr, pkv_error *err);
/* The call's stream given back (decode needs a chunk at most), the spill file closed. */
void pkv_stream_release(pkv_session *s);

#endif
