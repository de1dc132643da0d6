/* Loading a model: hyper-parameters and weights from GGUF, every shape checked. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/model.h"

/* ---------------------------------------------------------------- metadata */

typedef struct {
    const gguf_file *f;
    const char *arch;
    pkv_error *err;
    int n_layer; /* block_count once read (per-layer arrays have this many entries) */
} meta_ctx;

static void arch_key(const meta_ctx *m, const char *suffix, char *key, size_t n) {
    snprintf(key, n, "%s.%s", m->arch, suffix);
}

/* Reads "<arch>.<suffix>" as an int in [0, 2^30]. A per-layer key may hold an
 * array of one value per layer (block_count entries, m->n_layer); its values
 * must all be equal (llama.cpp allows per-layer head counts; the uniform case
 * is supported). Other keys must be single integers. */
static int meta_int(const meta_ctx *m, const char *suffix, bool required, bool per_layer, int def, int *out) {
    char key[160];
    arch_key(m, suffix, key, sizeof key);
    const gguf_kv *kv = gguf_find_kv(m->f, key);
    if (!kv) {
        if (required)
            return pkv_fail(m->err, PKV_ERR_FORMAT, "%s: missing required key %s", m->f->path, key);
        *out = def;
        return 0;
    }
    int64_t v;
    if (kv->value.type == GGUF_VT_ARRAY) {
        const gguf_value *a = &kv->value;
        if (!per_layer || a->v.arr.count == 0 || a->v.arr.elem_type == GGUF_VT_STRING ||
            a->v.arr.elem_type == GGUF_VT_FLOAT32 || a->v.arr.elem_type == GGUF_VT_FLOAT64 ||
            a->v.arr.elem_type == GGUF_VT_BOOL)
            return pkv_fail(m->err, PKV_ERR_FORMAT, "%s: key %s: expected %s", m->f->path, key,
                            per_layer ? "an integer or an integer array" : "an integer");
        if (a->v.arr.count != (uint64_t)m->n_layer)
            return pkv_fail(m->err, PKV_ERR_FORMAT, "%s: key %s: %llu per-layer values, block_count is %d",
                            m->f->path, key, (unsigned long long)a->v.arr.count, m->n_layer);
        v = gguf_arr_i64(a, 0);
        for (uint64_t i = 1; i < a->v.arr.count; i++)
            if (gguf_arr_i64(a, i) != v)
                return pkv_fail(m->err, PKV_ERR_UNSUPPORTED,
                                "%s: key %s: per-layer values differ (layer %llu has %lld, layer 0 %lld); "
                                "only uniform layers are supported",
                                m->f->path, key, (unsigned long long)i, (long long)gguf_arr_i64(a, i),
                                (long long)v);
    } else if (gguf_get_i64(m->f, key, &v, m->err) != 0) {
        return -1;
    }
    if (v < 0 || v > (1 << 30))
        return pkv_fail(m->err, PKV_ERR_FORMAT, "%s: key %s = %lld is outside [0, 2^30]", m->f->path, key,
                        (long long)v);
    *out = (int)v;
    return 0;
}

/* Reads "<arch>.<suffix>" as a float; def when absent. A value in the file
 * must be finite and, for the keys that divide, scale or cap (positive set),
 * greater than zero: each is refused with its name rather than computed with. */
static int meta_float(const meta_ctx *m, const char *suffix, bool required, bool positive, float def, float *out) {
    char key[160];
    arch_key(m, suffix, key, sizeof key);
    int rc = gguf_get_f32(m->f, key, out, m->err);
    if (rc < 0) return -1;
    if (rc == 1) {
        if (required)
            return pkv_fail(m->err, PKV_ERR_FORMAT, "%s: missing required key %s", m->f->path, key);
        *out = def;
        return 0;
    }
    if (!isfinite(*out))
        return pkv_fail(m->err, PKV_ERR_FORMAT, "%s: key %s = %g is not finite", m->f->path, key, *out);
    if (positive && !(*out > 0.0f))
        return pkv_fail(m->err, PKV_ERR_FORMAT, "%s: key %s = %g must be > 0", m->f->path, key, *out);
    return 0;
}

