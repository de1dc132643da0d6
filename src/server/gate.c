/* The front door (gate.h): an accept thread, then one thread per connection
 * that reads one request, checks it (http.c), answers errors itself, and
 * relays a good request to libmicrohttpd and its response back. */
#include "gate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http.h"

enum {
    IO_CHUNK = 64 << 10,
    LINGER_MS = 2000,          /* after an error: how long the rest of a request is read and dropped */
    LINGER_BYTES = 16 << 20
};

struct srv_gate {
    srv_gate_opts o;
    pthread_t accept_thread;
    bool accept_running;
    int wake[2];               /* written once at stop: every poll of the gate watches wake[0] */
    int close_listener[2];     /* written once at drain: the accept thread stops */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_conns;               /* guarded by mu */
};

typedef struct {
    srv_gate *g;
    int fd;
    struct sockaddr_storage addr;
    socklen_t addr_len;
} conn;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int ms_until(double deadline) {
    double left = deadline - now();
    return left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1e3) + 1;
}

/* Waits for events on fd (or the gate's stop) until the deadline: 1 ready, 0
 * timed out, -1 stopping or failed. revents gets fd's events. */
static int wait_fd(const srv_gate *g, int fd, short events, double deadline, short *revents) {
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = g->wake[0], .events = POLLIN}};
        int n = poll(p, 2, ms_until(deadline));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || p[1].revents) return -1;
        if (n == 0) return 0;
        *revents = p[0].revents;
        return 1;
    }
}

/* Writes all of buf to fd, waiting at most idle_timeout for room each time. */
static bool send_all(const srv_gate *g, int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
        short re;
        if (wait_fd(g, fd, POLLOUT, now() + g->o.idle_timeout, &re) != 1 || (re & (POLLERR | POLLHUP))) return false;
    }
    return true;
}

/* After an error response: stop sending, read what the client still sends
 * (a bounded while), then close, so that the close does not reset the
 * connection before the client has read the answer. */
static void linger_close(const srv_gate *g, int fd) {
    shutdown(fd, SHUT_WR);
    double deadline = now() + LINGER_MS / 1e3;
    size_t dropped = 0;
    char buf[4096];
    while (dropped < LINGER_BYTES) {
        short re;
        if (wait_fd(g, fd, POLLIN, deadline, &re) != 1) break;
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) break;
        dropped += (size_t)n;
    }
}

/* Answers e and ends the connection. */
static void reply_error(conn *c, const char *method, const char *target, const srv_error *e) {
    size_t len = 0;
    char *resp = srv_http_error_response(e, &len);
    if (resp) send_all(c->g, c->fd, resp, len);
    free(resp);
    if (c->g->o.refused) c->g->o.refused(c->g->o.user, method, target, e->status);
    linger_close(c->g, c->fd);
}

/* ------------------------------------------------------------ reading a request */

typedef struct {
    char *buf;
    size_t len, cap;
} bytes;

static bool grow(bytes *b, size_t want) {
    if (want <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < want) cap *= 2;
    char *p = realloc(b->buf, cap);
    if (!p) return false;
    b->buf = p;
    b->cap = cap;
    return true;
}

/* Reads more of the request into b before the deadline: 1 got bytes, 0 the
 * client closed or left, -2 timed out, -1 stopping or failed. */
static int read_more(conn *c, bytes *b, double deadline) {
    if (!grow(b, b->len + IO_CHUNK)) return -1;
    for (;;) {
        short re;
        int w = wait_fd(c->g, c->fd, POLLIN, deadline, &re);
        if (w <= 0) return w == 0 ? -2 : -1;
        ssize_t n = recv(c->fd, b->buf + b->len, b->cap - b->len, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) return 0;
        b->len += (size_t)n;
        return 1;
    }
}

static void timeout_error(srv_error *e, const char *what, double seconds) {
    srv_fail(e, 408, "invalid_request_error", "request_timeout", NULL,
             "the request %s did not arrive within %g seconds", what, seconds);
}

/* The request's body after the head: Content-Length bytes, or decoded
 * chunks; false when the connection was answered or is to be dropped. */
