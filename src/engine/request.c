/*
 * A request run as the compression protocol says: the prompt assembled
 * (prompt.c), the part the mode compresses prefilled with the press, the rest
 * fed after it, then the decode loop (generate.c). The cache estimate uses
 * the budget code the press runs (press/budget.c), so layer and head
 * schedules, the window and protected rows count as they will.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/recon_prompts.h"
#include "engine/reconstruct.h"
#include "engine/session.h"
#include "model/model.h"
#include "press/press.h"

void pkv_request_init(pkv_request *req) {
    memset(req, 0, sizeof *req);
    req->mode = PKV_MODE_QUERY_AWARE;
    pkv_sampler_params_default(&req->sampling);
    req->max_tokens = 128;
}

void pkv_request_prompt_free(pkv_request_prompt *p) {
    pkv_prompt_tokens_free(&p->prompt);
    memset(p, 0, sizeof *p);
}

static int token_prompt(const pkv_model *m, const pkv_request *req, pkv_prompt_tokens *t, pkv_error *err) {
    if (req->n_tokens < 1) return pkv_fail(err, PKV_ERR_ARG, "request: no prompt tokens");
    for (int i = 0; i < req->n_tokens; i++)
        if (req->tokens[i] < 0 || req->tokens[i] >= pkv_n_vocab(m))
            return pkv_fail(err, PKV_ERR_ARG, "token id %d at index %d is outside the vocabulary [0, %d)",
                            req->tokens[i], i, pkv_n_vocab(m));
    t->tokens = malloc((size_t)req->n_tokens * sizeof *t->tokens);
    if (!t->tokens) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    memcpy(t->tokens, req->tokens, (size_t)req->n_tokens * sizeof *t->tokens);
    t->n_tokens = t->context_end = t->question_end = req->n_tokens;
    return 0;
}

int pkv_request_tokenize(const pkv_model *m, const pkv_request *req, pkv_request_prompt *out, pkv_error *err) {
    pkv_error_clear(err);
    memset(out, 0, sizeof *out);
    if (req->protect_system && (req->tokens || !req->prompt.chat))
        return pkv_fail(err, PKV_ERR_ARG, "request: protect_system needs a chat prompt (a system message)");
    pkv_prompt_tokens *t = &out->prompt;
    if (req->tokens ? token_prompt(m, req, t, err) : pkv_prompt_tokenize(m, &req->prompt, t, err)) {
        pkv_request_prompt_free(out);
        return -1;
    }
    if (req->tokens) out->n_compressed = t->n_tokens;
    else if (req->mode == PKV_MODE_QUERY_AGNOSTIC) out->n_compressed = t->context_end;
    else out->n_compressed = req->press_whole_prompt ? t->n_tokens : t->question_end;
    out->n_protected = req->protect_system ? t->system_end : 0;
    return 0;
}

/* ---------------------------------------------------------------- a prompt after a stored state */

int pkv_request_tokenize_continuation(const pkv_model *m, const pkv_request *req, const int32_t *state, int n_state,
                                      pkv_request_prompt *out, pkv_error *err) {
    pkv_error_clear(err);
    memset(out, 0, sizeof *out);
    if (n_state < 1) return pkv_fail(err, PKV_ERR_ARG, "request: the state to continue holds no tokens");
    pkv_prompt_tokens whole = {0};
    int from; /* where the continuation starts in `whole` */
    if (req->tokens) {
        if (token_prompt(m, req, &whole, err)) return -1;
        from = 0;
    } else {
        /* Rendered as the template renders the whole prompt: the state holds
         * [0, context_end) of it. Without a text of its own, a one-letter
         * stand-in context keeps a trimming template (Gemma, Llama 3) from
         * trimming the question's start, as it would not in the whole prompt;
         * segments are tokenized one by one, so the stand-in touches no other
         * token. */
        pkv_prompt_parts parts = req->prompt;
        bool own_text = parts.context && parts.context[0];
        if (parts.messages) return pkv_fail(err, PKV_ERR_ARG, "request: a prompt after a stored state is a context "
                                                              "and a question, not a conversation");
        if (!own_text) parts.context = "x";
        if (pkv_prompt_tokenize(m, &parts, &whole, err)) return -1;
        from = own_text ? whole.context_begin : whole.context_end;
    }
    int n_rest = whole.n_tokens - from;
    pkv_prompt_tokens *t = &out->prompt;
    t->tokens = malloc((size_t)(n_state + n_rest) * sizeof *t->tokens);
    if (!t->tokens) {
        pkv_prompt_tokens_free(&whole);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    }
    memcpy(t->tokens, state, (size_t)n_state * sizeof *state);
    if (n_rest) memcpy(t->tokens + n_state, whole.tokens + from, (size_t)n_rest * sizeof *state);
    t->n_tokens = n_state + n_rest;
    int shift = n_state - from;
    t->context_begin = n_state;
    t->context_end = (whole.context_end > from ? whole.context_end : from) + shift;
    t->question_end = (req->tokens ? whole.n_tokens : whole.question_end) + shift;
    out->n_compressed = n_state;
    pkv_prompt_tokens_free(&whole);
    return 0;
}

