#include "model_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ref_load(const char *path, bool with_logits, ref_data *r) {
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char magic[8];
    int32_t hdr[3];
    bool ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, "PKVREF1", 8) && fread(hdr, 4, 3, f) == 3 &&
              hdr[0] > 0 && hdr[1] >= 0 && hdr[2] >= 0;
    if (ok) {
        r->n_vocab = hdr[0];
        r->n_prompt = hdr[1];
        r->n_decode = hdr[2];
        const size_t nt = (size_t)(r->n_prompt + r->n_decode);
        r->tokens = malloc(nt * sizeof *r->tokens + 1);
        ok = r->tokens && fread(r->tokens, 4, nt, f) == nt;
        if (ok && with_logits) {
            r->logits = malloc(nt * (size_t)r->n_vocab * sizeof *r->logits);
            ok = r->logits && fread(r->logits, 4, nt * (size_t)r->n_vocab, f) == nt * (size_t)r->n_vocab;
        }
    }
    fclose(f);
    return ok;
}

void ref_free(ref_data *r) {
    free(r->tokens);
    free(r->logits);
    r->tokens = NULL;
    r->logits = NULL;
}
