/* Batched decode across the server's slots (decoder.h). */
#include "decoder.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A slot's stream, on the slot's stack while it waits. */
typedef struct {
    pkv_generation *gen;
    bool over;     /* set by the decoder under mu */
    bool failed;
    pkv_error err;
} stream;

enum { MAX_STREAMS = 256 };

struct srv_decoder {
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    stream *streams[MAX_STREAMS]; /* generating (guarded by mu) */
    int n;
    bool stopping;
    uint64_t steps, rows; /* guarded by mu */
    pkv_batch *batch;
    srv_turn *turn;
    pthread_t thread;
};

static void *decoder_main(void *arg) {
    srv_decoder *d = arg;
    pkv_generation *gens[MAX_STREAMS];
    stream *step[MAX_STREAMS];
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (d->n == 0 && !d->stopping) pthread_cond_wait(&d->work_cv, &d->mu);
        if (d->n == 0) break;
        int n = d->n;
        for (int i = 0; i < n; i++) {
            step[i] = d->streams[i];
            gens[i] = step[i]->gen;
        }
        pthread_mutex_unlock(&d->mu);

        pkv_error err;
        memset(&err, 0, sizeof err);
        srv_turn_take(d->turn);
        int rc = pkv_generation_step_batched(d->batch, gens, n, &err);
        srv_turn_give(d->turn);

        pthread_mutex_lock(&d->mu);
        d->steps++;
        d->rows += (uint64_t)n;
        /* the streams of the step that ended leave; later arrivals stay */
        int kept = 0;
        for (int i = 0; i < d->n; i++) {
            stream *s = d->streams[i];
            bool in_step = false;
            for (int j = 0; j < n && !in_step; j++) in_step = step[j] == s;
            if (in_step && pkv_generation_done(s->gen)) {
                pkv_request_stats st;
                pkv_generation_stats(s->gen, &st);
                s->failed = rc < 0 && st.finish == PKV_FINISH_NONE;
                if (s->failed) s->err = err;
                s->over = true;
            } else {
                d->streams[kept++] = s;
            }
        }
        d->n = kept;
        pthread_cond_broadcast(&d->done_cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

srv_decoder *srv_decoder_start(pkv_model *model, int n_threads, srv_turn *turn, pkv_error *err) {
    srv_decoder *d = calloc(1, sizeof *d);
    if (!d) {
        err->code = PKV_ERR_NOMEM;
        snprintf(err->msg, sizeof err->msg, "out of memory for the decoder");
        return NULL;
    }
    if (!(d->batch = pkv_batch_new(model, n_threads, err))) {
        free(d);
        return NULL;
    }
    d->turn = turn;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->work_cv, NULL);
    pthread_cond_init(&d->done_cv, NULL);
    int rc = pthread_create(&d->thread, NULL, decoder_main, d);
    if (rc) {
        pkv_batch_free(d->batch);
        free(d);
        err->code = PKV_ERR_INTERNAL;
        snprintf(err->msg, sizeof err->msg, "cannot start the decoder thread: %s", strerror(rc));
        return NULL;
    }
    return d;
}

void srv_decoder_stop(srv_decoder *d) {
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->stopping = true;
    pthread_cond_broadcast(&d->work_cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    pkv_batch_free(d->batch);
    pthread_cond_destroy(&d->work_cv);
    pthread_cond_destroy(&d->done_cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

int srv_decoder_run(srv_decoder *d, pkv_generation *gen, pkv_error *err) {
    if (pkv_generation_done(gen)) return 0;
    stream s = {.gen = gen};
    pthread_mutex_lock(&d->mu);
    if (d->n == MAX_STREAMS) { /* cannot happen with the slot limit: the scheduler has fewer slots */
        pthread_mutex_unlock(&d->mu);
        err->code = PKV_ERR_LIMIT;
        snprintf(err->msg, sizeof err->msg, "more than %d streams decoding", MAX_STREAMS);
        return -1;
    }
    d->streams[d->n++] = &s;
    pthread_cond_signal(&d->work_cv);
    while (!s.over) pthread_cond_wait(&d->done_cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
    if (s.failed) *err = s.err;
    return s.failed ? -1 : 0;
}

void srv_decoder_counts(srv_decoder *d, uint64_t *steps, uint64_t *rows) {
    pthread_mutex_lock(&d->mu);
    *steps = d->steps;
    *rows = d->rows;
    pthread_mutex_unlock(&d->mu);
}
