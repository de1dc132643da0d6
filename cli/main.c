/* promptkv: the command-line front end. Thin: parses flags, calls the library. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command COMMANDS[] = {
    {"run", cmd_run, "generate a completion for a prompt"},
    {"info", cmd_info, "show a model's architecture, shapes, tensor types, tokenizer and memory needs"},
    {"tokenize", cmd_tokenize, "print the token ids (and pieces) of a text"},
    {"perplexity", cmd_perplexity, "perplexity of a text file (llama-perplexity's method)"},
    {"eval", cmd_eval, "offline long-context benchmarks of every press against the full cache"},
    {"inspect", cmd_inspect, "which prompt tokens a press keeps, per layer and head (and as an HTML page)"},
    {"bench", cmd_bench, "prefill and decode speed, decode latency vs prompt length, memory (like llama-bench)"},
    {"synth", cmd_synth, "write a random-weight GGUF with the exact shape of a real model"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server with per-request KV-cache compression"},
};

static void usage(FILE *out) {
    fputs("usage: promptkv COMMAND [options]   (promptkv COMMAND --help for its options)\n\ncommands:\n", out);
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(out, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "promptkv: error: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
