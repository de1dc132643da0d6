/* The context store (docs/server.md "Stored contexts"): contexts prefilled
 * and compressed once, each a session of its own that requests copy from
 * (the stored session is only read, so a request never changes it), bounded
 * by a memory limit with the least recently used context out first,
 * persisted as saved caches (docs/cache-file.md) in a directory and reloaded
 * from it at start. One mutex guards the index; a context in use by a
 * request is held by a reference and freed by the last one. */
#ifndef PKV_SERVER_CONTEXTS_H
#define PKV_SERVER_CONTEXTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "promptkv.h"
#include "request.h"

enum { SRV_CTX_ID = 40 };

typedef struct srv_context {
    char id[SRV_CTX_ID];    /* "ctx-" and 24 hex digits */
    pkv_session *session;   /* the stored state; read-only once stored */
    bool chat;              /* made from messages: serves chat requests (else completions) */
    char press[512];        /* the press and its options, as text */
    int n_tokens;
    int64_t rows, rows_full;
    uint64_t bytes, bytes_full; /* the cache's keys, values and positions; without compression */
    uint64_t mem;           /* what it holds of the store's limit: cache allocation, tokens, logits */
    double seconds;         /* the prefill and press that made it (0 when reloaded) */
    long long created;      /* Unix seconds */
    /* guarded by the store's mutex */
    uint64_t last_used;
    int refs;               /* the store's (while indexed) and each request's */
} srv_context;

typedef struct {
    uint64_t count, mem_used, mem_limit;
    uint64_t created, deleted, evicted, reloaded, refused_too_large;
    uint64_t requests_by_id, requests_by_prefix, tokens_reused;
} srv_store_stats;

typedef struct {
    pthread_mutex_t mu;
    srv_context **items;
    int n, cap;
    uint64_t mem_limit;
    uint64_t tick;
    const char *dir;        /* NULL: in memory only */
    srv_store_stats stats;
} srv_store;

void srv_store_init(srv_store *st, uint64_t mem_limit, const char *dir);
/* Frees every context (no request may hold one any more). */
void srv_store_free(srv_store *st);

/* Loads dir's saved contexts (ctx-*.pkvc) into sessions of model with opts,
 * oldest first, so the limit keeps the newest; a file that does not load is
 * named in one line on stderr and left alone. The directory is made when
 * absent. Returns how many were loaded, or -1 (err) when the directory can
 * be neither read nor made. */
int srv_store_reload(srv_store *st, pkv_model *model, const pkv_session_opts *opts, pkv_error *err);

/* A new context from a session holding its state (copied: src goes on as
 * it was). Persisted when the store has a directory, then indexed, evicting
 * the least recently used contexts until it fits; refused with a 400
 * context_too_large when it cannot fit alone. On success *out holds a
 * reference for the caller. */
int srv_store_add(srv_store *st, const pkv_session *src, bool chat, const char *press, double seconds,
                  pkv_session_opts opts, srv_context **out, srv_error *e);

/* The context of an id with a reference for the caller (marked used), or NULL. */
srv_context *srv_store_get(srv_store *st, const char *id);
/* The longest context whose tokens begin tokens[0, n) and that serves
 * chat (or completions), with a reference, or NULL. */
srv_context *srv_store_find_prefix(srv_store *st, const int32_t *tokens, int n, bool chat);
void srv_store_release(srv_store *st, srv_context *c);
/* Counts a request that starts from a stored context. */
void srv_store_count_use(srv_store *st, bool by_prefix, int tokens);

/* Removes a context (and its file); false when the id is unknown. */
bool srv_store_delete(srv_store *st, const char *id);

/* Every context's id, most recently used first (malloc'd array of
 * referenced contexts; release each, then free the array). */
int srv_store_list(srv_store *st, srv_context ***out);

void srv_store_get_stats(srv_store *st, srv_store_stats *out);

#endif
