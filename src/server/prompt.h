/* From a parsed request to what a slot runs: the prompt's tokens (chat
 * template applied), the press configured from kv_compression or the server's
 * default, the sampling parameters, the number of tokens to generate, and
 * the KV-cache bytes the request may need at most (for admission). */
#ifndef PKV_SERVER_PROMPT_H
#define PKV_SERVER_PROMPT_H

#include "promptkv.h"
#include "request.h"

/* The server's press when a request has no kv_compression (the serve command's flags). */
typedef struct {
    const char *press;               /* NULL or "none": no compression */
    const char *const *keys;         /* option keys as pkv_press_cfg_set takes them */
    const char *const *values;
    int n_opts;
    bool protect_system;             /* chat requests with a system message protect it */
} srv_press_default;

typedef struct {
    int n_ctx;                   /* tokens of context per slot (prompt + completion) */
    int max_tokens;              /* the most a request may ask to generate */
    int default_max_tokens;      /* completions without max_tokens (chat: up to the context) */
    int elem_bytes;              /* 2 (f16 cache) or 4 (f32) */
    int n_batch;                 /* prefill chunk of the slots' sessions */
    srv_press_default press;
} srv_limits;

typedef struct {
    int32_t *tokens;
    int n_tokens;
    int n_first;              /* tokens prefilled with the press; the rest after it (query_agnostic) */
    int n_system;             /* tokens of the protected system prompt (0: none) */
    pkv_press_cfg *press;     /* never NULL ("none" when not compressing) */
    bool compress;            /* the press is not "none" */
    char press_desc[160];
    int max_tokens;
    pkv_sampler_params sampling;
    uint64_t cache_bytes_max; /* upper estimate of the KV cache this request can reach */
} srv_prepared;

int srv_prepare(const pkv_model *model, const srv_limits *lim, const srv_request *req, srv_prepared *out,
                srv_error *e);
void srv_prepared_free(srv_prepared *p);

/* Bytes one cache row of one head costs: keys, values and its position. */
uint64_t srv_row_bytes(const pkv_model *model, int elem_bytes);

#endif
