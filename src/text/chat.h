/* Chat formats: which family a model's chat template belongs to
 * (chat_detect.c) and rendering a conversation as that family's template
 * does (chat.c). docs/engine.md §4.7. */
#ifndef PKV_CHAT_H
#define PKV_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "format/gguf.h"
#include "promptkv.h"
#include "text/chat_style.h"
#include "text/vocab.h"

/* The family whose template text this is (llama.cpp's markers, extended to
 * tell the variants apart, docs/engine.md §4.7), or PKV_CHAT_NONE; fills
 * style's family, flags and default system prompt (the special texts are
 * left to the caller). */
pkv_chat_family pkv_chat_detect_text(const char *tmpl, size_t len, pkv_chat_style *style);

/* A family by name ("chatml", "llama3", "mistral-v7", ...; llama.cpp's
 * aliases llama2-sys-bos and llama2-sys-strip too), with the variant of the
 * template the family is checked against; PKV_CHAT_NONE when unknown. */
pkv_chat_family pkv_chat_family_named(const char *name, pkv_chat_style *style);
const char *pkv_chat_family_name(pkv_chat_family family);
/* Every family name, comma-separated, for messages. */
const char *pkv_chat_family_list(void);

/* The style of a model: from `override` when given (a family name or a
 * template text; unknown is an error quoting its first line), else from
 * tokenizer.chat_template (unknown: family NONE with style->unknown set,
 * not an error: the model still runs without chat), else from the
 * architecture (gemma*, llama with Llama 3's header token, qwen2). The BOS
 * and EOS texts come from the vocabulary where it has them (vocab may be
 * NULL), else the family's usual ones. */
int pkv_chat_style_for_model(const gguf_file *f, const char *arch, const pkv_tokenizer *vocab, const char *override,
                             pkv_chat_style *style, pkv_error *err);

/* Fills the BOS and EOS texts the family's templates are usually given. */
void pkv_chat_style_default_tokens(pkv_chat_style *style);

/* Renders the messages plus the assistant generation prompt, byte for byte
 * what the family's template renders with add_generation_prompt (HF's
 * apply_chat_template; tests/fixtures/chat/templates.ref). The BOS text is
 * included where the template writes it, so tokenize the result with
 * add_special = false and parse_special = true (docs/engine.md §4.6, the
 * double-BOS trap). Returns bytes written (excluding NUL) or -1; if the
 * rendering does not fit in buf_len - 1 bytes, its full length is returned
 * and buf holds a NUL-terminated prefix. *system_end (may be NULL) gets the
 * byte offset where the system prompt's rendering ends, for protected spans:
 * the first message's when it is a system message, else the template's own
 * default's, else 0; a template that writes the system prompt into a later
 * turn (mistral v3) gives an offset past the turns before it. Errors: no
 * messages, a message without role or content, and whatever the template
 * raises (roles that do not alternate, a role it does not know), family
 * NONE. */
int pkv_chat_render(const pkv_chat_style *style, const pkv_chat_message *messages, int n_messages, char *buf,
                    int buf_len, int *system_end, pkv_error *err);

/* The span [*begin, *end) of s[0, len) that Jinja's trim and Python's
 * str.strip() keep (Unicode white space and U+001C..U+001F at both ends),
 * as templates apply them to a message's content. */
void pkv_chat_trim_span(const char *s, size_t len, size_t *begin, size_t *end);

#endif
