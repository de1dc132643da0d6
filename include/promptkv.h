/*
 * promptkv — a C inference engine for long prompts whose KV cache is compressed
 * once the prompt has been read (SnapKV, ProtoKV and baselines).
 *
 * Public API. Everything returns errors as values: a function that can fail
 * takes a pkv_error * and fills it with a code and a one-line message naming
 * the file, field or limit involved. The library never exits or aborts.
 */
#ifndef PROMPTKV_H
#define PROMPTKV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */

typedef enum {
    PKV_OK = 0,
    PKV_ERR_IO,          /* a file could not be opened, mapped or written */
    PKV_ERR_FORMAT,      /* malformed or hostile input file */
    PKV_ERR_UNSUPPORTED, /* well-formed but not supported (architecture, quant type) */
    PKV_ERR_ARG,         /* a bad argument from the caller */
    PKV_ERR_LIMIT,       /* a limit was exceeded (context length, memory cap) */
    PKV_ERR_NOMEM,       /* an allocation failed */
    PKV_ERR_INTERRUPTED, /* the caller asked to stop */
    PKV_ERR_INTERNAL,
    PKV_ERR_NUMERIC      /* a computation gave no finite number (NaN or infinite logits: a corrupt model) */
} pkv_status;

typedef struct {
    pkv_status code;
    char msg[512];
} pkv_error;

const char *pkv_status_name(pkv_status code);

/* ---------------------------------------------------------------- SIMD */

typedef enum {
    PKV_SIMD_AUTO = 0, /* best the CPU supports */
    PKV_SIMD_SCALAR,   /* portable C reference kernels */
    PKV_SIMD_AVX2,     /* AVX2 + FMA + F16C */
    PKV_SIMD_AVX512    /* AVX-512 F/BW/VL (+ VNNI where present) */
} pkv_simd;

/* The best level this CPU supports. */
pkv_simd pkv_simd_detect(void);
const char *pkv_simd_name(pkv_simd level);

/* ---------------------------------------------------------------- cache types */

/* How the KV cache stores a row of keys or of values (llama.cpp's -ctk/-ctv).
 * Q8_0 and Q4_0 are ggml's blocks of 32 elements with an fp16 scale (34 and
 * 18 bytes): a head size must be a multiple of 32 for them. Keys and values
 * may have different types. */
typedef enum {
    PKV_CACHE_F16 = 0, /* default, as llama.cpp */
    PKV_CACHE_F32,
    PKV_CACHE_Q8_0,
    PKV_CACHE_Q4_0,
    PKV_CACHE_TYPE_COUNT
} pkv_cache_type;

/* "f16", "f32", "q8_0", "q4_0"; "?" for a value outside the enum. */
const char *pkv_cache_type_name(pkv_cache_type type);
/* The type named s (the names above); false when there is none. */
bool pkv_cache_type_parse(const char *s, pkv_cache_type *out);
/* Bytes of one row of n elements in the type; 0 for an unknown type or an n
 * that is not a multiple of the type's block (32 for Q8_0 and Q4_0). */
uint64_t pkv_cache_row_bytes(pkv_cache_type type, int n);

/* How a prefill keeps its residual stream between layers (the stream of
 * every token of a call longer than one chunk: docs/compression.md, "The
 * residual stream of a long prefill"). F32 is the reference; F16 (each
 * token's row scaled by a power of two into f16's range) halves it and Q8_0
 * (ggml's blocks of 32) quarters it, for one rounding per layer. */
typedef enum {
    PKV_RESIDUAL_F32 = 0, /* default */
    PKV_RESIDUAL_F16,
    PKV_RESIDUAL_Q8_0,
    PKV_RESIDUAL_TYPE_COUNT
} pkv_residual_type;

/* "f32", "f16", "q8_0"; "?" outside the enum. */
const char *pkv_residual_type_name(pkv_residual_type type);
/* The type named s; false when there is none. */
bool pkv_residual_type_parse(const char *s, pkv_residual_type *out);

/* ---------------------------------------------------------------- model */

typedef struct pkv_model pkv_model;

typedef struct {
    pkv_simd simd; /* PKV_SIMD_AUTO unless forced (tests, benchmarks) */
    /* NULL: the chat format from tokenizer.chat_template (else the
     * architecture); or a format's name ("chatml", "llama3", "mistral-v7",
     * ...) or a template text to detect it in; unknown fails the load. */
    const char *chat_template;
    /* keep the weights in the file's row layout instead of interleaving the
     * legacy types by 8 rows for the decode kernels (docs/engine.md §2.5):
     * slower decode, the same results within float rounding; for comparisons */
    bool gguf_layout;
} pkv_load_opts;

