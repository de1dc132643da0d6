/* An OpenAI-style request body, parsed and type-checked (no model needed):
 * what a completion or chat completion asks for, the sampling parameters and
 * the kv_compression extension. Errors carry the HTTP status and the OpenAI
 * error fields. */
#ifndef PKV_SERVER_REQUEST_H
#define PKV_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* SRV_CONTEXT: POST /v1/contexts (text or messages, kv_compression) */
typedef enum { SRV_COMPLETION = 0, SRV_CHAT, SRV_CONTEXT } srv_endpoint;

/* The body of {"error": {...}}. */
typedef struct {
    int status;       /* HTTP status */
    const char *type; /* invalid_request_error, rate_limit_error, server_error, ... */
    const char *code; /* NULL: null */
    char param[64];   /* "": null */
    char message[512];
} srv_error;

/* Fills e (status, type, code, param may be NULL) and returns -1. */
int srv_fail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* A 400 invalid_request_error about param. */
int srv_bad(srv_error *e, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

enum { SRV_MAX_STOP = 8, SRV_MAX_STOP_LEN = 256, SRV_MAX_PRESS_OPTS = 32 };

typedef struct {
    char *role;    /* system (developer is read as system), user, assistant */
    char *content; /* text parts joined */
} srv_message;

typedef struct {
    char key[64];
    char *value; /* as text, for pkv_press_cfg_set */
} srv_press_opt;

typedef struct {
    srv_endpoint endpoint;
    /* completion: text, or token ids; a context: its text */
    char *prompt;
    size_t prompt_len;
    int32_t *prompt_ids;
    int n_prompt_ids;
    /* chat, or a context made of messages */
    srv_message *messages;
    int n_messages;

    int max_tokens; /* 0: not given */
    double temperature, top_p, min_p;
    int top_k;
    bool has_seed;
    uint64_t seed;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    bool ignore_eos; /* llama-server's and vLLM's extension: generate max_tokens whatever the model emits */
    bool stream, include_usage;

    /* kv_compression: given (else the server's default press) */
    bool has_press;
    char press[64];
    srv_press_opt press_opts[SRV_MAX_PRESS_OPTS];
    int n_press_opts;
    bool protect_system;

    /* context_id: the request continues a stored context (docs/server.md "Stored contexts") */
    char context_id[64];
} srv_request;

/* Parses body[0, len). On error fills e and returns -1; req is then freed.
 * Sampling defaults are OpenAI's (temperature 1, top_p 1). */
int srv_request_parse(const char *body, size_t len, srv_endpoint endpoint, srv_request *req, srv_error *e);
void srv_request_free(srv_request *req);

#endif
