/*
 * Generation: the decode loop of a request, one token per step. A step
 * samples from the session's logits, turns the token into text (cut before a
 * stop string, or at the end of the first line when asked), tells the
 * caller, and runs the token through the model unless that ended the
 * generation. The first token comes from the prompt's logits, so n tokens
 * cost n - 1 decode steps.
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/textout.h"
#include "promptkv.h"

struct pkv_generation {
    pkv_session *session;
    const pkv_model *model;
    const pkv_request *req; /* borrowed: its stop strings and callback */
    pkv_sampler *sampler;
    pkv_textout text;
    size_t shown;           /* text[0, shown) has been passed to the callback */
    int index;              /* token events so far */
    int n_generated, n_decoded;
    double decode_seconds;
    pkv_finish finish;
    bool done;
};

pkv_generation *pkv_generation_new(pkv_session *s, const pkv_request *req, pkv_error *err) {
    pkv_error_clear(err);
    pkv_generation *g = calloc(1, sizeof *g);
    if (!g) {
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory for a generation");
        return NULL;
    }
    g->session = s;
    g->model = pkv_session_model(s);
    g->req = req;
    g->sampler = pkv_sampler_new(&req->sampling, pkv_n_vocab(g->model));
    if (!g->sampler) {
        free(g);
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the sampler");
        return NULL;
    }
    pkv_textout_init(&g->text, req->stop, req->n_stop);
    return g;
}

void pkv_generation_free(pkv_generation *g) {
    if (!g) return;
    pkv_sampler_free(g->sampler);
    pkv_textout_free(&g->text);
    free(g);
}

bool pkv_generation_done(const pkv_generation *g) { return g->done; }

const char *pkv_generation_text(const pkv_generation *g, size_t *len) {
    *len = g->text.len;
    return g->text.text ? g->text.text : "";
}

void pkv_generation_stats(const pkv_generation *g, pkv_request_stats *stats) {
    stats->n_generated = g->n_generated;
    stats->n_decoded = g->n_decoded;
    stats->decode_seconds = g->decode_seconds;
    stats->finish = g->finish;
}

/* The tasks' one-line answers: a newline ends the text once it holds more
 * than spaces and newlines. */
static bool has_text(const pkv_textout *t) {
    for (size_t i = 0; i < t->len; i++)
        if (t->text[i] != ' ' && t->text[i] != '\n') return true;
    return false;
}

/* Passes the text that became ready to the callback with the event; false
 * when the caller asks to stop. */
static bool emit(pkv_generation *g, int32_t token, const float *logits, bool eog, pkv_finish finish) {
    pkv_token_event ev = {
        .index = token >= 0 ? g->index : -1,
        .token = token,
        .logits = logits,
        .end_of_generation = eog,
        .text = g->text.text ? g->text.text + g->shown : "",
        .text_len = g->text.ready - g->shown,
        .done = finish != PKV_FINISH_NONE,
        .finish = finish,
    };
    g->shown = g->text.ready;
    if (token >= 0) g->index++;
    return g->req->on_token ? g->req->on_token(g->req->user, &ev) : true;
}

static void finish(pkv_generation *g, pkv_finish why) {
    g->finish = why;
    g->done = true;
}

/* A step up to its decode: sample, turn the token into text, call back.
 * *decode gets the token to run through the model, or -1 when the step
 * ended the generation. */
static int sample_and_emit(pkv_generation *g, int32_t *decode, pkv_error *err) {
    const pkv_request *req = g->req;
    const float *logits = pkv_logits(g->session);
    *decode = -1;
    int32_t tok = pkv_sample(g->sampler, logits, err);
    if (tok < 0) { /* no finite logit: an error, never a random token */
        finish(g, PKV_FINISH_NONE);
        return -1;
    }
    bool eog = !req->ignore_eos && pkv_token_is_eog(g->model, tok);
    pkv_finish why = eog ? PKV_FINISH_END : PKV_FINISH_NONE;
    if (!eog) {
        char piece[256];
        int len = pkv_token_to_piece(g->model, tok, false, piece, sizeof piece);
        if (len < 0) len = 0;
        if (len > (int)sizeof piece) len = (int)sizeof piece;
        const char *nl = req->stop_at_newline ? memchr(piece, '\n', (size_t)len) : NULL;
        if (nl && has_text(&g->text)) {
            len = (int)(nl - piece);
            why = PKV_FINISH_STOP;
        }
        if (pkv_textout_append(&g->text, piece, (size_t)len)) {
            finish(g, PKV_FINISH_NONE);
            return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the generated text");
        }
        if (g->text.stopped) why = PKV_FINISH_STOP;
        g->n_generated++;
        if (why == PKV_FINISH_NONE && g->n_generated >= req->max_tokens) why = PKV_FINISH_LENGTH;
    }
    if (why != PKV_FINISH_NONE) {
        pkv_textout_finish(&g->text);
        emit(g, tok, logits, eog, why);
        finish(g, why);
        return 0;
    }
    if (!emit(g, tok, logits, false, PKV_FINISH_NONE)) {
        finish(g, PKV_FINISH_CALLER);
        return 0;
    }
    *decode = tok;
    return 0;
}

