/*
 * GGUF writer (docs/engine.md §1): an in-memory builder that serialises
 * key/value pairs as they are added and copies tensor data; saving lays out
 * version 3 with ggml's dense tensor order (each tensor's offset is the
 * padded sum of those before it).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "format/gguf.h"
#include "format/gguf_format.h"

/* ------------------------------------------------------------ writer */

typedef struct {
    uint8_t *data;
    size_t len, cap;
} byte_buf;

typedef struct {
    char name[GGUF_MAX_NAME];
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint8_t *data;
    uint64_t nbytes;
} writer_tensor;

struct gguf_writer {
    byte_buf kv_bytes; /* serialised kv pairs, in insertion order */
    uint64_t n_kv;
    char **keys;       /* for duplicate detection */
    writer_tensor *tensors;
    uint64_t n_tensors, cap_tensors;
    uint32_t alignment;
    /* the first error of a void write_* call, reported by save */
    pkv_status status;
    char message[256];
};

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    free(w->kv_bytes.data);
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].data);
    free(w->tensors);
    free(w);
}

__attribute__((format(printf, 3, 4))) static void writer_fail(gguf_writer *w, pkv_status code,
                                                              const char *fmt, ...) {
    if (w->status != PKV_OK) return; /* keep the first error */
    w->status = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->message, sizeof w->message, fmt, ap);
    va_end(ap);
}

static bool buf_reserve(byte_buf *b, size_t extra) {
    if (extra <= b->cap - b->len) return true;
    size_t need;
    if (__builtin_add_overflow(b->len, extra, &need)) return false;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return false;
        cap *= 2;
    }
    uint8_t *p = realloc(b->data, cap);
    if (!p) return false;
    b->data = p;
    b->cap = cap;
    return true;
}

static void put_bytes(gguf_writer *w, const void *p, size_t n) {
    if (w->status != PKV_OK) return;
    if (!buf_reserve(&w->kv_bytes, n)) {
        writer_fail(w, PKV_ERR_NOMEM, "gguf writer: out of memory");
        return;
    }
    if (n) memcpy(w->kv_bytes.data + w->kv_bytes.len, p, n);
    w->kv_bytes.len += n;
}

static void store_le(uint8_t *p, uint64_t v, unsigned n) {
    for (unsigned i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le(gguf_writer *w, uint64_t v, unsigned n) {
    uint8_t b[8];
    store_le(b, v, n);
    put_bytes(w, b, n);
}

static void put_f32(gguf_writer *w, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    put_le(w, bits, 4);
}

static void put_string(gguf_writer *w, const char *s) {
    size_t n = strlen(s);
    put_le(w, n, 8);
    put_bytes(w, s, n);
}

/* Starts a kv pair: validates the key, records it, writes it and the type.
 * Returns false (error recorded) if the pair must not be written. */
static bool begin_kv(gguf_writer *w, const char *key, gguf_vtype type) {
    if (w->status != PKV_OK) return false;
    if (!key || !*key || strlen(key) > GGUF_MAX_KEY) {
        writer_fail(w, PKV_ERR_ARG, "gguf writer: key must have 1..%d bytes", GGUF_MAX_KEY);
        return false;
    }
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) {
            writer_fail(w, PKV_ERR_ARG, "gguf writer: duplicate key '%s'", key);
            return false;
        }
    bool is_alignment = strcmp(key, "general.alignment") == 0;
    if (is_alignment && type != GGUF_VT_UINT32) {
        writer_fail(w, PKV_ERR_ARG, "gguf writer: general.alignment must be UINT32");
        return false;
    }
    char **keys = realloc(w->keys, (size_t)(w->n_kv + 1) * sizeof *keys);
    char *copy = keys ? strdup(key) : NULL;
    if (keys) w->keys = keys;
    if (!copy) {
        writer_fail(w, PKV_ERR_NOMEM, "gguf writer: out of memory");
        return false;
    }
    w->keys[w->n_kv++] = copy;
    put_string(w, key);
    put_le(w, (uint64_t)type, 4);
    return w->status == PKV_OK;
}

void gguf_write_u32(gguf_writer *w, const char *key, uint32_t v) {
    /* general.alignment also sets the layout, like gguf_writer_set_alignment */
    if (key && strcmp(key, "general.alignment") == 0 && !gguf_is_pow2(v)) {
        writer_fail(w, PKV_ERR_ARG, "gguf writer: alignment %u is not a power of two", v);
        return;
    }
    if (!begin_kv(w, key, GGUF_VT_UINT32)) return;
    if (strcmp(key, "general.alignment") == 0) w->alignment = v;
    put_le(w, v, 4);
}

void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment) {
    gguf_write_u32(w, "general.alignment", alignment);
}

