/* The public API of a session: create, prefill, copy, decode, evaluate, and what its cache holds. */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/spill.h"
#include "engine/compress.h"
#include "engine/forward.h"
#include "engine/reconstruct.h"
#include "engine/residual.h"
#include "engine/session.h"
#include "engine/state.h"

void pkv_session_opts_default(pkv_session_opts *opts) {
    memset(opts, 0, sizeof *opts);
    opts->n_batch = 512;
    opts->cache_type_k = PKV_CACHE_F16;
    opts->cache_type_v = PKV_CACHE_F16;
}

pkv_session *pkv_session_new(pkv_model *model, const pkv_session_opts *opts_in, pkv_error *err) {
    pkv_error_clear(err);
    pkv_session_opts opts;
    if (opts_in) opts = *opts_in;
    else pkv_session_opts_default(&opts);
    const pkv_hparams *hp = &model->hp;
    if (opts.n_ctx <= 0) opts.n_ctx = hp->n_ctx_train;
    if (opts.n_batch <= 0) opts.n_batch = 512;
    if (opts.n_ctx <= 0) {
        pkv_fail(err, PKV_ERR_ARG, "context length must be > 0");
        return NULL;
    }
    if (opts.keep_press_window < 0) {
        pkv_fail(err, PKV_ERR_ARG, "keep_press_window must be >= 0, got %d", opts.keep_press_window);
        return NULL;
    }
    if ((unsigned)opts.cache_type_k >= PKV_CACHE_TYPE_COUNT || (unsigned)opts.cache_type_v >= PKV_CACHE_TYPE_COUNT) {
        pkv_fail(err, PKV_ERR_ARG, "unknown cache type %d for keys or %d for values", (int)opts.cache_type_k,
                 (int)opts.cache_type_v);
        return NULL;
    }
    if ((unsigned)opts.residual_type >= PKV_RESIDUAL_TYPE_COUNT) {
        pkv_fail(err, PKV_ERR_ARG, "unknown residual type %d", (int)opts.residual_type);
        return NULL;
    }
    if (opts.residual_type != PKV_RESIDUAL_F32 && !pkv_residual_row_bytes(opts.residual_type, hp->n_embd)) {
        pkv_fail(err, PKV_ERR_UNSUPPORTED, "a %s residual stream needs an embedding size divisible by 32, this model's is %d",
                 pkv_residual_type_name(opts.residual_type), hp->n_embd);
        return NULL;
    }
    if (opts.residual_spill_dir && pkv_spill_check_dir(opts.residual_spill_dir, err)) return NULL;
    pkv_session *s = calloc(1, sizeof *s);
    if (!s || (opts.residual_spill_dir && !(s->spill_dir = strdup(opts.residual_spill_dir)))) {
        free(s);
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->model = model;
    s->opts = opts;
    s->opts.residual_spill_dir = s->spill_dir;
    s->pool = pkv_pool_new(opts.n_threads);
    s->logits = calloc((size_t)hp->n_vocab, sizeof(float));
    s->work.inv_freq_global = calloc((size_t)hp->rope_global.n_rot / 2 + 1, sizeof(float));
    s->work.inv_freq_local = calloc((size_t)hp->rope_local.n_rot / 2 + 1, sizeof(float));
    int *windows = calloc((size_t)hp->n_layer, sizeof(int));
    s->probes = calloc((size_t)hp->n_layer, sizeof *s->probes);
    s->recon_memo = pkv_recon_memo_new();
    if (!s->pool || !s->logits || !s->work.inv_freq_global || !s->work.inv_freq_local || !windows || !s->probes ||
        !s->recon_memo) {
        free(windows);
        pkv_session_free(s);
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory creating a session");
        return NULL;
    }
    s->comp = (pkv_compute){.kern = model->kern, .pool = s->pool};
    pkv_rope_params rope_global, rope_local; /* LongRoPE's factors depend on n_ctx (docs/engine.md §5.3) */
    if (pkv_model_session_rope(model, opts.n_ctx, &rope_global, &rope_local, err)) {
        free(windows);
        pkv_session_free(s);
        return NULL;
    }
    pkv_rope_inv_freq(&rope_global, s->work.inv_freq_global);
    pkv_rope_inv_freq(&rope_local, s->work.inv_freq_local);
    for (int il = 0; il < hp->n_layer; il++) windows[il] = pkv_layer_is_full(model, il) ? 0 : hp->sliding_window;
    int rc = pkv_kvcache_init(&s->cache, opts.cache_type_k, opts.cache_type_v, hp->n_layer, hp->n_head_kv,
                              hp->head_dim_k, hp->head_dim_v, windows, err);
    free(windows);
    if (rc) {
        pkv_session_free(s);
        return NULL;
    }
    return s;
}

void pkv_session_free(pkv_session *s) {
    if (!s) return;
    pkv_kvcache_free(&s->cache);
    pkv_pool_free(s->pool);
    pkv_work_free(&s->work);
    if (s->probes) {
        for (int il = 0; il < s->model->hp.n_layer; il++) {
            pkv_layer_probe *p = &s->probes[il];
            free(p->q);
            free(p->q_pos);
            if (p->acc)
                for (int h = 0; h < s->model->hp.n_head; h++) free(p->acc[h]);
            free(p->acc);
            free(p->q_sum);
            free(p->q_sq);
            free(p->q_head);
            free(p->q_t);
        }
        free(s->probes);
    }
    pkv_recon_memo_free(s->recon_memo);
    pkv_arena_free(&s->arena);
    free(s->logits);
    free(s->tokens);
    free(s->spill_dir);
    free(s);
}

void pkv_session_reset(pkv_session *s) {
    pkv_kvcache_clear(&s->cache);
    s->n_pos = 0;
    s->probes_ok = false;
    s->probe_gen++;
    s->broken = false;
    atomic_store(&s->interrupted, 0);
}

void pkv_session_interrupt(pkv_session *s) { atomic_store(&s->interrupted, 1); }

bool pkv_session_interrupted(const pkv_session *s) { return atomic_load(&s->interrupted) != 0; }

const pkv_model *pkv_session_model(const pkv_session *s) { return s->model; }

int pkv_session_n_pos(const pkv_session *s) { return s->n_pos; }

int pkv_session_n_ctx(const pkv_session *s) { return s->opts.n_ctx; }

uint64_t pkv_session_cache_bytes(const pkv_session *s) { return pkv_kvcache_bytes(&s->cache); }

const float *pkv_logits(const pkv_session *s) { return s->logits; }

/* Checks that n more tokens fit in the context. */
static int check_context(const pkv_session *s, int n, pkv_error *err) {
    if (n <= 0) return pkv_fail(err, PKV_ERR_ARG, "no tokens to process");
    if ((int64_t)s->n_pos + n > s->opts.n_ctx)
        return pkv_fail(err, PKV_ERR_LIMIT,
                        "%d tokens at position %d exceed the context length %d (set a larger one with -c; the "
                        "model was trained with %d)",
                        n, s->n_pos, s->opts.n_ctx, s->model->hp.n_ctx_train);
    return 0;
}

/* Cache bytes now, and what the cache would hold after n_pos tokens without
 * compression (positions included): every row of a full-attention layer, and
 * a sliding-window layer's rows as they are (no press touches them, and the
 * cache drops rows that left the window lazily, so they can exceed it). */
static void fill_cache_stats(const pkv_session *s, int n_pos, pkv_prefill_stats *stats) {
    const pkv_kvcache *c = &s->cache;
    stats->cache_bytes = pkv_kvcache_bytes(c);
    uint64_t full = 0;
    for (int il = 0; il < s->model->hp.n_layer; il++) {
        uint64_t rows = pkv_layer_is_full(s->model, il) ? (uint64_t)s->model->hp.n_head_kv * n_pos
                                                        : (uint64_t)pkv_kvcache_layer_rows(c, il);
        full += rows * pkv_kvcache_row_bytes(c, il);
    }
    stats->cache_bytes_full = full;
}

/* Records tokens as the next n of the sequence (s->tokens[n_pos, n_pos + n));
 * they count once the forward pass has advanced n_pos over them. */
static int remember_tokens(pkv_session *s, const int32_t *tokens, int n, pkv_error *err) {
    int need = s->n_pos + n;
    if (need > s->tokens_cap) {
        int cap = s->tokens_cap + s->tokens_cap / 2 + 64;
        if (cap < need) cap = need;
        int32_t *t = realloc(s->tokens, (size_t)cap * sizeof *t);
        if (!t) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory recording %d tokens", need);
        s->tokens = t;
        s->tokens_cap = cap;
    }
    memcpy(s->tokens + s->n_pos, tokens, (size_t)n * sizeof *tokens);
    return 0;
}

const int32_t *pkv_session_tokens(const pkv_session *s, int *n) {
    if (n) *n = s->n_pos;
    return s->tokens;
}

/* A press compresses the first prefill of a session, and every later one in
 * recompress mode; otherwise later turns are appended uncompressed, as the
 * official SnapKV code does (docs/presses.md D.5). */
bool pkv_session_press_applies(const pkv_session *s, const pkv_press_cfg *press) {
    if (!press || !press->ops) return false;
    return s->n_pos == 0 || press->mode == PKV_MODE_RECOMPRESS;
}

static bool is_recon_press(const pkv_press_cfg *press) { return press && press->ops && press->ops->recon; }

int pkv_session_prefill_framed(pkv_session *s, const int32_t *tokens, int n, const pkv_press_cfg *press,
                               bool apply_press, const pkv_context_frame *frame, pkv_prefill_stats *stats,
                               pkv_error *err) {
    pkv_error_clear(err);
    if (check_context(s, n, err)) return -1;
    if (press && pkv_press_cfg_check(press, err)) return -1;
    if (remember_tokens(s, tokens, n, err)) return -1;
    double t0 = pkv_now_seconds();
    int pos0 = s->n_pos;
    pkv_compress_stats fs;
    pkv_probe_cfg keep = {.window = s->opts.keep_press_window,
                          .attn_sums = s->opts.keep_attn_sums,
                          .q_stats = s->opts.keep_query_stats};
    bool recon = apply_press && is_recon_press(press);
    if (recon) {
        /* a reconstruction press runs once the whole prompt is in: the prefill
         * keeps what it reads and presses nothing (docs/design.md) */
        keep = pkv_probe_plan(press, &keep);
        if (pkv_recon_check(s, press, true, err)) return -1;
        if (pkv_forward(s, tokens, n, NULL, &keep, NULL, NULL, &fs, err)) return -1;
        s->probes_ok = false;
        if (pkv_recon_press(s, s->probes, NULL, tokens, n, frame ? frame->begin : 0, frame ? frame->passes : NULL,
                            press, &fs, err)) {
            s->broken = true; /* the prompt is in, unpressed: only a reset helps */
            return -1;
        }
    } else if (pkv_forward(s, tokens, n, apply_press ? press : NULL, &keep, NULL, NULL, &fs, err)) {
        return -1;
    }
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->n_prompt = n;
        stats->prefill_seconds = pkv_now_seconds() - t0;
        stats->press_seconds = fs.press_seconds;
        stats->compressed = fs.compressed;
        fill_cache_stats(s, pos0 + n, stats);
    }
    return 0;
}