pkv_model *pkv_model_load(const char *path, const pkv_load_opts *opts, pkv_error *err);
void pkv_model_free(pkv_model *model);

typedef struct {
    const char *arch;      /* general.architecture: "llama", "qwen2", "qwen3", "gemma3", "phi3" */
    const char *name;      /* general.name, or "" */
    int n_vocab;
    int n_ctx_train;
    int n_embd;
    int n_layer;
    int n_ff;
    int n_head;
    int n_head_kv;
    int head_dim;
    int sliding_window;    /* 0 when every layer has full attention */
    int n_swa_layers;      /* layers with sliding-window attention */
    uint64_t n_params;
    uint64_t weight_bytes; /* bytes of all tensors */
    const char *tokenizer; /* "spm" or "bpe" */
    const char *rope_scaling; /* "none", "linear" or "longrope" (long factors when n_ctx > n_ctx_orig) */
    int n_ctx_orig;        /* rope.scaling.original_context_length, else n_ctx_train */
} pkv_model_info;

void pkv_model_get_info(const pkv_model *model, pkv_model_info *info);

/* The architectures (general.architecture values) the engine runs, for
 * i = 0, 1, ...; NULL past the last. */
const char *pkv_supported_arch(int i);

/* The tensors of the file, for inspection (promptkv info). */
typedef struct {
    const char *name;
    const char *type;  /* "Q4_K", "F32", ... */
    int n_dims;
    uint64_t ne[4];
    uint64_t nbytes;
} pkv_tensor_info;

int pkv_model_n_tensors(const pkv_model *model);
void pkv_model_tensor(const pkv_model *model, int i, pkv_tensor_info *info);

/* A metadata value of the file rendered as text (arrays summarised), for
 * inspection; returns false if the key is absent. */
int pkv_model_n_meta(const pkv_model *model);
bool pkv_model_meta(const pkv_model *model, int i, const char **key, char *value, int value_len);

/* Bytes of KV cache one token costs with the full cache (all layers, K and V),
 * keys and values stored in the given types (0 when a head size does not fit
 * a type's blocks). */
uint64_t pkv_model_kv_bytes_per_token(const pkv_model *model, pkv_cache_type type_k, pkv_cache_type type_v);

/* Bytes the full (uncompressed) cache holds after n_tokens: sliding-window
 * layers stop growing at their window. Keys and values only. */
uint64_t pkv_model_kv_bytes_full(const pkv_model *model, int n_tokens, pkv_cache_type type_k, pkv_cache_type type_v);

/* ---------------------------------------------------------------- tokenizer */

/* Tokenize UTF-8 text. add_special: add BOS/EOS as the model's GGUF says.
 * parse_special: recognise control-token text such as "<start_of_turn>".
 * Returns the number of tokens, or -1 on error. If the result would exceed
 * max_tokens, nothing past max_tokens is written and the full count is
 * returned so the caller can retry with a larger buffer. */
int pkv_tokenize(const pkv_model *model, const char *text, size_t text_len, bool add_special,
                 bool parse_special, int32_t *tokens, int max_tokens, pkv_error *err);

/* pkv_tokenize into a buffer it grows, for callers that cannot bound the
 * count (byte fallback gives up to three ids per input byte): appends the
 * ids of the text to *tokens, which holds *n_tokens ids in room for
 * *capacity (NULL, 0, 0 to start; free() it). Returns the number of ids
 * appended, or -1 (the buffer is then unchanged but may have grown). */
int pkv_tokenize_append(const pkv_model *model, const char *text, size_t text_len, bool add_special,
                        bool parse_special, int32_t **tokens, int *n_tokens, int *capacity, pkv_error *err);

/* The bytes a token stands for (byte tokens become their byte, SPM "▁" a
 * space). Returns the length written (not NUL-terminated), or -1 if the token
 * id is out of range. Control tokens give "" unless render_special. */
int pkv_token_to_piece(const pkv_model *model, int32_t token, bool render_special, char *buf,
                       int buf_len);

int32_t pkv_token_bos(const pkv_model *model);
int32_t pkv_token_eos(const pkv_model *model);
/* True when pkv_tokenize with add_special puts BOS first (the GGUF's
 * tokenizer.ggml.add_bos_token, or the tokenizer family's default). */
