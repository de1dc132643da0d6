/*
 * libFuzzer target for the saved-cache reader (src/cache/kvfile.c,
 * docs/cache-file.md). An input's size field and checksum are written over
 * before it is parsed (unless the first byte of the input asks otherwise), so
 * that the structural checks behind the checksum are what is fuzzed: a file
 * crafted with a correct checksum. A parsed file is then loaded into a cache
 * of its own shape. The contract: a failure is one line that starts with the
 * file's name; a success holds the rows and bytes its header says.
 *
 * Build and run: make fuzz-cachefile && build/fuzz_cachefile fuzz/corpus-work/cachefile fuzz/corpus-cachefile
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc64.h"
#include "cache/kvfile.h"

#define FUZZ_NAME "fuzz.pkvc"

#define EXPECT(cond)                                                                           \
    do {                                                                                       \
        if (!(cond)) __builtin_trap();                                                         \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    bool reseal = data[0] != 0xff; /* 0xff: the input as it is (the checksum usually refuses it) */
    uint8_t *b = malloc(size);
    if (!b) return 0;
    memcpy(b, data, size);
    if (reseal && size >= PKV_KVFILE_HEADER_BYTES + 8) {
        uint64_t n = size;
        memcpy(b + 16, &n, 8);
        pkv_crc64_table *tb = malloc(sizeof *tb);
        if (tb) {
            pkv_crc64_init(tb);
            uint64_t crc = pkv_crc64_update(tb, 0, b, size - 8);
            memcpy(b + size - 8, &crc, 8);
            free(tb);
        }
    }
    pkv_kvfile f;
    pkv_error err;
    if (pkv_kvfile_open_memory(&f, b, size, FUZZ_NAME, &err) != 0) {
        EXPECT(err.code == PKV_ERR_FORMAT || err.code == PKV_ERR_UNSUPPORTED || err.code == PKV_ERR_NOMEM);
        EXPECT(strncmp(err.msg, FUZZ_NAME ": ", strlen(FUZZ_NAME) + 2) == 0);
        EXPECT(strchr(err.msg, '\n') == NULL);
        free(b);
        return 0;
    }
    EXPECT(f.press_len <= PKV_KVFILE_MAX_TEXT && f.label_len <= PKV_KVFILE_MAX_TEXT);
    for (int i = 0; i < f.n_pos; i++) EXPECT(pkv_kvfile_token(&f, i) >= 0 && pkv_kvfile_token(&f, i) < f.n_vocab);
    /* the cache of the file's shape, every layer a full one but those the file says slide */
    if ((uint64_t)f.n_layers * f.n_head * (f.head_dim_k + f.head_dim_v) < (1u << 24)) {
        int *windows = calloc((size_t)f.n_layers, sizeof *windows);
        const uint8_t *p = f.layers;
        for (int l = 0; windows && l < f.n_layers; l++) {
            uint32_t nh, w;
            memcpy(&nh, p, 4);
            memcpy(&w, p + 4, 4);
            windows[l] = (int)w;
            p += 8;
            for (uint32_t h = 0; h < nh; h++) {
                uint32_t rows;
                memcpy(&rows, p, 4);
                p += 4 + (size_t)rows * (4 + f.k_row + f.v_row);
            }
        }
        pkv_kvcache c;
        if (windows && pkv_kvcache_init(&c, f.type_k, f.type_v, f.n_layers, f.n_head_kv, f.head_dim_k, f.head_dim_v,
                                        windows, &err) == 0) {
            if (pkv_kvfile_read_cache(&f, &c, &err) == 0) {
                int64_t rows = 0;
                for (int l = 0; l < c.n_layers; l++) rows += pkv_kvcache_layer_rows(&c, l);
                EXPECT(rows == f.rows);
                EXPECT(pkv_kvcache_bytes(&c) == f.cache_bytes);
            }
            pkv_kvcache_free(&c);
        }
        free(windows);
    }
    pkv_kvfile_close(&f);
    free(b);
    return 0;
}
