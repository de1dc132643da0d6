/* JSON writer helpers and a small recursive-descent parser (json.h). */
#include "eval/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of a valid UTF-8 sequence at p (1-4), or 0 if it is not one. */
static int utf8_len(const unsigned char *p) {
    if (p[0] < 0x80) return 1;
    int n = p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 && p[0] < 0xe0 ? 2 : 0;
    if (p[0] >= 0xf5) n = 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if (n == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0))) return 0; /* overlong, surrogate */
    if (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))) return 0;
    return n;
}

void pkv_json_str(pkv_sbuf *b, const char *s) {
    pkv_sbuf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        switch (*p) {
        case '"':
            pkv_sbuf_puts(b, "\\\"");
            break;
        case '\\':
            pkv_sbuf_puts(b, "\\\\");
            break;
        case '\n':
            pkv_sbuf_puts(b, "\\n");
            break;
        case '\r':
            pkv_sbuf_puts(b, "\\r");
            break;
        case '\t':
            pkv_sbuf_puts(b, "\\t");
            break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                pkv_sbuf_printf(b, "\\u%04x", *p);
            } else {
                /* generated text can hold stray bytes (byte tokens, a cut character): U+FFFD keeps the line valid */
                int n = utf8_len(p);
                if (n == 0)
                    pkv_sbuf_puts(b, "\\ufffd");
                else
                    pkv_sbuf_add(b, (const char *)p, (size_t)n);
                p += n ? n : 1;
                continue;
            }
        }
        p++;
    }
    pkv_sbuf_puts(b, "\"");
}

void pkv_json_num(pkv_sbuf *b, double v) {
    if (!isfinite(v))
        pkv_sbuf_puts(b, "null");
    else if (v == floor(v) && fabs(v) < 1e15)
        pkv_sbuf_printf(b, "%.0f", v);
    else
        pkv_sbuf_printf(b, "%.9g", v);
}

/* ---------------------------------------------------------------- parser */

typedef struct {
    const char *p, *end;
    int depth;
} parser;

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static bool parse_value(parser *ps, pkv_json *out);

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* UTF-8 encoding of a code point. */
static void put_utf8(pkv_sbuf *b, unsigned cp) {
    char u[4];
    int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const unsigned char LEAD[5] = {0, 0x00, 0xc0, 0xe0, 0xf0};
    for (int i = n - 1; i > 0; i--) {
        u[i] = (char)(0x80 | (cp & 0x3f));
        cp >>= 6;
    }
    u[0] = (char)(LEAD[n] | cp);
    pkv_sbuf_add(b, u, (size_t)n);
}

static char *parse_string(parser *ps) {
    if (ps->p >= ps->end || *ps->p != '"') return NULL;
    ps->p++;
    pkv_sbuf b = {0};
    pkv_sbuf_add(&b, "", 0);
    while (ps->p < ps->end && *ps->p != '"') {
        char c = *ps->p++;
        if ((unsigned char)c < 0x20) goto bad;
        if (c != '\\') {
            pkv_sbuf_add(&b, &c, 1);
            continue;
        }
        if (ps->p >= ps->end) goto bad;
        char e = *ps->p++;
        switch (e) {
        case '"':
            pkv_sbuf_puts(&b, "\"");
            break;
        case '\\':
            pkv_sbuf_puts(&b, "\\");
            break;
        case '/':
            pkv_sbuf_puts(&b, "/");
            break;
        case 'b':
            pkv_sbuf_puts(&b, "\b");
            break;
        case 'f':
            pkv_sbuf_puts(&b, "\f");
            break;
        case 'n':
            pkv_sbuf_puts(&b, "\n");
            break;
        case 'r':
            pkv_sbuf_puts(&b, "\r");
            break;
        case 't':
            pkv_sbuf_puts(&b, "\t");
            break;
        case 'u': {
            if (ps->end - ps->p < 4) goto bad;
            unsigned cp = 0;
            for (int i = 0; i < 4; i++) {
                int h = hex_digit(ps->p[i]);
                if (h < 0) goto bad;
                cp = cp * 16 + (unsigned)h;
            }
            ps->p += 4;
            put_utf8(&b, cp); /* surrogate pairs are not produced by our writer */
            break;
        }
        default:
            goto bad;
        }
    }
    if (ps->p >= ps->end) goto bad;
    ps->p++;
    return pkv_sbuf_take(&b);
bad:
    pkv_sbuf_free(&b);
    return NULL;
}

