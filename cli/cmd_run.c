/* promptkv run: prompt in, completion streamed out, statistics on stderr. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "base/clock.h"
#include "commands.h"
#include "press_args.h"

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
    "  -q, --question TEXT   a question appended after the prompt; with --mode query_agnostic the\n"
    "                        prompt is compressed first and the question fed on top (kvpress's protocol)\n"
    "      --question-file F read the question from a file\n"
    "  -h, --help            this help (and --help-press for every press and its options)\n";

static volatile sig_atomic_t g_interrupted;   /* set by SIGINT; the CLI's only signal state */
static pkv_session *volatile g_running;       /* session a SIGINT should stop */

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    if (g_running) pkv_session_interrupt(g_running);
}

typedef struct {
    const char *model_path;
    const char *prompt;
    const char *prompt_file;
    const char *system;
    const char *question;
    const char *question_file;
    press_args press;
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
        if (!strcmp(f, "-h") || !strcmp(f, "--help") || !strcmp(f, "--help-press")) {
            fputs(RUN_USAGE, stdout);
            press_args_usage(stdout);
            return 1;
        }
        int pr = press_args_parse(&a->press, cmd, argc, argv, &i);
        if (pr < 0) return -1;
        if (pr > 0) continue;
#define VALUE() \
    if (!(v = cli_value(cmd, argc, argv, &i))) return -1
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) { VALUE(); a->model_path = v; }
        else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) { VALUE(); a->prompt = v; }
        else if (!strcmp(f, "-f") || !strcmp(f, "--file")) { VALUE(); a->prompt_file = v; }
        else if (!strcmp(f, "--system")) { VALUE(); a->system = v; }
        else if (!strcmp(f, "-q") || !strcmp(f, "--question")) { VALUE(); a->question = v; }
        else if (!strcmp(f, "--question-file")) { VALUE(); a->question_file = v; }
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
            if (!cli_cache_type(cmd, v, &a->sopts.cache_type)) return -1;
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
    if (a->question && a->question_file) {
        cli_error(cmd, "give at most one of --question and --question-file");
        return -1;
    }
    if (a->press.protect_system && !(a->chat && a->system)) {
        cli_error(cmd, "--protect-system needs --chat and --system");
        return -1;
    }
    if (a->press.mode && !strcmp(a->press.mode, "query_agnostic") && !a->question && !a->question_file) {
        cli_error(cmd, "--mode query_agnostic needs a question (--question or --question-file) to feed after compression");
        return -1;
    }
    return 0;
}

/* The prompt as token ids: the context part (compressed) and the question
 * part (fed after compression in query_agnostic mode; simply the tail of the
 * prompt otherwise). */
typedef struct {
    int32_t *tokens;
    int n_context;  /* tokens before the question */
    int n_total;
    int n_system;   /* tokens of the system prompt's rendering (chat) */
} prompt_tokens;

static char *read_text_arg(const char *cmd, const char *inline_text, const char *file, size_t *len) {
    if (file) return cli_read_file(cmd, file, len);
    if (!inline_text) {
        *len = 0;
        return calloc(1, 1);
    }
    *len = strlen(inline_text);
    char *t = malloc(*len + 1);
    if (t) memcpy(t, inline_text, *len + 1);
    return t;
}

/* Appends the tokens of text[0, len) to pt (grown as needed); -1 on error. */
static int append_tokens(const char *cmd, pkv_model *model, prompt_tokens *pt, int *cap, const char *text, size_t len,
                         bool add_special) {
    pkv_error err;
    if ((size_t)*cap - (size_t)pt->n_total < len + 16) {
        size_t want = (size_t)pt->n_total + len + 16;
        if (want > (size_t)1 << 30) {
            cli_error(cmd, "the prompt is too long");
            return -1;
        }
        int32_t *t = realloc(pt->tokens, want * sizeof *t);
        if (!t) {
            cli_error(cmd, "out of memory");
            return -1;
        }
        pt->tokens = t;
        *cap = (int)want;
    }
    int n = pkv_tokenize(model, text, len, add_special, true, pt->tokens + pt->n_total, *cap - pt->n_total, &err);
    if (n < 0) {
        cli_error(cmd, "%s", err.msg);
        return -1;
    }
    pt->n_total += n;
    return 0;
}