bool pkv_token_add_bos(const pkv_model *model);
/* True for any end-of-generation token: EOS, end-of-turn, and so on. */
bool pkv_token_is_eog(const pkv_model *model, int32_t token);
int pkv_n_vocab(const pkv_model *model);

/* Chat formatting: render messages as the model's chat template does, with
 * a generation prompt for the assistant. The format (chatml, llama2,
 * llama3, mistral, phi, gemma, deepseek, command-r, ... docs/engine.md §4.7)
 * is the load option's, else detected in tokenizer.chat_template, else
 * chosen by the architecture. The text starts with the BOS text where the family's
 * template does: tokenize it with add_special = false, parse_special = true.
 * Returns the full length (excluding NUL; the buffer holds a truncated copy
 * if it was too small) or -1. system_end (may be NULL) receives the byte
 * offset where the system prompt's rendering ends (0 without one). */
typedef struct {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} pkv_chat_message;

int pkv_chat_format(const pkv_model *model, const pkv_chat_message *messages, int n_messages,
                    char *buf, int buf_len, int *system_end, pkv_error *err);

/* True when the file carries tokenizer.chat_template (an instruct model:
 * front ends apply the chat format by default). */
bool pkv_model_has_chat_template(const pkv_model *model);
/* The chat format's name ("chatml", "llama3", ...; "none"). */
const char *pkv_model_chat_format(const pkv_model *model);

/* ---------------------------------------------------------------- prompts */

/* A prompt in the segments the compression protocol distinguishes (kvpress's
 * pipeline): the context is compressed in every mode, the question only in
 * query-aware mode, the answer prefix never. With chat set, the model's chat
 * template renders [system,] user = context + question and the assistant's
 * generation prompt; the template's text after the question (end of turn,
 * assistant header) goes with the answer prefix. A template that trims the
 * user's content (Gemma, Llama 3, Command R) trims the context's start and
 * the question's end here too (Llama 2 chat's first turn: the end only). */
typedef struct {
    const char *system;        /* NULL: none (chat only; a template with a default one, as Qwen's, renders it) */
    const char *context;
    const char *question;      /* NULL or "": none */
    const char *answer_prefix; /* NULL or "": none */
    bool chat;
    /* Chat only, instead of system, context and question: a whole
     * conversation. Its last user message is the question; everything
     * rendered before it is context (its own text empty), everything after
     * it goes with the answer prefix. */
    const pkv_chat_message *messages;
    int n_messages;
    /* The user's texts may name control tokens ("<|im_end|>" becomes that
     * token), as llama.cpp reads a raw prompt; unset, they stay text. The
     * template's own text always names them. */
    bool parse_special;
} pkv_prompt_parts;

/* The tokens of a prompt and where its segments end: [0, system_end) the
 * system prompt's rendering (to protect it), [context_begin, context_end)
 * the context's own text, [context_end, question_end) the question, the rest
 * the template's tail and the answer prefix. Each segment is tokenized on its
 * own (template text with special tokens, the user's text without). */
typedef struct {
    int32_t *tokens;
    int n_tokens;
    int system_end;
    int context_begin, context_end;
    int question_end;
} pkv_prompt_tokens;

int pkv_prompt_tokenize(const pkv_model *model, const pkv_prompt_parts *parts, pkv_prompt_tokens *out,
                        pkv_error *err);
void pkv_prompt_tokens_free(pkv_prompt_tokens *tokens);

/* ---------------------------------------------------------------- compression */

/* A token range [begin, end) that no press may evict. */
typedef struct {
    int begin;
    int end;
} pkv_span;

/* Which press to apply after the prompt, and with which budget. A NULL
 * pkv_press_cfg, or press == NULL / "none", keeps the full cache. The press
 * registry (press/registry.c) defines the names and their options. */
typedef struct pkv_press_cfg pkv_press_cfg;

/* A press by name ("none", "snapkv", "protokv", "streamingllm", "h2o", "tova", "knorm",
 * "random", ...); NULL and an error for an unknown name. */
pkv_press_cfg *pkv_press_cfg_new(const char *press, pkv_error *err);
void pkv_press_cfg_free(pkv_press_cfg *cfg);
const char *pkv_press_cfg_name(const pkv_press_cfg *cfg);

