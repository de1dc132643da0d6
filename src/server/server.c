/* The HTTP side: the front door (gate.c) reads and checks each request and
 * hands it to libmicrohttpd, with a thread per connection (a connection
 * waits for its request's text, so blocking there is the simple, bounded
 * design); here: routing, bodies, responses whole or streamed as server-sent
 * events, client disconnects, and the SIGTERM drain. */
#include "server.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "contexts.h"
#include "gate.h"
#include "metrics.h"
#include "prompt.h"
#include "request.h"
#include "response.h"
#include "sched.h"

void pkv_server_opts_default(pkv_server_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->n_slots = 2;
    o->n_batch = 512;
    o->kv_mem = (uint64_t)4 << 30;
    o->queue_cap = 64;
    o->queue_timeout = 300.0;
    o->max_body = (size_t)8 << 20;
    o->idle_timeout = 30;
    o->body_timeout = 30.0;
    o->max_connections = 128;
    o->max_tokens = 4096;
    o->default_max_tokens = 16; /* OpenAI's default for completions */
    o->drain_timeout = 60.0;
    o->log_requests = true;
    o->ctx_mem = (uint64_t)1 << 30;
}


/* ------------------------------------------------------------ small helpers */

static void random_id(char *out, size_t len, const char *prefix) {
    unsigned char b[12];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        memcpy(b, &ts, sizeof b < sizeof ts ? sizeof b : sizeof ts);
    }
    int n = snprintf(out, len, "%s", prefix);
    for (size_t i = 0; i < sizeof b && (size_t)n + 2 < len; i++) n += snprintf(out + n, len - (size_t)n, "%02x", b[i]);
}

/* ------------------------------------------------------------ GET endpoints */

static json_t *model_object(const server *srv) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", srv->model_id, "object", "model", "created",
                     (json_int_t)srv->created, "owned_by", "promptkv");
}

static enum MHD_Result get_models(request *r) {
    json_t *list = json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(r->srv));
    char *s = list ? json_dumps(list, JSON_COMPACT) : NULL;
    json_decref(list);
    return queue_json(r, 200, s);
}

static enum MHD_Result get_model(request *r, const char *id) {
    if (strcmp(id, r->srv->model_id) != 0)
        return queue_fail(r, 404, "invalid_request_error", "model_not_found", "The model '%s' does not exist", id);
    json_t *m = model_object(r->srv);
    char *s = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    return queue_json(r, 200, s);
}

static enum MHD_Result get_health(request *r) {
    bool draining = is_draining(r->srv);
    char *s = strdup(draining ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}");
    return queue_json(r, draining ? 503 : 200, s);
}

static enum MHD_Result get_metrics(request *r) {
    srv_metrics m;
    srv_sched_metrics(&r->srv->sc, &m);
    char *text = srv_metrics_text(&m);
    if (!text) return queue_json(r, 500, NULL);
    return queue_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, true);
}

/* ------------------------------------------------------------ completions */

static void remember_news(request *r, const srv_news *n) {
    r->prompt_tokens = n->usage.prompt_tokens;
    r->completion_tokens = n->usage.completion_tokens;
    snprintf(r->press_desc, sizeof r->press_desc, "%s", n->press_desc);
}

static enum MHD_Result finish_whole(request *r, srv_news *first) {
    /* the whole text, then one response */
    char *text = NULL;
    size_t len = 0;
    srv_news n = *first;
    for (;;) {
        char *t = realloc(text, len + n.len + 1);
        if (!t) {
            srv_news_free(&n);
            free(text);
            return queue_json(r, 500, NULL);
        }
        text = t;
        if (n.len) memcpy(text + len, n.text, n.len);
        len += n.len;
        text[len] = '\0';
        srv_news_free(&n);
        if (n.done) break;
        if (srv_job_next(&r->srv->sc, r->job, client_gone, r, &n)) {
            free(text);
            return MHD_NO; /* the client left: close */
        }
    }
    remember_news(r, &n);
    enum MHD_Result rc;
    if (n.failed) {
        rc = queue_error(r, &n.error);
    } else {
        n.usage.press = n.press_desc;
        rc = queue_json(r, 200, srv_response_body(&r->meta, text, len, n.finish_reason, &n.usage));
    }
    free(text);
    return rc;
}

