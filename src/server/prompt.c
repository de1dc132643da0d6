#include "prompt.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

void srv_prepared_free(srv_prepared *p) {
    free(p->tokens);
    pkv_press_cfg_free(p->press);
    memset(p, 0, sizeof *p);
}

uint64_t srv_row_bytes(const pkv_model *model, int elem_bytes) {
    pkv_model_info info;
    pkv_model_get_info(model, &info);
    uint64_t kv = pkv_model_kv_bytes_per_token(model, elem_bytes) / ((uint64_t)info.n_layer * info.n_head_kv);
    return kv + sizeof(int32_t);
}

static int no_memory(srv_error *e) { return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }

/* ------------------------------------------------------------ tokens */

typedef struct {
    int32_t *ids;
    int n, cap;
} token_buf;

/* Appends the tokens of text[0, len). */
static int append_text(const pkv_model *m, token_buf *b, const char *text, size_t len, bool add_special,
                       srv_error *e) {
    if (len > (size_t)1 << 30) return srv_bad(e, "context_length_exceeded", NULL, "the prompt is too long");
    pkv_error err;
    if (pkv_tokenize_append(m, text, len, add_special, true, &b->ids, &b->n, &b->cap, &err) >= 0) return 0;
    if (err.code == PKV_ERR_NOMEM) return no_memory(e);
    if (err.code == PKV_ERR_LIMIT) return srv_bad(e, "context_length_exceeded", NULL, "%s", err.msg);
    return srv_bad(e, "invalid_value", NULL, "cannot tokenize the prompt: %s", err.msg);
}

/* ------------------------------------------------------------ chat */

static int render_chat(const pkv_model *m, const srv_request *r, char **out, int *len, int *system_end, srv_error *e) {
    pkv_chat_message *msgs = malloc((size_t)r->n_messages * sizeof *msgs);
    if (!msgs) return no_memory(e);
    size_t cap = 4096;
    for (int i = 0; i < r->n_messages; i++) {
        msgs[i] = (pkv_chat_message){r->messages[i].role, r->messages[i].content};
        cap += strlen(r->messages[i].content) + 64;
    }
    int rc = -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (cap > (size_t)1 << 30) {
            srv_bad(e, "context_length_exceeded", "messages", "the conversation is too long");
            break;
        }
        char *buf = malloc(cap);
        if (!buf) {
            no_memory(e);
            break;
        }
        pkv_error err;
        int n = pkv_chat_format(m, msgs, r->n_messages, buf, (int)cap, system_end, &err);
        if (n < 0) {
            free(buf);
            srv_bad(e, "invalid_value", "messages", "%s", err.msg);
            break;
        }
        if ((size_t)n < cap) {
            *out = buf;
            *len = n;
            rc = 0;
            break;
        }
        free(buf);
        cap = (size_t)n + 1;
    }
    free(msgs);
    return rc;
}

/* Where the last user message's text starts in the rendering (its last
 * occurrence, trimmed as templates trim), or -1. */
static long last_user_start(const srv_request *r, const char *rendered, int len) {
    for (int i = r->n_messages - 1; i >= 0; i--) {
        if (strcmp(r->messages[i].role, "user") != 0) continue;
        const char *c = r->messages[i].content;
        size_t cl = strlen(c);
        while (cl && isspace((unsigned char)c[cl - 1])) cl--;
        while (cl && isspace((unsigned char)*c)) c++, cl--;
        if (cl == 0 || cl > (size_t)len) return -1;
        for (size_t p = (size_t)len - cl + 1; p-- > 0;)
            if (!memcmp(rendered + p, c, cl)) return (long)p;
        return -1;
    }
    return -1;
}

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
    if (p->n_system > 0 && pkv_press_cfg_add_protect(p->press, 0, p->n_system, &err))
        return srv_bad(e, "invalid_value", "kv_compression.protect_system", "%s", err.msg);
    if (pkv_press_cfg_check(p->press, &err)) return srv_bad(e, "invalid_value", "kv_compression", "%s", err.msg);
    p->compress = strcmp(pkv_press_cfg_name(p->press), "none") != 0;
    pkv_press_cfg_describe(p->press, p->press_desc, sizeof p->press_desc);
    return 0;
}

/* Rows a pressed layer keeps of L prompt rows per head (the registry's
 * budget words: budget C includes the window; ratio r keeps floor(L(1-r))),
 * plus the protected rows, which a press keeps on top when it must. */
