/* promptkv info: what a model is and what it needs. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"

static const char INFO_USAGE[] =
    "usage: promptkv info [--tensors] [--meta] MODEL\n"
    "\n"
    "Prints the architecture, shapes, tensor types, tokenizer and memory needs of a GGUF model.\n"
    "  --tensors   list every tensor (name, type, shape, bytes)\n"
    "  --meta      list every metadata key\n"
    "  -h, --help  this help\n";

static double mib(uint64_t b) { return b / 1048576.0; }

/* "llama, qwen2, ..." from the library's list */
static void print_architectures(FILE *out) {
    fputs("Supported architectures (general.architecture):", out);
    for (int i = 0; pkv_supported_arch(i); i++) fprintf(out, "%s %s", i ? "," : "", pkv_supported_arch(i));
    fputc('\n', out);
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool tensors = false, meta = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(INFO_USAGE, stdout);
            print_architectures(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--tensors")) tensors = true;
        else if (!strcmp(argv[i], "--meta")) meta = true;
        else if (argv[i][0] == '-') {
            cli_error("info", "unknown option '%s' (see promptkv info --help)", argv[i]);
            return EXIT_USAGE;
        } else if (!path) path = argv[i];
        else {
            cli_error("info", "one model at a time ('%s' is extra)", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (!path) {
        cli_error("info", "a model path is required");
        return EXIT_USAGE;
    }
    /* nothing is computed: the weights stay as in the file (no interleaving at load) */
    pkv_model *m = cli_load_model_chat("info", path, PKV_SIMD_AUTO, NULL, true);
    if (!m) return EXIT_RUNTIME;
    pkv_model_info mi;
    pkv_model_get_info(m, &mi);
    printf("model:          %s\n", mi.name[0] ? mi.name : path);
    printf("architecture:   %s\n", mi.arch);
    printf("parameters:     %.1f M\n", mi.n_params / 1e6);
    printf("layers:         %d (%d sliding-window, window %d; %d full attention)\n", mi.n_layer, mi.n_swa_layers,
           mi.sliding_window, mi.n_layer - mi.n_swa_layers);
    printf("embedding:      %d, feed-forward %d\n", mi.n_embd, mi.n_ff);
    printf("heads:          %d query, %d key/value (group %d), head dim %d\n", mi.n_head, mi.n_head_kv,
           mi.n_head / mi.n_head_kv, mi.head_dim);
    printf("vocabulary:     %d (%s tokenizer)\n", mi.n_vocab, mi.tokenizer);
    printf("context:        %d (trained)\n", mi.n_ctx_train);
    if (!strcmp(mi.rope_scaling, "longrope"))
        printf("rope scaling:   longrope, original context %d (long factors when --ctx-size > %d)\n", mi.n_ctx_orig,
               mi.n_ctx_orig);
    else
        printf("rope scaling:   %s\n", mi.rope_scaling);
    printf("chat format:    %s%s\n", pkv_model_chat_format(m),
           pkv_model_has_chat_template(m) ? " (from tokenizer.chat_template)" : "");
    printf("simd:           %s\n", pkv_simd_name(pkv_simd_detect()));

    /* tensor types: count and bytes per type */
    int n = pkv_model_n_tensors(m);
    const char *types[64];
    int counts[64];
    uint64_t bytes[64];
    int n_types = 0;
    for (int i = 0; i < n; i++) {
        pkv_tensor_info ti;
        pkv_model_tensor(m, i, &ti);
        int k = 0;
        while (k < n_types && strcmp(types[k], ti.type)) k++;
        if (k == n_types && n_types < 64) {
            types[n_types] = ti.type;
            counts[n_types] = 0;
            bytes[n_types++] = 0;
        }
        if (k < 64) {
            counts[k]++;
            bytes[k] += ti.nbytes;
        }
    }
    printf("tensors:        %d\n", n);
    for (int k = 0; k < n_types; k++) printf("  %-6s %4d tensors, %8.2f MiB\n", types[k], counts[k], mib(bytes[k]));

    uint64_t kv16 = pkv_model_kv_bytes_per_token(m, PKV_CACHE_F16, PKV_CACHE_F16);
    uint64_t kv8 = pkv_model_kv_bytes_per_token(m, PKV_CACHE_Q8_0, PKV_CACHE_Q8_0);
    uint64_t kv4 = pkv_model_kv_bytes_per_token(m, PKV_CACHE_Q4_0, PKV_CACHE_Q4_0);
    printf("memory:\n");
    printf("  weights        %.2f MiB (memory-mapped)\n", mib(mi.weight_bytes));
    printf("  kv cache       %.2f KiB per token in f16 (all layers; sliding layers stop growing at %d)\n",
           kv16 / 1024.0, mi.sliding_window);
    if (kv8) printf("                 %.2f KiB in q8_0, %.2f KiB in q4_0 (--cache-type)\n", kv8 / 1024.0, kv4 / 1024.0);
    int ctxs[] = {4096, 32768, mi.n_ctx_train};
    for (int c = 0; c < 3; c++)
        if (c < 2 || (ctxs[c] != ctxs[0] && ctxs[c] != ctxs[1]))
            printf("  full cache at %6d tokens: %.1f MiB (f16)\n", ctxs[c],
                   mib(pkv_model_kv_bytes_full(m, ctxs[c], PKV_CACHE_F16, PKV_CACHE_F16)));

    if (tensors) {
        printf("\n%-40s %-6s %-24s %12s\n", "tensor", "type", "shape (ne)", "bytes");
        for (int i = 0; i < n; i++) {
            pkv_tensor_info ti;
            pkv_model_tensor(m, i, &ti);
            char shape[64];
            int off = 0;
            for (int d = 0; d < ti.n_dims; d++)
                off += snprintf(shape + off, sizeof shape - (size_t)off, "%s%llu", d ? " x " : "",
                                (unsigned long long)ti.ne[d]);
            printf("%-40s %-6s %-24s %12llu\n", ti.name, ti.type, shape, (unsigned long long)ti.nbytes);
        }
    }
    if (meta) {
        printf("\n");
        for (int i = 0; i < pkv_model_n_meta(m); i++) {
            const char *key;
            char value[160];
            if (pkv_model_meta(m, i, &key, value, sizeof value)) printf("%-45s %s\n", key, value);
        }
    }
    pkv_model_free(m);
    return 0;
}