int pkv_session_copy(pkv_session *dst, const pkv_session *src, const pkv_press_cfg *press, pkv_prefill_stats *stats,
                     pkv_error *err) {
    return pkv_session_copy_framed(dst, src, press, NULL, 0, NULL, stats, err);
}

int pkv_session_copy_framed(pkv_session *dst, const pkv_session *src, const pkv_press_cfg *press,
                            const int32_t *tokens, int n, const pkv_context_frame *frame, pkv_prefill_stats *stats,
                            pkv_error *err) {
    pkv_error_clear(err);
    if (dst == src) return pkv_fail(err, PKV_ERR_ARG, "pkv_session_copy needs two different sessions");
    if (dst->model != src->model) return pkv_fail(err, PKV_ERR_ARG, "pkv_session_copy needs sessions of the same model");
    if (memcmp(dst->work.inv_freq_global, src->work.inv_freq_global,
               (size_t)src->model->hp.rope_global.n_rot / 2 * sizeof(float)))
        return pkv_fail(err, PKV_ERR_ARG,
                        "pkv_session_copy needs sessions with the same RoPE (LongRoPE: both context lengths on the "
                        "same side of the original context %d)", src->model->hp.n_ctx_orig);
    if (press && press->ops) {
        if (pkv_press_cfg_check(press, err)) return -1;
        if (!src->probes_ok)
            return pkv_fail(err, PKV_ERR_ARG,
                            "the source session's last call was not a prefill without a press that kept its window "
                            "queries (set keep_press_window)");
        if (press->ops->needs_attn_sum && !src->opts.keep_attn_sums)
            return pkv_fail(err, PKV_ERR_ARG, "press %s needs keep_attn_sums in the source session", press->ops->name);
        if (press->ops->needs_query_stats && !src->opts.keep_query_stats)
            return pkv_fail(err, PKV_ERR_ARG, "press %s needs keep_query_stats in the source session", press->ops->name);
        if (press->ops->recon && (!tokens || n != src->n_pos))
            return pkv_fail(err, PKV_ERR_ARG,
                            "press %s feeds the prompt again: press a copy through pkv_request_prefill_compressed, "
                            "which knows the prompt's tokens",
                            press->ops->name);
    }
    if (src->broken) return pkv_fail(err, PKV_ERR_ARG, "the source session stopped midway in its last call");
    if (is_recon_press(press) && pkv_recon_check(src, press, false, err)) return -1;
    double t0 = pkv_now_seconds();
    dst->broken = true;
    if (pkv_kvcache_copy(&dst->cache, &src->cache, err)) return -1;
    dst->n_pos = 0;
    if (src->n_pos && remember_tokens(dst, src->tokens, src->n_pos, err)) return -1;
    dst->n_pos = src->n_pos;
    memcpy(dst->logits, src->logits, (size_t)src->model->hp.n_vocab * sizeof(float));
    dst->probes_ok = false;
    pkv_compress_stats fs = {0};
    if (is_recon_press(press)) {
        dst->broken = false; /* the copy is whole: the passes run on it */
        /* src's memo: a second copy pressed at another budget reuses the passes */
        pkv_recon_source from = {.memo = src->recon_memo, .gen = src->probe_gen};
        if (pkv_recon_press(dst, src->probes, &from, tokens, n, frame ? frame->begin : 0,
                            frame ? frame->passes : NULL, press, &fs, err)) {
            dst->broken = true;
            return -1;
        }
    } else if (press && press->ops) {
        for (int il = 0; il < src->model->hp.n_layer; il++) {
            if (!pkv_layer_is_full(src->model, il)) continue;
            if (src->probes[il].window < press->window && src->probes[il].window < src->probes[il].n_new)
                return pkv_fail(err, PKV_ERR_ARG, "the source kept %d window queries; press window %d needs more",
                                src->probes[il].window, press->window);
            if (pkv_compress_layer(dst, &src->probes[il], press, il, &fs, err)) return -1;
        }
    }
    dst->broken = false;
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->prefill_seconds = pkv_now_seconds() - t0;
        stats->press_seconds = fs.press_seconds;
        stats->compressed = fs.compressed;
        fill_cache_stats(dst, dst->n_pos, stats);
    }
    return 0;
}