static bool read_body(conn *c, const srv_http_head *h, bytes *in, double deadline, char **body, size_t *body_len,
                      srv_error *e, bool *answer) {
    *answer = true;
    size_t have = in->len - h->head_len;
    const char *rest = in->buf + h->head_len;
    if (!h->chunked) {
        size_t want = h->content_length > 0 ? (size_t)h->content_length : 0;
        while (have < want) {
            int r = read_more(c, in, deadline);
            if (r == -2) {
                timeout_error(e, "body", c->g->o.body_timeout);
                return false;
            }
            if (r <= 0) return *answer = false;
            rest = in->buf + h->head_len;
            have = in->len - h->head_len;
        }
        *body = malloc(want + 1);
        if (!*body) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory for the request body"), false;
        memcpy(*body, rest, want);
        *body_len = want;
        return true;
    }
    srv_chunked ch;
    srv_chunked_init(&ch, c->g->o.max_body);
    size_t fed = 0; /* bytes after the head already given to the decoder */
    bool ok = true;
    while (ok && !ch.done) {
        if (fed < have && srv_chunked_feed(&ch, rest + fed, have - fed, e) < 0) {
            ok = false;
            break;
        }
        fed = have;
        if (ch.done) break;
        int r = read_more(c, in, deadline);
        if (r == -2) timeout_error(e, "body", c->g->o.body_timeout);
        if (r <= 0) ok = false, *answer = r == -2;
        rest = in->buf + h->head_len;
        have = in->len - h->head_len;
    }
    if (ok) {
        *body = ch.out ? ch.out : malloc(1);
        ch.out = NULL;
        *body_len = ch.out_len;
        ok = *body != NULL;
        if (!ok) srv_fail(e, 500, "server_error", NULL, NULL, "out of memory for the request body");
    }
    srv_chunked_free(&ch);
    return ok;
}

/* ------------------------------------------------------------ relaying */

static const char PROBE[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* Relays request (to libmicrohttpd's end, pair) and the response (to the
 * client) until the response is over, the client is gone or the gate stops. */
static void relay(conn *c, int pair, const char *req, size_t req_len, int minor) {
    srv_gate *g = c->g;
    size_t sent = 0;
    bool response_started = false, probed = false, client_eof = false;
    char *buf = malloc(IO_CHUNK);
    if (!buf) return;
    for (;;) {
        struct pollfd p[3] = {
            {.fd = pair, .events = POLLIN | (sent < req_len ? POLLOUT : 0)},
            {.fd = c->fd, .events = client_eof ? 0 : POLLIN | POLLRDHUP},
            {.fd = g->wake[0], .events = POLLIN},
        };
        int n = poll(p, 3, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || p[2].revents) break;
        if (p[0].revents & POLLIN) {
            ssize_t got = read(pair, buf, IO_CHUNK);
            if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (got <= 0) break; /* libmicrohttpd closed its end: the response is complete */
            response_started = true;
            if (!send_all(g, c->fd, buf, (size_t)got)) break; /* the client is gone */
            continue;
        }
        if (p[0].revents & (POLLHUP | POLLERR)) break;
        if (p[0].revents & POLLOUT) {
            ssize_t w = send(pair, req + sent, req_len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EINTR) break;
        }
        if (p[1].revents & (POLLERR | POLLHUP)) break; /* reset: the client left */
        if (p[1].revents & (POLLIN | POLLRDHUP)) {
            ssize_t got = recv(c->fd, buf, IO_CHUNK, MSG_DONTWAIT);
            if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (got < 0) break;
            if (got > 0) continue; /* bytes after the request: one request per connection, dropped */
            client_eof = true;
            if (response_started) continue; /* still reading the answer, maybe */
            /* a FIN before the answer: half-closed, or gone? An HTTP/1.1
             * client accepts an interim response; one that has closed its
             * socket answers it with a reset (seen as POLLERR above). An
             * HTTP/1.0 client cannot be asked: its FIN means it left. */
            if (minor == 0 || probed) break;
            probed = true;
            if (send(c->fd, PROBE, sizeof PROBE - 1, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)(sizeof PROBE - 1))
                break;
        }
    }
    free(buf);
}

/* ------------------------------------------------------------ a connection */

static void serve(conn *c) {
    srv_gate *g = c->g;
    bytes in = {0};
    srv_error e;
    srv_http_head h = {0};
    char *body = NULL, *req = NULL;
    /* the head: the first byte within the idle timeout, the rest within the body timeout */
    double deadline = now() + g->o.idle_timeout;
    long head_len = 0;
    bool first = true;
    while (head_len == 0) {
        int r = read_more(c, &in, deadline);
        if (r == -2 && !first) {
            timeout_error(&e, "head", g->o.body_timeout);
            reply_error(c, "-", "-", &e);
        }
        if (r <= 0) goto out; /* silent, closed, stopping */
        if (first) deadline = now() + g->o.body_timeout;
        first = false;
        head_len = srv_http_head_end(in.buf, in.len, &e);
        if (head_len < 0) {
            reply_error(c, "-", "-", &e);
            goto out;
        }
    }
    if (srv_http_parse_head(in.buf, (size_t)head_len, &h, &e)) {
        reply_error(c, h.method[0] ? h.method : "-", h.target ? h.target : "-", &e);
        goto out;
    }
    if (h.content_length >= 0 && (uint64_t)h.content_length > g->o.max_body) {
        srv_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                 "the request body has %lld bytes; the limit is %zu", (long long)h.content_length, g->o.max_body);
        reply_error(c, h.method, h.target, &e);
        goto out;
    }
    if (h.expect_continue && (h.chunked || h.content_length > 0) && !send_all(g, c->fd, PROBE, sizeof PROBE - 1))
        goto out;
    size_t body_len = 0;
    bool answer;
    if (!read_body(c, &h, &in, deadline, &body, &body_len, &e, &answer)) {
        if (answer) reply_error(c, h.method, h.target, &e);
        goto out;
    }
    size_t req_len = 0;
    req = srv_http_forward_request(&h, body, body_len, &req_len);
    int pair[2];
    if (!req || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair)) {
        srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory or sockets for the request");
        reply_error(c, h.method, h.target, &e);
        goto out;
    }
    fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK);
    if (!g->o.hand_over(g->o.user, pair[1], (const struct sockaddr *)&c->addr, c->addr_len)) {
        close(pair[0]);
        close(pair[1]);
        srv_fail(&e, 503, "server_error", "too_many_connections", NULL, "the server cannot take the request now");
        reply_error(c, h.method, h.target, &e);
        goto out;
    }
    relay(c, pair[0], req, req_len, h.minor);
    close(pair[0]); /* libmicrohttpd sees its end closed: a request still running is cancelled */
    linger_close(g, c->fd);