static int read_hparams(pkv_model *model, pkv_error *err) {
    meta_ctx m = {&model->file, model->arch_name, err, 0};
    pkv_hparams *hp = &model->hp;
    if (meta_int(&m, "context_length", true, false, 0, &hp->n_ctx_train) ||
        meta_int(&m, "embedding_length", true, false, 0, &hp->n_embd) ||
        meta_int(&m, "block_count", true, false, 0, &hp->n_layer))
        return -1;
    m.n_layer = hp->n_layer;
    if (meta_int(&m, "feed_forward_length", true, true, 0, &hp->n_ff) ||
        meta_int(&m, "attention.head_count", true, true, 0, &hp->n_head))
        return -1;
    if (meta_int(&m, "attention.head_count_kv", false, true, hp->n_head, &hp->n_head_kv)) return -1;
    const struct {
        const char *suffix;
        int value;
    } sizes[] = {{"context_length", hp->n_ctx_train},     {"embedding_length", hp->n_embd},
                 {"block_count", hp->n_layer},            {"feed_forward_length", hp->n_ff},
                 {"attention.head_count", hp->n_head},    {"attention.head_count_kv", hp->n_head_kv}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].value <= 0)
            return pkv_fail(err, PKV_ERR_FORMAT, "%s: key %s.%s = %d must be > 0", model->file.path,
                            model->arch_name, sizes[i].suffix, sizes[i].value);
    if (hp->n_layer > 4096 || hp->n_head > 4096)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: block_count %d or head_count %d exceeds 4096",
                        model->file.path, hp->n_layer, hp->n_head);
    if (hp->n_head % hp->n_head_kv != 0)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d",
                        model->file.path, hp->n_head, hp->n_head_kv);
    int default_hd = hp->n_embd / hp->n_head;
    if (meta_int(&m, "attention.key_length", false, false, default_hd, &hp->head_dim_k) ||
        meta_int(&m, "attention.value_length", false, false, default_hd, &hp->head_dim_v))
        return -1;
    if (hp->head_dim_k <= 0 || hp->head_dim_k % 2 != 0)
        return pkv_fail(err, PKV_ERR_FORMAT,
                        "%s: key %s.attention.key_length: head dimension %d must be positive and even",
                        model->file.path, model->arch_name, hp->head_dim_k);
    if (hp->head_dim_v <= 0)
        return pkv_fail(err, PKV_ERR_FORMAT,
                        "%s: key %s.attention.value_length: head dimension %d must be positive",
                        model->file.path, model->arch_name, hp->head_dim_v);
    if (meta_float(&m, "attention.layer_norm_rms_epsilon", true, true, 0, &hp->rms_eps)) return -1;

    /* RoPE (docs/engine.md §5) */
    int n_rot;
    if (meta_int(&m, "rope.dimension_count", false, false, hp->head_dim_k, &n_rot)) return -1;
    if (n_rot <= 0 || n_rot > hp->head_dim_k || n_rot % 2)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: rope.dimension_count %d must be even and <= head dim %d",
                        model->file.path, n_rot, hp->head_dim_k);
    float base, factor;
    if (meta_float(&m, "rope.freq_base", false, true, 10000.0f, &base)) return -1;
    /* absent: no scaling; present, it must be a real factor (not silently "none") */
    if (meta_float(&m, "rope.scaling.factor", false, true, 0.0f, &factor)) return -1;
    char key[160];
    arch_key(&m, "rope.scaling.type", key, sizeof key);
    gguf_str stype;
    int rc = gguf_get_str(&model->file, key, &stype, err);
    if (rc < 0) return -1;
    if (rc == 0 && !gguf_str_eq(stype, "none") && !gguf_str_eq(stype, "linear")) {
        char tbuf[64];
        gguf_str_copy(stype, tbuf, sizeof tbuf);
        return pkv_fail(err, PKV_ERR_UNSUPPORTED, "%s: rope scaling type '%s' is not supported (none, linear)",
                        model->file.path, tbuf);
    }
    if (rc == 0 && gguf_str_eq(stype, "none")) factor = 0.0f;
    hp->rope_global = (pkv_rope_params){
        .mode = model->arch->rope_mode,
        .n_rot = n_rot,
        .base = base,
        .freq_scale = factor > 0.0f ? 1.0f / factor : 1.0f,
    };
    /* Local (sliding-window) layers: gemma3 uses base 10000 and no scaling. */
    hp->rope_local = hp->rope_global;
    if (model->arch->swa_rope_base > 0.0f) {
        /* newer converters write the local base; older files rely on the hard-coded value */
        if (meta_float(&m, "rope.freq_base_swa", false, true, model->arch->swa_rope_base, &hp->rope_local.base))
            return -1;
        hp->rope_local.freq_scale = 1.0f;
        hp->rope_local.freq_factors = NULL;
    }

    float attn_scale;
    if (meta_float(&m, "attention.scale", false, true, 0.0f, &attn_scale)) return -1;
    hp->attn_scale = attn_scale > 0.0f ? attn_scale : 1.0f / sqrtf((float)hp->head_dim_k);
    /* Gemma 3 27B scales by 1/sqrt(n_embd/n_head) (docs/engine.md §3.2) */
    if (model->arch->swa_pattern_6 && hp->n_layer == 62 && attn_scale <= 0.0f)
        hp->attn_scale = 1.0f / sqrtf((float)hp->n_embd / hp->n_head);
    hp->embd_scale = model->arch->embd_scale_sqrt ? sqrtf((float)hp->n_embd) : 1.0f;

    /* absent: no capping; a cap in the file divides the logits, so it must be > 0 */
    if (meta_float(&m, "final_logit_softcapping", false, true, 0.0f, &hp->final_logit_softcap) ||
        meta_float(&m, "attn_logit_softcapping", false, true, 0.0f, &hp->attn_logit_softcap))
        return -1;
    if (meta_int(&m, "attention.sliding_window", false, false, 0, &hp->sliding_window)) return -1;

    hp->layer_swa = calloc((size_t)hp->n_layer, sizeof *hp->layer_swa);
    if (!hp->layer_swa) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for layer flags");
    if (model->arch->swa_pattern_6 && hp->sliding_window > 0)
        for (int il = 0; il < hp->n_layer; il++) hp->layer_swa[il] = il % 6 < 5;
    else
        hp->sliding_window = 0; /* other architectures here have full attention everywhere */
    return 0;
}

