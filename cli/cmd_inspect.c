/*
 * promptkv inspect: which prompt tokens survive a press, so a user can see
 * what the model will still "see". Prints rows kept per layer and head, and
 * writes an HTML page shading each prompt token by how many heads kept it
 * (all full-attention layers together, then one section per layer). With
 * ProtoKV, --clusters shows one head's clusters: which tokens are SAT
 * candidates, which cluster each token joined, which clusters were kept.
 * --json gives the kept positions per layer and head to other programs
 * (tools/kvpress-parity.py compares them with kvpress's).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "inspect_json.h"
#include "press/observer.h"
#include "press_args.h"

static const char INSPECT_USAGE[] =
    "usage: promptkv inspect -m MODEL (-p TEXT | -f FILE) --press NAME (--budget C | --ratio r) [options]\n"
    "\n"
    "Prefills the prompt with the press and shows which tokens each full-attention layer and head kept.\n"
    "The prompt is laid out as promptkv eval lays it out: the context (-p or -f), then the question (-q),\n"
    "in the model's chat template with --chat; the press sees the context and, in query-aware mode (the\n"
    "default), the question; the template's tail is fed after it.\n"
    "  -q, --question TEXT  the question after the context\n"
    "      --chat           the model's chat template around context + question (--system TEXT: its system prompt)\n"
    "  -n, --n-predict N    then generate up to N tokens greedily and print them\n"
    "      --json FILE      write the token ids, the segments, the press's cost, the kept positions of every\n"
    "                       full-attention layer and KV head, and the answer as JSON (- for stdout, alone)\n"
    "      --html FILE      write a page that shades every prompt token by how many heads kept it\n"
    "      --tokens N       print the first N tokens with their keep counts (default 0)\n"
    "      --clusters L:H   protokv: the clusters of KV head H of layer L (SAT candidates, the cluster each\n"
    "                       token joined, kept clusters; with --tokens N every one of the first N tokens);\n"
    "                       --clusters all: one line per full layer and head with how tightly SATs cluster\n"
    "  -t, --threads N      threads\n"
    "  -c, --ctx-size N     context length (default: the model's)\n"
    "      --cache-type T   how the KV cache stores keys and values: f16 (default), f32, q8_0, q4_0\n"
    "                       (q8_0/q4_0: ggml blocks of 32, for head sizes divisible by 32)\n"
    "      --cache-type-k T, --cache-type-v T\n"
    "                       the same for keys or for values alone (-ctk, -ctv)\n"
    "  -h, --help           this help; press options as in promptkv run --help-press\n";

typedef struct {
    int n_layers;
    int *full;        /* indices of full-attention layers */
    int n_full;
    int *heads;       /* heads per full layer */
    int total_heads;  /* sum over full layers */
    unsigned short *kept; /* [n_full][n_tok]: heads of that layer that kept the token */
} keep_map;

static int build_map(const pkv_session *s, int n_tok, keep_map *km) {
    memset(km, 0, sizeof *km);
    km->n_layers = pkv_session_n_layers(s);
    km->full = calloc((size_t)km->n_layers, sizeof *km->full);
    km->heads = calloc((size_t)km->n_layers, sizeof *km->heads);
    km->kept = calloc((size_t)km->n_layers * (size_t)n_tok, sizeof *km->kept);
    int32_t *pos = malloc((size_t)(n_tok + 1) * sizeof *pos);
    if (!km->full || !km->heads || !km->kept || !pos) {
        free(pos);
        return -1;
    }
    for (int l = 0; l < km->n_layers; l++) {
        if (!pkv_session_layer_is_full(s, l)) continue;
        int f = km->n_full++;
        km->full[f] = l;
        km->heads[f] = pkv_session_n_heads(s, l);
        km->total_heads += km->heads[f];
        for (int h = 0; h < km->heads[f]; h++) {
            int n = pkv_session_positions(s, l, h, pos, n_tok + 1);
            for (int i = 0; i < n && i <= n_tok; i++)
                if (pos[i] >= 0 && pos[i] < n_tok) km->kept[(size_t)f * n_tok + pos[i]]++;
        }
    }
    free(pos);
    return 0;
}

