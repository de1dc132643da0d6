/* The vocabulary from a GGUF file's tokenizer.* keys (docs/engine.md §4.1). */
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "text/vocab.h"

/* ---------------------------------------------------------------- GGUF loading (§4.1) */

static int get_id_key(const gguf_file *f, const char *key, int64_t *out, pkv_error *err) {
    uint32_t v;
    int rc = gguf_get_u32(f, key, &v, err);
    if (rc < 0) return -1;
    *out = rc == 0 ? (int64_t)v : TOK_ID_ABSENT;
    return 0;
}

static int get_bool_key(const gguf_file *f, const char *key, int *out, pkv_error *err) {
    bool v;
    int rc = gguf_get_bool(f, key, &v, err);
    if (rc < 0) return -1;
    *out = rc == 0 ? (int)v : -1;
    return 0;
}

static int get_array(const gguf_file *f, const char *key, gguf_vtype elem, bool required,
                     const gguf_value **out, pkv_error *err) {
    int rc = gguf_get_arr(f, key, out, err);
    if (rc < 0) return -1;
    if (rc == 1) {
        *out = NULL;
        if (required) return pkv_fail(err, PKV_ERR_FORMAT, "%s: key %s missing", f->path, key);
        return 0;
    }
    if ((*out)->v.arr.elem_type != elem &&
        !(elem == GGUF_VT_FLOAT32 && (*out)->v.arr.elem_type == GGUF_VT_INT32))
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: %s has element type %s, expected %s", f->path,
                        key, gguf_vtype_name((*out)->v.arr.elem_type), gguf_vtype_name(elem));
    return 0;
}

typedef struct {
    float *scores;
    int32_t *types;
} loaded_arrays;

static int read_numeric_arrays(const gguf_file *f, uint64_t n, loaded_arrays *a, pkv_error *err) {
    const gguf_value *scores, *types;
    if (get_array(f, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, false, &scores, err) ||
        get_array(f, "tokenizer.ggml.token_type", GGUF_VT_INT32, false, &types, err))
        return -1;
    if (types && types->v.arr.elem_type != GGUF_VT_INT32)
        return pkv_fail(err, PKV_ERR_FORMAT, "%s: tokenizer.ggml.token_type is not int32", f->path);
    if (scores && scores->v.arr.count < n)
        return pkv_fail(err, PKV_ERR_FORMAT,
                        "%s: tokenizer.ggml.scores has %llu entries < %llu tokens", f->path,
                        (unsigned long long)scores->v.arr.count, (unsigned long long)n);
    if (types && types->v.arr.count < n)
        return pkv_fail(err, PKV_ERR_FORMAT,
                        "%s: tokenizer.ggml.token_type has %llu entries < %llu tokens", f->path,
                        (unsigned long long)types->v.arr.count, (unsigned long long)n);
    if (scores && !(a->scores = malloc(n * sizeof *a->scores)))
        return pkv_fail(err, PKV_ERR_NOMEM, "%s: out of memory for scores", f->path);
    if (types && !(a->types = malloc(n * sizeof *a->types)))
        return pkv_fail(err, PKV_ERR_NOMEM, "%s: out of memory for token types", f->path);
    for (uint64_t i = 0; scores && i < n; i++)
        a->scores[i] = scores->v.arr.elem_type == GGUF_VT_FLOAT32
                           ? (float)gguf_arr_f64(scores, i)
                           : (float)gguf_arr_i64(scores, i);
    for (uint64_t i = 0; types && i < n; i++) a->types[i] = (int32_t)gguf_arr_i64(types, i);
    return 0;
}

static int read_desc_keys(const gguf_file *f, tok_vocab_desc *d, pkv_error *err) {
    gguf_str pre;
    int rc = gguf_get_str(f, "tokenizer.ggml.pre", &pre, err);
    if (rc < 0) return -1;
    if (rc == 0) d->pre = pre;
    if (get_id_key(f, "tokenizer.ggml.bos_token_id", &d->bos, err) ||
        get_id_key(f, "tokenizer.ggml.eos_token_id", &d->eos, err) ||
        get_id_key(f, "tokenizer.ggml.unknown_token_id", &d->unk, err) ||
        get_id_key(f, "tokenizer.ggml.eot_token_id", &d->eot, err) ||
        get_id_key(f, "tokenizer.ggml.eom_token_id", &d->eom, err) ||
        get_id_key(f, "tokenizer.ggml.padding_token_id", &d->pad, err) ||
        get_bool_key(f, "tokenizer.ggml.add_bos_token", &d->add_bos, err) ||
        get_bool_key(f, "tokenizer.ggml.add_eos_token", &d->add_eos, err) ||
        get_bool_key(f, "tokenizer.ggml.add_space_prefix", &d->add_space_prefix, err))
        return -1;
    return 0;
}

pkv_tokenizer *pkv_tokenizer_load(const gguf_file *f, pkv_error *err) {
    gguf_str model;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model, err);
    if (rc) {
        if (rc == 1) pkv_fail(err, PKV_ERR_FORMAT, "%s: key tokenizer.ggml.model missing", f->path);
        return NULL;
    }
    tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    if (gguf_str_eq(model, "llama")) d.kind = PKV_TOK_SPM;
    else if (gguf_str_eq(model, "gpt2")) d.kind = PKV_TOK_BPE;
    else {
        char name[64];
        gguf_str_copy(model, name, sizeof name);
        pkv_fail(err, PKV_ERR_UNSUPPORTED,
                 "%s: tokenizer.ggml.model '%s' not supported (llama, gpt2)", f->path, name);
        return NULL;
    }
    const gguf_value *tokens, *merges = NULL;
    if (get_array(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, true, &tokens, err)) return NULL;
    if (tokens->v.arr.count == 0 || tokens->v.arr.count > TOK_MAX_VOCAB) {
        pkv_fail(err, PKV_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries (need 1..%d)",
                 f->path, (unsigned long long)tokens->v.arr.count, TOK_MAX_VOCAB);
        return NULL;
    }
    if (d.kind == PKV_TOK_BPE &&
        get_array(f, "tokenizer.ggml.merges", GGUF_VT_STRING, true, &merges, err))
        return NULL;
    if (merges && merges->v.arr.count > INT32_MAX) {
        pkv_fail(err, PKV_ERR_FORMAT, "%s: tokenizer.ggml.merges has too many entries", f->path);
        return NULL;
    }
    d.n_vocab = (int32_t)tokens->v.arr.count;
    d.tokens = tokens->v.arr.strs;
    if (merges) {
        d.n_merges = (int32_t)merges->v.arr.count;
        d.merges = merges->v.arr.strs;
    }
    loaded_arrays a = {NULL, NULL};
    pkv_tokenizer *tok = NULL;
    if (read_numeric_arrays(f, tokens->v.arr.count, &a, err) == 0 &&
        read_desc_keys(f, &d, err) == 0) {
        d.scores = a.scores;
        d.types = a.types;
        tok = tok_build(&d, err);
        if (!tok && err) { /* name the file, as the other load errors do */
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            pkv_fail(err, err->code, "%s: %s", f->path, msg);
        }
    }
    free(a.scores);
    free(a.types);
    return tok;
}
