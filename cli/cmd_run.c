/* promptkv run: prompt in, completion streamed out, statistics on stderr. */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "commands.h"
#include "flags.h"
#include "press_args.h"

static const char RUN_USAGE[] =
    "usage: promptkv run -m MODEL (-p TEXT | -f FILE | --load-cache F) [options]\n"
    "\n"
    "Reads the prompt, prefills it, and streams the completion to stdout.\n"
    "Statistics (prompt tokens, prefill and decode tok/s, KV-cache bytes) go to stderr.\n"
    "\n"
    "  -m, --model PATH      GGUF model (llama, qwen2, qwen3, gemma3, phi3)\n"
    "  -p, --prompt TEXT     prompt text\n"
    "  -f, --file PATH       read the prompt from a file\n"
    "  -n, --n-predict N     tokens to generate (default 128; stops earlier at end of generation)\n"
    "  -t, --threads N       threads (default: all CPUs)\n"
    "  -c, --ctx-size N      context length (default: the model's)\n"
    "  -b, --batch N         prefill chunk in tokens (default 512)\n"
    "      --chat            format the prompt as a user turn with the model's chat template\n"
    "      --system TEXT     system prompt (with --chat)\n"
    "      --chat-template T the chat format instead of the one detected in the model's template: a name\n"
    "                        (chatml, llama2, llama3, mistral-v7, phi3, gemma, deepseek3, ...) or a template text\n"
    "      --temp T          temperature (default 0: greedy)\n"
    "      --top-k K         keep the K most likely tokens (0: off)\n"
    "      --top-p P         nucleus sampling (1: off)\n"
    "      --min-p P         drop tokens below P x the top probability (0: off)\n"
    "      --seed S          sampling seed (default 42)\n"
    "      --ignore-eos      keep generating past end-of-generation tokens\n"
    "      --cache-type T    how the KV cache stores keys and values: f16 (default), f32, q8_0, q4_0\n"
    "                        (q8_0/q4_0: ggml blocks of 32, for head sizes divisible by 32)\n"
    "      --cache-type-k T, --cache-type-v T\n"
    "                        the same for keys or for values alone (-ctk, -ctv)\n"
    "      --simd L          auto, scalar, avx2, avx512 (default auto)\n"
    "      --gguf-layout     keep the weights in the file's row layout (slower decode; for comparisons)\n"
    "      --residual-type T how a long prompt's prefill keeps its residual stream between layers: f32\n"
    "                        (default), f16 or q8_0 (half or a quarter of its activations, for one\n"
    "                        rounding per layer; docs/compression.md)\n"
    "      --residual-spill DIR keep that stream in a file in DIR between layers instead of memory (on\n"
    "                        disk, not tmpfs; the same bits; read and written once a layer)\n"
    "  -q, --question TEXT   a question appended after the prompt; with --mode query_agnostic the\n"
    "                        prompt is compressed first and the question fed on top (kvpress's protocol)\n"
    "      --question-file F read the question from a file\n"
    "      --save-cache F    save the cache once the press has run (the whole prompt, or with\n"
    "                        --mode query_agnostic the context without the question) to F\n"
    "      --load-cache F    start from a saved cache instead of a prompt; -p/-f and -q are fed after it\n"
    "                        (with --chat: more of the user's text and the question, then the template's\n"
    "                        tail); the press and the system prompt are the saved ones (docs/cache-file.md)\n"
    "  -h, --help            this help (and --help-press for every press and its options)\n";

static volatile sig_atomic_t g_interrupted;   /* set by SIGINT; the CLI's only signal state */
static pkv_session *volatile g_running;       /* session a SIGINT should stop */

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
    if (g_running) pkv_session_interrupt(g_running);
}

typedef struct {
    cli_engine_args engine;
    const char *prompt;
    const char *prompt_file;
    const char *system;
    const char *question;
    const char *question_file;
    const char *save_cache;
    const char *load_cache;
    press_args press;
    int n_predict;
    bool chat;
    bool ignore_eos;
    pkv_session_opts sopts;
    pkv_sampler_params sampling;
} run_args;

