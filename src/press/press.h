/*
 * The press interface (docs/design.md "The press interface").
 *
 * A press is a small struct of parameters plus functions. Per full-attention
 * layer, once the layer has seen the prompt, the framework (press/framework.c)
 * hands it the layer's observation-window queries, the rows of every KV head
 * (post-RoPE keys, values, original positions) and a budget per head; the
 * press scores rows, and the shared selection keeps the window, the protected
 * spans and the best-scored rest. Presses that do not rank single rows (ProtoKV
 * keeps whole clusters) provide their own select().
 *
 * Budget words (docs/evaluation.md 0.3): budget C = rows kept per head per layer,
 * window included; ratio r = fraction removed, keep floor(n_rows * (1 - r)).
 */
#ifndef PKV_PRESS_H
#define PKV_PRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/arena.h"
#include "kernels/ops.h"
#include "press/observer.h"
#include "promptkv.h"

/* What a press sees of one layer. Rows of a head are in ascending position
 * order; the window is the newest `window` rows of every head. */

typedef struct {
    int layer;
    int n_layers;
    /* Rank of this layer among the layers a press runs on (full-attention
     * layers) and their number: the PyramidKV schedule runs over these. When
     * n_press_layers is 0, layer and n_layers are used. */
    int press_layer;
    int n_press_layers;
    int n_head;        /* query heads */
    int n_head_kv;     /* KV heads; query head h reads KV head h / (n_head / n_head_kv) */
    int head_dim_k;
    int head_dim_v;
    float attn_scale;  /* the model's softmax scale on q.k */

    int window;              /* observation window rows (<= every head's n_rows) */
    /* The window queries, post-RoPE, oldest first: head h's start at
     * q_window + h * q_head_rows * head_dim_k, so a press reads the queries a
     * prefill kept in place even when it kept more than the window
     * (pkv_press_query). */
    const float *q_window;
    int q_head_rows;         /* rows from one head's queries to the next (>= window); 0: window */
    const int32_t *q_pos;    /* [window] positions of the window queries */

    const int *n_rows;               /* [n_head_kv] */
    /* [n_head_kv] -> [n_rows][head_dim_k]; read them with pkv_press_keys: a
     * head's pointer is NULL when its keys come from key_source instead */
    const float *const *keys;
    struct pkv_press_key_source *key_source;
    const float *const *values;      /* [n_head_kv] -> [n_rows][head_dim_v], NULL unless the press asks */
    const int32_t *const *pos;       /* [n_head_kv] -> [n_rows] original positions */
    /* Attention accumulated over every query of the prefill, per query head and
     * row, and the number of queries that could see each row; NULL unless the
     * press asks (H2O). */
    const float *const *attn_sum;    /* [n_head] -> [n_rows of its KV head] */
    const int32_t *const *attn_count;/* [n_head_kv] -> [n_rows] */

    /* Pre-RoPE query statistics of the prefill call that wrote the rows
     * (Expected Attention); NULL unless the press asks (needs_query_stats):
     * sums over all q_stats_n queries of the call, and the first q_head_n
     * queries themselves, so that a press can leave out the call's first
     * tokens (its sinks) by subtracting them. */
    int q_stats_n;
    const double *q_sum;      /* [n_head][head_dim_k] */
    const double *q_sq;       /* [n_head][head_dim_k][head_dim_k] sums of q q^T */
    int q_head_n;
    const float *q_head;      /* [q_head_n][n_head][head_dim_k] */
    /* The layer's RoPE, to rotate vectors to future positions (NULL unless
     * needs_query_stats). */
    const pkv_rope_params *rope;
    const float *rope_inv_freq;

    /* Row scores a press asked the engine to compute outside the layer
     * (reconstruction presses: KVzip, docs/design.md "Reconstruction passes"),
     * for every pressed layer: recon_scores[rank][g][j] is row j of KV head g
     * of the press_layer of that rank. NULL for other presses. */
    const float *const *const *recon_scores;

    const pkv_compute *comp;  /* kernels and threads the press may use */
    pkv_arena *arena;         /* scratch for this layer; reset by the framework */
    uint64_t seed;            /* per-press seed mixed with layer and head */
    const pkv_press_observer *observer; /* NULL unless a caller observes the press (set by pkv_press_run) */
} pkv_press_input;

