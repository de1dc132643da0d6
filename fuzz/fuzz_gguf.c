/*
 * libFuzzer target for the GGUF reader: parse the input, then touch every
 * value, string and tensor byte range the reader hands out, so that a length
 * or offset it failed to check shows up as an ASan report. Also checks the
 * reader's contract: a failure is a FORMAT error with a one-line message that
 * starts with the file name, and leaves the gguf_file closed.
 *
 * Build and run: make fuzz && build/fuzz_gguf fuzz/corpus
 */
#include <stdint.h>
#include <string.h>

#include "format/gguf.h"

#define FUZZ_NAME "fuzz.gguf"

/* A contract violation: stop with a crash so libFuzzer saves the input. */
#define EXPECT(cond)                                                                           \
    do {                                                                                       \
        if (!(cond)) __builtin_trap();                                                         \
    } while (0)

static volatile uint64_t g_sink; /* keeps the reads below from being optimised away */

static uint64_t touch(const void *p, uint64_t n) {
    if (n == 0) return 0;
    const uint8_t *b = p;
    return (uint64_t)b[0] + b[n - 1] + b[n / 2];
}

static uint64_t walk_value(const gguf_file *f, const gguf_kv *kv) {
    uint64_t acc = 0;
    const gguf_value *v = &kv->value;
    uint32_t u32;
    int64_t i64;
    float f32;
    bool b;
    gguf_str s;
    const gguf_value *arr;
    pkv_error err;
    /* every getter on every key: each returns 0 or -1 here, never 1 */
    EXPECT(gguf_get_u32(f, kv->key, &u32, &err) != 1);
    EXPECT(gguf_get_i64(f, kv->key, &i64, &err) != 1);
    EXPECT(gguf_get_f32(f, kv->key, &f32, &err) != 1);
    EXPECT(gguf_get_bool(f, kv->key, &b, &err) != 1);
    if (gguf_get_str(f, kv->key, &s, &err) == 0) {
        char buf[32];
        gguf_str_copy(s, buf, sizeof buf);
        acc += touch(s.ptr, s.len) + gguf_str_eq(s, "llama");
    }
    if (gguf_get_arr(f, kv->key, &arr, &err) == 0) {
        EXPECT(arr == v && arr->v.arr.elem_type != GGUF_VT_ARRAY);
        if (arr->v.arr.elem_type == GGUF_VT_STRING) {
            for (uint64_t i = 0; i < arr->v.arr.count; i++)
                acc += touch(arr->v.arr.strs[i].ptr, arr->v.arr.strs[i].len);
        } else {
            for (uint64_t i = 0; i < arr->v.arr.count; i++)
                acc += (uint64_t)gguf_arr_i64(arr, i) + (gguf_arr_f64(arr, i) > 0.0);
        }
    }
    return acc;
}

static void check_failure(const gguf_file *f, const pkv_error *err) {
    EXPECT(err->code == PKV_ERR_FORMAT);
    EXPECT(strncmp(err->msg, FUZZ_NAME ": ", strlen(FUZZ_NAME) + 2) == 0);
    EXPECT(strchr(err->msg, '\n') == NULL);
    EXPECT(f->kv == NULL && f->tensors == NULL && f->n_kv == 0 && f->n_tensors == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file f;
    pkv_error err;
    if (gguf_open_memory(&f, data, size, FUZZ_NAME, &err) != 0) {
        check_failure(&f, &err);
        return 0;
    }
    uint64_t acc = 0;
    for (uint64_t i = 0; i < f.n_kv; i++) {
        EXPECT(gguf_find_kv(&f, f.kv[i].key) == &f.kv[i]); /* keys are unique */
        acc += walk_value(&f, &f.kv[i]);
    }
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        EXPECT(gguf_find_tensor(&f, t->name) == t);
        EXPECT(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        EXPECT(t->offset % f.alignment == 0);
        EXPECT((const uint8_t *)t->data >= data &&
               (uint64_t)((const uint8_t *)t->data - data) + t->nbytes <= size);
        acc += touch(t->data, t->nbytes);
    }
    EXPECT(f.data_offset <= size);
    g_sink += acc;
    gguf_close(&f);
    return 0;
}
