/* From a parsed request to what a slot runs: an engine request (the prompt
 * or the conversation, the press configured from kv_compression or the
 * server's default, the sampling parameters, the stop strings, the number of
 * tokens to generate), its tokens, and the KV-cache bytes it may need at most
 * (for admission). */
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
    /* The request as the engine runs it (pkv_request_run): its text
     * and stop strings point into the srv_request, which must outlive it. */
    pkv_request req;
    pkv_chat_message *messages; /* owned: the conversation req.prompt points at */
    pkv_request_prompt prompt;  /* the tokens and where the press runs */
    pkv_press_cfg *press;       /* owned, req.press; never NULL ("none" when not compressing) */
    bool compress;              /* the press is not "none" */
    char press_desc[160];
    uint64_t cache_bytes_max;   /* the engine's estimate of the most KV cache the request can reach */
    uint64_t row_bytes;         /* one cache row of one head: key, value, position */
} srv_prepared;

int srv_prepare(const pkv_model *model, const srv_limits *lim, const srv_request *req, srv_prepared *out,
                srv_error *e);
void srv_prepared_free(srv_prepared *p);

#endif
