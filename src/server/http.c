/* HTTP/1.1 request framing, checked the strict way RFC 9112 allows: what a
 * lenient parser and a strict one would read differently (two lengths, a
 * length beside chunked, folded lines, bare LF, whitespace before a colon) is
 * refused rather than guessed, so no proxy in front can be made to see one
 * request where this server sees two (request smuggling, RFC 9112 §11.2). */
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "response.h"

const char *srv_http_reason(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

static int malformed(srv_error *e, const char *fmt, const char *arg) {
    return srv_fail(e, 400, "invalid_request_error", "malformed_request", NULL, fmt, arg);
}

/* RFC 9110 §5.6.2 tchar */
static bool is_tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* a field value's characters (RFC 9110 §5.5): visible, space, tab, obs-text */
static bool is_field_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

long srv_http_head_end(const char *buf, size_t len, srv_error *e) {
    size_t start = 0;
    /* RFC 9112 §2.2: empty lines before the request line are ignored */
    while (start + 1 < len && buf[start] == '\r' && buf[start + 1] == '\n') start += 2;
    for (size_t i = start; i < len; i++) {
        if (buf[i] == '\0') return malformed(e, "the request head contains a NUL byte%s", "");
        if (buf[i] == '\n' && (i == 0 || buf[i - 1] != '\r'))
            return malformed(e, "a line of the request head ends in a bare LF (CRLF is required)%s", "");
        if (i >= 3 && buf[i] == '\n' && !memcmp(buf + i - 3, "\r\n\r\n", 4) && i - 3 >= start) return (long)(i + 1);
        if (i + 1 >= SRV_HTTP_MAX_HEAD)
            return srv_fail(e, 431, "invalid_request_error", "headers_too_large", NULL,
                            "the request line and header fields are larger than %d bytes", SRV_HTTP_MAX_HEAD);
    }
    return 0;
}

static bool lower_eq(const char *s, size_t n, const char *lit) { return strlen(lit) == n && !strncasecmp(s, lit, n); }

/* Header fields that are about this connection or this message's framing
 * (RFC 9110 §7.6.1, RFC 9112 §6): read here, never forwarded. */
static bool hop_by_hop(const char *name, size_t n) {
    static const char *const NAMES[] = {"connection", "keep-alive",        "proxy-connection", "te",     "trailer",
                                        "upgrade",    "transfer-encoding", "content-length",   "expect"};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (lower_eq(name, n, NAMES[i])) return true;
    return false;
}

/* One comma-separated element of a list field (RFC 9110 §5.6.1), trimmed. */
static bool next_element(const char **p, const char *end, const char **el, size_t *n) {
    while (*p < end && (**p == ' ' || **p == '\t' || **p == ',')) (*p)++;
    if (*p >= end) return false;
    const char *s = *p;
    while (*p < end && **p != ',') (*p)++;
    const char *t = *p;
    while (t > s && (t[-1] == ' ' || t[-1] == '\t')) t--;
    *el = s;
    *n = (size_t)(t - s);
    return true;
}

typedef struct {
    int64_t length;       /* -1 none */
    int n_chunked, n_host;
    const char *bad_coding;
    size_t bad_coding_len;
} framing;

static int read_content_length(const char *v, size_t n, framing *fr, srv_error *e) {
    const char *p = v, *end = v + n, *el;
    size_t len;
    bool any = false;
    while (next_element(&p, end, &el, &len)) {
        any = true;
        char shown[40];
        snprintf(shown, sizeof shown, "%.*s", (int)(len < 32 ? len : 32), el);
        int64_t x = 0;
        for (size_t i = 0; i < len; i++) {
            if (el[i] < '0' || el[i] > '9')
                return malformed(e, "Content-Length must be a non-negative decimal number, got '%s'", shown);
            /* more than 18 digits: beyond any limit (413 later), not an overflow */
            x = x > (INT64_MAX - 9) / 10 ? INT64_MAX : x * 10 + (el[i] - '0');
        }
        if (fr->length >= 0 && fr->length != x)
            return srv_fail(e, 400, "invalid_request_error", "malformed_request", NULL,
                            "conflicting Content-Length values (%lld and %lld): the message length is ambiguous",
                            (long long)fr->length, (long long)x);
        fr->length = x;
    }
    if (!any) return malformed(e, "Content-Length is empty%s", "");
    return 0;
}

static void read_transfer_encoding(const char *v, size_t n, framing *fr) {
    const char *p = v, *end = v + n, *el;
    size_t len;
    while (next_element(&p, end, &el, &len)) {
        if (lower_eq(el, len, "chunked")) fr->n_chunked++;
        else if (!fr->bad_coding) fr->bad_coding = el, fr->bad_coding_len = len;
    }
}

static int parse_request_line(char *line, size_t n, srv_http_head *h, srv_error *e) {
    char *sp1 = memchr(line, ' ', n);
    if (!sp1 || sp1 == line || (size_t)(sp1 - line) >= sizeof h->method)
        return malformed(e, "the request line must be METHOD TARGET HTTP/1.1%s", "");
    for (char *c = line; c < sp1; c++)
        if (!is_tchar((unsigned char)*c)) return malformed(e, "the method has a character a token may not have%s", "");
    memcpy(h->method, line, (size_t)(sp1 - line));
    h->method[sp1 - line] = '\0';
    char *target = sp1 + 1, *end = line + n;
    char *sp2 = memchr(target, ' ', (size_t)(end - target));
    if (!sp2 || sp2 == target) return malformed(e, "the request line must be METHOD TARGET HTTP/1.1%s", "");
    for (char *c = target; c < sp2; c++)
        if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
            return malformed(e, "the request target has a control, space or non-ASCII byte%s", "");
    char *version = sp2 + 1;
    size_t vlen = (size_t)(end - version);
    if (vlen != 8 || memcmp(version, "HTTP/", 5) || version[5] < '0' || version[5] > '9' || version[6] != '.' ||
        version[7] < '0' || version[7] > '9')
        return malformed(e, "the request line must end with an HTTP version such as HTTP/1.1%s", "");
    if (version[5] != '1')
        return srv_fail(e, 505, "invalid_request_error", "http_version_not_supported", NULL,
                        "HTTP/%c.%c is not supported: this server speaks HTTP/1.0 and HTTP/1.1", version[5], version[7]);
    /* a higher minor version is read as the highest known (RFC 9110 §2.5) */
    h->minor = version[7] == '0' ? 0 : 1;
    *sp2 = '\0';
    /* a copy: the head's buffer grows (and moves) while the body is read */
    if (!(h->target = strdup(target)))
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory reading the request head");
    return 0;
}

static bool append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 512;
        while (c < *len + n + 1) c *= 2;
        char *p = realloc(*buf, c);
        if (!p) return false;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

static int parse_field(const char *line, size_t n, srv_http_head *h, framing *fr, size_t *fwd_cap, srv_error *e) {
    if (line[0] == ' ' || line[0] == '\t')
        return malformed(e, "a header field line starts with white space (obsolete line folding)%s", "");
    const char *colon = memchr(line, ':', n);
    if (!colon || colon == line) return malformed(e, "a header field line has no name and colon%s", "");
    for (const char *c = line; c < colon; c++)
        if (!is_tchar((unsigned char)*c))
            return malformed(e, "a header field name has a character a token may not have (white space before the "
                                "colon?)%s", "");
    const char *v = colon + 1, *vend = line + n;
    for (const char *c = v; c < vend; c++)
        if (!is_field_char((unsigned char)*c)) return malformed(e, "a header field value has a control byte%s", "");
    while (v < vend && (*v == ' ' || *v == '\t')) v++;
    while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t')) vend--;
    size_t name_len = (size_t)(colon - line), vlen = (size_t)(vend - v);
    if (lower_eq(line, name_len, "content-length")) return read_content_length(v, vlen, fr, e);
    if (lower_eq(line, name_len, "transfer-encoding")) {
        read_transfer_encoding(v, vlen, fr);
        return 0;
    }
    if (lower_eq(line, name_len, "host")) fr->n_host++;
    if (lower_eq(line, name_len, "expect")) {
        if (!lower_eq(v, vlen, "100-continue"))
            return srv_fail(e, 417, "invalid_request_error", "unsupported_expectation", NULL,
                            "the only expectation this server meets is Expect: 100-continue");
        h->expect_continue = true;
        return 0;
    }
    if (hop_by_hop(line, name_len)) return 0;
    if (!append(&h->forward, &h->forward_len, fwd_cap, line, name_len) ||
        !append(&h->forward, &h->forward_len, fwd_cap, ": ", 2) ||
        !append(&h->forward, &h->forward_len, fwd_cap, v, vlen) ||
        !append(&h->forward, &h->forward_len, fwd_cap, "\r\n", 2))
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory reading the request head");
    return 0;
}

/* RFC 9112 §6.1, §6.3: chunked or a length, never both, never ambiguous. */
static int check_framing(const srv_http_head *h, const framing *fr, srv_error *e) {
    bool te = fr->n_chunked > 0 || fr->bad_coding;
    if (te && h->minor == 0) return malformed(e, "Transfer-Encoding is not allowed in an HTTP/1.0 request%s", "");
    if (te && fr->length >= 0)
        return malformed(e, "a request may not have both Content-Length and Transfer-Encoding%s", "");
    if (fr->bad_coding) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(fr->bad_coding_len < 40 ? fr->bad_coding_len : 40), fr->bad_coding);
        return srv_fail(e, 501, "invalid_request_error", "unsupported_transfer_encoding", NULL,
                        "transfer coding '%s' is not supported (only chunked)", name);
    }
    if (fr->n_chunked > 1) return malformed(e, "chunked is applied more than once%s", "");
    if (fr->n_host > 1) return malformed(e, "more than one Host header field%s", "");
    if (fr->n_host == 0 && h->minor == 1) return malformed(e, "an HTTP/1.1 request needs a Host header field%s", "");
    return 0;
}

