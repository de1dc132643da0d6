/* HTTP/1.1 request framing (RFC 9112), checked strictly before libmicrohttpd
 * sees a request: the request line, the header fields, Content-Length and
 * chunked bodies. Pure functions over bytes (no sockets), so they can be
 * tested and fuzzed alone; gate.c does the I/O. A request that fails a check
 * gets an OpenAI-shaped JSON error here (srv_http_error_response), never
 * libmicrohttpd's HTML pages. */
#ifndef PKV_SERVER_HTTP_H
#define PKV_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "request.h"

enum {
    SRV_HTTP_MAX_HEAD = 16 << 10,  /* request line and header fields (431 above) */
    SRV_HTTP_MAX_FIELDS = 100,     /* header field lines (431 above) */
    SRV_HTTP_MAX_CHUNK_LINE = 4096 /* a chunk-size line with its extensions, a trailer line */
};

typedef struct {
    char method[32];
    char *target;             /* malloc'd; kept after a failed parse, for the log */
    int minor;                /* HTTP/1.<minor>: 0 or 1 */
    int64_t content_length;   /* -1: none */
    bool chunked;
    bool expect_continue;     /* Expect: 100-continue */
    size_t head_len;          /* bytes of the head, blank line included */
    /* the header fields to forward (hop-by-hop and framing fields left out):
     * "Name: value\r\n" lines */
    char *forward;
    size_t forward_len;
} srv_http_head;

/* The length of the head in buf[0, len) (through the blank line after the
 * fields, empty lines before the request line included), 0 while it is
 * incomplete; -1 with e filled (431) when no head ends within the limit. */
long srv_http_head_end(const char *buf, size_t len, srv_error *e);

/* Parses the head buf[0, head_len) (srv_http_head_end's length; the buffer
 * is modified). On error fills e (400, 417, 431, 501 or 505, an OpenAI error)
 * and returns -1. Either way free h with srv_http_head_free. */
int srv_http_parse_head(char *buf, size_t head_len, srv_http_head *h, srv_error *e);
void srv_http_head_free(srv_http_head *h);

/* Incremental chunked decoding (RFC 9112 §7.1): the body's bytes go to out,
 * up to max_body (413 beyond, and for a chunk that alone is larger). */
typedef struct {
    int state;
    uint64_t chunk_left;      /* data bytes left in the current chunk */
    char line[SRV_HTTP_MAX_CHUNK_LINE];
    size_t line_len;
    size_t max_body;
    char *out;                /* malloc'd, grown */
    size_t out_len, out_cap;
    bool done;                /* the last chunk and the trailer section were read */
} srv_chunked;

void srv_chunked_init(srv_chunked *c, size_t max_body);
void srv_chunked_free(srv_chunked *c);
/* Consumes data[0, len); returns the bytes used (less than len once done:
 * what follows belongs to the next request), or -1 with e filled. */
long srv_chunked_feed(srv_chunked *c, const char *data, size_t len, srv_error *e);

/* A whole response carrying e as OpenAI's error object, with Connection:
 * close; malloc'd, NULL when out of memory. */
char *srv_http_error_response(const srv_error *e, size_t *len);

/* The request forwarded to libmicrohttpd: the request line, h->forward,
 * Content-Length: body_len and Connection: close, then the body; malloc'd. */
char *srv_http_forward_request(const srv_http_head *h, const char *body, size_t body_len, size_t *len);

const char *srv_http_reason(int status);

#endif
