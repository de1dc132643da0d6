/*
 * gguf-edit: edited copies of a GGUF file, for tests of hostile input.
 *
 *   gguf-edit IN OUT --set KEY TYPE VALUE   KEY set to VALUE (added when absent); TYPE is u8 i8 u16
 *                                           i16 u32 i32 u64 i64 f32 f64 bool or str; VALUE a number,
 *                                           nan, inf or -inf
 *   gguf-edit IN OUT --fill TENSOR VALUE    every element of an F32 tensor set to VALUE
 *   gguf-edit --mutations IN DIR            the mutation set of tests/mutate-test.sh, one file per
 *                                           mutation in DIR, one line "FILE<TAB>what" per file
 *
 * The mutation set: every numeric metadata value (scalar, or every element
 * of a numeric array) set to 0, -1, NaN, +inf, -inf and a huge value, each
 * integer one also as a float and as a per-layer array one longer than
 * block_count, and every token id key (present or not) past the end of the
 * vocabulary. The
 * writer refuses a few of these itself (general.alignment must stay a power
 * of two); those are left out and counted on stderr.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"

static int usage(void) {
    fputs("usage: gguf-edit IN OUT --set KEY TYPE VALUE\n"
          "       gguf-edit IN OUT --fill TENSOR VALUE\n"
          "       gguf-edit --mutations IN DIR\n",
          stderr);
    return 2;
}

static bool parse_number(const char *s, double *out) {
    char *end;
    errno = 0;
    if (!strcmp(s, "nan")) *out = NAN;
    else if (!strcmp(s, "inf")) *out = INFINITY;
    else if (!strcmp(s, "-inf")) *out = -INFINITY;
    else {
        *out = strtod(s, &end);
        return end != s && !*end && errno == 0;
    }
    return true;
}

static const struct {
    const char *name;
    gguf_vtype type;
} TYPES[] = {{"u8", GGUF_VT_UINT8},   {"i8", GGUF_VT_INT8},   {"u16", GGUF_VT_UINT16}, {"i16", GGUF_VT_INT16},
             {"u32", GGUF_VT_UINT32}, {"i32", GGUF_VT_INT32}, {"u64", GGUF_VT_UINT64}, {"i64", GGUF_VT_INT64},
             {"f32", GGUF_VT_FLOAT32}, {"f64", GGUF_VT_FLOAT64}, {"bool", GGUF_VT_BOOL}, {"str", GGUF_VT_STRING}};

static bool is_float(gguf_vtype t) { return t == GGUF_VT_FLOAT32 || t == GGUF_VT_FLOAT64; }
static bool is_signed(gguf_vtype t) {
    return t == GGUF_VT_INT8 || t == GGUF_VT_INT16 || t == GGUF_VT_INT32 || t == GGUF_VT_INT64;
}
static unsigned type_size(gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

/* A scalar of type t holding x (integers: truncated; -1 in an unsigned type
 * is its largest value, as a C cast gives). */
static gguf_value scalar(gguf_vtype t, double x) {
    gguf_value v = {.type = t};
    if (is_float(t)) v.v.f = x;
    else if (is_signed(t)) v.v.i = (int64_t)x;
    else v.v.u = x < 0 ? (uint64_t)(int64_t)x : (uint64_t)x;
    if (t == GGUF_VT_BOOL) v.v.u = x != 0;
    return v;
}

/* x packed little-endian as an element of type t (the host is little-endian, as the reader's files). */
static void pack(gguf_vtype t, double x, uint8_t *out) {
    gguf_value v = scalar(t, x);
    if (t == GGUF_VT_FLOAT32) {
        float f = (float)x;
        memcpy(out, &f, 4);
    } else if (t == GGUF_VT_FLOAT64) {
        memcpy(out, &x, 8);
    } else {
        uint64_t bits = is_signed(t) ? (uint64_t)v.v.i : v.v.u;
        memcpy(out, &bits, type_size(t));
    }
}

static int save_edited(const gguf_file *f, const char *key, const gguf_value *v, const char *out, pkv_error *err) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return -1;
    int rc = gguf_writer_add_file(w, f, key, err);
    if (rc == 0) {
        gguf_write_value(w, key, v);
        rc = gguf_writer_save(w, out, err);
    }
    gguf_writer_free(w);
    return rc;
}

static int cmd_set(const char *in, const char *out, const char *key, const char *type, const char *text) {
    gguf_file f;
    pkv_error err;
    if (gguf_open(&f, in, &err)) {
        fprintf(stderr, "gguf-edit: %s\n", err.msg);
        return 1;
    }
    gguf_value v = {.type = GGUF_VT_COUNT};
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcmp(type, TYPES[i].name)) v.type = TYPES[i].type;
    double x = 0;
    if (v.type == GGUF_VT_STRING) {
        v.v.str = (gguf_str){text, strlen(text)};
    } else if (v.type == GGUF_VT_COUNT || !parse_number(text, &x)) {
        gguf_close(&f);
        return usage();
    } else {
        v = scalar(v.type, x);
    }
    int rc = save_edited(&f, key, &v, out, &err);
    if (rc) fprintf(stderr, "gguf-edit: %s\n", err.msg);
    gguf_close(&f);
    return rc ? 1 : 0;
}

