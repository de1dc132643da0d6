/* Chat templates of the three families the engine runs (chat.c). */
#ifndef PKV_CHAT_H
#define PKV_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "format/gguf.h"
#include "promptkv.h"
#include "text/vocab.h"

/* The family is detected from tokenizer.chat_template when present, else
 * from the architecture name. */
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
 * with add_special = false and parse_special = true (docs/engine.md §4.6,
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

/* The span [*begin, *end) of s[0, len) that Jinja's trim keeps (Python's
 * str.strip(): Unicode white space and U+001C..U+001F at both ends), as the
 * Gemma and Llama 3 templates apply it to a message's content. */
void pkv_chat_trim_span(const char *s, size_t len, size_t *begin, size_t *end);

#endif