/* Reconstruction presses (KVzip, docs/design.md "Reconstruction passes"):
 * after the prefill the engine makes the model repeat the context, chunk by
 * chunk, appending each pass to the cache and removing it afterwards, and
 * hands the press every full layer's queries of every pass, one batch at a
 * time. The press turns them into a score per context row. */
typedef struct {
    int layer;
    int n_head, n_head_kv, head_dim;
    int n_query;        /* queries of this batch */
    int first_query;    /* index in the pass of the batch's first query */
    const float *q;     /* [n_query][n_head][head_dim], post-RoPE */
    /* Keys per KV head, f32, post-RoPE: n_sink sink rows, then the n_chunk rows
     * of the chunk the pass repeats, then the pass's own rows up to the
     * batch's last query (first_query + n_query of them, causal). */
    int n_sink, n_chunk;
    const float *const *keys;   /* [n_head_kv] -> [n_sink + n_chunk + first_query + n_query][head_dim] */
    float *const *chunk_scores; /* [n_head_kv] -> [n_chunk]: the press's running scores of the chunk rows */
    const pkv_compute *comp;
    pkv_arena *arena;
} pkv_press_recon_batch;

typedef struct {
    /* What the engine feeds: the instruction before the first chunk, the one
     * before every later chunk (followed by the previous chunk's last
     * `overlap` tokens), then the chat template's generation prompt (or a
     * newline without a chat template) and the chunk itself. */
    const char *first_prompt, *next_prompt;
    int overlap;
    int (*chunk_size)(const void *params);
    int (*n_sink)(const void *params);   /* rows before the chunk that the pass's softmax also sees */
    int (*score_batch)(const void *params, const pkv_press_recon_batch *b, pkv_error *err);
} pkv_press_recon_ops;

/* Queries of a call's start that a probe keeps raw for needs_query_stats
 * presses: the most sink tokens such a press can leave out. */
enum { PKV_QUERY_STATS_HEAD = 64 };

typedef struct pkv_press_ops pkv_press_ops;

/* One selection per "selection head": KV heads, or query heads when the press
 * selects per query head (SnapKV granularity query_head). */
typedef struct {
    int n_sel;         /* selection heads */
    bool per_query_head;
    int *budget;       /* [n_sel] rows to keep (window and protected rows included) */
    float **scores;    /* [n_sel] -> [n_rows of its KV head]; higher = keep */
    bool **forced;     /* [n_sel] -> rows that must be kept (window, protected spans) */
    int32_t **keep;    /* [n_sel] -> kept row indices, ascending (output) */
    int *n_keep;       /* [n_sel] (output) */
    /* Reconstruction presses: the budgets of every pressed layer's selection
     * heads summed (a budget shared across layers, KVzip's default). */
    int64_t all_layers_budget;
    void *state;       /* what a press's score() leaves for its select() (arena memory) */
} pkv_press_selection;

/* Options as data: one table per press (and one of the options every press
 * shares, registry.c) from which the registry parses "key=value" strings,
 * lists the help of --help-press and checks the server's kv_compression keys,
 * so the CLI, the evaluation and the server share one vocabulary. */
typedef enum {
    PKV_OPT_CUSTOM = 0, /* parsed by the press's set_option */
    PKV_OPT_INT,        /* int in [lo, hi] */
    PKV_OPT_REAL,       /* double in [lo, hi] (or [lo, hi) with PKV_OPT_BELOW_HI) */
    PKV_OPT_U64,        /* uint64_t, non-negative */
    PKV_OPT_CHOICE,     /* int: the value of the choice named */
    PKV_OPT_SPAN        /* BEGIN:END, added to the protected spans (repeatable) */
} pkv_press_opt_type;

enum { PKV_OPT_ODD = 1, PKV_OPT_BELOW_HI = 2 };

typedef struct {
    const char *name;
    int value;
} pkv_press_choice;

typedef struct {
    const char *key;
    const char *help;
    pkv_press_opt_type type;
    size_t offset;                    /* of the field in the press's parameters (the common ones: pkv_press_cfg) */
    double lo, hi;                    /* PKV_OPT_INT, PKV_OPT_REAL */
    unsigned flags;                   /* PKV_OPT_ODD, PKV_OPT_BELOW_HI */
    const pkv_press_choice *choices;  /* PKV_OPT_CHOICE, ended by a NULL name */
    const char *clears;               /* an option set back to 0 when this one is set (budget and ratio) */
    const char *why;                  /* said when a value is refused: why the range is what it is */
} pkv_press_option;

