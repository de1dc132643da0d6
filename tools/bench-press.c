/*
 * bench-press: selection time of ProtoKV against SnapKV on the same layer
 * tensors, and where ProtoKV's time goes (docs/protokv.md).
 *
 *   build/bench-press [--lengths 4096,16384,32768] [--budget C] [--window W] [--reps N]
 *                     [--head-dim D] [--heads HQ] [--kv-heads HKV]        synthetic keys
 *   build/bench-press -m MODEL -f TEXT [--lengths ...] [-t THREADS]       keys of a real prefill
 *   build/bench-press --gamma -m MODEL -f TEXT [-f TEXT ...]              do SATs cluster? (Gamma)
 *
 * Synthetic keys have the structure of post-RoPE keys: a per-head mean
 * direction plus per-token content (so neighbours are alike through the slow
 * RoPE frequencies), 2% of the tokens drawn near one of three anchor
 * directions, RoPE (NEOX pairs, base 1e6) at their position. With a model, the
 * prompt text is repeated up to each length and prefilled once with a press
 * that only copies what each full-attention layer gives it (keys, window
 * queries); snapkv and protokv then run on those layers. Presses run on one
 * thread; times are that thread's CPU time (the machine may be shared: wall
 * time is printed too), medians of --reps, summed over the layers.
 *
 * --gamma prefills each text once (no repetition, at most --max-tokens) and
 * compresses copies with ProtoKV's SAT candidates chosen as the top m = 32
 * and as theta > beta for beta = 1, 2, 3, printing for every full-attention
 * layer and KV head the mean cosine among the candidates (intra), between
 * them and the other prefix rows (inter), Gamma = intra / inter (the write-up's
 * clustering ratio), and the same for as many random rows (the control).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/prng.h"
#include "press/press.h"
#include "press/protokv_steps.h"
#include "promptkv.h"

typedef struct {
    int lengths[16], n_lengths;
    int budget, window, reps, head_dim, n_head, n_kv, threads;
    const char *model, *texts[16];
    int n_texts, max_tokens;
    bool gamma;
    const char *protokv_opts[16];
    int n_protokv_opts;
} bench_args;

/* CPU time of the calling thread: what a single-threaded press costs, whatever else the machine runs */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    double cpu, wall;
} timing;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static const char USAGE[] =
    "usage: bench-press [--lengths L1,L2,..] [--budget C] [--window W] [--reps N] [--head-dim D] [--heads HQ]\n"
    "                   [--kv-heads HKV] [--protokv KEY=VALUE]... [-m MODEL -f TEXT [-t THREADS]]\n"
    "       bench-press --gamma -m MODEL -f TEXT [-f TEXT ...] [--max-tokens N] [-t THREADS]\n";

static int parse_args(int argc, char **argv, bench_args *a) {
    *a = (bench_args){.lengths = {4096, 16384, 32768}, .n_lengths = 3, .budget = 1024, .window = 32, .reps = 3,
                      .head_dim = 256, .n_head = 4, .n_kv = 1, .threads = 2, .max_tokens = 8192};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            fputs(USAGE, stdout);
            exit(0);
        }
        if (!strcmp(f, "--gamma")) {
            a->gamma = true;
            continue;
        }
        if (!v) break;
        i++;
        if (!strcmp(f, "--lengths")) {
            a->n_lengths = 0;
            for (char *p = (char *)v; *p && a->n_lengths < 16; p += *p == ',') a->lengths[a->n_lengths++] = (int)strtol(p, &p, 10);
        } else if (!strcmp(f, "--budget")) a->budget = atoi(v);
        else if (!strcmp(f, "--window")) a->window = atoi(v);
        else if (!strcmp(f, "--reps")) a->reps = atoi(v);
        else if (!strcmp(f, "--head-dim")) a->head_dim = atoi(v);
        else if (!strcmp(f, "--heads")) a->n_head = atoi(v);
        else if (!strcmp(f, "--kv-heads")) a->n_kv = atoi(v);
        else if (!strcmp(f, "-t")) a->threads = atoi(v);
        else if (!strcmp(f, "-m")) a->model = v;
        else if (!strcmp(f, "-f") && a->n_texts < 16) a->texts[a->n_texts++] = v;
        else if (!strcmp(f, "--max-tokens")) a->max_tokens = atoi(v);
        else if (!strcmp(f, "--protokv") && a->n_protokv_opts < 16) a->protokv_opts[a->n_protokv_opts++] = v;
        else {
            fprintf(stderr, "bench-press: unknown option '%s'\n%s", f, USAGE);
            return -1;
        }
    }
    if (a->reps < 1 || a->budget <= a->window || a->n_kv < 1 || a->n_head % a->n_kv || a->head_dim < 2 ||
        a->head_dim % 2 || !a->model != !a->n_texts || (a->gamma && !a->model)) {
        fprintf(stderr, "bench-press: bad arguments\n%s", USAGE);
        return -1;
    }
    return 0;
}

