/* One prefill per item, many presses (runner.h). */
#include "eval/runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "eval/score.h"
#include "eval/text.h"

const char *pkv_eval_mode_name(pkv_eval_mode mode) {
    return mode == PKV_EVAL_QUERY_AWARE ? "query_aware" : "query_agnostic";
}

/* ---------------------------------------------------------------- configurations */

static bool press_has_option(const char *press, const char *key) {
    const char *k, *help;
    for (int i = 0; pkv_press_option_list(press, i, &k, &help); i++)
        if (!strcmp(k, key)) return true;
    return false;
}

int pkv_eval_config_init(pkv_eval_config *c, const char *label, const char *press, int budget, double ratio,
                         const char *const *opts, int n_opts, pkv_error *err) {
    memset(c, 0, sizeof *c);
    snprintf(c->press, sizeof c->press, "%s", label);
    snprintf(c->base, sizeof c->base, "%s", press);
    bool full = !strcmp(press, "none");
    c->cfg = pkv_press_cfg_new(press, err);
    if (!c->cfg) return -1;
    char text[32];
    pkv_sbuf applied = {0};
    if (!full) {
        c->budget = budget;
        c->ratio = budget > 0 ? 0.0 : ratio;
        if (budget > 0)
            snprintf(text, sizeof text, "%d", budget);
        else
            snprintf(text, sizeof text, "%.17g", ratio);
        if (pkv_press_cfg_set(c->cfg, budget > 0 ? "budget" : "ratio", text, err)) goto fail;
        /* options: "key=value" for every press that has the key, "press.key=value" for one press */
        for (int i = 0; i < n_opts; i++) {
            const char *eq = strchr(opts[i], '='), *dot = strchr(opts[i], '.');
            if (!eq) {
                pkv_fail(err, PKV_ERR_ARG, "press option '%s' is not key=value", opts[i]);
                goto fail;
            }
            char key[64];
            const char *kstart = opts[i];
            if (dot && dot < eq) {
                if ((size_t)(dot - opts[i]) != strlen(press) || strncmp(opts[i], press, strlen(press))) continue;
                kstart = dot + 1;
            }
            snprintf(key, sizeof key, "%.*s", (int)(eq - kstart), kstart);
            if (kstart == opts[i] && !press_has_option(press, key)) continue;
            if (pkv_press_cfg_set(c->cfg, key, eq + 1, err)) goto fail;
            pkv_sbuf_printf(&applied, " %s=%s", key, eq + 1);
        }
        if (pkv_press_cfg_check(c->cfg, err)) goto fail;
        if (budget > 0)
            snprintf(c->label, sizeof c->label, "%s/b%d", label, budget);
        else
            snprintf(c->label, sizeof c->label, "%s/r%g", label, ratio);
    } else {
        snprintf(c->label, sizeof c->label, "full");
    }
    pkv_press_cfg_describe(c->cfg, c->describe, sizeof c->describe);
    if (applied.len) {
        size_t n = strlen(c->describe);
        snprintf(c->describe + n, sizeof c->describe - n, "%s", applied.data);
    }
    pkv_sbuf_free(&applied);
    return 0;
fail:
    pkv_sbuf_free(&applied);
    pkv_press_cfg_free(c->cfg);
    c->cfg = NULL;
    return -1;
}

void pkv_eval_config_free(pkv_eval_config *c) {
    pkv_press_cfg_free(c->cfg);
    c->cfg = NULL;
}

/* ---------------------------------------------------------------- tokens */

