#include "base/threads.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"

/*
 * The job word packs the job's generation, the next unclaimed item and the
 * item count, so that claiming an item (one compare-and-swap) also proves
 * the job is still the one the thread woke up for: a worker that oversleeps
 * a whole job fails its claim and never touches that job's arguments.
 *
 * Sleeping and waking: a worker about to sleep is counted in `sleepers`
 * before it re-reads the job word under the mutex, and the caller reads
 * `sleepers` after publishing the job word (both sequentially consistent), so
 * either the worker sees the job or the caller sees the sleeper and
 * broadcasts. The end of a job mirrors this with `done` and
 * `caller_sleeping`.
 */
enum { GEN_BITS = 24, ITEM_BITS = 20 };
#define MAX_ITEMS (((int64_t)1 << ITEM_BITS) - 1)
#define ITEM_MASK (((uint64_t)1 << ITEM_BITS) - 1)
#define GEN_MASK (((uint64_t)1 << GEN_BITS) - 1)

static inline uint64_t job_word(uint64_t gen, uint64_t next, uint64_t n) {
    return (gen << (2 * ITEM_BITS)) | (next << ITEM_BITS) | n;
}
static inline uint64_t word_gen(uint64_t w) { return w >> (2 * ITEM_BITS); }
static inline uint64_t word_next(uint64_t w) { return (w >> ITEM_BITS) & ITEM_MASK; }
static inline uint64_t word_n(uint64_t w) { return w & ITEM_MASK; }

struct pkv_pool {
    int n_threads;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t job_cv;  /* sleeping workers wait here for a new job */
    pthread_cond_t done_cv; /* a sleeping caller waits here for the job's end */
    _Atomic uint64_t job;   /* job_word(generation, next item, items) */
    atomic_llong done;      /* items of the current job finished */
    atomic_int sleepers;    /* workers blocked on job_cv */
    atomic_int caller_sleeping;
    atomic_int stop;
    uint64_t gen;           /* the caller's generation counter */
    /* The current job; written before `job` is published, unchanged until
     * all its items are done. */
    pkv_item_fn fn;
    void *arg;
    int64_t base;           /* item offset of this batch (jobs over MAX_ITEMS items run in batches) */
    uint64_t joins;         /* fork-joins run so far (pkv_pool_joins) */
    /* pkv_pool_for_in_order: per part, the items left, next << 32 | end */
    _Atomic uint64_t *ranges;
};

typedef struct {
    pkv_pool *pool;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* A poll loop with a time limit: the clock is read every 16 pauses. */
typedef struct {
    unsigned i;
    double deadline;
} spinner;

static bool spin_expired(spinner *s) {
    cpu_relax();
    if ((++s->i & 15) != 0) return false;
    double t = pkv_now_seconds() * 1e6;
    if (s->deadline == 0.0) s->deadline = t + PKV_POOL_SPIN_US;
    return t > s->deadline;
}

/* Index of an item of job `gen` now owned by the caller, or -1 when the job
 * has no unclaimed items left (or is over). */
static int64_t claim_item(pkv_pool *pool, uint64_t gen, uint64_t *word) {
    uint64_t w = atomic_load(&pool->job);
    for (;;) {
        if (word_gen(w) != gen || word_next(w) >= word_n(w)) return -1;
        if (atomic_compare_exchange_weak(&pool->job, &w, w + ((uint64_t)1 << ITEM_BITS))) {
            *word = w;
            return (int64_t)word_next(w);
        }
    }
}

/* Runs items of job `gen` until none is left. */
static void work_on(pkv_pool *pool, uint64_t gen, int ith, bool is_caller) {
    uint64_t w;
    int64_t item;
    while ((item = claim_item(pool, gen, &w)) >= 0) {
        pool->fn(pool->arg, pool->base + item, ith);
        long long finished = atomic_fetch_add(&pool->done, 1) + 1;
        if (!is_caller && finished == (long long)word_n(w) && atomic_load(&pool->caller_sleeping)) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done_cv);
            pthread_mutex_unlock(&pool->mu);
        }
    }
}

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    pkv_pool *pool = wa.pool;
    uint64_t seen = 0;
    for (;;) {
        spinner s = {0, 0.0};
        bool woke = false;
        while (!woke) {
            woke = word_gen(atomic_load_explicit(&pool->job, memory_order_acquire)) != seen ||
                   atomic_load_explicit(&pool->stop, memory_order_relaxed);
            if (!woke && spin_expired(&s)) break;
        }
        if (!woke) {
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleepers, 1);
            while (word_gen(atomic_load(&pool->job)) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->job_cv, &pool->mu);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) break;
        seen = word_gen(atomic_load(&pool->job));
        work_on(pool, seen, wa.ith, false);
    }
    return NULL;
}

int pkv_n_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

pkv_pool *pkv_pool_new(int n_threads) {
    if (n_threads <= 0) n_threads = pkv_n_cpus();
    pkv_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->job_cv, NULL);
    pthread_cond_init(&pool->done_cv, NULL);
    atomic_init(&pool->job, job_word(0, 0, 0));
    atomic_init(&pool->done, 0);
    atomic_init(&pool->sleepers, 0);
    atomic_init(&pool->caller_sleeping, 0);
    atomic_init(&pool->stop, 0);
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
        pool->ranges = calloc((size_t)n_threads, sizeof *pool->ranges);
        if (!pool->workers || !pool->ranges) {
            free(pool->workers);
            free(pool->ranges);
            free(pool);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa) {
                wa->pool = pool;
                wa->ith = i;
            }
            if (!wa || pthread_create(&pool->workers[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                pool->n_threads = i; /* run with the threads we got */
                break;
            }
        }
    }
    return pool;
}

