/*
 * Prompt assembly: the request's text segments (system, context, question,
 * answer prefix, or a whole conversation) as one token sequence with the
 * boundaries a press needs.
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
 * tokenized with special-token parsing; the user's own texts are not unless
 * the parts ask for it, so a document that contains "<|im_end|>" stays text.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "promptkv.h"
#include "text/chat.h"

typedef struct {
    int32_t *ids;
    int n, cap;
} token_list;

static int append(const pkv_model *m, token_list *t, const char *text, size_t len, bool add_special,
                  bool parse_special, pkv_error *err) {
    if (len == 0 && !add_special) return 0;
    return pkv_tokenize_append(m, text, len, add_special, parse_special, &t->ids, &t->n, &t->cap, err) < 0 ? -1 : 0;
}

/* The conversation to render: the parts' messages, or [system,] user, with
 * the user message at *focus (its content is replaced while rendering). */
typedef struct {
    pkv_chat_message *msgs;
    int n, focus;
} conversation;

static int conversation_of(const pkv_prompt_parts *p, conversation *c, pkv_error *err) {
    c->n = p->messages ? p->n_messages : (p->system ? 2 : 1);
    c->msgs = malloc((size_t)(c->n > 0 ? c->n : 1) * sizeof *c->msgs);
    if (!c->msgs) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    c->focus = -1;
    if (p->messages) {
        for (int i = 0; i < c->n; i++) {
            c->msgs[i] = p->messages[i];
            if (c->msgs[i].role && !strcmp(c->msgs[i].role, "user")) c->focus = i;
        }
        if (c->focus < 0) return pkv_fail(err, PKV_ERR_ARG, "prompt: the conversation has no user message");
    } else {
        if (p->system) c->msgs[0] = (pkv_chat_message){"system", p->system};
        c->focus = c->n - 1;
        c->msgs[c->focus] = (pkv_chat_message){"user", ""};
    }
    return 0;
}

/* Renders the conversation with `content` as the focus message's content;
 * *text is malloc'd. */
static int render(const pkv_model *m, conversation *c, const char *content, char **text, int *len, int *system_end,
                  pkv_error *err) {
    c->msgs[c->focus].content = content;
    size_t cap = 512;
    for (int i = 0; i < c->n; i++) cap += (c->msgs[i].content ? strlen(c->msgs[i].content) : 0) + 64;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (cap > (size_t)1 << 30) return pkv_fail(err, PKV_ERR_LIMIT, "chat prompt: the conversation is too long");
        *text = malloc(cap);
        if (!*text) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory rendering the chat prompt");
        *len = pkv_chat_format(m, c->msgs, c->n, *text, (int)cap, system_end, err);
        if (*len < 0) {
            free(*text);
            *text = NULL;
            return -1;
        }
        if ((size_t)*len < cap) return 0;
        free(*text);
        cap = (size_t)*len + 1;
    }
    *text = NULL;
    return pkv_fail(err, PKV_ERR_INTERNAL, "chat prompt: rendering length changed");
}

/* The user's content as the template renders it: context + question, with
 * what a trimming template drops at its ends dropped from the segments (at
 * the end only for a template that strips the content with text before it,
 * as Llama 2's first turn with its system block). */
typedef struct {
    const char *context, *question;
    size_t nc, nq;
} content_segments;

static void trim_segments(content_segments *s, bool end_only) {
    size_t n = s->nc + s->nq;
    char *joined = malloc(n + 1);
    if (!joined) return; /* the rendering check below then fails cleanly */
    memcpy(joined, s->context, s->nc);
    memcpy(joined + s->nc, s->question, s->nq);
    size_t begin, end;
    pkv_chat_trim_span(joined, n, &begin, &end);
    free(joined);
    if (end_only) begin = 0;
    size_t from_context = begin < s->nc ? begin : s->nc;
    s->context += from_context;
    s->nc -= from_context;
    s->question += begin - from_context;
    s->nq -= begin - from_context;
    size_t cut = n - end, from_question = cut < s->nq ? cut : s->nq;
    s->nq -= from_question;
    s->nc -= cut - from_question;
}

static char *join(const content_segments *s) {
    char *c = malloc(s->nc + s->nq + 1);
    if (!c) return NULL;
    memcpy(c, s->context, s->nc);
    memcpy(c + s->nc, s->question, s->nq);
    c[s->nc + s->nq] = '\0';
    return c;
}

