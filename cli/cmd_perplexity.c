/* promptkv perplexity: the same measurement as llama.cpp's llama-perplexity
 * (pkv_perplexity in src/eval/perplexity.c), on the same file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "eval/perplexity.h"

static const char PPL_USAGE[] =
    "usage: promptkv perplexity -m MODEL -f FILE [-c N_CTX] [-t THREADS] [--chunks N]\n"
    "                           [--cache-type T] [--cache-type-k T] [--cache-type-v T]\n"
    "                           [-b N_BATCH] [--residual-type T] [--residual-spill DIR]\n"
    "\n"
    "Perplexity of a text, computed like llama-perplexity (chunks of N_CTX tokens, default 512,\n"
    "second half of each chunk scored). Needs at least 2 x N_CTX tokens. Cache types T: f16 (default),\n"
    "f32, q8_0, q4_0 (--cache-type sets keys and values; q8_0 and q4_0 need head sizes divisible by 32).\n"
    "-b: the prefill chunk (default 512); --residual-type f32 (default), f16 or q8_0: how a chunk of\n"
    "N_CTX > N_BATCH tokens keeps its residual stream between layers, and --residual-spill DIR keeps it\n"
    "in a file in DIR instead of memory (docs/compression.md).\n";

static void show_chunk(void *user, int chunk, double ppl) {
    (void)user;
    printf("[%d]%.4f,", chunk, ppl);
    fflush(stdout);
}

int cmd_perplexity(int argc, char **argv) {
    const char *cmd = "perplexity", *model_path = NULL, *file = NULL, *v;
    long n_ctx = 512, max_chunks = -1, n;
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            fputs(PPL_USAGE, stdout);
            return 0;
        }
        if (!(v = cli_value(cmd, argc, argv, &i))) return EXIT_USAGE;
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) model_path = v;
        else if (!strcmp(f, "-f") || !strcmp(f, "--file")) file = v;
        else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size")) {
            if (!cli_int(cmd, f, v, 4, 1 << 20, &n_ctx)) return EXIT_USAGE;
        } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            if (!cli_int(cmd, f, v, 1, 1024, &n)) return EXIT_USAGE;
            so.n_threads = (int)n;
        } else if (!strcmp(f, "-b") || !strcmp(f, "--batch")) {
            if (!cli_int(cmd, f, v, 1, 1 << 20, &n)) return EXIT_USAGE;
            so.n_batch = (int)n;
        } else if (!strcmp(f, "--residual-type")) {
            if (!cli_residual_type(cmd, f, v, &so.residual_type)) return EXIT_USAGE;
        } else if (!strcmp(f, "--residual-spill")) {
            so.residual_spill_dir = v;
        } else if (!strcmp(f, "--chunks")) {
            if (!cli_int(cmd, f, v, 1, 1 << 20, &max_chunks)) return EXIT_USAGE;
        } else if (!strcmp(f, "--cache-type")) {
            if (!cli_cache_type(cmd, f, v, &so.cache_type_k)) return EXIT_USAGE;
            so.cache_type_v = so.cache_type_k;
        } else if (!strcmp(f, "--cache-type-k") || !strcmp(f, "-ctk")) {
            if (!cli_cache_type(cmd, f, v, &so.cache_type_k)) return EXIT_USAGE;
        } else if (!strcmp(f, "--cache-type-v") || !strcmp(f, "-ctv")) {
            if (!cli_cache_type(cmd, f, v, &so.cache_type_v)) return EXIT_USAGE;
        } else {
            cli_error(cmd, "unknown option '%s' (see promptkv perplexity --help)", f);
            return EXIT_USAGE;
        }
    }
    if (!model_path || !file) {
        cli_error(cmd, "need -m MODEL and -f FILE");
        return EXIT_USAGE;
    }
    size_t len;
    char *text = cli_read_file(cmd, file, &len);
    if (!text) return EXIT_RUNTIME;
    /* llama.cpp's -f drops one trailing newline; do the same so both see the same tokens */
    if (len > 0 && text[len - 1] == '\n') text[--len] = '\0';
    pkv_model *m = cli_load_model(cmd, model_path, PKV_SIMD_AUTO);
    if (!m) {
        free(text);
        return EXIT_RUNTIME;
    }
    int rc = EXIT_RUNTIME;
    pkv_error err;
    /* a buffer that grows: byte fallback gives up to three ids per input byte */
    int32_t *tokens = NULL;
    int n_tok = 0, cap = 0;
    pkv_session *s = NULL;
    if (pkv_tokenize_append(m, text, len, true, false, &tokens, &n_tok, &cap, &err) < 0) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    so.n_ctx = (int)n_ctx;
    s = pkv_session_new(m, &so, &err);
    if (!s) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    fprintf(stderr, "perplexity: %d tokens, chunks of %ld\n", n_tok, n_ctx);
    pkv_ppl_result res;
    if (pkv_perplexity(s, tokens, n_tok, (int)n_ctx, (int)max_chunks, show_chunk, NULL, &res, &err)) {
        cli_error(cmd, "%s: %s", file, err.msg);
        goto done;
    }
    printf("\nFinal estimate: PPL = %.4f +/- %.5f (%d chunks, %ld tokens scored)\n", res.ppl, res.ppl_err,
           res.n_chunks, res.n_scored);
    rc = 0;
done:
    pkv_session_free(s);
    free(tokens);
    free(text);
    pkv_model_free(m);
    return rc;
}
