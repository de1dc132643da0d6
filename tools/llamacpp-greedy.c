/*
 * Greedy continuations from llama.cpp on given token ids, with each step's
 * top-2 logits: the reference of tests/fixtures/greedy/ (written by
 * tools/make-greedy-ref.sh, which builds this file against a llama.cpp build;
 * it is not part of the promptkv build). llama-simple and llama-cli tokenize
 * the prompt themselves and print text; this reads the ids, so both engines
 * see exactly the same prompt, and prints what a divergence needs: the chosen
 * token and the margin to the runner-up.
 *
 * usage: llamacpp-greedy MODEL IDS_FILE N_PREDICT [THREADS]
 *   IDS_FILE: token ids separated by white space
 * output: one line per generated token, "step id logit second_id second_logit";
 *   stops after N_PREDICT tokens or at an end-of-generation token (printed).
 * Settings as the perplexity reference: n_batch = n_ubatch = 512 (prompt
 * chunks of 512), flash attention on, f16 K and V cache, no GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static int read_ids(const char *path, llama_token **out) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, cap = 1024;
    llama_token *ids = malloc((size_t)cap * sizeof *ids);
    long v;
    while (ids && fscanf(f, "%ld", &v) == 1) {
        if (n == cap) {
            cap *= 2;
            llama_token *g = realloc(ids, (size_t)cap * sizeof *g);
            if (!g) {
                free(ids);
                ids = NULL;
                break;
            }
            ids = g;
        }
        ids[n++] = (llama_token)v;
    }
    int bad = !feof(f);
    fclose(f);
    if (!ids || bad || n == 0) {
        free(ids);
        return -1;
    }
    *out = ids;
    return n;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s MODEL IDS_FILE N_PREDICT [THREADS]\n", argv[0]);
        return 2;
    }
    int n_predict = atoi(argv[3]), n_threads = argc > 4 ? atoi(argv[4]) : 2;
    llama_token *prompt = NULL;
    int n_prompt = read_ids(argv[2], &prompt);
    if (n_prompt <= 0 || n_predict <= 0 || n_threads <= 0) {
        fprintf(stderr, "error: cannot read token ids from %s, or a bad N_PREDICT / THREADS\n", argv[2]);
        return 2;
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "error: cannot load %s\n", argv[1]);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_predict + 256);
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    cp.type_k = GGML_TYPE_F16;
    cp.type_v = GGML_TYPE_F16;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "error: cannot create a context of %u tokens\n", cp.n_ctx);
        return 1;
    }
    for (int i = 0; i < n_prompt; i += 512) {
        int n = n_prompt - i < 512 ? n_prompt - i : 512;
        if (llama_decode(ctx, llama_batch_get_one(prompt + i, n))) {
            fprintf(stderr, "error: llama_decode failed on the prompt at %d\n", i);
            return 1;
        }
    }
    for (int step = 0; step < n_predict; step++) {
        const float *logits = llama_get_logits_ith(ctx, -1);
        int best = 0, second = -1;
        for (int t = 1; t < n_vocab; t++) {
            if (logits[t] > logits[best]) {
                second = best;
                best = t;
            } else if (second < 0 || logits[t] > logits[second]) {
                second = t;
            }
        }
        printf("%d %d %.6f %d %.6f\n", step, best, logits[best], second, logits[second]);
        if (llama_vocab_is_eog(vocab, best)) break;
        llama_token tok = best;
        if (llama_decode(ctx, llama_batch_get_one(&tok, 1))) {
            fprintf(stderr, "error: llama_decode failed at step %d\n", step);
            return 1;
        }
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(prompt);
    return 0;
}