static int build_chat(const pkv_model *m, const pkv_prompt_parts *p, token_list *t, pkv_prompt_tokens *out,
                      pkv_error *err) {
    conversation conv = {0};
    char *shape = NULL, *full = NULL, *content = NULL, *as_given = NULL;
    int shape_len, full_len, system_end = 0, full_system_end;
    int rc = -1;
    if (conversation_of(p, &conv, err)) goto out;
    content_segments seg = {p->context, p->question, strlen(p->context), strlen(p->question)};
    if (p->messages) seg = (content_segments){"", p->messages[conv.focus].content, 0,
                                              strlen(p->messages[conv.focus].content)};
    /* the template around the user's content: rendered once with a one-byte
     * placeholder, then checked against the real rendering (a template that
     * rewrites the content cannot be split this way) */
    if (render(m, &conv, "\x01", &shape, &shape_len, &system_end, err)) goto out;
    const char *mark = memchr(shape, '\x01', (size_t)shape_len);
    if (!mark || memchr(mark + 1, '\x01', (size_t)(shape_len - (mark + 1 - shape)))) {
        pkv_fail(err, PKV_ERR_INTERNAL, "chat prompt: the template does not place the user's content once");
        goto out;
    }
    size_t head = (size_t)(mark - shape), tail = (size_t)shape_len - head - 1;
    /* the rendering of the content as given, then of trimmed segments that
     * must render the same text (attempt 1: both ends, 2: the end) */
    const content_segments given = seg;
    int given_len = 0;
    for (int attempt = 0;; attempt++) {
        free(content);
        free(full);
        full = NULL;
        if (!(content = join(&seg))) {
            pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
            goto out;
        }
        if (render(m, &conv, content, &full, &full_len, &full_system_end, err)) goto out;
        if (attempt == 0) {
            as_given = full;
            given_len = full_len;
            full = NULL;
        }
        const char *r = attempt == 0 ? as_given : full;
        if ((size_t)full_len == head + seg.nc + seg.nq + tail && !memcmp(r, shape, head) &&
            !memcmp(r + head + seg.nc + seg.nq, mark + 1, tail) &&
            (attempt == 0 || (full_len == given_len && !memcmp(full, as_given, (size_t)full_len))))
            break;
        if (attempt == 2) {
            pkv_fail(err, PKV_ERR_UNSUPPORTED, "chat prompt: the model's chat template changes the user's text");
            goto out;
        }
        seg = given;
        trim_segments(&seg, attempt == 1); /* Gemma's, Llama 3's, Command R's templates trim the content */
    }
    if ((size_t)system_end > head) system_end = (int)head;
    if (append(m, t, shape, (size_t)system_end, false, true, err)) goto out;
    out->system_end = t->n;
    if (append(m, t, shape + system_end, head - (size_t)system_end, false, true, err)) goto out;
    out->context_begin = t->n;
    if (append(m, t, seg.context, seg.nc, false, p->parse_special, err)) goto out;
    out->context_end = t->n;
    if (append(m, t, seg.question, seg.nq, false, p->parse_special, err)) goto out;
    out->question_end = t->n;
    if (append(m, t, mark + 1, tail, false, true, err)) goto out;
    rc = 0;
out:
    free(conv.msgs);
    free(shape);
    free(full);
    free(content);
    free(as_given);
    return rc;
}

int pkv_prompt_tokenize(const pkv_model *m, const pkv_prompt_parts *parts, pkv_prompt_tokens *out, pkv_error *err) {
    pkv_error_clear(err);
    memset(out, 0, sizeof *out);
    pkv_prompt_parts p = *parts;
    if (!p.context) p.context = "";
    if (!p.question) p.question = "";
    if (!p.answer_prefix) p.answer_prefix = "";
    if ((p.system || p.messages) && !p.chat)
        return pkv_fail(err, PKV_ERR_ARG, "prompt: a system prompt or a conversation needs the chat format (the "
                                          "model's template)");
    if (p.messages && (p.system || p.context[0] || p.question[0]))
        return pkv_fail(err, PKV_ERR_ARG, "prompt: a conversation replaces the system prompt, context and question");
    if (p.messages && p.n_messages < 1) return pkv_fail(err, PKV_ERR_ARG, "prompt: the conversation is empty");
    token_list t = {0};
    int rc;
    if (p.chat) {
        rc = build_chat(m, &p, &t, out, err);
    } else {
        /* plain text: BOS (where the model adds one) before the context */
        rc = append(m, &t, p.context, strlen(p.context), true, p.parse_special, err);
        out->context_end = t.n;
        out->context_begin = t.n > 0 && t.ids[0] == pkv_token_bos(m) && pkv_token_bos(m) >= 0 ? 1 : 0;
        if (out->context_end < out->context_begin) out->context_begin = out->context_end;
        if (rc == 0) rc = append(m, &t, p.question, strlen(p.question), false, p.parse_special, err);
        out->question_end = t.n;
    }
    if (rc == 0) rc = append(m, &t, p.answer_prefix, strlen(p.answer_prefix), false, p.parse_special, err);
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
