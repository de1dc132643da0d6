/*
 * libFuzzer target for the server's HTTP framing checks (src/server/http.c):
 * random bytes as a request head and a chunked body, fed in pieces.
 *
 *   make fuzz-http
 *   build/fuzz_http -max_total_time=600 fuzz/corpus-work/http fuzz/corpus-http
 *
 * Invariants (__builtin_trap): a head is found or refused with an error
 * object of a 4xx/5xx status; a parsed head forwarded as libmicrohttpd gets
 * it parses again to the same method, target and version, with the body's
 * length and no chunking (or, two fields longer, passes the field limit); a chunked body never grows past its limit, and
 * feeding it in pieces gives what feeding it whole gives.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"

#define REQUIRE(cond)                  \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

static void check_error(const srv_error *e) {
    REQUIRE(e->status >= 400 && e->status < 600 && e->message[0]);
    size_t len;
    char *resp = srv_http_error_response(e, &len);
    REQUIRE(resp && len > 0 && !memcmp(resp, "HTTP/1.1 ", 9));
    free(resp);
}

/* The body decoded in pieces of the sizes given by cuts; -1 on error. */
static long decode(const char *data, size_t len, size_t max_body, const uint8_t *cuts, size_t n_cuts, srv_chunked *c,
                   srv_error *e) {
    srv_chunked_init(c, max_body);
    size_t off = 0;
    for (size_t k = 0; off < len && !c->done; k++) {
        size_t piece = n_cuts ? (size_t)cuts[k % n_cuts] % 17 + 1 : len;
        if (piece > len - off) piece = len - off;
        long used = srv_chunked_feed(c, data + off, piece, e);
        if (used < 0) return -1;
        REQUIRE((size_t)used <= piece && c->out_len <= max_body);
        if (!c->done) REQUIRE((size_t)used == piece);
        off += (size_t)used;
    }
    return (long)off;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t max_body = (size_t)data[0] * 16;
    char *buf = malloc(size);
    REQUIRE(buf);
    memcpy(buf, data + 1, size - 1);
    size_t len = size - 1;
    srv_error e;
    long end = srv_http_head_end(buf, len, &e);
    if (end < 0) check_error(&e);
    if (end > 0) {
        srv_http_head h;
        if (srv_http_parse_head(buf, (size_t)end, &h, &e)) {
            check_error(&e);
        } else {
            const char *body = buf + end;
            size_t body_len = len - (size_t)end;
            size_t fwd_len;
            char *fwd = srv_http_forward_request(&h, body, body_len, &fwd_len);
            REQUIRE(fwd);
            srv_error e2;
            long end2 = srv_http_head_end(fwd, fwd_len, &e2);
            REQUIRE(end2 > 0);
            srv_http_head h2;
            /* the forwarded head has two fields more (Content-Length, Connection): past
             * the field limit only there (libmicrohttpd has none) */
            if (srv_http_parse_head(fwd, (size_t)end2, &h2, &e2) == 0) {
                REQUIRE(!strcmp(h.method, h2.method) && !strcmp(h.target, h2.target) && h.minor == h2.minor);
                REQUIRE(!h2.chunked && h2.content_length == (int64_t)body_len && fwd_len - (size_t)end2 == body_len);
            } else {
                REQUIRE(e2.status == 431);
            }
            srv_http_head_free(&h2);
            free(fwd);
            /* the bytes after the head as a chunked body: whole, then in pieces */
            srv_chunked whole, pieces;
            srv_error ew, ep;
            long a = decode(body, body_len, max_body, NULL, 0, &whole, &ew);
            long b = decode(body, body_len, max_body, data, size < 8 ? size : 8, &pieces, &ep);
            REQUIRE((a < 0) == (b < 0));
            if (a < 0) {
                check_error(&ew);
                REQUIRE(ew.status == ep.status);
            } else {
                REQUIRE(a == b && whole.done == pieces.done && whole.out_len == pieces.out_len &&
                        (whole.out_len == 0 || !memcmp(whole.out, pieces.out, whole.out_len)));
            }
            srv_chunked_free(&whole);
            srv_chunked_free(&pieces);
        }
        srv_http_head_free(&h);
    }
    free(buf);
    return 0;
}