/* Sets the option o of a table from text into obj (the parameters its
 * offsets index); who names the press in messages. */
int pkv_press_option_set(const pkv_press_option *table, const pkv_press_option *o, void *obj, const char *who,
                         const char *value, pkv_press_cfg *cfg, pkv_error *err);

struct pkv_press_ops {
    const char *name;
    const char *summary;
    const pkv_press_option *options; /* press-specific options, ended by a NULL key */
    size_t params_size;              /* bytes of the press's parameter struct */
    void (*defaults)(void *params);
    /* Options whose type is PKV_OPT_CUSTOM (NULL when the table says all):
     * 0 set, 1 not this press's, -1 refused. */
    int (*set_option)(void *params, const char *key, const char *value, pkv_error *err);
    /* Validates parameters against the common ones (window, budget). */
    int (*check)(const void *params, int window, int budget, pkv_error *err);

    /* What the framework must provide. */
    bool keys_all_heads; /* every head's keys at once (pkv_press_keys reads one head at a time otherwise) */
    bool needs_values;
    bool needs_attn_sum;
    bool needs_query_stats;
    /* Non-NULL: the press scores rows by reconstruction passes the engine
     * runs before pressing any layer. */
    const pkv_press_recon_ops *recon;
    /* The press groups rows into clusters and reports them to an observer. */
    bool reports_clusters;
    /* Rows the press keeps unconditionally at the end of each head (the
     * observation window), given the configured window. */
    int (*forced_window)(const void *params, int window);
    /* Selection per query head instead of per KV head. */
    bool (*per_query_head)(const void *params);

    /* Scores every row of every selection head into sel->scores. */
    int (*score)(const void *params, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err);
    /* Optional: replaces the framework's top-k (after scoring). */
    int (*select)(const void *params, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err);
};

/* The registry (press/registry.c). */
const pkv_press_ops *pkv_press_find(const char *name);
int pkv_press_registry_count(void);
const pkv_press_ops *pkv_press_registry_get(int i);

/* ---------------------------------------------------------------- configuration */

typedef enum { PKV_LAYER_BUDGET_UNIFORM = 0, PKV_LAYER_BUDGET_PYRAMID } pkv_layer_budget;
typedef enum { PKV_HEAD_BUDGET_UNIFORM = 0, PKV_HEAD_BUDGET_ADAPTIVE } pkv_head_budget;

struct pkv_press_cfg {
    const pkv_press_ops *ops; /* NULL: none (full cache) */
    void *params;
    int budget;               /* rows per head per layer, window included; 0 if ratio is used */
    double ratio;             /* fraction removed; used when budget == 0 */
    int window;               /* observation window */
    pkv_mode mode;
    pkv_layer_budget layer_budget;
    double pyramid_beta;
    pkv_head_budget head_budget;
    double adaptive_floor;    /* AdaKV alpha: share of each head's budget that is guaranteed */
    uint64_t seed;
    pkv_span *protect;
    int n_protect;
    pkv_press_observer observer; /* no callbacks: nobody observes */
};

/* ---------------------------------------------------------------- framework */

/* Runs cfg's press on one layer: fills sel (allocated from in->arena) with the
 * rows to keep per selection head. */
int pkv_press_run(const pkv_press_cfg *cfg, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err);

/* Rows cfg's press keeps unconditionally at the end of each head (its
 * observation window, ops->forced_window; 0 for a press without one).
 * press/budget.c, as the two below and pkv_press_cfg_check (promptkv.h). */
int pkv_press_forced_window(const pkv_press_cfg *cfg);

/* Rows to keep for a head of n_rows rows (window included) at press layer
 * `layer` of `n_layers` (budget or ratio, then the layer schedule, docs/presses.md
 * A.13); >= n_rows means keep everything. press/budget.c. */
int pkv_press_layer_budget(const pkv_press_cfg *cfg, int layer, int n_layers, int n_rows);