static void free_map(keep_map *km) {
    free(km->full);
    free(km->heads);
    free(km->kept);
}

static int kept_all_layers(const keep_map *km, int n_tok, int t) {
    int k = 0;
    for (int f = 0; f < km->n_full; f++) k += km->kept[(size_t)f * n_tok + t];
    return k;
}

static void html_escape(FILE *out, const char *s, int n) {
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '&': fputs("&amp;", out); break;
        case '"': fputs("&quot;", out); break;
        case '\n': fputs("&#8629;<br>", out); break;
        default: fputc(c, out);
        }
    }
}

/* One paragraph of tokens, background alpha = kept / of. */
static void html_tokens(FILE *out, const pkv_model *m, const int32_t *toks, int n_tok, const keep_map *km, int f) {
    char piece[256];
    fputs("<p class=toks>", out);
    int of = f < 0 ? km->total_heads : km->heads[f];
    for (int t = 0; t < n_tok; t++) {
        int k = f < 0 ? kept_all_layers(km, n_tok, t) : km->kept[(size_t)f * n_tok + t];
        double a = of ? (double)k / of : 0.0;
        int len = pkv_token_to_piece(m, toks[t], true, piece, sizeof piece);
        if (len < 0) len = 0;
        if (len > (int)sizeof piece) len = sizeof piece;
        fprintf(out, "<span style=\"background:rgba(12,150,100,%.3f)\" title=\"pos %d, token %d: kept by %d of %d heads\">",
                0.08 + 0.92 * a, t, toks[t], k, of);
        html_escape(out, piece, len);
        fputs("</span>", out);
    }
    fputs("</p>\n", out);
}

static int write_html(const char *path, const pkv_model *m, const int32_t *toks, int n_tok, const keep_map *km,
                      const char *desc) {
    FILE *out = fopen(path, "w");
    if (!out) return -1;
    fprintf(out, "<!doctype html><meta charset=utf-8><title>promptkv inspect: %s</title>\n", desc);
    fputs("<style>body{font:14px/1.5 system-ui,sans-serif;max-width:70em;margin:2em auto;color:#222}"
          ".toks{font:13px/1.9 ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}"
          ".toks span{border-radius:2px}h2{margin-top:2em}</style>\n",
          out);
    fprintf(out, "<h1>Which prompt tokens the cache keeps</h1><p>Press: <b>%s</b>. %d prompt tokens. "
                 "Each token is shaded by the share of attention heads that kept it (dark = kept by all, pale = "
                 "evicted everywhere); hover for counts. Sliding-window layers are not pressed and not shown.</p>\n",
            desc, n_tok);
    fprintf(out, "<h2>All %d full-attention layers (%d heads)</h2>\n", km->n_full, km->total_heads);
    html_tokens(out, m, toks, n_tok, km, -1);
    for (int f = 0; f < km->n_full; f++) {
        fprintf(out, "<h2>Layer %d (%d heads)</h2>\n", km->full[f], km->heads[f]);
        html_tokens(out, m, toks, n_tok, km, f);
    }
    return fclose(out);
}

/* ---------------------------------------------------------------- ProtoKV clusters */

typedef struct {
    const pkv_model *m;
    const int32_t *toks;
    int n_tok;
    long n_show;     /* tokens listed one per line */
    bool summary;    /* --clusters all: one line per head */
    int n_views;
} cluster_watch;

static void print_piece(const pkv_model *m, int32_t tok, int width) {
    char piece[64];
    int n = pkv_token_to_piece(m, tok, true, piece, sizeof piece);
    if (n < 0) n = 0;
    if (n > (int)sizeof piece) n = sizeof piece;
    int shown = 0;
    putchar('\'');
    for (int k = 0; k < n && shown < width; k++, shown++) putchar(piece[k] == '\n' ? ' ' : piece[k]);
    putchar('\'');
    for (; shown < width; shown++) putchar(' ');
}

static const char *kept_word(int8_t k) { return k == 2 ? "whole" : k == 1 ? "partly" : "no"; }