/* Appends an event (taken) to the pending output. */
static bool pend(request *r, char *event) {
    if (!event) return false;
    size_t n = strlen(event);
    char *p = realloc(r->pending, r->pending_len + n + 1);
    if (!p) {
        free(event);
        return false;
    }
    r->pending = p;
    memcpy(r->pending + r->pending_len, event, n + 1);
    r->pending_len += n;
    free(event);
    return true;
}

/* Turns news into events: text chunks; at the end the finishing chunk, the
 * usage chunk when asked, and [DONE] (or an error event). */
static bool pend_news(request *r, srv_news *n) {
    bool ok = true;
    if (r->meta.endpoint == SRV_CHAT && !r->role_sent) {
        ok = pend(r, srv_chunk_event(&r->meta, "", 0, true, NULL, r->include_usage));
        r->role_sent = true;
    }
    if (ok && n->len > 0) ok = pend(r, srv_chunk_event(&r->meta, n->text, n->len, false, NULL, r->include_usage));
    if (ok && n->done) {
        remember_news(r, n);
        if (n->failed) {
            ok = pend(r, srv_error_event(&n->error));
        } else {
            ok = pend(r, srv_chunk_event(&r->meta, "", 0, false, n->finish_reason, r->include_usage));
            n->usage.press = n->press_desc;
            if (ok && r->include_usage) ok = pend(r, srv_usage_event(&r->meta, &n->usage));
        }
        if (ok) ok = pend(r, strdup("data: [DONE]\n\n"));
        r->stream_over = true;
    }
    srv_news_free(n);
    return ok;
}

/* MHD asks for the next bytes of a stream; blocks until there are some. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    request *r = cls;
    while (r->pending_off == r->pending_len) {
        r->pending_off = r->pending_len = 0;
        if (r->stream_over) return MHD_CONTENT_READER_END_OF_STREAM;
        srv_news n;
        if (srv_job_next(&r->srv->sc, r->job, client_gone, r, &n)) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (!pend_news(r, &n)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t k = r->pending_len - r->pending_off < max ? r->pending_len - r->pending_off : max;
    memcpy(buf, r->pending + r->pending_off, k);
    r->pending_off += k;
    return (ssize_t)k;
}

static enum MHD_Result start_stream(request *r, srv_news *first) {
    if (first->done && first->failed) {
        enum MHD_Result rc = queue_error(r, &first->error);
        srv_news_free(first);
        return rc;
    }
    if (!pend_news(r, first)) return queue_json(r, 500, NULL);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, r, NULL);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    if (is_draining(r->srv)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    r->responded = true;
    r->status = 200;
    srv_sched_count_response(&r->srv->sc, r->endpoint, 200);
    return rc;
}

static enum MHD_Result post_completion(request *r) {
    server *srv = r->srv;
    srv_error e;
    srv_request req;
    if (srv_request_parse(r->body ? r->body : "", r->len, (srv_endpoint)r->endpoint, &req, &e))
        return queue_error(r, &e);
    srv_prepared prep;
    srv_context *from = NULL;
    if (req.context_id[0]) {
        /* a stored context named: its cache, then the request's prompt (docs/server.md "Stored contexts") */
        from = srv_store_get(&srv->store, req.context_id);
        if (!from) {
            srv_fail(&e, 404, "invalid_request_error", "context_not_found", "context_id", "no stored context '%s'",
                     req.context_id);
            srv_request_free(&req);
            return queue_error(r, &e);
        }
        int n_state;
        const int32_t *state = pkv_session_tokens(from->session, &n_state);
        if (srv_prepare_continuation(srv->model, &srv->lim, &req, state, n_state, from->chat, from->bytes, from->press,
                                     &prep, &e)) {
            srv_store_release(&srv->store, from);
            srv_request_free(&req);
            return queue_error(r, &e);
        }
    } else {
        if (srv_prepare(srv->model, &srv->lim, &req, &prep, &e)) {
            srv_request_free(&req);
            return queue_error(r, &e);
        }
        /* automatic reuse: a prompt that begins with a stored context's tokens starts from it, unless the
         * request asks for a press of its own */
        if (!req.has_press) {
            from = srv_store_find_prefix(&srv->store, prep.prompt.prompt.tokens, prep.prompt.prompt.n_tokens,
                                         req.endpoint == SRV_CHAT);
            if (from && srv_prepared_reuse(srv->model, &srv->lim, &prep, from->n_tokens, from->bytes, from->press)) {
                srv_store_release(&srv->store, from);
                from = NULL;
            }
        }
    }
    bool stream = req.stream;
    r->include_usage = req.include_usage;
    r->prompt_tokens = prep.prompt.prompt.n_tokens;
    snprintf(r->press_desc, sizeof r->press_desc, "%s", prep.press_desc);
    bool by_prefix = !req.context_id[0];
    r->job = srv_job_new(&req, &prep);
    if (!r->job) {
        srv_store_release(&srv->store, from);
        return queue_json(r, 500, NULL);
    }
    if (from) {
        r->job->from = from; /* released with the job */
        r->job->usage.context_tokens = from->n_tokens;
        snprintf(r->job->usage.context_id, sizeof r->job->usage.context_id, "%s", from->id);
        srv_store_count_use(&srv->store, by_prefix, from->n_tokens);
    }
    if (srv_submit(&srv->sc, r->job, &e)) return queue_error(r, &e);

    random_id(r->id, sizeof r->id, r->endpoint == SRV_CHAT ? "chatcmpl-" : "cmpl-");
    r->meta = (srv_resp_meta){(srv_endpoint)r->endpoint, r->id, (long long)time(NULL), srv->model_id};
    /* wait for the first text (after the prompt is read) before answering, so
     * that a failure or a timeout in the queue still gets its status code */
    srv_news first;
    if (srv_job_next(&srv->sc, r->job, client_gone, r, &first)) return MHD_NO;
    return stream ? start_stream(r, &first) : finish_whole(r, &first);
}

