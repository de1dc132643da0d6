#include "engine/textout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void pkv_textout_init(pkv_textout *t, const char *const *stop, int n_stop) {
    memset(t, 0, sizeof *t);
    t->stop = stop;
    t->n_stop = n_stop;
    for (int i = 0; i < n_stop; i++)
        if (strlen(stop[i]) > t->max_stop_len) t->max_stop_len = strlen(stop[i]);
}

void pkv_textout_free(pkv_textout *t) {
    free(t->text);
    memset(t, 0, sizeof *t);
}

/* Length of the longest proper prefix of a stop string that text ends with:
 * those bytes may still become a stop string, so they wait. */
static size_t stop_prefix_at_end(const pkv_textout *t) {
    size_t best = 0;
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = strlen(t->stop[i]);
        for (size_t k = sl - 1; k > best; k--)
            if (k <= t->len && !memcmp(t->text + t->len - k, t->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* The earliest stop string that starts at or after from; -1 if none. */
static long find_stop(const pkv_textout *t, size_t from) {
    long best = -1;
    for (int i = 0; i < t->n_stop; i++) {
        const char *hit = memmem(t->text + from, t->len - from, t->stop[i], strlen(t->stop[i]));
        if (hit && (best < 0 || hit - t->text < best)) best = hit - t->text;
    }
    return best;
}

int pkv_textout_append(pkv_textout *t, const char *piece, size_t len) {
    if (t->stopped) return 0;
    if (t->cap - t->len < len + 1) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap - t->len < len + 1) cap *= 2;
        char *p = realloc(t->text, cap);
        if (!p) return -1;
        t->text = p;
        t->cap = cap;
    }
    memcpy(t->text + t->len, piece, len);
    t->len += len;
    t->text[t->len] = '\0';
    if (t->n_stop > 0) {
        /* a stop string ending in the new piece starts at most max_stop_len - 1 bytes before it */
        size_t from = t->searched > t->max_stop_len - 1 ? t->searched - (t->max_stop_len - 1) : 0;
        long hit = find_stop(t, from);
        t->searched = t->len;
        if (hit >= 0) {
            t->len = (size_t)hit;
            t->text[t->len] = '\0';
            t->stopped = true;
            t->ready = t->len;
            return 0;
        }
    }
    size_t ready = t->len - stop_prefix_at_end(t);
    ready -= pkv_utf8_incomplete_tail(t->text, ready);
    if (ready > t->ready) t->ready = ready;
    return 0;
}

void pkv_textout_finish(pkv_textout *t) { t->ready = t->len; }

/* Sequence length announced by a lead byte; 0 for a continuation or invalid byte. */
static int utf8_seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

size_t pkv_utf8_incomplete_tail(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char c = u[len - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation: keep looking for the lead */
        int need = utf8_seq_len(c);
        return need > (int)back ? back : 0;
    }
    return 0;
}

/* Length of the valid sequence at u[0, n), or 0 (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF). */
static size_t valid_seq(const unsigned char *u, size_t n) {
    int need = utf8_seq_len(u[0]);
    if (need == 0 || (size_t)need > n) return 0;
    for (int k = 1; k < need; k++)
        if ((u[k] & 0xC0) != 0x80) return 0;
    if (need == 3) {
        if (u[0] == 0xE0 && u[1] < 0xA0) return 0; /* overlong */
        if (u[0] == 0xED && u[1] >= 0xA0) return 0; /* surrogates */
    }
    if (need == 4) {
        if (u[0] == 0xF0 && u[1] < 0x90) return 0; /* overlong */
        if (u[0] == 0xF4 && u[1] >= 0x90) return 0; /* above U+10FFFF */
    }
    return (size_t)need;
}

size_t pkv_utf8_repair(const char *s, size_t len, char *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = valid_seq(u + i, len - i);
        if (n) {
            memcpy(out + o, u + i, n);
            o += n;
            i += n;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3); /* U+FFFD for each bad byte */
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return o;
}
