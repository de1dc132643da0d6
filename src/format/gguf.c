/*
 * GGUF reader (docs/engine.md §1); the writer is gguf_write.c.
 *
 * Reader: the whole file is mapped read-only; keys, string arrays and tensor
 * infos are copied into small owned arrays, everything else points into the
 * mapping. Every length, count, dimension and offset is checked against the
 * bytes that remain before it is used, with overflow-checked arithmetic, and
 * every allocation is bounded by a small multiple of the input size.
 *
 * Writer: an in-memory builder that serialises key/value pairs as they are
 * added and copies tensor data; saving lays out version 3 with ggml's dense
 * tensor order (each tensor's offset is the padded sum of those before it).
 */
#include "format/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "format/gguf_format.h"

/* the format's facts: gguf_format.h */

/* ------------------------------------------------------------ little-endian loads */

static uint64_t load_le(const uint8_t *p, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int64_t sign_extend(uint64_t v, unsigned bytes) {
    if (bytes == 8) return (int64_t)v;
    uint64_t sign = 1ull << (8 * bytes - 1);
    return (int64_t)((v ^ sign) - sign);
}

static double load_float(const uint8_t *p, gguf_vtype t) {
    if (t == GGUF_VT_FLOAT32) {
        uint32_t bits = (uint32_t)load_le(p, 4);
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    uint64_t bits = load_le(p, 8);
    double d;
    memcpy(&d, &bits, 8);
    return d;
}

/* Decode one packed scalar of type t at p into a value. */
static void decode_scalar(const uint8_t *p, gguf_vtype t, gguf_value *out) {
    unsigned n = gguf_vtype_size[t];
    out->type = t;
    if (gguf_vtype_is_float(t)) out->v.f = load_float(p, t);
    else if (gguf_vtype_is_signed(t)) out->v.i = sign_extend(load_le(p, n), n);
    else out->v.u = load_le(p, n); /* unsigned and BOOL */
}

/* ------------------------------------------------------------ reader cursor */

typedef struct {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *file;  /* name for messages */
    char where[160];   /* the item being parsed: "header", "kv 7 'key'", "tensor 3 'name'" */
    pkv_error *err;
} cursor;

/* Fails with "<file>: <where>: <field>: <detail>". */
__attribute__((format(printf, 3, 4))) static int fail(cursor *c, const char *field,
                                                      const char *fmt, ...) {
    char detail[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return pkv_fail(c->err, PKV_ERR_FORMAT, "%s: %s: %s: %s", c->file, c->where, field, detail);
}

static uint64_t remaining(const cursor *c) { return c->size - c->pos; }

/* Claims n bytes at the cursor; NULL (error set) if fewer remain. */
static const uint8_t *take(cursor *c, uint64_t n, const char *field) {
    if (n > remaining(c)) {
        fail(c, field, "truncated: needs %llu bytes at offset %llu, file has %llu",
             (unsigned long long)n, (unsigned long long)c->pos, (unsigned long long)c->size);
        return NULL;
    }
    const uint8_t *p = c->base + c->pos;
    c->pos += n;
    return p;
}

static int read_u32(cursor *c, const char *field, uint32_t *out) {
    const uint8_t *p = take(c, 4, field);
    if (!p) return -1;
    *out = (uint32_t)load_le(p, 4);
    return 0;
}

static int read_u64(cursor *c, const char *field, uint64_t *out) {
    const uint8_t *p = take(c, 8, field);
    if (!p) return -1;
    *out = load_le(p, 8);
    return 0;
}

/* A gguf_string whose length is at most max_len (and what remains). */
static int read_string(cursor *c, const char *field, uint64_t max_len, gguf_str *out) {
    uint64_t len;
    if (read_u64(c, field, &len)) return -1;
    if (len > max_len)
        return fail(c, field, "length %llu exceeds the limit %llu", (unsigned long long)len,
                    (unsigned long long)max_len);
    if (len > remaining(c))
        return fail(c, field, "length %llu exceeds the %llu bytes left in the file",
                    (unsigned long long)len, (unsigned long long)remaining(c));
    out->ptr = (const char *)take(c, len, field);
    out->len = len;
    return 0;
}

/* Copies s into buf (at least 1 byte) for a message: printable ASCII kept,
 * anything else shown as '?', long strings cut with "...". */
static void printable(gguf_str s, char *buf, size_t buf_len) {
    size_t keep = buf_len - 1, n = 0;
    bool cut = s.len > keep;
    if (cut) keep = keep > 3 ? keep - 3 : 0;
    for (; n < keep && n < s.len; n++) {
        unsigned char ch = (unsigned char)s.ptr[n];
        buf[n] = ch >= 0x20 && ch < 0x7f && ch != '\'' ? (char)ch : '?';
    }
    if (cut)
        for (int k = 0; k < 3 && n + 1 < buf_len; k++) buf[n++] = '.';
    buf[n] = '\0';
}

/* ------------------------------------------------------------ name set */

/* Open-addressing hash set of NUL-free names, for duplicate detection in
 * O(n): a file may hold hundreds of thousands of keys or tensors. */
typedef struct {
    const char **slots;
    uint64_t mask;
} name_set;

static uint64_t hash_name(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Room for n names at load factor <= 1/2. n is already bounded by the file size. */
static int name_set_init(name_set *set, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    set->slots = calloc(cap, sizeof *set->slots);
    set->mask = cap - 1;
    return set->slots ? 0 : -1;
}

/* Inserts name; returns false if it was already present. */
static bool name_set_insert(name_set *set, const char *name) {
    size_t len = strlen(name);
    for (uint64_t i = hash_name(name, len) & set->mask;; i = (i + 1) & set->mask) {
        if (!set->slots[i]) {
            set->slots[i] = name;
            return true;
        }
        if (strcmp(set->slots[i], name) == 0) return false;
    }
}

static void name_set_free(name_set *set) { free(set->slots); }

/* ------------------------------------------------------------ reader: kv pairs */

static int nomem(cursor *c, const char *what) {
    return pkv_fail(c->err, PKV_ERR_NOMEM, "%s: %s: out of memory for %s", c->file, c->where, what);
}

static int read_array(cursor *c, gguf_value *val) {
    uint32_t elem;
    uint64_t count;
    if (read_u32(c, "array element type", &elem)) return -1;
    if (elem == GGUF_VT_ARRAY)
        return fail(c, "array element type", "nested arrays are not supported");
    if (elem >= GGUF_VT_COUNT)
        return fail(c, "array element type", "invalid value type %u (limit %d)", elem,
                    GGUF_VT_COUNT - 1);
    if (read_u64(c, "array count", &count)) return -1;
    val->v.arr.elem_type = (gguf_vtype)elem;
    val->v.arr.count = count;
    val->v.arr.data = c->base + c->pos;
    val->v.arr.strs = NULL;

    if (elem == GGUF_VT_STRING) {
        /* each string needs at least its 8-byte length: bound before allocating */
        if (count > remaining(c) / MIN_STRING_BYTES)
            return fail(c, "array count", "%llu strings need at least %d bytes each, %llu remain",
                        (unsigned long long)count, MIN_STRING_BYTES,
                        (unsigned long long)remaining(c));
        if (count == 0) return 0;
        val->v.arr.strs = malloc(count * sizeof(gguf_str));
        if (!val->v.arr.strs) return nomem(c, "a string array");
        for (uint64_t i = 0; i < count; i++) {
            char field[48];
            snprintf(field, sizeof field, "array element %llu", (unsigned long long)i);
            if (read_string(c, field, UINT64_MAX, &val->v.arr.strs[i])) return -1;
        }
        return 0;
    }

    uint64_t nbytes;
    if (__builtin_mul_overflow(count, (uint64_t)gguf_vtype_size[elem], &nbytes) || nbytes > remaining(c))
        return fail(c, "array count", "%llu elements of %s need more than the %llu bytes left",
                    (unsigned long long)count, gguf_vtype_name((gguf_vtype)elem),
                    (unsigned long long)remaining(c));
    const uint8_t *data = take(c, nbytes, "array data");
    if (elem == GGUF_VT_BOOL)
        for (uint64_t i = 0; i < count; i++)
            if (data[i] > 1) {
                char field[48];
                snprintf(field, sizeof field, "array element %llu", (unsigned long long)i);
                return fail(c, field, "bool byte %u is not 0 or 1", data[i]);
            }
    return 0;
}

static int read_value(cursor *c, gguf_value *val) {
    uint32_t type;
    if (read_u32(c, "value type", &type)) return -1;
    if (type >= GGUF_VT_COUNT)
        return fail(c, "value type", "invalid value type %u (limit %d)", type, GGUF_VT_COUNT - 1);
    val->type = (gguf_vtype)type;
    if (type == GGUF_VT_STRING) return read_string(c, "string length", UINT64_MAX, &val->v.str);
    if (type == GGUF_VT_ARRAY) return read_array(c, val);
    const uint8_t *p = take(c, gguf_vtype_size[type], "value");
    if (!p) return -1;
    if (type == GGUF_VT_BOOL && p[0] > 1)
        return fail(c, "value", "bool byte %u is not 0 or 1", p[0]);
    decode_scalar(p, (gguf_vtype)type, val);
    return 0;
}

/* Reads a key (non-empty, at most 65535 bytes, no NUL) into an owned copy. */
static int read_key(cursor *c, char **out) {
    gguf_str key;
    if (read_string(c, "key length", GGUF_MAX_KEY, &key)) return -1;
    if (key.len == 0) return fail(c, "key", "empty key");
    if (memchr(key.ptr, '\0', key.len)) return fail(c, "key", "contains a NUL byte");
    *out = malloc(key.len + 1);
    if (!*out) return nomem(c, "a key");
    memcpy(*out, key.ptr, key.len);
    (*out)[key.len] = '\0';
    return 0;
}

static void set_where_named(cursor *c, const char *what, uint64_t index, const char *name) {
    char shown[72];
    printable((gguf_str){name, strlen(name)}, shown, sizeof shown);
    snprintf(c->where, sizeof c->where, "%s %llu '%s'", what, (unsigned long long)index, shown);
}

static int read_kvs(cursor *c, gguf_file *f, uint64_t n_kv) {
    if (n_kv > remaining(c) / MIN_KV_BYTES)
        return fail(c, "kv count", "%llu pairs need at least %llu bytes each, %llu remain",
                    (unsigned long long)n_kv, (unsigned long long)MIN_KV_BYTES,
                    (unsigned long long)remaining(c));
    if (n_kv == 0) return 0;
    f->kv = calloc(n_kv, sizeof *f->kv);
    if (!f->kv) return nomem(c, "key/value pairs");
    name_set seen;
    if (name_set_init(&seen, n_kv)) return nomem(c, "key/value pairs");
    int rc = 0;
    for (uint64_t i = 0; i < n_kv && rc == 0; i++) {
        gguf_kv *kv = &f->kv[i];
        snprintf(c->where, sizeof c->where, "kv %llu", (unsigned long long)i);
        rc = read_key(c, &kv->key);
        if (rc) break;
        f->n_kv = i + 1; /* the key (and any string array) is owned from here */
        set_where_named(c, "kv", i, kv->key);
        if (!name_set_insert(&seen, kv->key)) rc = fail(c, "key", "duplicate key");
        else rc = read_value(c, &kv->value);
    }
    name_set_free(&seen);
    return rc;
}

/* general.alignment: UINT32, a non-zero power of two; 32 when absent (§1.4). */
static int read_alignment(cursor *c, gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv) return 0;
    snprintf(c->where, sizeof c->where, "kv %llu 'general.alignment'",
             (unsigned long long)(kv - f->kv));
    if (kv->value.type != GGUF_VT_UINT32)
        return fail(c, "value type", "must be UINT32, is %s", gguf_vtype_name(kv->value.type));
    if (!gguf_is_pow2(kv->value.v.u))
        return fail(c, "value", "alignment %llu is not a non-zero power of two",
                    (unsigned long long)kv->value.v.u);
    f->alignment = (uint32_t)kv->value.v.u;
    return 0;
}

/* ------------------------------------------------------------ reader: tensor infos */

static int read_tensor_name(cursor *c, gguf_tensor *t) {
    gguf_str name;
    if (read_string(c, "name length", GGUF_MAX_NAME - 1, &name)) return -1;
    if (memchr(name.ptr, '\0', name.len)) return fail(c, "name", "contains a NUL byte");
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = '\0';
    return 0;
}

/* n_dims in 1..4; each dim fits int64 and so does their product (ggml keeps
 * ne as int64_t; §1.3). Zero-sized dims are allowed, as in ggml. */
static int read_shape(cursor *c, gguf_tensor *t, uint64_t *nelements) {
    if (read_u32(c, "n_dims", &t->n_dims)) return -1;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return fail(c, "n_dims", "%u is outside 1..%d", t->n_dims, GGUF_MAX_DIMS);
    uint64_t product = 1;
    for (uint32_t j = 0; j < GGUF_MAX_DIMS; j++) {
        char field[16];
        snprintf(field, sizeof field, "dims[%u]", j);
        t->ne[j] = 1;
        if (j < t->n_dims && read_u64(c, field, &t->ne[j])) return -1;
        if (t->ne[j] > (uint64_t)INT64_MAX)
            return fail(c, field, "%llu exceeds INT64_MAX", (unsigned long long)t->ne[j]);
        if (__builtin_mul_overflow(product, t->ne[j], &product) || product > (uint64_t)INT64_MAX)
            return fail(c, field, "element count of dims[0..%u] overflows INT64_MAX", j);
    }
    *nelements = product;
    return 0;
}

static int read_tensor_type(cursor *c, gguf_tensor *t, uint64_t nelements) {
    if (read_u32(c, "type", &t->type)) return -1;
    if (t->type >= GGML_TYPE_COUNT)
        return fail(c, "type", "unknown ggml type id %u (limit %d)", t->type, GGML_TYPE_COUNT - 1);
    const gguf_type_geometry *g = &gguf_type_table[t->type];
    if (g->block_elems == 0) return fail(c, "type", "ggml type id %u is %s", t->type, g->name);
    if (t->ne[0] % g->block_elems != 0)
        return fail(c, "dims[0]", "%llu is not a multiple of the %s block size %u",
                    (unsigned long long)t->ne[0], g->name, g->block_elems);
    if (!gguf_tensor_nbytes(t->type, t->ne[0], nelements, &t->nbytes))
        return fail(c, "dims", "size in bytes of %llu %s elements overflows",
                    (unsigned long long)nelements, g->name);
    return 0;
}

static int read_tensor_info(cursor *c, gguf_tensor *t, uint32_t alignment) {
    uint64_t nelements = 0;
    if (read_shape(c, t, &nelements) || read_tensor_type(c, t, nelements)) return -1;
    if (read_u64(c, "offset", &t->offset)) return -1;
    if (t->offset % alignment != 0)
        return fail(c, "offset", "%llu is not a multiple of the alignment %u",
                    (unsigned long long)t->offset, alignment);
    return 0;
}

static int read_tensor_infos(cursor *c, gguf_file *f, uint64_t n_tensors) {
    snprintf(c->where, sizeof c->where, "header");
    if (n_tensors > remaining(c) / MIN_TENSOR_INFO_BYTES)
        return fail(c, "tensor count", "%llu tensors need at least %llu bytes each, %llu remain",
                    (unsigned long long)n_tensors, (unsigned long long)MIN_TENSOR_INFO_BYTES,
                    (unsigned long long)remaining(c));
    if (n_tensors == 0) return 0;
    f->tensors = calloc(n_tensors, sizeof *f->tensors);
    if (!f->tensors) return nomem(c, "tensor infos");
    f->n_tensors = n_tensors;
    name_set seen;
    if (name_set_init(&seen, n_tensors)) return nomem(c, "tensor infos");
    int rc = 0;
    for (uint64_t i = 0; i < n_tensors && rc == 0; i++) {
        gguf_tensor *t = &f->tensors[i];
        snprintf(c->where, sizeof c->where, "tensor %llu", (unsigned long long)i);
        rc = read_tensor_name(c, t);
        if (rc) break;
        set_where_named(c, "tensor", i, t->name);
        if (!name_set_insert(&seen, t->name)) rc = fail(c, "name", "duplicate tensor name");
        else rc = read_tensor_info(c, t, f->alignment);
    }
    name_set_free(&seen);
    return rc;
}

static int cmp_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    if (x->offset != y->offset) return x->offset > y->offset ? 1 : -1;
    return (x > y) - (x < y); /* file order: the later tensor is the one reported */
}

/* No two tensors may share bytes: ggml lays them out one after another, and
 * a tensor whose data is another's is a crafted file (two names, one set of
 * weights, or a quantised block read as floats). Zero-sized tensors hold no
 * bytes. Sorted by offset, each must end before the next begins. */
static int check_overlaps(cursor *c, gguf_file *f) {
    if (f->n_tensors < 2) return 0;
    const gguf_tensor **order = malloc(f->n_tensors * sizeof *order);
    if (!order) return nomem(c, "the tensor order");
    uint64_t n = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].nbytes > 0) order[n++] = &f->tensors[i];
    qsort(order, n, sizeof *order, cmp_offset);
    int rc = 0;
    for (uint64_t i = 1; i < n && rc == 0; i++) {
        const gguf_tensor *prev = order[i - 1], *t = order[i];
        if (prev->offset + prev->nbytes > t->offset) { /* in bounds, so no overflow */
            set_where_named(c, "tensor", (uint64_t)(t - f->tensors), t->name);
            rc = fail(c, "offset", "data [%llu, %llu) overlaps tensor '%s' at [%llu, %llu)",
                      (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes), prev->name,
                      (unsigned long long)prev->offset, (unsigned long long)(prev->offset + prev->nbytes));
        }
    }
    free(order);
    return rc;
}

