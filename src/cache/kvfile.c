/* The saved-cache file: writing, and reading with every field checked
 * (docs/cache-file.md has the layout this code follows). */
#include "cache/kvfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc64.h"
#include "base/error.h"

static const char MAGIC[8] = {'P', 'K', 'V', 'C', 'A', 'C', 'H', 'E'};

/* Limits of the header's counts: the model loader's (docs/input-limits.md). */
enum { MAX_LAYERS = 4096, MAX_HEADS = 4096, MAX_HEAD_DIM = 1 << 16, MAX_COUNT = 1 << 30 };

/* ------------------------------------------------------------ writing */

typedef struct {
    FILE *fp;
    pkv_crc64_table tb;
    uint64_t crc;
    bool failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (w->failed || n == 0) return;
    if (fwrite(p, 1, n, w->fp) != n) w->failed = true;
    w->crc = pkv_crc64_update(&w->tb, w->crc, p, n);
}

static void put_u32(writer *w, uint32_t v) { put(w, &v, sizeof v); } /* little-endian host (docs/engine.md §1) */
static void put_u64(writer *w, uint64_t v) { put(w, &v, sizeof v); }

static uint64_t head_block_bytes(const pkv_kv_layer *L, int n_rows) {
    return 4 + (uint64_t)n_rows * (sizeof(int32_t) + (uint64_t)L->k_row + L->v_row);
}

static uint64_t file_bytes(const pkv_kvcache *c, const pkv_kvfile_meta *m, size_t press_len, size_t label_len) {
    uint64_t n = PKV_KVFILE_HEADER_BYTES + press_len + label_len + 4 * (uint64_t)m->n_pos + 4 * (uint64_t)m->n_vocab;
    for (int l = 0; l < c->n_layers; l++) {
        const pkv_kv_layer *L = &c->layers[l];
        n += 8;
        for (int h = 0; h < L->n_heads; h++) n += head_block_bytes(L, L->heads[h].n_rows);
    }
    return n + 8; /* the checksum */
}

static int64_t total_rows(const pkv_kvcache *c) {
    int64_t n = 0;
    for (int l = 0; l < c->n_layers; l++) n += pkv_kvcache_layer_rows(c, l);
    return n;
}

int pkv_kvfile_write(const char *path, const pkv_kvcache *c, const pkv_kvfile_meta *m, pkv_error *err) {
    const char *press = m->press ? m->press : "none", *label = m->label ? m->label : "";
    size_t press_len = strlen(press), label_len = strlen(label);
    if (press_len > PKV_KVFILE_MAX_TEXT || label_len > PKV_KVFILE_MAX_TEXT)
        return pkv_fail(err, PKV_ERR_ARG, "%s: the press text (%zu bytes) and the label (%zu) may have %d bytes each",
                        path, press_len, label_len, PKV_KVFILE_MAX_TEXT);
    for (const char *t = press; *t; t++)
        if ((unsigned char)*t < 0x20 || *t == 0x7f)
            return pkv_fail(err, PKV_ERR_ARG, "%s: the press text has a control character (0x%02x)", path, (unsigned char)*t);
    for (const char *t = label; *t; t++)
        if ((unsigned char)*t < 0x20 || *t == 0x7f)
            return pkv_fail(err, PKV_ERR_ARG, "%s: the label has a control character (0x%02x)", path, (unsigned char)*t);
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 8);
    if (!tmp) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".XXXXXX", 8);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return pkv_fail(err, PKV_ERR_IO, "%s: cannot create a file beside it: %s", path, strerror(e));
    }
    writer *w = calloc(1, sizeof *w);
    if (!w || !(w->fp = fdopen(fd, "wb"))) {
        close(fd);
        unlink(tmp);
        free(tmp);
        free(w);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    }
    pkv_crc64_init(&w->tb);

    put(w, MAGIC, sizeof MAGIC);
    put_u32(w, PKV_KVFILE_VERSION);
    put_u32(w, PKV_KVFILE_HEADER_BYTES);
    put_u64(w, file_bytes(c, m, press_len, label_len));
    put_u64(w, m->model_fingerprint);
    put_u32(w, (uint32_t)c->type_k);
    put_u32(w, (uint32_t)c->n_layers);
    put_u32(w, (uint32_t)(c->n_layers ? c->layers[0].n_heads_kv : 0));
    put_u32(w, (uint32_t)m->n_head);
    put_u32(w, (uint32_t)(c->n_layers ? c->layers[0].head_dim_k : 0));
    put_u32(w, (uint32_t)(c->n_layers ? c->layers[0].head_dim_v : 0));
    put_u32(w, (uint32_t)m->n_vocab);
    put_u32(w, (uint32_t)m->n_pos);
    put_u32(w, (uint32_t)press_len);
    put_u32(w, (uint32_t)label_len);
    put_u64(w, (uint64_t)total_rows(c));
    put_u64(w, pkv_kvcache_bytes(c));
    put_u32(w, (uint32_t)c->type_v);
    put_u32(w, 0); /* reserved */
    put(w, press, press_len);
    put(w, label, label_len);
    put(w, m->tokens, 4 * (size_t)m->n_pos);
    put(w, m->logits, 4 * (size_t)m->n_vocab);
    for (int l = 0; l < c->n_layers; l++) {
        const pkv_kv_layer *L = &c->layers[l];
        put_u32(w, (uint32_t)L->n_heads);
        put_u32(w, (uint32_t)L->sliding_window);
        for (int h = 0; h < L->n_heads; h++) {
            const pkv_kv_head *hd = &L->heads[h];
            put_u32(w, (uint32_t)hd->n_rows);
            put(w, hd->pos, (size_t)hd->n_rows * sizeof *hd->pos);
            put(w, hd->k, (size_t)hd->n_rows * L->k_row);
            put(w, hd->v, (size_t)hd->n_rows * L->v_row);
        }
    }
    uint64_t crc = w->crc;
    put_u64(w, crc);
    bool failed = w->failed;
    int e = failed ? errno : 0;
    if (fclose(w->fp) != 0 && !failed) {
        failed = true;
        e = errno;
    }
    free(w);
    if (!failed && rename(tmp, path) != 0) {
        failed = true;
        e = errno;
    }
    if (failed) {
        unlink(tmp);
        free(tmp);
        return pkv_fail(err, PKV_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    }
    free(tmp);
    return 0;
}

