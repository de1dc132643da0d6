/*
 * A small fork-join thread pool. pkv_pool_run() runs fn(arg, i, n) on every
 * one of the n threads (the caller is thread 0) and returns when all are done.
 * Workers sleep on a condition variable between jobs (no idle spinning).
 * Work splits are by thread index, so each output element is computed by one
 * thread in a fixed order: results do not depend on the thread count.
 */
#ifndef PKV_THREADS_H
#define PKV_THREADS_H

#include <stdint.h>

typedef struct pkv_pool pkv_pool;
typedef void (*pkv_task_fn)(void *arg, int ith, int nth);

/* n_threads <= 0: number of online CPUs. Returns NULL on failure. */
pkv_pool *pkv_pool_new(int n_threads);
void pkv_pool_free(pkv_pool *pool);
int pkv_pool_size(const pkv_pool *pool);
void pkv_pool_run(pkv_pool *pool, pkv_task_fn fn, void *arg);

/* The slice [*begin, *end) of n items that thread ith of nth owns, in chunks of
 * `align` items (the last slice takes the remainder). */
void pkv_split(int64_t n, int ith, int nth, int64_t align, int64_t *begin, int64_t *end);

int pkv_n_cpus(void);

#endif
