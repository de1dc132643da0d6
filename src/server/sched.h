/* Slots and admission. Each slot is a thread with its own pkv_session (all
 * sessions share the model) that runs one request at a time, so N requests
 * decode in parallel. A request enters a bounded FIFO queue; the first in
 * line starts when a slot is free and its KV-cache estimate fits in what the
 * running requests leave of the memory limit. The connection that made a
 * request reads its text as it is generated and can cancel it at any time
 * (its slot stops at the next layer boundary). One mutex guards all of it:
 * the critical sections are a few copies per generated token. */
#ifndef PKV_SERVER_SCHED_H
#define PKV_SERVER_SCHED_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/clock.h"
#include "contexts.h"
#include "decoder.h"
#include "turn.h"
#include "prompt.h"
#include "promptkv.h"
#include "request.h"
#include "response.h"

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE } srv_job_state;

typedef struct {
    char *text;
    size_t ready, cap; /* text[0, ready) */
} srv_text;

typedef struct srv_job {
    srv_request req;      /* owned; the engine request in `in` points into it */
    srv_prepared in;      /* owned */
    /* everything below is guarded by the scheduler's mutex */
    srv_job_state state;
    int slot;             /* while running */
    bool cancelled;       /* the client went away or the server is stopping */
    bool failed;          /* error holds why (nothing was generated, or the stream ends with it) */
    srv_error error;
    srv_text out;         /* text the engine released for the client (final) */
    size_t taken;         /* text the connection has taken so far */
    const char *finish_reason;
    srv_usage usage;
    double t_submit, t_start, t_end, prefill_seconds, decode_seconds;
    int n_decoded;
    bool waited_for_memory;
    pthread_cond_t cv;    /* news for the connection: text, usage or the end */
    int refs;             /* the connection's and the scheduler's */
    char press_desc[160];
    /* stored contexts: the one the request starts from (a reference, set
     * before submit), the one a context request made (a reference, set by
     * the slot) */
    srv_context *from;
    srv_context *made;
} srv_job;

typedef struct {
    int n_slots;
    int threads_per_slot;
    pkv_session_opts session;  /* n_threads is set per slot */
    uint64_t mem_limit;        /* bytes of KV cache all running requests may reserve */
    int queue_cap;             /* requests waiting for a slot */
    double queue_timeout;      /* seconds a request may wait */
    srv_store *store;          /* the context store: where context requests put what they make */
    bool batch_decode;         /* the generating requests decode as one batch (decoder.h), taking
                                  turns with prefill chunks (turn.h); every turn has threads_per_slot */
} srv_sched_opts;

/* Counters and gauges for /metrics. */
typedef struct {
    uint64_t requests_total[3][6]; /* [endpoint: completions, chat, contexts][status class: 2xx, 400, 413, 429, 503, other] */
    uint64_t prompt_tokens, completion_tokens, decoded_tokens;
    uint64_t batch_steps, batch_rows; /* batched decode steps, and the streams they stepped */
    double prefill_seconds, decode_seconds;
    uint64_t compressed_requests, compression_saved_bytes;
    uint64_t cancelled, rejected_queue_full, rejected_draining, queue_timeouts;
    uint64_t memory_waits;     /* requests that waited for memory with a slot free */
    uint64_t other_requests;
    int queue_length, slots_busy, n_slots;
    uint64_t cache_bytes_in_use, cache_bytes_saved, mem_reserved, mem_limit;
    srv_store_stats store;
} srv_metrics;

typedef struct srv_slot srv_slot;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* slots wait for work and memory */
    pkv_model *model;
    srv_sched_opts opts;
    srv_slot *slots;
    int n_started;
    srv_job **queue;        /* ring of queue_cap */
    int q_head, q_len;
    uint64_t mem_reserved;
    bool stopping;          /* slots exit */
    bool draining;          /* no new requests */
    srv_decoder *decoder;   /* with batch_decode */
    srv_turn turn;          /* with batch_decode: decode steps and prefill chunks take turns */
    srv_metrics m;
} srv_sched;

int srv_sched_start(srv_sched *sc, pkv_model *model, const srv_sched_opts *opts, pkv_error *err);
/* Stops the slots (cancelling what runs) and frees everything; the
 * connections must be gone. */
void srv_sched_stop(srv_sched *sc);

/* A job from a parsed request and its preparation (both moved in); NULL when
 * out of memory (then both are freed). refs: 1 (the caller's). */
srv_job *srv_job_new(srv_request *req, srv_prepared *in);
void srv_job_release(srv_sched *sc, srv_job *job);

/* Queues the job; -1 with e filled when the server cannot take it (too big
 * for the memory limit: 400; queue full: 429; draining: 503). */
int srv_submit(srv_sched *sc, srv_job *job, srv_error *e);

/* What srv_job_next returns: new text (malloc'd, may be empty), whether the
 * job is over (then finish_reason or error), the usage once known. */
typedef struct {
    char *text;
    size_t len;
    bool done;
    bool failed;
    srv_error error;
    const char *finish_reason;
    srv_usage usage;
    char press_desc[160];
} srv_news;

/* Waits for news of the job, asking client_gone(user) on entry and every
 * 100 ms of waiting; returns 0 with news, or -1 when the client went away
 * (the job is cancelled). */
int srv_job_next(srv_sched *sc, srv_job *job, bool (*client_gone)(void *user), void *user, srv_news *news);
void srv_news_free(srv_news *n);

/* The context a finished context request made (the reference passes to the caller), or NULL. */
srv_context *srv_job_take_made(srv_sched *sc, srv_job *job);

/* Cancels a job wherever it is (queued: removed; running: its slot is
 * interrupted). */
void srv_job_cancel(srv_sched *sc, srv_job *job);

void srv_sched_set_draining(srv_sched *sc);
/* True when no job is queued or running. */
bool srv_sched_idle(srv_sched *sc);
void srv_sched_cancel_all(srv_sched *sc);

/* Counts a response for /metrics (endpoint < 0: another path). */
void srv_sched_count_response(srv_sched *sc, int endpoint, int status);
void srv_sched_metrics(srv_sched *sc, srv_metrics *out);

#endif
