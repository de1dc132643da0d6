/*
 * Chat formatting: each family's template written out in C, so that a
 * conversation renders byte for byte as the real template renders it with
 * add_generation_prompt=true under HF's apply_chat_template (jinja2,
 * trim_blocks, lstrip_blocks). The templates are in tools/chat_templates.py
 * and tests/fixtures/chat/templates.ref holds jinja2's renderings, which
 * tests/test_chat.c compares with these (docs/engine.md §4.7).
 *
 * This file: the output buffer and the string helpers the families share
 * (chat_out.h), and the dispatch; the families are in chat_families.c and
 * chat_inst.c. Each follows its template's logic, its checks included: where
 * the template raises (roles that do not alternate, a role it does not know)
 * the renderer fails with the template's message; roles the template ignores
 * are ignored.
 */
#include "text/chat.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "text/chat_out.h"
#include "text/unicode.h"

/* ---------------------------------------------------------------- output */

void chat_put_n(chat_out *o, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++, o->n++)
        if (o->n < o->cap) o->buf[o->n] = s[i];
}

void chat_put(chat_out *o, const char *s) { chat_put_n(o, s, strlen(s)); }

/* Python's str.strip() and Jinja's trim: str.isspace() codepoints, which are
 * Unicode White_Space plus U+001C..U+001F. */
static bool is_python_space(uint32_t cp) {
    return (cp >= 0x1C && cp <= 0x1F) || (pkv_unicode_flags(cp) & PKV_UFLAG_WHITESPACE);
}

void pkv_chat_trim_span(const char *s, size_t len, size_t *begin_out, size_t *end_out) {
    size_t used, begin = 0, end = len;
    while (begin < end && is_python_space(pkv_utf8_decode(s + begin, end - begin, &used))) begin += used;
    while (end > begin) {
        size_t start = end - 1;
        while (start > begin && end - start < 4 && ((unsigned char)s[start] & 0xC0) == 0x80) start--;
        uint32_t cp = pkv_utf8_decode(s + start, end - start, &used);
        if (start + used != end || !is_python_space(cp)) break;
        end = start;
    }
    *begin_out = begin;
    *end_out = end;
}

void chat_put_trimmed(chat_out *o, const char *s) {
    size_t begin, end;
    pkv_chat_trim_span(s, strlen(s), &begin, &end);
    chat_put_n(o, s + begin, end - begin);
}

/* (parts[0] + ... + parts[n-1]).strip(), as Llama 2's template strips the
 * first turn with its system block in front: the ends of the whole, not of
 * each part. *head_end (may be NULL) gets the output offset where the parts
 * before the last end (clipped to what the strip kept). */
int chat_put_stripped(chat_out *o, const char *const *parts, int n, size_t *head_end) {
    size_t total = 0, head = 0;
    for (int i = 0; i < n; i++) total += strlen(parts[i]);
    char *all = malloc(total + 1);
    if (!all) return pkv_fail(o->err, PKV_ERR_NOMEM, "chat: out of memory");
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (i == n - 1) head = at;
        size_t len = strlen(parts[i]);
        memcpy(all + at, parts[i], len);
        at += len;
    }
    size_t begin, end;
    pkv_chat_trim_span(all, total, &begin, &end);
    size_t start = o->n;
    chat_put_n(o, all + begin, end - begin);
    if (head_end) head_end[0] = start + (head < begin ? 0 : head - begin < end - begin ? head - begin : end - begin);
    free(all);
    return 0;
}

void chat_mark_system_end(chat_out *o) { o->system_end = o->n; }

/* strftime_now(format) as HF's template helper gives it: the local date
 * when rendering, or the style's fixed instant (tests) in UTC. */
int chat_put_date(chat_out *o, const char *format) {
    time_t now = o->st->now ? (time_t)o->st->now : time(NULL);
    struct tm tm;
    char text[64];
    if (!(o->st->now ? gmtime_r(&now, &tm) : localtime_r(&now, &tm)) || !strftime(text, sizeof text, format, &tm))
        return pkv_fail(o->err, PKV_ERR_INTERNAL, "chat (%s): no date for the template", pkv_chat_family_name(o->st->family));
    chat_put(o, text);
    return 0;
}

bool chat_is_role(const pkv_chat_message *m, const char *role) { return !strcmp(m->role, role); }