void pkv_pool_free(pkv_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->job_cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->workers[i - 1], NULL);
    free(pool->workers);
    free(pool->ranges);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->job_cv);
    pthread_cond_destroy(&pool->done_cv);
    free(pool);
}

int pkv_pool_size(const pkv_pool *pool) { return pool ? pool->n_threads : 1; }

uint64_t pkv_pool_joins(const pkv_pool *pool) { return pool ? pool->joins : 0; }

static void run_batch(pkv_pool *pool, int64_t base, int64_t n, pkv_item_fn fn, void *arg) {
    pool->joins++;
    pool->fn = fn;
    pool->arg = arg;
    pool->base = base;
    atomic_store(&pool->done, 0);
    pool->gen = (pool->gen + 1) & GEN_MASK;
    if (pool->gen == 0) pool->gen = 1; /* 0 is "no job yet" */
    atomic_store(&pool->job, job_word(pool->gen, 0, (uint64_t)n));
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->job_cv);
        pthread_mutex_unlock(&pool->mu);
    }

    work_on(pool, pool->gen, 0, true);

    spinner s = {0, 0.0};
    while (atomic_load_explicit(&pool->done, memory_order_acquire) != n)
        if (spin_expired(&s)) break;
    if (atomic_load(&pool->done) != n) {
        pthread_mutex_lock(&pool->mu);
        atomic_store(&pool->caller_sleeping, 1);
        while (atomic_load(&pool->done) != n) pthread_cond_wait(&pool->done_cv, &pool->mu);
        atomic_store(&pool->caller_sleeping, 0);
        pthread_mutex_unlock(&pool->mu);
    }
}

void pkv_pool_for(pkv_pool *pool, int64_t n_items, pkv_item_fn fn, void *arg) {
    if (!pool || pool->n_threads == 1 || n_items == 1) {
        for (int64_t i = 0; i < n_items; i++) fn(arg, i, 0);
        return;
    }
    for (int64_t base = 0; base < n_items; base += MAX_ITEMS)
        run_batch(pool, base, n_items - base < MAX_ITEMS ? n_items - base : MAX_ITEMS, fn, arg);
}

/* The next item of a range, from its front (its own part) or its back
 * (another part, whose own range is done); false when none is left. */
static bool take_item(_Atomic uint64_t *range, bool front, int64_t *item) {
    uint64_t w = atomic_load(range);
    for (;;) {
        const uint64_t next = w >> 32, end = w & 0xffffffffu;
        if (next >= end) return false;
        const uint64_t taken = front ? next : end - 1;
        const uint64_t nw = front ? (next + 1) << 32 | end : next << 32 | (end - 1);
        if (atomic_compare_exchange_weak(range, &w, nw)) {
            *item = (int64_t)taken;
            return true;
        }
    }
}

typedef struct {
    pkv_pool *pool;
    pkv_item_fn fn;
    void *arg;
} in_order_job;

static void in_order_part(void *arg, int64_t part, int thread) {
    const in_order_job *j = arg;
    const int nth = j->pool->n_threads;
    int64_t item;
    while (take_item(&j->pool->ranges[part], true, &item)) j->fn(j->arg, item, thread);
    for (int k = 1; k < nth; k++) /* then the others' last items, nearest part first */
        while (take_item(&j->pool->ranges[(part + k) % nth], false, &item)) j->fn(j->arg, item, thread);
}

void pkv_pool_for_in_order(pkv_pool *pool, int64_t n_items, pkv_item_fn fn, void *arg) {
    if (!pool || pool->n_threads == 1 || n_items <= 1 || n_items > 0xffffffff) {
        pkv_pool_for(pool, n_items, fn, arg);
        return;
    }
    const int nth = pool->n_threads;
    for (int p = 0; p < nth; p++) {
        int64_t b, e;
        pkv_split(n_items, p, nth, 1, &b, &e);
        atomic_store(&pool->ranges[p], (uint64_t)b << 32 | (uint64_t)e);
    }
    in_order_job j = {pool, fn, arg};
    run_batch(pool, 0, nth, in_order_part, &j);
}

typedef struct {
    pkv_task_fn fn;
    void *arg;
    int nth;
} task_job;

static void task_item(void *arg, int64_t item, int thread) {
    const task_job *t = arg;
    (void)thread;
    t->fn(t->arg, (int)item, t->nth);
}

void pkv_pool_run(pkv_pool *pool, pkv_task_fn fn, void *arg) {
    task_job t = {fn, arg, pkv_pool_size(pool)};
    pkv_pool_for(pool, t.nth, task_item, &t);
}

void pkv_split(int64_t n, int ith, int nth, int64_t align, int64_t *begin, int64_t *end) {
    if (align < 1) align = 1;
    int64_t chunks = (n + align - 1) / align;
    int64_t per = chunks / nth, extra = chunks % nth;
    int64_t c0 = ith * per + (ith < extra ? ith : extra);
    int64_t c1 = c0 + per + (ith < extra ? 1 : 0);
    *begin = c0 * align < n ? c0 * align : n;
    *end = c1 * align < n ? c1 * align : n;
}
