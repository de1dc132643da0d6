/* promptkv tokenize: token ids of a text, as the model's tokenizer produces them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "commands.h"

static const char TOKENIZE_USAGE[] =
    "usage: promptkv tokenize -m MODEL (-p TEXT | -f FILE) [--no-special] [--no-parse-special] [--pieces]\n"
    "\n"
    "Prints the token ids of the text, space separated, on one line.\n"
    "  --no-special        do not add BOS/EOS\n"
    "  --no-parse-special  treat control-token text (e.g. <start_of_turn>) as plain text\n"
    "  --pieces            print one 'id<TAB>piece' line per token instead\n"
    "  -h, --help          this help\n";

int cmd_tokenize(int argc, char **argv) {
    const char *cmd = "tokenize", *model_path = NULL, *prompt = NULL, *file = NULL, *v;
    bool add_special = true, parse_special = true, pieces = false;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            fputs(TOKENIZE_USAGE, stdout);
            return 0;
        } else if (!strcmp(f, "-m") || !strcmp(f, "--model")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return EXIT_USAGE;
            model_path = v;
        } else if (!strcmp(f, "-p") || !strcmp(f, "--prompt")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return EXIT_USAGE;
            prompt = v;
        } else if (!strcmp(f, "-f") || !strcmp(f, "--file")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return EXIT_USAGE;
            file = v;
        } else if (!strcmp(f, "--no-special")) add_special = false;
        else if (!strcmp(f, "--no-parse-special")) parse_special = false;
        else if (!strcmp(f, "--pieces")) pieces = true;
        else {
            cli_error(cmd, "unknown option '%s' (see promptkv tokenize --help)", f);
            return EXIT_USAGE;
        }
    }
    if (!model_path || !prompt == !file) {
        cli_error(cmd, "need -m MODEL and exactly one of -p TEXT or -f FILE");
        return EXIT_USAGE;
    }
    size_t len = 0;
    char *text = NULL;
    if (file) {
        text = cli_read_file(cmd, file, &len);
        if (!text) return EXIT_RUNTIME;
    }
    /* nothing is computed: the weights stay as in the file (no interleaving at load) */
    pkv_model *m = cli_load_model_chat(cmd, model_path, PKV_SIMD_AUTO, NULL, true);
    if (!m) {
        free(text);
        return EXIT_RUNTIME;
    }
    const char *src = text ? text : prompt;
    if (!text) len = strlen(prompt);
    int32_t *ids = NULL;
    int n = 0, cap = 0;
    pkv_error err;
    int rc = 0;
    if (pkv_tokenize_append(m, src, len, add_special, parse_special, &ids, &n, &cap, &err) < 0) {
        cli_error(cmd, "%s", err.msg);
        rc = EXIT_RUNTIME;
    } else if (pieces) {
        char piece[512];
        for (int i = 0; i < n; i++) {
            int pl = pkv_token_to_piece(m, ids[i], true, piece, sizeof piece);
            printf("%d\t", ids[i]);
            for (int k = 0; k < pl; k++) {
                unsigned char ch = (unsigned char)piece[k];
                if (ch == '\n') fputs("\\n", stdout);
                else if (ch == '\t') fputs("\\t", stdout);
                else putchar(ch);
            }
            putchar('\n');
        }
    } else {
        for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        putchar('\n');
    }
    free(ids);
    free(text);
    pkv_model_free(m);
    return rc;
}
