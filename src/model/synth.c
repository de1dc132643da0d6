/* Random-weight GGUF files with the shapes of real models (synth.h). */
#include "model/synth.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/prng.h"
#include "base/threads.h"
#include "format/gguf.h"

/* ---------------------------------------------------------------- shapes */

/* From each model's config.json (Hugging Face). head_dim is hidden/heads for
 * all of them. Mistral-7B is the v0.2/v0.3 shape without sliding window
 * (rope theta 1e6, 32K context) with the v0.2 vocabulary. */
static const pkv_synth_shape SHAPES[] = {
    {
        .name = "llama-3.2-1b", .source = "meta-llama/Llama-3.2-1B", .arch = "llama",
        .n_vocab = 128256, .n_ctx_train = 131072, .n_embd = 2048, .n_layer = 16, .n_ff = 8192,
        .n_head = 32, .n_head_kv = 8, .head_dim = 64, .rope_theta = 500000.0f, .rms_eps = 1e-5f,
        .tied_embeddings = true, .qkv_bias = false,
        .rope_llama3_factor = 32.0f, .rope_llama3_low_freq_factor = 1.0f,
        .rope_llama3_high_freq_factor = 4.0f, .rope_llama3_original_ctx = 8192,
    },
    {
        .name = "qwen2.5-1.5b", .source = "Qwen/Qwen2.5-1.5B-Instruct", .arch = "qwen2",
        .n_vocab = 151936, .n_ctx_train = 32768, .n_embd = 1536, .n_layer = 28, .n_ff = 8960,
        .n_head = 12, .n_head_kv = 2, .head_dim = 128, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
        .tied_embeddings = true, .qkv_bias = true,
    },
    {
        .name = "qwen2.5-0.5b", .source = "Qwen/Qwen2.5-0.5B-Instruct", .arch = "qwen2",
        .n_vocab = 151936, .n_ctx_train = 32768, .n_embd = 896, .n_layer = 24, .n_ff = 4864,
        .n_head = 14, .n_head_kv = 2, .head_dim = 64, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
        .tied_embeddings = true, .qkv_bias = true,
    },
    {
        .name = "mistral-7b", .source = "mistralai/Mistral-7B-Instruct-v0.2", .arch = "llama",
        .n_vocab = 32000, .n_ctx_train = 32768, .n_embd = 4096, .n_layer = 32, .n_ff = 14336,
        .n_head = 32, .n_head_kv = 8, .head_dim = 128, .rope_theta = 1000000.0f, .rms_eps = 1e-5f,
        .tied_embeddings = false, .qkv_bias = false,
    },
};

const pkv_synth_shape *pkv_synth_shape_at(int i) {
    return i >= 0 && i < (int)(sizeof SHAPES / sizeof SHAPES[0]) ? &SHAPES[i] : NULL;
}

const pkv_synth_shape *pkv_synth_shape_find(const char *name) {
    const pkv_synth_shape *s;
    for (int i = 0; (s = pkv_synth_shape_at(i)); i++)
        if (!strcasecmp(s->name, name)) return s;
    return NULL;
}

void pkv_synth_opts_default(pkv_synth_opts *opts) {
    memset(opts, 0, sizeof *opts);
    opts->type = PKV_TYPE_Q8_0;
    opts->seed = 1;
    opts->weight_std = 0.02f;
}

/* ---------------------------------------------------------------- the tensor list */

typedef struct {
    char name[GGUF_MAX_NAME];
    int64_t ne0, ne1;   /* ne1 = 0: a 1-D tensor */
    enum { FILL_RANDOM, FILL_ONES, FILL_ROPE_FACTORS } fill;
} tensor_plan;

/* Every tensor of the file, in the converter's order (docs/engine.md §1.6).
 * Returns the count; plan may be NULL to count only. */
