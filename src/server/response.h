/* Response bodies in OpenAI's shapes: errors, completions and chat
 * completions, whole or as server-sent-event chunks. Every function returns a
 * malloc'd NUL-terminated string (NULL when out of memory). Generated text
 * may be any bytes: it is made valid UTF-8 (U+FFFD for bad sequences). */
#ifndef PKV_SERVER_RESPONSE_H
#define PKV_SERVER_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "request.h"

typedef struct {
    srv_endpoint endpoint;
    const char *id;     /* cmpl-... or chatcmpl-... */
    long long created;  /* Unix seconds */
    const char *model;
} srv_resp_meta;

/* usage, with the KV-cache extension fields */
typedef struct {
    int prompt_tokens, completion_tokens;
    int64_t kv_rows, kv_rows_full;     /* cache rows after the prompt, all layers and heads; without compression */
    int64_t kv_bytes, kv_bytes_full;   /* the same in bytes */
    const char *press;                 /* "snapkv budget=64 window=8", "none" */
    int context_tokens;                /* prompt tokens taken from a stored context (0: none) */
    char context_id[40];               /* its id */
} srv_usage;

char *srv_error_body(const srv_error *e);

/* The whole response of a non-streaming request. */
char *srv_response_body(const srv_resp_meta *m, const char *text, size_t len, const char *finish_reason,
                        const srv_usage *u);

/* One "data: {...}\n\n" event of a stream: text (chat: a delta; role first
 * adds the assistant role), finish_reason NULL until the last; include_usage
 * adds "usage": null as OpenAI does. */
char *srv_chunk_event(const srv_resp_meta *m, const char *text, size_t len, bool role_first,
                      const char *finish_reason, bool include_usage);
/* The closing usage event (choices empty) of a stream with include_usage. */
char *srv_usage_event(const srv_resp_meta *m, const srv_usage *u);
/* An error inside a stream that has already started: "data: {"error": ...}\n\n". */
char *srv_error_event(const srv_error *e);

/* A JSON string of arbitrary bytes (made valid UTF-8). */
struct json_t;
struct json_t *srv_json_text(const char *s, size_t len);

#endif
