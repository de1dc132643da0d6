/*
 * bench (docs/design.md "Layers"): throughput, decode latency against prompt
 * length, memory. The definitions follow llama-bench so that ratios against
 * llama.cpp are fair (docs/engine.md §6.3):
 *   - prompts are random token ids (the first is BOS when the model adds one);
 *   - prefill ("ppN") computes logits only for the last prompt token and is
 *     timed from the first token to the last;
 *   - decode ("tgN") is N single-token steps with random ids, from an empty
 *     cache, or from a cache prefilled to a depth (untimed, done once and
 *     restored before each repetition, as llama-bench caches its depth state);
 *   - one warmup run precedes the timed repetitions, and the cache is cleared
 *     before each repetition; results are min / median / mean / stddev of the
 *     repetitions' tokens per second.
 * Beyond llama-bench: decode at a depth after a press compressed the prompt,
 * the press's time, cache bytes, peak RSS, the memory bandwidth bound of a
 * decode step, and the longest prompt that fits a memory cap.
 */
#ifndef PKV_BENCH_H
#define PKV_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "promptkv.h"

typedef struct pkv_bench_result pkv_bench_result;

typedef struct {
    int n_threads;          /* <= 0: all CPUs */
    int n_batch;            /* prefill chunk; <= 0: the session default */
    int reps;               /* timed repetitions (>= 1) */
    bool warmup;            /* one untimed run first */
    uint64_t seed;          /* of the random token ids */
    pkv_cache_type cache_type_k; /* how the sessions' caches store keys and values */
    pkv_cache_type cache_type_v;
    pkv_residual_type residual_type; /* how prefills keep their residual stream (pkv_session_opts) */
    const char *residual_spill_dir;  /* and where (pkv_session_opts; NULL: in memory) */
    double mem_bw;          /* bytes/s of memory reads with n_threads (pkv_bench_membw); 0: unknown */
    /* Reads the memory bandwidth now (bytes/s), before each decode
     * repetition and after the last, so that each repetition's roofline
     * fraction uses the readings beside it (pkv_membw_probe_read); may be
     * NULL, then mem_bw is the one reading. */
    int (*read_bw)(void *user, double *bytes_per_s, pkv_error *err);
    void *read_bw_user;
    /* Called with one line of progress (no newline); may be NULL. */
    void (*progress)(void *user, const char *line);
    void *progress_user;
    /* Called with each result as soon as it is complete (long runs keep what
     * they measured even if stopped); may be NULL. */
    void (*on_result)(void *user, const pkv_bench_result *r);
} pkv_bench_opts;

void pkv_bench_opts_default(pkv_bench_opts *opts);
/* The threads a run uses: opts->n_threads, or all CPUs. */
int pkv_bench_n_threads(const pkv_bench_opts *opts);

/* ---------------------------------------------------------------- arithmetic */

typedef struct {
    int n;
    double min, max, median, mean, stddev; /* stddev: sample (n - 1), 0 for n < 2 */
} pkv_bench_stat;

void pkv_bench_stat_of(const double *samples, int n, pkv_bench_stat *out);

/* Bytes a decode step reads from memory besides the cache: every weight
 * tensor once (the output matrix included; token_embd only when it is the
 * tied output matrix, else one row of it). */
uint64_t pkv_bench_weight_bytes_per_token(const pkv_model *model);

/* Fraction of the memory-bandwidth bound a decode step reaches:
 * (bytes_per_token / bytes_per_second) / seconds_per_token. 1 means the step
 * took exactly as long as reading its bytes once at the measured bandwidth;
 * 0 when an input is not positive. */
double pkv_bench_bw_fraction(uint64_t bytes_per_token, double seconds_per_token, double bytes_per_second);

/* Random token ids as llama-bench draws them: uniform in [0, n_vocab), the
 * first one BOS when first_is_bos. state advances. */
/* A session for the benchmark's threads, batch and cache type, sized for n_tokens, keeping what
 * presses run on copies of it need (the observation window, attention sums). */
pkv_session *pkv_bench_session_new(pkv_model *m, const pkv_bench_opts *o, int n_tokens, int keep_window,
                                   bool keep_sums, pkv_error *err);
void pkv_bench_random_tokens(uint64_t *state, int n_vocab, int32_t bos, bool first_is_bos, int32_t *out, int n);