void gguf_write_i32(gguf_writer *w, const char *key, int32_t v) {
    if (begin_kv(w, key, GGUF_VT_INT32)) put_le(w, (uint32_t)v, 4);
}

void gguf_write_u64(gguf_writer *w, const char *key, uint64_t v) {
    if (begin_kv(w, key, GGUF_VT_UINT64)) put_le(w, v, 8);
}

void gguf_write_f32(gguf_writer *w, const char *key, float v) {
    if (begin_kv(w, key, GGUF_VT_FLOAT32)) put_f32(w, v);
}

void gguf_write_bool(gguf_writer *w, const char *key, bool v) {
    if (begin_kv(w, key, GGUF_VT_BOOL)) put_le(w, v ? 1 : 0, 1);
}

void gguf_write_str(gguf_writer *w, const char *key, const char *v) {
    if (!v) {
        writer_fail(w, PKV_ERR_ARG, "gguf writer: NULL string for key '%s'", key ? key : "");
        return;
    }
    if (begin_kv(w, key, GGUF_VT_STRING)) put_string(w, v);
}

static bool begin_array(gguf_writer *w, const char *key, gguf_vtype elem, const void *v,
                        uint64_t n) {
    if (n > 0 && !v) {
        writer_fail(w, PKV_ERR_ARG, "gguf writer: NULL array for key '%s'", key ? key : "");
        return false;
    }
    if (!begin_kv(w, key, GGUF_VT_ARRAY)) return false;
    put_le(w, (uint64_t)elem, 4);
    put_le(w, n, 8);
    return w->status == PKV_OK;
}

void gguf_write_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    for (uint64_t i = 0; v && i < n; i++)
        if (!v[i]) {
            writer_fail(w, PKV_ERR_ARG, "gguf writer: NULL string %llu in array '%s'",
                        (unsigned long long)i, key ? key : "");
            return;
        }
    if (!begin_array(w, key, GGUF_VT_STRING, v, n)) return;
    for (uint64_t i = 0; i < n; i++) put_string(w, v[i]);
}

void gguf_write_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n) {
    if (!begin_array(w, key, GGUF_VT_FLOAT32, v, n)) return;
    for (uint64_t i = 0; i < n; i++) put_f32(w, v[i]);
}

void gguf_write_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n) {
    if (!begin_array(w, key, GGUF_VT_INT32, v, n)) return;
    for (uint64_t i = 0; i < n; i++) put_le(w, (uint32_t)v[i], 4);
}

static void put_str_n(gguf_writer *w, gguf_str s) {
    put_le(w, s.len, 8);
    put_bytes(w, s.ptr, (size_t)s.len);
}

void gguf_write_value(gguf_writer *w, const char *key, const gguf_value *v) {
    if (!v || (unsigned)v->type >= GGUF_VT_COUNT) {
        writer_fail(w, PKV_ERR_ARG, "gguf writer: bad value for key '%s'", key ? key : "");
        return;
    }
    if (v->type == GGUF_VT_UINT32 && key && strcmp(key, "general.alignment") == 0) {
        gguf_write_u32(w, key, (uint32_t)v->v.u);
        return;
    }
    if (v->type == GGUF_VT_STRING) {
        if (begin_kv(w, key, GGUF_VT_STRING)) put_str_n(w, v->v.str);
        return;
    }
    if (v->type != GGUF_VT_ARRAY) {
        if (!begin_kv(w, key, v->type)) return;
        uint64_t bits = gguf_vtype_is_float(v->type) ? 0 : gguf_vtype_is_signed(v->type) ? (uint64_t)v->v.i : v->v.u;
        if (v->type == GGUF_VT_FLOAT32) {
            put_f32(w, (float)v->v.f);
            return;
        }
        if (v->type == GGUF_VT_FLOAT64) memcpy(&bits, &v->v.f, 8);
        put_le(w, bits, gguf_vtype_size[v->type]);
        return;
    }
    gguf_vtype elem = v->v.arr.elem_type;
    uint64_t n = v->v.arr.count;
    if ((unsigned)elem >= GGUF_VT_COUNT || elem == GGUF_VT_ARRAY ||
        (n > 0 && (elem == GGUF_VT_STRING ? !v->v.arr.strs : !v->v.arr.data))) {
        writer_fail(w, PKV_ERR_ARG, "gguf writer: bad array for key '%s'", key ? key : "");
        return;
    }
    if (!begin_array(w, key, elem, elem == GGUF_VT_STRING ? (const void *)v->v.arr.strs : v->v.arr.data, n))
        return;
    if (elem == GGUF_VT_STRING)
        for (uint64_t i = 0; i < n; i++) put_str_n(w, v->v.arr.strs[i]);
    else if (n > SIZE_MAX / gguf_vtype_size[elem])
        writer_fail(w, PKV_ERR_NOMEM, "gguf writer: array '%s' too large", key);
    else
        put_bytes(w, v->v.arr.data, (size_t)(n * gguf_vtype_size[elem])); /* packed little-endian, as read */
}