static const cli_flag RUN_FLAGS[] = {
    {"--prompt", "-p", CLI_TEXT, offsetof(run_args, prompt), 0, 0, NULL},
    {"--file", "-f", CLI_TEXT, offsetof(run_args, prompt_file), 0, 0, NULL},
    {"--system", NULL, CLI_TEXT, offsetof(run_args, system), 0, 0, NULL},
    {"--question", "-q", CLI_TEXT, offsetof(run_args, question), 0, 0, NULL},
    {"--question-file", NULL, CLI_TEXT, offsetof(run_args, question_file), 0, 0, NULL},
    {"--save-cache", NULL, CLI_TEXT, offsetof(run_args, save_cache), 0, 0, NULL},
    {"--load-cache", NULL, CLI_TEXT, offsetof(run_args, load_cache), 0, 0, NULL},
    {"--n-predict", "-n", CLI_INT, offsetof(run_args, n_predict), 0, 1 << 30, NULL},
    {"--ctx-size", "-c", CLI_INT, offsetof(run_args, sopts.n_ctx), 1, 1 << 30, NULL},
    {"--chat", NULL, CLI_TRUE, offsetof(run_args, chat), 0, 0, NULL},
    {"--ignore-eos", NULL, CLI_TRUE, offsetof(run_args, ignore_eos), 0, 0, NULL},
    {"--temp", NULL, CLI_FLOAT, offsetof(run_args, sampling.temperature), 0.0, 100.0, NULL},
    {"--top-k", NULL, CLI_INT, offsetof(run_args, sampling.top_k), 0, 1 << 30, NULL},
    {"--top-p", NULL, CLI_FLOAT, offsetof(run_args, sampling.top_p), 0.0, 1.0, NULL},
    {"--min-p", NULL, CLI_FLOAT, offsetof(run_args, sampling.min_p), 0.0, 1.0, NULL},
    {"--seed", NULL, CLI_U64, offsetof(run_args, sampling.seed), 0, 0, NULL},
    {"--residual-type", NULL, CLI_RESIDUAL_TYPE, offsetof(run_args, sopts.residual_type), 0, 0, NULL},
    {"--residual-spill", NULL, CLI_TEXT, offsetof(run_args, sopts.residual_spill_dir), 0, 0, NULL},
    {NULL, NULL, 0, 0, 0, 0, NULL},
};

static int parse_args(int argc, char **argv, run_args *a) {
    const char *cmd = "run";
    memset(a, 0, sizeof *a);
    a->n_predict = 128;
    pkv_session_opts_default(&a->sopts);
    pkv_sampler_params_default(&a->sampling);
    a->engine.cache = (cli_cache_types){a->sopts.cache_type_k, a->sopts.cache_type_v};
    int rc = cli_parse_command(cmd, RUN_USAGE, true, &a->press, &a->engine, RUN_FLAGS, a, NULL, false, argc, argv);
    if (rc) return rc;
    a->sopts.n_threads = a->engine.n_threads;
    if (a->engine.n_batch) a->sopts.n_batch = a->engine.n_batch;
    a->sopts.cache_type_k = a->engine.cache.k;
    a->sopts.cache_type_v = a->engine.cache.v;
    if (!a->engine.model_path) {
        cli_error(cmd, "a model is required (-m MODEL)");
        return -1;
    }
    if (a->load_cache ? a->prompt && a->prompt_file : !a->prompt == !a->prompt_file) {
        cli_error(cmd, a->load_cache ? "give at most one of -p TEXT or -f FILE after --load-cache"
                                     : "give exactly one of -p TEXT or -f FILE");
        return -1;
    }
    if (a->load_cache && (a->press.press || a->press.n_opts || a->press.protect_system || a->system)) {
        cli_error(cmd, "--load-cache takes the saved cache as it is: its press and system prompt are the saved ones "
                       "(no --press, press options, --protect-system or --system)");
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
    if (a->press.mode && !strcmp(a->press.mode, "query_agnostic") && !a->question && !a->question_file &&
        !a->load_cache) {
        cli_error(cmd, "--mode query_agnostic needs a question (--question or --question-file) to feed after compression");
        return -1;
    }
    return 0;
}

static char *read_text_arg(const char *cmd, const char *inline_text, const char *file) {
    size_t len;
    if (file) return cli_read_file(cmd, file, &len);
    const char *t = inline_text ? inline_text : "";
    char *copy = malloc(strlen(t) + 1);
    if (copy) strcpy(copy, t);
    return copy;
}

/* Streams the completion as it becomes ready; a SIGINT stops it. */
static bool print_token(void *user, const pkv_token_event *ev) {
    (void)user;
    if (ev->text_len) fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
    return !g_interrupted;
}

static double mib(uint64_t b) { return b / 1048576.0; }

/* The press as the flags gave it, for a saved cache: "snapkv budget=256 mode=query_agnostic". */
static void press_text(const press_args *pa, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "%s", pa->press ? pa->press : "none");
    for (int k = 0; k < pa->n_opts && n + 1 < len; k++) {
        char key[64];
        snprintf(key, sizeof key, "%s", pa->keys[k]);
        for (char *p = key; *p; p++)
            if (*p == '-') *p = '_'; /* the option's name as pkv_press_cfg_set takes it */
        n += (size_t)snprintf(buf + n, len - n, " %s=%s", key, pa->values[k]);
    }
}

