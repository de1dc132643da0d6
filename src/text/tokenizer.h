/*
 * Tokenizers read from GGUF metadata (engine-notes.md §4):
 *   - "llama": SentencePiece-style (SPM) with scores and byte fallback (Llama 2, Gemma)
 *   - "gpt2":  byte-level BPE with merges and a pre-tokenizer chosen by
 *              tokenizer.ggml.pre (llama3 / llama-bpe, qwen2, gpt-2, default)
 * Special tokens (control, user-defined, unknown) are split out first,
 * longest text first (§4.2). Matches llama.cpp's tokenizer token for token.
 */
#ifndef PKV_TOKENIZER_H
#define PKV_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "promptkv.h"

typedef struct pkv_tokenizer pkv_tokenizer;

typedef enum { PKV_TOK_SPM, PKV_TOK_BPE } pkv_tok_kind;

/* Token types as tokenizer.ggml.token_type stores them. */
enum {
    PKV_TOKTYPE_NORMAL = 1,
    PKV_TOKTYPE_UNKNOWN = 2,
    PKV_TOKTYPE_CONTROL = 3,
    PKV_TOKTYPE_USER_DEFINED = 4,
    PKV_TOKTYPE_UNUSED = 5,
    PKV_TOKTYPE_BYTE = 6
};

/* Builds the tokenizer from the file's tokenizer.* keys. The strings stay
 * pointers into the mapped file, so f must outlive the tokenizer. */
pkv_tokenizer *pkv_tokenizer_load(const gguf_file *f, pkv_error *err);
void pkv_tokenizer_free(pkv_tokenizer *tok);

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

/* Chat formatting (chat.c): the family is detected from
 * tokenizer.chat_template when present, else from the architecture name. */
typedef enum {
    PKV_CHAT_NONE = 0,
    PKV_CHAT_GEMMA,  /* <start_of_turn>user ... <end_of_turn> */
    PKV_CHAT_LLAMA3, /* <|start_header_id|>user<|end_header_id|> ... <|eot_id|> */
    PKV_CHAT_CHATML  /* <|im_start|>user ... <|im_end|> (Qwen2) */
} pkv_chat_family;

pkv_chat_family pkv_chat_detect(const gguf_file *f, const char *arch);
const char *pkv_chat_family_name(pkv_chat_family family);
bool pkv_chat_default_system(const gguf_file *f, char *buf, int buf_len);

/* Renders the messages plus the assistant generation prompt. Includes the BOS
 * text where the family's template starts with it, so tokenize the result
 * with add_special = false and parse_special = true (engine-notes.md §4.6,
 * the double-BOS trap). Returns bytes written (excluding NUL) or -1; also
 * fills *system_end (may be NULL) with the byte offset where the system
 * prompt's rendering ends, for protected spans. If the rendering does not fit
 * in buf_len - 1 bytes, its full length is returned and buf holds a
 * NUL-terminated prefix. system_end is 0 when nothing of a system prompt is
 * rendered; ChatML renders default_system (the template's, from
 * pkv_chat_default_system; NULL: Qwen2's "You are a helpful assistant.") when the
 * conversation has none. tok may be NULL (the usual BOS texts are used).
 * Errors: no messages, a message without role or content, Gemma roles that do
 * not alternate user/assistant (the template raises), family NONE. */
int pkv_chat_render(pkv_chat_family family, const pkv_tokenizer *tok, const char *default_system,
                    const pkv_chat_message *messages, int n_messages, char *buf, int buf_len,
                    int *system_end, pkv_error *err);

#endif