/* ---------------------------------------------------------------- tensors */

/* Binds a tensor by name and checks its type and exact shape. */
static int bind_tensor(pkv_model *model, pkv_tensor *t, const char *name, int64_t ne0, int64_t ne1,
                       bool required, pkv_error *err) {
    const gguf_tensor *gt = gguf_find_tensor(&model->file, name);
    memset(t, 0, sizeof *t);
    if (!gt) {
        if (required)
            return pkv_fail(err, PKV_ERR_FORMAT, "%s: missing tensor %s", model->file.path, name);
        return 0;
    }
    const pkv_type_info *ti = pkv_type_get(gt->type);
    if (!ti || !ti->computable)
        return pkv_fail(err, PKV_ERR_UNSUPPORTED, "%s: tensor %s has unsupported quant type %s (id %u)",
                        model->file.path, name, ti ? ti->name : "unknown", gt->type);
    int64_t want1 = ne1 > 0 ? ne1 : 1;
    if ((int64_t)gt->ne[0] != ne0 || (int64_t)gt->ne[1] != want1 || gt->ne[2] != 1 || gt->ne[3] != 1)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: tensor %s has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld]",
                        model->file.path, name, (unsigned long long)gt->ne[0], (unsigned long long)gt->ne[1],
                        (unsigned long long)gt->ne[2], (unsigned long long)gt->ne[3], (long long)ne0,
                        (long long)want1);
    if (ne1 <= 0 && gt->type != PKV_TYPE_F32)
        return pkv_fail(err, PKV_ERR_UNSUPPORTED, "%s: 1-D tensor %s must be F32, is %s", model->file.path,
                        name, ti->name);
    t->name = gt->name;
    t->type = gt->type;
    t->ne[0] = (int64_t)gt->ne[0];
    t->ne[1] = (int64_t)gt->ne[1];
    t->ne[2] = t->ne[3] = 1;
    t->data = gt->data;
    t->nbytes = gt->nbytes;
    t->row_bytes = pkv_row_bytes(gt->type, t->ne[0]);
    return 0;
}

