/*
 * promptkv inspect: which prompt tokens survive a press, so a user can see
 * what the model will still "see". Prints rows kept per layer and head, and
 * writes an HTML page shading each prompt token by how many heads kept it
 * (all full-attention layers together, then one section per layer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "press_args.h"

static const char INSPECT_USAGE[] =
    "usage: promptkv inspect -m MODEL (-p TEXT | -f FILE) --press NAME (--budget C | --ratio r) [options]\n"
    "\n"
    "Prefills the prompt with the press and shows which tokens each full-attention layer and head kept.\n"
    "  --html FILE       write a page that shades every prompt token by how many heads kept it\n"
    "  --tokens N        print the first N tokens with their keep counts (default 0)\n"
    "  -t, --threads N   threads\n"
    "  -c, --ctx-size N  context length (default: the model's)\n"
    "  -h, --help        this help; press options as in promptkv run --help-press\n";

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

int cmd_inspect(int argc, char **argv) {
    const char *cmd = "inspect", *model_path = NULL, *prompt = NULL, *file = NULL, *html = NULL, *v;
    long n_show = 0, n;
    press_args pa;
    memset(&pa, 0, sizeof pa);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            fputs(INSPECT_USAGE, stdout);
            return 0;
        }
        int pr = press_args_parse(&pa, cmd, argc, argv, &i);
        if (pr < 0) return EXIT_USAGE;
        if (pr > 0) continue;
        if (!(v = cli_value(cmd, argc, argv, &i))) return EXIT_USAGE;
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) model_path = v;
        else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) prompt = v;
        else if (!strcmp(f, "-f") || !strcmp(f, "--file")) file = v;
        else if (!strcmp(f, "--html")) html = v;
        else if (!strcmp(f, "--tokens")) {
            if (!cli_int(cmd, f, v, 0, 1 << 30, &n_show)) return EXIT_USAGE;
        } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            if (!cli_int(cmd, f, v, 1, 1024, &n)) return EXIT_USAGE;
            so.n_threads = (int)n;
        } else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size")) {
            if (!cli_int(cmd, f, v, 1, 1 << 30, &n)) return EXIT_USAGE;
            so.n_ctx = (int)n;
        } else {
            cli_error(cmd, "unknown option '%s' (see promptkv inspect --help)", f);
            return EXIT_USAGE;
        }
    }
    if (!model_path || !prompt == !file) {
        cli_error(cmd, "need -m MODEL and exactly one of -p TEXT or -f FILE");
        return EXIT_USAGE;
    }
    if (!pa.press) {
        cli_error(cmd, "choose a press to inspect (--press NAME)");
        return EXIT_USAGE;
    }
    pkv_press_cfg *press = press_args_build(&pa, cmd);
    if (!press) return EXIT_USAGE;
    size_t len = 0;
    char *text = file ? cli_read_file(cmd, file, &len) : NULL;
    if (file && !text) {
        pkv_press_cfg_free(press);
        return EXIT_RUNTIME;
    }
    if (!file) len = strlen(prompt);
    pkv_model *m = cli_load_model(cmd, model_path, PKV_SIMD_AUTO);
    int rc = EXIT_RUNTIME;
    int32_t *toks = NULL;
    pkv_session *s = NULL;
    keep_map km = {0};
    if (!m) goto done;
    pkv_error err;
    toks = malloc((len + 16) * sizeof *toks);
    int n_tok = toks ? pkv_tokenize(m, text ? text : prompt, len, true, true, toks, (int)len + 16, &err) : -1;
    if (n_tok <= 0) {
        cli_error(cmd, "%s", n_tok < 0 && toks ? err.msg : "the prompt is empty");
        goto done;
    }
    s = pkv_session_new(m, &so, &err);
    pkv_prefill_stats ps;
    if (!s || pkv_prefill(s, toks, n_tok, press, &ps, &err)) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (build_map(s, n_tok, &km)) {
        cli_error(cmd, "out of memory");
        goto done;
    }
    char desc[160];
    pkv_press_cfg_describe(press, desc, sizeof desc);
    printf("press %s on %d prompt tokens: cache %.2f MiB full -> %.2f MiB kept, press %.1f ms\n", desc, n_tok,
           ps.cache_bytes_full / 1048576.0, ps.cache_bytes / 1048576.0, ps.press_seconds * 1e3);
    printf("%-7s %-6s %s\n", "layer", "heads", "rows kept per head");
    for (int f = 0; f < km.n_full; f++) {
        printf("%-7d %-6d", km.full[f], km.heads[f]);
        for (int h = 0; h < km.heads[f]; h++) printf(" %d", pkv_session_head_rows(s, km.full[f], h));
        putchar('\n');
    }
    int never = 0, always = 0;
    for (int t = 0; t < n_tok; t++) {
        int k = kept_all_layers(&km, n_tok, t);
        never += k == 0;
        always += k == km.total_heads;
    }
    printf("tokens kept by every head: %d; by none: %d; of %d\n", always, never, n_tok);
    char piece[128];
    for (int t = 0; t < n_tok && t < n_show; t++) {
        int pl = pkv_token_to_piece(m, toks[t], true, piece, sizeof piece);
        if (pl > (int)sizeof piece) pl = sizeof piece;
        printf("%6d %3d/%-3d ", t, kept_all_layers(&km, n_tok, t), km.total_heads);
        for (int k = 0; k < pl && k >= 0; k++) putchar(piece[k] == '\n' ? ' ' : piece[k]);
        putchar('\n');
    }
    if (html) {
        if (write_html(html, m, toks, n_tok, &km, desc)) {
            cli_error(cmd, "cannot write %s", html);
            goto done;
        }
        printf("wrote %s\n", html);
    }
    rc = 0;
done:
    free_map(&km);
    pkv_session_free(s);
    free(toks);
    free(text);
    pkv_model_free(m);
    pkv_press_cfg_free(press);
    return rc;
}