static int plan_tensors(const pkv_synth_shape *s, tensor_plan *plan) {
    int n = 0;
#define ADD(fill_, ne0_, ne1_, ...)                                                  \
    do {                                                                             \
        if (plan) {                                                                  \
            snprintf(plan[n].name, sizeof plan[n].name, __VA_ARGS__);                \
            plan[n].ne0 = (ne0_);                                                    \
            plan[n].ne1 = (ne1_);                                                    \
            plan[n].fill = (fill_);                                                  \
        }                                                                            \
        n++;                                                                         \
    } while (0)
    int64_t q_dim = (int64_t)s->n_head * s->head_dim, kv_dim = (int64_t)s->n_head_kv * s->head_dim;
    ADD(FILL_RANDOM, s->n_embd, s->n_vocab, "token_embd.weight");
    if (s->rope_llama3_factor > 0.0f) ADD(FILL_ROPE_FACTORS, s->head_dim / 2, 0, "rope_freqs.weight");
    for (int il = 0; il < s->n_layer; il++) {
        ADD(FILL_ONES, s->n_embd, 0, "blk.%d.attn_norm.weight", il);
        ADD(FILL_RANDOM, s->n_embd, q_dim, "blk.%d.attn_q.weight", il);
        ADD(FILL_RANDOM, s->n_embd, kv_dim, "blk.%d.attn_k.weight", il);
        ADD(FILL_RANDOM, s->n_embd, kv_dim, "blk.%d.attn_v.weight", il);
        if (s->qkv_bias) {
            ADD(FILL_RANDOM, q_dim, 0, "blk.%d.attn_q.bias", il);
            ADD(FILL_RANDOM, kv_dim, 0, "blk.%d.attn_k.bias", il);
            ADD(FILL_RANDOM, kv_dim, 0, "blk.%d.attn_v.bias", il);
        }
        ADD(FILL_RANDOM, q_dim, s->n_embd, "blk.%d.attn_output.weight", il);
        ADD(FILL_ONES, s->n_embd, 0, "blk.%d.ffn_norm.weight", il);
        ADD(FILL_RANDOM, s->n_embd, s->n_ff, "blk.%d.ffn_gate.weight", il);
        ADD(FILL_RANDOM, s->n_embd, s->n_ff, "blk.%d.ffn_up.weight", il);
        ADD(FILL_RANDOM, s->n_ff, s->n_embd, "blk.%d.ffn_down.weight", il);
    }
    ADD(FILL_ONES, s->n_embd, 0, "output_norm.weight");
    if (!s->tied_embeddings) ADD(FILL_RANDOM, s->n_embd, s->n_vocab, "output.weight");
#undef ADD
    return n;
}

/* The type rows of ne0 elements get when weight_type's blocks do not divide
 * them: llama-quantize's fallback for K-quants (Q4_K -> Q5_0, Q5_K -> Q5_1,
 * Q6_K -> Q8_0), e.g. Qwen2.5-0.5B's 896-wide rows. */
static pkv_type row_type(pkv_type weight_type, int64_t ne0) {
    const pkv_type_info *ti = pkv_type_get(weight_type);
    if (!ti || ne0 % ti->block_elems == 0) return weight_type;
    switch (weight_type) {
    case PKV_TYPE_Q4_K: return PKV_TYPE_Q5_0;
    case PKV_TYPE_Q5_K: return PKV_TYPE_Q5_1;
    case PKV_TYPE_Q6_K: return PKV_TYPE_Q8_0;
    default: return weight_type;
    }
}

/* 1-D tensors are F32 (the converter and llama-quantize never quantise them). */
static pkv_type tensor_type(const tensor_plan *t, pkv_type weight_type) {
    return t->ne1 > 0 ? row_type(weight_type, t->ne0) : PKV_TYPE_F32;
}

static uint64_t tensor_bytes(const tensor_plan *t, pkv_type weight_type) {
    int64_t rows = t->ne1 > 0 ? t->ne1 : 1;
    return pkv_row_bytes(tensor_type(t, weight_type), t->ne0) * (uint64_t)rows;
}

