/* SnapKV's vote arithmetic, exposed for tests against docs/presses.md A.14. */
#ifndef PKV_PRESS_SNAPKV_H
#define PKV_PRESS_SNAPKV_H

typedef enum { PKV_POOL_AVG, PKV_POOL_MAX } pkv_pool_kind;
typedef enum { PKV_AGG_MEAN, PKV_AGG_MAX, PKV_AGG_SUM } pkv_group_agg;

/* S5: 1-D pooling of n prefix votes, stride 1, padding kernel/2 (odd kernel). */
void pkv_snapkv_pool(const float *votes, int n, int kernel, pkv_pool_kind kind, float *out);

/* Combines the votes of a KV head's query heads (kv_head granularity). */
void pkv_snapkv_aggregate(const float *const *head_votes, int n_heads, int n, pkv_group_agg agg, float *out);

#endif