int gguf_writer_add_file(gguf_writer *w, const gguf_file *f, const char *omit_key, pkv_error *err) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (!omit_key || strcmp(f->kv[i].key, omit_key) != 0) gguf_write_value(w, f->kv[i].key, &f->kv[i].value);
    if (w->status != PKV_OK) return pkv_fail(err, w->status, "%s", w->message);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (gguf_write_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes, err)) return -1;
    }
    return 0;
}

/* Checks a tensor the way the reader will, so the writer never produces a
 * file its own reader rejects. */
static int check_tensor(const gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                        const uint64_t *ne, uint64_t nbytes, pkv_error *err) {
    if (!name || strlen(name) >= GGUF_MAX_NAME)
        return pkv_fail(err, PKV_ERR_ARG, "gguf writer: tensor name must be shorter than %d bytes",
                        GGUF_MAX_NAME);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return pkv_fail(err, PKV_ERR_ARG, "gguf writer: duplicate tensor name '%s'", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || !ne)
        return pkv_fail(err, PKV_ERR_ARG, "gguf writer: tensor '%s': n_dims %u outside 1..%d",
                        name, n_dims, GGUF_MAX_DIMS);
    if (type >= GGML_TYPE_COUNT || gguf_type_table[type].block_elems == 0)
        return pkv_fail(err, PKV_ERR_ARG, "gguf writer: tensor '%s': unknown type %u", name, type);
    uint64_t nelements = 1, expected;
    for (uint32_t j = 0; j < n_dims; j++)
        if (ne[j] > (uint64_t)INT64_MAX || __builtin_mul_overflow(nelements, ne[j], &nelements) ||
            nelements > (uint64_t)INT64_MAX)
            return pkv_fail(err, PKV_ERR_ARG, "gguf writer: tensor '%s': dims overflow", name);
    if (!gguf_tensor_nbytes(type, ne[0], nelements, &expected) || expected != nbytes)
        return pkv_fail(err, PKV_ERR_ARG,
                        "gguf writer: tensor '%s': %llu bytes given, shape and type %s need %s",
                        name, (unsigned long long)nbytes, gguf_type_table[type].name,
                        ne[0] % gguf_type_table[type].block_elems ? "whole blocks per row"
                                                              : "a different size");
    return 0;
}

int gguf_write_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                      const uint64_t *ne, const void *data, uint64_t nbytes, pkv_error *err) {
    if (check_tensor(w, name, type, n_dims, ne, nbytes, err)) return -1;
    if (nbytes > 0 && !data)
        return pkv_fail(err, PKV_ERR_ARG, "gguf writer: tensor '%s': NULL data", name);
    if (nbytes > SIZE_MAX)
        return pkv_fail(err, PKV_ERR_NOMEM, "gguf writer: tensor '%s' too large", name);
    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        writer_tensor *p = realloc(w->tensors, (size_t)cap * sizeof *p);
        if (!p) return pkv_fail(err, PKV_ERR_NOMEM, "gguf writer: out of memory");
        w->tensors = p;
        w->cap_tensors = cap;
    }
    writer_tensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!t->data) return pkv_fail(err, PKV_ERR_NOMEM, "gguf writer: out of memory for '%s'", name);
    if (nbytes) memcpy(t->data, data, (size_t)nbytes);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t j = 0; j < GGUF_MAX_DIMS; j++) t->ne[j] = j < n_dims ? ne[j] : 1;
    t->nbytes = nbytes;
    w->n_tensors++;
    return 0;
}

