#include "sched.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct srv_slot {
    srv_sched *sc;
    int index;
    pthread_t thread;
    pkv_session *session;
    srv_job *job;          /* running here (guarded by sc->mu) */
    uint64_t cache_bytes;  /* what the session holds now (guarded) */
    uint64_t saved_bytes;  /* what compression saved for the running request (guarded) */
};

/* ------------------------------------------------------------ jobs */

srv_job *srv_job_new(srv_request *req, srv_prepared *in) {
    srv_job *job = calloc(1, sizeof *job);
    if (!job || pthread_cond_init(&job->cv, NULL)) {
        free(job);
        srv_request_free(req);
        srv_prepared_free(in);
        return NULL;
    }
    job->req = *req;
    job->in = *in;
    memset(req, 0, sizeof *req);
    memset(in, 0, sizeof *in);
    job->in.req.stop = (const char *const *)job->req.stop; /* the array moved with the request */
    job->refs = 1;
    job->slot = -1;
    snprintf(job->press_desc, sizeof job->press_desc, "%s", job->in.press_desc);
    job->usage.press = job->press_desc;
    job->usage.prompt_tokens = job->in.prompt.prompt.n_tokens;
    return job;
}

static void job_unref_locked(srv_sched *sc, srv_job *job) {
    if (--job->refs > 0) return;
    srv_store_release(sc->opts.store, job->from);
    srv_store_release(sc->opts.store, job->made);
    free(job->out.text);
    srv_request_free(&job->req);
    srv_prepared_free(&job->in);
    pthread_cond_destroy(&job->cv);
    free(job);
}

void srv_job_release(srv_sched *sc, srv_job *job) {
    pthread_mutex_lock(&sc->mu);
    job_unref_locked(sc, job);
    pthread_mutex_unlock(&sc->mu);
}

/* ------------------------------------------------------------ queue */

static void queue_remove_locked(srv_sched *sc, srv_job *job) {
    int cap = sc->opts.queue_cap;
    for (int i = 0; i < sc->q_len; i++) {
        if (sc->queue[(sc->q_head + i) % cap] != job) continue;
        for (int k = i; k + 1 < sc->q_len; k++)
            sc->queue[(sc->q_head + k) % cap] = sc->queue[(sc->q_head + k + 1) % cap];
        sc->q_len--;
        job_unref_locked(sc, job); /* the queue's reference */
        return;
    }
}

/* Ends a job that never ran (cancelled, timed out) or that a slot finished. */
static void job_done_locked(srv_job *job) {
    job->state = JOB_DONE;
    job->t_end = pkv_now_seconds();
    pthread_cond_broadcast(&job->cv);
}