/* The data section starts at the end of the infos rounded up to the alignment
 * (§1.4); each tensor must lie inside the file. A file without tensors may
 * omit the final padding. */
static int place_tensors(cursor *c, gguf_file *f) {
    snprintf(c->where, sizeof c->where, "data section");
    uint64_t start;
    if (!gguf_align_up(c->pos, f->alignment, &start) || start > c->size) {
        if (f->n_tensors > 0)
            return fail(c, "start", "infos end at %llu; aligned to %u the data would start past "
                        "the end of the file (%llu bytes)", (unsigned long long)c->pos,
                        f->alignment, (unsigned long long)c->size);
        start = c->size;
    }
    f->data_offset = start;
    uint64_t data_size = c->size - start;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        set_where_named(c, "tensor", i, t->name);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return fail(c, "offset", "%llu + %llu bytes extends past the end of the data section "
                        "(%llu bytes)", (unsigned long long)t->offset,
                        (unsigned long long)t->nbytes, (unsigned long long)data_size);
        t->data = f->base + start + t->offset;
    }
    return check_overlaps(c, f);
}

/* ------------------------------------------------------------ reader: header */

static int read_header(cursor *c, gguf_file *f, uint64_t *n_tensors, uint64_t *n_kv) {
    snprintf(c->where, sizeof c->where, "header");
    uint32_t magic;
    if (read_u32(c, "magic", &magic)) return -1;
    if (magic != GGUF_MAGIC_LE) {
        char shown[8];
        printable((gguf_str){(const char *)c->base, 4}, shown, sizeof shown);
        return fail(c, "magic", "'%s' is not 'GGUF'", shown);
    }
    if (read_u32(c, "version", &f->version)) return -1;
    /* a byte-swapped (big-endian) file reads as e.g. 0x03000000 (ggml's test) */
    if (f->version != 0 && (f->version & 0xFFFF) == 0)
        return fail(c, "version", "0x%08x looks byte-swapped; only little-endian files are "
                    "supported", f->version);
    if (f->version < 2 || f->version > GGUF_VERSION_MAX)
        return fail(c, "version", "%u is not supported (2..%d)", f->version, GGUF_VERSION_MAX);
    if (read_u64(c, "tensor count", n_tensors) || read_u64(c, "kv count", n_kv)) return -1;
    return 0;
}

