/* Request bodies: JSON (jansson) to srv_request, with OpenAI's field names,
 * types and limits. Unknown fields are ignored, as OpenAI-compatible servers
 * commonly do; fields whose feature is missing are refused with a message
 * that names them rather than silently ignored. */
#include "request.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int vfail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                 va_list ap) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    return -1;
}

int srv_fail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(e, status, type, code, param, fmt, ap);
    va_end(ap);
    return -1;
}

int srv_bad(srv_error *e, const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(e, 400, "invalid_request_error", code, param, fmt, ap);
    va_end(ap);
    return -1;
}

void srv_request_free(srv_request *r) {
    free(r->prompt);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    for (int i = 0; i < r->n_press_opts; i++) free(r->press_opts[i].value);
    memset(r, 0, sizeof *r);
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int no_memory(srv_error *e) {
    return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory reading the request");
}

static const char *json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int wrong_type(srv_error *e, const char *param, const char *want, const json_t *got) {
    return srv_bad(e, "invalid_type", param, "'%s' must be %s, got %s", param, want, json_type_name(got));
}

/* ------------------------------------------------------------ scalar fields */

/* The field, or NULL when absent or null (OpenAI treats null as "not given"). */
static json_t *field(const json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_number(const json_t *obj, const char *key, double lo, double hi, double *out, srv_error *e) {
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_number(v)) return wrong_type(e, key, "a number", v);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return srv_bad(e, "invalid_value", key, "'%s' must be in [%g, %g], got %g", key, lo, hi, d);
    *out = d;
    return 0;
}

static int get_int(const json_t *obj, const char *key, json_int_t lo, json_int_t hi, json_int_t *out, bool *given,
                   srv_error *e) {
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_integer(v)) return wrong_type(e, key, "an integer", v);
    json_int_t n = json_integer_value(v);
    if (n < lo || n > hi)
        return srv_bad(e, "invalid_value", key, "'%s' must be in [%lld, %lld], got %lld", key, (long long)lo,
                       (long long)hi, (long long)n);
    *out = n;
    if (given) *given = true;
    return 0;
}

