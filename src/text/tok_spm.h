/* SentencePiece-style encoding (tok_spm.c, docs/engine.md §4.3). */
#ifndef PKV_TOK_SPM_H
#define PKV_TOK_SPM_H

#include "text/vocab.h"

/* Tokenizes one raw fragment (after the optional space prefix, §4.3). */
int tok_spm_encode(const pkv_tokenizer *tok, const char *text, size_t len, bool space_prefix,
                   tok_out *out, pkv_error *err);

#endif