/* ---------------------------------------------------------------- process memory */

/* Resets the peak resident set size (VmHWM) to the current RSS (Linux
 * /proc/self/clear_refs "5"); false where that is not possible, in which
 * case pkv_bench_rss_peak keeps reporting the process's lifetime peak. */
bool pkv_bench_rss_reset(void);
/* Peak resident set size in bytes (VmHWM, or getrusage's ru_maxrss). */
uint64_t pkv_bench_rss_peak(void);
/* Current resident set size in bytes (VmRSS); 0 if unknown. */
uint64_t pkv_bench_rss_now(void);

/* ---------------------------------------------------------------- memory bandwidth */

/* Reads a buffer of buf_bytes (make it much larger than the last-level cache)
 * with n_threads threads, each streaming its own slice, `passes` times after
 * one untouched-page pass; *bytes_per_s gets the best pass. */
int pkv_bench_membw(uint64_t buf_bytes, int n_threads, int passes, double *bytes_per_s, pkv_error *err);

/* The same reading on demand, from a child process that holds its own
 * buffer and threads: the buffer stays out of the benchmark's resident set
 * (peak RSS is measured), and the child sleeps while the benchmark runs.
 * Start it before any thread exists (fork). Each read is one untimed and
 * `passes` timed passes, the best kept. */
typedef struct pkv_membw_probe pkv_membw_probe;
pkv_membw_probe *pkv_membw_probe_start(uint64_t buf_bytes, int n_threads, int passes, pkv_error *err);
int pkv_membw_probe_read(void *probe, double *bytes_per_s, pkv_error *err); /* read_bw's signature */
void pkv_membw_probe_stop(pkv_membw_probe *probe);

/* ---------------------------------------------------------------- runs */

typedef enum { PKV_BENCH_PP, PKV_BENCH_TG, PKV_BENCH_DEPTH, PKV_BENCH_STREAMS } pkv_bench_kind;

struct pkv_bench_result {
    pkv_bench_kind kind;
    char test[48];           /* "pp512", "tg128", "tg32@d16384" */
    char press[128];         /* the press as pkv_press_cfg_describe writes it; "none" */
    int n_prompt;            /* pp: prompt length; depth: the prompt before decoding */
    int n_gen;               /* tg, depth: decode steps timed */
    int n_threads;
    int reps;
    pkv_bench_stat tok_per_s;
    pkv_bench_stat ms_per_token;
    double prefill_seconds;  /* depth: the prompt's prefill (untimed part); pp: median rep */
    double press_seconds;    /* time the press took in that prefill */
    double press_share;      /* press_seconds / the prefill it belongs to */
    bool shared_prefill;     /* depth: one prefill for all presses, compressed copies */
    uint64_t cache_bytes;    /* after the prompt (pp, depth) */
    uint64_t cache_bytes_full;
    uint64_t peak_rss;       /* bytes; 0: not measured */
    uint64_t decode_bytes_per_token; /* tg, depth: weights + cache read per step */
    double bw_fraction;      /* tg, depth: of the bandwidth bound; 0: unknown */
    double mem_bw;           /* tg, depth: the bandwidth (bytes/s) the fraction used; 0: unknown */
    int n_streams;           /* streams: sessions decoding together (t/s: all of them; ms/token: a step) */
    bool batched;            /* streams: one batched step for all, or each stream's own step in turn */
    pkv_bench_stat paired_ratio; /* paired streams: this test's t/s over one stream's, repetition by repetition */
};

/* ppN: prefill tok/s of n_prompt random tokens through press (may be NULL). */
int pkv_bench_prefill(pkv_model *model, const pkv_bench_opts *opts, int n_prompt, const pkv_press_cfg *press,
                      pkv_bench_result *out, pkv_error *err);

/* tgN: decode tok/s of n_gen steps from an empty cache. */
int pkv_bench_decode(pkv_model *model, const pkv_bench_opts *opts, int n_gen, pkv_bench_result *out,
                     pkv_error *err);

