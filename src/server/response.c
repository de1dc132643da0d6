#include "response.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "promptkv.h"

json_t *srv_json_text(const char *s, size_t len) {
    if (len > ((size_t)1 << 30)) return NULL;
    char *clean = malloc(3 * len + 1);
    if (!clean) return NULL;
    size_t n = pkv_utf8_repair(s, len, clean);
    json_t *j = json_stringn_nocheck(clean, n);
    free(clean);
    return j;
}

/* json_dumps with compact separators; takes the reference to obj. */
static char *dump(json_t *obj) {
    if (!obj) return NULL;
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return s;
}

static char *sse(char *json) {
    if (!json) return NULL;
    size_t n = strlen(json);
    char *ev = malloc(n + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, json, n);
        memcpy(ev + 6 + n, "\n\n", 3);
    }
    free(json);
    return ev;
}

static json_t *error_object(const srv_error *e) {
    return json_pack("{s:{s:o, s:s, s:o, s:o}}", "error",
                     "message", srv_json_text(e->message, strlen(e->message)),
                     "type", e->type ? e->type : "server_error",
                     "param", e->param[0] ? srv_json_text(e->param, strlen(e->param)) : json_null(),
                     "code", e->code ? json_string(e->code) : json_null());
}

char *srv_error_body(const srv_error *e) { return dump(error_object(e)); }

char *srv_error_event(const srv_error *e) { return sse(dump(error_object(e))); }

static json_t *usage_object(const srv_usage *u) {
    const char *press = u->press ? u->press : "none";
    json_t *obj = json_pack("{s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:o}", "prompt_tokens", u->prompt_tokens,
                            "completion_tokens", u->completion_tokens, "total_tokens",
                            u->prompt_tokens + u->completion_tokens, "kv_cache_rows", (json_int_t)u->kv_rows,
                            "kv_cache_rows_full", (json_int_t)u->kv_rows_full, "kv_cache_bytes", (json_int_t)u->kv_bytes,
                            "kv_cache_bytes_full", (json_int_t)u->kv_bytes_full, "kv_press",
                            srv_json_text(press, strlen(press)));
    if (obj && u->context_tokens > 0) {
        /* the prompt started from a stored context (docs/server.md "Stored contexts") */
        json_object_set_new(obj, "kv_context_id", json_string(u->context_id));
        json_object_set_new(obj, "kv_context_tokens", json_integer(u->context_tokens));
    }
    return obj;
}

static json_t *envelope(const srv_resp_meta *m, const char *object, json_t *choices) {
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", m->id, "object", object, "created", (json_int_t)m->created,
                     "model", m->model, "choices", choices);
}

static json_t *finish(const char *reason) { return reason ? json_string(reason) : json_null(); }

char *srv_response_body(const srv_resp_meta *m, const char *text, size_t len, const char *finish_reason,
                        const srv_usage *u) {
    json_t *choice;
    if (m->endpoint == SRV_CHAT)
        choice = json_pack("{s:i, s:{s:s, s:o}, s:n, s:o}", "index", 0, "message", "role", "assistant", "content",
                           srv_json_text(text, len), "logprobs", "finish_reason", finish(finish_reason));
    else
        choice = json_pack("{s:o, s:i, s:n, s:o}", "text", srv_json_text(text, len), "index", 0, "logprobs",
                           "finish_reason", finish(finish_reason));
    json_t *obj = envelope(m, m->endpoint == SRV_CHAT ? "chat.completion" : "text_completion", json_pack("[o]", choice));
    if (obj) json_object_set_new(obj, "usage", usage_object(u));
    return dump(obj);
}

char *srv_chunk_event(const srv_resp_meta *m, const char *text, size_t len, bool role_first, const char *finish_reason,
                      bool include_usage) {
    json_t *choice;
    if (m->endpoint == SRV_CHAT) {
        json_t *delta = json_object();
        if (role_first) json_object_set_new(delta, "role", json_string("assistant"));
        if (len > 0 || role_first) json_object_set_new(delta, "content", srv_json_text(text, len));
        choice = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "delta", delta, "logprobs", "finish_reason",
                           finish(finish_reason));
    } else {
        choice = json_pack("{s:o, s:i, s:n, s:o}", "text", srv_json_text(text, len), "index", 0, "logprobs",
                           "finish_reason", finish(finish_reason));
    }
    json_t *obj = envelope(m, m->endpoint == SRV_CHAT ? "chat.completion.chunk" : "text_completion",
                           json_pack("[o]", choice));
    if (obj && include_usage) json_object_set_new(obj, "usage", json_null());
    return sse(dump(obj));
}

char *srv_usage_event(const srv_resp_meta *m, const srv_usage *u) {
    json_t *obj = envelope(m, m->endpoint == SRV_CHAT ? "chat.completion.chunk" : "text_completion", json_array());
    if (obj) json_object_set_new(obj, "usage", usage_object(u));
    return sse(dump(obj));
}