static int bind_layer(pkv_model *model, int il, pkv_error *err) {
    const pkv_hparams *hp = &model->hp;
    const pkv_arch *a = model->arch;
    pkv_layer_weights *L = &model->layers[il];
    int64_t q_dim = (int64_t)hp->n_head * hp->head_dim_k, k_dim = (int64_t)hp->n_head_kv * hp->head_dim_k,
            v_dim = (int64_t)hp->n_head_kv * hp->head_dim_v, o_dim = (int64_t)hp->n_head * hp->head_dim_v;
    char name[GGUF_MAX_NAME + 32];
#define BIND(field, suffix, ne0, ne1, req)                                           \
    do {                                                                             \
        snprintf(name, sizeof name, "blk.%d.%s", il, suffix);                        \
        if (bind_tensor(model, &L->field, name, ne0, ne1, req, err)) return -1;      \
    } while (0)
    BIND(attn_norm, "attn_norm.weight", hp->n_embd, 0, true);
    BIND(wq, "attn_q.weight", hp->n_embd, q_dim, true);
    BIND(wk, "attn_k.weight", hp->n_embd, k_dim, true);
    BIND(wv, "attn_v.weight", hp->n_embd, v_dim, true);
    BIND(wo, "attn_output.weight", o_dim, hp->n_embd, true);
    BIND(bq, "attn_q.bias", q_dim, 0, a->qkv_bias);
    BIND(bk, "attn_k.bias", k_dim, 0, a->qkv_bias);
    BIND(bv, "attn_v.bias", v_dim, 0, a->qkv_bias);
    BIND(q_norm, "attn_q_norm.weight", hp->head_dim_k, 0, a->qk_norm);
    BIND(k_norm, "attn_k_norm.weight", hp->head_dim_k, 0, a->qk_norm);
    BIND(post_attn_norm, "post_attention_norm.weight", hp->n_embd, 0, a->post_norms);
    BIND(ffn_norm, "ffn_norm.weight", hp->n_embd, 0, true);
    BIND(w_gate, "ffn_gate.weight", hp->n_embd, hp->n_ff, true);
    BIND(w_up, "ffn_up.weight", hp->n_embd, hp->n_ff, true);
    BIND(w_down, "ffn_down.weight", hp->n_ff, hp->n_embd, true);
    BIND(post_ffn_norm, "post_ffw_norm.weight", hp->n_embd, 0, a->post_norms);
#undef BIND
    return 0;
}

