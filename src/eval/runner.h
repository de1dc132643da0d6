/*
 * Running one item under many presses (docs/evaluation.md §5 "key efficiency
 * trick"): the prompt is prefilled once into a session that keeps the press
 * window's queries; every configuration is then a copy of that cache
 * compressed by its press (pkv_session_copy), and only decoding repeats.
 *
 *   query_agnostic: prefill the context; per config copy + compress, prefill
 *                   question + answer prefix uncompressed, decode.
 *   query_aware:    prefill context + question; per config copy + compress,
 *                   prefill the answer prefix uncompressed, decode.
 * (docs/evaluation.md §0.1: the answer prefix is never compressed; L is the
 * context, or context + question.)
 *
 * Both modes feed the same tokens: the context tokenized with BOS, then the
 * question and the answer prefix, each tokenized on its own without special
 * tokens.
 */
#ifndef PKV_EVAL_RUNNER_H
#define PKV_EVAL_RUNNER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "eval/tasks.h"
#include "promptkv.h"

typedef enum { PKV_EVAL_QUERY_AGNOSTIC = 0, PKV_EVAL_QUERY_AWARE = 1 } pkv_eval_mode;
const char *pkv_eval_mode_name(pkv_eval_mode mode);

/* One press at one budget (or ratio); press "none" is the full cache. */
typedef struct {
    char press[32];     /* the variant's label: the press name, or a name given to press + options */
    char base[32];      /* the registered press it runs */
    int budget;         /* > 0: rows per head per layer */
    double ratio;       /* used when budget == 0 (and press is not none) */
    pkv_press_cfg *cfg; /* owned */
    char label[64];     /* "full", "snapkv/b128", "snapkv/r0.5", "snapkv+pyramid/r0.5" */
    char describe[160]; /* pkv_press_cfg_describe: every option that changes the result */
} pkv_eval_config;

/* Builds a configuration; opts are "key=value" strings applied when the press
 * has that option (common ones like window, or its own like kernel), and
 * press_opts "press.key=value" only to that press. */
int pkv_eval_config_init(pkv_eval_config *c, const char *label, const char *press, int budget, double ratio, const char *const *opts,
                         int n_opts, pkv_error *err);
void pkv_eval_config_free(pkv_eval_config *c);

/* The outcome of one item under one config in one mode. */
typedef struct {
    pkv_eval_mode mode;
    const pkv_eval_config *config;
    char *prediction; /* generated text */
    int n_gen;
    double score; /* the task's metric in [0, 1] */
    int pass;     /* NIAH-classic pass flag; -1 for other tasks */

    int n_context, n_question, n_prefix;    /* tokens of the segments */
    int n_compressible;                     /* L: context (agnostic) or context + question (aware) */
    double kept_rows;                       /* mean rows per head over full-attention layers after the press */
    uint64_t cache_bytes, cache_bytes_full; /* whole model, right after the press */

    int agree_k;          /* steps compared with the full cache (<= --agree-k) */
    double agree_top1;    /* fraction of those steps whose argmax equals the full cache's token */
    double kl;            /* mean KL(full || this) over them, nats */
    int n_ref;            /* tokens of the gold continuation */
    double nll, nll_full; /* mean NLL per token of the gold continuation, teacher-forced */

    int n_needle_tokens; /* answer-bearing token positions in the context (0: none) */
    const int32_t *needle_positions; /* [n_needle_tokens], valid while the result is emitted */
    int n_full_layers, n_heads;
    int full_layers[64]; /* indices of the full-attention layers */
    double *needle_kept; /* [n_full_layers * n_heads] fraction of needle positions kept */

    double prefill_seconds;  /* the shared prefill (0 when shared_prefill) */
    bool shared_prefill;     /* the source held this prefill already: an earlier question of the same context */
    double copy_seconds;     /* copy + compression */
    double press_seconds;    /* the press's selection (within copy) */
    double question_seconds; /* prefill of the uncompressed segments on the compressed cache */
    double decode_seconds;
    int n_decoded;    /* forward steps of the greedy decode */
    bool reused_full; /* nothing was evicted: the full cache's outcome, not decoded again */
} pkv_eval_result;

typedef struct pkv_eval_runner pkv_eval_runner;

typedef struct {
    int n_threads;
    int n_ctx;                   /* context of the sessions (largest length + decode room) */
    pkv_cache_type cache_type_k; /* how the sessions' caches store keys and values (0: f16) */
    pkv_cache_type cache_type_v;
    int keep_window;             /* largest press window among the configs */
    bool attn_sums;              /* some config needs per-row attention sums (h2o) */
    bool query_stats;            /* some config needs pre-RoPE query statistics (expected_attention) */
    int agree_k;                 /* first k generated tokens compared with the full cache; 0: off */
    bool chat;                   /* prompts in the model's chat template (pkv_prompt_parts.chat) */
    volatile sig_atomic_t *stop; /* may be NULL; when set, the item stops with PKV_ERR_INTERRUPTED */
} pkv_eval_runner_opts;

pkv_eval_runner *pkv_eval_runner_new(pkv_model *model, const pkv_eval_runner_opts *opts, pkv_error *err);
void pkv_eval_runner_free(pkv_eval_runner *r);
/* Stops the running item at the next layer boundary (signal safe). */
void pkv_eval_runner_interrupt(pkv_eval_runner *r);

typedef int (*pkv_eval_emit_fn)(void *user, const pkv_eval_result *res, pkv_error *err);

/* Runs item in one mode under configs[0..n) — configs[0] must be the full
 * cache ("none"); it always runs (the agreement metrics need it) but is
 * emitted only if !skip[0]. Configs with skip[i] set are not run. emit is
 * called as each config finishes; a non-zero return stops the item. */
int pkv_eval_run_item(pkv_eval_runner *r, const pkv_eval_task *task, const pkv_eval_item *item, pkv_eval_mode mode,
                      const pkv_eval_config *configs, int n_configs, const bool *skip, pkv_eval_emit_fn emit,
                      void *user, pkv_error *err);

/* Token counter for the length fitting (user = a pkv_eval_tokenizing): the
 * item's prompt tokens exactly as the runner feeds them. */
typedef struct {
    const pkv_model *model;
    bool chat;
} pkv_eval_tokenizing;
int pkv_eval_count_tokens(void *user, const pkv_eval_item *item, pkv_error *err);

/* An item's prompt tokens as the runner feeds them, and the positions of its
 * needle (answer-bearing) tokens among them; *needle is malloc'd. */
int pkv_eval_item_tokens(const pkv_model *model, bool chat, const pkv_eval_item *item, pkv_prompt_tokens *tokens,
                         int32_t **needle, int *n_needle, pkv_error *err);

/* Token positions (in the context's token sequence, BOS included) whose bytes
 * overlap the item's needle spans; *n receives the count. Exposed for tests. */
int pkv_eval_needle_positions(const pkv_model *model, const char *context, const int32_t *tokens, int n_tokens,
                              const pkv_byte_span *spans, int n_spans, int32_t *out, int max, int *n, pkv_error *err);

#endif