/* Output: either a FILE or a memory buffer of known size. */
typedef struct {
    FILE *fp;
    uint8_t *mem;
    uint64_t pos;
    bool failed;
} sink;

static void emit(sink *s, const void *p, size_t n) {
    if (s->failed || n == 0) return;
    if (s->fp) s->failed = fwrite(p, 1, n, s->fp) != n;
    else memcpy(s->mem + s->pos, p, n);
    s->pos += n;
}

static void emit_le(sink *s, uint64_t v, unsigned n) {
    uint8_t b[8];
    store_le(b, v, n);
    emit(s, b, n);
}

/* x rounded up to the alignment; writer_layout has checked that the padded
 * total fits, so this cannot overflow. */
static uint64_t pad_to(uint64_t x, uint32_t alignment) {
    return (x + alignment - 1) & ~(uint64_t)(alignment - 1);
}

static void emit_padding(sink *s, uint32_t alignment) {
    static const uint8_t zeros[64];
    uint64_t target = pad_to(s->pos, alignment);
    while (s->pos < target) {
        uint64_t n = target - s->pos;
        emit(s, zeros, n < sizeof zeros ? (size_t)n : sizeof zeros);
    }
}

/* Total file size for the current contents; false on overflow. */
static bool writer_layout(const gguf_writer *w, uint64_t *total) {
    uint64_t pos = 4 + 4 + 8 + 8 + w->kv_bytes.len;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        pos += 8 + strlen(w->tensors[i].name) + 4 + 8ull * w->tensors[i].n_dims + 4 + 8;
    if (!gguf_align_up(pos, w->alignment, &pos)) return false;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (__builtin_add_overflow(pos, w->tensors[i].nbytes, &pos) ||
            !gguf_align_up(pos, w->alignment, &pos))
            return false;
    *total = pos;
    return true;
}

static void emit_file(const gguf_writer *w, sink *s) {
    emit_le(s, GGUF_MAGIC_LE, 4);
    emit_le(s, GGUF_VERSION_MAX, 4);
    emit_le(s, w->n_tensors, 8);
    emit_le(s, w->n_kv, 8);
    emit(s, w->kv_bytes.data, w->kv_bytes.len);
    uint64_t offset = 0; /* dense, in info order, each padded (ggml's layout, §1.4) */
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        size_t name_len = strlen(t->name);
        emit_le(s, name_len, 8);
        emit(s, t->name, name_len);
        emit_le(s, t->n_dims, 4);
        for (uint32_t j = 0; j < t->n_dims; j++) emit_le(s, t->ne[j], 8);
        emit_le(s, t->type, 4);
        emit_le(s, offset, 8);
        offset = pad_to(offset + t->nbytes, w->alignment);
    }
    emit_padding(s, w->alignment);
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        emit(s, w->tensors[i].data, (size_t)w->tensors[i].nbytes);
        emit_padding(s, w->alignment);
    }
}

static int writer_check(const gguf_writer *w, uint64_t *total, pkv_error *err) {
    if (w->status != PKV_OK) return pkv_fail(err, w->status, "%s", w->message);
    if (!writer_layout(w, total) || *total > SIZE_MAX)
        return pkv_fail(err, PKV_ERR_LIMIT, "gguf writer: file size overflows");
    return 0;
}

int gguf_writer_to_memory(gguf_writer *w, uint8_t **out, size_t *out_size, pkv_error *err) {
    uint64_t total;
    if (writer_check(w, &total, err)) return -1;
    uint8_t *mem = malloc(total ? (size_t)total : 1);
    if (!mem) return pkv_fail(err, PKV_ERR_NOMEM, "gguf writer: out of memory for %llu bytes",
                              (unsigned long long)total);
    sink s = {.mem = mem};
    emit_file(w, &s);
    *out = mem;
    *out_size = (size_t)total;
    return 0;
}

int gguf_writer_save(gguf_writer *w, const char *path, pkv_error *err) {
    uint64_t total;
    if (writer_check(w, &total, err)) return -1;
    FILE *fp = fopen(path, "wb");
    if (!fp) return pkv_fail(err, PKV_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    sink s = {.fp = fp};
    emit_file(w, &s);
    bool ok = !s.failed && fflush(fp) == 0;
    int e = errno;
    if (fclose(fp) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        /* drop the partial file, but never a device or anything else that
         * was there before */
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) remove(path);
        return pkv_fail(err, PKV_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    return 0;
}