static bool type_writable(pkv_type type) {
    switch (type) {
    case PKV_TYPE_F32: case PKV_TYPE_F16: case PKV_TYPE_BF16: case PKV_TYPE_Q4_0: case PKV_TYPE_Q4_1:
    case PKV_TYPE_Q5_0: case PKV_TYPE_Q5_1: case PKV_TYPE_Q8_0: case PKV_TYPE_Q4_K: case PKV_TYPE_Q5_K:
    case PKV_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

int pkv_synth_check(const pkv_synth_shape *s, pkv_type type, pkv_error *err) {
    if (!s->name || !s->arch || (strcmp(s->arch, "llama") && strcmp(s->arch, "qwen2")))
        return pkv_fail(err, PKV_ERR_ARG, "synth: architecture must be llama or qwen2");
    if (s->n_vocab < 259)
        return pkv_fail(err, PKV_ERR_ARG, "synth %s: vocabulary %d is smaller than the 259 byte-level tokens",
                        s->name, s->n_vocab);
    if (s->n_embd <= 0 || s->n_layer <= 0 || s->n_ff <= 0 || s->n_head <= 0 || s->n_head_kv <= 0 ||
        s->head_dim <= 0 || s->head_dim % 2 || s->n_head % s->n_head_kv || s->n_ctx_train <= 0)
        return pkv_fail(err, PKV_ERR_ARG,
                        "synth %s: dimensions must be positive, head_dim even and heads a multiple of kv heads",
                        s->name);
    if (!(s->rope_theta > 0.0f) || !(s->rms_eps > 0.0f))
        return pkv_fail(err, PKV_ERR_ARG, "synth %s: rope theta and rms eps must be > 0", s->name);
    if (s->rope_llama3_factor > 0.0f &&
        (s->rope_llama3_original_ctx <= 0 || !(s->rope_llama3_high_freq_factor > s->rope_llama3_low_freq_factor)))
        return pkv_fail(err, PKV_ERR_ARG, "synth %s: llama3 rope scaling needs high > low freq factor and a context",
                        s->name);
    const pkv_type_info *ti = pkv_type_get(type);
    if (!ti || !type_writable(type))
        return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                        "synth: weight type %s cannot be written (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, "
                        "q4_k, q5_k, q6_k)",
                        ti ? ti->name : "unknown");
    int64_t widths[] = {s->n_embd, (int64_t)s->n_head * s->head_dim, s->n_ff};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        const pkv_type_info *ri = pkv_type_get(row_type(type, widths[i]));
        if (widths[i] % ri->block_elems)
            return pkv_fail(err, PKV_ERR_ARG, "synth %s: rows of %lld elements are not whole %s blocks of %d",
                            s->name, (long long)widths[i], ri->name, ri->block_elems);
    }
    return 0;
}

uint64_t pkv_synth_tensor_bytes(const pkv_synth_shape *s, pkv_type type) {
    int n = plan_tensors(s, NULL);
    tensor_plan *plan = malloc((size_t)n * sizeof *plan);
    if (!plan) return 0;
    plan_tensors(s, plan);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += tensor_bytes(&plan[i], type);
    free(plan);
    return total;
}

/* ---------------------------------------------------------------- values */