static char *read_all(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *buf = NULL;
    if (fseek(fp, 0, SEEK_END) == 0) {
        long n = ftell(fp);
        if (n > 0 && fseek(fp, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) &&
            fread(buf, 1, (size_t)n, fp) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *size = n > 0 ? (size_t)n : 0;
    }
    fclose(fp);
    return buf;
}

static int cmd_fill(const char *in, const char *out, const char *name, const char *text) {
    double x;
    if (!parse_number(text, &x)) return usage();
    size_t size;
    char *bytes = read_all(in, &size);
    if (!bytes) {
        fprintf(stderr, "gguf-edit: cannot read %s\n", in);
        return 1;
    }
    gguf_file f;
    pkv_error err;
    int rc = 1;
    if (gguf_open_memory(&f, bytes, size, in, &err)) {
        fprintf(stderr, "gguf-edit: %s\n", err.msg);
    } else {
        const gguf_tensor *t = gguf_find_tensor(&f, name);
        if (!t || t->type != 0) {
            fprintf(stderr, "gguf-edit: %s: no F32 tensor '%s'\n", in, name);
        } else {
            float value = (float)x;
            char *data = bytes + ((const char *)t->data - bytes); /* our own buffer */
            for (uint64_t i = 0; i < t->nbytes / 4; i++) memcpy(data + 4 * i, &value, 4);
            FILE *fp = fopen(out, "wb");
            rc = !fp || fwrite(bytes, 1, size, fp) != size;
            if (fp && fclose(fp)) rc = 1;
            if (rc) fprintf(stderr, "gguf-edit: cannot write %s\n", out);
        }
        gguf_close(&f);
    }
    free(bytes);
    return rc;
}

/* ---------------------------------------------------------------- mutations */

typedef struct {
    const gguf_file *f;
    const char *dir;
    int written, refused;
} mutator;

static void emit(mutator *m, const char *key, const gguf_value *v, const char *what) {
    char path[1024];
    snprintf(path, sizeof path, "%s/m%04d.gguf", m->dir, m->written + m->refused);
    pkv_error err;
    if (save_edited(m->f, key, v, path, &err)) {
        m->refused++;
        return;
    }
    m->written++;
    printf("%s\t%s = %s\n", path, key, what);
}

static const struct {
    double x;
    const char *name;
} VALUES[] = {{0, "0"}, {-1, "-1"}, {NAN, "NaN"}, {INFINITY, "+inf"}, {-INFINITY, "-inf"}, {0, "huge"}};

/* The largest value of a type (the "huge" mutation). */
static double huge_of(gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: return 255;
    case GGUF_VT_INT8: return 127;
    case GGUF_VT_UINT16: return 65535;
    case GGUF_VT_INT16: return 32767;
    case GGUF_VT_UINT32: return 4294967295.0;
    case GGUF_VT_INT32: return 2147483647.0;
    case GGUF_VT_UINT64: return 18446744073709549568.0; /* the largest double below 2^64 */
    case GGUF_VT_INT64: return 9223372036854774784.0;
    case GGUF_VT_FLOAT32: return 3.4e38;
    default: return 1e300;
    }
}

static void mutate_scalar(mutator *m, const gguf_kv *kv, int64_t n_vocab, int64_t n_layer) {
    gguf_vtype t = kv->value.type;
    for (size_t i = 0; i < sizeof VALUES / sizeof VALUES[0]; i++) {
        double x = !strcmp(VALUES[i].name, "huge") ? huge_of(t) : VALUES[i].x;
        /* NaN and infinities have no integer form: the key turns FLOAT32; -1
         * in an unsigned key turns INT32 (a negative, not the type's maximum) */
        gguf_vtype as = !is_float(t) && !isfinite(x) ? GGUF_VT_FLOAT32 : t;
        if (x < 0 && !is_float(t) && !is_signed(t) && isfinite(x)) as = GGUF_VT_INT32;
        gguf_value v = scalar(as, x);
        char what[64];
        snprintf(what, sizeof what, "%s (%s)", VALUES[i].name, gguf_vtype_name(as));
        emit(m, kv->key, &v, what);
    }
    if (is_float(t)) return;
    /* an integer as a float, and as a per-layer array one longer than block_count */
    gguf_value v = scalar(GGUF_VT_FLOAT32, 1.5);
    emit(m, kv->key, &v, "1.5 (FLOAT32)");
    if (n_layer > 0 && n_layer < 4096) {
        uint8_t *arr = calloc((size_t)n_layer + 1, 4);
        int64_t value = is_signed(t) ? kv->value.v.i : (int64_t)kv->value.v.u;
        for (int64_t i = 0; arr && i <= n_layer; i++) pack(GGUF_VT_INT32, (double)value, arr + 4 * i);
        gguf_value a = {.type = GGUF_VT_ARRAY};
        a.v.arr.elem_type = GGUF_VT_INT32;
        a.v.arr.count = (uint64_t)n_layer + 1;
        a.v.arr.data = arr;
        if (arr) emit(m, kv->key, &a, "a per-layer array of block_count + 1 values");
        free(arr);
    }
    size_t kl = strlen(kv->key);
    if (n_vocab > 0 && kl > 9 && !strcmp(kv->key + kl - 9, "_token_id")) {
        gguf_value past = scalar(GGUF_VT_UINT32, (double)n_vocab);
        emit(m, kv->key, &past, "n_vocab (one past the last token)");
    }
}