/* Gamma = intra / inter mean cosine; "clustered" when the SATs are more alike among themselves */
static void print_gamma(const char *what, double intra, double inter) {
    printf("%s intra %.3f inter %.3f", what, intra, inter);
    if (inter > 0.0 && isfinite(intra)) printf(" Gamma %.2f", intra / inter);
    else printf(" Gamma n/a");
}

static void print_cluster_summary(const pkv_cluster_view *v) {
    int n_sat = 0, whole = 0, part = 0;
    for (int i = 0; i < v->n_prefix; i++) n_sat += v->sat_bucket[i] >= 0;
    for (int c = 0; c < v->n_clusters; c++) {
        whole += v->cluster_kept[c] == 2;
        part += v->cluster_kept[c] == 1;
    }
    printf("layer %d head %d: %d prefix rows, %d SATs in %d buckets, %d clusters, kept %d whole + %d partly; ", v->layer,
           v->head, v->n_prefix, n_sat, v->n_sat_clusters, v->n_clusters, whole, part);
    print_gamma("SATs", v->sat_intra, v->sat_inter);
    print_gamma("; random rows", v->rand_intra, v->rand_inter);
    putchar('\n');
}

static int cmp_score_desc(const void *a, const void *b, void *scores) {
    const double *s = scores;
    int x = *(const int *)a, y = *(const int *)b;
    if (s[x] != s[y]) return s[x] > s[y] ? -1 : 1;
    return x - y;
}

/* The head's clusters by score: kind, rows, score, kept, first positions. */
static void print_cluster_table(const pkv_cluster_view *v) {
    int *order = malloc((size_t)v->n_clusters * sizeof *order);
    if (!order) return;
    int n = 0;
    for (int c = 0; c < v->n_clusters; c++)
        if (v->cluster_size[c]) order[n++] = c;
    qsort_r(order, (size_t)n, sizeof *order, cmp_score_desc, (void *)v->cluster_score);
    printf("%d non-empty clusters by score (SAT clusters are 0..%d):\n", n, v->n_sat_clusters - 1);
    printf("  %-7s %-5s %6s %14s  %-6s %s\n", "cluster", "kind", "rows", "score", "kept", "positions");
    for (int k = 0; k < n; k++) {
        int c = order[k];
        printf("  %-7d %-5s %6d %14.4f  %-6s", c, c < v->n_sat_clusters ? "SAT" : "chunk", v->cluster_size[c],
               v->cluster_score[c], kept_word(v->cluster_kept[c]));
        int shown = 0;
        for (int i = 0; i < v->n_prefix && shown < 12; i++)
            if (v->cluster[i] == c) {
                printf(" %d", v->pos[i]);
                shown++;
            }
        if (v->cluster_size[c] > shown) printf(" ...");
        putchar('\n');
    }
    free(order);
}

static void on_clusters(void *user, const pkv_cluster_view *v) {
    cluster_watch *w = user;
    w->n_views++;
    print_cluster_summary(v);
    if (w->summary) return;
    printf("SAT candidates (outlier degree, LSH bucket, cluster joined, kept):\n");
    for (int i = 0; i < v->n_prefix; i++) {
        if (v->sat_bucket[i] < 0) continue;
        printf("  pos %6d ", v->pos[i]);
        if (v->pos[i] < w->n_tok) print_piece(w->m, w->toks[v->pos[i]], 14);
        printf(" theta %6.2f bucket %d cluster %d %s\n", v->theta[i], v->sat_bucket[i], v->cluster[i],
               v->row_kept[i] ? "kept" : "evicted");
    }
    print_cluster_table(v);
    if (w->n_show > 0) printf("first %ld tokens (cluster joined; window rows are always kept):\n", w->n_show);
    for (int i = 0; i < v->n_rows && i < w->n_show; i++) {
        printf("  pos %6d ", v->pos[i]);
        if (v->pos[i] < w->n_tok) print_piece(w->m, w->toks[v->pos[i]], 14);
        if (i < v->n_prefix)
            printf(" theta %6.2f %-3s cluster %-4d (%s) %s\n", v->theta[i], v->sat_bucket[i] >= 0 ? "SAT" : "",
                   v->cluster[i], v->cluster[i] < v->n_sat_clusters ? "SAT" : "chunk", v->row_kept[i] ? "kept" : "evicted");
        else
            printf(" window kept\n");
    }
}