/* ------------------------------------------------------------ routing */

static int route_endpoint(const char *url) {
    if (!strcmp(url, "/v1/completions")) return SRV_COMPLETION;
    if (!strcmp(url, "/v1/chat/completions")) return SRV_CHAT;
    if (!strcmp(url, "/v1/contexts") || !strncmp(url, "/v1/contexts/", 13)) return SRV_CONTEXT;
    return ROUTE_OTHER;
}

static enum MHD_Result dispatch(request *r) {
    const char *url = r->url, *method = r->method;
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (r->endpoint == SRV_CONTEXT) return srv_contexts_route(r);
    if (r->endpoint != ROUTE_OTHER) {
        if (strcmp(method, "POST") != 0)
            return queue_fail(r, 405, "invalid_request_error", "method_not_allowed", "%s needs POST", url);
        if (is_draining(r->srv))
            return queue_fail(r, 503, "server_error", "shutting_down", "the server is shutting down%s", "");
        return post_completion(r);
    }
    bool known = !strcmp(url, "/health") || !strcmp(url, "/v1/models") || !strcmp(url, "/metrics") ||
                 !strncmp(url, "/v1/models/", 11);
    if (known && !get) return queue_fail(r, 405, "invalid_request_error", "method_not_allowed", "%s needs GET", url);
    if (!strcmp(url, "/health")) return get_health(r);
    if (!strcmp(url, "/v1/models")) return get_models(r);
    if (!strncmp(url, "/v1/models/", 11)) return get_model(r, url + 11);
    if (!strcmp(url, "/metrics")) return get_metrics(r);
    return queue_fail(r, 404, "invalid_request_error", "unknown_url", "Unknown request URL: %s", url);
}

