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
    pkv_cache_type cache_type_k; /* how the slots' caches store keys and values */
    pkv_cache_type cache_type_v;
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
    char press_text[512];       /* the press and every option given ("tova ratio=0.5") */
    uint64_t cache_bytes_max;   /* the engine's estimate of the most KV cache the request can reach */
    uint64_t row_bytes;         /* one cache row of one head: key, value, position */
    bool store;                 /* POST /v1/contexts: prefill and press the context, generate nothing */
    bool chat;                  /* a chat prompt (a context made of messages, a chat request) */
    int n_from;                 /* tokens taken from a stored context (0: none) */
    uint64_t store_bytes_min;   /* a context request: the least its stored cache will hold (full layers' rows) */
} srv_prepared;

int srv_prepare(const pkv_model *model, const srv_limits *lim, const srv_request *req, srv_prepared *out,
                srv_error *e);

/* The press of a context without kv_compression: query-agnostic by nature
 * (the context is pressed before any question exists), TOVA at ratio 0.5,
 * the strongest press with the question excluded in docs/results.md. */
extern const char *const SRV_CONTEXT_PRESS;
extern const char *const SRV_CONTEXT_PRESS_KEYS[];
extern const char *const SRV_CONTEXT_PRESS_VALUES[];
enum { SRV_CONTEXT_PRESS_OPTS = 1 };

/* POST /v1/contexts: the context's tokens (a text with BOS, or the chat
 * template's head, a system message and the user's text, up to where a
 * question would follow) pressed whole; store is set, nothing is generated. */
int srv_prepare_context(const pkv_model *model, const srv_limits *lim, const srv_request *req, srv_prepared *out,
                        srv_error *e);

/* A completion or chat request naming a stored context of n_state tokens
 * (state; made for chat or not, holding state_bytes of cache, pressed with
 * press_desc): the request's prompt appended to them, no press run again. A
 * chat request is one user message, the question. */
int srv_prepare_continuation(const pkv_model *model, const srv_limits *lim, const srv_request *req,
                             const int32_t *state, int n_state, bool chat, uint64_t state_bytes, const char *press_desc,
                             srv_prepared *out, srv_error *e);

/* A prepared request whose prompt begins with a stored context's n_state
 * tokens starts from that context instead (automatic reuse): the press is
 * not run, the rest of the prompt is fed after the context. -1 (out of
 * memory): p is unchanged. */
int srv_prepared_reuse(const pkv_model *model, const srv_limits *lim, srv_prepared *p, int n_state,
                       uint64_t state_bytes, const char *press_desc);
void srv_prepared_free(srv_prepared *p);

#endif