/* ---------------------------------------------------------------- command */

typedef struct {
    const char *model_path, *prompt, *file, *system, *question, *html, *clusters, *json;
    long n_show, n_predict;
    bool chat;
    press_args pa;
    pkv_session_opts so;
} inspect_args;

/* 0: run; 1: help printed; -1: usage error printed */
static int parse_args(int argc, char **argv, inspect_args *a) {
    const char *cmd = "inspect", *v;
    long n;
    memset(a, 0, sizeof *a);
    pkv_session_opts_default(&a->so);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            fputs(INSPECT_USAGE, stdout);
            return 1;
        }
        int pr = press_args_parse(&a->pa, cmd, argc, argv, &i);
        if (pr < 0) return -1;
        if (pr > 0) continue;
        if (!strcmp(f, "--chat")) {
            a->chat = true;
            continue;
        }
        if (!(v = cli_value(cmd, argc, argv, &i))) return -1;
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) a->model_path = v;
        else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) a->prompt = v;
        else if (!strcmp(f, "-f") || !strcmp(f, "--file")) a->file = v;
        else if (!strcmp(f, "-q") || !strcmp(f, "--question")) a->question = v;
        else if (!strcmp(f, "--system")) a->system = v;
        else if (!strcmp(f, "--html")) a->html = v;
        else if (!strcmp(f, "--json")) a->json = v;
        else if (!strcmp(f, "--clusters")) a->clusters = v;
        else if (!strcmp(f, "--tokens")) {
            if (!cli_int(cmd, f, v, 0, 1 << 30, &a->n_show)) return -1;
        } else if (!strcmp(f, "-n") || !strcmp(f, "--n-predict")) {
            if (!cli_int(cmd, f, v, 0, 1 << 20, &a->n_predict)) return -1;
        } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            if (!cli_int(cmd, f, v, 1, 1024, &n)) return -1;
            a->so.n_threads = (int)n;
        } else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size")) {
            if (!cli_int(cmd, f, v, 1, 1 << 30, &n)) return -1;
            a->so.n_ctx = (int)n;
        } else if (!strcmp(f, "--cache-type")) {
            if (!cli_cache_type(cmd, f, v, &a->so.cache_type_k)) return -1;
            a->so.cache_type_v = a->so.cache_type_k;
        } else if (!strcmp(f, "--cache-type-k") || !strcmp(f, "-ctk")) {
            if (!cli_cache_type(cmd, f, v, &a->so.cache_type_k)) return -1;
        } else if (!strcmp(f, "--cache-type-v") || !strcmp(f, "-ctv")) {
            if (!cli_cache_type(cmd, f, v, &a->so.cache_type_v)) return -1;
        } else {
            cli_error(cmd, "unknown option '%s' (see promptkv inspect --help)", f);
            return -1;
        }
    }
    if (!a->model_path || !a->prompt == !a->file) {
        cli_error(cmd, "need -m MODEL and exactly one of -p TEXT or -f FILE");
        return -1;
    }
    if (!a->pa.press) {
        cli_error(cmd, "choose a press to inspect (--press NAME)");
        return -1;
    }
    if (a->system && !a->chat) {
        cli_error(cmd, "--system needs --chat");
        return -1;
    }
    if (a->pa.protect_system && !a->chat) {
        cli_error(cmd, "--protect-system needs --chat");
        return -1;
    }
    if (a->pa.mode && !strcmp(a->pa.mode, "query_agnostic") && !a->question) {
        cli_error(cmd, "--mode query_agnostic needs a question (-q TEXT) to feed after compression");
        return -1;
    }
    return 0;
}

/* The rest of the prompt (not compressed), then up to n greedy tokens; their
 * ids in *out (malloc'd), their count returned; -1 with err set. */