/* Called first with the headers, then with each piece of the body, then
 * once more with none (MHD's access handler protocol). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *srv = cls;
    request *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r || !(r->url = strdup(url))) {
            free(r);
            return MHD_NO;
        }
        *con_cls = r;
        r->srv = srv;
        r->conn = conn;
        r->t_start = pkv_now_seconds();
        r->endpoint = route_endpoint(url);
        snprintf(r->method, sizeof r->method, "%s", method);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        r->fd = ci ? ci->connect_fd : -1;
        if (r->endpoint != ROUTE_OTHER) {
            pthread_mutex_lock(&srv->mu);
            srv->active++;
            pthread_mutex_unlock(&srv->mu);
            r->counted_active = true;
        }
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        /* the gate has checked the framing, the limit and the timeouts: the
         * body arrives whole, with its Content-Length */
        if (r->len + n > srv->opts->max_body) return MHD_NO;
        if (r->len + n + 1 > r->cap) {
            size_t cap = r->cap ? r->cap : 4096;
            while (cap < r->len + n + 1) cap *= 2;
            char *b = realloc(r->body, cap);
            if (!b) return MHD_NO;
            r->body = b;
            r->cap = cap;
        }
        memcpy(r->body + r->len, upload, n);
        r->len += n;
        r->body[r->len] = '\0';
        return MHD_YES;
    }
    if (r->responded) return MHD_YES;
    return dispatch(r);
}

static void log_request(const request *r) {
    double ms = (pkv_now_seconds() - r->t_start) * 1e3;
    char url[96], method[sizeof r->method]; /* the client's bytes: printable ASCII only in the log */
    snprintf(url, sizeof url, "%s", r->url);
    snprintf(method, sizeof method, "%s", r->method);
    for (char *p = url; *p; p++)
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) *p = '?';
    for (char *p = method; *p; p++)
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) *p = '?';
    if (r->endpoint == ROUTE_OTHER) {
        fprintf(stderr, "%s %s %d %.1f ms\n", method, url, r->status, ms);
        return;
    }
    fprintf(stderr, "%s %s %d prompt=%d completion=%d press=\"%s\" %.1f ms\n", method, url, r->status,
            r->prompt_tokens, r->completion_tokens, r->press_desc[0] ? r->press_desc : "-", ms);
}

/* The request is over (answered, failed or the client left): stop its job. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)conn;
    server *srv = cls;
    request *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    if (r->job) {
        srv_job_cancel(&srv->sc, r->job); /* a no-op when it is done */
        srv_job_release(&srv->sc, r->job);
    }
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && r->status == 200) r->status = 499; /* nginx's "client closed" */
    if (srv->opts->log_requests) log_request(r);
    if (r->counted_active) {
        pthread_mutex_lock(&srv->mu);
        srv->active--;
        pthread_mutex_unlock(&srv->mu);
    }
    free(r->url);
    free(r->body);
    free(r->pending);
    free(r);
}

/* ------------------------------------------------------------ start, drain, stop */

static int resolve(const char *host, int port, struct sockaddr_storage *addr, pkv_error *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc) {
        err->code = PKV_ERR_ARG;
        snprintf(err->msg, sizeof err->msg, "cannot resolve host '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (addr->ss_family == AF_INET) ((struct sockaddr_in *)addr)->sin_port = htons((uint16_t)port);
    else ((struct sockaddr_in6 *)addr)->sin6_port = htons((uint16_t)port);
    return 0;
}

/* libmicrohttpd's own messages (a client that left mid-response, ...), marked as the server's. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = '\0';
    /* the gate's socket pairs are not TCP: MHD's TCP tuning fails on them, harmlessly */
    if (strstr(line, "TCP_NODELAY") || strstr(line, "TCP_CORK") || strstr(line, "push the data from buffers"))
        return;
    fprintf(stderr, "promptkv serve: http: %s\n", line);
}

static bool hand_over(void *user, int fd, const struct sockaddr *addr, socklen_t addr_len) {
    server *srv = user;
    return MHD_add_connection(srv->daemon, fd, addr, addr_len) == MHD_YES; /* MHD closes fd when it refuses */
}

