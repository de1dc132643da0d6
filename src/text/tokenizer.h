/*
 * Tokenizers read from GGUF metadata (docs/engine.md §4):
 *   - "llama": SentencePiece-style (SPM) with scores and byte fallback (Llama 2, Gemma)
 *   - "gpt2":  byte-level BPE with merges and a pre-tokenizer chosen by
 *              tokenizer.ggml.pre (llama3 / llama-bpe, qwen2, gpt-2, default)
 * Special tokens (control, user-defined, unknown) are split out first,
 * longest text first (§4.2). Matches llama.cpp's tokenizer token for token.
 * Loading and freeing: vocab.h; chat templates: chat.h.
 */
#ifndef PKV_TOKENIZER_H
#define PKV_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/vocab.h"

pkv_tok_kind pkv_tokenizer_kind(const pkv_tokenizer *tok);
int pkv_tokenizer_n_vocab(const pkv_tokenizer *tok);

/* Same contract as pkv_tokenize() in promptkv.h. */
int pkv_tokenizer_encode(const pkv_tokenizer *tok, const char *text, size_t len, bool add_special,
                         bool parse_special, int32_t *out, int max_tokens, pkv_error *err);

/* Same contract as pkv_token_to_piece() in promptkv.h. Returns the piece's
 * full length; when that exceeds buf_len only the first buf_len bytes are
 * written (so a caller can retry with a larger buffer). */
int pkv_tokenizer_piece(const pkv_tokenizer *tok, int32_t id, bool render_special, char *buf,
                        int buf_len);

/* The token's text as stored in the vocabulary (not decoded). */
const char *pkv_tokenizer_text(const pkv_tokenizer *tok, int32_t id, size_t *len);
/* The type as the tokenizer treats it: the file's token_type, except that
 * tokens recognised by text as end-of-generation or fill-in-the-middle
 * markers count as control tokens (as llama.cpp does). 0 for a bad id. */
int pkv_tokenizer_type(const pkv_tokenizer *tok, int32_t id);
/* Id of a token with exactly this text, or -1. */
int32_t pkv_tokenizer_find(const pkv_tokenizer *tok, const char *text);

int32_t pkv_tokenizer_bos(const pkv_tokenizer *tok);
int32_t pkv_tokenizer_eos(const pkv_tokenizer *tok);
bool pkv_tokenizer_add_bos(const pkv_tokenizer *tok);
bool pkv_tokenizer_is_eog(const pkv_tokenizer *tok, int32_t id);

#endif