/* ------------------------------------------------------------ reading */

typedef struct {
    const uint8_t *p;
    size_t left;
    const char *path;
} cursor;

static uint32_t rd_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t rd_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The next n bytes (what names them in a message), or an error. */
static int take(cursor *c, uint64_t n, const char *what, const uint8_t **out, pkv_error *err) {
    *out = NULL;
    if (n > c->left)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: %s: %llu bytes needed, %zu left", c->path, what,
                        (unsigned long long)n, c->left);
    *out = c->p;
    c->p += n;
    c->left -= (size_t)n;
    return 0;
}

static int take_u32(cursor *c, const char *what, uint32_t *v, pkv_error *err) {
    const uint8_t *p = NULL;
    *v = 0;
    if (take(c, 4, what, &p, err)) return -1;
    *v = rd_u32(p);
    return 0;
}

static int check_text(const pkv_kvfile *f, const char *s, size_t n, const char *what, pkv_error *err) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return pkv_fail(err, PKV_ERR_FORMAT, "%s: %s: byte %zu is a control character (0x%02x)", f->path, what, i,
                            (unsigned char)s[i]);
    return 0;
}

/* True when any of n_rows rows of dim elements of type t is infinite or NaN
 * (all exponent bits set): every f16 or f32 element, or the fp16 scale of
 * every Q8_0/Q4_0 block (their quants are integers, always finite). */
static bool non_finite(const uint8_t *p, uint64_t n_rows, int dim, pkv_cache_type t) {
    uint64_t n = n_rows * (uint64_t)dim;
    if (t == PKV_CACHE_F32) {
        for (uint64_t i = 0; i < n; i++)
            if ((rd_u32(p + 4 * i) & 0x7f800000u) == 0x7f800000u) return true;
        return false;
    }
    /* f16: every element is a half; a block type: the half at each block's start */
    const uint64_t stride = t == PKV_CACHE_Q8_0 ? sizeof(block_q8_0) : t == PKV_CACHE_Q4_0 ? sizeof(block_q4_0) : 2;
    const uint64_t count = t == PKV_CACHE_F16 ? n : n / QK8_0; /* QK4_0 == QK8_0 == 32 */
    for (uint64_t i = 0; i < count; i++) {
        uint16_t b = (uint16_t)(p[stride * i] | p[stride * i + 1] << 8);
        if ((b & 0x7c00) == 0x7c00) return true;
    }
    return false;
}

