/* promptkv synth: a random-weight GGUF with the exact shape of a real model
 * (src/model/synth.h), to measure speed on real shapes. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "args.h"
#include "base/clock.h"
#include "commands.h"
#include "model/synth.h"

static const char SYNTH_USAGE[] =
    "usage: promptkv synth SHAPE -o FILE [--type f16|q8_0|q4_k|...] [--seed S] [--std X] [-t THREADS]\n"
    "       promptkv synth --list\n"
    "\n"
    "Writes a GGUF with random weights and the exact shape (tensor names, shapes, metadata) of a\n"
    "real model, so speed can be measured on real shapes; llama.cpp loads it too. The tokenizer is\n"
    "byte-level SentencePiece padded to the real vocabulary size.\n"
    "  SHAPE            a built-in shape (see --list)\n"
    "  -o, --output F   the file to write\n"
    "      --type T     type of the 2-D weights: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0,\n"
    "                   q4_k, q5_k, q6_k (default q8_0); 1-D tensors are f32\n"
    "      --seed S     random seed (default 1)\n"
    "      --std X      standard deviation of the weights (default 0.02)\n"
    "  -t, --threads N  threads (default: all CPUs)\n"
    "      --list       the built-in shapes\n";

static bool parse_type(const char *s, pkv_type *out) {
    static const struct {
        const char *name;
        pkv_type type;
    } TYPES[] = {
        {"f32", PKV_TYPE_F32},   {"f16", PKV_TYPE_F16},   {"bf16", PKV_TYPE_BF16}, {"q4_0", PKV_TYPE_Q4_0},
        {"q4_1", PKV_TYPE_Q4_1}, {"q5_0", PKV_TYPE_Q5_0}, {"q5_1", PKV_TYPE_Q5_1}, {"q8_0", PKV_TYPE_Q8_0},
        {"q4_k", PKV_TYPE_Q4_K}, {"q5_k", PKV_TYPE_Q5_K}, {"q6_k", PKV_TYPE_Q6_K},
    };
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcasecmp(s, TYPES[i].name)) {
            *out = TYPES[i].type;
            return true;
        }
    return false;
}

static void list_shapes(void) {
    printf("%-14s %-36s %-6s %7s %6s %6s %5s %5s %4s %6s %5s %s\n", "shape", "source", "arch", "vocab", "embd",
           "layers", "heads", "kv", "hd", "ffn", "tied", "q8_0 size");
    const pkv_synth_shape *s;
    for (int i = 0; (s = pkv_synth_shape_at(i)); i++)
        printf("%-14s %-36s %-6s %7d %6d %6d %5d %5d %4d %6d %5s %.2f GiB\n", s->name, s->source, s->arch, s->n_vocab,
               s->n_embd, s->n_layer, s->n_head, s->n_head_kv, s->head_dim, s->n_ff,
               s->tied_embeddings ? "yes" : "no", pkv_synth_tensor_bytes(s, PKV_TYPE_Q8_0) / 1073741824.0);
}

int cmd_synth(int argc, char **argv) {
    const char *cmd = "synth", *shape_name = NULL, *out = NULL, *v;
    pkv_synth_opts o;
    pkv_synth_opts_default(&o);
    long n;
    double d;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            fputs(SYNTH_USAGE, stdout);
            return 0;
        }
        if (!strcmp(f, "--list")) {
            list_shapes();
            return 0;
        }
        if (f[0] != '-') {
            if (shape_name) {
                cli_error(cmd, "one shape at a time ('%s' is extra)", f);
                return EXIT_USAGE;
            }
            shape_name = f;
            continue;
        }
        if (!(v = cli_value(cmd, argc, argv, &i))) return EXIT_USAGE;
        if (!strcmp(f, "-o") || !strcmp(f, "--output")) out = v;
        else if (!strcmp(f, "--type")) {
            if (!parse_type(v, &o.type)) {
                cli_error(cmd, "--type must be one of f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, "
                               "q6_k; got '%s'", v);
                return EXIT_USAGE;
            }
        } else if (!strcmp(f, "--seed")) {
            if (!cli_u64(cmd, f, v, &o.seed)) return EXIT_USAGE;
        } else if (!strcmp(f, "--std")) {
            if (!cli_float(cmd, f, v, 1e-6, 10.0, &d)) return EXIT_USAGE;
            o.weight_std = (float)d;
        } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            if (!cli_int(cmd, f, v, 1, 1024, &n)) return EXIT_USAGE;
            o.n_threads = (int)n;
        } else {
            cli_error(cmd, "unknown option '%s' (see promptkv synth --help)", f);
            return EXIT_USAGE;
        }
    }
    if (!shape_name || !out) {
        cli_error(cmd, "need a SHAPE and -o FILE (promptkv synth --list shows the shapes)");
        return EXIT_USAGE;
    }
    const pkv_synth_shape *shape = pkv_synth_shape_find(shape_name);
    if (!shape) {
        cli_error(cmd, "unknown shape '%s' (promptkv synth --list shows the shapes)", shape_name);
        return EXIT_USAGE;
    }
    pkv_error err;
    if (pkv_synth_check(shape, o.type, &err)) {
        cli_error(cmd, "%s", err.msg);
        return EXIT_USAGE;
    }
    fprintf(stderr, "synth: %s (%s shape), %s weights, %.2f GiB of tensors -> %s\n", shape->name, shape->source,
            pkv_type_get(o.type)->name, pkv_synth_tensor_bytes(shape, o.type) / 1073741824.0, out);
    double t0 = pkv_now_seconds();
    if (pkv_synth_write(shape, &o, out, &err)) {
        cli_error(cmd, "%s", err.msg);
        return EXIT_RUNTIME;
    }
    fprintf(stderr, "synth: wrote %s in %.1f s\n", out, pkv_now_seconds() - t0);
    return 0;
}