uint64_t pkv_session_mem_bytes(const pkv_session *s) { return pkv_kvcache_alloc_bytes(&s->cache) + pkv_session_work_bytes(s); }

uint64_t pkv_session_peak_mem_bytes(const pkv_session *s) { return s->peak_mem; }

int pkv_session_n_layers(const pkv_session *s) { return pkv_kvcache_n_layers(&s->cache); }

bool pkv_session_layer_is_full(const pkv_session *s, int layer) {
    return layer >= 0 && layer < pkv_kvcache_n_layers(&s->cache) && pkv_layer_is_full(s->model, layer);
}

int pkv_session_n_heads(const pkv_session *s, int layer) {
    return layer >= 0 && layer < pkv_kvcache_n_layers(&s->cache) ? pkv_kvcache_n_heads(&s->cache, layer) : 0;
}

int pkv_session_head_rows(const pkv_session *s, int layer, int head) {
    if (head < 0 || head >= pkv_session_n_heads(s, layer)) return 0;
    return pkv_kvcache_head_rows(&s->cache, layer, head);
}

int pkv_session_positions(const pkv_session *s, int layer, int head, int32_t *out, int max) {
    int n = pkv_session_head_rows(s, layer, head);
    const int32_t *pos = n ? pkv_kvcache_head_pos(&s->cache, layer, head) : NULL;
    for (int i = 0; i < n && i < max; i++) out[i] = pos[i];
    return n;
}