static void mutate_array(mutator *m, const gguf_kv *kv) {
    gguf_vtype t = kv->value.v.arr.elem_type;
    unsigned es = type_size(t);
    uint64_t n = kv->value.v.arr.count;
    if (!es || t == GGUF_VT_BOOL || n == 0 || n > (1u << 24)) return;
    uint8_t *data = malloc((size_t)(n * es));
    if (!data) return;
    for (size_t i = 0; i < sizeof VALUES / sizeof VALUES[0]; i++) {
        double x = !strcmp(VALUES[i].name, "huge") ? huge_of(t) : VALUES[i].x;
        if (!is_float(t) && !isfinite(x)) continue; /* no integer form */
        for (uint64_t k = 0; k < n; k++) pack(t, x, data + k * es);
        gguf_value a = kv->value;
        a.v.arr.data = data;
        char what[64];
        snprintf(what, sizeof what, "every element %s (%s)", VALUES[i].name, gguf_vtype_name(t));
        emit(m, kv->key, &a, what);
    }
    free(data);
}

static int64_t find_int(const gguf_file *f, const char *suffix) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        size_t kl = strlen(f->kv[i].key), sl = strlen(suffix);
        if (kl >= sl && !strcmp(f->kv[i].key + kl - sl, suffix) && !is_float(f->kv[i].value.type) &&
            type_size(f->kv[i].value.type))
            return is_signed(f->kv[i].value.type) ? f->kv[i].value.v.i : (int64_t)f->kv[i].value.v.u;
    }
    return 0;
}

static int cmd_mutations(const char *in, const char *dir) {
    gguf_file f;
    pkv_error err;
    if (gguf_open(&f, in, &err)) {
        fprintf(stderr, "gguf-edit: %s\n", err.msg);
        return 1;
    }
    const gguf_kv *tokens = gguf_find_kv(&f, "tokenizer.ggml.tokens");
    int64_t n_vocab = tokens && tokens->value.type == GGUF_VT_ARRAY ? (int64_t)tokens->value.v.arr.count : 0;
    int64_t n_layer = find_int(&f, ".block_count");
    mutator m = {&f, dir, 0, 0};
    for (uint64_t i = 0; i < f.n_kv; i++) {
        const gguf_kv *kv = &f.kv[i];
        if (kv->value.type == GGUF_VT_ARRAY) mutate_array(&m, kv);
        else if (type_size(kv->value.type) && kv->value.type != GGUF_VT_BOOL) mutate_scalar(&m, kv, n_vocab, n_layer);
    }
    /* special-token ids the file does not set: added, one past the vocabulary */
    static const char *const ID_KEYS[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.eot_token_id",
                                          "tokenizer.ggml.eom_token_id", "tokenizer.ggml.padding_token_id"};
    for (size_t i = 0; n_vocab > 0 && i < sizeof ID_KEYS / sizeof ID_KEYS[0]; i++) {
        if (gguf_find_kv(&f, ID_KEYS[i])) continue;
        gguf_value past = scalar(GGUF_VT_UINT32, (double)n_vocab);
        emit(&m, ID_KEYS[i], &past, "n_vocab, added (one past the last token)");
    }
    fprintf(stderr, "gguf-edit: %s: %d mutations written, %d refused by the writer\n", in, m.written, m.refused);
    gguf_close(&f);
    return m.written > 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--mutations")) return cmd_mutations(argv[2], argv[3]);
    if (argc == 7 && !strcmp(argv[3], "--set")) return cmd_set(argv[1], argv[2], argv[4], argv[5], argv[6]);
    if (argc == 6 && !strcmp(argv[3], "--fill")) return cmd_fill(argv[1], argv[2], argv[4], argv[5]);
    return usage();
}