void pkv_synth_llama3_rope_factors(const pkv_synth_shape *s, float *factors) {
    double old_ctx = s->rope_llama3_original_ctx, low = s->rope_llama3_low_freq_factor,
           high = s->rope_llama3_high_freq_factor, factor = s->rope_llama3_factor;
    double low_freq_wavelen = old_ctx / low, high_freq_wavelen = old_ctx / high;
    for (int i = 0; i < s->head_dim / 2; i++) {
        double freq = 1.0 / pow(s->rope_theta, 2.0 * i / s->head_dim);
        double wavelen = 2.0 * M_PI / freq;
        if (wavelen < high_freq_wavelen) {
            factors[i] = 1.0f;
        } else if (wavelen > low_freq_wavelen) {
            factors[i] = (float)factor;
        } else {
            double smooth = (old_ctx / wavelen - low) / (high - low);
            factors[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
}

/* Approximately normal: the sum of four uniform 16-bit numbers (Irwin-Hall,
 * mean 4 * 32767.5, standard deviation 65536 / sqrt(3)), one 64-bit draw per
 * value. Bounded at 3.46 sigma, which is all a weight for timing needs. */
static float approx_normal(uint64_t *state) {
    uint64_t r = pkv_splitmix64(state);
    double sum = (double)(r & 0xffff) + (double)((r >> 16) & 0xffff) + (double)((r >> 32) & 0xffff) +
                 (double)(r >> 48);
    return (float)((sum - 131070.0) * (1.7320508075688772 / 65536.0));
}

/* One seed per (file seed, tensor, row): the values do not depend on the
 * number of threads. */
static uint64_t row_seed(uint64_t seed, int tensor, int64_t row) {
    uint64_t st = seed ^ ((uint64_t)tensor << 40) ^ (uint64_t)row * 0xd1342543de82ef95ull;
    return pkv_splitmix64(&st);
}

typedef struct {
    const tensor_plan *t;
    int index;
    pkv_type type;
    uint64_t seed;
    float std;
    uint8_t *dst;
    uint64_t row_bytes;
    bool oom;
} fill_job;

static void fill_rows(void *arg, int ith, int nth) {
    fill_job *j = arg;
    int64_t rows = j->t->ne1 > 0 ? j->t->ne1 : 1, r0, r1;
    pkv_split(rows, ith, nth, 1, &r0, &r1);
    float *row = malloc((size_t)j->t->ne0 * sizeof *row);
    if (!row) {
        j->oom = true; /* several threads may set it; they all write true */
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        uint64_t st = row_seed(j->seed, j->index, r);
        for (int64_t i = 0; i < j->t->ne0; i++) row[i] = j->std * approx_normal(&st);
        pkv_quantize_row_ref(j->type, row, j->dst + (uint64_t)r * j->row_bytes, j->t->ne0);
    }
    free(row);
}

/* The tensor's bytes, freshly allocated (caller frees). */
static uint8_t *make_tensor(const pkv_synth_shape *s, const tensor_plan *t, int index, const pkv_synth_opts *o,
                            pkv_pool *pool, pkv_error *err) {
    pkv_type type = tensor_type(t, o->type);
    uint64_t nbytes = tensor_bytes(t, o->type);
    uint8_t *data = malloc(nbytes ? nbytes : 1);
    if (!data) {
        pkv_fail(err, PKV_ERR_NOMEM, "synth: out of memory for tensor %s (%llu bytes)", t->name,
                 (unsigned long long)nbytes);
        return NULL;
    }
    if (t->fill == FILL_ONES) {
        for (int64_t i = 0; i < t->ne0; i++) ((float *)data)[i] = 1.0f;
    } else if (t->fill == FILL_ROPE_FACTORS) {
        pkv_synth_llama3_rope_factors(s, (float *)data);
    } else {
        fill_job j = {t, index, type, o->seed, o->weight_std > 0.0f ? o->weight_std : 0.02f, data,
                      pkv_row_bytes(type, t->ne0), false};
        pkv_pool_run(pool, fill_rows, &j);
        if (j.oom) {
            free(data);
            pkv_fail(err, PKV_ERR_NOMEM, "synth: out of memory filling tensor %s", t->name);
            return NULL;
        }
    }
    return data;
}

/* ---------------------------------------------------------------- metadata */

/* general.file_type (llama.h llama_ftype) for a file whose 2-D weights all
 * have one type; a label only (docs/engine.md §1.4). */
static uint32_t file_type(pkv_type type) {
    switch (type) {
    case PKV_TYPE_F32: return 0;
    case PKV_TYPE_F16: return 1;
    case PKV_TYPE_Q4_0: return 2;
    case PKV_TYPE_Q4_1: return 3;
    case PKV_TYPE_Q8_0: return 7;
    case PKV_TYPE_Q5_0: return 8;
    case PKV_TYPE_Q5_1: return 9;
    case PKV_TYPE_Q4_K: return 14; /* Q4_K_S: every weight Q4_K */
    case PKV_TYPE_Q5_K: return 16; /* Q5_K_S */
    case PKV_TYPE_Q6_K: return 18;
    case PKV_TYPE_BF16: return 32;
    default: return 0;
    }
}

static void write_hparams(gguf_writer *w, const pkv_synth_shape *s, pkv_type type) {
    char key[96], name[160];
    gguf_write_str(w, "general.architecture", s->arch);
    snprintf(name, sizeof name, "%s shape, random weights", s->source);
    gguf_write_str(w, "general.name", name);
    gguf_write_u32(w, "general.file_type", file_type(type));
    gguf_write_u32(w, "general.quantization_version", 2);
#define ARCH_KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, s->arch), key)
    gguf_write_u32(w, ARCH_KEY("vocab_size"), (uint32_t)s->n_vocab);
    gguf_write_u32(w, ARCH_KEY("context_length"), (uint32_t)s->n_ctx_train);
    gguf_write_u32(w, ARCH_KEY("embedding_length"), (uint32_t)s->n_embd);
    gguf_write_u32(w, ARCH_KEY("block_count"), (uint32_t)s->n_layer);
    gguf_write_u32(w, ARCH_KEY("feed_forward_length"), (uint32_t)s->n_ff);
    gguf_write_u32(w, ARCH_KEY("attention.head_count"), (uint32_t)s->n_head);
    gguf_write_u32(w, ARCH_KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    gguf_write_u32(w, ARCH_KEY("attention.key_length"), (uint32_t)s->head_dim);
    gguf_write_u32(w, ARCH_KEY("attention.value_length"), (uint32_t)s->head_dim);
    gguf_write_u32(w, ARCH_KEY("rope.dimension_count"), (uint32_t)s->head_dim);
    gguf_write_f32(w, ARCH_KEY("rope.freq_base"), s->rope_theta);
    gguf_write_f32(w, ARCH_KEY("attention.layer_norm_rms_epsilon"), s->rms_eps);
#undef ARCH_KEY
}

/* Byte-level SentencePiece vocabulary (docs/engine.md §4.1, §4.3): <unk>,
 * <s>, </s>, <0x00>..<0xFF>, then unique placeholders up to n_vocab.
 * llama.cpp requires unique texts and a newline byte token. */
static int write_tokenizer(gguf_writer *w, const pkv_synth_shape *s, pkv_error *err) {
    int n = s->n_vocab;
    char **texts = calloc((size_t)n, sizeof *texts);
    float *scores = malloc((size_t)n * sizeof *scores);
    int32_t *types = malloc((size_t)n * sizeof *types);
    char *pool = malloc((size_t)n * 24);
    if (!texts || !scores || !types || !pool) {
        free(texts);
        free(scores);
        free(types);
        free(pool);
        return pkv_fail(err, PKV_ERR_NOMEM, "synth: out of memory for a %d-token vocabulary", n);
    }
    enum { TYPE_NORMAL = 1, TYPE_UNKNOWN = 2, TYPE_CONTROL = 3, TYPE_BYTE = 6 };
    for (int i = 0; i < n; i++) {
        char *t = pool + (size_t)i * 24;
        if (i == 0) snprintf(t, 24, "<unk>"), types[i] = TYPE_UNKNOWN;
        else if (i == 1) snprintf(t, 24, "<s>"), types[i] = TYPE_CONTROL;
        else if (i == 2) snprintf(t, 24, "</s>"), types[i] = TYPE_CONTROL;
        else if (i < 259) snprintf(t, 24, "<0x%02X>", i - 3), types[i] = TYPE_BYTE;
        else snprintf(t, 24, "[synth%d]", i), types[i] = TYPE_NORMAL;
        texts[i] = t;
        scores[i] = i < 259 ? 0.0f : -(float)i;
    }
    gguf_write_str(w, "tokenizer.ggml.model", "llama");
    gguf_write_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)texts, (uint64_t)n);
    gguf_write_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)n);
    gguf_write_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n);
    gguf_write_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_write_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_write_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_write_bool(w, "tokenizer.ggml.add_bos_token", true);
    gguf_write_bool(w, "tokenizer.ggml.add_eos_token", false);
    gguf_write_bool(w, "tokenizer.ggml.add_space_prefix", false);
    free(texts);
    free(scores);
    free(types);
    free(pool);
    return 0;
}