static int parse(cursor *c, gguf_file *f) {
    uint64_t n_tensors, n_kv;
    if (read_header(c, f, &n_tensors, &n_kv)) return -1;
    if (read_kvs(c, f, n_kv) || read_alignment(c, f)) return -1;
    if (read_tensor_infos(c, f, n_tensors)) return -1;
    return place_tensors(c, f);
}

/* Parses base[0..size) into f, which the caller has zeroed and given base/size. */
static int open_parsed(gguf_file *f, pkv_error *err) {
    cursor c = {.base = f->base, .size = f->size, .file = f->path, .err = err};
    if (parse(&c, f) == 0) {
        pkv_error_clear(err);
        return 0;
    }
    gguf_close(f);
    return -1;
}

static void set_path(gguf_file *f, const char *name) {
    snprintf(f->path, sizeof f->path, "%s", name ? name : "(memory)");
}

int gguf_open_memory(gguf_file *f, const void *data, size_t size, const char *name,
                     pkv_error *err) {
    memset(f, 0, sizeof *f);
    set_path(f, name);
    if (!data && size > 0) return pkv_fail(err, PKV_ERR_ARG, "%s: NULL buffer", f->path);
    f->base = data;
    f->size = size;
    return open_parsed(f, err);
}

int gguf_open(gguf_file *f, const char *path, pkv_error *err) {
    memset(f, 0, sizeof *f);
    set_path(f, path);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
     * below as not a regular file); regular files ignore the flag */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return pkv_fail(err, PKV_ERR_IO, "%s: cannot open: %s", f->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return pkv_fail(err, PKV_ERR_IO, "%s: cannot stat: %s", f->path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return pkv_fail(err, PKV_ERR_IO, "%s: not a regular file (a model must be a GGUF file, not a %s)", f->path,
                        S_ISFIFO(st.st_mode) ? "pipe" : S_ISDIR(st.st_mode) ? "directory"
                                                      : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "device"
                                                                                                  : "socket or link");
    }
    if (st.st_size == 0) {
        close(fd);
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: header: magic: truncated: the file is empty",
                        f->path);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return pkv_fail(err, PKV_ERR_IO, "%s: cannot map %lld bytes: %s", f->path,
                        (long long)st.st_size, strerror(e));
    f->base = map;
    f->size = (size_t)st.st_size;
    f->mapped = true;
    return open_parsed(f, err);
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        free(f->kv[i].key);
        if (f->kv[i].value.type == GGUF_VT_ARRAY) free(f->kv[i].value.v.arr.strs);
    }
    free(f->kv);
    free(f->tensors);
    if (f->mapped) munmap((void *)f->base, f->size);
    memset(f, 0, sizeof *f);
}

