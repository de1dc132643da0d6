/*
 * The saved-cache file (docs/cache-file.md): a versioned header, the
 * fingerprint of the model file, the tokens, the press text, the last
 * logits, every layer's heads with their rows and positions, and a CRC-64 of
 * all of it. Written to a temporary file and renamed, so a reader never sees
 * half a file; read through mmap, and every count, length and value checked
 * against the bytes that remain before anything is copied into a cache.
 *
 * The cache layer owns the rows; what the rows belong to (the tokens, the
 * logits, the model's fingerprint) the engine passes in and checks on load.
 */
#ifndef PKV_KVFILE_H
#define PKV_KVFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/kvcache.h"
#include "promptkv.h"

/* Version 2 stores the key and the value types apart (offsets 32 and 88);
 * version 1 files (one type for both, f16 or f32) are still read. */
enum {
    PKV_KVFILE_VERSION = 2,
    PKV_KVFILE_HEADER_BYTES = 96,
    PKV_KVFILE_MAX_TEXT = 4096, /* bytes of the press text and of the label, each */
};

/* What the engine saves beside the rows. */
typedef struct {
    uint64_t model_fingerprint;
    int n_head;             /* the model's query heads: a layer split per query head has this many */
    int n_vocab;
    int n_pos;              /* logical length; also the number of tokens */
    const int32_t *tokens;  /* [n_pos] */
    const float *logits;    /* [n_vocab]: those of the last token */
    const char *press;      /* NUL-terminated, at most PKV_KVFILE_MAX_TEXT bytes */
    const char *label;
} pkv_kvfile_meta;

/* Writes c and meta to path (through path.XXXXXX and a rename). */
int pkv_kvfile_write(const char *path, const pkv_kvcache *c, const pkv_kvfile_meta *meta, pkv_error *err);

/* A saved file, mapped and checked: the header's fields, and pointers into
 * the mapping for the rest. */
typedef struct {
    const uint8_t *base;
    size_t size;
    bool mapped;
    char path[256];         /* for messages */

    uint32_t version;
    uint64_t model_fingerprint;
    pkv_cache_type type_k, type_v;
    size_t k_row, v_row;    /* bytes of one key row, one value row */
    int n_layers, n_head, n_head_kv, head_dim_k, head_dim_v, n_vocab, n_pos;
    int64_t rows;           /* over all layers and heads */
    uint64_t cache_bytes;   /* keys, values and positions of those rows */
    const char *press;      /* not NUL-terminated: press_len bytes */
    size_t press_len;
    const char *label;
    size_t label_len;
    const uint8_t *tokens;  /* [n_pos] little-endian int32 (unaligned) */
    const uint8_t *logits;  /* [n_vocab] f32 */
    const uint8_t *layers;  /* the first layer's block */
} pkv_kvfile;

/* Maps path and checks it whole: magic, version, length, checksum, then
 * every count against the bytes that remain, positions ascending and below
 * n_pos, keys and values finite (the scales of Q8_0/Q4_0 rows), head counts
 * among n_head_kv and n_head. The error names the file and the field. */
int pkv_kvfile_open(pkv_kvfile *f, const char *path, pkv_error *err);
/* The same on bytes the caller keeps alive (tests, fuzzing). */
int pkv_kvfile_open_memory(pkv_kvfile *f, const void *data, size_t size, const char *name, pkv_error *err);
void pkv_kvfile_close(pkv_kvfile *f);

/* Token i and the logits, decoded. */
int32_t pkv_kvfile_token(const pkv_kvfile *f, int i);
void pkv_kvfile_read_logits(const pkv_kvfile *f, float *out);

/* Replaces c's rows with the file's (c has the file's shape and types: the
 * engine checks that first; the error names a mismatch anyway). */
int pkv_kvfile_read_cache(const pkv_kvfile *f, pkv_kvcache *c, pkv_error *err);

#endif