/* Sets one option from text: the common ones (budget, ratio, window, mode,
 * layer_budget, head_budget, seed, protect=BEGIN:END) or the press's own
 * (e.g. snapkv kernel, pool, granularity, group_agg). */
int pkv_press_cfg_set(pkv_press_cfg *cfg, const char *key, const char *value, pkv_error *err);
int pkv_press_cfg_add_protect(pkv_press_cfg *cfg, int begin, int end, pkv_error *err);
/* Checks the options fit together (a budget or ratio is given, budget >
 * window, ...). pkv_prefill checks too. */
int pkv_press_cfg_check(const pkv_press_cfg *cfg, pkv_error *err);
/* "snapkv budget=1024 window=32" */
int pkv_press_cfg_describe(const pkv_press_cfg *cfg, char *buf, int len);

/* When the press runs on a request's prompt (pkv_request.mode). */
typedef enum {
    PKV_MODE_QUERY_AWARE = 0, /* on the context and the question */
    PKV_MODE_QUERY_AGNOSTIC,  /* on the context alone; the question is fed after it, uncompressed */
    PKV_MODE_RECOMPRESS       /* as query-aware, and again on every later prefill of the session */
} pkv_mode;

/* The press's "mode" option (query_aware when NULL). */
pkv_mode pkv_press_cfg_mode(const pkv_press_cfg *cfg);

/* False for "none" (and NULL): the full cache is kept. */
bool pkv_press_cfg_compresses(const pkv_press_cfg *cfg);
/* The observation window, and whether the press reads attention sums: what a
 * session must keep (keep_press_window, keep_attn_sums) for pkv_session_copy
 * to run this press on a copy. 0 and false for "none". */
int pkv_press_cfg_window(const pkv_press_cfg *cfg);
bool pkv_press_cfg_needs_attn_sums(const pkv_press_cfg *cfg);
bool pkv_press_cfg_needs_query_stats(const pkv_press_cfg *cfg); /* keep_query_stats */

/* The registry, for help texts: i = 0, 1, ... until false. */
bool pkv_press_list(int i, const char **name, const char **summary);
/* True for a press that feeds the context through the model again after the
 * prefill (kvzip: about twice a prefill's work). */
bool pkv_press_reconstructs(const char *press);
/* Options of a press (the common ones first); press may be NULL. */
bool pkv_press_option_list(const char *press, int i, const char **key, const char **help);

/* ---------------------------------------------------------------- session */

typedef struct pkv_session pkv_session;

typedef struct {
    int n_threads;            /* <= 0: number of online CPUs */
    int n_ctx;                /* <= 0: the model's training context */
    int n_batch;              /* prefill chunk (tokens per forward); <= 0: 512 */
    pkv_cache_type cache_type_k; /* how the cache stores keys (default f16) */
    pkv_cache_type cache_type_v; /* and values */
    uint64_t mem_cap_bytes;   /* 0: no cap; else KV cache + activations may not exceed it (PKV_ERR_LIMIT) */
    pkv_residual_type residual_type; /* a long prefill's residual stream between layers (default f32) */
    /* NULL: that stream stays in memory. A directory on disk: a prefill longer
     * than n_batch keeps it there between layers, in an unnamed file read and
     * written once a layer (in residual_type; f32 gives the same bits as in
     * memory), so memory no longer grows by n_embd values a prompt token
     * (docs/compression.md "The residual stream on disk"). The session keeps
     * its own copy of the name. */
    const char *residual_spill_dir;
    /* One prefill, many presses (docs/evaluation.md §5): keep, for every
     * full-attention layer, the queries of the last keep_press_window tokens of
     * each prefill (and per-row attention sums for h2o), so pkv_session_copy
     * can compress a copy of the cache with any press afterwards. */
    int keep_press_window;
    bool keep_attn_sums;
    bool keep_query_stats;    /* and pre-RoPE query statistics (expected_attention) */
    /* Called after every chunk of every layer of a forward pass (a prefill
     * chunk of one layer is the engine's smallest unit of work): a server
     * lets a waiting batched decode step run there, so that running streams
     * stall for one chunk at most while a long prompt is read
     * (docs/server.md "Batching"). NULL: nothing. */
    void (*between_chunks)(void *user);
    void *between_chunks_user;
} pkv_session_opts;

void pkv_session_opts_default(pkv_session_opts *opts);

pkv_session *pkv_session_new(pkv_model *model, const pkv_session_opts *opts, pkv_error *err);
void pkv_session_free(pkv_session *session);