/* Decode latency at each depth for each press (NULL or "none": the full
 * cache). out receives n_depths * n_presses results, depth-major.
 *   shared_prefill: the prompt is prefilled once per depth without a press,
 *     and each press compresses a copy (pkv_session_copy, the same selection
 *     as a press inside the prefill); press time is that of the copy and its
 *     share is taken of prefill + press; no peak RSS per press.
 *   otherwise: one prefill per press with the press inside it; peak RSS is
 *     that prefill's. */
int pkv_bench_depths(pkv_model *model, const pkv_bench_opts *opts, const int *depths, int n_depths, int n_gen,
                     const pkv_press_cfg *const *presses, int n_presses, bool shared_prefill, pkv_bench_result *out,
                     pkv_error *err);

/* Concurrent streams: n_seq sessions, each with its own depth-token random
 * prompt compressed by press (may be NULL), then n_gen decode steps of all of
 * them — batched (pkv_batch_decode: the weights read once a step) or one by
 * one (pkv_decode of each in turn, as a server without batching interleaves
 * them). t/s counts every stream's tokens; ms/token is a step, the time
 * between two tokens of one stream; cache bytes are all streams'. */
enum { PKV_BENCH_MAX_STREAMS = 64 };
int pkv_bench_streams(pkv_model *model, const pkv_bench_opts *opts, int n_seq, int depth, int n_gen,
                      const pkv_press_cfg *press, bool batched, pkv_bench_result *out, pkv_error *err);

/* The same n_seq streams batched against stream 1 alone (batched too), the
 * two timed in turns within every repetition (which goes first alternates),
 * so that both meet the same machine: out[0] is the one stream, out[1] the
 * n_seq streams with paired_ratio, their t/s over the one stream's in each
 * repetition. On a host whose memory speed moves between runs, the
 * repetitions' ratios are the fair measure of what batching gains. */
int pkv_bench_streams_paired(pkv_model *model, const pkv_bench_opts *opts, int n_seq, int depth, int n_gen,
                             const pkv_press_cfg *press, pkv_bench_result out[2], pkv_error *err);

/* ---------------------------------------------------------------- memory cap */

enum { PKV_BENCH_MAX_PROBES = 8 };

/* The longest prompt whose prefill fits in a memory cap. The cap covers what
 * a session allocates (KV cache + activations + press scratch, as
 * pkv_session_opts.mem_cap_bytes), not the memory-mapped weights. Peak RSS
 * above the resident baseline is measured for real prefills of the probe
 * lengths, fitted with a + b * n (least squares), and the fit is bisected for
 * the cap. Probe lengths should exceed the press's budget (beyond it the
 * compressed cache stops growing and the fit is linear). */
typedef struct {
    char press[128];
    int n_probes;
    int probe_len[PKV_BENCH_MAX_PROBES];
    uint64_t probe_peak[PKV_BENCH_MAX_PROBES];  /* peak RSS above the baseline */
    uint64_t probe_cache[PKV_BENCH_MAX_PROBES]; /* cache bytes after the prefill */
    double fixed_bytes, bytes_per_token;       /* the fit */
    uint64_t cap;
    int64_t max_tokens;                        /* longest prompt under the cap (by the fit) */
    bool rss_reset;                            /* peak RSS could be reset per probe */
} pkv_bench_memfit;

/* Largest n in [0, n_max] with bytes(n) <= cap for bytes(n) = a + b n
 * (bisection; the fit is monotone). */
int64_t pkv_bench_memfit_solve(double fixed_bytes, double bytes_per_token, uint64_t cap, int64_t n_max);

int pkv_bench_mem_fit(pkv_model *model, const pkv_bench_opts *opts, uint64_t cap, const pkv_press_cfg *press,
                      const int *probe_len, int n_probes, pkv_bench_memfit *out, pkv_error *err);

/* ---------------------------------------------------------------- reports */

/* A markdown table (llama-bench's default output style). */
void pkv_bench_print_table(FILE *out, const pkv_bench_result *r, int n);
/* CSV with a header row; one row per result. */
void pkv_bench_print_csv(FILE *out, const pkv_bench_result *r, int n);
/* Number of columns of the CSV (for tests and readers). */
int pkv_bench_csv_columns(void);
/* SVG plot: decode ms/token (median) against prompt length (log scale), one
 * line per press, from the depth results; returns the number of lines drawn. */
int pkv_bench_write_svg(FILE *out, const pkv_bench_result *r, int n, const char *title);

#endif
