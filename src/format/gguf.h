/*
 * GGUF reading (mmap, every field validated) and writing.
 * Format: docs/engine.md §1 (ggml docs/gguf.md). Versions 2 and 3 are read
 * (identical for little-endian files); version 3 is written.
 *
 * The reader never trusts a count, length, offset or dimension: each is
 * checked against the bytes that remain before it is used, so a hostile file
 * cannot cause a crash, a hang or an allocation larger than the file itself.
 */
#ifndef PKV_GGUF_H
#define PKV_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf_types.h"
#include "promptkv.h"

enum {
    GGUF_MAX_DIMS = 4,
    GGUF_MAX_NAME = 64,        /* tensor names are < 64 bytes (ggml GGML_MAX_NAME incl. NUL) */
    GGUF_DEFAULT_ALIGNMENT = 32
};

/* A string inside the mapped file: not NUL-terminated. */
typedef struct {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct {
    gguf_vtype type;
    union {
        uint64_t u;   /* any unsigned integer type, widened; BOOL is 0/1 */
        int64_t i;    /* any signed integer type, widened */
        double f;     /* FLOAT32 / FLOAT64 */
        gguf_str str; /* STRING */
        struct {
            gguf_vtype elem_type; /* never ARRAY (nested arrays are rejected) */
            uint64_t count;
            const uint8_t *data;  /* packed elements in the file (for numbers) */
            gguf_str *strs;       /* STRING arrays: count entries, owned by gguf_file */
        } arr;
    } v;
} gguf_value;

typedef struct {
    char *key; /* NUL-terminated copy, owned by gguf_file */
    gguf_value value;
} gguf_kv;

typedef struct {
    char name[GGUF_MAX_NAME];
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] fastest; unused dims are 1 */
    uint32_t type;              /* ggml type id (quant.h) */
    uint64_t offset;            /* relative to the data section */
    uint64_t nbytes;
    const void *data;           /* points into the mapped file */
} gguf_tensor;

typedef struct {
    /* the mapping (or a caller-owned buffer for gguf_open_memory) */
    const uint8_t *base;
    size_t size;
    bool mapped;

    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset; /* absolute offset of the tensor data section */

    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;

    char path[256]; /* for messages */
} gguf_file;

/* Open and validate a file (mmap, read-only). On failure the error names the
 * file, the offending field and the limit, and *f is left closed. */
int gguf_open(gguf_file *f, const char *path, pkv_error *err);

/* Parse a buffer in memory (not copied; must outlive f). Used by the fuzzer
 * and by tests. name is used in messages. */
int gguf_open_memory(gguf_file *f, const void *data, size_t size, const char *name,
                     pkv_error *err);

void gguf_close(gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters. They return 0 if the key is present and convertible (any
 * integer type widens; values out of the target range are an error), 1 if the
 * key is absent (*out untouched), -1 on a type/range error (err filled). */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, pkv_error *err);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, pkv_error *err);
int gguf_get_f32(const gguf_file *f, const char *key, float *out, pkv_error *err);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, pkv_error *err);
/* Strings are returned as pointers into the file (not NUL-terminated). */
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, pkv_error *err);
/* Arrays: elem type checked by the caller through value.v.arr.elem_type. */
int gguf_get_arr(const gguf_file *f, const char *key, const gguf_value **out, pkv_error *err);

/* Element i of a numeric array, widened; caller guarantees i < count. */
int64_t gguf_arr_i64(const gguf_value *arr, uint64_t i);
double gguf_arr_f64(const gguf_value *arr, uint64_t i);

/* Copy a gguf_str into a NUL-terminated buffer (truncating). */
void gguf_str_copy(gguf_str s, char *buf, size_t buf_len);
bool gguf_str_eq(gguf_str s, const char *cstr);


/* ---------------------------------------------------------------- writer */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);

void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment);
void gguf_write_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_write_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_write_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_write_f32(gguf_writer *w, const char *key, float v);
void gguf_write_bool(gguf_writer *w, const char *key, bool v);
void gguf_write_str(gguf_writer *w, const char *key, const char *v);
/* Arrays: elements are copied. */
void gguf_write_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
void gguf_write_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
void gguf_write_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
/* Any value as the reader returns it (arrays included; numeric array data is
 * copied as stored): rewriting a file. */
void gguf_write_value(gguf_writer *w, const char *key, const gguf_value *v);
/* Copies f's pairs (all but omit_key, which may be NULL) and tensors into w,
 * the start of an edited copy of a file. */
int gguf_writer_add_file(gguf_writer *w, const gguf_file *f, const char *omit_key, pkv_error *err);
/* A tensor: data (already in `type`'s block format, nbytes of it) is copied. */
int gguf_write_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                      const uint64_t *ne, const void *data, uint64_t nbytes, pkv_error *err);
/* Write the whole file (header, kv, tensor infos, aligned data). */
int gguf_writer_save(gguf_writer *w, const char *path, pkv_error *err);
/* Or into a malloc'd buffer (caller frees). */
int gguf_writer_to_memory(gguf_writer *w, uint8_t **out, size_t *out_size, pkv_error *err);

#endif