/* Forget everything: the next prefill starts at position 0. */
void pkv_session_reset(pkv_session *session);

const pkv_model *pkv_session_model(const pkv_session *session);

typedef struct {
    int n_prompt;              /* tokens prefilled */
    double prefill_seconds;    /* forward passes over the prompt, press included */
    double press_seconds;      /* time spent selecting rows to keep (and compacting the cache) */
    bool compressed;           /* a press ran */
    uint64_t cache_bytes_full; /* what the cache would hold without compression */
    uint64_t cache_bytes;      /* what it holds now */
} pkv_prefill_stats;

/* Append tokens to the sequence (the prompt, or a later turn) and run them
 * through the model. Afterwards pkv_logits() gives the logits of the last
 * token. press may be NULL. */
int pkv_prefill(pkv_session *session, const int32_t *tokens, int n_tokens,
                const pkv_press_cfg *press, pkv_prefill_stats *stats, pkv_error *err);

/* Copies src's state (cache, logical position, logits) into dst, a session of
 * the same model whose own state is discarded, and, if press is not NULL or
 * "none", compresses dst's full-attention layers exactly as if the press had
 * run at the end of src's last prefill. src's last call must have been a
 * pkv_prefill without a press, in a session with keep_press_window >= the
 * press's window (and keep_attn_sums for h2o). */
int pkv_session_copy(pkv_session *dst, const pkv_session *src, const pkv_press_cfg *press,
                     pkv_prefill_stats *stats, pkv_error *err);

/* One token through the model; logits of it are then at pkv_logits(). */
int pkv_decode(pkv_session *session, int32_t token, pkv_error *err);

/* Batched decode: one step for several sessions of one model at once, the
 * weights read once for all of them (docs/design.md "Batched decode"). Each
 * session takes its own token at its own position and attends over its own
 * cache (its own press and budget); afterwards each is as pkv_decode would
 * leave it, logits bit for bit. A refused step (a session broken,
 * out of context, a token outside the vocabulary, a session given twice)
 * changes none of them, and so does a session with an interrupt pending
 * (the step is short: interrupts are honoured between steps, so that one
 * session's does not stop the others); a failure midway (out of memory, a
 * memory cap) leaves every session of the step to be reset. The batch holds
 * the step's buffers and threads (n_threads as pkv_session_opts'). */
typedef struct pkv_batch pkv_batch;
pkv_batch *pkv_batch_new(pkv_model *model, int n_threads, pkv_error *err);
void pkv_batch_free(pkv_batch *batch);
int pkv_batch_decode(pkv_batch *batch, pkv_session *const *sessions, const int32_t *tokens, int n, pkv_error *err);

/* Runs tokens through the model like pkv_prefill (no press) and passes the
 * logits of every one of them, in order, to fn (perplexity, scoring). */
typedef void (*pkv_logits_fn)(void *user, int index, const float *logits);
int pkv_eval(pkv_session *session, const int32_t *tokens, int n_tokens, pkv_logits_fn fn, void *user,
             pkv_error *err);

/* Logits of the last token processed (n_vocab floats), owned by the session. */
const float *pkv_logits(const pkv_session *session);

/* Logical length: positions consumed so far (drives RoPE for the next token). */
int pkv_session_n_pos(const pkv_session *session);
/* The session's context length: positions it can hold. */
int pkv_session_n_ctx(const pkv_session *session);

/* Bytes of KV cache currently held (keys, values and positions). */
uint64_t pkv_session_cache_bytes(const pkv_session *session);

/* Bytes the session has allocated: KV cache capacity plus activations and
 * scratch; what mem_cap_bytes limits. */
uint64_t pkv_session_mem_bytes(const pkv_session *session);
/* The most pkv_session_mem_bytes has been during prefills (at layer ends). */
uint64_t pkv_session_peak_mem_bytes(const pkv_session *session);

/* What the cache holds: layers, heads per layer (KV heads, or query heads
 * after a per-query-head press), rows of a head and their original positions
 * (ascending). pkv_session_positions copies up to max and returns the count. */
int pkv_session_n_layers(const pkv_session *session);
bool pkv_session_layer_is_full(const pkv_session *session, int layer);
int pkv_session_n_heads(const pkv_session *session, int layer);
int pkv_session_head_rows(const pkv_session *session, int layer, int head);
int pkv_session_positions(const pkv_session *session, int layer, int head, int32_t *out, int max);

