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
    float base, factor, attn_factor;
    if (meta_float(&m, "rope.freq_base", false, true, 10000.0f, &base)) return -1;
    /* absent: no scaling; present, it must be a real factor (not silently "none") */
    if (meta_float(&m, "rope.scaling.factor", false, true, 0.0f, &factor)) return -1;
    /* the magnitude scale of cos and sin (LongRoPE's; llama.cpp reads it for every architecture) */
    if (meta_float(&m, "rope.scaling.attn_factor", false, true, 1.0f, &attn_factor)) return -1;
    if (meta_int(&m, "rope.scaling.original_context_length", false, false, hp->n_ctx_train, &hp->n_ctx_orig))
        return -1;
    if (hp->n_ctx_orig <= 0)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: key %s.rope.scaling.original_context_length = %d must be > 0",
                        model->file.path, model->arch_name, hp->n_ctx_orig);
    char key[160];
    arch_key(&m, "rope.scaling.type", key, sizeof key);
    gguf_str stype;
    int rc = gguf_get_str(&model->file, key, &stype, err);
    if (rc < 0) return -1;
    char tbuf[64] = "";
    if (rc == 0) gguf_str_copy(stype, tbuf, sizeof tbuf);
    /* none, linear (the default, as in llama.cpp), and phi3's LongRoPE, whose
     * scaling is in its factor tensors (docs/engine.md §5.3); YaRN and the rest are refused */
    bool longrope = rc == 0 && !strcmp(tbuf, "longrope") && model->arch->long_short_rope;
    if (rc == 0 && strcmp(tbuf, "none") && strcmp(tbuf, "linear") && !longrope)
        return pkv_fail(err, PKV_ERR_UNSUPPORTED, "%s: key %s = '%s' is not supported (none, linear%s)",
                        model->file.path, key, tbuf, model->arch->long_short_rope ? ", longrope" : "");
    if (longrope && factor > 0.0f)
        return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                        "%s: key %s.rope.scaling.factor = %g with rope.scaling.type 'longrope' is not supported "
                        "(LongRoPE scales by its rope_factors_long/short tensors)",
                        model->file.path, model->arch_name, factor);
    if (!strcmp(tbuf, "none")) factor = 0.0f;
    hp->rope_global = (pkv_rope_params){
        .mode = model->arch->rope_mode,
        .n_rot = n_rot,
        .base = base,
        .freq_scale = factor > 0.0f ? 1.0f / factor : 1.0f,
        .attn_factor = attn_factor,
    };
    /* Local (sliding-window) layers: gemma3 uses base 10000 and no scaling;
     * phi3's sliding layers are its only layers and share the global RoPE. */
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
    if (model->arch->swa == PKV_SWA_GEMMA3 && hp->n_layer == 62 && attn_scale <= 0.0f)
        hp->attn_scale = 1.0f / sqrtf((float)hp->n_embd / hp->n_head);
    hp->embd_scale = model->arch->embd_scale_sqrt ? sqrtf((float)hp->n_embd) : 1.0f;

    /* absent: no capping; a cap in the file divides the logits, so it must be > 0 */
    if (meta_float(&m, "final_logit_softcapping", false, true, 0.0f, &hp->final_logit_softcap) ||
        meta_float(&m, "attn_logit_softcapping", false, true, 0.0f, &hp->attn_logit_softcap))
        return -1;
    if (meta_int(&m, "attention.sliding_window", false, false, 0, &hp->sliding_window)) return -1;

    hp->layer_swa = calloc((size_t)hp->n_layer, sizeof *hp->layer_swa);
    if (!hp->layer_swa) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for layer flags");
    pkv_swa_pattern swa = hp->sliding_window > 0 ? model->arch->swa : PKV_SWA_NONE;
    if (swa == PKV_SWA_ALL && hp->sliding_window >= hp->n_ctx_train) {
        /* Phi-3.5's 262144 over a trained 131072: the window never masks a
         * token of a trained-length sequence, and sliding layers would not be
         * pressed; the layers stay full and longer sessions are refused (§3.6) */
        hp->swa_unapplied = hp->sliding_window;
        swa = PKV_SWA_NONE;
    }
    for (int il = 0; il < hp->n_layer; il++)
        hp->layer_swa[il] = swa == PKV_SWA_ALL || (swa == PKV_SWA_GEMMA3 && il % 6 < 5);
    if (swa == PKV_SWA_NONE) hp->sliding_window = 0; /* full attention everywhere */
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

/* rows [row0, row0 + n_rows) of a bound 2-D tensor, as a tensor of its own:
 * the q, k and v parts of a fused attn_qkv, the gate and up parts of phi3's
 * ffn_up (whole rows, so any block type splits cleanly). */
static pkv_tensor row_view(const pkv_tensor *t, int64_t row0, int64_t n_rows) {
    pkv_tensor v = *t;
    v.ne[1] = n_rows;
    v.data = (const uint8_t *)t->data + (uint64_t)row0 * t->row_bytes;
    v.nbytes = (uint64_t)n_rows * t->row_bytes;
    return v;
}