/* Tokens of the gold continuation (no special tokens); 0 for an empty one. */
static int segment_tokens(const pkv_model *model, const char *text, int32_t **out, pkv_error *err) {
    *out = NULL;
    size_t len = strlen(text);
    if (len == 0) return 0;
    int cap = (int)len + 16, n;
    for (;;) {
        int32_t *t = realloc(*out, (size_t)cap * sizeof *t);
        if (!t) {
            free(*out);
            *out = NULL;
            return pkv_fail(err, PKV_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
        }
        *out = t;
        n = pkv_tokenize(model, text, len, false, false, t, cap, err);
        if (n <= cap) break;
        cap = n;
    }
    if (n < 0) {
        free(*out);
        *out = NULL;
    }
    return n;
}

/* The item as the prompt protocol lays it out (pkv_prompt_tokenize). */
static int item_prompt(const pkv_model *model, bool chat, const pkv_eval_item *item, pkv_prompt_tokens *t,
                       pkv_error *err) {
    pkv_prompt_parts p = {.context = item->context,
                          .question = item->question,
                          .answer_prefix = item->answer_prefix,
                          .chat = chat};
    return pkv_prompt_tokenize(model, &p, t, err);
}

int pkv_eval_count_tokens(void *user, const pkv_eval_item *item, pkv_error *err) {
    const pkv_eval_tokenizing *tz = user;
    pkv_prompt_tokens t;
    if (item_prompt(tz->model, tz->chat, item, &t, err)) return -1;
    int n = t.n_tokens;
    pkv_prompt_tokens_free(&t);
    return n;
}

int pkv_eval_needle_positions(const pkv_model *model, const char *context, const int32_t *tokens, int n_tokens,
                              const pkv_byte_span *spans, int n_spans, int32_t *out, int max, int *n, pkv_error *err) {
    *n = 0;
    int *off = malloc((size_t)(n_tokens + 1) * sizeof *off);
    if (!off) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    char piece[256];
    int total = 0, first_len = -1;
    char first_char = 0;
    for (int i = 0; i < n_tokens; i++) {
        off[i] = total;
        int len = pkv_token_to_piece(model, tokens[i], false, piece, sizeof piece);
        if (len < 0) len = 0;
        if (len > 0 && first_len < 0) {
            first_len = len;
            first_char = piece[0];
        }
        total += len;
    }
    off[n_tokens] = total;
    int text_len = (int)strlen(context);
    /* SPM tokenizers that add a space prefix start with a piece " x" the text lacks */
    int shift = total == text_len + 1 && first_char == ' ' ? 1 : 0;
    if (total - shift != text_len) {
        free(off);
        return 0; /* pieces do not spell the text (normalisation): no positions, retention unknown */
    }
    for (int i = 0; i < n_tokens; i++) {
        int b = off[i] - shift, e = off[i + 1] - shift;
        if (e <= b) continue;
        for (int s = 0; s < n_spans; s++)
            if (b < spans[s].end && e > spans[s].begin) {
                if (*n < max) out[*n] = i;
                (*n)++;
                break;
            }
    }
    free(off);
    return 0;
}

/* ---------------------------------------------------------------- the runner */

struct pkv_eval_runner {
    pkv_model *model;
    pkv_eval_runner_opts opts;
    pkv_session *src, *work, *tmp;
    int n_vocab;
    /* the full cache's greedy continuation and log-probabilities of its first agree_k steps */
    int32_t *full_tokens;
    int n_full;
    float *full_logp; /* [agree_k][n_vocab] */
    float *logp;      /* [n_vocab] scratch */
    double nll_full;
    pkv_eval_result full; /* the full cache's outcome of the current item and mode (prediction owned) */
    /* what src holds: the tokens of its last prefill (n_src < 0: nothing
     * known), so that the next question of one context reuses it */
    int32_t *src_tokens;
    int n_src, src_cap;
};

pkv_eval_runner *pkv_eval_runner_new(pkv_model *model, const pkv_eval_runner_opts *opts, pkv_error *err) {
    pkv_eval_runner *r = calloc(1, sizeof *r);
    if (!r) {
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    r->model = model;
    r->opts = *opts;
    r->n_vocab = pkv_n_vocab(model);
    r->n_src = -1;
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = opts->n_threads;
    so.n_ctx = opts->n_ctx;
    so.cache_type_k = opts->cache_type_k;
    so.cache_type_v = opts->cache_type_v;
    pkv_session_opts src_opts = so;
    src_opts.keep_press_window = opts->keep_window > 0 ? opts->keep_window : 1;
    src_opts.keep_attn_sums = opts->attn_sums;
    src_opts.keep_query_stats = opts->query_stats;
    r->src = pkv_session_new(model, &src_opts, err);
    if (r->src) r->work = pkv_session_new(model, &so, err);
    if (r->work) r->tmp = pkv_session_new(model, &so, err);
    int k = opts->agree_k > 0 ? opts->agree_k : 1;
    r->full_logp = r->tmp ? malloc((size_t)k * (size_t)r->n_vocab * sizeof(float)) : NULL;
    r->logp = r->full_logp ? malloc((size_t)r->n_vocab * sizeof(float)) : NULL;
    if (!r->logp) {
        if (r->tmp) pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the agreement buffers");
        pkv_eval_runner_free(r);
        return NULL;
    }
    return r;
}

void pkv_eval_runner_free(pkv_eval_runner *r) {
    if (!r) return;
    pkv_session_free(r->src);
    pkv_session_free(r->work);
    pkv_session_free(r->tmp);
    free(r->full_tokens);
    free(r->full_logp);
    free(r->logp);
    free(r->full.prediction);
    free(r->src_tokens);
    free(r);
}

void pkv_eval_runner_interrupt(pkv_eval_runner *r) {
    if (r->src) pkv_session_interrupt(r->src);
    if (r->work) pkv_session_interrupt(r->work);
    if (r->tmp) pkv_session_interrupt(r->tmp);
}

/* log-softmax of logits into out (double accumulation) */
static void log_softmax(const float *logits, int n, float *out) {
    float mx = logits[0];
    for (int i = 1; i < n; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++) out[i] = (float)((double)logits[i] - lse);
}

/* KL(p || q) from log-probabilities */
static double kl_div(const float *logp, const float *logq, int n) {
    double kl = 0.0;
    for (int i = 0; i < n; i++) {
        double p = exp((double)logp[i]);
        if (p > 0) kl += p * ((double)logp[i] - (double)logq[i]);
    }
    return kl > 0 ? kl : 0.0;
}

/* Agreement bookkeeping of one compressed run. */
typedef struct {
    pkv_eval_runner *r;
    int k_eff;
    int matched;
    double kl_sum;
    int first; /* teacher-forced rows: row j is step j + 1; steps below first are already counted */
} agree_acc;

static void agree_step(agree_acc *a, int step, const float *logits) {
    pkv_eval_runner *r = a->r;
    log_softmax(logits, r->n_vocab, r->logp);
    a->matched += pkv_logits_argmax(logits, r->n_vocab) == r->full_tokens[step];
    a->kl_sum += kl_div(r->full_logp + (size_t)step * r->n_vocab, r->logp, r->n_vocab);
}

static void agree_row(void *user, int index, const float *logits) {
    agree_acc *a = user;
    int step = index + 1;
    if (step >= a->first && step < a->k_eff) agree_step(a, step, logits);
}

/* Teacher-forced NLL of the reference continuation. */
typedef struct {
    const int32_t *ref;
    int n_ref;
    int n_vocab;
    double nll;
} nll_acc;

static double token_nll(const float *logits, int n_vocab, int32_t target) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return -((double)logits[target] - mx - log(sum));
}

static void nll_row(void *user, int index, const float *logits) {
    nll_acc *a = user;
    if (index + 1 < a->n_ref) a->nll += token_nll(logits, a->n_vocab, a->ref[index + 1]);
}

/* Mean NLL per token of ref continuing from r->work's state (uses r->tmp). */
static int reference_nll(pkv_eval_runner *r, const int32_t *ref, int n_ref, double *out, pkv_error *err) {
    *out = NAN;
    if (n_ref <= 0) return 0;
    nll_acc a = {ref, n_ref, r->n_vocab, token_nll(pkv_logits(r->work), r->n_vocab, ref[0])};
    if (n_ref > 1) {
        if (pkv_session_copy(r->tmp, r->work, NULL, NULL, err)) return -1;
        if (pkv_eval(r->tmp, ref, n_ref - 1, nll_row, &a, err)) return -1;
    }
    *out = a.nll / n_ref;
    return 0;
}

/* Needle retention per full-attention layer and head, and mean kept rows, of
 * r->work; *unchanged when the press kept every row of r->src. */
static int measure_cache(pkv_eval_runner *r, const int32_t *needle, int n_needle, pkv_eval_result *res, bool *unchanged,
                         pkv_error *err) {
    pkv_session *s = r->work;
    int n_layers = pkv_session_n_layers(s);
    res->n_full_layers = 0;
    res->n_heads = 0;
    for (int l = 0; l < n_layers; l++) {
        if (!pkv_session_layer_is_full(s, l) || res->n_full_layers == 64) continue;
        int h = pkv_session_n_heads(s, l);
        if (res->n_full_layers == 0 || h < res->n_heads) res->n_heads = h;
        res->full_layers[res->n_full_layers++] = l;
    }
    int max_rows = pkv_session_n_pos(s) + 1;
    int32_t *pos = malloc((size_t)max_rows * sizeof *pos);
    res->needle_kept = n_needle > 0 ? calloc((size_t)(res->n_full_layers * res->n_heads + 1), sizeof(double)) : NULL;
    if (!pos || (n_needle > 0 && !res->needle_kept)) {
        free(pos);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    }
    double rows = 0.0;
    int n_rows = 0;
    for (int i = 0; i < res->n_full_layers; i++) {
        int l = res->full_layers[i];
        for (int h = 0; h < pkv_session_n_heads(s, l); h++) {
            int n = pkv_session_positions(s, l, h, pos, max_rows);
            if (n > max_rows) n = max_rows;
            rows += n;
            n_rows++;
            if (h >= res->n_heads || n_needle == 0) continue;
            /* both ascending: merge */
            int kept = 0;
            for (int a = 0, b = 0; a < n_needle && b < n;) {
                if (needle[a] == pos[b])
                    kept++, a++, b++;
                else if (needle[a] < pos[b])
                    a++;
                else
                    b++;
            }
            res->needle_kept[i * res->n_heads + h] = (double)kept / n_needle;
        }
    }
    res->kept_rows = n_rows ? rows / n_rows : 0.0;
    /* nothing evicted (budget >= L): the cache is the full one */
    *unchanged = true;
    for (int i = 0; i < res->n_full_layers && *unchanged; i++) {
        int l = res->full_layers[i];
        if (pkv_session_n_heads(s, l) != pkv_session_n_heads(r->src, l)) *unchanged = false;
        for (int h = 0; h < pkv_session_n_heads(s, l) && *unchanged; h++)
            *unchanged = pkv_session_head_rows(s, l, h) == pkv_session_head_rows(r->src, l, h);
    }
    free(pos);
    return 0;
}

/* The item's request in a mode: its prompt as the protocol lays it out
 * (pkv_prompt_tokenize), greedy decoding of the task's answer. */
static void item_request(const pkv_eval_runner *r, const pkv_eval_task *task, const pkv_eval_item *item,
                         pkv_eval_mode mode, pkv_request *req) {
    pkv_request_init(req);
    req->prompt = (pkv_prompt_parts){.context = item->context,
                                     .question = item->question,
                                     .answer_prefix = item->answer_prefix,
                                     .chat = r->opts.chat};
    req->mode = mode == PKV_EVAL_QUERY_AWARE ? PKV_MODE_QUERY_AWARE : PKV_MODE_QUERY_AGNOSTIC;
    req->max_tokens = task->max_new_tokens;
    req->stop_at_newline = task->stop_newline;
}

/* What the greedy decode of one config records, token by token: the full
 * cache's continuation and log-probabilities (record), or the agreement with
 * them (a). */
typedef struct {
    pkv_eval_runner *r;
    bool record;
    agree_acc *a;
    int *diverged;
    int n_tok;
    pkv_sbuf *text;
} greedy_watch;

static bool greedy_token(void *user, const pkv_token_event *ev) {
    greedy_watch *w = user;
    pkv_eval_runner *r = w->r;
    if (ev->token >= 0) {
        int step = ev->index;
        if (w->record && step < r->opts.agree_k) log_softmax(ev->logits, r->n_vocab, r->full_logp + (size_t)step * r->n_vocab);
        if (w->a && *w->diverged < 0 && step < w->a->k_eff) {
            agree_step(w->a, step, ev->logits);
            if (ev->token != r->full_tokens[step]) *w->diverged = step;
        }
        if (w->record) r->full_tokens[w->n_tok++] = ev->token;
    }
    pkv_sbuf_add(w->text, ev->text, ev->text_len);
    return true;
}

/* Greedy decoding from r->work's state (on r->tmp). */
static int greedy(pkv_eval_runner *r, const pkv_request *req_in, bool record, agree_acc *a, pkv_eval_result *res,
                  pkv_sbuf *text, int *diverged, pkv_error *err) {
    if (pkv_session_copy(r->tmp, r->work, NULL, NULL, err)) return -1;
    *diverged = -1;
    if (record) {
        int32_t *toks = realloc(r->full_tokens, (size_t)(req_in->max_tokens + 1) * sizeof *toks);
        if (!toks) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
        r->full_tokens = toks;
    }
    greedy_watch w = {r, record, a, diverged, 0, text};
    pkv_request req = *req_in;
    req.on_token = greedy_token;
    req.user = &w;
    pkv_request_stats st;
    if (pkv_generate(r->tmp, &req, &st, err)) return -1;
    if (st.finish == PKV_FINISH_CONTEXT) return -1; /* err says why */
    res->n_gen = st.n_generated;
    res->n_decoded = st.n_decoded;
    res->decode_seconds = st.decode_seconds;
    if (record) r->n_full = w.n_tok;
    if (text->failed) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    return 0;
}

/* The item's tokens as the request feeds them, the gold continuation's and
 * the needle's positions. */
typedef struct {
    pkv_request_prompt rp;
    int32_t *ref, *needle;
    int n_ref, n_needle;
} item_tokens;

static void item_tokens_free(item_tokens *t) {
    pkv_request_prompt_free(&t->rp);
    free(t->ref);
    free(t->needle);
}

/* The needle's token positions in the prompt pt: its spans are byte offsets
 * into the context text, mapped on the context's own tokens, then shifted
 * past the template head (or BOS). */
static int map_needles(const pkv_model *m, const pkv_eval_item *item, const pkv_prompt_tokens *pt, int32_t **needle,
                       int *n_needle, pkv_error *err) {
    *n_needle = 0;
    *needle = malloc((size_t)(pt->context_end + 1) * sizeof **needle);
    if (!*needle) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    int rc = pkv_eval_needle_positions(m, item->context, pt->tokens + pt->context_begin,
                                       pt->context_end - pt->context_begin, item->needles, item->n_needles, *needle,
                                       pt->context_end, n_needle, err);
    if (*n_needle > pt->context_end) *n_needle = pt->context_end;
    for (int i = 0; i < *n_needle; i++) (*needle)[i] += pt->context_begin;
    if (rc) {
        free(*needle);
        *needle = NULL;
    }
    return rc;
}

int pkv_eval_item_tokens(const pkv_model *m, bool chat, const pkv_eval_item *item, pkv_prompt_tokens *pt,
                         int32_t **needle, int *n_needle, pkv_error *err) {
    *needle = NULL;
    *n_needle = 0;
    if (item_prompt(m, chat, item, pt, err)) return -1;
    if (map_needles(m, item, pt, needle, n_needle, err)) {
        pkv_prompt_tokens_free(pt);
        return -1;
    }
    return 0;
}

static int tokenize_item(const pkv_model *m, const pkv_request *req, const pkv_eval_item *item, item_tokens *t,
                         pkv_error *err) {
    memset(t, 0, sizeof *t);
    if (pkv_request_tokenize(m, req, &t->rp, err)) return -1;
    if (map_needles(m, item, &t->rp.prompt, &t->needle, &t->n_needle, err)) return -1;
    t->n_ref = segment_tokens(m, item->reference, &t->ref, err);
    return t->n_ref < 0 ? -1 : 0;
}

static bool stop_requested(const pkv_eval_runner *r) { return r->opts.stop && *r->opts.stop; }

/* The shared prefill of an item in a mode: the part the mode compresses,
 * without a press, into the source every config copies. */
static int prefill_source(pkv_eval_runner *r, const pkv_request *req, const item_tokens *t, double *seconds,
                          bool *shared, pkv_error *err) {
    const int32_t *tok = t->rp.prompt.tokens;
    int n = t->rp.n_compressed;
    /* the source holds exactly this prefill already: a multi-question task's
     * next question in query-agnostic mode (docs/evaluation.md §2.5); the
     * configs only ever copy from it, so it is as the prefill left it */
    *shared = r->n_src == n && !memcmp(r->src_tokens, tok, (size_t)n * sizeof *tok);
    *seconds = 0;
    if (*shared) return stop_requested(r) ? pkv_fail(err, PKV_ERR_INTERRUPTED, "interrupted") : 0;
    r->n_src = -1;
    pkv_session_reset(r->src);
    /* the reset clears an interrupt that arrived before it */
    if (stop_requested(r)) return pkv_fail(err, PKV_ERR_INTERRUPTED, "interrupted");
    pkv_request unpressed = *req;
    unpressed.press = NULL;
    pkv_request_stats st = {0};
    if (pkv_request_prefill_compressed(r->src, &unpressed, &t->rp, NULL, &st, err)) return -1;
    *seconds = st.press.prefill_seconds;
    if (n > r->src_cap) {
        int32_t *p = realloc(r->src_tokens, (size_t)n * sizeof *p);
        if (!p) return 0; /* nothing remembered: the next item prefills */
        r->src_tokens = p;
        r->src_cap = n;
    }
    memcpy(r->src_tokens, tok, (size_t)n * sizeof *tok);
    r->n_src = n;
    return 0;
}

/* A config that evicted nothing behaves exactly as the full cache: its
 * outcome is the full cache's (no decoding; timings of the copy only). */
static int reuse_full(pkv_eval_runner *r, pkv_eval_result *res) {
    const pkv_eval_result *f = &r->full;
    res->prediction = pkv_strdup(f->prediction ? f->prediction : "");
    if (!res->prediction) return -1;
    res->n_gen = f->n_gen;
    res->score = f->score;
    res->pass = f->pass;
    res->agree_k = f->agree_k;
    res->agree_top1 = f->agree_top1;
    res->kl = f->kl;
    res->nll = f->nll;
    res->nll_full = f->nll;
    res->reused_full = true;
    return 0;
}

/* One config: copy + compress, question, decode, metrics. */
static int run_config(pkv_eval_runner *r, const pkv_eval_task *task, const pkv_request *item_req,
                      const pkv_eval_item *item, const item_tokens *t, pkv_eval_mode mode, const pkv_eval_config *c,
                      bool is_full, pkv_eval_result *res, pkv_error *err) {
    const pkv_prompt_tokens *pt = &t->rp.prompt;
    res->mode = mode;
    res->config = c;
    res->pass = -1;
    res->n_context = pt->context_end;
    res->n_question = pt->question_end - pt->context_end;
    res->n_prefix = pt->n_tokens - pt->question_end;
    res->n_compressible = t->rp.n_compressed;
    res->n_needle_tokens = t->n_needle;
    res->needle_positions = t->needle;
    res->n_ref = t->n_ref;
    pkv_request req = *item_req;
    req.press = is_full ? NULL : c->cfg;
    pkv_request_stats st = {0};
    if (pkv_request_prefill_compressed(r->work, &req, &t->rp, r->src, &st, err)) return -1;
    res->copy_seconds = st.press.prefill_seconds;
    res->press_seconds = st.press.press_seconds;
    res->cache_bytes = st.press.cache_bytes;
    res->cache_bytes_full = st.press.cache_bytes_full;
    bool unchanged = false;
    if (measure_cache(r, t->needle, t->n_needle, res, &unchanged, err)) return -1;
    if (!is_full && unchanged) return reuse_full(r, res) ? pkv_fail(err, PKV_ERR_NOMEM, "out of memory") : 0;
    /* what was not compressed goes on top: question and answer prefix, or the answer prefix */
    if (pkv_request_prefill_rest(r->work, &t->rp, &st, err)) return -1;
    res->question_seconds = st.rest_seconds;
    pkv_sbuf text = {0};
    pkv_sbuf_add(&text, "", 0);
    int diverged = -1;
    agree_acc acc = {.r = r, .k_eff = 0};
    if (!is_full) acc.k_eff = r->n_full < r->opts.agree_k ? r->n_full : r->opts.agree_k;
    if (greedy(r, &req, is_full, is_full ? NULL : &acc, res, &text, &diverged, err)) {
        pkv_sbuf_free(&text);
        return -1;
    }
    res->prediction = pkv_sbuf_take(&text);
    if (!res->prediction) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    if (is_full) {
        res->agree_k = r->n_full < r->opts.agree_k ? r->n_full : r->opts.agree_k;
        res->agree_top1 = res->agree_k > 0 ? 1.0 : NAN;
        res->kl = res->agree_k > 0 ? 0.0 : NAN;
    } else {
        /* steps after a divergence: teacher-forced on the full cache's tokens */
        if (diverged >= 0 && diverged + 1 < acc.k_eff) {
            acc.first = diverged + 1;
            if (pkv_session_copy(r->tmp, r->work, NULL, NULL, err)) return -1;
            if (pkv_eval(r->tmp, r->full_tokens, acc.k_eff - 1, agree_row, &acc, err)) return -1;
        }
        res->agree_k = acc.k_eff;
        res->agree_top1 = acc.k_eff > 0 ? (double)acc.matched / acc.k_eff : NAN;
        res->kl = acc.k_eff > 0 ? acc.kl_sum / acc.k_eff : NAN;
    }
    if (reference_nll(r, t->ref, t->n_ref, &res->nll, err)) return -1;
    if (is_full) r->nll_full = res->nll;
    res->nll_full = r->nll_full;
    res->score = pkv_score(task->metric, res->prediction, (const char *const *)item->gold, item->n_gold);
    if (task->metric == PKV_METRIC_ROUGE1) res->pass = pkv_score_classic_pass(res->prediction);
    if (is_full) {
        free(r->full.prediction);
        r->full = *res;
        r->full.prediction = pkv_strdup(res->prediction);
        r->full.needle_kept = NULL;
        if (!r->full.prediction) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    }
    return 0;
}

static void result_free(pkv_eval_result *res) {
    free(res->prediction);
    free(res->needle_kept);
    memset(res, 0, sizeof *res);
}

int pkv_eval_run_item(pkv_eval_runner *r, const pkv_eval_task *task, const pkv_eval_item *item, pkv_eval_mode mode,
                      const pkv_eval_config *configs, int n_configs, const bool *skip, pkv_eval_emit_fn emit,
                      void *user, pkv_error *err) {
    pkv_error_clear(err);
    if (n_configs < 1 || strcmp(configs[0].press, "none"))
        return pkv_fail(err, PKV_ERR_ARG, "the first configuration must be the full cache (press none)");
    pkv_request req;
    item_request(r, task, item, mode, &req);
    item_tokens t;
    if (tokenize_item(r->model, &req, item, &t, err)) {
        item_tokens_free(&t);
        return -1;
    }
    double prefill_seconds = 0;
    bool shared = false;
    int rc = prefill_source(r, &req, &t, &prefill_seconds, &shared, err);
    for (int i = 0; i < n_configs && rc == 0; i++) {
        if (i > 0 && skip && skip[i]) continue;
        if (stop_requested(r)) {
            rc = pkv_fail(err, PKV_ERR_INTERRUPTED, "interrupted");
            break;
        }
        pkv_eval_result res = {0};
        res.prefill_seconds = prefill_seconds;
        res.shared_prefill = shared;
        rc = run_config(r, task, &req, item, &t, mode, &configs[i], i == 0, &res, err);
        if (rc == 0 && !(skip && skip[i])) rc = emit(user, &res, err);
        result_free(&res);
    }
    item_tokens_free(&t);
    return rc;
}