int srv_submit(srv_sched *sc, srv_job *job, srv_error *e) {
    pthread_mutex_lock(&sc->mu);
    int rc = 0;
    if (sc->draining) {
        sc->m.rejected_draining++;
        rc = srv_fail(e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
    } else if (job->in.cache_bytes_max > sc->opts.mem_limit) {
        rc = srv_bad(e, "request_too_large", "max_tokens",
                     "this request may need %llu bytes of KV cache, more than the server's limit of %llu "
                     "(ask for fewer tokens or compress with kv_compression)",
                     (unsigned long long)job->in.cache_bytes_max, (unsigned long long)sc->opts.mem_limit);
    } else if (sc->q_len == sc->opts.queue_cap) {
        sc->m.rejected_queue_full++;
        rc = srv_fail(e, 429, "rate_limit_error", "queue_full",
                      NULL, "all %d slots are busy and %d requests are waiting; retry later", sc->opts.n_slots,
                      sc->q_len);
    } else {
        job->state = JOB_QUEUED;
        job->t_submit = pkv_now_seconds();
        job->refs++; /* the queue's */
        sc->queue[(sc->q_head + sc->q_len) % sc->opts.queue_cap] = job;
        sc->q_len++;
        pthread_cond_broadcast(&sc->work_cv);
    }
    pthread_mutex_unlock(&sc->mu);
    return rc;
}

srv_context *srv_job_take_made(srv_sched *sc, srv_job *job) {
    pthread_mutex_lock(&sc->mu);
    srv_context *c = job->made;
    job->made = NULL;
    pthread_mutex_unlock(&sc->mu);
    return c;
}

void srv_job_cancel(srv_sched *sc, srv_job *job) {
    pthread_mutex_lock(&sc->mu);
    if (job->state != JOB_DONE && !job->cancelled) {
        job->cancelled = true;
        sc->m.cancelled++;
        if (job->state == JOB_QUEUED) {
            job_done_locked(job);
            queue_remove_locked(sc, job);
        } else {
            pkv_session_interrupt(sc->slots[job->slot].session);
        }
    }
    pthread_mutex_unlock(&sc->mu);
}

/* ------------------------------------------------------------ news for the connection */

static void take_news_locked(srv_job *job, srv_news *n) {
    memset(n, 0, sizeof *n);
    size_t avail = job->out.ready > job->taken ? job->out.ready - job->taken : 0;
    n->text = malloc(avail + 1);
    if (n->text) {
        if (avail) memcpy(n->text, job->out.text + job->taken, avail); /* text is NULL until the first piece */
        n->text[avail] = '\0';
        n->len = avail;
        job->taken += avail;
    }
    n->done = job->state == JOB_DONE && job->taken >= job->out.ready;
    n->failed = job->failed;
    n->error = job->error;
    n->finish_reason = job->finish_reason;
    n->usage = job->usage;
    snprintf(n->press_desc, sizeof n->press_desc, "%s", job->press_desc);
    n->usage.press = NULL; /* points into the job: the caller uses press_desc */
}

static bool has_news_locked(const srv_job *job) { return job->out.ready > job->taken || job->state == JOB_DONE; }

int srv_job_next(srv_sched *sc, srv_job *job, bool (*client_gone)(void *), void *user, srv_news *news) {
    /* asked on every call, not only when a wait times out: a fast model has
     * news within every 100 ms wait, and a client that left must still be
     * noticed before the answer is complete */
    if (client_gone && client_gone(user)) {
        srv_job_cancel(sc, job);
        return -1;
    }
    pthread_mutex_lock(&sc->mu);
    while (!has_news_locked(job)) {
        if (job->state == JOB_QUEUED && pkv_now_seconds() - job->t_submit > sc->opts.queue_timeout) {
            sc->m.queue_timeouts++;
            job->failed = true;
            srv_fail(&job->error, 503, "server_error", "queue_timeout", NULL,
                     "no slot became free within %.0f s; retry later", sc->opts.queue_timeout);
            job_done_locked(job);
            queue_remove_locked(sc, job);
            break;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&job->cv, &sc->mu, &until);
        if (has_news_locked(job)) break;
        pthread_mutex_unlock(&sc->mu);
        bool gone = client_gone && client_gone(user);
        if (gone) {
            srv_job_cancel(sc, job);
            return -1;
        }
        pthread_mutex_lock(&sc->mu);
    }
    take_news_locked(job, news);
    pthread_mutex_unlock(&sc->mu);
    if (!news->text) {
        srv_fail(&news->error, 500, "server_error", NULL, NULL, "out of memory");
        news->failed = news->done = true;
    }
    return 0;
}

void srv_news_free(srv_news *n) {
    free(n->text);
    n->text = NULL;
}

/* ------------------------------------------------------------ a slot running a job */

/* Cache rows after the prompt, and what they would be without compression
 * (sliding-window layers are never pressed: the same in both). */
static void cache_rows(const pkv_session *s, int n_prompt, int64_t *rows, int64_t *rows_full) {
    pkv_model_info info;
    pkv_model_get_info(pkv_session_model(s), &info);
    *rows = *rows_full = 0;
    for (int l = 0; l < pkv_session_n_layers(s); l++) {
        int64_t layer_rows = 0;
        for (int h = 0; h < pkv_session_n_heads(s, l); h++) layer_rows += pkv_session_head_rows(s, l, h);
        *rows += layer_rows;
        *rows_full += pkv_session_layer_is_full(s, l) ? (int64_t)info.n_head_kv * n_prompt : layer_rows;
    }
}

/* Records the state after the prompt: usage fields and the slot's cache. */
static void after_prefill(srv_slot *slot, srv_job *job, double seconds) {
    srv_sched *sc = slot->sc;
    pkv_session *s = slot->session;
    int64_t rows, rows_full;
    int n_prompt = job->in.prompt.prompt.n_tokens;
    cache_rows(s, n_prompt, &rows, &rows_full);
    int64_t bytes = (int64_t)pkv_session_cache_bytes(s);
    int64_t full = bytes + (rows_full - rows) * (int64_t)job->in.row_bytes;
    pthread_mutex_lock(&sc->mu);
    job->prefill_seconds = seconds;
    job->usage.kv_rows = rows;
    job->usage.kv_rows_full = rows_full;
    job->usage.kv_bytes = bytes;
    job->usage.kv_bytes_full = full;
    slot->cache_bytes = (uint64_t)bytes;
    slot->saved_bytes = full > bytes ? (uint64_t)(full - bytes) : 0;
    sc->m.prompt_tokens += (uint64_t)n_prompt;
    sc->m.prefill_seconds += seconds;
    if (job->in.compress) {
        sc->m.compressed_requests++;
        sc->m.compression_saved_bytes += slot->saved_bytes;
    }
    pthread_mutex_unlock(&sc->mu);
}

/* The engine's events: the prompt read (the usage recorded), then the
 * released text of each token goes to the job; false when the client went
 * away or the server stops. */
typedef struct {
    srv_slot *slot;
    srv_job *job;
    double t_start; /* the prefill's start */
} publisher;

static void publish_prefilled(void *user, const pkv_request_stats *stats) {
    publisher *pb = user;
    after_prefill(pb->slot, pb->job, pkv_now_seconds() - pb->t_start);
}

static bool publish_token(void *user, const pkv_token_event *ev) {
    publisher *pb = user;
    srv_sched *sc = pb->slot->sc;
    srv_job *job = pb->job;
    uint64_t bytes = pkv_session_cache_bytes(pb->slot->session);
    pthread_mutex_lock(&sc->mu);
    bool go_on = !job->cancelled;
    if (go_on && ev->text_len) {
        srv_text *t = &job->out;
        if (t->cap - t->ready < ev->text_len + 1) {
            size_t cap = t->cap ? t->cap : 256;
            while (cap - t->ready < ev->text_len + 1) cap *= 2;
            char *p = realloc(t->text, cap);
            if (!p) {
                job->failed = true;
                srv_fail(&job->error, 500, "server_error", NULL, NULL, "out of memory for the generated text");
                go_on = false;
            } else {
                t->text = p;
                t->cap = cap;
            }
        }
        if (go_on) {
            memcpy(t->text + t->ready, ev->text, ev->text_len);
            t->ready += ev->text_len;
            t->text[t->ready] = '\0';
        }
    }
    if (go_on && ev->token >= 0 && !ev->end_of_generation) {
        job->usage.completion_tokens++;
        sc->m.completion_tokens++;
    }
    pb->slot->cache_bytes = bytes;
    pthread_cond_broadcast(&job->cv);
    pthread_mutex_unlock(&sc->mu);
    return go_on;
}

static void fail_job(srv_slot *slot, srv_job *job, const pkv_error *err) {
    srv_sched *sc = slot->sc;
    pthread_mutex_lock(&sc->mu);
    if (!job->cancelled) {
        job->failed = true;
        if (err->code == PKV_ERR_LIMIT || err->code == PKV_ERR_ARG)
            srv_bad(&job->error, "invalid_value", NULL, "%s", err->msg);
        else
            srv_fail(&job->error, 500, "server_error", NULL, NULL, "%s", err->msg);
    }
    pthread_mutex_unlock(&sc->mu);
}

static const char *finish_reason(pkv_finish f) {
    switch (f) {
    case PKV_FINISH_END:
    case PKV_FINISH_STOP: return "stop";
    case PKV_FINISH_LENGTH:
    case PKV_FINISH_CONTEXT: return "length"; /* the context is full */
    default: return NULL;
    }
}

/* A context request: the context prefilled and pressed, then copied into
 * the store (persisted there); nothing is generated. */
static void run_store_job(srv_slot *slot, srv_job *job) {
    srv_sched *sc = slot->sc;
    double t0 = pkv_now_seconds();
    pkv_request_stats st = {0};
    pkv_error err;
    if (sc->decoder) srv_turn_take(&sc->turn);
    int prc = pkv_request_prefill_compressed(slot->session, &job->in.req, &job->in.prompt, NULL, &st, &err);
    if (sc->decoder) srv_turn_give(&sc->turn);
    if (prc) {
        if (err.code != PKV_ERR_INTERRUPTED) fail_job(slot, job, &err);
        return;
    }
    double seconds = pkv_now_seconds() - t0;
    srv_context *made = NULL;
    srv_error e;
    int rc = srv_store_add(sc->opts.store, slot->session, job->in.chat, job->in.press_text, seconds, sc->opts.session,
                           &made, &e);
    pthread_mutex_lock(&sc->mu);
    job->prefill_seconds = seconds;
    sc->m.prompt_tokens += (uint64_t)job->in.prompt.n_compressed;
    sc->m.prefill_seconds += seconds;
    if (job->in.compress) sc->m.compressed_requests++;
    if (rc) {
        job->failed = true;
        job->error = e;
    } else {
        job->made = made;
        job->finish_reason = "stop";
        if (job->in.compress) sc->m.compression_saved_bytes += made->bytes_full - made->bytes;
    }
    pthread_mutex_unlock(&sc->mu);
}

/* The generation of a prefilled request: with the other generating requests
 * in the decoder's batch, or alone on this slot. */
static int generate(srv_sched *sc, pkv_session *s, const pkv_request *req, pkv_request_stats *st, pkv_error *err) {
    pkv_generation *g = pkv_generation_new(s, req, err);
    if (!g) return -1;
    int rc;
    if (sc->decoder) {
        rc = srv_decoder_run(sc->decoder, g, err);
    } else {
        while ((rc = pkv_generation_step(&g, 1, err)) > 0) {}
    }
    pkv_generation_stats(g, st);
    pkv_generation_free(g);
    return rc < 0 ? -1 : 0;
}

/* The request, run by the engine: usage recorded once the prompt is read,
 * the text streamed to the job, the outcome recorded. */
static void run_job(srv_slot *slot, srv_job *job) {
    if (job->in.store) {
        run_store_job(slot, job);
        return;
    }
    publisher pb = {slot, job, pkv_now_seconds()};
    pkv_request req = job->in.req;
    req.on_prefilled = publish_prefilled;
    req.on_token = publish_token;
    req.user = &pb;
    pkv_request_stats st = {0};
    pkv_error err;
    srv_sched *sc = slot->sc;
    if (sc->decoder) srv_turn_take(&sc->turn); /* the prefill's chunks take turns with the decode steps */
    int rc = pkv_request_prefill_all(slot->session, &req, &job->in.prompt, job->from ? job->from->session : NULL, &st,
                                     &err);
    if (sc->decoder) srv_turn_give(&sc->turn);
    if (rc == 0) rc = generate(sc, slot->session, &req, &st, &err);
    if (rc && err.code != PKV_ERR_INTERRUPTED) fail_job(slot, job, &err);
    if (!st.prefilled) return;
    pthread_mutex_lock(&sc->mu);
    /* no finite logit: a 500 without a finish reason; a failed step otherwise ends with "length" */
    const char *finish = rc ? (err.code == PKV_ERR_NUMERIC ? NULL : "length") : finish_reason(st.finish);
    if (finish && !job->finish_reason) job->finish_reason = finish;
    job->decode_seconds = st.decode_seconds;
    job->n_decoded = st.n_decoded;
    sc->m.decode_seconds += st.decode_seconds;
    sc->m.decoded_tokens += (uint64_t)st.n_decoded;
    pthread_mutex_unlock(&sc->mu);
}

/* The first queued job, when its memory fits. FIFO: a large request is not
 * overtaken by smaller ones forever. */
static srv_job *admit_locked(srv_sched *sc) {
    if (sc->q_len == 0) return NULL;
    srv_job *job = sc->queue[sc->q_head];
    if (sc->mem_reserved + job->in.cache_bytes_max > sc->opts.mem_limit) {
        if (!job->waited_for_memory) sc->m.memory_waits++;
        job->waited_for_memory = true;
        return NULL;
    }
    sc->q_head = (sc->q_head + 1) % sc->opts.queue_cap;
    sc->q_len--;
    sc->mem_reserved += job->in.cache_bytes_max;
    return job; /* the queue's reference passes to the slot */
}

static void *slot_main(void *arg) {
    srv_slot *slot = arg;
    srv_sched *sc = slot->sc;
    pthread_mutex_lock(&sc->mu);
    for (;;) {
        srv_job *job = sc->stopping ? NULL : admit_locked(sc);
        if (!job) {
            if (sc->stopping) break;
            pthread_cond_wait(&sc->work_cv, &sc->mu);
            continue;
        }
        job->state = JOB_RUNNING;
        job->slot = slot->index;
        job->t_start = pkv_now_seconds();
        slot->job = job;
        pthread_mutex_unlock(&sc->mu);

        run_job(slot, job);

        pthread_mutex_lock(&sc->mu);
        pkv_session_reset(slot->session); /* frees the cache; clears an interrupt (made under the lock) */
        slot->job = NULL;
        slot->cache_bytes = slot->saved_bytes = 0;
        sc->mem_reserved -= job->in.cache_bytes_max;
        job_done_locked(job);
        job_unref_locked(sc, job);
        pthread_cond_broadcast(&sc->work_cv); /* memory was returned */
    }
    pthread_mutex_unlock(&sc->mu);
    return NULL;
}

/* ------------------------------------------------------------ the scheduler */

int srv_sched_start(srv_sched *sc, pkv_model *model, const srv_sched_opts *opts, pkv_error *err) {
    memset(sc, 0, sizeof *sc);
    srv_turn_init(&sc->turn);
    sc->model = model;
    sc->opts = *opts;
    sc->m.n_slots = opts->n_slots;
    sc->m.mem_limit = opts->mem_limit;
    pthread_mutex_init(&sc->mu, NULL);
    pthread_cond_init(&sc->work_cv, NULL);
    sc->slots = calloc((size_t)opts->n_slots, sizeof *sc->slots);
    sc->queue = calloc((size_t)opts->queue_cap, sizeof *sc->queue);
    if (!sc->slots || !sc->queue) {
        srv_sched_stop(sc);
        err->code = PKV_ERR_NOMEM;
        snprintf(err->msg, sizeof err->msg, "out of memory for %d slots", opts->n_slots);
        return -1;
    }
    for (int i = 0; i < opts->n_slots; i++) {
        srv_slot *slot = &sc->slots[i];
        pkv_session_opts so = opts->session;
        so.n_threads = opts->threads_per_slot;
        if (opts->batch_decode) {
            so.between_chunks = srv_turn_yield;
            so.between_chunks_user = &sc->turn;
        }
        slot->sc = sc;
        slot->index = i;
        slot->session = pkv_session_new(model, &so, err);
        if (!slot->session) {
            srv_sched_stop(sc);
            return -1;
        }
    }
    if (opts->batch_decode && !(sc->decoder = srv_decoder_start(model, opts->threads_per_slot, &sc->turn, err))) {
        srv_sched_stop(sc);
        return -1;
    }
    for (int i = 0; i < opts->n_slots; i++) {
        int rc = pthread_create(&sc->slots[i].thread, NULL, slot_main, &sc->slots[i]);
        if (rc) {
            srv_sched_stop(sc);
            err->code = PKV_ERR_INTERNAL;
            snprintf(err->msg, sizeof err->msg, "cannot start slot thread %d: %s", i, strerror(rc));
            return -1;
        }
        sc->n_started++;
    }
    return 0;
}

void srv_sched_cancel_all(srv_sched *sc) {
    pthread_mutex_lock(&sc->mu);
    while (sc->q_len > 0) {
        srv_job *job = sc->queue[sc->q_head];
        job->cancelled = job->failed = true;
        srv_fail(&job->error, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        job_done_locked(job);
        queue_remove_locked(sc, job);
    }
    for (int i = 0; sc->slots && i < sc->opts.n_slots; i++) {
        srv_job *job = sc->slots[i].job;
        if (job && !job->cancelled) {
            job->cancelled = job->failed = true;
            srv_fail(&job->error, 503, "server_error", "shutting_down", NULL,
                     "the server is shutting down; the request was stopped");
            pkv_session_interrupt(sc->slots[i].session);
        }
    }
    pthread_mutex_unlock(&sc->mu);
}

void srv_sched_stop(srv_sched *sc) {
    srv_sched_cancel_all(sc);
    pthread_mutex_lock(&sc->mu);
    sc->stopping = true;
    pthread_cond_broadcast(&sc->work_cv);
    pthread_mutex_unlock(&sc->mu);
    for (int i = 0; i < sc->n_started; i++) pthread_join(sc->slots[i].thread, NULL);
    srv_decoder_stop(sc->decoder); /* after the slots: no stream is left */
    srv_turn_destroy(&sc->turn);
    for (int i = 0; sc->slots && i < sc->opts.n_slots; i++) pkv_session_free(sc->slots[i].session);
    free(sc->slots);
    free(sc->queue);
    pthread_cond_destroy(&sc->work_cv);
    pthread_mutex_destroy(&sc->mu);
    memset(sc, 0, sizeof *sc);
}

void srv_sched_set_draining(srv_sched *sc) {
    pthread_mutex_lock(&sc->mu);
    sc->draining = true;
    pthread_mutex_unlock(&sc->mu);
}

bool srv_sched_idle(srv_sched *sc) {
    pthread_mutex_lock(&sc->mu);
    bool idle = sc->q_len == 0;
    for (int i = 0; i < sc->opts.n_slots; i++) idle = idle && !sc->slots[i].job;
    pthread_mutex_unlock(&sc->mu);
    return idle;
}

static int status_class(int status) {
    if (status >= 200 && status < 300) return 0;
    switch (status) {
    case 400: return 1;
    case 413: return 2;
    case 429: return 3;
    case 503: return 4;
    default: return 5;
    }
}

void srv_sched_count_response(srv_sched *sc, int endpoint, int status) {
    pthread_mutex_lock(&sc->mu);
    if (endpoint == SRV_COMPLETION || endpoint == SRV_CHAT || endpoint == SRV_CONTEXT)
        sc->m.requests_total[endpoint][status_class(status)]++;
    else sc->m.other_requests++;
    pthread_mutex_unlock(&sc->mu);
}

void srv_sched_metrics(srv_sched *sc, srv_metrics *out) {
    pthread_mutex_lock(&sc->mu);
    *out = sc->m;
    out->queue_length = sc->q_len;
    out->mem_reserved = sc->mem_reserved;
    out->slots_busy = 0;
    out->cache_bytes_in_use = out->cache_bytes_saved = 0;
    for (int i = 0; i < sc->opts.n_slots; i++) {
        out->slots_busy += sc->slots[i].job != NULL;
        out->cache_bytes_in_use += sc->slots[i].cache_bytes;
        out->cache_bytes_saved += sc->slots[i].saved_bytes;
    }
    pthread_mutex_unlock(&sc->mu);
    if (sc->decoder) srv_decoder_counts(sc->decoder, &out->batch_steps, &out->batch_rows);
    if (sc->opts.store) srv_store_get_stats(sc->opts.store, &out->store);
}