/* A request the gate answered itself (a framing error): counted and logged as the others are. */
static void on_refused(void *user, const char *method, const char *target, int status) {
    server *srv = user;
    int endpoint = route_endpoint(target);
    srv_sched_count_response(&srv->sc, endpoint, status);
    if (!srv->opts->log_requests) return;
    char t[96], m[16];
    snprintf(t, sizeof t, "%s", target);
    snprintf(m, sizeof m, "%s", method);
    for (char *p = t; *p; p++)
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) *p = '?';
    fprintf(stderr, "%s %s %d (refused before the handler)\n", m, t, status);
}

static int listen_socket(server *srv, pkv_error *err) {
    struct sockaddr_storage addr;
    if (resolve(srv->opts->host, srv->opts->port, &addr, err)) return -1;
    socklen_t len = addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, len) || listen(fd, 128)) {
        if (fd >= 0) close(fd);
        err->code = PKV_ERR_IO;
        snprintf(err->msg, sizeof err->msg, "cannot listen on %s port %d (in use, or not an address of this machine?)",
                 srv->opts->host, srv->opts->port);
        return -1;
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;
    srv->port = srv->opts->port;
    if (getsockname(fd, (struct sockaddr *)&bound, &blen) == 0)
        srv->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                     : ((struct sockaddr_in *)&bound)->sin_port);
    return fd;
}

static int start_http(server *srv, pkv_error *err) {
    int fd = listen_socket(srv, err);
    if (fd < 0) return -1;
    /* no listening socket of its own: the gate hands it each checked request */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET;
    srv->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, srv,
                                   MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                                   MHD_OPTION_CONNECTION_TIMEOUT, srv->opts->idle_timeout,
                                   MHD_OPTION_CONNECTION_LIMIT, (unsigned)srv->opts->max_connections,
                                   MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                   MHD_OPTION_END);
    if (!srv->daemon) {
        close(fd);
        err->code = PKV_ERR_IO;
        snprintf(err->msg, sizeof err->msg, "cannot start the HTTP daemon");
        return -1;
    }
    srv_gate_opts go = {
        .listen_fd = fd,
        .max_body = srv->opts->max_body,
        .idle_timeout = srv->opts->idle_timeout,
        .body_timeout = srv->opts->body_timeout,
        .max_connections = srv->opts->max_connections,
        .hand_over = hand_over,
        .refused = on_refused,
        .user = srv,
    };
    srv->gate = srv_gate_start(&go, err);
    if (!srv->gate) {
        close(fd);
        MHD_stop_daemon(srv->daemon);
        return -1;
    }
    return 0;
}

/* After SIGTERM: no new connections, new requests on open ones get 503, the
 * running and queued ones finish (cancelled after drain_timeout, or at a
 * second signal). */
static void drain(server *srv, const sigset_t *signals) {
    pthread_mutex_lock(&srv->mu);
    srv->draining = true;
    pthread_mutex_unlock(&srv->mu);
    srv_sched_set_draining(&srv->sc);
    srv_gate_close_listener(srv->gate);
    double deadline = pkv_now_seconds() + srv->opts->drain_timeout;
    bool cancelled = false;
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        int active = srv->active;
        pthread_mutex_unlock(&srv->mu);
        if (active == 0 && srv_sched_idle(&srv->sc)) break;
        struct timespec tick = {0, 100 * 1000000L};
        int sig = sigtimedwait(signals, NULL, &tick);
        if (!cancelled && (sig > 0 || pkv_now_seconds() > deadline)) {
            fprintf(stderr, "promptkv serve: %s: stopping %d running requests\n",
                    sig > 0 ? "second signal" : "drain timeout", active);
            srv_sched_cancel_all(&srv->sc);
            cancelled = true;
            deadline = pkv_now_seconds() + 10.0; /* the streams' last events */
        } else if (cancelled && pkv_now_seconds() > deadline) {
            break;
        }
    }
}

