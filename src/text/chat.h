/* Chat formats: rendering a conversation as a family's template does
 * (chat.c), and, through chat_detect.h, which family a model's chat
 * template belongs to. docs/engine.md §4.7. */
#ifndef PKV_CHAT_H
#define PKV_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "promptkv.h"
#include "text/chat_detect.h"
#include "text/chat_style.h"

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
