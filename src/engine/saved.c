/* Saved caches (docs/cache-file.md): a session's state written to a file
 * and read back, through the cache layer's file format (cache/kvfile.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cache/kvfile.h"
#include "engine/state.h"

int pkv_session_save(const pkv_session *s, const char *path, const char *press, const char *label, pkv_error *err) {
    pkv_error_clear(err);
    if (s->broken) return pkv_fail(err, PKV_ERR_ARG, "%s: the session stopped midway in its last call; nothing to save", path);
    const pkv_hparams *hp = &s->model->hp;
    pkv_kvfile_meta meta = {
        .model_fingerprint = pkv_model_fingerprint(s->model),
        .n_head = hp->n_head,
        .n_vocab = hp->n_vocab,
        .n_pos = s->n_pos,
        .tokens = s->tokens,
        .logits = s->logits,
        .press = press,
        .label = label,
    };
    return pkv_kvfile_write(path, &s->cache, &meta, err);
}

/* "f16" when keys and values have one type, else "q8_0 keys and f16 values". */
static const char *types_text(pkv_cache_type k, pkv_cache_type v, char *buf, size_t len) {
    if (k == v) snprintf(buf, len, "%s", pkv_cache_type_name(k));
    else snprintf(buf, len, "%s keys and %s values", pkv_cache_type_name(k), pkv_cache_type_name(v));
    return buf;
}

/* The flags that would give a session the file's types. */
static const char *types_flags(pkv_cache_type k, pkv_cache_type v, char *buf, size_t len) {
    if (k == v) snprintf(buf, len, "--cache-type %s", pkv_cache_type_name(k));
    else snprintf(buf, len, "--cache-type-k %s --cache-type-v %s", pkv_cache_type_name(k), pkv_cache_type_name(v));
    return buf;
}

/* The file against the session: the same model file, shape, cache type, and room in the context. */
static int check_fits(const pkv_session *s, const pkv_kvfile *f, pkv_error *err) {
    const pkv_hparams *hp = &s->model->hp;
    uint64_t fp = pkv_model_fingerprint(s->model);
    bool same_shape = f->n_layers == hp->n_layer && f->n_head_kv == hp->n_head_kv && f->n_head == hp->n_head &&
                      f->head_dim_k == hp->head_dim_k && f->head_dim_v == hp->head_dim_v && f->n_vocab == hp->n_vocab;
    if (!same_shape)
        return pkv_fail(err, PKV_ERR_ARG,
                        "%s: saved from another model (%d layers, %d/%d heads of %d, vocabulary %d); %s has %d layers, "
                        "%d/%d heads of %d, vocabulary %d",
                        f->path, f->n_layers, f->n_head, f->n_head_kv, f->head_dim_k, f->n_vocab, s->model->file.path,
                        hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim_k, hp->n_vocab);
    if (f->model_fingerprint != fp)
        return pkv_fail(err, PKV_ERR_ARG,
                        "%s: saved from another model file of the same shape (fingerprint %016llx; %s is %016llx)",
                        f->path, (unsigned long long)f->model_fingerprint, s->model->file.path, (unsigned long long)fp);
    if (f->type_k != s->opts.cache_type_k || f->type_v != s->opts.cache_type_v) {
        char saved[48], own[48], flags[64];
        types_text(f->type_k, f->type_v, saved, sizeof saved);
        /* "an f16 cache", "a q8_0 cache", "a cache of q8_0 keys and f16 values" */
        return pkv_fail(err, PKV_ERR_ARG, "%s: saved with %s%s%s; this session's is %s (%s)", f->path,
                        f->type_k != f->type_v ? "a cache of " : saved[0] == 'f' ? "an " : "a ", saved,
                        f->type_k != f->type_v ? "" : " cache",
                        types_text(s->opts.cache_type_k, s->opts.cache_type_v, own, sizeof own),
                        types_flags(f->type_k, f->type_v, flags, sizeof flags));
    }
    if (f->n_pos > s->opts.n_ctx)
        return pkv_fail(err, PKV_ERR_LIMIT, "%s: %d tokens, more than the context length %d (set a larger one with -c)",
                        f->path, f->n_pos, s->opts.n_ctx);
    return 0;
}

static void copy_text(char *dst, const char *src, size_t n) {
    memcpy(dst, src, n);
    dst[n] = '\0';
}

int pkv_session_load(pkv_session *s, const char *path, pkv_saved_cache_info *info, pkv_error *err) {
    pkv_error_clear(err);
    pkv_kvfile f;
    pkv_session_reset(s);
    if (pkv_kvfile_open(&f, path, err)) return -1;
    int rc = -1;
    if (check_fits(s, &f, err)) goto out;
    int32_t *tokens = realloc(s->tokens, (size_t)(f.n_pos > 0 ? f.n_pos : 1) * sizeof *tokens);
    if (!tokens) {
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory for %d tokens", f.n_pos);
        goto out;
    }
    s->tokens = tokens;
    s->tokens_cap = f.n_pos > 0 ? f.n_pos : 1;
    s->broken = true; /* until every row is in */
    if (pkv_kvfile_read_cache(&f, &s->cache, err)) goto out;
    for (int i = 0; i < f.n_pos; i++) s->tokens[i] = pkv_kvfile_token(&f, i);
    pkv_kvfile_read_logits(&f, s->logits);
    s->n_pos = f.n_pos;
    s->broken = false;
    if (info) {
        memset(info, 0, sizeof *info);
        info->n_tokens = f.n_pos;
        info->rows = f.rows;
        info->cache_bytes = f.cache_bytes;
        info->file_bytes = f.size;
        copy_text(info->press, f.press, f.press_len);
        copy_text(info->label, f.label, f.label_len);
    }
    rc = 0;
out:
    if (rc) pkv_session_reset(s);
    pkv_kvfile_close(&f);
    return rc;
}
