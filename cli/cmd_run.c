/* promptkv run: prompt in, completion streamed out, statistics on stderr. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "commands.h"

static const char RUN_USAGE[] =
    "usage: promptkv run -m MODEL (-p TEXT | -f FILE) [options]\n"
    "\n"
    "Reads the prompt, prefills it, and streams the completion to stdout.\n"
    "Statistics (prompt tokens, prefill and decode tok/s, KV-cache bytes) go to stderr.\n"
    "\n"
    "  -m, --model PATH      GGUF model (llama, qwen2, gemma3)\n"
    "  -p, --prompt TEXT     prompt text\n"
    "  -f, --file PATH       read the prompt from a file\n"
    "  -n, --n-predict N     tokens to generate (default 128; stops earlier at end of generation)\n"
    "  -t, --threads N       threads (default: all CPUs)\n"
    "  -c, --ctx-size N      context length (default: the model's)\n"
    "  -b, --batch N         prefill chunk in tokens (default 512)\n"
    "      --chat            format the prompt as a user turn with the model's chat template\n"
    "      --system TEXT     system prompt (with --chat)\n"
    "      --temp T          temperature (default 0: greedy)\n"
    "      --top-k K         keep the K most likely tokens (0: off)\n"
    "      --top-p P         nucleus sampling (1: off)\n"
    "      --min-p P         drop tokens below P x the top probability (0: off)\n"
    "      --seed S          sampling seed (default 42)\n"
    "      --ignore-eos      keep generating past end-of-generation tokens\n"
    "      --cache-type T    f16 (default) or f32\n"
    "      --simd L          auto, scalar, avx2, avx512 (default auto)\n"
    "  -h, --help            this help\n";

static volatile sig_atomic_t g_interrupted;   /* set by SIGINT; the CLI's only signal state */
static pkv_session *volatile g_running;       /* session a SIGINT should stop */

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    if (g_running) pkv_session_interrupt(g_running);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    const char *model_path;
    const char *prompt;
    const char *prompt_file;
    const char *system;
    long n_predict;
    bool chat;
    bool ignore_eos;
    pkv_session_opts sopts;
    pkv_sampler_params sampling;
    pkv_simd simd;
} run_args;

static int parse_args(int argc, char **argv, run_args *a) {
    const char *cmd = "run";
    memset(a, 0, sizeof *a);
    a->n_predict = 128;
    pkv_session_opts_default(&a->sopts);
    pkv_sampler_params_default(&a->sampling);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v;
        long n;
        double d;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            fputs(RUN_USAGE, stdout);
            return 1;
        }
#define VALUE() \
    if (!(v = cli_value(cmd, argc, argv, &i))) return -1
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) { VALUE(); a->model_path = v; }
        else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) { VALUE(); a->prompt = v; }
        else if (!strcmp(f, "-f") || !strcmp(f, "--file")) { VALUE(); a->prompt_file = v; }
        else if (!strcmp(f, "--system")) { VALUE(); a->system = v; }
        else if (!strcmp(f, "-n") || !strcmp(f, "--n-predict")) {
            VALUE();
            if (!cli_int(cmd, f, v, 0, 1 << 30, &a->n_predict)) return -1;
        } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            VALUE();
            if (!cli_int(cmd, f, v, 1, 1024, &n)) return -1;
            a->sopts.n_threads = (int)n;
        } else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size")) {
            VALUE();
            if (!cli_int(cmd, f, v, 1, 1 << 30, &n)) return -1;
            a->sopts.n_ctx = (int)n;
        } else if (!strcmp(f, "-b") || !strcmp(f, "--batch")) {
            VALUE();
            if (!cli_int(cmd, f, v, 1, 1 << 20, &n)) return -1;
            a->sopts.n_batch = (int)n;
        } else if (!strcmp(f, "--chat")) a->chat = true;
        else if (!strcmp(f, "--ignore-eos")) a->ignore_eos = true;
        else if (!strcmp(f, "--temp")) {
            VALUE();
            if (!cli_float(cmd, f, v, 0.0, 100.0, &d)) return -1;
            a->sampling.temperature = (float)d;
        } else if (!strcmp(f, "--top-k")) {
            VALUE();
            if (!cli_int(cmd, f, v, 0, 1 << 30, &n)) return -1;
            a->sampling.top_k = (int)n;
        } else if (!strcmp(f, "--top-p")) {
            VALUE();
            if (!cli_float(cmd, f, v, 0.0, 1.0, &d)) return -1;
            a->sampling.top_p = (float)d;
        } else if (!strcmp(f, "--min-p")) {
            VALUE();
            if (!cli_float(cmd, f, v, 0.0, 1.0, &d)) return -1;
            a->sampling.min_p = (float)d;
        } else if (!strcmp(f, "--seed")) {
            VALUE();
            if (!cli_u64(cmd, f, v, &a->sampling.seed)) return -1;
        } else if (!strcmp(f, "--cache-type")) {
            VALUE();
            if (!strcmp(v, "f16")) a->sopts.cache_type = PKV_CACHE_F16;
            else if (!strcmp(v, "f32")) a->sopts.cache_type = PKV_CACHE_F32;
            else {
                cli_error(cmd, "--cache-type must be f16 or f32, got '%s'", v);
                return -1;
            }
        } else if (!strcmp(f, "--simd")) {
            VALUE();
            if (!cli_simd(cmd, v, &a->simd)) return -1;
        } else {
            cli_error(cmd, "unknown option '%s' (see promptkv run --help)", f);
            return -1;
        }