int chat_raise(chat_out *o, const char *message) {
    return pkv_fail(o->err, PKV_ERR_ARG, "chat (%s): %s", pkv_chat_family_name(o->st->family), message);
}

/* The check most templates open with: from the first message of msgs on,
 * user, assistant, user, ... (other roles count as not-user). */
int chat_check_alternation(chat_out *o, const pkv_chat_message *msgs, int n, const char *message) {
    for (int k = 0; k < n; k++)
        if (chat_is_role(&msgs[k], "user") != (k % 2 == 0)) return chat_raise(o, message);
    return 0;
}

/* s[0, n) without the characters c at its start (lstrip) or end (rstrip). */
void chat_lstrip_char(const char **s, size_t *n, char c) {
    while (*n && **s == c) (*s)++, (*n)--;
}
void chat_rstrip_char(const char *s, size_t *n, char c) {
    while (*n && s[*n - 1] == c) (*n)--;
}

const char *chat_last_of(const char *s, size_t n, const char *needle) {
    const char *found = NULL;
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) found = s + i;
    return found;
}

/* ---------------------------------------------------------------- dispatch */

typedef int (*render_fn)(chat_out *o, const pkv_chat_message *m, int n);

static const render_fn RENDER[PKV_CHAT_N_FAMILIES] = {
    [PKV_CHAT_CHATML] = chat_render_chatml,
    [PKV_CHAT_LLAMA2] = chat_render_llama2,
    [PKV_CHAT_LLAMA2_SYS] = chat_render_llama2_sys,
    [PKV_CHAT_LLAMA3] = chat_render_llama3,
    [PKV_CHAT_MISTRAL_V1] = chat_render_mistral_v1,
    [PKV_CHAT_MISTRAL_V3] = chat_render_mistral_v3,
    [PKV_CHAT_MISTRAL_V3_TEKKEN] = chat_render_mistral_v3,
    [PKV_CHAT_MISTRAL_V7] = chat_render_mistral_v7,
    [PKV_CHAT_MISTRAL_V7_TEKKEN] = chat_render_mistral_v7,
    [PKV_CHAT_PHI3] = chat_render_phi3,
    [PKV_CHAT_PHI4] = chat_render_phi4,
    [PKV_CHAT_GEMMA] = chat_render_gemma,
    [PKV_CHAT_DEEPSEEK] = chat_render_deepseek,
    [PKV_CHAT_DEEPSEEK3] = chat_render_deepseek3,
    [PKV_CHAT_COMMAND_R] = chat_render_command_r,
    [PKV_CHAT_ZEPHYR] = chat_render_zephyr,
    [PKV_CHAT_VICUNA] = chat_render_vicuna,
    [PKV_CHAT_VICUNA_ORCA] = chat_render_vicuna,
    [PKV_CHAT_OPENCHAT] = chat_render_openchat,
    [PKV_CHAT_GRANITE] = chat_render_granite,
    [PKV_CHAT_FALCON3] = chat_render_falcon3,
    [PKV_CHAT_EXAONE3] = chat_render_exaone3,
};

int pkv_chat_render(const pkv_chat_style *st, const pkv_chat_message *messages, int n_messages, char *buf,
                    int buf_len, int *system_end, pkv_error *err) {
    if (!st || !messages || n_messages < 1 || buf_len < 0 || (!buf && buf_len > 0))
        return pkv_fail(err, PKV_ERR_ARG, "chat: need a format, at least one message and a buffer");
    for (int k = 0; k < n_messages; k++)
        if (!messages[k].role || !messages[k].content)
            return pkv_fail(err, PKV_ERR_ARG, "chat: message %d has no role or content", k);
    if (st->family <= PKV_CHAT_NONE || st->family >= PKV_CHAT_N_FAMILIES)
        return pkv_fail(err, PKV_ERR_UNSUPPORTED, "chat: no chat format");
    chat_out o = {buf, buf_len > 0 ? (size_t)buf_len - 1 : 0, 0, st, 0, err};
    if (RENDER[st->family](&o, messages, n_messages)) return -1;
    if (o.n > (size_t)INT32_MAX) return pkv_fail(err, PKV_ERR_LIMIT, "chat: rendering of %zu bytes is too long", o.n);
    if (buf_len > 0) buf[o.n < o.cap ? o.n : o.cap] = '\0';
    if (system_end) *system_end = (int)o.system_end;
    return (int)o.n;
}
