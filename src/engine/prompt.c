/*
 * Prompt assembly: the request's text segments (system, context, question,
 * answer prefix) as one token sequence with the boundaries a press needs.
 *
 * The segments are tokenized one by one, so each boundary falls between
 * tokens: the context is what every mode compresses, the question what only
 * query-aware mode compresses (it is fed after the press otherwise), and the
 * rest (the chat template's end of turn and assistant header, then the answer
 * prefix) is always fed after the press. This is kvpress's protocol: its
 * pipeline renders the chat template around the context, splits the
 * rendering where the context ends and appends the question, the rendering's
 * tail and the answer prefix to the question.
 *
 * Template text (the head before the user's content, the tail after it) is
 * tokenized with special-token parsing; the user's own texts are not, so a
 * document that contains "<|im_end|>" stays text.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "promptkv.h"

typedef struct {
    int32_t *ids;
    int n, cap;
} token_list;

static int append(const pkv_model *m, token_list *t, const char *text, size_t len, bool add_special,
                  bool parse_special, pkv_error *err) {
    if (len == 0 && !add_special) return 0;
    for (;;) {
        int room = t->cap - t->n;
        int n = pkv_tokenize(m, text, len, add_special, parse_special, t->ids + t->n, room, err);
        if (n < 0) return -1;
        if (n <= room) {
            t->n += n;
            return 0;
        }
        int cap = t->cap ? t->cap : 64;
        while (cap - t->n < n) {
            if (cap > (1 << 29)) return pkv_fail(err, PKV_ERR_LIMIT, "prompt: more than %d tokens", 1 << 29);
            cap *= 2;
        }
        int32_t *g = realloc(t->ids, (size_t)cap * sizeof *g);
        if (!g) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory tokenizing the prompt");
        t->ids = g;
        t->cap = cap;
    }
}

/* Renders the conversation of the parts with content `user` for the user
 * turn; *text is malloc'd. */
static int render(const pkv_model *m, const char *system, const char *user, char **text, int *len, int *system_end,
                  pkv_error *err) {
    pkv_chat_message msgs[2];
    int n = 0;
    if (system) msgs[n++] = (pkv_chat_message){"system", system};
    msgs[n++] = (pkv_chat_message){"user", user};
    int cap = (int)strlen(user) + (system ? (int)strlen(system) : 0) + 512;
    for (int attempt = 0; attempt < 2; attempt++) {
        *text = malloc((size_t)cap);
        if (!*text) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory rendering the chat prompt");
        *len = pkv_chat_format(m, msgs, n, *text, cap, system_end, err);
        if (*len < 0) {
            free(*text);
            *text = NULL;
            return -1;
        }
        if (*len < cap) return 0;
        free(*text);
        cap = *len + 1;
    }
    *text = NULL;
    return pkv_fail(err, PKV_ERR_INTERNAL, "chat prompt: rendering length changed");
}

static int build_chat(const pkv_model *m, const pkv_prompt_parts *p, token_list *t, pkv_prompt_tokens *out,
                      pkv_error *err) {
    /* the template around the user's content: rendered once with a one-byte
     * placeholder, then checked against the real rendering (a template that
     * trims or rewrites the content cannot be split this way) */
    char *shape = NULL, *full = NULL, *content = NULL;
    int shape_len, full_len, system_end = 0, full_system_end;
    int rc = -1;
    if (render(m, p->system, "\x01", &shape, &shape_len, &system_end, err)) goto out;
    const char *mark = memchr(shape, '\x01', (size_t)shape_len);
    if (!mark || memchr(mark + 1, '\x01', (size_t)(shape_len - (mark + 1 - shape)))) {
        pkv_fail(err, PKV_ERR_INTERNAL, "chat prompt: the template does not place the user's content once");
        goto out;
    }
    size_t head = (size_t)(mark - shape), tail = (size_t)shape_len - head - 1;
    size_t nc = strlen(p->context), nq = strlen(p->question);
    content = malloc(nc + nq + 1);
    if (!content) {
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(content, p->context, nc);
    memcpy(content + nc, p->question, nq + 1);
    if (render(m, p->system, content, &full, &full_len, &full_system_end, err)) goto out;
    if ((size_t)full_len != head + nc + nq + tail || memcmp(full, shape, head) ||
        memcmp(full + head + nc + nq, mark + 1, tail)) {
        pkv_fail(err, PKV_ERR_UNSUPPORTED,
                 "chat prompt: the model's chat template changes the user's text (leading or trailing white "
                 "space is trimmed): remove it from the context and question");
        goto out;
    }
    if ((size_t)system_end > head) system_end = (int)head;
    if (append(m, t, shape, (size_t)system_end, false, true, err)) goto out;
    out->system_end = t->n;
    if (append(m, t, shape + system_end, head - (size_t)system_end, false, true, err)) goto out;
    out->context_begin = t->n;
    if (append(m, t, p->context, nc, false, false, err)) goto out;
    out->context_end = t->n;
    if (append(m, t, p->question, nq, false, false, err)) goto out;
    out->question_end = t->n;
    if (append(m, t, mark + 1, tail, false, true, err)) goto out;
    rc = 0;
out:
    free(shape);
    free(full);
    free(content);
    return rc;
}

int pkv_prompt_tokenize(const pkv_model *m, const pkv_prompt_parts *parts, pkv_prompt_tokens *out, pkv_error *err) {
    pkv_error_clear(err);
    memset(out, 0, sizeof *out);
    pkv_prompt_parts p = *parts;
    if (!p.context) p.context = "";
    if (!p.question) p.question = "";
    if (!p.answer_prefix) p.answer_prefix = "";
    if (p.system && !p.chat)
        return pkv_fail(err, PKV_ERR_ARG, "prompt: a system prompt needs the chat format (the model's template)");
    token_list t = {0};
    int rc;
    if (p.chat) {
        rc = build_chat(m, &p, &t, out, err);
    } else {
        /* plain text: BOS (where the model adds one) before the context */
        rc = append(m, &t, p.context, strlen(p.context), true, false, err);
        out->context_end = t.n;
        out->context_begin = t.n > 0 && t.ids[0] == pkv_token_bos(m) && pkv_token_bos(m) >= 0 ? 1 : 0;
        if (out->context_end < out->context_begin) out->context_begin = out->context_end;
        if (rc == 0) rc = append(m, &t, p.question, strlen(p.question), false, false, err);
        out->question_end = t.n;
    }
    if (rc == 0) rc = append(m, &t, p.answer_prefix, strlen(p.answer_prefix), false, false, err);
    if (rc) {
        free(t.ids);
        memset(out, 0, sizeof *out);
        return -1;
    }
    out->tokens = t.ids;
    out->n_tokens = t.n;
    return 0;
}

void pkv_prompt_tokens_free(pkv_prompt_tokens *t) {
    free(t->tokens);
    memset(t, 0, sizeof *t);
}
