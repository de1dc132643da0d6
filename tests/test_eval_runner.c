/*
 * The evaluation on tiny fixture models: the compression invariants of
 * docs/evaluation.md §5.1 through the one-prefill-many-presses path the harness
 * uses (pkv_session_copy), the needle positions, the agreement and NLL
 * metrics against direct recomputation, a sweep that is stopped and resumed,
 * and the summary on hand-made result lines.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/json.h"
#include "eval/report.h"
#include "eval/runner.h"
#include "eval/sweep.h"
#include "eval/tasks.h"
#include "test.h"

#define TINY_LLAMA FIXTURE("models/tiny-llama-f32.gguf")
#define TINY_GEMMA FIXTURE("models/tiny-gemma3-f32.gguf")

static pkv_model *load(const char *path) {
    pkv_error err;
    pkv_model *m = pkv_model_load(path, NULL, &err);
    if (!m) fprintf(stdout, "    %s: %s\n", path, err.msg);
    return m;
}

static pkv_session *session(pkv_model *m, int keep_window, bool attn_sums) {
    pkv_session_opts o;
    pkv_session_opts_default(&o);
    o.n_threads = 1;
    o.n_ctx = 1024;
    o.keep_press_window = keep_window;
    o.keep_attn_sums = attn_sums;
    pkv_error err;
    return pkv_session_new(m, &o, &err);
}

/* deterministic pseudo-random prompt of ordinary tokens */
static void prompt_tokens(const pkv_model *m, int32_t *t, int n, unsigned seed) {
    int32_t bos = pkv_token_bos(m);
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = 300 + (int32_t)((seed >> 8) % 200);
    }
    if (bos >= 0) t[0] = bos;
}

static pkv_press_cfg *press(const char *name, const char *key, const char *value, int window) {
    pkv_error err;
    pkv_press_cfg *c = pkv_press_cfg_new(name, &err);
    char w[16];
    snprintf(w, sizeof w, "%d", window);
    if (c && (pkv_press_cfg_set(c, key, value, &err) || pkv_press_cfg_set(c, "window", w, &err))) {
        fprintf(stdout, "    %s: %s\n", name, err.msg);
        pkv_press_cfg_free(c);
        return NULL;
    }
    return c;
}

/* kept positions of (layer, head), n returned */
static int positions(const pkv_session *s, int l, int h, int32_t *out) {
    return pkv_session_positions(s, l, h, out, 1024);
}

static bool same_logits(const pkv_session *a, const pkv_session *b, int n_vocab) {
    return !memcmp(pkv_logits(a), pkv_logits(b), (size_t)n_vocab * sizeof(float));
}