out:
    srv_http_head_free(&h);
    free(in.buf);
    free(body);
    free(req);
}

static void *conn_main(void *arg) {
    conn *c = arg;
    srv_gate *g = c->g;
    serve(c);
    close(c->fd);
    free(c);
    pthread_mutex_lock(&g->mu);
    g->n_conns--;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* Beyond --max-connections: a 503 at once, without a thread. */
static void refuse_busy(srv_gate *g, int fd) {
    srv_error e;
    srv_fail(&e, 503, "server_error", "too_many_connections", NULL, "the server has %d open connections, its limit",
             g->o.max_connections);
    size_t len = 0;
    char *resp = srv_http_error_response(&e, &len);
    if (resp && send(fd, resp, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) { /* the client is gone already */
    }
    free(resp);
    shutdown(fd, SHUT_WR);
    close(fd);
}

static void *accept_main(void *arg) {
    srv_gate *g = arg;
    for (;;) {
        struct pollfd p[3] = {{.fd = g->o.listen_fd, .events = POLLIN},
                              {.fd = g->wake[0], .events = POLLIN},
                              {.fd = g->close_listener[0], .events = POLLIN}};
        int n = poll(p, 3, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || p[1].revents || p[2].revents) break;
        conn *c = calloc(1, sizeof *c);
        if (!c) continue;
        c->g = g;
        c->addr_len = sizeof c->addr;
        c->fd = accept4(g->o.listen_fd, (struct sockaddr *)&c->addr, &c->addr_len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c->fd < 0) {
            free(c);
            continue;
        }
        pthread_mutex_lock(&g->mu);
        bool busy = g->n_conns >= g->o.max_connections;
        if (!busy) g->n_conns++;
        pthread_mutex_unlock(&g->mu);
        if (busy) {
            refuse_busy(g, c->fd);
            free(c);
            continue;
        }
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, conn_main, c) != 0) {
            close(c->fd);
            free(c);
            pthread_mutex_lock(&g->mu);
            g->n_conns--;
            pthread_mutex_unlock(&g->mu);
        }
        pthread_attr_destroy(&attr);
    }
    close(g->o.listen_fd);
    return NULL;
}

srv_gate *srv_gate_start(const srv_gate_opts *opts, pkv_error *err) {
    srv_gate *g = calloc(1, sizeof *g);
    if (!g) {
        err->code = PKV_ERR_NOMEM;
        snprintf(err->msg, sizeof err->msg, "out of memory for the listener");
        return NULL;
    }
    g->o = *opts;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->wake[0] = g->wake[1] = g->close_listener[0] = g->close_listener[1] = -1;
    if (pipe2(g->wake, O_CLOEXEC) || pipe2(g->close_listener, O_CLOEXEC) ||
        pthread_create(&g->accept_thread, NULL, accept_main, g) != 0) {
        err->code = PKV_ERR_IO;
        snprintf(err->msg, sizeof err->msg, "cannot start the listener thread: %s", strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (g->wake[i] >= 0) close(g->wake[i]);
            if (g->close_listener[i] >= 0) close(g->close_listener[i]);
        }
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g);
        return NULL;
    }
    g->accept_running = true;
    return g;
}

void srv_gate_close_listener(srv_gate *g) {
    if (!g->accept_running) return;
    if (write(g->close_listener[1], "x", 1) != 1) { /* the pipe is empty and ours: cannot fail */
    }
    pthread_join(g->accept_thread, NULL);
    g->accept_running = false;
}

void srv_gate_stop(srv_gate *g) {
    if (!g) return;
    if (write(g->wake[1], "x", 1) != 1) { /* as above */
    }
    if (g->accept_running) pthread_join(g->accept_thread, NULL);
    pthread_mutex_lock(&g->mu);
    while (g->n_conns > 0) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    close(g->wake[0]);
    close(g->wake[1]);
    close(g->close_listener[0]);
    close(g->close_listener[1]);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}