static bool push_item(pkv_json *arr, const pkv_json *v) {
    pkv_json *items = realloc(arr->items, (size_t)(arr->n_items + 1) * sizeof *items);
    if (!items) return false;
    arr->items = items;
    arr->items[arr->n_items++] = *v;
    return true;
}

static void free_children(pkv_json *v) {
    for (int i = 0; i < v->n_items; i++) free_children(&v->items[i]);
    free(v->items);
    free(v->str);
    free(v->key);
}

static bool parse_container(parser *ps, pkv_json *out, bool object) {
    out->type = object ? PKV_JSON_OBJ : PKV_JSON_ARR;
    char close = object ? '}' : ']';
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return true;
    }
    for (;;) {
        pkv_json item = {0};
        skip_ws(ps);
        if (object) {
            item.key = parse_string(ps);
            if (!item.key) return false;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(item.key);
                return false;
            }
            ps->p++;
            skip_ws(ps);
        }
        /* parse_value keeps item.key; free_children releases it on failure */
        if (!parse_value(ps, &item)) {
            free_children(&item);
            return false;
        }
        if (!push_item(out, &item)) {
            free_children(&item);
            return false;
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return true;
        }
        return false;
    }
}

static bool parse_value(parser *ps, pkv_json *out) {
    char *key = out->key;
    memset(out, 0, sizeof *out);
    out->key = key;
    skip_ws(ps);
    if (ps->p >= ps->end || ++ps->depth > 64) return false;
    bool ok = false;
    char c = *ps->p;
    if (c == '{' || c == '[')
        ok = parse_container(ps, out, c == '{');
    else if (c == '"') {
        out->type = PKV_JSON_STR;
        out->str = parse_string(ps);
        ok = out->str != NULL;
    } else if (ps->end - ps->p >= 4 && !strncmp(ps->p, "null", 4)) {
        out->type = PKV_JSON_NULL;
        ps->p += 4;
        ok = true;
    } else if (ps->end - ps->p >= 4 && !strncmp(ps->p, "true", 4)) {
        out->type = PKV_JSON_BOOL;
        out->num = 1;
        ps->p += 4;
        ok = true;
    } else if (ps->end - ps->p >= 5 && !strncmp(ps->p, "false", 5)) {
        out->type = PKV_JSON_BOOL;
        ps->p += 5;
        ok = true;
    } else {
        char buf[64];
        size_t n = 0;
        while (ps->p + n < ps->end && n < sizeof buf - 1 && strchr("+-0123456789.eE", ps->p[n])) n++;
        if (n > 0) {
            memcpy(buf, ps->p, n);
            buf[n] = '\0';
            char *endp;
            out->num = strtod(buf, &endp);
            if (endp == buf + n) {
                out->type = PKV_JSON_NUM;
                ps->p += n;
                ok = true;
            }
        }
    }
    ps->depth--;
    return ok;
}

pkv_json *pkv_json_parse(const char *text, size_t len) {
    parser ps = {text, text + len, 0};
    pkv_json *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    if (!parse_value(&ps, v)) {
        free_children(v);
        free(v);
        return NULL;
    }
    skip_ws(&ps);
    if (ps.p != ps.end) {
        free_children(v);
        free(v);
        return NULL;
    }
    return v;
}

void pkv_json_free(pkv_json *v) {
    if (!v) return;
    free_children(v);
    free(v);
}

const pkv_json *pkv_json_get(const pkv_json *obj, const char *key) {
    if (!obj || obj->type != PKV_JSON_OBJ) return NULL;
    for (int i = 0; i < obj->n_items; i++)
        if (obj->items[i].key && !strcmp(obj->items[i].key, key)) return &obj->items[i];
    return NULL;
}

double pkv_json_get_num(const pkv_json *obj, const char *key, double dflt) {
    const pkv_json *v = pkv_json_get(obj, key);
    return v && (v->type == PKV_JSON_NUM || v->type == PKV_JSON_BOOL) ? v->num : dflt;
}

const char *pkv_json_get_str(const pkv_json *obj, const char *key, const char *dflt) {
    const pkv_json *v = pkv_json_get(obj, key);
    return v && v->type == PKV_JSON_STR ? v->str : dflt;
}