/* §5.1 item 3, on both fixture families: copy + compress from one prefill. */
static void check_invariants(const char *path) {
    pkv_model *m = load(path);
    REQUIRE(m);
    const int L = 101, W = 8;
    int32_t toks[128];
    prompt_tokens(m, toks, L, 7);
    pkv_session *src = session(m, W, true), *a = session(m, 0, false), *b = session(m, 0, false);
    REQUIRE(src && a && b);
    pkv_error err;
    REQUIRE(pkv_prefill(src, toks, L, NULL, NULL, &err) == 0);
    int n_vocab = pkv_n_vocab(m), n_layers = pkv_session_n_layers(src);
    int32_t pos[1024];

    /* B >= L: nothing is evicted and logits of a decode step match the full cache bit for bit */
    pkv_press_cfg *big = press("snapkv", "budget", "500", W);
    REQUIRE(big);
    REQUIRE(pkv_session_copy(a, src, NULL, NULL, &err) == 0);
    REQUIRE(pkv_session_copy(b, src, big, NULL, &err) == 0);
    CHECK(same_logits(a, b, n_vocab));
    REQUIRE(pkv_decode(a, 333, &err) == 0 && pkv_decode(b, 333, &err) == 0);
    CHECK(same_logits(a, b, n_vocab));

    /* B = L after compression keeps original positions: the next step matches too */
    pkv_press_cfg *exact = press("snapkv", "budget", "101", W);
    REQUIRE(pkv_session_copy(a, src, NULL, NULL, &err) == 0);
    REQUIRE(pkv_session_copy(b, src, exact, NULL, &err) == 0);
    REQUIRE(pkv_decode(a, 401, &err) == 0 && pkv_decode(b, 401, &err) == 0);
    CHECK(same_logits(a, b, n_vocab));
    CHECK_EQ_INT(pkv_session_n_pos(b), L + 1);

    /* B < L, every press: min(B, L) rows, the window kept, unique ascending, deterministic */
    const char *presses[] = {"snapkv", "streamingllm", "h2o", "tova", "knorm", "random"};
    for (size_t p = 0; p < sizeof presses / sizeof presses[0]; p++) {
        pkv_press_cfg *c = press(presses[p], "budget", "40", W);
        REQUIRE(c);
        REQUIRE_MSG(pkv_session_copy(a, src, c, NULL, &err) == 0, "%s: %s", presses[p], err.msg);
        REQUIRE(pkv_session_copy(b, src, c, NULL, &err) == 0);
        for (int l = 0; l < n_layers; l++) {
            for (int h = 0; h < pkv_session_n_heads(a, l); h++) {
                int n = positions(a, l, h, pos);
                if (!pkv_session_layer_is_full(a, l)) {
                    /* sliding-window layers are not compressed: they hold their window */
                    CHECK(n == pkv_session_head_rows(src, l, h));
                    continue;
                }
                CHECK_MSG(n == 40, "%s layer %d head %d: %d rows", presses[p], l, h, n);
                for (int i = 1; i < n; i++) CHECK(pos[i - 1] < pos[i]);
                /* presses with an observation window (SnapKV; StreamingLLM's recent rows) keep all of it */
                int window_kept = 0;
                for (int i = 0; i < n; i++) window_kept += pos[i] >= L - W;
                if (!strcmp(presses[p], "snapkv") || !strcmp(presses[p], "streamingllm"))
                    CHECK_MSG(window_kept == W, "%s: %d of the %d window rows kept", presses[p], window_kept, W);
                int32_t again[1024];
                int n2 = positions(b, l, h, again);
                CHECK(n2 == n && !memcmp(pos, again, (size_t)n * sizeof *pos));
            }
        }
        pkv_press_cfg_free(c);
    }

    /* ratio: kvpress keeps floor(L * (1 - r)) */
    const double ratios[] = {0.5, 0.75, 0.875};
    for (int r = 0; r < 3; r++) {
        char v[16];
        snprintf(v, sizeof v, "%g", ratios[r]);
        pkv_press_cfg *c = press("snapkv", "ratio", v, 4);
        REQUIRE(c);
        REQUIRE(pkv_session_copy(a, src, c, NULL, &err) == 0);
        for (int l = 0; l < n_layers; l++)
            if (pkv_session_layer_is_full(a, l))
                for (int h = 0; h < pkv_session_n_heads(a, l); h++)
                    CHECK_EQ_INT(pkv_session_head_rows(a, l, h), (int)floor(L * (1.0 - ratios[r])));
        pkv_press_cfg_free(c);
    }
    pkv_press_cfg_free(big);
    pkv_press_cfg_free(exact);
    pkv_session_free(src);
    pkv_session_free(a);
    pkv_session_free(b);
    pkv_model_free(m);
}

TEST(eval_compression_invariants_llama) { check_invariants(TINY_LLAMA); }
TEST(eval_compression_invariants_gemma3) { check_invariants(TINY_GEMMA); }

/* The efficiency trick is only valid if copy + compress equals a prefill with the press. */
TEST(eval_copy_matches_prefill_with_press) {
    pkv_model *m = load(TINY_LLAMA);
    REQUIRE(m);
    const int L = 90, W = 8;
    int32_t toks[128];
    prompt_tokens(m, toks, L, 11);
    pkv_session *src = session(m, W, true), *a = session(m, 0, false), *b = session(m, 0, false);
    REQUIRE(src && a && b);
    pkv_error err;
    REQUIRE(pkv_prefill(src, toks, L, NULL, NULL, &err) == 0);
    const char *presses[] = {"snapkv", "streamingllm", "h2o", "tova", "knorm", "random"};
    for (size_t p = 0; p < sizeof presses / sizeof presses[0]; p++) {
        pkv_press_cfg *c = press(presses[p], "budget", "30", W);
        REQUIRE(c);
        REQUIRE(pkv_session_copy(a, src, c, NULL, &err) == 0);
        pkv_session_reset(b);
        REQUIRE(pkv_prefill(b, toks, L, c, NULL, &err) == 0);
        int32_t pa[1024], pb[1024];
        for (int l = 0; l < pkv_session_n_layers(a); l++)
            for (int h = 0; h < pkv_session_n_heads(a, l); h++) {
                int na = positions(a, l, h, pa), nb = positions(b, l, h, pb);
                CHECK_MSG(na == nb && !memcmp(pa, pb, (size_t)na * sizeof *pa), "%s layer %d head %d: kept sets differ",
                          presses[p], l, h);
            }
        /* and they continue the same way */
        REQUIRE(pkv_decode(a, 350, &err) == 0 && pkv_decode(b, 350, &err) == 0);
        const float *la = pkv_logits(a), *lb = pkv_logits(b);
        double diff = 0;
        for (int i = 0; i < pkv_n_vocab(m); i++) diff = fmax(diff, fabs(la[i] - lb[i]));
        CHECK_MSG(diff < 1e-4, "%s: logits differ by %g", presses[p], diff);
        pkv_press_cfg_free(c);
    }
    pkv_session_free(src);
    pkv_session_free(a);
    pkv_session_free(b);
    pkv_model_free(m);
}