/* Q, K and V of layer il: attn_q/k/v, or one attn_qkv holding the q rows,
 * then the k rows, then the v rows (phi3; llama.cpp's create_tensor_qkv takes
 * either form, docs/engine.md §3.6). */
static int bind_qkv(pkv_model *model, int il, int64_t q_dim, int64_t k_dim, int64_t v_dim, pkv_error *err) {
    pkv_layer_weights *L = &model->layers[il];
    char name[GGUF_MAX_NAME + 32];
    snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", il);
    if (!gguf_find_tensor(&model->file, name)) {
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", il);
        if (bind_tensor(model, &L->wq, name, model->hp.n_embd, q_dim, true, err)) return -1;
        snprintf(name, sizeof name, "blk.%d.attn_k.weight", il);
        if (bind_tensor(model, &L->wk, name, model->hp.n_embd, k_dim, true, err)) return -1;
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", il);
        return bind_tensor(model, &L->wv, name, model->hp.n_embd, v_dim, true, err);
    }
    pkv_tensor qkv;
    if (bind_tensor(model, &qkv, name, model->hp.n_embd, q_dim + k_dim + v_dim, true, err)) return -1;
    snprintf(name, sizeof name, "blk.%d.attn_q.weight", il);
    if (gguf_find_tensor(&model->file, name))
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: layer %d has both attn_qkv.weight and attn_q.weight",
                        model->file.path, il);
    snprintf(name, sizeof name, "blk.%d.attn_qkv.bias", il);
    if (gguf_find_tensor(&model->file, name))
        return pkv_fail(err, PKV_ERR_UNSUPPORTED, "%s: tensor %s (a fused QKV bias) is not supported",
                        model->file.path, name);
    L->wq = row_view(&qkv, 0, q_dim);
    L->wk = row_view(&qkv, q_dim, k_dim);
    L->wv = row_view(&qkv, q_dim + k_dim, v_dim);
    return 0;
}

/* Gate and up of layer il: ffn_gate and ffn_up, or (phi3) one ffn_up of
 * 2 n_ff rows, the gate's first (HF Phi3MLP's chunk(2); docs/engine.md §3.6). */
static int bind_gate_up(pkv_model *model, int il, pkv_error *err) {
    const pkv_hparams *hp = &model->hp;
    pkv_layer_weights *L = &model->layers[il];
    char name[GGUF_MAX_NAME + 32];
    if (!model->arch->fused_gate_up) {
        snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", il);
        if (bind_tensor(model, &L->w_gate, name, hp->n_embd, hp->n_ff, true, err)) return -1;
        snprintf(name, sizeof name, "blk.%d.ffn_up.weight", il);
        return bind_tensor(model, &L->w_up, name, hp->n_embd, hp->n_ff, true, err);
    }
    snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", il);
    if (gguf_find_tensor(&model->file, name))
        return pkv_fail(err, PKV_ERR_UNSUPPORTED, "%s: tensor %s: %s holds gate and up in ffn_up", model->file.path,
                        name, model->arch_name);
    pkv_tensor gate_up;
    snprintf(name, sizeof name, "blk.%d.ffn_up.weight", il);
    if (bind_tensor(model, &gate_up, name, hp->n_embd, 2 * (int64_t)hp->n_ff, true, err)) return -1;
    L->w_gate = row_view(&gate_up, 0, hp->n_ff);
    L->w_up = row_view(&gate_up, hp->n_ff, hp->n_ff);
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
    if (bind_qkv(model, il, q_dim, k_dim, v_dim, err)) return -1;
    BIND(wo, "attn_output.weight", o_dim, hp->n_embd, true);
    BIND(bq, "attn_q.bias", q_dim, 0, a->qkv_bias);
    BIND(bk, "attn_k.bias", k_dim, 0, a->qkv_bias);
    BIND(bv, "attn_v.bias", v_dim, 0, a->qkv_bias);
    BIND(q_norm, "attn_q_norm.weight", hp->head_dim_k, 0, a->qk_norm);
    BIND(k_norm, "attn_k_norm.weight", hp->head_dim_k, 0, a->qk_norm);
    BIND(post_attn_norm, "post_attention_norm.weight", hp->n_embd, 0, a->post_norms);
    BIND(ffn_norm, "ffn_norm.weight", hp->n_embd, 0, true);
    if (bind_gate_up(model, il, err)) return -1;
    BIND(w_down, "ffn_down.weight", hp->n_ff, hp->n_embd, true);
    BIND(post_ffn_norm, "post_ffw_norm.weight", hp->n_embd, 0, a->post_norms);
#undef BIND
    return 0;
}