static int bind_weights(pkv_model *model, pkv_error *err) {
    pkv_hparams *hp = &model->hp;
    const gguf_tensor *emb = gguf_find_tensor(&model->file, "token_embd.weight");
    if (!emb) return pkv_fail(err, PKV_ERR_FORMAT, "%s: missing tensor token_embd.weight", model->file.path);
    hp->n_vocab = pkv_tokenizer_n_vocab(model->tok);
    if ((int64_t)emb->ne[1] != hp->n_vocab)
        return pkv_fail(err, PKV_ERR_FORMAT,
                        "%s: token_embd.weight has %llu rows but the tokenizer has %d tokens",
                        model->file.path, (unsigned long long)emb->ne[1], hp->n_vocab);
    if (bind_tensor(model, &model->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, true, err) ||
        bind_tensor(model, &model->output_norm, "output_norm.weight", hp->n_embd, 0, true, err) ||
        bind_tensor(model, &model->output, "output.weight", hp->n_embd, hp->n_vocab, false, err))
        return -1;
    if (!pkv_tensor_present(&model->output)) model->output = model->tok_embd; /* tied */

    const gguf_tensor *rf = gguf_find_tensor(&model->file, "rope_freqs.weight");
    if (rf) {
        if (bind_tensor(model, &model->rope_freqs, "rope_freqs.weight", hp->rope_global.n_rot / 2, 0, true, err))
            return -1;
        hp->rope_global.freq_factors = model->rope_freqs.data;
        for (int i = 0; i < hp->rope_global.n_rot / 2; i++) {
            float f = hp->rope_global.freq_factors[i];
            if (!isfinite(f) || !(f > 0.0f))
                return pkv_fail(err, PKV_ERR_FORMAT, "%s: rope_freqs.weight[%d] = %g must be finite and > 0",
                                model->file.path, i, f);
        }
    }

    model->layers = calloc((size_t)hp->n_layer, sizeof *model->layers);
    if (!model->layers) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for %d layers", hp->n_layer);
    for (int il = 0; il < hp->n_layer; il++)
        if (bind_layer(model, il, err)) return -1;

    for (uint64_t i = 0; i < model->file.n_tensors; i++) {
        const gguf_tensor *t = &model->file.tensors[i];
        model->weight_bytes += t->nbytes;
        model->n_params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    }
    return 0;
}

/* ---------------------------------------------------------------- load */

pkv_model *pkv_model_load(const char *path, const pkv_load_opts *opts, pkv_error *err) {
    pkv_error_clear(err);
    pkv_model *model = calloc(1, sizeof *model);
    if (!model) {
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (gguf_open(&model->file, path, err)) {
        free(model);
        return NULL;
    }
    gguf_str arch;
    int rc = gguf_get_str(&model->file, "general.architecture", &arch, err);
    if (rc == 1) pkv_fail(err, PKV_ERR_FORMAT, "%s: missing required key general.architecture", path);
    if (rc != 0) goto fail;
    gguf_str_copy(arch, model->arch_name, sizeof model->arch_name);
    model->arch = pkv_arch_find(arch.ptr, arch.len);
    if (!model->arch) {
        pkv_fail(err, PKV_ERR_UNSUPPORTED, "%s: unsupported architecture '%s' (supported: llama, qwen2, gemma3)",
                 path, model->arch_name);
        goto fail;
    }
    gguf_str name;
    if (gguf_get_str(&model->file, "general.name", &name, NULL) == 0)
        gguf_str_copy(name, model->name, sizeof model->name);

    if (read_hparams(model, err)) goto fail;
    model->tok = pkv_tokenizer_load(&model->file, err);
    if (!model->tok) goto fail;
    if (bind_weights(model, err)) goto fail;
    if (pkv_chat_style_for_model(&model->file, model->arch_name, model->tok, opts ? opts->chat_template : NULL,
                                 &model->chat, err))
        goto fail;
    model->has_chat_template = gguf_find_kv(&model->file, "tokenizer.chat_template") != NULL;
    model->kern = pkv_kernels_get(opts ? opts->simd : PKV_SIMD_AUTO);
    return model;
fail:
    pkv_model_free(model);
    return NULL;
}

void pkv_model_free(pkv_model *model) {
    if (!model) return;
    pkv_tokenizer_free(model->tok);
    free(model->layers);
    free(model->hp.layer_swa);
    gguf_close(&model->file);
    free(model);
}

void pkv_model_get_info(const pkv_model *model, pkv_model_info *info) {
    const pkv_hparams *hp = &model->hp;
    memset(info, 0, sizeof *info);
    info->arch = model->arch_name;
    info->name = model->name;
    info->n_vocab = hp->n_vocab;
    info->n_ctx_train = hp->n_ctx_train;
    info->n_embd = hp->n_embd;
    info->n_layer = hp->n_layer;
    info->n_ff = hp->n_ff;
    info->n_head = hp->n_head;
    info->n_head_kv = hp->n_head_kv;
    info->head_dim = hp->head_dim_k;
    info->sliding_window = hp->sliding_window;
    for (int il = 0; il < hp->n_layer; il++) info->n_swa_layers += !pkv_layer_is_full(model, il);
    info->n_params = model->n_params;
    info->weight_bytes = model->weight_bytes;
    info->tokenizer = pkv_tokenizer_kind(model->tok) == PKV_TOK_SPM ? "spm" : "bpe";
}

uint64_t pkv_model_kv_bytes_per_token(const pkv_model *model, int elem_bytes) {
    const pkv_hparams *hp = &model->hp;
    return (uint64_t)hp->n_layer * hp->n_head_kv * (uint64_t)(hp->head_dim_k + hp->head_dim_v) * elem_bytes;
}

uint64_t pkv_model_kv_bytes_full(const pkv_model *model, int n_tokens, int elem_bytes) {
    const pkv_hparams *hp = &model->hp;
    uint64_t per_row = (uint64_t)hp->n_head_kv * (uint64_t)(hp->head_dim_k + hp->head_dim_v) * elem_bytes;
    uint64_t total = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        int rows = n_tokens;
        if (!pkv_layer_is_full(model, il) && rows > hp->sliding_window) rows = hp->sliding_window;
        total += per_row * (uint64_t)rows;
    }
    return total;
}

