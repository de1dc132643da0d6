#include "prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

void srv_prepared_free(srv_prepared *p) {
    pkv_request_prompt_free(&p->prompt);
    pkv_press_cfg_free(p->press);
    free(p->messages);
    memset(p, 0, sizeof *p);
}

static int no_memory(srv_error *e) { return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }

/* ------------------------------------------------------------ press */

typedef struct {
    const char *name;
    const char *const *keys;
    const char *const *values;
    int n;
    bool from_request;
    bool protect_system;
} press_choice;

static const char *option(const press_choice *pc, const char *key) {
    const char *v = NULL;
    for (int i = 0; i < pc->n; i++)
        if (!strcmp(pc->keys[i], key)) v = pc->values[i];
    return v;
}

static int build_press(const press_choice *pc, srv_prepared *p, srv_error *e) {
    pkv_error err;
    p->press = pkv_press_cfg_new(pc->name ? pc->name : "none", &err);
    if (!p->press) return srv_bad(e, "invalid_value", "kv_compression.press", "%s", err.msg);
    for (int i = 0; i < pc->n; i++) {
        if (pkv_press_cfg_set(p->press, pc->keys[i], pc->values[i], &err)) {
            char param[96];
            snprintf(param, sizeof param, "kv_compression.%s", pc->keys[i]);
            return srv_bad(e, "invalid_value", param, "%s", err.msg);
        }
    }
    if (pkv_press_cfg_check(p->press, &err)) return srv_bad(e, "invalid_value", "kv_compression", "%s", err.msg);
    p->compress = pkv_press_cfg_compresses(p->press);
    pkv_press_cfg_describe(p->press, p->press_desc, sizeof p->press_desc);
    return 0;
}

/* ------------------------------------------------------------ sampling */

static void sampling_params(const srv_request *r, pkv_sampler_params *s) {
    pkv_sampler_params_default(s);
    s->temperature = (float)r->temperature;
    s->top_p = (float)r->top_p;
    s->top_k = r->top_k;
    s->min_p = (float)r->min_p;
    if (r->has_seed) s->seed = r->seed;
    else if (getrandom(&s->seed, sizeof s->seed, 0) != (ssize_t)sizeof s->seed) {
        struct timespec ts; /* no entropy source: the clock will do for an unseeded request */
        clock_gettime(CLOCK_REALTIME, &ts);
        s->seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
    }
}

/* ------------------------------------------------------------ the prompt */

/* The request's prompt for the engine: a completion's text (BOS first) or
 * token ids, or the chat conversation, whose last user message is the
 * question a query-agnostic press leaves out. Both parse control tokens in
 * the user's text, as llama.cpp's server does. */
static int set_prompt(const srv_request *r, srv_prepared *p, srv_error *e) {
    pkv_prompt_parts *parts = &p->req.prompt;
    parts->parse_special = true;
    if (r->endpoint == SRV_COMPLETION) {
        if (r->prompt_ids) {
            p->req.tokens = r->prompt_ids;
            p->req.n_tokens = r->n_prompt_ids;
        } else {
            parts->context = r->prompt;
        }
        return 0;
    }
    p->messages = malloc((size_t)(r->n_messages > 0 ? r->n_messages : 1) * sizeof *p->messages);
    if (!p->messages) return no_memory(e);
    for (int i = 0; i < r->n_messages; i++) p->messages[i] = (pkv_chat_message){r->messages[i].role, r->messages[i].content};
    parts->chat = true;
    parts->messages = p->messages;
    parts->n_messages = r->n_messages;
    return 0;
}

static int tokenize(const pkv_model *m, const srv_request *r, srv_prepared *p, srv_error *e) {
    pkv_error err;
    pkv_request_prompt_free(&p->prompt);
    if (pkv_request_tokenize(m, &p->req, &p->prompt, &err) == 0) return 0;
    const char *param = r->endpoint == SRV_CHAT ? "messages" : "prompt";
    if (err.code == PKV_ERR_NOMEM) return no_memory(e);
    if (err.code == PKV_ERR_LIMIT) return srv_bad(e, "context_length_exceeded", param, "%s", err.msg);
    return srv_bad(e, "invalid_value", param, "%s", err.msg);
}