static int get_bool(const json_t *obj, const char *key, bool *out, srv_error *e) {
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return wrong_type(e, key, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

/* ------------------------------------------------------------ unsupported features */

/* Fields of features this server does not have: refused when set to anything
 * but their neutral value, so a client never gets silently different output. */
static int refuse_unsupported(const json_t *obj, srv_error *e) {
    json_t *v;
    if ((v = field(obj, "n")) && !(json_is_integer(v) && json_integer_value(v) == 1)) {
        if (!json_is_integer(v)) return wrong_type(e, "n", "an integer", v);
        return srv_bad(e, "unsupported_value", "n", "only n=1 is supported (one choice per request), got %lld",
                       (long long)json_integer_value(v));
    }
    if ((v = field(obj, "best_of")) && !(json_is_integer(v) && json_integer_value(v) == 1))
        return srv_bad(e, "unsupported_value", "best_of", "best_of is not supported (only 1)");
    if ((v = field(obj, "logprobs")) && !json_is_false(v))
        return srv_bad(e, "unsupported_parameter", "logprobs", "logprobs are not supported by this server");
    if (field(obj, "top_logprobs"))
        return srv_bad(e, "unsupported_parameter", "top_logprobs", "top_logprobs are not supported by this server");
    if ((v = field(obj, "echo")) && !json_is_false(v))
        return srv_bad(e, "unsupported_parameter", "echo", "echo is not supported by this server");
    if ((v = field(obj, "suffix")) && !(json_is_string(v) && json_string_length(v) == 0))
        return srv_bad(e, "unsupported_parameter", "suffix", "suffix (insertion) is not supported by this server");
    static const char *const PENALTIES[] = {"presence_penalty", "frequency_penalty"};
    for (int i = 0; i < 2; i++)
        if ((v = field(obj, PENALTIES[i])) && !(json_is_number(v) && json_number_value(v) == 0.0))
            return srv_bad(e, "unsupported_parameter", PENALTIES[i], "%s is not supported by this server (only 0)",
                           PENALTIES[i]);
    if ((v = field(obj, "logit_bias")) && !(json_is_object(v) && json_object_size(v) == 0))
        return srv_bad(e, "unsupported_parameter", "logit_bias", "logit_bias is not supported by this server");
    /* both endpoints: a completion asking for tools or a format must not get plain text back */
    static const char *const TOOLS[] = {"tools", "tool_choice", "functions", "function_call"};
    for (int i = 0; i < 4; i++)
        if ((v = field(obj, TOOLS[i])) && !(json_is_array(v) && json_array_size(v) == 0) &&
            !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
            return srv_bad(e, "unsupported_parameter", TOOLS[i], "%s (tool calling) is not supported by this server",
                           TOOLS[i]);
    json_t *fmt = field(obj, "response_format");
    if (fmt) {
        json_t *t = json_is_object(fmt) ? json_object_get(fmt, "type") : NULL;
        if (!t || !json_is_string(t) || strcmp(json_string_value(t), "text") != 0)
            return srv_bad(e, "unsupported_parameter", "response_format",
                           "response_format other than {\"type\": \"text\"} is not supported by this server");
    }
    return 0;
}

/* ------------------------------------------------------------ prompt and messages */

static int parse_token_ids(const json_t *arr, const char *param, srv_request *r, srv_error *e) {
    size_t n = json_array_size(arr);
    if (n == 0) return srv_bad(e, "invalid_value", param, "'%s' is empty", param);
    if (n > (1u << 24)) return srv_bad(e, "invalid_value", param, "'%s' has too many tokens", param);
    r->prompt_ids = malloc(n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return no_memory(e);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return srv_bad(e, "invalid_type", param, "'%s' must hold token ids (non-negative integers); item %zu is %s",
                           param, i, json_type_name(t));
        r->prompt_ids[i] = (int32_t)json_integer_value(t);
    }
    r->n_prompt_ids = (int)n;
    return 0;
}

/* prompt: a string, or an array of one string, of token ids, or of one array of ids. */
static int parse_prompt(const json_t *obj, srv_request *r, srv_error *e) {
    json_t *p = field(obj, "prompt");
    if (!p) return srv_bad(e, "missing_field", "prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) > 0 && !json_is_integer(json_array_get(p, 0))) {
        if (json_array_size(p) > 1)
            return srv_bad(e, "unsupported_value", "prompt",
                           "several prompts in one request are not supported; send one prompt per request");
        p = json_array_get(p, 0);
        if (json_is_array(p)) return parse_token_ids(p, "prompt", r, e);
    } else if (json_is_array(p)) {
        return parse_token_ids(p, "prompt", r, e);
    }
    if (!json_is_string(p)) return wrong_type(e, "prompt", "a string or an array of token ids", p);
    r->prompt_len = json_string_length(p);
    if (r->prompt_len == 0) return srv_bad(e, "invalid_value", "prompt", "'prompt' is empty");
    if (!(r->prompt = dup_n(json_string_value(p), r->prompt_len))) return no_memory(e);
    return 0;
}

/* content: a string, or an array of {"type": "text", "text": ...} parts
 * (joined). OpenAI lets it be absent or null only beside tool_calls or
 * function_call (an assistant's tool call), which this server refuses: so it
 * is required for every role. */
static int message_content(const json_t *c, int index, char **out, srv_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", index);
    if (!c) return srv_bad(e, "missing_field", param, "'%s' is required (a string or text parts)", param);
    if (json_is_string(c)) return (*out = dup_n(json_string_value(c), json_string_length(c))) ? 0 : no_memory(e);
    if (!json_is_array(c)) return wrong_type(e, param, "a string or an array of text parts", c);
    size_t total = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
        json_t *text = json_is_object(part) ? json_object_get(part, "text") : NULL;
        if (!type || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0)
            return srv_bad(e, "unsupported_value", param,
                           "only text content parts are supported ({\"type\": \"text\", \"text\": ...})");
        if (!text || !json_is_string(text)) return srv_bad(e, "invalid_type", param, "a text part needs a string 'text'");
        total += json_string_length(text);
    }
    char *s = malloc(total + 1);
    if (!s) return no_memory(e);
    size_t n = 0;
    json_array_foreach(c, i, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(s + n, json_string_value(text), json_string_length(text));
        n += json_string_length(text);
    }
    s[n] = '\0';
    *out = s;
    return 0;
}

static int parse_messages(const json_t *obj, srv_request *r, srv_error *e) {
    json_t *msgs = field(obj, "messages");
    if (!msgs) return srv_bad(e, "missing_field", "messages", "'messages' is required");
    if (!json_is_array(msgs)) return wrong_type(e, "messages", "an array", msgs);
    size_t n = json_array_size(msgs);
    if (n == 0) return srv_bad(e, "invalid_value", "messages", "'messages' is empty");
    if (n > 4096) return srv_bad(e, "invalid_value", "messages", "too many messages (%zu, at most 4096)", n);
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages) return no_memory(e);
    for (size_t i = 0; i < n; i++) {
        char param[64];
        json_t *m = json_array_get(msgs, i);
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return wrong_type(e, param, "an object", m);
        json_t *role = json_object_get(m, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!role || !json_is_string(role)) return srv_bad(e, "invalid_type", param, "'%s' must be a string", param);
        const char *rs = json_string_value(role);
        if (!strcmp(rs, "developer")) rs = "system"; /* OpenAI's newer name for the system role */
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant"))
            return srv_bad(e, "invalid_value", param, "role '%s' is not supported (system, developer, user, assistant)",
                           rs);
        r->n_messages = (int)i + 1;
        if (!(r->messages[i].role = dup_n(rs, strlen(rs)))) return no_memory(e);
        static const char *const CALLS[] = {"tool_calls", "function_call"};
        for (int k = 0; k < 2; k++)
            if (field(m, CALLS[k])) {
                snprintf(param, sizeof param, "messages[%zu].%s", i, CALLS[k]);
                return srv_bad(e, "unsupported_parameter", param, "%s (tool calling) is not supported by this server",
                               param);
            }
        if (message_content(field(m, "content"), (int)i, &r->messages[i].content, e)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ stop, stream */

static int add_stop(srv_request *r, const json_t *s, srv_error *e) {
    if (!json_is_string(s)) return wrong_type(e, "stop", "a string or an array of strings", s);
    size_t n = json_string_length(s);
    if (n == 0) return srv_bad(e, "invalid_value", "stop", "stop strings must not be empty");
    if (n > SRV_MAX_STOP_LEN)
        return srv_bad(e, "invalid_value", "stop", "stop strings are limited to %d bytes", SRV_MAX_STOP_LEN);
    if (r->n_stop == SRV_MAX_STOP) return srv_bad(e, "invalid_value", "stop", "at most %d stop strings", SRV_MAX_STOP);
    if (!(r->stop[r->n_stop] = dup_n(json_string_value(s), n))) return no_memory(e);
    r->n_stop++;
    return 0;
}

static int parse_stop(const json_t *obj, srv_request *r, srv_error *e) {
    json_t *s = field(obj, "stop");
    if (!s) return 0;
    if (!json_is_array(s)) return add_stop(r, s, e);
    size_t i;
    json_t *item;
    json_array_foreach(s, i, item) if (add_stop(r, item, e)) return -1;
    return 0;
}

static int parse_stream(const json_t *obj, srv_request *r, srv_error *e) {
    if (get_bool(obj, "stream", &r->stream, e)) return -1;
    json_t *so = field(obj, "stream_options");
    if (!so) return 0;
    if (!json_is_object(so)) return wrong_type(e, "stream_options", "an object", so);
    if (!r->stream) return srv_bad(e, "invalid_value", "stream_options", "stream_options needs \"stream\": true");
    json_t *iu = field(so, "include_usage");
    if (iu && !json_is_boolean(iu)) return wrong_type(e, "stream_options.include_usage", "a boolean", iu);
    r->include_usage = iu && json_is_true(iu);
    return 0;
}

/* ------------------------------------------------------------ kv_compression */

static int add_press_opt(srv_request *r, const char *key, const char *value, srv_error *e) {
    if (r->n_press_opts == SRV_MAX_PRESS_OPTS)
        return srv_bad(e, "invalid_value", "kv_compression", "too many kv_compression options (at most %d)",
                       SRV_MAX_PRESS_OPTS);
    srv_press_opt *o = &r->press_opts[r->n_press_opts];
    snprintf(o->key, sizeof o->key, "%s", key);
    if (!(o->value = dup_n(value, strlen(value)))) return no_memory(e);
    r->n_press_opts++;
    return 0;
}

/* protect: "B:E", [B, E], or an array of such pairs */
static int add_protect(srv_request *r, const json_t *v, srv_error *e) {
    char text[64];
    if (json_is_string(v)) return add_press_opt(r, "protect", json_string_value(v), e);
    if (json_is_array(v) && json_array_size(v) == 2 && json_is_integer(json_array_get(v, 0)) &&
        json_is_integer(json_array_get(v, 1))) {
        snprintf(text, sizeof text, "%lld:%lld", (long long)json_integer_value(json_array_get(v, 0)),
                 (long long)json_integer_value(json_array_get(v, 1)));
        return add_press_opt(r, "protect", text, e);
    }
    if (json_is_array(v) && json_array_size(v) > 0) {
        size_t i;
        json_t *span;
        json_array_foreach(v, i, span) {
            if (!json_is_array(span) && !json_is_string(span))
                return wrong_type(e, "kv_compression.protect", "\"B:E\", [B, E] or a list of them", span);
            if (add_protect(r, span, e)) return -1;
        }
        return 0;
    }
    return wrong_type(e, "kv_compression.protect", "\"B:E\", [B, E] or a list of them", v);
}

/* Every key but press and protect_system is a press option, passed as text to
 * pkv_press_cfg_set (which names unknown keys and bad values). */
static int parse_kv_compression(const json_t *obj, srv_request *r, srv_error *e) {
    json_t *kc = field(obj, "kv_compression");
    if (!kc) return 0;
    if (!json_is_object(kc)) return wrong_type(e, "kv_compression", "an object", kc);
    json_t *press = json_object_get(kc, "press");
    if (!press || !json_is_string(press))
        return srv_bad(e, "invalid_type", "kv_compression.press",
                       "kv_compression needs \"press\": a press name (\"none\", \"snapkv\", ...)");
    if (json_string_length(press) == 0 || json_string_length(press) >= sizeof r->press)
        return srv_bad(e, "invalid_value", "kv_compression.press", "unknown press '%s'", json_string_value(press));
    r->has_press = true;
    snprintf(r->press, sizeof r->press, "%s", json_string_value(press));
    const char *key;
    json_t *v;
    json_object_foreach(kc, key, v) {
        char param[96], text[64];
        snprintf(param, sizeof param, "kv_compression.%.60s", key);
        if (!strcmp(key, "press")) continue;
        if (strlen(key) >= sizeof r->press_opts[0].key)
            return srv_bad(e, "invalid_value", "kv_compression", "kv_compression option name too long");
        if (!strcmp(key, "protect_system")) {
            if (!json_is_boolean(v)) return wrong_type(e, param, "a boolean", v);
            r->protect_system = json_is_true(v);
            continue;
        }
        if (!strcmp(key, "protect")) {
            if (add_protect(r, v, e)) return -1;
            continue;
        }
        const char *value = text;
        switch (json_typeof(v)) {
        case JSON_STRING: value = json_string_value(v); break;
        case JSON_INTEGER: snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v)); break;
        case JSON_REAL: snprintf(text, sizeof text, "%.17g", json_real_value(v)); break;
        case JSON_TRUE: value = "true"; break;
        case JSON_FALSE: value = "false"; break;
        default: return wrong_type(e, param, "a string, number or boolean", v);
        }
        if (add_press_opt(r, key, value, e)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ the request */

/* POST /v1/contexts: "text" or "messages", and kv_compression. */
static int parse_context(const json_t *obj, srv_request *r, srv_error *e) {
    json_t *text = field(obj, "text"), *msgs = field(obj, "messages");
    if (!text == !msgs)
        return srv_bad(e, text ? "invalid_value" : "missing_field", text ? "messages" : "text",
                       "a context is made of exactly one of 'text' (a document) or 'messages' (a system and a user "
                       "message)");
    if (text) {
        if (!json_is_string(text)) return wrong_type(e, "text", "a string", text);
        r->prompt_len = json_string_length(text);
        if (r->prompt_len == 0) return srv_bad(e, "invalid_value", "text", "'text' is empty");
        if (!(r->prompt = dup_n(json_string_value(text), r->prompt_len))) return no_memory(e);
    } else if (parse_messages(obj, r, e)) {
        return -1;
    }
    return parse_kv_compression(obj, r, e);
}

static int parse_object(const json_t *obj, srv_endpoint ep, srv_request *r, srv_error *e) {
    if (ep == SRV_CONTEXT) return parse_context(obj, r, e);
    if (refuse_unsupported(obj, e)) return -1;
    json_t *cid = field(obj, "context_id");
    if (cid) {
        if (!json_is_string(cid)) return wrong_type(e, "context_id", "a string", cid);
        if (json_string_length(cid) == 0 || json_string_length(cid) >= sizeof r->context_id)
            return srv_bad(e, "invalid_value", "context_id", "'context_id' must be an id the server gave (ctx-...)");
        for (const char *c = json_string_value(cid); *c; c++)
            if (*c < 0x21 || *c > 0x7e)
                return srv_bad(e, "invalid_value", "context_id", "'context_id' must be an id the server gave (ctx-...)");
        snprintf(r->context_id, sizeof r->context_id, "%s", json_string_value(cid));
    }
    json_t *model = field(obj, "model");
    if (model && !json_is_string(model)) return wrong_type(e, "model", "a string", model);
    if (ep == SRV_COMPLETION ? parse_prompt(obj, r, e) : parse_messages(obj, r, e)) return -1;

    json_int_t n = 0;
    bool given = false;
    const char *max_key = ep == SRV_CHAT && field(obj, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (get_int(obj, max_key, 1, INT32_MAX, &n, &given, e)) return -1;
    r->max_tokens = given ? (int)n : 0;
    if (get_number(obj, "temperature", 0.0, 2.0, &r->temperature, e)) return -1;
    if (get_number(obj, "top_p", 0.0, 1.0, &r->top_p, e)) return -1;
    if (get_number(obj, "min_p", 0.0, 1.0, &r->min_p, e)) return -1;
    n = 0;
    if (get_int(obj, "top_k", 0, INT32_MAX, &n, NULL, e)) return -1;
    r->top_k = (int)n;
    json_int_t seed = 0;
    if (get_int(obj, "seed", INT64_MIN, INT64_MAX, &seed, &r->has_seed, e)) return -1;
    r->seed = (uint64_t)seed;
    if (parse_stop(obj, r, e) || parse_stream(obj, r, e)) return -1;
    if (get_bool(obj, "ignore_eos", &r->ignore_eos, e)) return -1;
    json_t *user = field(obj, "user");
    if (user && !json_is_string(user)) return wrong_type(e, "user", "a string", user);
    return parse_kv_compression(obj, r, e);
}

int srv_request_parse(const char *body, size_t len, srv_endpoint ep, srv_request *r, srv_error *e) {
    memset(r, 0, sizeof *r);
    r->endpoint = ep;
    r->temperature = 1.0;
    r->top_p = 1.0;
    json_error_t jerr;
    json_t *obj = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!obj)
        return srv_bad(e, "invalid_json", NULL, "the body is not valid JSON: %s (line %d, column %d)", jerr.text,
                       jerr.line, jerr.column);
    int rc = 0;
    if (!json_is_object(obj)) rc = srv_bad(e, "invalid_json", NULL, "the body must be a JSON object, got %s",
                                           json_type_name(obj));
    else rc = parse_object(obj, ep, r, e);
    json_decref(obj);
    if (rc) srv_request_free(r);
    return rc;
}