int pkv_session_check_step(const pkv_session *s, int32_t token, pkv_error *err) {
    if (s->broken)
        return pkv_fail(err, PKV_ERR_ARG,
                        "an earlier call on this session stopped midway (interrupted or out of memory): reset it first");
    if (token < 0 || token >= s->model->hp.n_vocab)
        return pkv_fail(err, PKV_ERR_ARG, "token %d is outside the vocabulary [0, %d)", token, s->model->hp.n_vocab);
    return check_context(s, 1, err);
}

int pkv_session_take_token(pkv_session *s, int32_t token, pkv_error *err) {
    if (remember_tokens(s, &token, 1, err)) return -1;
    s->probes_ok = false;
    s->probe_gen++;
    return 0;
}

int pkv_decode(pkv_session *s, int32_t token, pkv_error *err) {
    pkv_error_clear(err);
    if (check_context(s, 1, err) || remember_tokens(s, &token, 1, err)) return -1;
    s->probes_ok = false;
    return pkv_forward(s, &token, 1, NULL, NULL, NULL, NULL, NULL, err);
}

typedef struct {
    pkv_logits_fn fn;
    void *user;
} eval_ctx;

static void eval_row(void *user, int index, const float *logits) {
    eval_ctx *e = user;
    e->fn(e->user, index, logits);
}

int pkv_eval(pkv_session *s, const int32_t *tokens, int n, pkv_logits_fn fn, void *user, pkv_error *err) {
    pkv_error_clear(err);
    if (!fn) return pkv_fail(err, PKV_ERR_ARG, "pkv_eval needs a logits callback");
    if (check_context(s, n, err) || remember_tokens(s, tokens, n, err)) return -1;
    eval_ctx e = {fn, user};
    return pkv_forward(s, tokens, n, NULL, NULL, eval_row, &e, NULL, err);
}