static int tokenize_prompt(const run_args *a, pkv_model *model, prompt_tokens *pt) {
    const char *cmd = "run";
    memset(pt, 0, sizeof *pt);
    size_t ctx_len, q_len;
    char *ctx = read_text_arg(cmd, a->prompt, a->prompt_file, &ctx_len);
    char *question = ctx ? read_text_arg(cmd, a->question, a->question_file, &q_len) : NULL;
    int cap = 0, rc = -1;
    char *rendered = NULL;
    if (!ctx || !question) goto out;
    if (!a->chat) {
        if (append_tokens(cmd, model, pt, &cap, ctx, ctx_len, true)) goto out;
        pt->n_context = pt->n_total;
        if (q_len && append_tokens(cmd, model, pt, &cap, question, q_len, false)) goto out;
    } else {
        /* the user turn holds context + question; the question and everything after
         * it (end of turn, the assistant header) is the part fed after compression */
        char *content = malloc(ctx_len + q_len + 1);
        if (!content) goto out;
        memcpy(content, ctx, ctx_len);
        memcpy(content + ctx_len, question, q_len + 1);
        pkv_chat_message msgs[2];
        int n_msgs = 0;
        if (a->system) msgs[n_msgs++] = (pkv_chat_message){"system", a->system};
        msgs[n_msgs++] = (pkv_chat_message){"user", content};
        int rcap = (int)(ctx_len + q_len + (a->system ? strlen(a->system) : 0) + 1024);
        rendered = malloc((size_t)rcap);
        pkv_error err;
        int system_end = 0;
        int rlen = rendered ? pkv_chat_format(model, msgs, n_msgs, rendered, rcap, &system_end, &err) : -1;
        free(content);
        if (rlen < 0 || rlen >= rcap) {
            cli_error(cmd, "%s", rlen < 0 && rendered ? err.msg : "cannot format the chat prompt");
            goto out;
        }
        /* split where the question starts (its last occurrence), else at the end of the context */
        size_t split = (size_t)rlen;
        if (q_len) {
            for (size_t i = (size_t)rlen - q_len + 1; i-- > 0;)
                if (!memcmp(rendered + i, question, q_len)) {
                    split = i;
                    break;
                }
        }
        if (a->press.protect_system && system_end > 0) {
            if (append_tokens(cmd, model, pt, &cap, rendered, (size_t)system_end, false)) goto out;
            pt->n_system = pt->n_total;
            pt->n_total = 0; /* counted only: the whole text is tokenized below */
        }
        /* the template already starts with BOS (engine-notes.md §4.6) */
        if (append_tokens(cmd, model, pt, &cap, rendered, split, false)) goto out;
        pt->n_context = pt->n_total;
        if (append_tokens(cmd, model, pt, &cap, rendered + split, (size_t)rlen - split, false)) goto out;
    }
    rc = 0;
out:
    free(rendered);
    free(ctx);
    free(question);
    return rc;
}

static double mib(uint64_t b) { return b / 1048576.0; }

/* Per-layer rows after compression, one line. */
static void print_rows_per_layer(const pkv_session *s, int n_prompt) {
    fprintf(stderr, "rows kept:       ");
    int n_layers = pkv_session_n_layers(s);
    int printed = 0;
    for (int l = 0; l < n_layers; l++) {
        if (!pkv_session_layer_is_full(s, l)) continue;
        int heads = pkv_session_n_heads(s, l), total = 0;
        for (int h = 0; h < heads; h++) total += pkv_session_head_rows(s, l, h);
        fprintf(stderr, "%sL%d %d", printed++ ? ", " : "", l, heads ? total / heads : 0);
    }
    fprintf(stderr, " (per head, of %d)", n_prompt);
    if (printed < n_layers) fprintf(stderr, "; %d sliding-window layers keep their window", n_layers - printed);
    fputc('\n', stderr);
}