/* ---------------------------------------------------------------- the press of a request */

/* The request's press with the protected system prompt added (a shallow copy:
 * the press's parameters are shared, the protected spans are its own), or
 * NULL for the full cache. */
typedef struct {
    pkv_press_cfg cfg;
    const pkv_press_cfg *press;
} request_press;

static int press_of(const pkv_request *req, const pkv_request_prompt *p, request_press *rp, pkv_error *err) {
    rp->press = pkv_press_cfg_compresses(req->press) ? req->press : NULL;
    if (!rp->press || p->n_protected <= 0) return 0;
    rp->cfg = *req->press;
    rp->cfg.protect = malloc((size_t)(req->press->n_protect + 1) * sizeof *rp->cfg.protect);
    if (!rp->cfg.protect) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    if (req->press->n_protect) memcpy(rp->cfg.protect, req->press->protect, (size_t)req->press->n_protect * sizeof(pkv_span));
    rp->cfg.protect[rp->cfg.n_protect++] = (pkv_span){0, p->n_protected};
    rp->press = &rp->cfg;
    return 0;
}

static void press_free(request_press *rp) {
    if (rp->press == &rp->cfg) free(rp->cfg.protect);
}

/* ---------------------------------------------------------------- prefill */

int pkv_request_prefill_compressed(pkv_session *s, const pkv_request *req, const pkv_request_prompt *p,
                                   const pkv_session *from, pkv_request_stats *stats, pkv_error *err) {
    pkv_error_clear(err);
    request_press rp;
    if (press_of(req, p, &rp, err)) return -1;
    pkv_prefill_stats ps;
    int rc;
    /* where the context starts, and the instructions, for a press that feeds it again (KVzip) */
    pkv_recon_prompts passes = {0};
    pkv_context_frame frame = {.begin = p->prompt.context_begin};
    if (rp.press && rp.press->ops && rp.press->ops->recon) {
        if (pkv_recon_prompts_build(pkv_session_model(s), rp.press, !req->tokens && req->prompt.chat, &passes, err)) {
            press_free(&rp);
            return -1;
        }
        frame.passes = &passes;
    }
    if (from) {
        rc = pkv_session_copy_framed(s, from, rp.press, p->prompt.tokens, p->n_compressed, &frame, &ps, err);
    } else {
        /* a later turn is compressed again only in recompress mode (the official SnapKV code appends it) */
        bool apply = pkv_session_n_pos(s) == 0 || req->mode == PKV_MODE_RECOMPRESS;
        rc = pkv_session_prefill_framed(s, p->prompt.tokens, p->n_compressed, rp.press, apply, &frame, &ps, err);
    }
    press_free(&rp);
    pkv_recon_prompts_free(&passes);
    if (rc == 0 && stats) {
        stats->n_prompt = p->prompt.n_tokens;
        stats->n_compressed = p->n_compressed;
        stats->press = ps;
    }
    return rc;
}

/* The public prefill: a raw prompt (no chat template), its press applied
 * as pkv_session_press_applies decides; a press that reconstructs gets its
 * instructions tokenized here, before the engine runs it. */
int pkv_prefill(pkv_session *s, const int32_t *tokens, int n, const pkv_press_cfg *press, pkv_prefill_stats *stats,
                pkv_error *err) {
    pkv_recon_prompts passes = {0};
    pkv_context_frame frame = {.begin = 0};
    if (press && press->ops && press->ops->recon) {
        if (pkv_recon_prompts_build(pkv_session_model(s), press, false, &passes, err)) return -1;
        frame.passes = &passes;
    }
    int rc = pkv_session_prefill_framed(s, tokens, n, press, pkv_session_press_applies(s, press), &frame, stats, err);
    pkv_recon_prompts_free(&passes);
    return rc;
}

int pkv_request_prefill_rest(pkv_session *s, const pkv_request_prompt *p, pkv_request_stats *stats, pkv_error *err) {
    pkv_error_clear(err);
    int n = p->prompt.n_tokens - p->n_compressed;
    if (n <= 0) return 0;
    pkv_prefill_stats ps;
    if (pkv_prefill(s, p->prompt.tokens + p->n_compressed, n, NULL, &ps, err)) return -1;
    if (stats) stats->rest_seconds = ps.prefill_seconds;
    return 0;
}

int pkv_request_run(pkv_session *s, const pkv_request *req, const pkv_request_prompt *prompt,
                    pkv_request_stats *stats, pkv_error *err) {
    return pkv_request_run_from(s, req, prompt, NULL, stats, err);
}