/* The tokens at the needle positions spell the gold value, with and without an SPM space prefix. */
static void check_needle_positions(const char *path) {
    pkv_model *m = load(path);
    REQUIRE(m);
    pkv_eval_spec spec = {pkv_eval_task_find("niah_multivalue"), 2048, 0, 0, 0, 0};
    pkv_eval_item it;
    pkv_error err;
    REQUIRE(pkv_eval_build(&spec, 120, 0, &it, &err) == 0);
    size_t len = strlen(it.context);
    int32_t *t = malloc((len + 16) * sizeof *t), pos[256];
    REQUIRE(t);
    int n = pkv_tokenize(m, it.context, len, true, false, t, (int)len + 16, &err);
    REQUIRE(n > 0);
    int n_pos;
    REQUIRE(pkv_eval_needle_positions(m, it.context, t, n, it.needles, it.n_needles, pos, 256, &n_pos, &err) == 0);
    REQUIRE(n_pos > 0);
    char text[1024] = "";
    size_t tl = 0;
    for (int i = 0; i < n_pos; i++) {
        CHECK(i == 0 || pos[i] > pos[i - 1]);
        char piece[64];
        int pl = pkv_token_to_piece(m, t[pos[i]], false, piece, sizeof piece);
        if (pl > 0 && tl + (size_t)pl < sizeof text - 1) {
            memcpy(text + tl, piece, (size_t)pl);
            tl += (size_t)pl;
            text[tl] = '\0';
        }
    }
    for (int g = 0; g < it.n_gold; g++)
        CHECK_MSG(strstr(text, it.gold[g]) != NULL, "%s: '%s' not in the needle tokens", path, it.gold[g]);
    /* and nothing much else: the covering tokens are at most a few characters longer per value */
    CHECK_MSG(tl <= 4 * (7 + 3), "%s: needle tokens spell %zu bytes", path, tl);
    free(t);
    pkv_eval_item_free(&it);
    pkv_model_free(m);
}

TEST(eval_needle_positions_llama) { check_needle_positions(TINY_LLAMA); }
TEST(eval_needle_positions_gemma3) { check_needle_positions(TINY_GEMMA); }

/* ---------------------------------------------------------------- run_item metrics */

typedef struct {
    int n;
    char labels[8][64];
    char *pred[8];
    double score[8], agree[8], kl[8], nll[8], nll_full[8], kept_rows[8], needle_kept[8];
    int agree_k[8];
    bool reused[8];
} collected;

static int collect(void *user, const pkv_eval_result *r, pkv_error *err) {
    (void)err;
    collected *c = user;
    if (c->n == 8) return -1;
    int i = c->n++;
    snprintf(c->labels[i], sizeof c->labels[i], "%s", r->config->label);
    c->pred[i] = strdup(r->prediction);
    c->score[i] = r->score;
    c->agree[i] = r->agree_top1;
    c->agree_k[i] = r->agree_k;
    c->kl[i] = r->kl;
    c->nll[i] = r->nll;
    c->nll_full[i] = r->nll_full;
    c->kept_rows[i] = r->kept_rows;
    c->reused[i] = r->reused_full;
    double s = 0;
    for (int k = 0; k < r->n_full_layers * r->n_heads; k++) s += r->needle_kept[k];
    c->needle_kept[i] = r->n_needle_tokens ? s / (r->n_full_layers * r->n_heads) : NAN;
    return 0;
}

static void collected_free(collected *c) {
    for (int i = 0; i < c->n; i++) free(c->pred[i]);
}