int srv_http_parse_head(char *buf, size_t head_len, srv_http_head *h, srv_error *e) {
    memset(h, 0, sizeof *h);
    h->content_length = -1;
    h->head_len = head_len;
    size_t pos = 0, fwd_cap = 0;
    while (pos + 1 < head_len && buf[pos] == '\r' && buf[pos + 1] == '\n') pos += 2;
    framing fr = {-1, 0, 0, NULL, 0};
    int n_fields = 0, rc = 0;
    for (bool first = true; rc == 0; first = false) {
        char *eol = memmem(buf + pos, head_len - pos, "\r\n", 2);
        if (!eol) {
            rc = malformed(e, "the request head is incomplete%s", "");
            break;
        }
        size_t n = (size_t)(eol - (buf + pos));
        if (first) {
            rc = parse_request_line(buf + pos, n, h, e);
        } else if (n == 0) {
            break; /* the blank line */
        } else if (++n_fields > SRV_HTTP_MAX_FIELDS) {
            rc = srv_fail(e, 431, "invalid_request_error", "headers_too_large", NULL,
                          "more than %d header field lines", SRV_HTTP_MAX_FIELDS);
        } else {
            rc = parse_field(buf + pos, n, h, &fr, &fwd_cap, e);
        }
        pos += n + 2;
    }
    if (rc == 0) rc = check_framing(h, &fr, e);
    if (rc) { /* the target stays for the log (srv_http_head_free frees it) */
        free(h->forward);
        h->forward = NULL;
        h->forward_len = 0;
        return -1;
    }
    h->chunked = fr.n_chunked == 1;
    h->content_length = fr.length;
    if (!h->forward && !(h->forward = calloc(1, 1))) {
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory reading the request head");
    }
    return 0;
}