/* The context is full: what was generated stands (err says why). */
static void context_full(pkv_generation *g) {
    pkv_textout_finish(&g->text);
    emit(g, -1, NULL, false, PKV_FINISH_CONTEXT);
    finish(g, PKV_FINISH_CONTEXT);
}

static int step(pkv_generation *g, pkv_error *err) {
    int32_t tok;
    if (sample_and_emit(g, &tok, err)) return -1;
    if (tok < 0) return 0;
    double t0 = pkv_now_seconds();
    if (pkv_decode(g->session, tok, err)) {
        if (err->code != PKV_ERR_LIMIT) {
            finish(g, PKV_FINISH_NONE);
            return -1;
        }
        context_full(g);
        return 0;
    }
    g->decode_seconds += pkv_now_seconds() - t0;
    g->n_decoded++;
    return 0;
}

int pkv_generation_step(pkv_generation *const *gens, int n, pkv_error *err) {
    int running = 0, rc = 0;
    pkv_error step_err;
    for (int i = 0; i < n; i++) {
        if (gens[i]->done) continue;
        if (step(gens[i], &step_err)) {
            if (rc == 0 && err) *err = step_err;
            rc = -1;
        } else if (gens[i]->finish == PKV_FINISH_CONTEXT && rc == 0 && err) {
            *err = step_err; /* why the context ended it */
        }
        running += !gens[i]->done;
    }
    return rc ? -1 : running;
}

enum { STEP_CHUNK = 64 }; /* generations decoded in one batched forward pass at most */

/* A step's failure: err keeps the first of them. */
static int first_error(int rc, pkv_error *err, const pkv_error *e) {
    if (rc == 0 && err) *err = *e;
    return -1;
}

int pkv_generation_step_batched(pkv_batch *batch, pkv_generation *const *gens, int n, pkv_error *err) {
    if (!batch) return pkv_generation_step(gens, n, err);
    int rc = 0;
    pkv_error step_err;
    for (int c0 = 0; c0 < n; c0 += STEP_CHUNK) {
        int nc = n - c0 < STEP_CHUNK ? n - c0 : STEP_CHUNK;
        pkv_generation *go[STEP_CHUNK];
        pkv_session *ss[STEP_CHUNK];
        int32_t toks[STEP_CHUNK];
        int k = 0;
        for (int i = c0; i < c0 + nc; i++) {
            pkv_generation *g = gens[i];
            if (g->done) continue;
            int32_t tok;
            if (sample_and_emit(g, &tok, &step_err)) {
                rc = first_error(rc, err, &step_err);
                continue;
            }
            if (tok < 0) continue;
            if (pkv_session_interrupted(g->session)) { /* its caller stopped it: the others go on */
                pkv_fail(&step_err, PKV_ERR_INTERRUPTED, "interrupted");
                rc = first_error(rc, err, &step_err);
                finish(g, PKV_FINISH_NONE);
                continue;
            }
            if (pkv_session_n_pos(g->session) >= pkv_session_n_ctx(g->session)) {
                pkv_fail(&step_err, PKV_ERR_LIMIT, "the context of %d tokens is full", pkv_session_n_ctx(g->session));
                if (rc == 0 && err) *err = step_err;
                context_full(g);
                continue;
            }
            go[k] = g;
            ss[k] = g->session;
            toks[k++] = tok;
        }
        if (k == 0) continue;
        double t0 = pkv_now_seconds();
        if (pkv_batch_decode(batch, ss, toks, k, &step_err)) {
            for (int j = 0; j < k; j++) finish(go[j], PKV_FINISH_NONE);
            rc = first_error(rc, err, &step_err);
            continue;
        }
        double dt = pkv_now_seconds() - t0;
        for (int j = 0; j < k; j++) {
            go[j]->decode_seconds += dt; /* each stream waited the whole step */
            go[j]->n_decoded++;
        }
    }
    if (rc) return -1;
    int running = 0;
    for (int i = 0; i < n; i++) running += !gens[i]->done;
    return running;
}

int pkv_generate(pkv_session *s, const pkv_request *req, pkv_request_stats *stats, pkv_error *err) {
    pkv_generation *g = pkv_generation_new(s, req, err);
    if (!g) return -1;
    int rc = 0;
    while (!g->done && (rc = pkv_generation_step(&g, 1, err)) > 0) {}
    if (stats) pkv_generation_stats(g, stats);
    pkv_generation_free(g);
    return rc < 0 ? -1 : 0;
}
