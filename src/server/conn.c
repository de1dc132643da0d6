/* The helpers every HTTP route answers with (conn.h): the drain flag, the
 * peer's disconnect, and queueing a response with the headers and counters
 * every response carries. */
#include "conn.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

bool is_draining(server *srv) {
    pthread_mutex_lock(&srv->mu);
    bool d = srv->draining;
    pthread_mutex_unlock(&srv->mu);
    return d;
}

bool client_gone(void *user) {
    request *r = user;
    if (r->fd < 0) return false;
    struct pollfd p = {.fd = r->fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

enum MHD_Result queue_text(request *r, int status, const char *content_type, const char *body, bool must_free) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), (void *)body, must_free ? MHD_RESPMEM_MUST_FREE
                                                                              : MHD_RESPMEM_MUST_COPY);
    if (!resp) {
        if (must_free) free((void *)body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (is_draining(r->srv)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (status == 405)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
                                r->allow ? r->allow : r->endpoint == ROUTE_OTHER ? "GET" : "POST");
    enum MHD_Result rc = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->responded = true;
    r->status = status;
    srv_sched_count_response(&r->srv->sc, r->endpoint, status);
    return rc;
}

enum MHD_Result queue_json(request *r, int status, char *json) {
    if (!json) return queue_text(r, 500, "application/json",
                                 "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                 "\"param\":null,\"code\":null}}", false);
    return queue_text(r, status, "application/json", json, true);
}

enum MHD_Result queue_error(request *r, const srv_error *e) { return queue_json(r, e->status, srv_error_body(e)); }

enum MHD_Result queue_fail(request *r, int status, const char *type, const char *code, const char *fmt,
                                  const char *arg) {
    srv_error e;
    srv_fail(&e, status, type, code, NULL, fmt, arg);
    return queue_error(r, &e);
}