/* Ask a running prefill/decode to stop at the next layer boundary (safe from
 * a signal handler). The call in progress returns PKV_ERR_INTERRUPTED. */
void pkv_session_interrupt(pkv_session *session);
/* An interrupt is pending (set since the last reset). */
bool pkv_session_interrupted(const pkv_session *session);

/* ---------------------------------------------------------------- saved caches */

/* A session's state (its cache, compressed or not; its tokens, logical
 * length and last logits) saved to a file and loaded back
 * (docs/cache-file.md). The file records a fingerprint of the model file and
 * is refused by any other model; a truncated or altered file is refused with
 * a one-line error. */

/* The tokens the session has read, pkv_session_n_pos of them (owned by it). */
const int32_t *pkv_session_tokens(const pkv_session *session, int *n_tokens);

/* CRC-64 of the model file's bytes and its size: computed at the first call
 * (which reads the whole file), then remembered. */
uint64_t pkv_model_fingerprint(const pkv_model *model);

/* Writes the session's state to path (beside it first, then renamed, so a
 * reader never sees half a file). press: the press and options that made the
 * cache as text ("snapkv budget=256 mode=query_agnostic"; NULL: "none");
 * label: any text the caller keeps with it (NULL: none); each at most 4096
 * bytes, no control characters. */
int pkv_session_save(const pkv_session *session, const char *path, const char *press, const char *label,
                     pkv_error *err);

typedef struct {
    int n_tokens;         /* the session's n_pos after the load */
    int64_t rows;         /* cache rows over all layers and heads */
    uint64_t cache_bytes; /* their keys, values and positions */
    uint64_t file_bytes;
    char press[4097];
    char label[4097];
} pkv_saved_cache_info;

/* Replaces the session's state with a saved one: the file must come from
 * this model file, with this session's cache type and at most its context
 * length of tokens. Later prefills and decodes continue it. On an error the
 * session is reset. info may be NULL. */
int pkv_session_load(pkv_session *session, const char *path, pkv_saved_cache_info *info, pkv_error *err);

/* ---------------------------------------------------------------- sampling */

typedef struct {
    float temperature; /* 0: greedy */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off */
    uint64_t seed;
} pkv_sampler_params;

void pkv_sampler_params_default(pkv_sampler_params *params);

typedef struct pkv_sampler pkv_sampler;

pkv_sampler *pkv_sampler_new(const pkv_sampler_params *params, int n_vocab);
void pkv_sampler_free(pkv_sampler *sampler);
/* The next token from n_vocab logits. Total over non-finite values: NaN is
 * never chosen (it ranks below every number), -inf has probability 0, and
 * +inf logits, when present, share all the probability. A step without one
 * finite logit returns -1 with PKV_ERR_NUMERIC, "non-finite logits at step
 * N" (N counts the tokens this sampler has drawn, from 0). */
int32_t pkv_sample(pkv_sampler *sampler, const float *logits, pkv_error *err);

/* The greedy choice under the sampler's total order (NaN below every number,
 * then -inf < finite < +inf; ties: the lower id), or -1 when no logit is
 * finite (a step with nothing to choose from: NaN and infinities only). */
int32_t pkv_logits_argmax(const float *logits, int n);

/* ---------------------------------------------------------------- requests */

/* A request: a prompt, how to compress it and how to generate from it. The
 * protocol (prompt assembly, the prefill the mode asks for, the decode loop
 * with sampling, stop strings, end of generation and streaming) is run by
 * the library; promptkv run, serve and eval are callers of it. */

typedef enum {
    PKV_FINISH_NONE = 0,   /* not finished */
    PKV_FINISH_END,        /* an end-of-generation token */
    PKV_FINISH_STOP,       /* a stop string, or the end of the first line (stop_at_newline) */
    PKV_FINISH_LENGTH,     /* max_tokens generated */
    PKV_FINISH_CONTEXT,    /* the session's context is full (the reason is in err) */
    PKV_FINISH_CALLER      /* the token callback asked to stop */
} pkv_finish;

/* One step of a generation, for the callback. A token event carries the
 * sampled token and the logits it was sampled from; the generation's last
 * event has done set (it is the last token's own event, or one with token
 * -1 when the generation ended between tokens). text is what may be shown
 * now: the generated text is cut before a stop string, and bytes that could
 * still begin one, or that end in a cut UTF-8 character, wait for the next
 * event (the last event releases everything). */
