#include "text/unicode.h"

uint16_t pkv_unicode_flags(uint32_t cp) {
    if (cp < 128) return pkv_unicode_ascii_flags[cp];
    if (cp >= 0x110000) return PKV_UFLAG_UNASSIGNED;
    /* last range whose start is <= cp */
    size_t lo = 0, hi = pkv_unicode_n_ranges;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (pkv_unicode_ranges[mid].start <= cp) lo = mid;
        else hi = mid;
    }
    return pkv_unicode_ranges[lo].flags;
}

size_t pkv_utf8_len(unsigned char lead) {
    static const unsigned char by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                                     1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[lead >> 4];
}

static int is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

uint32_t pkv_utf8_decode(const char *s, size_t len, size_t *used) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned char c = u[0];
    if (c < 0x80) {
        *used = 1;
        return c;
    }
    size_t need;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
        need = 2;
        cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        need = 3;
        cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        need = 4;
        cp = c & 0x07;
    } else { /* a stray continuation byte or 0xF8..0xFF */
        *used = 1;
        return PKV_UNICODE_REPLACEMENT;
    }
    if (len < need) {
        *used = 1;
        return PKV_UNICODE_REPLACEMENT;
    }
    for (size_t i = 1; i < need; i++) {
        if (!is_continuation(u[i])) {
            *used = 1;
            return PKV_UNICODE_REPLACEMENT;
        }
        cp = (cp << 6) | (u[i] & 0x3F);
    }
    *used = need;
    return cp;
}

size_t pkv_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