static uint64_t kept_rows(const press_choice *pc, int L, int n_protected) {
    long budget = 0;
    double ratio = 0.0;
    for (int i = 0; i < pc->n; i++) {
        if (!strcmp(pc->keys[i], "budget")) budget = strtol(pc->values[i], NULL, 10), ratio = 0.0;
        if (!strcmp(pc->keys[i], "ratio")) ratio = strtod(pc->values[i], NULL), budget = 0;
    }
    uint64_t keep = budget > 0 ? (uint64_t)budget : (uint64_t)((double)L * (1.0 - ratio));
    if (keep < 1) keep = 1;
    keep += (uint64_t)n_protected;
    return keep < (uint64_t)L ? keep : (uint64_t)L;
}

/* The most KV-cache bytes the request can hold at any moment. Sliding-window
 * layers hold their window (trimmed lazily: at most twice the window plus one
 * prefill chunk). Full-attention layers without a press hold every row; with
 * one, the peak is either during the prefill (the layers already pressed at
 * their budget, the current one with the whole context: compression runs one
 * layer at a time) or at the end (every layer at its budget, plus the
 * question fed after the press and the completion). */
static uint64_t estimate_cache_bytes(const pkv_model *m, const srv_limits *lim, const press_choice *pc,
                                     const srv_prepared *p) {
    pkv_model_info info;
    pkv_model_get_info(m, &info);
    uint64_t row = srv_row_bytes(m, lim->elem_bytes);
    uint64_t total_rows = (uint64_t)p->n_tokens + (uint64_t)p->max_tokens;
    uint64_t swa_rows = 2 * (uint64_t)info.sliding_window + (uint64_t)lim->n_batch;
    if (swa_rows > total_rows) swa_rows = total_rows;
    uint64_t n_full = (uint64_t)(info.n_layer - info.n_swa_layers);
    uint64_t swa_bytes = (uint64_t)info.n_swa_layers * info.n_head_kv * swa_rows * row;
    if (!p->compress || n_full == 0) return swa_bytes + n_full * info.n_head_kv * total_rows * row;
    const char *gran = option(pc, "granularity");
    uint64_t heads = gran && !strcmp(gran, "query_head") ? (uint64_t)info.n_head : (uint64_t)info.n_head_kv;
    uint64_t kept = kept_rows(pc, p->n_first, p->n_system);
    uint64_t during = (n_full - 1) * heads * kept + (uint64_t)info.n_head_kv * (uint64_t)p->n_first;
    uint64_t after = n_full * heads * (kept + total_rows - (uint64_t)p->n_first);
    return swa_bytes + (during > after ? during : after) * row;
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

/* ------------------------------------------------------------ the request */

static int tokenize_completion(const pkv_model *m, const srv_request *r, token_buf *b, srv_error *e) {
    if (!r->prompt_ids) return append_text(m, b, r->prompt, r->prompt_len, true, e);
    int n_vocab = pkv_n_vocab(m);
    for (int i = 0; i < r->n_prompt_ids; i++)
        if (r->prompt_ids[i] >= n_vocab)
            return srv_bad(e, "invalid_value", "prompt", "token id %d at index %d is outside the vocabulary [0, %d)",
                           r->prompt_ids[i], i, n_vocab);
    b->ids = malloc((size_t)r->n_prompt_ids * sizeof *b->ids);
    if (!b->ids) return no_memory(e);
    memcpy(b->ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof *b->ids);
    b->n = b->cap = r->n_prompt_ids;
    return 0;
}

/* The chat prompt: the system part counted (to protect it), and split before
 * the last user message when the context is compressed without the question. */
static int tokenize_chat(const pkv_model *m, const srv_request *r, const press_choice *pc, bool agnostic,
                         token_buf *b, int *n_first, int *n_system, srv_error *e) {
    char *text = NULL;
    int len = 0, system_end = 0;
    if (render_chat(m, r, &text, &len, &system_end, e)) return -1;
    int rc = -1;
    if (pc->protect_system) {
        if (system_end <= 0 && pc->from_request) {
            srv_bad(e, "invalid_value", "kv_compression.protect_system",
                    "protect_system needs a system message first in 'messages'");
            goto out;
        }
        if (system_end > 0) {
            if (append_text(m, b, text, (size_t)system_end, false, e)) goto out;
            *n_system = b->n;
            b->n = 0; /* counted only: the whole text is tokenized below, as `promptkv run` does */
        }
    }
    long split = agnostic ? last_user_start(r, text, len) : -1;
    if (agnostic && split < 0 && pc->from_request) {
        srv_bad(e, "invalid_value", "kv_compression.mode",
                "query_agnostic needs a non-empty user message: the last one is the question fed after compression");
        goto out;
    }
    if (split < 0) split = len;
    /* the template's text starts with the BOS text: no special tokens added */
    if (append_text(m, b, text, (size_t)split, false, e)) goto out;
    *n_first = b->n;
    if (append_text(m, b, text + split, (size_t)(len - split), false, e)) goto out;
    rc = 0;
out:
    free(text);
    return rc;
}

static int check_lengths(const srv_limits *lim, const srv_request *r, srv_prepared *p, srv_error *e) {
    const char *param = r->endpoint == SRV_CHAT ? "messages" : "prompt";
    if (p->n_tokens == 0) return srv_bad(e, "invalid_value", param, "the prompt has no tokens");
    if (p->n_tokens >= lim->n_ctx)
        return srv_bad(e, "context_length_exceeded", param,
                       "the prompt has %d tokens; this server's context is %d tokens (prompt + completion)",
                       p->n_tokens, lim->n_ctx);
    if (r->max_tokens > lim->max_tokens)
        return srv_bad(e, "max_tokens_exceeded", "max_tokens",
                       "max_tokens %d is more than this server allows (%d)", r->max_tokens, lim->max_tokens);
    if (r->max_tokens > 0 && p->n_tokens + r->max_tokens > lim->n_ctx)
        return srv_bad(e, "context_length_exceeded", "max_tokens",
                       "the context is %d tokens, but %d were requested (%d in the prompt, %d in the completion)",
                       lim->n_ctx, p->n_tokens + r->max_tokens, p->n_tokens, r->max_tokens);
    int room = lim->n_ctx - p->n_tokens;
    int dflt = r->endpoint == SRV_CHAT ? lim->max_tokens : lim->default_max_tokens;
    p->max_tokens = r->max_tokens > 0 ? r->max_tokens : (dflt < room ? dflt : room);
    return 0;
}

int srv_prepare(const pkv_model *m, const srv_limits *lim, const srv_request *r, srv_prepared *p, srv_error *e) {
    memset(p, 0, sizeof *p);
    press_choice pc;
    if (r->has_press) {
        /* the request's kv_compression replaces the server's press entirely */
        pc = (press_choice){.name = r->press, .n = r->n_press_opts, .from_request = true,
                            .protect_system = r->protect_system};
    } else {
        pc = (press_choice){lim->press.press, lim->press.keys, lim->press.values, lim->press.n_opts, false,
                            lim->press.protect_system};
    }
    const char *keys[SRV_MAX_PRESS_OPTS], *values[SRV_MAX_PRESS_OPTS];
    if (r->has_press) {
        for (int i = 0; i < r->n_press_opts; i++) {
            keys[i] = r->press_opts[i].key;
            values[i] = r->press_opts[i].value;
        }
        pc.keys = keys;
        pc.values = values;
    }
    if (r->protect_system && r->endpoint != SRV_CHAT)
        return srv_bad(e, "invalid_value", "kv_compression.protect_system",
                       "protect_system applies to chat completions (a system message)");
    const char *mode = option(&pc, "mode");
    bool agnostic = mode && !strcmp(mode, "query_agnostic");
    if (agnostic && r->endpoint != SRV_CHAT && pc.from_request)
        return srv_bad(e, "invalid_value", "kv_compression.mode",
                       "query_agnostic applies to chat completions: the last user message is the question");

    token_buf b = {0};
    int n_first = 0, n_system = 0, rc;
    if (r->endpoint == SRV_CHAT) rc = tokenize_chat(m, r, &pc, agnostic, &b, &n_first, &n_system, e);
    else rc = tokenize_completion(m, r, &b, e), n_first = b.n;
    p->tokens = b.ids;
    p->n_tokens = b.n;
    p->n_first = n_first > 0 ? n_first : b.n;
    p->n_system = n_system;
    if (rc || check_lengths(lim, r, p, e) || build_press(&pc, p, e)) {
        srv_prepared_free(p);
        return -1;
    }
    sampling_params(r, &p->sampling);
    p->cache_bytes_max = estimate_cache_bytes(m, lim, &pc, p);
    return 0;
}