#undef VALUE
    }
    if (!a->model_path) {
        cli_error(cmd, "a model is required (-m MODEL)");
        return -1;
    }
    if (!a->prompt == !a->prompt_file) {
        cli_error(cmd, "give exactly one of -p TEXT or -f FILE");
        return -1;
    }
    if (a->system && !a->chat) {
        cli_error(cmd, "--system needs --chat");
        return -1;
    }
    return 0;
}

/* The prompt's tokens (chat-formatted if asked); NULL on error. */
static int32_t *tokenize_prompt(const run_args *a, pkv_model *model, int *n_out) {
    const char *cmd = "run";
    char *text = NULL;
    size_t len;
    if (a->prompt_file) {
        text = cli_read_file(cmd, a->prompt_file, &len);
        if (!text) return NULL;
    } else {
        len = strlen(a->prompt);
        text = malloc(len + 1);
        if (!text) return NULL;
        memcpy(text, a->prompt, len + 1);
    }
    pkv_error err;
    bool add_special = true;
    if (a->chat) {
        pkv_chat_message msgs[2];
        int n_msgs = 0;
        if (a->system) msgs[n_msgs++] = (pkv_chat_message){"system", a->system};
        msgs[n_msgs++] = (pkv_chat_message){"user", text};
        int cap = (int)len + (a->system ? (int)strlen(a->system) : 0) + 1024;
        char *rendered = malloc((size_t)cap);
        int rlen = rendered ? pkv_chat_format(model, msgs, n_msgs, rendered, cap, &err) : -1;
        free(text);
        if (rlen < 0) {
            cli_error(cmd, "%s", rendered ? err.msg : "out of memory");
            free(rendered);
            return NULL;
        }
        text = rendered;
        len = (size_t)rlen;
        add_special = false; /* the template already starts with BOS (engine-notes.md §4.6) */
    }
    int cap = (int)(len + 16 < (size_t)1 << 30 ? len + 16 : (size_t)1 << 30);
    int32_t *tokens = malloc((size_t)cap * sizeof *tokens);
    int n = tokens ? pkv_tokenize(model, text, len, add_special, true, tokens, cap, &err) : -1;
    free(text);
    if (n < 0 || n > cap) {
        cli_error(cmd, "%s", n < 0 && tokens ? err.msg : "cannot tokenize the prompt");
        free(tokens);
        return NULL;
    }
    *n_out = n;
    return tokens;
}

int cmd_run(int argc, char **argv) {
    run_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;

    pkv_model *model = cli_load_model("run", a.model_path, a.simd);
    if (!model) return EXIT_RUNTIME;
    int n_prompt = 0;
    int32_t *prompt = tokenize_prompt(&a, model, &n_prompt);
    if (!prompt) {
        pkv_model_free(model);
        return EXIT_RUNTIME;
    }
    if (n_prompt == 0) {
        cli_error("run", "the prompt is empty");
        free(prompt);
        pkv_model_free(model);
        return EXIT_USAGE;
    }
    pkv_error err;
    pkv_session *s = pkv_session_new(model, &a.sopts, &err);
    pkv_sampler *sampler = s ? pkv_sampler_new(&a.sampling, pkv_n_vocab(model)) : NULL;
    int exit_code = 0;
    if (!s || !sampler) {
        cli_error("run", "%s", s ? "out of memory" : err.msg);
        exit_code = EXIT_RUNTIME;
        goto done;
    }

    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    g_running = s;

    pkv_prefill_stats ps;
    if (pkv_prefill(s, prompt, n_prompt, NULL, &ps, &err)) {
        cli_error("run", "%s", err.msg);
        exit_code = err.code == PKV_ERR_INTERRUPTED ? EXIT_INTERRUPTED : EXIT_RUNTIME;
        goto done;
    }

    int n_gen = 0;
    double t_decode = 0.0;
    char piece[256];
    for (;;) {
        int32_t tok = pkv_sample(sampler, pkv_logits(s));
        if (!a.ignore_eos && pkv_token_is_eog(model, tok)) break;
        int plen = pkv_token_to_piece(model, tok, false, piece, sizeof piece);
        if (plen > 0) fwrite(piece, 1, (size_t)plen, stdout);
        fflush(stdout);
        n_gen++;
        if (n_gen >= a.n_predict || g_interrupted) break;
        double t0 = now_seconds();
        if (pkv_decode(s, tok, &err)) {
            if (err.code == PKV_ERR_LIMIT) {
                fprintf(stderr, "\nstopped: %s\n", err.msg);
            } else if (err.code != PKV_ERR_INTERRUPTED) {
                cli_error("run", "%s", err.msg);
                exit_code = EXIT_RUNTIME;
            }
            break;
        }
        t_decode += now_seconds() - t0;
    }
    fputc('\n', stdout);
    fflush(stdout);
    if (g_interrupted) exit_code = EXIT_INTERRUPTED;

    int n_decoded = n_gen > 0 ? n_gen - 1 : 0; /* the first token comes from the prefill's logits */
    fprintf(stderr, "prompt tokens:   %d\n", n_prompt);
    fprintf(stderr, "prefill:         %.3f s, %.1f tok/s\n", ps.prefill_seconds,
            n_prompt / (ps.prefill_seconds > 0 ? ps.prefill_seconds : 1e-9));
    fprintf(stderr, "decode:          %d tokens, %.1f tok/s\n", n_gen,
            n_decoded > 0 ? n_decoded / t_decode : 0.0);
    fprintf(stderr, "kv cache:        %.2f MiB (%llu bytes)\n", pkv_session_cache_bytes(s) / 1048576.0,
            (unsigned long long)pkv_session_cache_bytes(s));
done:
    g_running = NULL;
    pkv_sampler_free(sampler);
    pkv_session_free(s);
    free(prompt);
    pkv_model_free(model);
    return exit_code;
}
