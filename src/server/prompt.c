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

/* The request's own kv_compression (keys and values point into r; the
 * arrays are the caller's). */
static press_choice request_press(const srv_request *r, const char **keys, const char **values) {
    for (int i = 0; i < r->n_press_opts; i++) {
        keys[i] = r->press_opts[i].key;
        values[i] = r->press_opts[i].value;
    }
    return (press_choice){r->press, keys, values, r->n_press_opts, true, r->protect_system};
}

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
    /* the press as configured, every option as given: what a stored context records */
    size_t n = (size_t)snprintf(p->press_text, sizeof p->press_text, "%s", pc->name ? pc->name : "none");
    for (int i = 0; i < pc->n && n < sizeof p->press_text; i++)
        n += (size_t)snprintf(p->press_text + n, sizeof p->press_text - n, " %s=%s", pc->keys[i], pc->values[i]);
    for (char *c = p->press_text; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = ' '; /* a saved cache's text has no control characters */
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
    p->req.ignore_eos = r->ignore_eos;
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
        pc = request_press(r, keys, values); /* the request's kv_compression replaces the server's press entirely */
    } else {
        pc = (press_choice){lim->press.press, lim->press.keys, lim->press.values, lim->press.n_opts, false,
                            lim->press.protect_system};
    }
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.cache_type_k = lim->cache_type_k;
    so.cache_type_v = lim->cache_type_v;
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

/* ------------------------------------------------------------ stored contexts */

const char *const SRV_CONTEXT_PRESS = "tova";
const char *const SRV_CONTEXT_PRESS_KEYS[] = {"ratio"};
const char *const SRV_CONTEXT_PRESS_VALUES[] = {"0.5"};

/* The most cache bytes a token can add after a stored context: a row in
 * every head of every layer, a layer split per query head counted at the
 * query heads. */
static uint64_t bytes_per_token_max(const pkv_model *m, const srv_limits *lim) {
    pkv_model_info info;
    pkv_model_get_info(m, &info);
    uint64_t row = pkv_model_kv_bytes_per_token(m, lim->cache_type_k, lim->cache_type_v) /
                       ((uint64_t)info.n_layer * info.n_head_kv) +
                   sizeof(int32_t);
    return (uint64_t)info.n_layer * info.n_head * row;
}

int srv_prepare_context(const pkv_model *m, const srv_limits *lim, const srv_request *r, srv_prepared *p,
                        srv_error *e) {
    memset(p, 0, sizeof *p);
    p->store = true;
    p->chat = r->messages != NULL;
    press_choice pc = {SRV_CONTEXT_PRESS, SRV_CONTEXT_PRESS_KEYS, SRV_CONTEXT_PRESS_VALUES, SRV_CONTEXT_PRESS_OPTS,
                       false, false};
    const char *keys[SRV_MAX_PRESS_OPTS], *values[SRV_MAX_PRESS_OPTS];
    if (r->has_press) pc = request_press(r, keys, values);
    pkv_request_init(&p->req);
    pkv_prompt_parts *parts = &p->req.prompt;
    parts->parse_special = true;
    if (p->chat) {
        /* [system,] user: the user's text is the context a question is later appended to (kvpress's protocol) */
        int n = r->n_messages, first = n == 2 && !strcmp(r->messages[0].role, "system") ? 1 : 0;
        if (n - first != 1 || strcmp(r->messages[first].role, "user") != 0) {
            srv_prepared_free(p);
            return srv_bad(e, "invalid_value", "messages",
                           "a context's messages are a user message, after at most one system message: later "
                           "requests append their question to the user's text");
        }
        parts->chat = true;
        parts->system = first ? r->messages[0].content : NULL;
        parts->context = r->messages[first].content;
        parts->question = "x"; /* a stand-in: a trimming template would otherwise trim the context's end */
    } else {
        parts->context = r->prompt;
    }
    p->req.mode = PKV_MODE_QUERY_AGNOSTIC; /* the press sees [0, context_end) */
    p->req.protect_system = pc.protect_system && p->chat && parts->system;
    if (pc.protect_system && !p->req.protect_system) {
        srv_prepared_free(p);
        return srv_bad(e, "invalid_value", "kv_compression.protect_system", "protect_system needs a system message");
    }
    pkv_error err;
    if (pkv_request_tokenize(m, &p->req, &p->prompt, &err)) {
        srv_prepared_free(p);
        return err.code == PKV_ERR_NOMEM ? no_memory(e) : srv_bad(e, "invalid_value", p->chat ? "messages" : "text",
                                                                  "%s", err.msg);
    }
    int n = p->prompt.n_compressed;
    if (n < 1 || n >= lim->n_ctx) {
        srv_prepared_free(p);
        return srv_bad(e, n < 1 ? "invalid_value" : "context_length_exceeded", p->chat ? "messages" : "text",
                       "the context has %d tokens; this server's context is %d tokens (the context, a question and "
                       "its answer)", n, lim->n_ctx);
    }
    if (build_press(&pc, p, e)) {
        srv_prepared_free(p);
        return -1;
    }
    p->req.press = p->press;
    p->req.max_tokens = 0;
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.cache_type_k = lim->cache_type_k;
    so.cache_type_v = lim->cache_type_v;
    so.n_batch = lim->n_batch;
    pkv_cache_estimate est;
    /* the estimate of the prompt pressed whole: the compressed part only */
    pkv_request_prompt head = p->prompt;
    head.prompt.n_tokens = n;
    if (pkv_request_estimate(m, &p->req, &head, &so, &est, &err)) {
        srv_prepared_free(p);
        return err.code == PKV_ERR_NOMEM ? no_memory(e) : srv_fail(e, 500, "server_error", NULL, NULL, "%s", err.msg);
    }
    p->cache_bytes_max = est.bytes_peak;
    p->row_bytes = est.row_bytes;
    p->store_bytes_min = (uint64_t)est.rows_kept * est.row_bytes;
    return 0;
}