int pkv_request_prefill_all(pkv_session *s, const pkv_request *req, const pkv_request_prompt *prompt,
                            const pkv_session *from, pkv_request_stats *stats, pkv_error *err) {
    pkv_request_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    pkv_request_prompt own = {0};
    if (from && (!prompt || prompt->n_compressed != pkv_session_n_pos(from)))
        return pkv_fail(err, PKV_ERR_ARG, "request: a prompt starting from a state of %d tokens must say so "
                                          "(pkv_request_tokenize_continuation)", pkv_session_n_pos(from));
    if (!prompt) {
        if (pkv_request_tokenize(pkv_session_model(s), req, &own, err)) return -1;
        prompt = &own;
    }
    int rc = pkv_request_prefill_compressed(s, req, prompt, from, stats, err);
    if (rc == 0) rc = pkv_request_prefill_rest(s, prompt, stats, err);
    if (rc == 0) {
        stats->prefilled = true;
        if (req->on_prefilled) req->on_prefilled(req->user, stats);
    }
    pkv_request_prompt_free(&own);
    return rc;
}

int pkv_request_run_from(pkv_session *s, const pkv_request *req, const pkv_request_prompt *prompt,
                         const pkv_session *from, pkv_request_stats *stats, pkv_error *err) {
    pkv_request_stats local;
    if (!stats) stats = &local;
    int rc = pkv_request_prefill_all(s, req, prompt, from, stats, err);
    return rc == 0 ? pkv_generate(s, req, stats, err) : rc;
}

/* ---------------------------------------------------------------- the cache estimate */

int pkv_request_estimate(const pkv_model *m, const pkv_request *req, const pkv_request_prompt *p,
                         const pkv_session_opts *opts, pkv_cache_estimate *out, pkv_error *err) {
    pkv_error_clear(err);
    memset(out, 0, sizeof *out);
    const pkv_hparams *hp = &m->hp;
    pkv_cache_type type_k = opts ? opts->cache_type_k : PKV_CACHE_F16;
    pkv_cache_type type_v = opts ? opts->cache_type_v : PKV_CACHE_F16;
    int n_batch = opts && opts->n_batch > 0 ? opts->n_batch : 512;
    uint64_t kv_row = pkv_cache_row_bytes(type_k, hp->head_dim_k) + pkv_cache_row_bytes(type_v, hp->head_dim_v);
    out->row_bytes = kv_row + sizeof(int32_t);
    uint64_t total_rows = (uint64_t)p->prompt.n_tokens + (uint64_t)(req->max_tokens > 0 ? req->max_tokens : 0);
    /* sliding-window layers hold their window, trimmed lazily: at most twice
     * the window plus one prefill chunk */
    uint64_t swa_rows = 2 * (uint64_t)hp->sliding_window + (uint64_t)n_batch;
    if (swa_rows > total_rows) swa_rows = total_rows;
    int n_full = 0;
    for (int l = 0; l < hp->n_layer; l++) n_full += pkv_layer_is_full(m, l);
    uint64_t swa_bytes = (uint64_t)(hp->n_layer - n_full) * hp->n_head_kv * swa_rows * out->row_bytes;
    out->rows_full = (int64_t)n_full * hp->n_head_kv * p->prompt.n_tokens;
    request_press rp;
    if (press_of(req, p, &rp, err)) return -1;
    if (!rp.press || n_full == 0) {
        out->rows_kept = out->rows_full;
        out->bytes_peak = swa_bytes + (uint64_t)n_full * hp->n_head_kv * total_rows * out->row_bytes;
        press_free(&rp);
        return 0;
    }
    /* compression runs one layer at a time: during the prefill the layers
     * pressed so far hold their kept rows and the current one all of them;
     * at the end every layer holds its kept rows, the rest of the prompt and
     * the completion (one row per selection head each) */
    bool per_query_head = rp.press->ops->per_query_head && rp.press->ops->per_query_head(rp.press->params);
    uint64_t heads_after = per_query_head ? (uint64_t)hp->n_head : (uint64_t)hp->n_head_kv;
    uint64_t kept = 0, kept_before_last = 0;
    for (int rank = 0; rank < n_full; rank++) {
        uint64_t rows = (uint64_t)pkv_press_layer_rows(rp.press, rank, n_full, p->n_compressed, hp->n_head,
                                                       hp->n_head_kv);
        if (rank < n_full - 1) kept_before_last += rows;
        kept += rows;
    }
    uint64_t after_press = total_rows - (uint64_t)p->n_compressed;
    uint64_t during = kept_before_last + (uint64_t)hp->n_head_kv * (uint64_t)p->n_compressed;
    /* a reconstruction press holds every layer whole, plus one pass */
    if (rp.press->ops->recon)
        during = (uint64_t)n_full * hp->n_head_kv *
                 ((uint64_t)p->n_compressed + (uint64_t)pkv_recon_pass_rows(rp.press, p->n_compressed));
    press_free(&rp);
    uint64_t after = kept + (uint64_t)n_full * heads_after * after_press;
    out->rows_kept = (int64_t)(kept + (uint64_t)n_full * heads_after * (uint64_t)(p->prompt.n_tokens - p->n_compressed));
    out->bytes_peak = swa_bytes + (during > after ? during : after) * out->row_bytes;
    return 0;
}