typedef struct {
    int index;            /* 0, 1, ... over token events */
    int32_t token;        /* -1: no token */
    const float *logits;  /* NULL without a token */
    bool end_of_generation;
    const char *text;     /* not NUL-terminated; valid during the call */
    size_t text_len;
    bool done;
    pkv_finish finish;    /* with done */
} pkv_token_event;

/* Returns false to stop the generation (PKV_FINISH_CALLER). */
typedef bool (*pkv_token_fn)(void *user, const pkv_token_event *event);

typedef struct pkv_request_stats pkv_request_stats;
/* Called by pkv_request_run once the whole prompt is in the cache, before
 * the first token is sampled; stats holds the prefill's fields. */
typedef void (*pkv_prefilled_fn)(void *user, const pkv_request_stats *stats);

typedef struct {
    /* The prompt: its parts (pkv_prompt_parts), or token ids when tokens is
     * not NULL (then compressed whole, whatever the mode). */
    pkv_prompt_parts prompt;
    const int32_t *tokens;
    int n_tokens;

    const pkv_press_cfg *press; /* NULL or "none": the full cache */
    pkv_mode mode;
    /* Query-aware mode: the press runs on the context and the question, and
     * the template's tail (end of turn, assistant header) and the answer
     * prefix are fed after it (kvpress's protocol); with press_whole_prompt
     * on every token of the prompt (SnapKV's code compresses the prompt as a
     * whole). */
    bool press_whole_prompt;
    bool protect_system;        /* chat: the system prompt's rendering is kept whole */

    pkv_sampler_params sampling;
    int max_tokens;             /* tokens to generate at most (the first is always generated) */
    const char *const *stop;    /* stop strings: the text ends before the first that appears */
    int n_stop;
    bool stop_at_newline;       /* stop at the first newline once the text has more than spaces */
    bool ignore_eos;            /* end-of-generation tokens are ordinary tokens */
    pkv_token_fn on_token;      /* may be NULL */
    pkv_prefilled_fn on_prefilled; /* may be NULL */
    void *user;                 /* for on_token and on_prefilled */
} pkv_request;

/* Query-aware, greedy, 128 tokens, nothing else set. */
void pkv_request_init(pkv_request *req);

/* A request's prompt as the library feeds it. */
typedef struct {
    pkv_prompt_tokens prompt; /* tokens and segments (token ids: one context segment) */
    int n_compressed;         /* tokens [0, n_compressed) are prefilled with the press, the rest after it */
    int n_protected;          /* protect_system: the system prompt's tokens, [0, n_protected) */
} pkv_request_prompt;

int pkv_request_tokenize(const pkv_model *model, const pkv_request *req, pkv_request_prompt *out, pkv_error *err);
void pkv_request_prompt_free(pkv_request_prompt *prompt);

/* The prompt of a request that continues a state holding the n_state
 * tokens of a context (a saved cache loaded, a stored context): the state's
 * tokens, then what follows the context's text in the request's prompt — its
 * own context text when it has one (more of the document), the question, the
 * chat template's tail, the answer prefix — or the request's token ids as
 * they are. n_compressed is n_state: the state is taken as it is (prefill
 * the rest with pkv_request_prefill_rest). A conversation (messages) is
 * refused: it cannot follow a context. */
int pkv_request_tokenize_continuation(const pkv_model *model, const pkv_request *req, const int32_t *state,
                                      int n_state, pkv_request_prompt *out, pkv_error *err);

/* What the cache will hold, from the same budget code the press runs
 * (layer and head schedules, the observation window, protected rows). */
typedef struct {
    int64_t rows_kept;      /* rows of the full-attention layers (all heads) once the prompt is read */
    int64_t rows_full;      /* the same without compression */
    uint64_t row_bytes;     /* bytes of one row of one head: key, value, position */
    /* The most the cache holds at any moment of the request: during the
     * prefill (the layers pressed so far, the current one whole) or at the
     * end (max_tokens generated); sliding-window layers at their window plus
     * a prefill chunk. What to admit a request against. */
    uint64_t bytes_peak;
} pkv_cache_estimate;

int pkv_request_estimate(const pkv_model *model, const pkv_request *req, const pkv_request_prompt *prompt,
                         const pkv_session_opts *opts, pkv_cache_estimate *out, pkv_error *err);

