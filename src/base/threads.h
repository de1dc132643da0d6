/*
 * A small fork-join thread pool. pkv_pool_for() runs fn(arg, item, thread)
 * for every work item of a job, the items handed out one at a time from a
 * shared counter, and returns when all items are done; `thread` (0 for the
 * caller) indexes per-thread scratch.
 *
 * Items, not threads, are the unit of work: a worker that the OS has not
 * scheduled yet simply finds no items left, so a busy machine slows a job
 * down to the threads that do run instead of stalling it on the slowest.
 * Because an item's result must not depend on which thread runs it, results
 * do not depend on the thread count.
 *
 * Between jobs a worker polls for PKV_POOL_SPIN_US and then sleeps on a
 * condition variable: the jobs of one decode step follow each other within
 * microseconds and should not each pay a futex wake-up, while a pool with
 * no work must not burn a core.
 */
#ifndef PKV_THREADS_H
#define PKV_THREADS_H

#include <stdint.h>

/* How long an idle thread polls for the next job before it sleeps. */
#define PKV_POOL_SPIN_US 50

typedef struct pkv_pool pkv_pool;
typedef void (*pkv_item_fn)(void *arg, int64_t item, int thread);
typedef void (*pkv_task_fn)(void *arg, int ith, int nth);

/* n_threads <= 0: number of online CPUs. Returns NULL on failure. */
pkv_pool *pkv_pool_new(int n_threads);
void pkv_pool_free(pkv_pool *pool);
int pkv_pool_size(const pkv_pool *pool);
/* Jobs handed to the other threads so far (each one a fork and a join; jobs
 * run inline on one thread are not counted): what a step pays in
 * synchronisation (tools/bench-threads.c, docs/performance.md). */
uint64_t pkv_pool_joins(const pkv_pool *pool);

/* fn(arg, i, thread) for every i in [0, n_items). pool may be NULL (runs
 * inline). */
void pkv_pool_for(pkv_pool *pool, int64_t n_items, pkv_item_fn fn, void *arg);

/* As pkv_pool_for, but each thread takes a contiguous range of the items in
 * order (part t of pkv_split's n-way split, one part per thread), and a
 * thread whose range is done takes the other ranges' last items, so a slow
 * thread's rest is still shared. Where items are consecutive pieces of one
 * array (a matmul's rows), each thread then reads one ascending stream,
 * which the hardware prefetchers follow across items, where items handed
 * out one at a time from a shared counter make every thread jump over the
 * others' items and restart its stream at each one (docs/performance.md
 * "Decode against the memory-bandwidth bound"). `thread` as in
 * pkv_pool_for. */
void pkv_pool_for_in_order(pkv_pool *pool, int64_t n_items, pkv_item_fn fn, void *arg);

/* fn(arg, i, n) for every i < n = pkv_pool_size(pool): a job split in as
 * many parts as there are threads (any thread may run any part). */
void pkv_pool_run(pkv_pool *pool, pkv_task_fn fn, void *arg);

/* The slice [*begin, *end) of n items that part ith of nth owns, in chunks of
 * `align` items (the last slice takes the remainder). */
void pkv_split(int64_t n, int ith, int nth, int64_t align, int64_t *begin, int64_t *end);

int pkv_n_cpus(void);

#endif