static int generate(pkv_session *s, const pkv_model *m, const int32_t *rest, int n_rest, int n, int32_t **out,
                    pkv_error *err) {
    *out = NULL;
    if (n_rest > 0 && pkv_prefill(s, rest, n_rest, NULL, NULL, err)) return -1;
    pkv_sampler_params sp;
    pkv_sampler_params_default(&sp); /* temperature 0: greedy */
    pkv_sampler *sampler = pkv_sampler_new(&sp, pkv_n_vocab(m));
    *out = malloc((size_t)(n > 0 ? n : 1) * sizeof **out);
    if (!sampler || !*out) {
        pkv_sampler_free(sampler);
        err->code = PKV_ERR_NOMEM;
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return -1;
    }
    int k = 0;
    while (k < n) {
        int32_t tok = pkv_sample(sampler, pkv_logits(s), err);
        if (tok < 0) {
            pkv_sampler_free(sampler);
            return -1;
        }
        if (pkv_token_is_eog(m, tok)) break;
        (*out)[k++] = tok;
        if (k < n && pkv_decode(s, tok, err)) {
            pkv_sampler_free(sampler);
            return -1;
        }
    }
    pkv_sampler_free(sampler);
    return k;
}

static void print_table(const pkv_session *s, const pkv_model *m, const keep_map *km, const int32_t *toks, int n_tok,
                        const pkv_prefill_stats *ps, const char *desc, long n_show, bool clusters) {
    printf("press %s on %d prompt tokens: cache %.2f MiB full -> %.2f MiB kept, press %.1f ms\n", desc, n_tok,
           ps->cache_bytes_full / 1048576.0, ps->cache_bytes / 1048576.0, ps->press_seconds * 1e3);
    printf("%-7s %-6s %s\n", "layer", "heads", "rows kept per head");
    for (int f = 0; f < km->n_full; f++) {
        printf("%-7d %-6d", km->full[f], km->heads[f]);
        for (int h = 0; h < km->heads[f]; h++) printf(" %d", pkv_session_head_rows(s, km->full[f], h));
        putchar('\n');
    }
    int never = 0, always = 0;
    for (int t = 0; t < n_tok; t++) {
        int k = kept_all_layers(km, n_tok, t);
        never += k == 0;
        always += k == km->total_heads;
    }
    printf("tokens kept by every head: %d; by none: %d; of %d\n", always, never, n_tok);
    char piece[128];
    for (int t = 0; t < n_tok && t < n_show && !clusters; t++) {
        int pl = pkv_token_to_piece(m, toks[t], true, piece, sizeof piece);
        if (pl > (int)sizeof piece) pl = sizeof piece;
        printf("%6d %3d/%-3d ", t, kept_all_layers(km, n_tok, t), km->total_heads);
        for (int k = 0; k < pl && k >= 0; k++) putchar(piece[k] == '\n' ? ' ' : piece[k]);
        putchar('\n');
    }
}