struct pkv_request_stats {
    int n_prompt;
    int n_compressed;
    pkv_prefill_stats press;  /* the part prefilled (or copied) with the press */
    double rest_seconds;      /* prefill of the tokens fed after the press */
    int n_generated;          /* tokens generated, an end-of-generation token not counted */
    int n_decoded;            /* of them, run through the model */
    double decode_seconds;
    pkv_finish finish;
    bool prefilled;           /* the whole prompt is in the cache: a failure came in the generation */
};

/* Runs a request on a session from its current state (empty, or earlier
 * turns: the press then runs only in recompress mode): tokenize (unless
 * prompt, pkv_request_tokenize's result for this request, is given),
 * prefill as the mode says, generate. err holds the reason of a
 * PKV_FINISH_CONTEXT too. */
int pkv_request_run(pkv_session *session, const pkv_request *req, const pkv_request_prompt *prompt,
                    pkv_request_stats *stats, pkv_error *err);

/* What pkv_request_run_from does before generating: tokenize (unless
 * prompt is given), prefill as the mode says (from: as below), set
 * stats->prefilled and call req->on_prefilled. The caller then generates
 * (pkv_generation_new on the session, stepped alone or with others). */
int pkv_request_prefill_all(pkv_session *session, const pkv_request *req, const pkv_request_prompt *prompt,
                            const pkv_session *from, pkv_request_stats *stats, pkv_error *err);

/* pkv_request_run starting from another session's state (a stored context:
 * pkv_request_prefill_compressed's from, below) whose tokens the prompt
 * begins with (n_compressed = from's length: pkv_request_tokenize_continuation,
 * or a prompt found to begin with them); from is only read, so several
 * sessions may start from it at once. */
int pkv_request_run_from(pkv_session *session, const pkv_request *req, const pkv_request_prompt *prompt,
                         const pkv_session *from, pkv_request_stats *stats, pkv_error *err);

/* The phases of pkv_request_run, for callers that reuse a state. The
 * compressed part: prefilled with the press, or, when from is not NULL,
 * taken from it: from holds that part already, prefilled without a press and
 * keeping the press's window (one prefill, many presses), or compressed
 * before (a stored context; press NULL then), and session becomes its copy,
 * pressed. */
int pkv_request_prefill_compressed(pkv_session *session, const pkv_request *req, const pkv_request_prompt *prompt,
                                   const pkv_session *from, pkv_request_stats *stats, pkv_error *err);
/* The rest of the prompt, fed after the press. */
int pkv_request_prefill_rest(pkv_session *session, const pkv_request_prompt *prompt, pkv_request_stats *stats,
                             pkv_error *err);

/* Generation from a session's logits, one token per step. Several
 * generations (on different sessions) are stepped together: a later batched
 * decode steps them in one forward pass. */
typedef struct pkv_generation pkv_generation;

pkv_generation *pkv_generation_new(pkv_session *session, const pkv_request *req, pkv_error *err);
void pkv_generation_free(pkv_generation *gen);
/* One token for each unfinished generation of gens[0, n): sample, call back,
 * run the token through the model unless that ended it. Returns how many are
 * still running, or -1 when one failed (err; it is finished, the others are
 * stepped). */
int pkv_generation_step(pkv_generation *const *gens, int n, pkv_error *err);
/* The same step with the tokens of every generation that goes on run through
 * the model together (pkv_batch_decode: the weights read once); a generation
 * whose context is full ends as alone (PKV_FINISH_CONTEXT). A failure of the
 * batched step fails every generation in it. batch NULL: pkv_generation_step. */
int pkv_generation_step_batched(pkv_batch *batch, pkv_generation *const *gens, int n, pkv_error *err);
bool pkv_generation_done(const pkv_generation *gen);
/* The generated text so far (cut before a stop string). */
const char *pkv_generation_text(const pkv_generation *gen, size_t *len);
/* Fills the generation fields of stats (n_generated, n_decoded, decode_seconds, finish). */
void pkv_generation_stats(const pkv_generation *gen, pkv_request_stats *stats);
/* Copies s[0, len) to out (capacity 3 * len + 1 suffices), replacing every
 * invalid or incomplete UTF-8 sequence with U+FFFD (for outputs that must be
 * valid UTF-8, such as JSON); NUL-terminates; returns the length written. */
size_t pkv_utf8_repair(const char *s, size_t len, char *out);

/* Runs a generation to its end. */
int pkv_generate(pkv_session *session, const pkv_request *req, pkv_request_stats *stats, pkv_error *err);

#ifdef __cplusplus
}
#endif

#endif /* PROMPTKV_H */
