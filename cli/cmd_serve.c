/* promptkv serve: the OpenAI-compatible HTTP server (src/server/). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "commands.h"
#include "press_args.h"
#include "server/server.h"

static const char SERVE_USAGE[] =
    "usage: promptkv serve -m MODEL [options]\n"
    "\n"
    "Serves the OpenAI API over HTTP: POST /v1/completions, POST /v1/chat/completions (streaming\n"
    "with server-sent events or not), GET /v1/models, GET /health, GET /metrics (Prometheus).\n"
    "A request may choose its own compression with the extension field\n"
    "  \"kv_compression\": {\"press\": \"snapkv\", \"budget\": 1024, \"window\": 32, \"protect_system\": true}\n"
    "(every key but press and protect_system is a press option); the flags below set the press of\n"
    "requests without one. SIGTERM stops accepting, lets running requests finish, and exits 0.\n"
    "\n"
    "  -m, --model PATH        GGUF model\n"
    "      --host ADDR         address to listen on (default 127.0.0.1)\n"
    "      --port N            port (default 8080; 0: any free port, printed)\n"
    "      --alias NAME        the model's id in the API (default: the file name without .gguf)\n"
    "      --slots N           requests decoded in parallel (default 2)\n"
    "  -t, --threads N         threads per slot (default: the CPUs shared out among the slots)\n"
    "  -c, --ctx-size N        context per request, prompt + completion (default: the model's)\n"
    "  -b, --batch N           prefill chunk in tokens (default 512)\n"
    "      --kv-mem SIZE       KV cache all running requests may reserve, e.g. 4G (default 4G)\n"
    "      --queue N           requests that may wait for a slot (default 64; more get 429)\n"
    "      --queue-timeout S   seconds a request may wait for a slot (default 300; then 503)\n"
    "      --max-tokens N      the most tokens a request may ask for (default 4096)\n"
    "      --default-max-tokens N  completions without max_tokens (default 16, as OpenAI)\n"
    "      --max-body SIZE     request body limit (default 8M; more gets 413)\n"
    "      --timeout S         seconds a connection may stay idle (default 30)\n"
    "      --body-timeout S    seconds a client may take to send a request (default 30; then 408)\n"
    "      --max-connections N open connections (default 128)\n"
    "      --drain-timeout S   seconds SIGTERM waits for running requests (default 60)\n"
    "      --cache-type T      f16 (default) or f32\n"
    "      --simd L            auto, scalar, avx2, avx512 (default auto)\n"
    "      --quiet             no line per request on stderr\n"
    "  -h, --help              this help (and --help-press for every press and its options)\n";

typedef struct {
    const char *model_path;
    const char *alias;
    pkv_server_opts opts;
    press_args press;
    pkv_simd simd;
} serve_args;

static int parse_args(int argc, char **argv, serve_args *a) {
    const char *cmd = "serve";
    memset(a, 0, sizeof *a);
    pkv_server_opts_default(&a->opts);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v;
        long n;
        double d;
        uint64_t size;
        if (!strcmp(f, "-h") || !strcmp(f, "--help") || !strcmp(f, "--help-press")) {
            fputs(SERVE_USAGE, stdout);
            press_args_usage(stdout);
            return 1;
        }
        int pr = press_args_parse(&a->press, cmd, argc, argv, &i);
        if (pr < 0) return -1;
        if (pr > 0) continue;
#define VALUE() \
    if (!(v = cli_value(cmd, argc, argv, &i))) return -1
#define INT_FLAG(field, lo, hi)                          \
    do {                                                 \
        VALUE();                                         \
        if (!cli_int(cmd, f, v, lo, hi, &n)) return -1;  \
        a->opts.field = (int)n;                          \
    } while (0)
#define SECONDS_FLAG(field)                                    \
    do {                                                       \
        VALUE();                                               \
        if (!cli_float(cmd, f, v, 0.1, 86400.0, &d)) return -1; \
        a->opts.field = d;                                     \
    } while (0)
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) { VALUE(); a->model_path = v; }
        else if (!strcmp(f, "--host")) { VALUE(); a->opts.host = v; }
        else if (!strcmp(f, "--alias")) { VALUE(); a->alias = v; }
        else if (!strcmp(f, "--port")) INT_FLAG(port, 0, 65535);
        else if (!strcmp(f, "--slots")) INT_FLAG(n_slots, 1, 256);
        else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) INT_FLAG(threads_per_slot, 1, 1024);
        else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size")) INT_FLAG(n_ctx, 1, 1 << 30);
        else if (!strcmp(f, "-b") || !strcmp(f, "--batch")) INT_FLAG(n_batch, 1, 1 << 20);
        else if (!strcmp(f, "--queue")) INT_FLAG(queue_cap, 1, 1 << 20);
        else if (!strcmp(f, "--max-tokens")) INT_FLAG(max_tokens, 1, 1 << 30);
        else if (!strcmp(f, "--default-max-tokens")) INT_FLAG(default_max_tokens, 1, 1 << 30);
        else if (!strcmp(f, "--max-connections")) INT_FLAG(max_connections, 1, 1 << 16);
        else if (!strcmp(f, "--queue-timeout")) SECONDS_FLAG(queue_timeout);
        else if (!strcmp(f, "--body-timeout")) SECONDS_FLAG(body_timeout);
        else if (!strcmp(f, "--drain-timeout")) SECONDS_FLAG(drain_timeout);
        else if (!strcmp(f, "--timeout")) {
            VALUE();
            if (!cli_int(cmd, f, v, 1, 86400, &n)) return -1;
            a->opts.idle_timeout = (unsigned)n;
        } else if (!strcmp(f, "--kv-mem")) {
            VALUE();
            if (!cli_size(cmd, f, v, &size)) return -1;
            if (size == 0) {
                cli_error(cmd, "--kv-mem must be more than 0");
                return -1;
            }
            a->opts.kv_mem = size;
        } else if (!strcmp(f, "--max-body")) {
            VALUE();
            if (!cli_size(cmd, f, v, &size)) return -1;
            if (size < 1024 || size > ((uint64_t)1 << 30)) {
                cli_error(cmd, "--max-body must be in [1K, 1G], got '%s'", v);
                return -1;
            }
            a->opts.max_body = (size_t)size;
        } else if (!strcmp(f, "--cache-type")) {
            VALUE();
            if (!cli_cache_type(cmd, v, &a->opts.cache_type)) return -1;
        } else if (!strcmp(f, "--simd")) {
            VALUE();
            if (!cli_simd(cmd, v, &a->simd)) return -1;
        } else if (!strcmp(f, "--quiet")) {
            a->opts.log_requests = false;
        } else {
            cli_error(cmd, "unknown option '%s' (see promptkv serve --help)", f);
            return -1;
        }
#undef SECONDS_FLAG
#undef INT_FLAG
#undef VALUE
    }
    if (!a->model_path) {
        cli_error(cmd, "a model is required (-m MODEL)");
        return -1;
    }
    return 0;
}

int cmd_serve(int argc, char **argv) {
    serve_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;

    /* the default press: checked once here, built per request by the server */
    pkv_press_cfg *check = press_args_build(&a.press, "serve");
    if (!check) return EXIT_USAGE;
    pkv_press_cfg_free(check);
    char keys[PRESS_ARGS_MAX_OPTS][64];
    const char *key_ptrs[PRESS_ARGS_MAX_OPTS];
    for (int k = 0; k < a.press.n_opts; k++) {
        snprintf(keys[k], sizeof keys[k], "%s", a.press.keys[k]);
        for (char *p = keys[k]; *p; p++)
            if (*p == '-') *p = '_';
        key_ptrs[k] = keys[k];
    }
    a.opts.press = a.press.press;
    a.opts.press_keys = key_ptrs;
    a.opts.press_values = a.press.values;
    a.opts.n_press_opts = a.press.n_opts;
    a.opts.protect_system = a.press.protect_system;

    char model_id[256];
    cli_model_id(a.model_path, model_id, sizeof model_id);
    a.opts.model_id = a.alias ? a.alias : model_id;

    pkv_model *model = cli_load_model("serve", a.model_path, a.simd);
    if (!model) return EXIT_RUNTIME;
    pkv_model_info info;
    pkv_model_get_info(model, &info);
    if (a.opts.n_ctx <= 0) a.opts.n_ctx = info.n_ctx_train;
    if (a.opts.threads_per_slot <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        a.opts.threads_per_slot = cpus > a.opts.n_slots ? (int)(cpus / a.opts.n_slots) : 1;
    }
    pkv_error err;
    rc = pkv_server_run(model, &a.opts, &err);
    if (rc) cli_error("serve", "%s", err.msg);
    pkv_model_free(model);
    return rc ? EXIT_RUNTIME : 0;
}