static int check_lengths(const srv_limits *lim, const srv_request *r, srv_prepared *p, srv_error *e) {
    const char *param = r->endpoint == SRV_CHAT ? "messages" : "prompt";
    int n_tokens = p->prompt.prompt.n_tokens;
    if (n_tokens == 0) return srv_bad(e, "invalid_value", param, "the prompt has no tokens");
    if (n_tokens >= lim->n_ctx)
        return srv_bad(e, "context_length_exceeded", param,
                       "the prompt has %d tokens; this server's context is %d tokens (prompt + completion)",
                       n_tokens, lim->n_ctx);
    if (r->max_tokens > lim->max_tokens)
        return srv_bad(e, "max_tokens_exceeded", "max_tokens",
                       "max_tokens %d is more than this server allows (%d)", r->max_tokens, lim->max_tokens);
    if (r->max_tokens > 0 && n_tokens + r->max_tokens > lim->n_ctx)
        return srv_bad(e, "context_length_exceeded", "max_tokens",
                       "the context is %d tokens, but %d were requested (%d in the prompt, %d in the completion)",
                       lim->n_ctx, n_tokens + r->max_tokens, n_tokens, r->max_tokens);
    int room = lim->n_ctx - n_tokens;
    int dflt = r->endpoint == SRV_CHAT ? lim->max_tokens : lim->default_max_tokens;
    p->req.max_tokens = r->max_tokens > 0 ? r->max_tokens : (dflt < room ? dflt : room);
    return 0;
}

static int prepare(const pkv_model *m, const srv_limits *lim, const srv_request *r, const press_choice *pc,
                   srv_prepared *p, srv_error *e) {
    if (r->protect_system && r->endpoint != SRV_CHAT)
        return srv_bad(e, "invalid_value", "kv_compression.protect_system",
                       "protect_system applies to chat completions (a system message)");
    const char *mode = option(pc, "mode");
    bool agnostic = mode && !strcmp(mode, "query_agnostic");
    if (agnostic && r->endpoint != SRV_CHAT && pc->from_request)
        return srv_bad(e, "invalid_value", "kv_compression.mode",
                       "query_agnostic applies to chat completions: the last user message is the question");
    pkv_request_init(&p->req);
    if (set_prompt(r, p, e)) return -1;
    /* a completion has no question: the server's query-agnostic default compresses it whole */
    p->req.mode = agnostic && r->endpoint == SRV_CHAT ? PKV_MODE_QUERY_AGNOSTIC : PKV_MODE_QUERY_AWARE;
    p->req.press_whole_prompt = true;
    p->req.protect_system = pc->protect_system && r->endpoint == SRV_CHAT;
    if (tokenize(m, r, p, e)) return -1;
    if (p->req.protect_system && p->prompt.n_protected <= 0) {
        if (pc->from_request)
            return srv_bad(e, "invalid_value", "kv_compression.protect_system",
                           "protect_system needs a system message first in 'messages'");
        p->req.protect_system = false;
    }
    const pkv_prompt_tokens *t = &p->prompt.prompt;
    if (p->req.mode == PKV_MODE_QUERY_AGNOSTIC && t->question_end == t->context_end) {
        if (pc->from_request)
            return srv_bad(e, "invalid_value", "kv_compression.mode",
                           "query_agnostic needs a non-empty user message: the last one is the question fed after "
                           "compression");
        p->req.mode = PKV_MODE_QUERY_AWARE;
        if (tokenize(m, r, p, e)) return -1;
    }
    if (check_lengths(lim, r, p, e) || build_press(pc, p, e)) return -1;
    p->req.press = p->press;
    if (pkv_press_cfg_mode(p->press) == PKV_MODE_RECOMPRESS) p->req.mode = PKV_MODE_RECOMPRESS;
    sampling_params(r, &p->req.sampling);
    p->req.stop = (const char *const *)r->stop;
    p->req.n_stop = r->n_stop;
    return 0;
}

int srv_prepare(const pkv_model *m, const srv_limits *lim, const srv_request *r, srv_prepared *p, srv_error *e) {
    memset(p, 0, sizeof *p);
    press_choice pc;
    const char *keys[SRV_MAX_PRESS_OPTS], *values[SRV_MAX_PRESS_OPTS];
    if (r->has_press) {
        /* the request's kv_compression replaces the server's press entirely */
        for (int i = 0; i < r->n_press_opts; i++) {
            keys[i] = r->press_opts[i].key;
            values[i] = r->press_opts[i].value;
        }
        pc = (press_choice){r->press, keys, values, r->n_press_opts, true, r->protect_system};
    } else {
        pc = (press_choice){lim->press.press, lim->press.keys, lim->press.values, lim->press.n_opts, false,
                            lim->press.protect_system};
    }
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.cache_type = lim->elem_bytes == 4 ? PKV_CACHE_F32 : PKV_CACHE_F16;
    so.n_batch = lim->n_batch;
    pkv_cache_estimate est;
    pkv_error err;
    if (prepare(m, lim, r, &pc, p, e)) {
        srv_prepared_free(p);
        return -1;
    }
    if (pkv_request_estimate(m, &p->req, &p->prompt, &so, &est, &err)) {
        srv_prepared_free(p);
        return err.code == PKV_ERR_NOMEM ? no_memory(e) : srv_fail(e, 500, "server_error", NULL, NULL, "%s", err.msg);
    }
    p->cache_bytes_max = est.bytes_peak;
    p->row_bytes = est.row_bytes;
    return 0;
}