/* ---------------------------------------------------------------- the file */

/* A failed write leaves no half file behind (but never removes a device). */
static void remove_partial(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) remove(path);
}

int pkv_synth_write(const pkv_synth_shape *s, const pkv_synth_opts *opts_in, const char *path, pkv_error *err) {
    pkv_error_clear(err);
    pkv_synth_opts o;
    if (opts_in) o = *opts_in;
    else pkv_synth_opts_default(&o);
    if (pkv_synth_check(s, o.type, err)) return -1;
    /* fail before minutes of generating if the file cannot be created */
    FILE *probe = fopen(path, "wb");
    if (!probe) return pkv_fail(err, PKV_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    fclose(probe);
    int n = plan_tensors(s, NULL);
    tensor_plan *plan = malloc((size_t)n * sizeof *plan);
    gguf_writer *w = gguf_writer_new();
    pkv_pool *pool = pkv_pool_new(o.n_threads);
    int rc = -1;
    if (!plan || !w || !pool) {
        pkv_fail(err, PKV_ERR_NOMEM, "synth: out of memory");
        goto done;
    }
    plan_tensors(s, plan);
    write_hparams(w, s, o.type);
    if (write_tokenizer(w, s, err)) goto done;
    for (int i = 0; i < n; i++) {
        const tensor_plan *t = &plan[i];
        uint8_t *data = make_tensor(s, t, i, &o, pool, err);
        if (!data) goto done;
        uint64_t ne[2] = {(uint64_t)t->ne0, (uint64_t)(t->ne1 > 0 ? t->ne1 : 1)};
        int wr = gguf_write_tensor(w, t->name, tensor_type(t, o.type), t->ne1 > 0 ? 2 : 1, ne, data,
                                   tensor_bytes(t, o.type), err);
        free(data);
        if (wr) goto done;
    }
    rc = gguf_writer_save(w, path, err);
done:
    if (rc) remove_partial(path);
    pkv_pool_free(pool);
    gguf_writer_free(w);
    free(plan);
    return rc;
}
