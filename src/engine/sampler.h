/* What the library's greedy paths share with the sampler (sampler.c). */
#ifndef PKV_SAMPLER_H
#define PKV_SAMPLER_H

#include <stdint.h>

/* The greedy choice under the sampler's total order (NaN below every number,
 * then -inf < finite < +inf; ties: the lower id), or -1 when no logit is
 * finite (a step with nothing to choose from: NaN and infinities only). */
int32_t pkv_logits_argmax(const float *logits, int n);

#endif
