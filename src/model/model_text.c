/* The public API of a model's text side: tokenizing, pieces, special tokens,
 * chat formatting (the tokenizer and chat templates of text/, behind the model). */
#include <stdlib.h>

#include "base/error.h"
#include "model/model.h"

int pkv_tokenize(const pkv_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                 int32_t *tokens, int max_tokens, pkv_error *err) {
    return pkv_tokenizer_encode(m->tok, text, len, add_special, parse_special, tokens, max_tokens, err);
}

int pkv_tokenize_append(const pkv_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                        int32_t **tokens, int *n_tokens, int *capacity, pkv_error *err) {
    for (;;) {
        int room = *capacity - *n_tokens;
        /* no buffer yet: count first (NULL + 0 is undefined behaviour) */
        int n = pkv_tokenize(m, text, len, add_special, parse_special, *tokens ? *tokens + *n_tokens : NULL, room,
                             err);
        if (n < 0) return -1;
        if (n <= room) {
            *n_tokens += n;
            return n;
        }
        int cap = *capacity ? *capacity : 64;
        while (cap - *n_tokens < n) {
            if (cap > (1 << 29)) return pkv_fail(err, PKV_ERR_LIMIT, "prompt: more than %d tokens", 1 << 29);
            cap *= 2;
        }
        int32_t *g = realloc(*tokens, (size_t)cap * sizeof *g);
        if (!g) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory tokenizing the prompt");
        *tokens = g;
        *capacity = cap;
    }
}

int pkv_token_to_piece(const pkv_model *m, int32_t token, bool render_special, char *buf, int buf_len) {
    return pkv_tokenizer_piece(m->tok, token, render_special, buf, buf_len);
}

int32_t pkv_token_bos(const pkv_model *m) { return pkv_tokenizer_bos(m->tok); }
int32_t pkv_token_eos(const pkv_model *m) { return pkv_tokenizer_eos(m->tok); }
bool pkv_token_add_bos(const pkv_model *m) { return pkv_tokenizer_add_bos(m->tok); }
bool pkv_token_is_eog(const pkv_model *m, int32_t token) { return pkv_tokenizer_is_eog(m->tok, token); }
int pkv_n_vocab(const pkv_model *m) { return m->hp.n_vocab; }

int pkv_chat_format(const pkv_model *m, const pkv_chat_message *messages, int n_messages, char *buf, int buf_len,
                    int *system_end, pkv_error *err) {
    if (m->chat.family == PKV_CHAT_NONE) {
        if (m->chat.unknown[0])
            return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                            "model '%s': its chat template (%s) is not a format promptkv knows; name one "
                            "(--chat-template): %s",
                            m->name, m->chat.unknown, pkv_chat_family_list());
        return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                        "model '%s' (%s) has no chat template and no known chat format; name one (--chat-template): %s",
                        m->name, m->arch_name, pkv_chat_family_list());
    }
    return pkv_chat_render(&m->chat, messages, n_messages, buf, buf_len, system_end, err);
}

const char *pkv_model_chat_format(const pkv_model *m) { return pkv_chat_family_name(m->chat.family); }

bool pkv_model_has_chat_template(const pkv_model *m) { return m->has_chat_template; }