/* One head's block: rows, positions (ascending, below n_pos), keys and values (finite). */
static int check_head(const pkv_kvfile *f, cursor *cur, int l, int h, int64_t *rows, uint64_t *bytes,
                      pkv_error *err) {
    char what[96];
    uint32_t n_rows;
    snprintf(what, sizeof what, "layer %d head %d: row count", l, h);
    if (take_u32(cur, what, &n_rows, err)) return -1;
    if (n_rows > (uint32_t)f->n_pos)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: layer %d head %d: %u rows, more than the %d tokens", f->path, l, h,
                        n_rows, f->n_pos);
    const uint8_t *pos = NULL, *k = NULL, *v = NULL;
    snprintf(what, sizeof what, "layer %d head %d: positions", l, h);
    if (take(cur, 4 * (uint64_t)n_rows, what, &pos, err)) return -1;
    snprintf(what, sizeof what, "layer %d head %d: keys", l, h);
    if (take(cur, (uint64_t)n_rows * f->k_row, what, &k, err)) return -1;
    snprintf(what, sizeof what, "layer %d head %d: values", l, h);
    if (take(cur, (uint64_t)n_rows * f->v_row, what, &v, err)) return -1;
    int64_t prev = -1;
    for (uint32_t r = 0; r < n_rows; r++) {
        int32_t p = (int32_t)rd_u32(pos + 4 * r);
        if (p <= prev || p >= f->n_pos)
            return pkv_fail(err, PKV_ERR_FORMAT,
                            "%s: layer %d head %d row %u: position %d is not above %lld and below %d (rows ascend)",
                            f->path, l, h, r, p, (long long)prev, f->n_pos);
        prev = p;
    }
    if (non_finite(k, n_rows, f->head_dim_k, f->type_k) || non_finite(v, n_rows, f->head_dim_v, f->type_v))
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: layer %d head %d: a key or value is not finite", f->path, l, h);
    *rows += n_rows;
    *bytes += (uint64_t)n_rows * (4 + (uint64_t)f->k_row + f->v_row);
    return 0;
}

static int header_count(const pkv_kvfile *f, const uint8_t *hdr, int off, const char *name, uint32_t lo, uint32_t hi,
                        int *out, pkv_error *err) {
    uint32_t v = rd_u32(hdr + off);
    if (v < lo || v > hi)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: header: %s is %u, outside [%u, %u]", f->path, name, v, lo, hi);
    *out = (int)v;
    return 0;
}

