/* The server's front door: it owns the listening socket, reads each request's
 * head and body with the checks of http.c and the limits and timeouts of the
 * server, answers every framing error itself with an OpenAI-shaped JSON body,
 * and hands libmicrohttpd one well-formed request per connection over a
 * socket pair (Content-Length framing, Connection: close), relaying the
 * response back.
 *
 * Why: libmicrohttpd 0.9.75 (Debian 12) answers the errors it finds itself
 * (431, a bad or oversized chunk, a malformed Content-Length, an unknown
 * version) with HTML pages and offers no hook to replace them; it also takes
 * the first of two conflicting Content-Length fields. The gate also tells a
 * client that half-closes its socket after the request (allowed by HTTP/1.1)
 * from one that leaves: a FIN before the response is probed with an interim
 * "100 Continue" (RFC 9110 §15.2: clients must accept unexpected 1xx
 * responses); a client that closed answers it with a reset, and only then is
 * the request cancelled (libmicrohttpd sees its socket pair closed). */
#ifndef PKV_SERVER_GATE_H
#define PKV_SERVER_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "promptkv.h"

typedef struct {
    int listen_fd;             /* bound and listening; the gate closes it */
    size_t max_body;
    unsigned idle_timeout;     /* seconds of silence before a request starts, or of a client not reading */
    double body_timeout;       /* seconds from a request's first byte to its last */
    int max_connections;
    /* passes a socket carrying one request to libmicrohttpd; false: it refused */
    bool (*hand_over)(void *user, int fd, const struct sockaddr *addr, socklen_t addr_len);
    /* a request the gate answered itself (status >= 400), for the log and metrics */
    void (*refused)(void *user, const char *method, const char *target, int status);
    void *user;
} srv_gate_opts;

typedef struct srv_gate srv_gate;

srv_gate *srv_gate_start(const srv_gate_opts *opts, pkv_error *err);
/* No new connections (the listening socket is closed); open ones go on. */
void srv_gate_close_listener(srv_gate *gate);
/* Ends every connection, waits for their threads and frees the gate. */
void srv_gate_stop(srv_gate *gate);

#endif
