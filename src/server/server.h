/* promptkv serve: an OpenAI-compatible HTTP server (libmicrohttpd, jansson)
 * over pkv_session, with per-request KV-cache compression. The entry point
 * for the CLI; the rest of src/server/ is internal to it. */
#ifndef PKV_SERVER_H
#define PKV_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "promptkv.h"

typedef struct pkv_server_opts {
    const char *host;          /* address to bind, e.g. 127.0.0.1 */
    int port;                  /* 0: any free port (printed) */
    const char *model_id;      /* the name /v1/models lists */
    int n_slots;               /* requests decoded in parallel */
    bool no_batch;             /* each slot decodes alone (default: one batched step for all, docs/server.md) */
    int threads_per_slot;      /* <= 0: the CPUs shared out among the slots */
    int n_ctx;                 /* context per slot (prompt + completion) */
    int n_batch;               /* prefill chunk */
    pkv_cache_type cache_type_k; /* how the cache stores keys and values */
    pkv_cache_type cache_type_v;
    pkv_residual_type residual_type; /* how a long prompt's prefill keeps its residual stream (default f32) */
    const char *residual_spill_dir;  /* and where (pkv_session_opts; NULL: in memory) */
    uint64_t kv_mem;           /* KV-cache bytes all running requests may reserve */
    int queue_cap;             /* requests that may wait for a slot */
    double queue_timeout;      /* seconds one may wait */
    size_t max_body;           /* request body bytes */
    unsigned idle_timeout;     /* seconds a connection may stay silent */
    double body_timeout;       /* seconds a client may take to send its request */
    int max_connections;
    int max_tokens;            /* the most a request may ask to generate */
    int default_max_tokens;    /* completions that do not say */
    double drain_timeout;      /* seconds SIGTERM waits for running requests */
    bool log_requests;         /* one line per request on stderr */
    /* the press of requests without kv_compression */
    const char *press;
    const char *const *press_keys;
    const char *const *press_values;
    int n_press_opts;
    bool protect_system;
    /* stored contexts (docs/server.md "Stored contexts") */
    uint64_t ctx_mem;          /* bytes all stored contexts may hold */
    const char *ctx_dir;       /* NULL: not persisted; else saved there and reloaded at start */
} pkv_server_opts;

void pkv_server_opts_default(pkv_server_opts *opts);

/* Serves until SIGTERM or SIGINT, then stops accepting, lets running
 * requests finish (up to drain_timeout) and returns 0. The model stays the
 * caller's. */
int pkv_server_run(pkv_model *model, const pkv_server_opts *opts, pkv_error *err);

#endif