void srv_http_head_free(srv_http_head *h) {
    free(h->forward);
    free(h->target);
    h->forward = NULL;
    h->target = NULL;
    h->forward_len = 0;
}

/* ------------------------------------------------------------ chunked bodies */

enum { CH_SIZE, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRAILER, CH_DONE };

void srv_chunked_init(srv_chunked *c, size_t max_body) {
    memset(c, 0, sizeof *c);
    c->state = CH_SIZE;
    c->max_body = max_body;
}

void srv_chunked_free(srv_chunked *c) {
    free(c->out);
    c->out = NULL;
}

static int too_large(const srv_chunked *c, srv_error *e) {
    return srv_fail(e, 413, "invalid_request_error", "request_too_large", NULL,
                    "the chunked request body is larger than the limit of %zu bytes", c->max_body);
}

/* chunk-size [ chunk-ext ] (RFC 9112 §7.1.1): hex digits, then nothing, or
 * white space and ';' extensions, which are skipped. */
static int size_line(srv_chunked *c, srv_error *e) {
    const char *s = c->line;
    size_t n = c->line_len, i = 0;
    uint64_t size = 0;
    for (; i < n; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                                   : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) break;
        if (size > (UINT64_MAX >> 4)) return too_large(c, e); /* a chunk no limit could hold */
        size = size << 4 | (uint64_t)d;
    }
    if (i == 0) return malformed(e, "a chunk-size line does not start with hexadecimal digits%s", "");
    for (size_t k = i; k < n; k++)
        if (!is_field_char((unsigned char)s[k])) return malformed(e, "a chunk extension has a control byte%s", "");
    size_t j = i;
    while (j < n && (s[j] == ' ' || s[j] == '\t')) j++;
    if (j < n && s[j] != ';') return malformed(e, "a chunk size is followed by something other than an extension%s", "");
    if (size > c->max_body - c->out_len) return too_large(c, e);
    c->chunk_left = size;
    c->state = size ? CH_DATA : CH_TRAILER;
    return 0;
}