/* An optional F32 vector of n_rot/2 per-pair factors, every one finite and > 0. */
static int bind_rope_factors(pkv_model *model, pkv_tensor *t, const char *name, pkv_error *err) {
    int half = model->hp.rope_global.n_rot / 2;
    if (bind_tensor(model, t, name, half, 0, false, err)) return -1;
    const float *f = t->data;
    for (int i = 0; f && i < half; i++)
        if (!isfinite(f[i]) || !(f[i] > 0.0f))
            return pkv_fail(err, PKV_ERR_FORMAT, "%s: %s[%d] = %g must be finite and > 0", model->file.path, name, i,
                            f[i]);
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

    /* per-pair divisors of theta (docs/engine.md §5.3): Llama 3's rope_freqs,
     * phi3's LongRoPE pair (the session picks one of the two) */
    if (bind_rope_factors(model, &model->rope_freqs, "rope_freqs.weight", err)) return -1;
    hp->rope_global.freq_factors = model->rope_freqs.data;
    if (model->arch->long_short_rope) {
        if (bind_rope_factors(model, &model->rope_long, "rope_factors_long.weight", err) ||
            bind_rope_factors(model, &model->rope_short, "rope_factors_short.weight", err))
            return -1;
        bool has_long = pkv_tensor_present(&model->rope_long), has_short = pkv_tensor_present(&model->rope_short);
        if (has_long != has_short)
            return pkv_fail(err, PKV_ERR_FORMAT, "%s: tensor %s without %s: LongRoPE needs both", model->file.path,
                            has_long ? "rope_factors_long.weight" : "rope_factors_short.weight",
                            has_long ? "rope_factors_short.weight" : "rope_factors_long.weight");
        if (has_long && pkv_tensor_present(&model->rope_freqs))
            return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                            "%s: tensors rope_freqs.weight and rope_factors_long/short.weight together are not "
                            "supported", model->file.path);
        char key[160];
        snprintf(key, sizeof key, "%s.rope.scaling.type", model->arch_name);
        gguf_str stype;
        if (!has_long && gguf_get_str(&model->file, key, &stype, NULL) == 0 && gguf_str_eq(stype, "longrope"))
            return pkv_fail(err, PKV_ERR_FORMAT,
                            "%s: key %s = 'longrope' needs tensors rope_factors_long.weight and "
                            "rope_factors_short.weight", model->file.path, key);
        hp->rope_long = model->rope_long.data;
        hp->rope_short = model->rope_short.data;
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
        char list[128];
        pkv_arch_list(list, sizeof list);
        pkv_fail(err, PKV_ERR_UNSUPPORTED, "%s: unsupported architecture '%s' (supported: %s)", path,
                 model->arch_name, list);
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
    if (!(opts && opts->gguf_layout) && pkv_model_interleave(model, err)) goto fail;
    return model;
fail:
    pkv_model_free(model);
    return NULL;
}

void pkv_model_free(pkv_model *model) {
    if (!model) return;
    pkv_tokenizer_free(model->tok);
    free(model->layers);
    pkv_model_free_interleaved(model);
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
    info->rope_scaling = hp->rope_long ? "longrope" : hp->rope_global.freq_scale != 1.0f ? "linear" : "none";
    info->n_ctx_orig = hp->n_ctx_orig;
}

int pkv_model_session_rope(const pkv_model *m, int n_ctx, pkv_rope_params *global, pkv_rope_params *local,
                           pkv_error *err) {
    const pkv_hparams *hp = &m->hp;
    if (hp->swa_unapplied > 0 && n_ctx > hp->swa_unapplied)
        return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                        "context length %d exceeds the sliding window %d of %s, which this engine applies only "
                        "when it is shorter than the trained context %d",
                        n_ctx, hp->swa_unapplied, m->arch_name, hp->n_ctx_train);
    *global = hp->rope_global;
    *local = hp->rope_local;
    if (hp->rope_long) {
        /* llama.cpp's rule (get_rope_factors: n_ctx_seq > n_ctx_orig_yarn); HF
         * switches by the length of the sequence so far instead (§5.3) */
        const float *f = n_ctx > hp->n_ctx_orig ? hp->rope_long : hp->rope_short;
        global->freq_factors = f;
        if (!m->arch->swa_rope_base) local->freq_factors = f; /* sliding layers share the global RoPE */
    }
    return 0;
}

/* Bytes of one row of every KV head of a layer, keys and values. */
static uint64_t kv_row_bytes(const pkv_hparams *hp, pkv_cache_type type_k, pkv_cache_type type_v) {
    uint64_t k = pkv_cache_row_bytes(type_k, hp->head_dim_k), v = pkv_cache_row_bytes(type_v, hp->head_dim_v);
    return k && v ? (uint64_t)hp->n_head_kv * (k + v) : 0;
}

uint64_t pkv_model_kv_bytes_per_token(const pkv_model *model, pkv_cache_type type_k, pkv_cache_type type_v) {
    return (uint64_t)model->hp.n_layer * kv_row_bytes(&model->hp, type_k, type_v);
}

uint64_t pkv_model_kv_bytes_full(const pkv_model *model, int n_tokens, pkv_cache_type type_k, pkv_cache_type type_v) {
    const pkv_hparams *hp = &model->hp;
    uint64_t per_row = kv_row_bytes(hp, type_k, type_v);
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
