/*
 * promptkv perplexity: the same measurement as llama.cpp's llama-perplexity
 * (tools/perplexity): the text is tokenized once with BOS, cut into chunks of
 * n_ctx tokens; each chunk starts from an empty cache with its first token
 * replaced by BOS, and only the second half of each chunk is scored, so every
 * scored token has at least n_ctx/2 tokens of context.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"

static const char PPL_USAGE[] =
    "usage: promptkv perplexity -m MODEL -f FILE [-c N_CTX] [-t THREADS] [--chunks N] [--cache-type f16|f32]\n"
    "\n"
    "Perplexity of a text, computed like llama-perplexity (chunks of N_CTX tokens, default 512,\n"
    "second half of each chunk scored). Needs at least 2 x N_CTX tokens.\n";

typedef struct {
    const int32_t *targets; /* token that follows each position of the chunk */
    int first;              /* first scored position */
    int n_vocab;
    double nll, nll2;
    long count;
} ppl_acc;

static void score_row(void *user, int index, const float *logits) {
    ppl_acc *a = user;
    if (index < a->first || a->targets[index] < 0) return;
    float mx = logits[0];
    for (int i = 1; i < a->n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < a->n_vocab; i++) sum += exp((double)logits[i] - mx);
    double nll = -((double)logits[a->targets[index]] - mx - log(sum));
    a->nll += nll;
    a->nll2 += nll * nll;
    a->count++;
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
        } else if (!strcmp(f, "--chunks")) {
            if (!cli_int(cmd, f, v, 1, 1 << 20, &max_chunks)) return EXIT_USAGE;
        } else if (!strcmp(f, "--cache-type")) {
            if (!strcmp(v, "f32")) so.cache_type = PKV_CACHE_F32;
            else if (strcmp(v, "f16")) {
                cli_error(cmd, "--cache-type must be f16 or f32");
                return EXIT_USAGE;
            }
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
    pkv_model *m = cli_load_model(cmd, model_path, PKV_SIMD_AUTO);
    if (!m) {
        free(text);
        return EXIT_RUNTIME;
    }
    int rc = EXIT_RUNTIME;
    pkv_error err;
    int cap = (int)(len + 16);
    int32_t *tokens = malloc((size_t)cap * sizeof *tokens);
    int32_t *chunk = malloc((size_t)n_ctx * sizeof *chunk);
    int32_t *targets = malloc((size_t)n_ctx * sizeof *targets);
    pkv_session *s = NULL;
    int n_tok = tokens ? pkv_tokenize(m, text, len, true, false, tokens, cap, &err) : -1;
    if (n_tok < 0 || !chunk || !targets) {
        cli_error(cmd, "%s", n_tok < 0 && tokens ? err.msg : "out of memory");
        goto done;
    }
    if (n_tok < 2 * n_ctx) {
        cli_error(cmd, "%s has %d tokens; perplexity with a context of %ld needs at least %ld", file, n_tok, n_ctx,
                  2 * n_ctx);
        goto done;
    }
    so.n_ctx = (int)n_ctx;
    s = pkv_session_new(m, &so, &err);
    if (!s) {
        cli_error(cmd, "%s", err.msg);
        goto done;
    }
    long n_chunks = n_tok / n_ctx;
    if (max_chunks > 0 && max_chunks < n_chunks) n_chunks = max_chunks;
    ppl_acc acc = {.targets = targets, .first = (int)(n_ctx / 2), .n_vocab = pkv_n_vocab(m)};
    fprintf(stderr, "perplexity: %d tokens, %ld chunks of %ld\n", n_tok, n_chunks, n_ctx);
    for (long c = 0; c < n_chunks; c++) {
        long start = c * n_ctx;
        memcpy(chunk, tokens + start, (size_t)n_ctx * sizeof *chunk);
        if (pkv_token_bos(m) >= 0 && tokens[0] == pkv_token_bos(m)) chunk[0] = pkv_token_bos(m);
        /* the last position has no target inside the chunk: llama-perplexity scores n_ctx - 1 - first tokens */
        for (long j = 0; j < n_ctx; j++) targets[j] = j + 1 < n_ctx ? tokens[start + j + 1] : -1;
        pkv_session_reset(s);
        if (pkv_eval(s, chunk, (int)n_ctx, score_row, &acc, &err)) {
            cli_error(cmd, "%s", err.msg);
            goto done;
        }
        printf("[%ld]%.4f,", c + 1, exp(acc.nll / acc.count));
        fflush(stdout);
    }
    double mean = acc.nll / acc.count;
    double var = acc.nll2 / acc.count - mean * mean;
    double err_ppl = var > 0 ? exp(mean) * sqrt(var / (acc.count - 1)) : 0.0;
    printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", exp(mean), err_ppl);
    rc = 0;
done:
    pkv_session_free(s);
    free(targets);
    free(chunk);
    free(tokens);
    free(text);
    pkv_model_free(m);
    return rc;
}