/* pkv_request_run's phases, with the cache loaded instead of prefilled, or
 * saved once the press has run. */
static int run_phases(pkv_session *s, const pkv_request *req, const pkv_request_prompt *rp, const run_args *a,
                      pkv_request_stats *st, pkv_error *err) {
    memset(st, 0, sizeof *st);
    if (!a->load_cache && pkv_request_prefill_compressed(s, req, rp, NULL, st, err)) return -1;
    if (a->save_cache) {
        char text[1024];
        press_text(&a->press, text, sizeof text);
        if (pkv_session_save(s, a->save_cache, text, a->chat ? "chat" : "text", err)) return -1;
    }
    if (pkv_request_prefill_rest(s, rp, st, err)) return -1;
    st->prefilled = true;
    return pkv_generate(s, req, st, err);
}

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
    pkv_model *model = cli_load_model_chat("run", a.engine.model_path, a.engine.simd, a.engine.chat_template,
                                             a.engine.gguf_layout);
    char *context = model ? read_text_arg("run", a.prompt, a.prompt_file) : NULL;
    char *question = context ? read_text_arg("run", a.question, a.question_file) : NULL;
    pkv_session *s = NULL;
    pkv_request_prompt rp = {0};
    pkv_saved_cache_info *loaded = NULL;
    double t_load = 0.0;
    int exit_code = EXIT_RUNTIME;
    if (!question) goto done;

    /* the whole prompt is pressed in query-aware mode and the user's text may
     * name control tokens, as llama.cpp's CLI reads a prompt */
    pkv_request req;
    pkv_request_init(&req);
    req.prompt = (pkv_prompt_parts){
        .system = a.system, .context = context, .question = question, .chat = a.chat, .parse_special = true};
    req.press = press;
    req.mode = pkv_press_cfg_mode(press);
    req.press_whole_prompt = true;
    req.protect_system = a.press.protect_system;
    req.sampling = a.sampling;
    req.max_tokens = (int)a.n_predict;
    req.ignore_eos = a.ignore_eos;
    req.on_token = print_token;
    pkv_error err;
    s = pkv_session_new(model, &a.sopts, &err);
    if (!s) {
        cli_error("run", "%s", err.msg);
        goto done;
    }
    if (a.load_cache) {
        loaded = malloc(sizeof *loaded);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (!loaded || pkv_session_load(s, a.load_cache, loaded, &err)) {
            cli_error("run", "%s", loaded ? err.msg : "out of memory");
            goto done;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        t_load = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        int n_state;
        const int32_t *state = pkv_session_tokens(s, &n_state);
        if (pkv_request_tokenize_continuation(model, &req, state, n_state, &rp, &err)) {
            cli_error("run", "%s", err.msg);
            goto done;
        }
    } else if (pkv_request_tokenize(model, &req, &rp, &err)) {
        cli_error("run", "%s", err.msg);
        goto done;
    }
    int n_prompt = rp.prompt.n_tokens;
    if (n_prompt == 0) {
        cli_error("run", "the prompt is empty");
        exit_code = EXIT_USAGE;
        goto done;
    }

    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    g_running = s;

    pkv_request_stats st = {0};
    int run_rc = a.save_cache || a.load_cache ? run_phases(s, &req, &rp, &a, &st, &err)
                                              : pkv_request_run(s, &req, &rp, &st, &err);
    if (run_rc && !st.prefilled) {
        cli_error("run", "%s", err.msg);
        exit_code = err.code == PKV_ERR_INTERRUPTED ? EXIT_INTERRUPTED : EXIT_RUNTIME;
        goto done;
    }
    exit_code = 0;
    if (run_rc) {
        /* the generation stopped midway: what it printed stands, and the statistics follow */
        if (err.code != PKV_ERR_INTERRUPTED) {
            cli_error("run", "%s", err.msg);
            exit_code = EXIT_RUNTIME;
        }
    } else if (st.finish == PKV_FINISH_CONTEXT) {
        fprintf(stderr, "\nstopped: %s\n", err.msg);
    }
    fputc('\n', stdout);
    fflush(stdout);
    if (g_interrupted) exit_code = EXIT_INTERRUPTED;

    const pkv_prefill_stats *ps = &st.press;
    double prefill_seconds = ps->prefill_seconds + st.rest_seconds;
    int n_gen = st.n_generated, n_decoded = st.n_decoded;
    double t_decode = st.decode_seconds;
    /* the tokens before the question (the template's head included) */
    int n_context = question[0] ? rp.prompt.context_end : n_prompt;
    bool agnostic = req.mode == PKV_MODE_QUERY_AGNOSTIC;
    char desc[160];
    pkv_press_cfg_describe(press, desc, sizeof desc);
    if (loaded) {
        fprintf(stderr, "loaded cache:    %s: %d tokens, press \"%s\", %.2f MiB (%lld rows) in %.1f ms\n", a.load_cache,
                loaded->n_tokens, loaded->press, mib(loaded->cache_bytes), (long long)loaded->rows, t_load * 1e3);
        fprintf(stderr, "prompt tokens:   %d after the cache\n", n_prompt - loaded->n_tokens);
        fprintf(stderr, "prefill:         %.3f s\n", st.rest_seconds);
        goto decode_stats;
    }
    fprintf(stderr, "prompt tokens:   %d", n_prompt);
    if (n_context < n_prompt) fprintf(stderr, " (context %d + question %d)", n_context, n_prompt - n_context);
    fputc('\n', stderr);
    fprintf(stderr, "press:           %s%s\n", desc, ps->compressed ? (agnostic ? ", query-agnostic" : ", query-aware") : "");
    fprintf(stderr, "prefill:         %.3f s, %.1f tok/s\n", prefill_seconds,
            n_prompt / (prefill_seconds > 0 ? prefill_seconds : 1e-9));
    if (ps->compressed) {
        fprintf(stderr, "press time:      %.1f ms (%.2f%% of prefill)\n", ps->press_seconds * 1e3,
                100.0 * ps->press_seconds / (prefill_seconds > 0 ? prefill_seconds : 1e-9));
        fprintf(stderr, "kv cache:        %.2f MiB full -> %.2f MiB kept after the prompt (%.1fx smaller)\n",
                mib(ps->cache_bytes_full), mib(ps->cache_bytes),
                ps->cache_bytes ? (double)ps->cache_bytes_full / ps->cache_bytes : 0.0);
        print_rows_per_layer(s, rp.n_compressed);
    } else {
        fprintf(stderr, "kv cache:        %.2f MiB after the prompt (no press)\n", mib(ps->cache_bytes));
    }
    if (a.save_cache) fprintf(stderr, "saved cache:     %s (%d tokens)\n", a.save_cache, rp.n_compressed);
decode_stats:
    fprintf(stderr, "decode:          %d tokens, %.1f tok/s (%.2f ms/token)\n", n_gen,
            n_decoded > 0 ? n_decoded / t_decode : 0.0, n_decoded > 0 ? 1e3 * t_decode / n_decoded : 0.0);
    fprintf(stderr, "kv cache now:    %.2f MiB (%llu bytes)\n", mib(pkv_session_cache_bytes(s)),
            (unsigned long long)pkv_session_cache_bytes(s));
done:
    g_running = NULL;
    free(loaded);
    pkv_request_prompt_free(&rp);
    pkv_session_free(s);
    free(context);
    free(question);
    pkv_press_cfg_free(press);
    pkv_model_free(model);
    return exit_code;
}