/* The budget of every selection head of one layer into sel->budget (its
 * n_sel and per_query_head set): 1 when some head must lose rows, 0 when
 * every head keeps all it has, -1 when a head would keep no more than the
 * forced window. pkv_press_run calls it once per layer. */
int pkv_press_head_budgets(const pkv_press_cfg *cfg, const pkv_press_input *in, pkv_press_selection *sel,
                           pkv_error *err);

/* Rows cfg's press keeps of one layer whose KV heads each hold n_rows rows at
 * positions 0..n_rows-1 (a prompt's first prefill), summed over the heads it
 * selects for (query heads for a per-query-head press): the budget code
 * pkv_press_run applies, an upper bound where AdaKV rounds. press/budget.c. */
int64_t pkv_press_layer_rows(const pkv_press_cfg *cfg, int layer, int n_layers, int n_rows, int n_head,
                             int n_head_kv);

/* AdaKV (A.13): shares the layer's free slots (budget minus forced rows, summed
 * over the selection heads) among the heads by their scores of the rows not
 * forced, with a guaranteed floor of alpha; rewrites sel->budget. Needs
 * sel->scores, sel->forced and sel->budget. press/budget.c. */
int pkv_press_adaptive_budgets(double alpha, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err);

/* A row (or a head) ranked by its score; pkv_press_cmp_ranked orders them
 * for qsort: score descending, ties to the lower index, NaN last. */
typedef struct {
    float score;
    int32_t idx;
} pkv_press_ranked;
int pkv_press_cmp_ranked(const void *a, const void *b);

/* The shared top-k: for each selection head, keep the forced rows and the
 * best-scored others (score descending, ties to the lower position) up to the
 * budget; output ascending. */
int pkv_press_topk(const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err);

/* Window query r (0 = the oldest) of query head h: head_dim_k floats. */
static inline const float *pkv_press_query(const pkv_press_input *in, int h, int r) {
    int rows = in->q_head_rows > 0 ? in->q_head_rows : in->window;
    return in->q_window + ((size_t)h * rows + r) * in->head_dim_k;
}

/* Keys a cache holds in f16 or a quantised type, read as f32 one KV head at a
 * time into one buffer (a long prompt's copy of every head would be as large
 * as the layer's rows themselves, docs/compression.md). */
typedef struct pkv_press_key_source {
    void (*read)(void *user, int g, float *dst); /* head g's rows as f32 */
    void *user;
    float *buf;  /* rows of the longest head */
    int loaded;  /* the head in buf; -1: none */
} pkv_press_key_source;

/* Head g's keys as f32 rows. From a key source the pointer stays valid until
 * keys of another head are asked for: a press reads one head at a time, in
 * one thread, unless it sets keys_all_heads. */
static inline const float *pkv_press_keys(const pkv_press_input *in, int g) {
    if (in->keys[g]) return in->keys[g];
    pkv_press_key_source *src = in->key_source;
    if (src->loaded != g) {
        src->read(src->user, g, src->buf);
        src->loaded = g;
    }
    return src->buf;
}

/* The most rows any KV head of the layer holds: the size of a buffer reused head after head. */
static inline int pkv_press_max_rows(const pkv_press_input *in) {
    int n_max = 0;
    for (int g = 0; g < in->n_head_kv; g++)
        if (in->n_rows[g] > n_max) n_max = in->n_rows[g];
    return n_max;
}

/* KV head of a selection head. */
static inline int pkv_sel_kv_head(const pkv_press_input *in, const pkv_press_selection *sel, int s) {
    return sel->per_query_head ? s / (in->n_head / in->n_head_kv) : s;
}

/* ---------------------------------------------------------------- helpers for presses */

/* Adds, for query head h, the softmax attention of window queries
 * [first_query, window) over the rows of its KV head (causal inside the
 * window, fp32, softmax over all visible rows) into out[n_rows]: SnapKV's vote
 * before restricting to the prefix (A.4 S1-S4). scratch holds
 * pkv_press_window_scratch_floats(n_rows, window - first_query) floats (a
 * press scoring head after head reuses one scratch: its size is per head,
 * and a long prompt's rows are many). */
size_t pkv_press_window_scratch_floats(int n_rows, int n_queries);
void pkv_press_window_attention(const pkv_press_input *in, int h, int first_query, float *scratch, float *out);


#endif