static int parse(pkv_kvfile *f, pkv_error *err) {
    const uint8_t *b = f->base;
    if (f->size < 16 || memcmp(b, MAGIC, sizeof MAGIC) != 0)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: not a promptkv saved cache (no 'PKVCACHE' magic in its %zu bytes)",
                        f->path, f->size);
    f->version = rd_u32(b + 8);
    if (f->version != 1 && f->version != PKV_KVFILE_VERSION)
        return pkv_fail(err, PKV_ERR_UNSUPPORTED, "%s: a saved cache of version %u; this build reads versions 1 and %d",
                        f->path, f->version, PKV_KVFILE_VERSION);
    if (f->size < PKV_KVFILE_HEADER_BYTES + 8)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: truncated: %zu bytes, shorter than the %d-byte header and checksum",
                        f->path, f->size, PKV_KVFILE_HEADER_BYTES);
    if (rd_u32(b + 12) != PKV_KVFILE_HEADER_BYTES)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: header: size %u, version %u has %d", f->path, rd_u32(b + 12),
                        f->version, PKV_KVFILE_HEADER_BYTES);
    uint64_t want = rd_u64(b + 16);
    if (want != f->size)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: %s: the header says %llu bytes, the file has %zu", f->path,
                        f->size < want ? "truncated" : "bytes after the end", (unsigned long long)want, f->size);
    pkv_crc64_table *tb = malloc(sizeof *tb);
    if (!tb) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    pkv_crc64_init(tb);
    uint64_t crc = pkv_crc64_update(tb, 0, b, f->size - 8), stored = rd_u64(b + f->size - 8);
    free(tb);
    if (crc != stored)
        return pkv_fail(err, PKV_ERR_FORMAT,
                        "%s: checksum mismatch (stored %016llx, computed %016llx): the file was altered or damaged",
                        f->path, (unsigned long long)stored, (unsigned long long)crc);

    f->model_fingerprint = rd_u64(b + 24);
    /* version 1: one type for keys and values at 32, f16 or f32; version 2:
     * the key type at 32, the value type at 88 (what was reserved) */
    uint32_t type_k = rd_u32(b + 32), type_v = f->version == 1 ? type_k : rd_u32(b + 88);
    uint32_t n_types = f->version == 1 ? 2 : PKV_CACHE_TYPE_COUNT;
    if (type_k >= n_types || type_v >= n_types)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: header: cache types %u and %u (0 f16, 1 f32%s)", f->path, type_k,
                        type_v, f->version == 1 ? " in version 1" : ", 2 q8_0, 3 q4_0");
    f->type_k = (pkv_cache_type)type_k;
    f->type_v = (pkv_cache_type)type_v;
    int press_len = 0, label_len = 0;
    if (header_count(f, b, 36, "layers", 1, MAX_LAYERS, &f->n_layers, err) ||
        header_count(f, b, 40, "KV heads", 1, MAX_HEADS, &f->n_head_kv, err) ||
        header_count(f, b, 44, "query heads", (uint32_t)f->n_head_kv, MAX_HEADS, &f->n_head, err) ||
        header_count(f, b, 48, "key head size", 1, MAX_HEAD_DIM, &f->head_dim_k, err) ||
        header_count(f, b, 52, "value head size", 1, MAX_HEAD_DIM, &f->head_dim_v, err) ||
        header_count(f, b, 56, "vocabulary", 1, MAX_COUNT, &f->n_vocab, err) ||
        header_count(f, b, 60, "tokens", 0, MAX_COUNT, &f->n_pos, err) ||
        header_count(f, b, 64, "press text bytes", 0, PKV_KVFILE_MAX_TEXT, &press_len, err) ||
        header_count(f, b, 68, "label bytes", 0, PKV_KVFILE_MAX_TEXT, &label_len, err))
        return -1;
    if (f->n_head % f->n_head_kv)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: header: %d query heads are not a multiple of %d KV heads", f->path,
                        f->n_head, f->n_head_kv);
    f->k_row = (size_t)pkv_cache_row_bytes(f->type_k, f->head_dim_k);
    f->v_row = (size_t)pkv_cache_row_bytes(f->type_v, f->head_dim_v);
    if (!f->k_row || !f->v_row)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: header: head sizes %d and %d do not fit %s keys and %s values "
                        "(blocks of 32)", f->path, f->head_dim_k, f->head_dim_v, pkv_cache_type_name(f->type_k),
                        pkv_cache_type_name(f->type_v));
    f->rows = (int64_t)rd_u64(b + 72);
    f->cache_bytes = rd_u64(b + 80);

    cursor cur = {b + PKV_KVFILE_HEADER_BYTES, f->size - PKV_KVFILE_HEADER_BYTES - 8, f->path};
    const uint8_t *p = NULL;
    if (take(&cur, (uint64_t)press_len, "press text", &p, err)) return -1;
    f->press = (const char *)p;
    f->press_len = (size_t)press_len;
    if (take(&cur, (uint64_t)label_len, "label", &p, err)) return -1;
    f->label = (const char *)p;
    f->label_len = (size_t)label_len;
    if (check_text(f, f->press, f->press_len, "press text", err) || check_text(f, f->label, f->label_len, "label", err))
        return -1;
    if (take(&cur, 4 * (uint64_t)f->n_pos, "tokens", &f->tokens, err)) return -1;
    for (int i = 0; i < f->n_pos; i++) {
        int32_t t = pkv_kvfile_token(f, i);
        if (t < 0 || t >= f->n_vocab)
            return pkv_fail(err, PKV_ERR_FORMAT, "%s: token %d is %d, outside the vocabulary [0, %d)", f->path, i, t,
                            f->n_vocab);
    }
    if (take(&cur, 4 * (uint64_t)f->n_vocab, "logits", &f->logits, err)) return -1;
    f->layers = cur.p;
    int64_t rows = 0;
    uint64_t bytes = 0;
    for (int l = 0; l < f->n_layers; l++) {
        uint32_t n_heads, window;
        char what[64];
        snprintf(what, sizeof what, "layer %d: head count", l);
        if (take_u32(&cur, what, &n_heads, err)) return -1;
        snprintf(what, sizeof what, "layer %d: sliding window", l);
        if (take_u32(&cur, what, &window, err)) return -1;
        if (window > MAX_COUNT)
            return pkv_fail(err, PKV_ERR_FORMAT, "%s: layer %d: sliding window %u is over 2^30", f->path, l, window);
        /* a per-query-head press splits a full layer into the query heads (docs/design.md "The cache layout") */
        if (n_heads != (uint32_t)f->n_head_kv && (window || n_heads != (uint32_t)f->n_head))
            return pkv_fail(err, PKV_ERR_FORMAT, "%s: layer %d: %u heads; the model has %d KV heads (and %d query heads "
                            "for a full layer split per query head)", f->path, l, n_heads, f->n_head_kv, f->n_head);
        for (int h = 0; h < (int)n_heads; h++)
            if (check_head(f, &cur, l, h, &rows, &bytes, err)) return -1;
    }
    if (cur.left)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: %zu bytes between the last layer and the checksum", f->path, cur.left);
    if (rows != f->rows || bytes != f->cache_bytes)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: header: %lld rows of %llu bytes, the layers hold %lld of %llu", f->path,
                        (long long)f->rows, (unsigned long long)f->cache_bytes, (long long)rows,
                        (unsigned long long)bytes);
    return 0;
}