/* ------------------------------------------------------------ lookups and getters */

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key && strcmp(f->kv[i].key, key) == 0) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

static int type_error(const gguf_file *f, const char *key, const gguf_value *v, const char *want,
                      pkv_error *err) {
    return pkv_fail(err, PKV_ERR_FORMAT, "%s: kv '%s': type %s, expected %s", f->path, key,
                    gguf_vtype_name(v->type), want);
}

/* Finds key; 1 if absent, 0 with *out set if present. */
static int lookup(const gguf_file *f, const char *key, const gguf_value **out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    *out = &kv->value;
    return 0;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, pkv_error *err) {
    const gguf_value *v;
    if (lookup(f, key, &v)) return 1;
    if (gguf_vtype_is_unsigned(v->type)) {
        if (v->v.u > UINT32_MAX)
            return pkv_fail(err, PKV_ERR_FORMAT, "%s: kv '%s': value %llu exceeds %u", f->path,
                            key, (unsigned long long)v->v.u, UINT32_MAX);
        *out = (uint32_t)v->v.u;
        return 0;
    }
    if (!gguf_vtype_is_signed(v->type)) return type_error(f, key, v, "an integer", err);
    if (v->v.i < 0 || v->v.i > (int64_t)UINT32_MAX)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: kv '%s': value %lld outside 0..%u", f->path,
                        key, (long long)v->v.i, UINT32_MAX);
    *out = (uint32_t)v->v.i;
    return 0;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, pkv_error *err) {
    const gguf_value *v;
    if (lookup(f, key, &v)) return 1;
    if (gguf_vtype_is_signed(v->type)) {
        *out = v->v.i;
        return 0;
    }
    if (!gguf_vtype_is_unsigned(v->type)) return type_error(f, key, v, "an integer", err);
    if (v->v.u > (uint64_t)INT64_MAX)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: kv '%s': value %llu exceeds INT64_MAX", f->path,
                        key, (unsigned long long)v->v.u);
    *out = (int64_t)v->v.u;
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out, pkv_error *err) {
    const gguf_value *v;
    if (lookup(f, key, &v)) return 1;
    double d;
    if (gguf_vtype_is_float(v->type)) d = v->v.f;
    else if (gguf_vtype_is_signed(v->type)) d = (double)v->v.i;
    else if (gguf_vtype_is_unsigned(v->type)) d = (double)v->v.u;
    else return type_error(f, key, v, "a number", err);
    if (isfinite(d) && fabs(d) > FLT_MAX) /* NaN and infinities pass, as stored */
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: kv '%s': value %g outside the float range",
                        f->path, key, d);
    *out = (float)d;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out, pkv_error *err) {
    const gguf_value *v;
    if (lookup(f, key, &v)) return 1;
    if (v->type != GGUF_VT_BOOL) return type_error(f, key, v, "BOOL", err);
    *out = v->v.u != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, pkv_error *err) {
    const gguf_value *v;
    if (lookup(f, key, &v)) return 1;
    if (v->type != GGUF_VT_STRING) return type_error(f, key, v, "STRING", err);
    *out = v->v.str;
    return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, const gguf_value **out, pkv_error *err) {
    const gguf_value *v;
    if (lookup(f, key, &v)) return 1;
    if (v->type != GGUF_VT_ARRAY) return type_error(f, key, v, "ARRAY", err);
    *out = v;
    return 0;
}