int cmd_run(int argc, char **argv) {
    run_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;

    pkv_press_cfg *press = press_args_build(&a.press, "run");
    if (!press) return EXIT_USAGE;
    pkv_model *model = cli_load_model("run", a.model_path, a.simd);
    if (!model) {
        pkv_press_cfg_free(press);
        return EXIT_RUNTIME;
    }
    prompt_tokens pt;
    if (tokenize_prompt(&a, model, &pt)) {
        free(pt.tokens);
        pkv_press_cfg_free(press);
        pkv_model_free(model);
        return EXIT_RUNTIME;
    }
    int32_t *prompt = pt.tokens;
    int n_prompt = pt.n_total;
    if (n_prompt == 0) {
        cli_error("run", "the prompt is empty");
        free(prompt);
        pkv_press_cfg_free(press);
        pkv_model_free(model);
        return EXIT_USAGE;
    }
    pkv_error perr;
    if (pt.n_system > 0 && pkv_press_cfg_add_protect(press, 0, pt.n_system, &perr)) {
        cli_error("run", "%s", perr.msg);
        free(prompt);
        pkv_press_cfg_free(press);
        pkv_model_free(model);
        return EXIT_USAGE;
    }
    bool agnostic = a.press.mode && !strcmp(a.press.mode, "query_agnostic");
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

    /* query-agnostic: compress the context alone, then feed the question uncompressed */
    int n_first = agnostic ? pt.n_context : n_prompt;
    pkv_prefill_stats ps, ps_q = {0};
    if (pkv_prefill(s, prompt, n_first, press, &ps, &err) ||
        (n_first < n_prompt && pkv_prefill(s, prompt + n_first, n_prompt - n_first, NULL, &ps_q, &err))) {
        cli_error("run", "%s", err.msg);
        exit_code = err.code == PKV_ERR_INTERRUPTED ? EXIT_INTERRUPTED : EXIT_RUNTIME;
        goto done;
    }
    ps.prefill_seconds += ps_q.prefill_seconds;
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
        double t0 = pkv_now_seconds();
        if (pkv_decode(s, tok, &err)) {
            if (err.code == PKV_ERR_LIMIT) {
                fprintf(stderr, "\nstopped: %s\n", err.msg);
            } else if (err.code != PKV_ERR_INTERRUPTED) {
                cli_error("run", "%s", err.msg);
                exit_code = EXIT_RUNTIME;
            }
            break;
        }
        t_decode += pkv_now_seconds() - t0;
    }
    fputc('\n', stdout);
    fflush(stdout);
    if (g_interrupted) exit_code = EXIT_INTERRUPTED;

    int n_decoded = n_gen > 0 ? n_gen - 1 : 0; /* the first token comes from the prefill's logits */
    char desc[160];
    pkv_press_cfg_describe(press, desc, sizeof desc);
    fprintf(stderr, "prompt tokens:   %d", n_prompt);
    if (pt.n_context < n_prompt) fprintf(stderr, " (context %d + question %d)", pt.n_context, n_prompt - pt.n_context);
    fputc('\n', stderr);
    fprintf(stderr, "press:           %s%s\n", desc, ps.compressed ? (agnostic ? ", query-agnostic" : ", query-aware") : "");
    fprintf(stderr, "prefill:         %.3f s, %.1f tok/s\n", ps.prefill_seconds,
            n_prompt / (ps.prefill_seconds > 0 ? ps.prefill_seconds : 1e-9));
    if (ps.compressed) {
        fprintf(stderr, "press time:      %.1f ms (%.2f%% of prefill)\n", ps.press_seconds * 1e3,
                100.0 * ps.press_seconds / (ps.prefill_seconds > 0 ? ps.prefill_seconds : 1e-9));
        fprintf(stderr, "kv cache:        %.2f MiB full -> %.2f MiB kept after the prompt (%.1fx smaller)\n",
                mib(ps.cache_bytes_full), mib(ps.cache_bytes),
                ps.cache_bytes ? (double)ps.cache_bytes_full / ps.cache_bytes : 0.0);
        print_rows_per_layer(s, n_first);
    }
    fprintf(stderr, "decode:          %d tokens, %.1f tok/s (%.2f ms/token)\n", n_gen,
            n_decoded > 0 ? n_decoded / t_decode : 0.0, n_decoded > 0 ? 1e3 * t_decode / n_decoded : 0.0);
    fprintf(stderr, "kv cache now:    %.2f MiB (%llu bytes)\n", mib(pkv_session_cache_bytes(s)),
            (unsigned long long)pkv_session_cache_bytes(s));
done:
    g_running = NULL;
    pkv_sampler_free(sampler);
    pkv_session_free(s);
    free(prompt);
    pkv_press_cfg_free(press);
    pkv_model_free(model);
    return exit_code;
}
