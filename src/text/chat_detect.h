/* Which chat family a model's template belongs to, and its style (the
 * family's flags, default system prompt, BOS and EOS texts): chat_detect.c,
 * docs/engine.md §4.7. Rendering is chat.h's. */
#ifndef PKV_CHAT_DETECT_H
#define PKV_CHAT_DETECT_H

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

#endif
