#!/bin/sh
# Regenerates the seed corpus of the GGUF fuzzer (fuzz/corpus/) with the
# project's own writer: a few small, valid files (< 10 KB each) that between
# them use every value type, string arrays, several tensor types, and the
# default and a custom alignment.
#
# Usage: tools/make-fuzz-corpus.sh [OUTDIR]     (default fuzz/corpus)
set -eu

cd "$(dirname "$0")/.."
out=${1:-fuzz/corpus}
cc=${CC:-cc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/gen.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"

static const char *g_dir;

static void save(gguf_writer *w, const char *name) {
    char path[1024];
    pkv_error err;
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    if (gguf_writer_save(w, path, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    gguf_writer_free(w);
}

static void tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                   const uint64_t *ne, uint64_t nbytes) {
    unsigned char *data = malloc(nbytes ? nbytes : 1);
    for (uint64_t i = 0; i < nbytes; i++) data[i] = (unsigned char)(i * 37 + 11);
    pkv_error err;
    if (gguf_write_tensor(w, name, type, n_dims, ne, data, nbytes, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    free(data);
}

/* header only: no kv pairs, no tensors */
static void empty(void) { save(gguf_writer_new(), "empty.gguf"); }

/* a miniature llama-style model: hparams, tokenizer arrays, a few tensors */
static void tiny_model(void) {
    gguf_writer *w = gguf_writer_new();
    gguf_write_str(w, "general.architecture", "llama");
    gguf_write_str(w, "general.name", "tiny");
    gguf_write_u32(w, "general.file_type", 15);
    gguf_write_u32(w, "llama.context_length", 128);
    gguf_write_u32(w, "llama.embedding_length", 32);
    gguf_write_u32(w, "llama.block_count", 1);
    gguf_write_u32(w, "llama.attention.head_count", 4);
    gguf_write_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_write_f32(w, "llama.rope.freq_base", 10000.0f);
    gguf_write_str(w, "tokenizer.ggml.model", "llama");
    const char *tokens[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a", "b", "<0x0A>"};
    float scores[] = {0, 0, 0, -1.5f, -2.5f, 0};
    int32_t types[] = {2, 3, 3, 1, 1, 6};
    gguf_write_arr_str(w, "tokenizer.ggml.tokens", tokens, 6);
    gguf_write_arr_f32(w, "tokenizer.ggml.scores", scores, 6);
    gguf_write_arr_i32(w, "tokenizer.ggml.token_type", types, 6);
    gguf_write_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_write_bool(w, "tokenizer.ggml.add_bos_token", true);
    uint64_t ne_embd[] = {32, 6}, ne_norm[] = {32}, ne_q[] = {32, 32}, ne_k[] = {256, 1};
    tensor(w, "token_embd.weight", 1, 2, ne_embd, 32 * 6 * 2);   /* F16 */
    tensor(w, "output_norm.weight", 0, 1, ne_norm, 32 * 4);      /* F32 */
    tensor(w, "blk.0.attn_q.weight", 8, 2, ne_q, 32 * 34);       /* Q8_0 */
    tensor(w, "blk.0.attn_k.weight", 12, 2, ne_k, 144);          /* Q4_K */
    save(w, "tiny_model.gguf");
}

/* custom alignment, a 4-d tensor and a zero-length tensor */
static void aligned64(void) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_alignment(w, 64);
    gguf_write_u64(w, "t.u64", 1ull << 40);
    gguf_write_i32(w, "t.i32", -7);
    gguf_write_str(w, "t.empty", "");
    gguf_write_arr_f32(w, "t.no_floats", NULL, 0);
    uint64_t ne4[] = {2, 3, 2, 2}, ne0[] = {0, 4}, ne6[] = {256, 1};
    tensor(w, "x4d", 0, 4, ne4, 2 * 3 * 2 * 2 * 4);
    tensor(w, "empty", 0, 2, ne0, 0);
    tensor(w, "q6", 14, 2, ne6, 210);                            /* Q6_K */
    save(w, "aligned64.gguf");
}

/* every value type and array element type, by hand in the spec layout
 * (docs/engine.md §1.2); the writer only has the common types */
static unsigned char g_buf[4096];
static size_t g_len;
static void put(unsigned long long v, int n) {
    for (int i = 0; i < n; i++) g_buf[g_len++] = (unsigned char)(v >> (8 * i));
}
static void str(const char *s) {
    put(strlen(s), 8);
    memcpy(g_buf + g_len, s, strlen(s));
    g_len += strlen(s);
}
static void all_types(void) {
    static const int size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    memcpy(g_buf, "GGUF", 4);
    g_len = 4;
    put(3, 4);
    put(1, 8);  /* tensors */
    put(24, 8); /* kv: 12 scalar/string values, 12 arrays */
    char key[32];
    for (int t = 0; t <= 12; t++) {
        if (t == 9) continue;
        snprintf(key, sizeof key, "v.%d", t);
        str(key);
        put((unsigned)t, 4);
        if (t == 8) str("text");
        else put(t == 7 ? 1 : 0x0102030405060708ull, size[t]);
    }
    for (int t = 0; t <= 12; t++) {
        if (t == 9) continue;
        snprintf(key, sizeof key, "a.%d", t);
        str(key);
        put(9, 4);
        put((unsigned)t, 4);
        put(2, 8);
        for (int i = 0; i < 2; i++) {
            if (t == 8) str(i ? "y" : "x");
            else put(t == 7 ? (unsigned)i : 0x8070605040302010ull, size[t]);
        }
    }
    str("t");
    put(1, 4);
    put(4, 8);
    put(0, 4); /* F32 */
    put(0, 8);
    while (g_len % 32) g_buf[g_len++] = 0;
    put(0, 8);
    put(0, 8);
    char path[1024];
    snprintf(path, sizeof path, "%s/all_types.gguf", g_dir);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(g_buf, 1, g_len, fp) != g_len || fclose(fp) != 0) {
        perror(path);
        exit(1);
    }
}

int main(int argc, char **argv) {
    g_dir = argc > 1 ? argv[1] : ".";
    empty();
    tiny_model();
    aligned64();
    all_types();
    return 0;
}
EOF

mkdir -p "$out"
"$cc" -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Iinclude -Isrc -o "$work/gen" \
    "$work/gen.c" src/format/gguf.c src/format/gguf_write.c src/format/gguf_format.c src/base/error.c -lm
"$work/gen" "$out"
ls -l "$out"
