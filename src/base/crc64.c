#include "base/crc64.h"

#include <string.h>

/* ECMA-182's polynomial 0x42F0E1EBA9EA3693, bit-reversed (the reflected form) */
#define POLY_REFLECTED 0xC96C5795D7870F42ull

void pkv_crc64_init(pkv_crc64_table *tb) {
    for (int b = 0; b < 256; b++) {
        uint64_t c = (uint64_t)b;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY_REFLECTED : c >> 1;
        tb->t[0][b] = c;
    }
    /* t[k][b]: the CRC of byte b followed by k zero bytes, for slicing by eight */
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++) tb->t[k][b] = (tb->t[k - 1][b] >> 8) ^ tb->t[0][tb->t[k - 1][b] & 0xff];
}

uint64_t pkv_crc64_update(const pkv_crc64_table *tb, uint64_t crc, const void *data, size_t len) {
    const unsigned char *p = data;
    crc = ~crc;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8); /* a little-endian host, as the GGUF reader assumes (docs/engine.md §1) */
        w ^= crc;
        crc = tb->t[7][w & 0xff] ^ tb->t[6][(w >> 8) & 0xff] ^ tb->t[5][(w >> 16) & 0xff] ^
              tb->t[4][(w >> 24) & 0xff] ^ tb->t[3][(w >> 32) & 0xff] ^ tb->t[2][(w >> 40) & 0xff] ^
              tb->t[1][(w >> 48) & 0xff] ^ tb->t[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = tb->t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}