int cmd_inspect(int argc, char **argv) {
    const char *cmd = "inspect";
    inspect_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc > 0 ? 0 : EXIT_USAGE;
    pkv_press_cfg *press = press_args_build(&a.pa, cmd);
    if (!press) return EXIT_USAGE;
    cluster_watch cw = {.n_show = a.n_show, .summary = a.clusters && !strcmp(a.clusters, "all")};
    int watch_layer = -1, watch_head = -1;
    if (a.clusters && !cw.summary) {
        char tail;
        if (sscanf(a.clusters, "%d:%d%c", &watch_layer, &watch_head, &tail) != 2 || watch_layer < 0 ||
            watch_head < 0) {
            cli_error(cmd, "--clusters expects LAYER:HEAD (e.g. 5:0) or all, got '%s'", a.clusters);
            pkv_press_cfg_free(press);
            return EXIT_USAGE;
        }
    }
    if (a.clusters) {
        pkv_error werr;
        pkv_press_observer ob = {.layer = watch_layer, .head = watch_head, .clusters = on_clusters, .user = &cw};
        if (pkv_press_cfg_observe(press, &ob, &werr)) {
            cli_error(cmd, "--clusters: %s", werr.msg);
            pkv_press_cfg_free(press);
            return EXIT_USAGE;
        }
    }
    size_t len = 0;
    char *text = a.file ? cli_read_file(cmd, a.file, &len) : NULL;
    if (a.file && !text) {
        pkv_press_cfg_free(press);
        return EXIT_RUNTIME;
    }
    pkv_model *m = cli_load_model(cmd, a.model_path, PKV_SIMD_AUTO);
    int rc = EXIT_RUNTIME;
    pkv_prompt_tokens pt = {0};
    pkv_session *s = NULL;
    keep_map km = {0};
    int32_t *answer = NULL;
    if (!m) goto done;
    pkv_error err;
    pkv_prompt_parts parts = {.system = a.system, .context = text ? text : a.prompt, .question = a.question,
                              .chat = a.chat};
    if (pkv_prompt_tokenize(m, &parts, &pt, &err)) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    /* kvpress's protocol (as promptkv eval): the context, and in query-aware
     * mode the question, are compressed; the template's tail is fed after */
    bool agnostic = a.pa.mode && !strcmp(a.pa.mode, "query_agnostic");
    int n_tok = agnostic ? pt.context_end : pt.question_end;
    if (n_tok <= 0) {
        cli_error(cmd, "the prompt is empty");
        goto done;
    }
    if (a.pa.protect_system && pt.system_end > 0 && pkv_press_cfg_add_protect(press, 0, pt.system_end, &err)) {
        cli_error(cmd, "%s", err.msg);
        rc = EXIT_USAGE;
        goto done;
    }
    cw.m = m;
    cw.toks = pt.tokens;
    cw.n_tok = n_tok;
    s = pkv_session_new(m, &a.so, &err);
    pkv_prefill_stats ps;
    if (!s || pkv_prefill(s, pt.tokens, n_tok, press, &ps, &err)) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (a.clusters && !cw.n_views) {
        cli_error(cmd, "--clusters %s: no such compressed full-attention layer and head (see the table below)",
                  a.clusters);
        rc = EXIT_USAGE;
    }
    if (build_map(s, n_tok, &km)) {
        cli_error(cmd, "out of memory");
        goto done;
    }
    char desc[160];
    pkv_press_cfg_describe(press, desc, sizeof desc);
    bool json_stdout = a.json && !strcmp(a.json, "-");
    if (!json_stdout) print_table(s, m, &km, pt.tokens, n_tok, &ps, desc, a.n_show, a.clusters != NULL);
    int n_answer = 0;
    if (a.n_predict > 0) {
        n_answer = generate(s, m, pt.tokens + n_tok, pt.n_tokens - n_tok, (int)a.n_predict, &answer, &err);
        if (n_answer < 0) {
            cli_error(cmd, "%s", err.msg);
            goto done;
        }
    }
    if (!json_stdout) {
        if (answer) {
            printf("answer (%d tokens, greedy): ", n_answer);
            char piece[256];
            for (int i = 0; i < n_answer; i++) {
                int pl = pkv_token_to_piece(m, answer[i], false, piece, sizeof piece);
                if (pl > 0) fwrite(piece, 1, pl < (int)sizeof piece ? (size_t)pl : sizeof piece, stdout);
            }
            putchar('\n');
        }
    }
    if (a.html) {
        if (write_html(a.html, m, pt.tokens, n_tok, &km, desc)) {
            cli_error(cmd, "cannot write %s", a.html);
            goto done;
        }
        if (!json_stdout) printf("wrote %s\n", a.html);
    }
    if (a.json) {
        inspect_report r = {.model = a.model_path, .press = desc, .mode = agnostic ? "query_agnostic" : "query_aware",
                            .prompt = &pt, .n_compressed = n_tok, .stats = &ps, .answer = answer,
                            .n_answer = n_answer};
        if (inspect_write_json(a.json, s, m, &r)) {
            cli_error(cmd, "cannot write %s", a.json);
            goto done;
        }
        if (!json_stdout) printf("wrote %s\n", a.json);
    }
    if (rc != EXIT_USAGE) rc = 0;
done:
    free_map(&km);
    free(answer);
    pkv_session_free(s);
    pkv_prompt_tokens_free(&pt);
    free(text);
    pkv_model_free(m);
    pkv_press_cfg_free(press);
    return rc;
}