/* argmax */
static int32_t top1(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

TEST(eval_run_item_metrics) {
    pkv_model *m = load(TINY_LLAMA);
    REQUIRE(m);
    pkv_error err;
    pkv_eval_config cfg[4];
    const char *opts[] = {"window=8"};
    REQUIRE(pkv_eval_config_init(&cfg[0], "none", "none", 0, 0, NULL, 0, &err) == 0);
    REQUIRE(pkv_eval_config_init(&cfg[1], "snapkv", "snapkv", 48, 0, opts, 1, &err) == 0);
    REQUIRE(pkv_eval_config_init(&cfg[2], "snapkv", "snapkv", 100000, 0, opts, 1, &err) == 0);
    REQUIRE(pkv_eval_config_init(&cfg[3], "streamingllm", "streamingllm", 0, 0.75, opts, 1, &err) == 0);
    CHECK_STR(cfg[1].label, "snapkv/b48");
    CHECK_STR(cfg[3].label, "streamingllm/r0.75");
    CHECK(strstr(cfg[1].describe, "window=8") != NULL);
    pkv_eval_runner_opts ro = {.n_threads = 1, .n_ctx = 1024, .keep_window = 8, .attn_sums = false, .agree_k = 6};
    pkv_eval_runner *r = pkv_eval_runner_new(m, &ro, &err);
    REQUIRE(r);
    pkv_eval_spec spec = {pkv_eval_task_find("niah_single_1"), 1024, 0, 0, 3, 0};
    pkv_eval_item it;
    REQUIRE(pkv_eval_build(&spec, 6, 0, &it, &err) == 0);
    for (int mode = 0; mode < 2; mode++) {
        collected c = {0};
        REQUIRE_MSG(pkv_eval_run_item(r, spec.task, &it, (pkv_eval_mode)mode, cfg, 4, NULL, collect, &c, &err) == 0,
                    "%s", err.msg);
        REQUIRE(c.n == 4);
        /* the full cache agrees with itself; a config that evicts nothing is the full cache */
        CHECK_NEAR(c.agree[0], 1.0, 0);
        CHECK_NEAR(c.kl[0], 0.0, 0);
        CHECK_NEAR(c.nll[0], c.nll_full[0], 0);
        CHECK(c.reused[2] && !c.reused[1] && !c.reused[3]);
        CHECK_STR(c.pred[2], c.pred[0]);
        CHECK_NEAR(c.nll[2], c.nll[0], 0);
        CHECK_NEAR(c.kept_rows[1], 48, 0);
        for (int i = 1; i < 4; i++) {
            CHECK(c.agree[i] >= 0 && c.agree[i] <= 1);
            CHECK(c.kl[i] >= 0);
            CHECK_NEAR(c.nll_full[i], c.nll[0], 0);
            CHECK(c.needle_kept[i] >= 0 && c.needle_kept[i] <= 1);
        }

        /* recompute snapkv/b48's agreement and gold NLL directly with the public API */
        pkv_session *full = session(m, 0, false), *cmp = session(m, 8, false), *cc = session(m, 0, false);
        REQUIRE(full && cmp && cc);
        /* context with BOS, then question and answer prefix each on their own */
        size_t cl = strlen(it.context);
        int32_t all[1500], ref[64];
        int nc = pkv_tokenize(m, it.context, cl, true, false, all, 1200, &err);
        REQUIRE(nc > 0);
        int nq = pkv_tokenize(m, it.question, strlen(it.question), false, false, all + nc, 150, &err);
        REQUIRE(nq > 0);
        int np = pkv_tokenize(m, it.answer_prefix, strlen(it.answer_prefix), false, false, all + nc + nq, 150, &err);
        int nr = pkv_tokenize(m, it.reference, strlen(it.reference), false, false, ref, 64, &err);
        REQUIRE(np > 0 && nr > 1);
        /* query-aware compresses context + question; the answer prefix is never compressed */
        bool aware = mode == PKV_EVAL_QUERY_AWARE;
        int n_comp = aware ? nc + nq : nc, n_rest = nc + nq + np - n_comp;
        REQUIRE(pkv_prefill(full, all, n_comp, NULL, NULL, &err) == 0);
        REQUIRE(pkv_prefill(cmp, all, n_comp, NULL, NULL, &err) == 0);
        REQUIRE(pkv_session_copy(cc, cmp, cfg[1].cfg, NULL, &err) == 0);
        REQUIRE(pkv_prefill(full, all + n_comp, n_rest, NULL, NULL, &err) == 0);
        REQUIRE(pkv_prefill(cc, all + n_comp, n_rest, NULL, NULL, &err) == 0);
        int n_vocab = pkv_n_vocab(m);
        /* the full cache's greedy tokens (up to 6, stopping after an end of generation) */
        pkv_session *g = session(m, 0, false);
        REQUIRE(pkv_session_copy(g, full, NULL, NULL, &err) == 0);
        int32_t ft[6];
        int k = 0;
        for (; k < 6; k++) {
            ft[k] = top1(pkv_logits(g), n_vocab);
            if (pkv_token_is_eog(m, ft[k])) {
                k++;
                break;
            }
            if (k < 5) REQUIRE(pkv_decode(g, ft[k], &err) == 0);
        }
        CHECK_EQ_INT(c.agree_k[1], k);
        /* teacher-forced: argmax of the compressed cache after the full cache's prefix */
        int match = 0;
        for (int i = 0; i < k; i++) {
            match += top1(pkv_logits(cc), n_vocab) == ft[i];
            if (i + 1 < k) REQUIRE(pkv_decode(cc, ft[i], &err) == 0);
        }
        CHECK_NEAR(c.agree[1], (double)match / k, 1e-12);
        /* gold NLL, token by token on a fresh copy */
        REQUIRE(pkv_session_copy(cc, cmp, cfg[1].cfg, NULL, &err) == 0);
        REQUIRE(pkv_prefill(cc, all + n_comp, n_rest, NULL, NULL, &err) == 0);
        double nll = 0;
        for (int i = 0; i < nr; i++) {
            const float *lg = pkv_logits(cc);
            double mx = lg[0], sum = 0;
            for (int v = 1; v < n_vocab; v++) mx = fmax(mx, lg[v]);
            for (int v = 0; v < n_vocab; v++) sum += exp(lg[v] - mx);
            nll += -(lg[ref[i]] - mx - log(sum));
            if (i + 1 < nr) REQUIRE(pkv_decode(cc, ref[i], &err) == 0);
        }
        CHECK_NEAR(c.nll[1], nll / nr, 1e-4);
        pkv_session_free(g);
        pkv_session_free(full);
        pkv_session_free(cmp);
        pkv_session_free(cc);
        collected_free(&c);
    }
    /* skip: configs already done are not run; the full cache runs but is not emitted */
    collected c = {0};
    bool skip[4] = {true, false, true, false};
    REQUIRE(pkv_eval_run_item(r, spec.task, &it, PKV_EVAL_QUERY_AGNOSTIC, cfg, 4, skip, collect, &c, &err) == 0);
    REQUIRE(c.n == 2);
    CHECK_STR(c.labels[0], "snapkv/b48");
    CHECK_STR(c.labels[1], "streamingllm/r0.75");
    collected_free(&c);
    pkv_eval_item_free(&it);
    pkv_eval_runner_free(r);
    for (int i = 0; i < 4; i++) pkv_eval_config_free(&cfg[i]);
    pkv_model_free(m);
}

/* ---------------------------------------------------------------- sweep: stop, resume, same file */


/* the file without each line's trailing "time" object (timings differ between runs) */
static char *without_times(const char *path) {
    char *d = test_read_file(path, NULL);
    if (!d) return NULL;
    char *w = d;
    for (char *p = d; *p;) {
        char *t = strstr(p, ",\"time\":{");
        char *nl = strchr(p, '\n');
        if (t && nl && t < nl) {
            memmove(w, p, (size_t)(t - p));
            w += t - p;
            *w++ = '}';
            *w++ = '\n';
        } else if (nl) {
            memmove(w, p, (size_t)(nl + 1 - p));
            w += nl + 1 - p;
        } else {
            break;
        }
        p = nl + 1;
    }
    *w = '\0';
    return d;
}

typedef struct {
    int stop_after;
    volatile sig_atomic_t *stop;
} stopper;

static void stop_progress(void *user, const pkv_eval_progress *p) {
    stopper *s = user;
    if (s->stop_after > 0 && p->done >= s->stop_after) *s->stop = 1;
}

/* The full cache and two presses at budget 40, window 8. */
static void three_configs(pkv_eval_config cfg[3], const char *second, const char *third) {
    pkv_error err;
    const char *opts[] = {"window=8"};
    REQUIRE(pkv_eval_config_init(&cfg[0], "none", "none", 0, 0, NULL, 0, &err) == 0);
    REQUIRE(pkv_eval_config_init(&cfg[1], second, second, 40, 0, opts, 1, &err) == 0);
    REQUIRE(pkv_eval_config_init(&cfg[2], third, third, 40, 0, opts, 1, &err) == 0);
}

/* Two runs of a plan in a fresh directory: straight, and stopped after
 * stop_after lines (then the torn line a kill would leave, when torn is
 * given) and resumed; both files normalised and read back without their
 * timings. sweep_runs_done removes them. */
typedef struct {
    char dir[64], straight[300], resumed[300];
    char *a, *b; /* the straight and the resumed run, without timings */
} sweep_runs;

static void sweep_twice(pkv_model *m, const pkv_eval_plan *plan, int n_ctx, int stop_after, const char *torn,
                        sweep_runs *out) {
    pkv_error err;
    snprintf(out->dir, sizeof out->dir, "/tmp/pkv-eval-sweep-XXXXXX");
    REQUIRE(mkdtemp(out->dir));
    snprintf(out->straight, sizeof out->straight, "%s/straight.jsonl", out->dir);
    snprintf(out->resumed, sizeof out->resumed, "%s/resumed.jsonl", out->dir);
    volatile sig_atomic_t stop = 0;
    pkv_eval_sweep_opts so = {.model = m,
                              .runner = {.n_threads = 1, .n_ctx = n_ctx, .keep_window = 8, .agree_k = 4, .stop = &stop},
                              .rows_path = out->straight,
                              .rank = 0,
                              .n_ranks = 1,
                              .stop = &stop};
    REQUIRE_MSG(pkv_eval_sweep(plan, &so, &err) == 0, "%s", err.msg);
    REQUIRE(pkv_jsonl_normalize(out->straight, plan, &err) == 0);
    stopper st = {stop_after, &stop};
    so.rows_path = out->resumed;
    so.progress = stop_progress;
    so.user = &st;
    CHECK(pkv_eval_sweep(plan, &so, &err) == -1 && err.code == PKV_ERR_INTERRUPTED);
    if (torn) {
        FILE *f = fopen(out->resumed, "ab");
        REQUIRE(f);
        fputs(torn, f);
        fclose(f);
    }
    /* resume: drop the torn line, skip what is done */
    stop = 0;
    st.stop_after = 0;
    pkv_key_set done = {0};
    REQUIRE(pkv_jsonl_truncate_partial(out->resumed, &err) == 0);
    REQUIRE(pkv_jsonl_load_keys(out->resumed, &done, &err) == 0);
    CHECK_EQ_INT(done.n, stop_after);
    so.done = &done;
    REQUIRE_MSG(pkv_eval_sweep(plan, &so, &err) == 0, "%s", err.msg);
    REQUIRE(pkv_jsonl_normalize(out->resumed, plan, &err) == 0);
    pkv_key_set_free(&done);
    out->a = without_times(out->straight);
    out->b = without_times(out->resumed);
    REQUIRE(out->a && out->b);
}

static void sweep_runs_done(sweep_runs *r) {
    free(r->a);
    free(r->b);
    unlink(r->straight);
    unlink(r->resumed);
    rmdir(r->dir);
}

static int count_lines(const char *s) {
    int n = 0;
    for (const char *p = s; *p; p++) n += *p == '\n';
    return n;
}

TEST(eval_sweep_stop_and_resume) {
    pkv_model *m = load(TINY_LLAMA);
    REQUIRE(m);
    pkv_eval_config cfg[3];
    three_configs(cfg, "snapkv", "streamingllm");
    const pkv_eval_task *tasks[] = {pkv_eval_task_find("niah_single_1"), pkv_eval_task_find("niah_passkey_noise")};
    int lengths[] = {512};
    double depths[] = {0, 100};
    pkv_eval_mode modes[] = {PKV_EVAL_QUERY_AGNOSTIC, PKV_EVAL_QUERY_AWARE};
    pkv_eval_plan plan = {tasks, 2, lengths, 1, 2, lengths, 1, depths, 2, 1, modes, 2, cfg, 3, 5};
    sweep_runs r;
    sweep_twice(m, &plan, 640, 7, "{\"key\":\"niah_single_1/512/1/query_aware/none\",\"task\":\"niah_si", &r);
    CHECK_EQ_INT(count_lines(r.a), (2 * 1 + 2 * 1) * 2 * 3);
    CHECK_MSG(!strcmp(r.a, r.b), "resumed file differs from the straight run");
    /* every line parses and names its config */
    for (char *p = r.b; *p;) {
        char *nl = strchr(p, '\n');
        pkv_json *j = pkv_json_parse(p, (size_t)(nl - p));
        CHECK(j && pkv_json_get_str(j, "config", NULL));
        pkv_json_free(j);
        p = nl + 1;
    }
    sweep_runs_done(&r);
    for (int i = 0; i < 3; i++) pkv_eval_config_free(&cfg[i]);
    pkv_model_free(m);
}

/* A multi-question task (docs/evaluation.md §2.5): the questions of one
 * context share its query-agnostic prefill, and sharing changes no result:
 * a run stopped inside a group and resumed (whose next question prefills
 * afresh) writes the same lines as the straight run. */
TEST(eval_sweep_multi_question_shares_prefill) {
    pkv_model *m = load(TINY_LLAMA);
    REQUIRE(m);
    pkv_eval_config cfg[3];
    three_configs(cfg, "snapkv", "knorm");
    const pkv_eval_task *tasks[] = {pkv_eval_task_find("longeval_multiquestion")};
    int lengths[] = {1024};
    double depths[] = {0};
    pkv_eval_mode modes[] = {PKV_EVAL_QUERY_AGNOSTIC, PKV_EVAL_QUERY_AWARE};
    pkv_eval_plan plan = {tasks, 1, lengths, 1, 2, lengths, 0, depths, 0, 0, modes, 2, cfg, 3, 5};
    /* stopped after 7 lines: inside the first sample's query-agnostic questions */
    sweep_runs r;
    sweep_twice(m, &plan, 1100, 7, NULL, &r);
    CHECK_EQ_INT(count_lines(r.a), 2 * 4 * 2 * 3); /* samples x questions x modes x configs */
    CHECK_MSG(!strcmp(r.a, r.b), "the resumed run (fresh prefills) differs from the straight run (shared prefills)");
    /* questions 1-3 of each sample, query-agnostic: 2 x 3 x 3 lines read the source question 0 left */
    FILE *f = fopen(r.straight, "rb");
    REQUIRE(f);
    char line[1 << 14];
    int shared = 0, shared_aware = 0;
    while (fgets(line, sizeof line, f)) {
        bool s = strstr(line, "\"prefill_shared\":true") != NULL;
        shared += s;
        shared_aware += s && strstr(line, "\"mode\":\"query_aware\"");
        if (strstr(line, "/q0/")) CHECK_MSG(!s, "question 0 cannot share a prefill");
    }
    fclose(f);
    CHECK_EQ_INT(shared, 2 * 3 * 3);
    CHECK_EQ_INT(shared_aware, 0);
    sweep_runs_done(&r);
    for (int i = 0; i < 3; i++) pkv_eval_config_free(&cfg[i]);
    pkv_model_free(m);
}

/* ---------------------------------------------------------------- report */

static void row(FILE *f, const char *task, int length, int sample, double depth, const char *mode, const char *press,
                int budget, double score, double needle) {
    char cfg[48], key[160];
    if (!strcmp(press, "none"))
        snprintf(cfg, sizeof cfg, "full");
    else
        snprintf(cfg, sizeof cfg, "%s/b%d", press, budget);
    snprintf(key, sizeof key, "%s/%d/%d/d%g/%s/%s", task, length, sample, depth, mode, cfg);
    fprintf(f,
            "{\"key\":\"%s\",\"task\":\"%s\",\"length\":%d,\"sample\":%d,\"depth\":%g,\"mode\":\"%s\",\"press\":\"%s\","
            "\"budget\":%d,\"ratio\":0,\"config\":\"%s\",\"L\":1000,\"kept_rows\":%d,\"cache_bytes\":100,"
            "\"cache_bytes_full\":400,\"score\":%g,\"agree_top1\":1,\"kl\":0,\"nll_diff\":0.5,\"needle_kept\":%g,"
            "\"time\":{\"prefill_s\":2,\"copy_s\":0.001,\"press_s\":0.0005,\"question_s\":0,\"decode_s\":1,"
            "\"decode_steps\":10}}\n",
            key, task, length, sample, depth, mode, press, budget, cfg, budget ? budget : 1000, score, needle);
}

static bool file_has(const char *path, const char *text) {
    char *d = test_read_file(path, NULL);
    bool has = d && strstr(d, text);
    free(d);
    return has;
}

TEST(eval_report_numbers) {
    char dir[] = "/tmp/pkv-eval-report-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char path[300];
    snprintf(path, sizeof path, "%s/results.jsonl", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    /* task a: full 80, 60 -> 70; snapkv 35, 35 -> 35 (50% of full). task b: full 20 (under 50). */
    row(f, "niah_single_1", 1024, 0, -1, "query_agnostic", "none", 0, 80, 1);
    row(f, "niah_single_1", 1024, 0, -1, "query_agnostic", "snapkv", 64, 35, 0.5);
    row(f, "niah_single_1", 1024, 1, -1, "query_agnostic", "none", 0, 60, 1);
    row(f, "niah_single_1", 1024, 1, -1, "query_agnostic", "snapkv", 64, 35, 0.25);
    row(f, "vt", 1024, 0, -1, "query_agnostic", "none", 0, 20, 1);
    row(f, "vt", 1024, 0, -1, "query_agnostic", "snapkv", 64, 40, 1);
    row(f, "niah_passkey_noise", 512, 0, 0, "query_agnostic", "none", 0, 100, 1);
    row(f, "niah_passkey_noise", 512, 0, 0, "query_agnostic", "snapkv", 64, 0, 0);
    row(f, "niah_passkey_noise", 512, 0, 100, "query_agnostic", "none", 0, 100, 1);
    row(f, "niah_passkey_noise", 512, 0, 100, "query_agnostic", "snapkv", 64, 100, 1);
    fputs("{\"key\":\"torn\",\"task\":\"vt\"", f);
    fclose(f);
    pkv_eval_report_opts o = {path, dir, "tiny", "promptkv eval -m tiny.gguf"};
    pkv_error err;
    REQUIRE_MSG(pkv_eval_report(&o, &err) == 0, "%s", err.msg);
    char p[400];
    snprintf(p, sizeof p, "%s/summary.csv", dir);
    CHECK(file_has(p, "query_agnostic,niah_single_1,all,full,none,0,0,2,70.0000,70.0000,100.0000,1.000000,"));
    CHECK(file_has(p, "query_agnostic,niah_single_1,all,snapkv/b64,snapkv,64,0,2,35.0000,70.0000,50.0000,0.375000,"));
    CHECK(file_has(p, "query_agnostic,vt,1024,snapkv/b64,snapkv,64,0,1,40.0000,20.0000,200.0000,"));
    snprintf(p, sizeof p, "%s/summary.md", dir);
    /* avg over tasks: full (70 + 20 + 100) / 3, snapkv (35 + 40 + 50) / 3; retention over tasks with full >= 50 */
    CHECK(file_has(p, "| full | 70.0 | 20.0 | 100.0 | **63.3** | 100.0 |"));
    CHECK(file_has(p, "| snapkv/b64 | 35.0 | 40.0 | 50.0 | **41.7** | 50.0 |"));
    CHECK(file_has(p, "Full cache under 50 (left out of the relative retention): vt (20.0)."));
    CHECK(file_has(p, "promptkv eval -m tiny.gguf"));
    snprintf(p, sizeof p, "%s/niah_tiny_snapkv_64.csv", dir);
    CHECK(file_has(p, "context_length,depth_percent,score,n_samples,method,budget,ratio,mode,task\n"));
    CHECK(file_has(p, "512,0,0.0000,1,snapkv,64,0,query_agnostic,niah_passkey_noise\n"));
    CHECK(file_has(p, "512,100,100.0000,1,snapkv,64,0,query_agnostic,niah_passkey_noise\n"));
    snprintf(p, sizeof p, "%s/timing.csv", dir);
    CHECK(file_has(p, "query_agnostic,full,none,0,0,5,2.0000,1.000,0.500,0.000,100.000\n"));
    const char *svgs[] = {"accuracy_query_agnostic.svg", "heatmap_niah_passkey_noise_query_agnostic.svg"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, svgs[i]);
        char *d = test_read_file(p, NULL);
        REQUIRE_MSG(d, "%s missing", svgs[i]);
        CHECK(!strncmp(d, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39));
        CHECK(strstr(d, "</svg>\n") && strlen(strstr(d, "</svg>\n")) == 7);
        free(d);
    }
    snprintf(p, sizeof p, "%s/heatmap_niah_passkey_noise_query_agnostic.svg", dir);
    CHECK(file_has(p, "fill=\"#0CD79F\"") && file_has(p, "fill=\"#F0496E\""));
    /* clean up */
    const char *names[] = {"results.jsonl",
                           "summary.md",
                           "summary.csv",
                           "timing.csv",
                           "niah_tiny_full_full.csv",
                           "niah_tiny_snapkv_64.csv",
                           "accuracy_query_agnostic.svg",
                           "heatmap_niah_passkey_noise_query_agnostic.svg"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    CHECK_MSG(rmdir(dir) == 0, "unexpected files left in the report directory");
}

TEST(eval_heat_colors) {
    char c[8];
    pkv_eval_heat_color(0, c);
    CHECK_STR(c, "#F0496E");
    pkv_eval_heat_color(50, c);
    CHECK_STR(c, "#EBB839");
    pkv_eval_heat_color(100, c);
    CHECK_STR(c, "#0CD79F");
    pkv_eval_heat_color(25, c); /* halfway red -> yellow: (F0+EB)/2, (49+B8)/2, (6E+39)/2 rounded */
    CHECK_STR(c, "#EE8154");
    pkv_eval_heat_color(-5, c);
    CHECK_STR(c, "#F0496E");
}