/* Element i of a numeric (or BOOL) array as a value of its own type. */
static gguf_value arr_elem(const gguf_value *arr, uint64_t i) {
    gguf_value e = {.type = arr->v.arr.elem_type};
    unsigned n = gguf_vtype_size[e.type];
    if (n) decode_scalar(arr->v.arr.data + i * n, e.type, &e);
    return e;
}

int64_t gguf_arr_i64(const gguf_value *arr, uint64_t i) {
    gguf_value e = arr_elem(arr, i);
    if (gguf_vtype_is_signed(e.type)) return e.v.i;
    if (gguf_vtype_is_float(e.type)) /* truncated; out-of-range values saturate */
        return e.v.f != e.v.f ? 0 : e.v.f >= 0x1p63 ? INT64_MAX : e.v.f < -0x1p63 ? INT64_MIN
                                                                             : (int64_t)e.v.f;
    if (gguf_vtype_size[e.type]) return (int64_t)e.v.u; /* unsigned and BOOL; > INT64_MAX wraps */
    return 0;
}

double gguf_arr_f64(const gguf_value *arr, uint64_t i) {
    gguf_value e = arr_elem(arr, i);
    if (gguf_vtype_is_float(e.type)) return e.v.f;
    if (gguf_vtype_is_signed(e.type)) return (double)e.v.i;
    if (gguf_vtype_size[e.type]) return (double)e.v.u;
    return 0.0;
}

void gguf_str_copy(gguf_str s, char *buf, size_t buf_len) {
    if (buf_len == 0) return;
    size_t n = s.len < buf_len - 1 ? (size_t)s.len : buf_len - 1;
    if (n) memcpy(buf, s.ptr, n);
    buf[n] = '\0';
}

bool gguf_str_eq(gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