static pkv_press_cfg *make_cfg(const char *press, const bench_args *a) {
    pkv_error err;
    pkv_press_cfg *cfg = pkv_press_cfg_new(press, &err);
    char buf[32];
    snprintf(buf, sizeof buf, "%d", a->budget);
    if (cfg && pkv_press_cfg_set(cfg, "budget", buf, &err)) goto fail;
    snprintf(buf, sizeof buf, "%d", a->window);
    if (cfg && pkv_press_cfg_set(cfg, "window", buf, &err)) goto fail;
    for (int i = 0; cfg && !strcmp(press, "protokv") && i < a->n_protokv_opts; i++) {
        char kv[128];
        snprintf(kv, sizeof kv, "%s", a->protokv_opts[i]);
        char *eq = strchr(kv, '=');
        if (!eq) continue;
        *eq = '\0';
        if (pkv_press_cfg_set(cfg, kv, eq + 1, &err)) goto fail;
    }
    if (cfg) return cfg;
fail:
    fprintf(stderr, "bench-press: %s\n", err.msg);
    pkv_press_cfg_free(cfg);
    return NULL;
}

/* ---------------------------------------------------------------- synthetic layer */

static double gauss(uint64_t *s) {
    double u1 = 1.0 - (double)(pkv_splitmix64(s) >> 11) * 0x1p-53, u2 = (double)(pkv_splitmix64(s) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void rope(float *x, int dim, int pos) {
    for (int j = 0; j < dim / 2; j++) {
        double theta = pos * pow(1e6, -2.0 * j / dim), c = cos(theta), s = sin(theta);
        float a = x[j], b = x[j + dim / 2];
        x[j] = (float)(a * c - b * s);
        x[j + dim / 2] = (float)(a * s + b * c);
    }
}

typedef struct {
    float *keys, *q;
    int32_t *pos, *q_pos;
    int *n_rows;
    const float **key_ptr;
    const int32_t **pos_ptr;
} synthetic_layer;

static int synth_layer(const bench_args *a, int L, synthetic_layer *sl) {
    int d = a->head_dim, w = a->window;
    sl->keys = malloc((size_t)a->n_kv * L * d * sizeof(float));
    sl->q = malloc((size_t)a->n_head * w * d * sizeof(float));
    sl->pos = malloc((size_t)L * sizeof(int32_t));
    sl->q_pos = malloc((size_t)w * sizeof(int32_t));
    sl->n_rows = malloc((size_t)a->n_kv * sizeof(int));
    sl->key_ptr = malloc((size_t)a->n_kv * sizeof(float *));
    sl->pos_ptr = malloc((size_t)a->n_kv * sizeof(int32_t *));
    double *mean = malloc((size_t)d * sizeof(double)), *anchor = malloc((size_t)3 * d * sizeof(double));
    if (!sl->keys || !sl->q || !sl->pos || !sl->q_pos || !sl->n_rows || !sl->key_ptr || !sl->pos_ptr || !mean || !anchor)
        return -1;
    uint64_t s = 20260301;
    for (int i = 0; i < L; i++) sl->pos[i] = i;
    for (int r = 0; r < w; r++) sl->q_pos[r] = L - w + r;
    for (int g = 0; g < a->n_kv; g++) {
        for (int j = 0; j < d; j++) mean[j] = 2.0 * gauss(&s);
        for (int j = 0; j < 3 * d; j++) anchor[j] = 3.0 * gauss(&s);
        for (int i = 0; i < L; i++) {
            float *k = sl->keys + ((size_t)g * L + i) * d;
            bool is_anchor = pkv_splitmix64(&s) % 50 == 0;
            const double *base = is_anchor ? anchor + (size_t)(pkv_splitmix64(&s) % 3) * d : mean;
            for (int j = 0; j < d; j++) k[j] = (float)(base[j] + (is_anchor ? 0.3 : 1.0) * gauss(&s));
            rope(k, d, i);
        }
        sl->n_rows[g] = L;
        sl->key_ptr[g] = sl->keys + (size_t)g * L * d;
        sl->pos_ptr[g] = sl->pos;
    }
    for (int h = 0; h < a->n_head; h++)
        for (int r = 0; r < w; r++) {
            float *q = sl->q + ((size_t)h * w + r) * d;
            for (int j = 0; j < d; j++) q[j] = (float)(mean[j] * 0.2 + gauss(&s));
            rope(q, d, L - w + r);
        }
    free(mean);
    free(anchor);
    return 0;
}

static void free_layer(synthetic_layer *sl) {
    free(sl->keys);
    free(sl->q);
    free(sl->pos);
    free(sl->q_pos);
    free(sl->n_rows);
    free(sl->key_ptr);
    free(sl->pos_ptr);
}

/* Median seconds of pkv_press_run for cfg on the layer. */
static timing time_press(const pkv_press_cfg *cfg, const pkv_press_input *in_template, int reps) {
    double cpu[64], wall[64];
    pkv_arena arena = {0};
    pkv_press_input in = *in_template;
    in.arena = &arena;
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        pkv_arena_reset(&arena);
        pkv_press_selection sel;
        pkv_error err;
        double c0 = cpu_seconds(), t0 = pkv_now_seconds();
        if (pkv_press_run(cfg, &in, &sel, &err)) fprintf(stderr, "bench-press: %s\n", err.msg);
        cpu[r] = cpu_seconds() - c0;
        wall[r] = pkv_now_seconds() - t0;
    }
    pkv_arena_free(&arena);
    return (timing){median(cpu, reps), median(wall, reps)};
}

static void print_header(void) {
    printf("| keys | L | snapkv ms | protokv ms | ratio | similarity | LSH | prototypes | assignment | scoring | "
           "retention | wall snapkv / protokv ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

/* Seconds in each ProtoKV step, summed over heads and layers (from the press's observer). */
typedef struct {
    double similarity, lsh, prototypes, assignment, scoring, retention;
} step_times;

static void add_step(void *user, const char *step, double seconds) {
    step_times *t = user;
    double *slot = !strcmp(step, "similarity")   ? &t->similarity
                   : !strcmp(step, "lsh")        ? &t->lsh
                   : !strcmp(step, "prototypes") ? &t->prototypes
                   : !strcmp(step, "assignment") ? &t->assignment
                   : !strcmp(step, "scoring")    ? &t->scoring
                                                 : &t->retention;
    *slot += seconds;
}

/* Times ProtoKV's steps into *t (NULL: stop). */
static void profile(pkv_press_cfg *cfg, step_times *t) {
    pkv_press_observer ob = {.layer = -1, .head = -1, .step = add_step, .user = t};
    pkv_press_cfg_observe(cfg, t ? &ob : NULL, NULL);
}

static void print_row(const char *what, int L, timing snap, timing proto, const step_times *t) {
    double tot = t->similarity + t->lsh + t->prototypes + t->assignment + t->scoring + t->retention;
    if (tot <= 0) tot = 1;
    printf("| %s | %d | %.1f | %.1f | %.2f | %.0f%% | %.0f%% | %.0f%% | %.0f%% | %.0f%% | %.0f%% | %.1f / %.1f |\n", what,
           L, snap.cpu * 1e3, proto.cpu * 1e3, proto.cpu / snap.cpu, 100 * t->similarity / tot, 100 * t->lsh / tot,
           100 * t->prototypes / tot, 100 * t->assignment / tot, 100 * t->scoring / tot, 100 * t->retention / tot,
           snap.wall * 1e3, proto.wall * 1e3);
    fflush(stdout);
}

static int bench_synthetic(const bench_args *a) {
    pkv_compute comp = {.kern = pkv_kernels_get(PKV_SIMD_AUTO)};
    pkv_press_cfg *snap = make_cfg("snapkv", a), *proto = make_cfg("protokv", a);
    if (!snap || !proto) return 1;
    printf("synthetic keys: head_dim %d, %d query heads, %d KV heads, budget %d, window %d, %s kernels, median of %d\n",
           a->head_dim, a->n_head, a->n_kv, a->budget, a->window, pkv_simd_name(comp.kern->level), a->reps);
    print_header();
    for (int li = 0; li < a->n_lengths; li++) {
        int L = a->lengths[li];
        synthetic_layer sl;
        if (synth_layer(a, L, &sl)) return 1;
        pkv_press_input in = {
            .n_layers = 1, .n_head = a->n_head, .n_head_kv = a->n_kv, .head_dim_k = a->head_dim,
            .head_dim_v = a->head_dim, .attn_scale = 1.0f / sqrtf((float)a->head_dim), .window = a->window,
            .q_window = sl.q, .q_pos = sl.q_pos, .n_rows = sl.n_rows, .keys = sl.key_ptr, .pos = sl.pos_ptr,
            .comp = &comp,
        };
        timing t_snap = time_press(snap, &in, a->reps);
        step_times times = {0};
        profile(proto, &times);
        timing t_proto = time_press(proto, &in, a->reps);
        profile(proto, NULL);
        print_row("synthetic", L, t_snap, t_proto, &times);
        free_layer(&sl);
    }
    pkv_press_cfg_free(snap);
    pkv_press_cfg_free(proto);
    return 0;
}

/* ---------------------------------------------------------------- a real prefill */

/* The text's tokens after BOS, repeated up to n tokens (repeat = false: at most n, once). */
static int32_t *text_tokens(pkv_model *m, const char *path, int n, bool repeat, int *got) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        free(text);
        return NULL;
    }
    fclose(f);
    text[len] = '\0';
    pkv_error err;
    int32_t *once = malloc(((size_t)len + 16) * sizeof(int32_t)), *toks = malloc((size_t)n * sizeof(int32_t));
    int n_once = once ? pkv_tokenize(m, text, (size_t)len, false, false, once, (int)len + 16, &err) : -1;
    free(text);
    if (n_once <= 0 || !toks) {
        free(once);
        free(toks);
        return NULL;
    }
    /* BOS, then the text (again and again) */
    if (!repeat && n_once + 1 < n) n = n_once + 1;
    toks[0] = pkv_token_bos(m);
    for (int i = 1; i < n; i++) toks[i] = once[(i - 1) % n_once];
    free(once);
    *got = n;
    return toks;
}

/* A layer as a press saw it, copied out by the capturing press below. */
typedef struct {
    pkv_press_input in;
    float *q;
    int32_t *q_pos;
    int *n_rows;
    float **keys;
    int32_t **pos;
} captured_layer;

typedef struct {
    captured_layer layers[64];
    int n;
} capture_store;

/* A press that scores nothing and copies what it was given: the real layers
 * that snapkv and protokv then run on, timed like the synthetic ones. */
static int capture_score(const void *params, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    capture_store *cs = *(capture_store *const *)params;
    if (cs->n == 64) return 0;
    captured_layer *c = &cs->layers[cs->n++];
    int d = in->head_dim_k, nkv = in->n_head_kv;
    c->in = *in;
    c->q = malloc((size_t)in->n_head * in->window * d * sizeof(float));
    c->q_pos = malloc((size_t)in->window * sizeof(int32_t));
    c->n_rows = malloc((size_t)nkv * sizeof(int));
    c->keys = calloc((size_t)nkv, sizeof(float *));
    c->pos = calloc((size_t)nkv, sizeof(int32_t *));
    if (!c->q || !c->q_pos || !c->n_rows || !c->keys || !c->pos)
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory capturing layer %d", in->layer);
    memcpy(c->q, in->q_window, (size_t)in->n_head * in->window * d * sizeof(float));
    memcpy(c->q_pos, in->q_pos, (size_t)in->window * sizeof(int32_t));
    for (int g = 0; g < nkv; g++) {
        int n = c->n_rows[g] = in->n_rows[g];
        c->keys[g] = malloc((size_t)n * d * sizeof(float));
        c->pos[g] = malloc((size_t)n * sizeof(int32_t));
        if (!c->keys[g] || !c->pos[g]) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory capturing layer %d", in->layer);
        memcpy(c->keys[g], pkv_press_keys(in, g), (size_t)n * d * sizeof(float));
        memcpy(c->pos[g], in->pos[g], (size_t)n * sizeof(int32_t));
    }
    c->in.q_window = c->q;
    c->in.q_pos = c->q_pos;
    c->in.n_rows = c->n_rows;
    c->in.keys = (const float *const *)c->keys;
    c->in.pos = (const int32_t *const *)c->pos;
    c->in.values = NULL;
    c->in.attn_sum = NULL;
    c->in.attn_count = NULL;
    c->in.observer = NULL;
    for (int s = 0; s < sel->n_sel; s++) memset(sel->scores[s], 0, (size_t)in->n_rows[pkv_sel_kv_head(in, sel, s)] * sizeof(float));
    return 0;
}

static int capture_forced_window(const void *params, int window) {
    (void)params;
    return window;
}

static const pkv_press_ops CAPTURE_OPS = {
    .name = "capture", .summary = "benchmark: copies the layers it is given", .params_size = sizeof(void *),
    .forced_window = capture_forced_window, .score = capture_score,
};

static void free_capture(capture_store *cs) {
    for (int l = 0; l < cs->n; l++) {
        captured_layer *c = &cs->layers[l];
        for (int g = 0; g < c->in.n_head_kv; g++) {
            free(c->keys[g]);
            free(c->pos[g]);
        }
        free(c->q);
        free(c->q_pos);
        free(c->n_rows);
        free(c->keys);
        free(c->pos);
    }
    cs->n = 0;
}

static int bench_model(const bench_args *a) {
    pkv_error err;
    pkv_model *m = pkv_model_load(a->model, NULL, &err);
    if (!m) {
        fprintf(stderr, "bench-press: %s\n", err.msg);
        return 1;
    }
    pkv_model_info info;
    pkv_model_get_info(m, &info);
    pkv_press_cfg *snap = make_cfg("snapkv", a), *proto = make_cfg("protokv", a), *capture = make_cfg("snapkv", a);
    if (!snap || !proto || !capture) return 1;
    /* the capturing press wears a snapkv configuration (budget, window): its
     * parameter block is large enough for the pointer it needs */
    static capture_store store;
    capture->ops = &CAPTURE_OPS;
    *(capture_store **)capture->params = &store;
    pkv_compute comp = {.kern = pkv_kernels_get(PKV_SIMD_AUTO)};
    printf("%s keys (%s): head_dim %d, %d query heads, %d KV heads, %d full-attention layers, budget %d, window %d, "
           "%s kernels, time summed over the full layers, median of %d\n",
           info.arch, a->model, info.head_dim, info.n_head, info.n_head_kv, info.n_layer - info.n_swa_layers, a->budget,
           a->window, pkv_simd_name(comp.kern->level), a->reps);
    print_header();
    for (int li = 0; li < a->n_lengths; li++) {
        int L = a->lengths[li], n = 0;
        int32_t *toks = text_tokens(m, a->texts[0], L, true, &n);
        pkv_session_opts so;
        pkv_session_opts_default(&so);
        so.n_threads = a->threads;
        so.n_ctx = L;
        pkv_session *s = toks ? pkv_session_new(m, &so, &err) : NULL;
        double t0 = pkv_now_seconds();
        if (!s || pkv_prefill(s, toks, n, capture, NULL, &err)) {
            fprintf(stderr, "bench-press: %d tokens: %s\n", L, toks ? err.msg : "cannot read the text");
            return 1;
        }
        fprintf(stderr, "bench-press: prefilled %d tokens in %.0f s, captured %d layers\n", L, pkv_now_seconds() - t0,
                store.n);
        timing t_snap = {0}, t_proto = {0};
        step_times times = {0};
        for (int l = 0; l < store.n; l++) {
            store.layers[l].in.comp = &comp;
            timing ts = time_press(snap, &store.layers[l].in, a->reps);
            profile(proto, &times);
            timing tp = time_press(proto, &store.layers[l].in, a->reps);
            profile(proto, NULL);
            t_snap.cpu += ts.cpu;
            t_snap.wall += ts.wall;
            t_proto.cpu += tp.cpu;
            t_proto.wall += tp.wall;
        }
        print_row(info.arch, L, t_snap, t_proto, &times);
        free_capture(&store);
        pkv_session_free(s);
        free(toks);
    }
    capture->ops = pkv_press_find("snapkv");
    pkv_press_cfg_free(capture);
    pkv_press_cfg_free(snap);
    pkv_press_cfg_free(proto);
    pkv_model_free(m);
    return 0;
}

/* ---------------------------------------------------------------- Gamma */

typedef struct {
    const char *text, *setting;
    int heads, clustered, beat_control, n_sat_total, n_gamma;
    double gamma_sum;
} gamma_tally;

static void on_view(void *user, const pkv_cluster_view *v) {
    gamma_tally *t = user;
    int n_sat = 0;
    for (int i = 0; i < v->n_prefix; i++) n_sat += v->sat_bucket[i] >= 0;
    double g = v->sat_inter > 0 ? v->sat_intra / v->sat_inter : NAN, gr = v->rand_inter > 0 ? v->rand_intra / v->rand_inter : NAN;
    /* SATs cluster when they are more alike among themselves than with the rest */
    bool clustered = n_sat >= 2 && v->sat_intra > v->sat_inter;
    printf("| %s | %s | %d | %d | %d | %.3f | %.3f | %.2f | %.3f | %.3f | %.2f |\n", t->text, t->setting, v->layer,
           v->head, n_sat, v->sat_intra, v->sat_inter, g, v->rand_intra, v->rand_inter, gr);
    t->heads++;
    t->clustered += clustered;
    t->beat_control += n_sat >= 2 && v->sat_intra - v->sat_inter > v->rand_intra - v->rand_inter;
    t->n_sat_total += n_sat;
    if (isfinite(g)) {
        t->gamma_sum += g;
        t->n_gamma++;
    }
}

static int bench_gamma(const bench_args *a) {
    pkv_error err;
    pkv_model *m = pkv_model_load(a->model, NULL, &err);
    if (!m) {
        fprintf(stderr, "bench-press: %s\n", err.msg);
        return 1;
    }
    static const char *const SETTINGS[][2] = {{"m", "32"}, {"beta", "1"}, {"beta", "2"}, {"beta", "3"}};
    enum { N_SETTINGS = 4 };
    gamma_tally total[N_SETTINGS] = {0};
    printf("| text | SATs | layer | head | n SAT | intra | inter | Gamma | random intra | random inter | random Gamma |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int ti = 0; ti < a->n_texts; ti++) {
        int n = 0;
        int32_t *toks = text_tokens(m, a->texts[ti], a->max_tokens, false, &n);
        pkv_session_opts so;
        pkv_session_opts_default(&so);
        so.n_threads = a->threads;
        so.keep_press_window = a->window;
        pkv_session *src = toks ? pkv_session_new(m, &so, &err) : NULL, *dst = src ? pkv_session_new(m, &so, &err) : NULL;
        if (!dst || pkv_prefill(src, toks, n, NULL, NULL, &err)) {
            fprintf(stderr, "bench-press: %s: %s\n", a->texts[ti], toks ? err.msg : "cannot read the text");
            return 1;
        }
        const char *name = strrchr(a->texts[ti], '/') ? strrchr(a->texts[ti], '/') + 1 : a->texts[ti];
        for (int k = 0; k < N_SETTINGS; k++) {
            pkv_press_cfg *cfg = make_cfg("protokv", a);
            char setting[32];
            snprintf(setting, sizeof setting, "%s %s", SETTINGS[k][0][0] == 'm' ? "top" : "theta >", SETTINGS[k][1]);
            gamma_tally t = {.text = name, .setting = setting};
            if (!cfg || pkv_press_cfg_set(cfg, SETTINGS[k][0], SETTINGS[k][1], &err) ||
                pkv_press_cfg_observe(cfg, &(pkv_press_observer){.layer = -1, .head = -1, .clusters = on_view, .user = &t},
                                      &err) ||
                pkv_session_copy(dst, src, cfg, NULL, &err)) {
                fprintf(stderr, "bench-press: %s\n", err.msg);
                return 1;
            }
            total[k].setting = SETTINGS[k][0][0] == 'm' ? "top 32" : SETTINGS[k][1];
            total[k].heads += t.heads;
            total[k].clustered += t.clustered;
            total[k].beat_control += t.beat_control;
            total[k].n_sat_total += t.n_sat_total;
            total[k].gamma_sum += t.gamma_sum;
            total[k].n_gamma += t.n_gamma;
            pkv_press_cfg_free(cfg);
        }
        fprintf(stderr, "bench-press: %s: %d tokens\n", name, n);
        pkv_session_free(dst);
        pkv_session_free(src);
        free(toks);
    }
    /* mean Gamma over the heads with at least 2 candidates */
    printf("\n| SAT candidates | heads | SATs per head | intra > inter | beats random rows | mean Gamma |\n"
           "|---|---|---|---|---|---|\n");
    for (int k = 0; k < N_SETTINGS; k++)
        printf("| %s%s | %d | %.1f | %d (%.0f%%) | %d (%.0f%%) | %.2f |\n", k ? "theta > " : "", total[k].setting,
               total[k].heads, (double)total[k].n_sat_total / (total[k].heads ? total[k].heads : 1), total[k].clustered,
               100.0 * total[k].clustered / (total[k].heads ? total[k].heads : 1), total[k].beat_control,
               100.0 * total[k].beat_control / (total[k].heads ? total[k].heads : 1),
               total[k].gamma_sum / (total[k].n_gamma ? total[k].n_gamma : 1));
    pkv_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    bench_args a;
    if (parse_args(argc, argv, &a)) return 2;
    if (a.gamma) return bench_gamma(&a);
    return a.model ? bench_model(&a) : bench_synthetic(&a);
}