static void set_path(pkv_kvfile *f, const char *path) { snprintf(f->path, sizeof f->path, "%s", path ? path : "?"); }

int pkv_kvfile_open_memory(pkv_kvfile *f, const void *data, size_t size, const char *name, pkv_error *err) {
    memset(f, 0, sizeof *f);
    set_path(f, name);
    if (!data && size) return pkv_fail(err, PKV_ERR_ARG, "%s: NULL buffer", f->path);
    f->base = data;
    f->size = size;
    if (!parse(f, err)) return 0;
    memset(f, 0, sizeof *f);
    return -1;
}

int pkv_kvfile_open(pkv_kvfile *f, const char *path, pkv_error *err) {
    memset(f, 0, sizeof *f);
    set_path(f, path);
    /* O_NONBLOCK: a FIFO must not wait for a writer (refused below as not a regular file) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return pkv_fail(err, PKV_ERR_IO, "%s: cannot open: %s", f->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return pkv_fail(err, PKV_ERR_IO, "%s: not a regular file (a saved cache is a file)", f->path);
    }
    if (st.st_size == 0) {
        close(fd);
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: not a promptkv saved cache: the file is empty", f->path);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return pkv_fail(err, PKV_ERR_IO, "%s: cannot map %lld bytes: %s", f->path, (long long)st.st_size, strerror(e));
    f->base = map;
    f->size = (size_t)st.st_size;
    f->mapped = true;
    if (!parse(f, err)) return 0;
    pkv_kvfile_close(f);
    return -1;
}

void pkv_kvfile_close(pkv_kvfile *f) {
    if (f->mapped) munmap((void *)f->base, f->size);
    memset(f, 0, sizeof *f);
}

int32_t pkv_kvfile_token(const pkv_kvfile *f, int i) { return (int32_t)rd_u32(f->tokens + 4 * (size_t)i); }

void pkv_kvfile_read_logits(const pkv_kvfile *f, float *out) { memcpy(out, f->logits, 4 * (size_t)f->n_vocab); }

int pkv_kvfile_read_cache(const pkv_kvfile *f, pkv_kvcache *c, pkv_error *err) {
    if (c->n_layers != f->n_layers || c->type_k != f->type_k || c->type_v != f->type_v ||
        c->layers[0].n_heads_kv != f->n_head_kv ||
        c->layers[0].head_dim_k != f->head_dim_k || c->layers[0].head_dim_v != f->head_dim_v)
        return pkv_fail(err, PKV_ERR_ARG, "%s: the cache's shape differs from the file's", f->path);
    pkv_kvcache_clear(c);
    /* parse() checked every count and length below */
    const uint8_t *p = f->layers;
    for (int l = 0; l < f->n_layers; l++) {
        uint32_t n_heads = rd_u32(p), window = rd_u32(p + 4);
        p += 8;
        if ((int)window != c->layers[l].sliding_window)
            return pkv_fail(err, PKV_ERR_ARG, "%s: layer %d: sliding window %u; this model's is %d", f->path, l, window,
                            c->layers[l].sliding_window);
        if (pkv_kvcache_set_n_heads(c, l, (int)n_heads, err)) return -1;
        for (int h = 0; h < (int)n_heads; h++) {
            int n_rows = (int)rd_u32(p);
            const uint8_t *pos = p + 4, *k = pos + 4 * (size_t)n_rows, *v = k + (size_t)n_rows * f->k_row;
            p = v + (size_t)n_rows * f->v_row;
            if (pkv_kvcache_put_rows(c, l, h, n_rows, k, v, pos, err)) return -1;
        }
    }
    return 0;
}