/* ---------------------------------------------------------------- inspection */

int pkv_model_n_tensors(const pkv_model *model) { return (int)model->file.n_tensors; }

void pkv_model_tensor(const pkv_model *model, int i, pkv_tensor_info *info) {
    const gguf_tensor *t = &model->file.tensors[i];
    const pkv_type_info *ti = pkv_type_get(t->type);
    info->name = t->name;
    info->type = ti ? ti->name : "?";
    info->n_dims = (int)t->n_dims;
    for (int d = 0; d < 4; d++) info->ne[d] = t->ne[d];
    info->nbytes = t->nbytes;
}

int pkv_model_n_meta(const pkv_model *model) { return (int)model->file.n_kv; }

static void render_scalar(const gguf_value *v, char *out, int n) {
    switch (v->type) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        snprintf(out, (size_t)n, "%llu", (unsigned long long)v->v.u);
        break;
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64:
        snprintf(out, (size_t)n, "%lld", (long long)v->v.i);
        break;
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: snprintf(out, (size_t)n, "%g", v->v.f); break;
    case GGUF_VT_BOOL: snprintf(out, (size_t)n, "%s", v->v.u ? "true" : "false"); break;
    case GGUF_VT_STRING: {
        int len = v->v.str.len > 80 ? 80 : (int)v->v.str.len;
        snprintf(out, (size_t)n, "\"%.*s%s\"", len, v->v.str.ptr, v->v.str.len > 80 ? "..." : "");
        for (char *p = out; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
        break;
    }
    default: snprintf(out, (size_t)n, "?");
    }
}

bool pkv_model_meta(const pkv_model *model, int i, const char **key, char *value, int value_len) {
    if (i < 0 || (uint64_t)i >= model->file.n_kv) return false;
    const gguf_kv *kv = &model->file.kv[i];
    *key = kv->key;
    if (kv->value.type == GGUF_VT_ARRAY)
        snprintf(value, (size_t)value_len, "[%s x %llu]", gguf_vtype_name(kv->value.v.arr.elem_type),
                 (unsigned long long)kv->value.v.arr.count);
    else
        render_scalar(&kv->value, value, value_len);
    return true;
}
