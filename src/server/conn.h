/* What the HTTP side's files share (server.c, ctx_routes.c): the server,
 * one HTTP request, and the helpers that answer it (conn.c). */
#ifndef PKV_SERVER_CONN_H
#define PKV_SERVER_CONN_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>

#include "contexts.h"
#include "gate.h"
#include "prompt.h"
#include "request.h"
#include "response.h"
#include "sched.h"

/* server.h's options, by name only: server.h is the entry point above this
 * header (server.c includes both), so this one does not include it. */
typedef struct pkv_server_opts pkv_server_opts;

typedef struct {
    const pkv_server_opts *opts;
    pkv_model *model;
    srv_sched sc;
    srv_store store;
    srv_limits lim;
    char model_id[256];
    long long created;
    struct MHD_Daemon *daemon;
    srv_gate *gate;
    int port;        /* the one bound */
    pthread_mutex_t mu;
    int active;      /* completion requests not yet finished (guarded by mu) */
    bool draining;   /* guarded by mu */
} server;

enum { ROUTE_OTHER = -1 };

/* One HTTP request (MHD's per-request context). */
typedef struct {
    server *srv;
    struct MHD_Connection *conn;
    int fd;
    int endpoint;          /* SRV_COMPLETION, SRV_CHAT, SRV_CONTEXT or ROUTE_OTHER */
    const char *allow;     /* the Allow header of a 405, when not the endpoint's one method */
    char method[8];
    char *url;
    double t_start;
    char *body;
    size_t len, cap;
    bool responded;        /* a response is queued */
    int status;
    bool counted_active;
    srv_job *job;
    /* streaming */
    srv_resp_meta meta;
    char id[48];
    bool include_usage, role_sent, stream_over;
    char *pending;         /* events formatted, not yet handed to MHD */
    size_t pending_len, pending_off;
    int prompt_tokens, completion_tokens;
    char press_desc[160];
} request;

/* The server is draining after SIGTERM. */
bool is_draining(server *srv);
/* The peer closed its side (or the socket failed): nobody will read the answer. */
bool client_gone(void *user);
/* Responses: a body of a content type (taken when must_free), a JSON body
 * (taken; NULL: out of memory), an error, a formatted error (conn.c). */
enum MHD_Result queue_text(request *r, int status, const char *content_type, const char *body, bool must_free);
enum MHD_Result queue_json(request *r, int status, char *json);
enum MHD_Result queue_error(request *r, const srv_error *e);
enum MHD_Result queue_fail(request *r, int status, const char *type, const char *code, const char *fmt,
                           const char *arg);

/* /v1/contexts and /v1/contexts/{id} (ctx_routes.c). */
enum MHD_Result srv_contexts_route(request *r);

#endif