static int none_press(srv_prepared *p, srv_error *e) {
    press_choice none = {"none", NULL, NULL, 0, false, false};
    if (build_press(&none, p, e)) return -1;
    p->req.press = p->press;
    p->req.mode = PKV_MODE_QUERY_AWARE;
    p->req.protect_system = false;
    return 0;
}

int srv_prepare_continuation(const pkv_model *m, const srv_limits *lim, const srv_request *r, const int32_t *state,
                             int n_state, bool chat, uint64_t state_bytes, const char *press_desc, srv_prepared *p,
                             srv_error *e) {
    memset(p, 0, sizeof *p);
    bool is_chat = r->endpoint == SRV_CHAT;
    if (chat != is_chat)
        return srv_bad(e, "invalid_value", "context_id",
                       "this context was made from %s: it continues %s requests", chat ? "messages" : "a text",
                       chat ? "chat completion" : "completion");
    if (r->has_press)
        return srv_bad(e, "invalid_value", "kv_compression",
                       "the context is compressed already (%s): a request naming it takes no kv_compression", press_desc);
    if (is_chat && (r->n_messages != 1 || strcmp(r->messages[0].role, "user") != 0))
        return srv_bad(e, "invalid_value", "messages",
                       "with context_id, 'messages' is one user message: the question appended to the context's "
                       "user text");
    p->chat = is_chat;
    pkv_request_init(&p->req);
    pkv_prompt_parts *parts = &p->req.prompt;
    parts->parse_special = true;
    parts->chat = is_chat;
    if (is_chat) {
        parts->question = r->messages[0].content;
    } else if (r->prompt_ids) {
        p->req.tokens = r->prompt_ids;
        p->req.n_tokens = r->n_prompt_ids;
    } else {
        parts->question = r->prompt;
    }
    pkv_error err;
    if (pkv_request_tokenize_continuation(m, &p->req, state, n_state, &p->prompt, &err)) {
        int rc = err.code == PKV_ERR_NOMEM ? no_memory(e)
                                           : srv_bad(e, "invalid_value", is_chat ? "messages" : "prompt", "%s", err.msg);
        srv_prepared_free(p);
        return rc;
    }
    if (check_lengths(lim, r, p, e) || none_press(p, e)) {
        srv_prepared_free(p);
        return -1;
    }
    snprintf(p->press_desc, sizeof p->press_desc, "%s", press_desc);
    sampling_params(r, &p->req.sampling);
    p->req.stop = (const char *const *)r->stop;
    p->req.n_stop = r->n_stop;
    p->n_from = n_state;
    uint64_t after = (uint64_t)(p->prompt.prompt.n_tokens - n_state) + (uint64_t)p->req.max_tokens;
    p->cache_bytes_max = state_bytes + after * bytes_per_token_max(m, lim);
    pkv_model_info info;
    pkv_model_get_info(m, &info);
    p->row_bytes = bytes_per_token_max(m, lim) / ((uint64_t)info.n_layer * info.n_head);
    return 0;
}

int srv_prepared_reuse(const pkv_model *m, const srv_limits *lim, srv_prepared *p, int n_state, uint64_t state_bytes,
                       const char *press_desc) {
    pkv_error err;
    pkv_press_cfg *none = pkv_press_cfg_new("none", &err);
    if (!none) return -1; /* out of memory: the request runs as it came, with its own press */
    pkv_press_cfg_free(p->press);
    p->press = none;
    p->req.press = none;
    p->req.mode = PKV_MODE_QUERY_AWARE;
    p->req.protect_system = false;
    p->compress = false;
    p->prompt.n_compressed = n_state;
    p->prompt.n_protected = 0;
    p->n_from = n_state;
    snprintf(p->press_desc, sizeof p->press_desc, "%s", press_desc);
    uint64_t after = (uint64_t)(p->prompt.prompt.n_tokens - n_state) + (uint64_t)p->req.max_tokens;
    p->cache_bytes_max = state_bytes + after * bytes_per_token_max(m, lim);
    return 0;
}
