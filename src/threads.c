#include "threads.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct pkv_pool {
    int n_threads;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t job_cv;  /* workers wait here for a new job */
    pthread_cond_t done_cv; /* the caller waits here for the job's end */
    uint64_t generation;    /* bumped for every job */
    int pending;            /* workers still running the current job */
    int stop;
    pkv_task_fn fn;
    void *arg;
};

typedef struct {
    pkv_pool *pool;
    int ith;
} worker_arg;

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    pkv_pool *pool = wa.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->stop && pool->generation == seen) pthread_cond_wait(&pool->job_cv, &pool->mu);
        if (pool->stop) break;
        seen = pool->generation;
        pkv_task_fn fn = pool->fn;
        void *arg = pool->arg;
        pthread_mutex_unlock(&pool->mu);
        fn(arg, wa.ith, pool->n_threads);
        pthread_mutex_lock(&pool->mu);
        if (--pool->pending == 0) pthread_cond_signal(&pool->done_cv);
    }
    pthread_mutex_unlock(&pool->mu);
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
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
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
    pool->stop = 1;
    pthread_cond_broadcast(&pool->job_cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->workers[i - 1], NULL);
    free(pool->workers);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->job_cv);
    pthread_cond_destroy(&pool->done_cv);
    free(pool);
}

int pkv_pool_size(const pkv_pool *pool) { return pool ? pool->n_threads : 1; }

void pkv_pool_run(pkv_pool *pool, pkv_task_fn fn, void *arg) {
    if (!pool || pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->pending = pool->n_threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->job_cv);
    pthread_mutex_unlock(&pool->mu);

    fn(arg, 0, pool->n_threads);

    pthread_mutex_lock(&pool->mu);
    while (pool->pending > 0) pthread_cond_wait(&pool->done_cv, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
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