long srv_chunked_feed(srv_chunked *c, const char *data, size_t len, srv_error *e) {
    size_t i = 0;
    while (i < len && c->state != CH_DONE) {
        if (c->state == CH_DATA) {
            size_t take = len - i < c->chunk_left ? len - i : (size_t)c->chunk_left;
            if (c->out_len + take + 1 > c->out_cap) {
                size_t cap = c->out_cap ? c->out_cap : 4096;
                while (cap < c->out_len + take + 1) cap *= 2;
                char *p = realloc(c->out, cap);
                if (!p) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory for the request body");
                c->out = p;
                c->out_cap = cap;
            }
            memcpy(c->out + c->out_len, data + i, take);
            c->out_len += take;
            c->chunk_left -= take;
            i += take;
            if (c->chunk_left == 0) c->state = CH_DATA_CR;
            continue;
        }
        char ch = data[i++];
        if (c->state == CH_DATA_CR || c->state == CH_DATA_LF) {
            if (ch != (c->state == CH_DATA_CR ? '\r' : '\n'))
                return malformed(e, "a chunk's data is not followed by CRLF%s", "");
            c->state = c->state == CH_DATA_CR ? CH_DATA_LF : CH_SIZE;
            continue;
        }
        /* CH_SIZE and CH_TRAILER read lines */
        if (ch == '\n') {
            if (c->line_len == 0 || c->line[c->line_len - 1] != '\r')
                return malformed(e, "a chunked-encoding line ends in a bare LF%s", "");
            c->line_len--;
            int rc = 0;
            if (c->state == CH_SIZE) rc = size_line(c, e);
            else if (c->line_len == 0) c->state = CH_DONE; /* the trailer section's end */
            if (rc) return -1;
            c->line_len = 0;
            continue;
        }
        if (c->line_len + 1 >= sizeof c->line) return malformed(e, "a chunked-encoding line is too long%s", "");
        c->line[c->line_len++] = ch;
    }
    c->done = c->state == CH_DONE;
    return (long)i;
}

/* ------------------------------------------------------------ output */

char *srv_http_error_response(const srv_error *e, size_t *len) {
    char *body = srv_error_body(e);
    if (!body) return NULL;
    size_t blen = strlen(body), cap = blen + 256;
    char *out = malloc(cap);
    if (out) {
        int n = snprintf(out, cap,
                         "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n\r\n%s",
                         e->status, srv_http_reason(e->status), blen, body);
        *len = (size_t)n;
    }
    free(body);
    return out;
}

char *srv_http_forward_request(const srv_http_head *h, const char *body, size_t body_len, size_t *len) {
    size_t cap = strlen(h->method) + strlen(h->target) + h->forward_len + body_len + 128;
    char *out = malloc(cap);
    if (!out) return NULL;
    int n = snprintf(out, cap, "%s %s HTTP/1.%d\r\n", h->method, h->target, h->minor);
    memcpy(out + n, h->forward, h->forward_len);
    size_t pos = (size_t)n + h->forward_len;
    pos += (size_t)snprintf(out + pos, cap - pos, "Content-Length: %zu\r\nConnection: close\r\n\r\n", body_len);
    if (body_len) memcpy(out + pos, body, body_len);
    *len = pos + body_len;
    return out;
}