static void setup_limits(server *srv) {
    const pkv_server_opts *o = srv->opts;
    srv->lim = (srv_limits){
        .n_ctx = o->n_ctx,
        .max_tokens = o->max_tokens,
        .default_max_tokens = o->default_max_tokens,
        .cache_type_k = o->cache_type_k,
        .cache_type_v = o->cache_type_v,
        .n_batch = o->n_batch > 0 ? o->n_batch : 512,
        .press = {o->press, o->press_keys, o->press_values, o->n_press_opts, o->protect_system},
    };
}

static int start_slots(server *srv, pkv_error *err) {
    const pkv_server_opts *o = srv->opts;
    srv_sched_opts so = {
        .n_slots = o->n_slots,
        .threads_per_slot = o->threads_per_slot,
        .mem_limit = o->kv_mem,
        .queue_cap = o->queue_cap,
        .queue_timeout = o->queue_timeout,
        .store = &srv->store,
        .batch_decode = !o->no_batch,
    };
    pkv_session_opts_default(&so.session);
    so.session.n_ctx = o->n_ctx;
    so.session.n_batch = o->n_batch;
    so.session.cache_type_k = o->cache_type_k;
    so.session.cache_type_v = o->cache_type_v;
    so.session.residual_type = o->residual_type;
    so.session.residual_spill_dir = o->residual_spill_dir;
    return srv_sched_start(&srv->sc, srv->model, &so, err);
}

static void describe_model_id(server *srv) {
    const char *id = srv->opts->model_id ? srv->opts->model_id : "model";
    /* the id goes into JSON strings: keep it valid UTF-8 and printable */
    size_t j = 0;
    for (size_t i = 0; id[i] && j + 1 < sizeof srv->model_id; i++)
        srv->model_id[j++] = (unsigned char)id[i] >= 0x20 && (unsigned char)id[i] < 0x7f ? id[i] : '_';
    srv->model_id[j] = '\0';
}

int pkv_server_run(pkv_model *model, const pkv_server_opts *opts, pkv_error *err) {
    server srv = {.opts = opts, .model = model, .created = (long long)time(NULL)};
    pthread_mutex_init(&srv.mu, NULL);
    describe_model_id(&srv);
    setup_limits(&srv);

    /* every thread started from here on inherits the blocked signals; this
     * thread takes SIGTERM and SIGINT with sigwait */
    sigset_t signals, old;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigset_t blocked = signals;
    sigaddset(&blocked, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &blocked, &old);

    int rc = -1;
    srv_store_init(&srv.store, opts->ctx_mem, opts->ctx_dir);
    if (start_slots(&srv, err)) goto out;
    if (opts->ctx_dir) {
        pkv_model_fingerprint(model); /* read the model file once now, not in the first request that saves */
        int n = srv_store_reload(&srv.store, model, &srv.sc.opts.session, err);
        if (n < 0) {
            srv_sched_stop(&srv.sc);
            goto out;
        }
        fprintf(stderr, "promptkv serve: --ctx-dir %s: %d stored contexts reloaded\n", opts->ctx_dir, n);
    }
    if (start_http(&srv, err)) {
        srv_sched_stop(&srv.sc);
        goto out;
    }
    fprintf(stderr, "promptkv serve: listening on http://%s:%d (model %s, %d slots, kv-mem %.0f MiB)\n", opts->host,
            srv.port, srv.model_id, opts->n_slots,
            (double)opts->kv_mem / 1048576.0);
    fflush(stderr);

    int sig = 0;
    sigwait(&signals, &sig);
    fprintf(stderr, "promptkv serve: %s: draining (no new requests; running ones finish)\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    drain(&srv, &signals);
    srv_gate_stop(srv.gate); /* ends the relays: what still runs in MHD sees its client gone */
    MHD_stop_daemon(srv.daemon);
    srv_sched_stop(&srv.sc);
    fprintf(stderr, "promptkv serve: stopped\n");
    rc = 0;
out:
    srv_store_free(&srv.store);
    /* a signal that came while the server stopped asked for what is done:
     * taken here, it does not kill the process once the mask is restored */
    struct timespec zero = {0, 0};
    while (sigtimedwait(&signals, NULL, &zero) > 0) {}
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_mutex_destroy(&srv.mu);
    return rc;
}
