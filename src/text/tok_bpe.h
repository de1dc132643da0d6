/* Byte-level BPE encoding (tok_bpe.c, docs/engine.md §4.4). */
#ifndef PKV_TOK_BPE_H
#define PKV_TOK_BPE_H

#include "text/vocab.h"

/* Splits text into pre-tokenizer pieces; stores each piece's end offset (in
 * bytes of text) in ends (a tok_vec of size_t). An invalid UTF-8 byte counts
 * as one U+FFFD codepoint, as llama.cpp decodes it. */
int tok_pretokenize(tok_pre pre, const char *text, size_t len, tok_vec *ends, pkv_error *err);

int tok_bpe_encode(const pkv_tokenizer *tok, const char *text, size_t len, tok_out *out,
                   pkv_error *err);

#endif
