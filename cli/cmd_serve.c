/* promptkv serve: the OpenAI-compatible HTTP server (src/server/). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "commands.h"
#include "flags.h"
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
    "requests without one. Stored contexts: POST /v1/contexts {\"text\": ...} or {\"messages\": ...}\n"
    "prefills and compresses a context once; requests naming its \"context_id\" continue from it;\n"
    "GET and DELETE /v1/contexts/{id}. SIGTERM stops accepting, lets running requests finish, exits 0.\n"
    "\n"
    "  -m, --model PATH        GGUF model\n"
    "      --host ADDR         address to listen on (default 127.0.0.1)\n"
    "      --port N            port (default 8080; 0: any free port, printed)\n"
    "      --alias NAME        the model's id in the API (default: the file name without .gguf)\n"
    "      --slots N           requests decoded in parallel (default 2)\n"
    "      --no-batch          each slot decodes alone (default: the generating requests step\n"
    "                          together, the weights read once a step for all of them)\n"
    "  -t, --threads N         threads per slot (default: all CPUs, or with --no-batch the CPUs\n"
    "                          shared out among the slots)\n"
    "  -c, --ctx-size N        context per request, prompt + completion (default: the model's)\n"
    "  -b, --batch N           prefill chunk in tokens (default 512)\n"
    "      --kv-mem SIZE       KV cache all running requests may reserve, e.g. 4G (default 4G)\n"
    "      --residual-type T   how a long prompt's prefill keeps its residual stream between layers:\n"
    "                          f32 (default), f16 or q8_0 (less memory for one rounding per layer)\n"
    "      --residual-spill DIR  keep it in a file in DIR between layers instead (on disk, not tmpfs;\n"
    "                          the same bits; read and written once a layer)\n"
    "      --ctx-mem SIZE      memory all stored contexts may hold (default 1G; the least recently used\n"
    "                          goes first)\n"
    "      --ctx-dir DIR       keep stored contexts as saved caches in DIR and reload them at start\n"
    "      --queue N           requests that may wait for a slot (default 64; more get 429)\n"
    "      --queue-timeout S   seconds a request may wait for a slot (default 300; then 503)\n"
    "      --max-tokens N      the most tokens a request may ask for (default 4096)\n"
    "      --default-max-tokens N  completions without max_tokens (default 16, as OpenAI)\n"
    "      --max-body SIZE     request body limit (default 8M; more gets 413)\n"
    "      --timeout S         seconds a connection may stay idle (default 30)\n"
    "      --body-timeout S    seconds a client may take to send a request (default 30; then 408)\n"
    "      --max-connections N open connections (default 128)\n"
    "      --drain-timeout S   seconds SIGTERM waits for running requests (default 60)\n"
    "      --cache-type T      how the KV cache stores keys and values: f16 (default), f32, q8_0, q4_0\n"
    "                          (q8_0/q4_0: ggml blocks of 32, for head sizes divisible by 32)\n"
    "      --cache-type-k T, --cache-type-v T\n"
    "                          the same for keys or for values alone (-ctk, -ctv)\n"
    "      --simd L            auto, scalar, avx2, avx512 (default auto)\n"
    "      --gguf-layout       keep the weights in the file's row layout (slower decode; for comparisons)\n"
    "      --chat-template T   the chat format of /v1/chat/completions instead of the one detected in the\n"
    "                          model's template: a name (chatml, llama3, mistral-v7, ...) or a template text\n"
    "      --quiet             no line per request on stderr\n"
    "  -h, --help              this help (and --help-press for every press and its options)\n";

typedef struct {
    cli_engine_args engine;
    const char *alias;
    pkv_server_opts opts;
    press_args press;
} serve_args;

static bool positive_size(const char *cmd, const char *flag, const char *text, const void *field) {
    if (*(const uint64_t *)field > 0) return true;
    cli_error(cmd, "%s must be more than 0", flag);
    return false;
}

static bool body_size(const char *cmd, const char *flag, const char *text, const void *field) {
    uint64_t size = *(const uint64_t *)field;
    if (size >= 1024 && size <= ((uint64_t)1 << 30)) return true;
    cli_error(cmd, "%s must be in [1K, 1G], got '%s'", flag, text);
    return false;
}

#define OPT(field) offsetof(serve_args, opts.field)
static const cli_flag SERVE_FLAGS[] = {
    {"--host", NULL, CLI_TEXT, OPT(host), 0, 0, NULL},
    {"--alias", NULL, CLI_TEXT, offsetof(serve_args, alias), 0, 0, NULL},
    {"--port", NULL, CLI_INT, OPT(port), 0, 65535, NULL},
    {"--slots", NULL, CLI_INT, OPT(n_slots), 1, 256, NULL},
    {"--no-batch", NULL, CLI_TRUE, OPT(no_batch), 0, 0, NULL},
    {"--ctx-size", "-c", CLI_INT, OPT(n_ctx), 1, 1 << 30, NULL},
    {"--queue", NULL, CLI_INT, OPT(queue_cap), 1, 1 << 20, NULL},
    {"--max-tokens", NULL, CLI_INT, OPT(max_tokens), 1, 1 << 30, NULL},
    {"--default-max-tokens", NULL, CLI_INT, OPT(default_max_tokens), 1, 1 << 30, NULL},
    {"--max-connections", NULL, CLI_INT, OPT(max_connections), 1, 1 << 16, NULL},
    {"--queue-timeout", NULL, CLI_DOUBLE, OPT(queue_timeout), 0.1, 86400.0, NULL},
    {"--body-timeout", NULL, CLI_DOUBLE, OPT(body_timeout), 0.1, 86400.0, NULL},
    {"--drain-timeout", NULL, CLI_DOUBLE, OPT(drain_timeout), 0.1, 86400.0, NULL},
    {"--timeout", NULL, CLI_UINT, OPT(idle_timeout), 1, 86400, NULL},
    {"--kv-mem", NULL, CLI_SIZE, OPT(kv_mem), 0, 0, positive_size},
    {"--residual-type", NULL, CLI_RESIDUAL_TYPE, OPT(residual_type), 0, 0, NULL},
    {"--residual-spill", NULL, CLI_TEXT, OPT(residual_spill_dir), 0, 0, NULL},
    {"--ctx-mem", NULL, CLI_SIZE, OPT(ctx_mem), 0, 0, positive_size},
    {"--ctx-dir", NULL, CLI_TEXT, OPT(ctx_dir), 0, 0, NULL},
    {"--max-body", NULL, CLI_SIZE, OPT(max_body), 0, 0, body_size},
    {"--quiet", NULL, CLI_FALSE, OPT(log_requests), 0, 0, NULL},
    {NULL, NULL, 0, 0, 0, 0, NULL},
};
#undef OPT

static int parse_args(int argc, char **argv, serve_args *a) {
    const char *cmd = "serve";
    memset(a, 0, sizeof *a);
    pkv_server_opts_default(&a->opts);
    a->engine.cache = (cli_cache_types){a->opts.cache_type_k, a->opts.cache_type_v};
    int rc = cli_parse_command(cmd, SERVE_USAGE, true, &a->press, &a->engine, SERVE_FLAGS, a, NULL, false, argc,
                               argv);
    if (rc) return rc;
    if (a->engine.n_threads) a->opts.threads_per_slot = a->engine.n_threads;
    if (a->engine.n_batch) a->opts.n_batch = a->engine.n_batch;
    a->opts.cache_type_k = a->engine.cache.k;
    a->opts.cache_type_v = a->engine.cache.v;
    if (!a->engine.model_path) {
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
    cli_model_id(a.engine.model_path, model_id, sizeof model_id);
    a.opts.model_id = a.alias ? a.alias : model_id;

    pkv_model *model = cli_load_model_chat("serve", a.engine.model_path, a.engine.simd, a.engine.chat_template,
                                             a.engine.gguf_layout);
    if (!model) return EXIT_RUNTIME;
    pkv_model_info info;
    pkv_model_get_info(model, &info);
    if (a.opts.n_ctx <= 0) a.opts.n_ctx = info.n_ctx_train;
    if (a.opts.threads_per_slot <= 0) {
        /* batched, a prefill chunk or a decode step has the machine to itself in its turn */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (!a.opts.no_batch) a.opts.threads_per_slot = cpus > 0 ? (int)cpus : 1;
        else a.opts.threads_per_slot = cpus > a.opts.n_slots ? (int)(cpus / a.opts.n_slots) : 1;
    }
    pkv_error err;
    rc = pkv_server_run(model, &a.opts, &err);
    if (rc) cli_error("serve", "%s", err.msg);
    pkv_model_free(model);
    return rc ? EXIT_RUNTIME : 0;
}
