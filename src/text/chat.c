/*
 * Chat formatting: each family's template written out in C, so that a
 * conversation renders byte for byte as the real template renders it with
 * add_generation_prompt=true under HF's apply_chat_template (jinja2,
 * trim_blocks, lstrip_blocks). The templates are in tools/chat_templates.py
 * and tests/fixtures/chat/templates.ref holds jinja2's renderings, which
 * tests/test_chat.c compares with these (docs/engine.md §4.7).
 *
 * Each function below follows its template's logic, its checks included:
 * where the template raises (roles that do not alternate, a role it does not
 * know) the function fails with the template's message. Roles the template
 * ignores are ignored.
 */
#include "text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "text/unicode.h"

/* ---------------------------------------------------------------- output */

typedef struct {
    char *buf;
    size_t cap; /* bytes that may be written, excluding the NUL */
    size_t n;   /* bytes rendered so far (may exceed cap) */
    const pkv_chat_style *st;
    size_t system_end;
    pkv_error *err;
} chat_out;

static void put_n(chat_out *o, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++, o->n++)
        if (o->n < o->cap) o->buf[o->n] = s[i];
}

static void put(chat_out *o, const char *s) { put_n(o, s, strlen(s)); }

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

static void put_trimmed(chat_out *o, const char *s) {
    size_t begin, end;
    pkv_chat_trim_span(s, strlen(s), &begin, &end);
    put_n(o, s + begin, end - begin);
}

/* (parts[0] + ... + parts[n-1]).strip(), as Llama 2's template strips the
 * first turn with its system block in front: the ends of the whole, not of
 * each part. *head_end (may be NULL) gets the output offset where the parts
 * before the last end (clipped to what the strip kept). */
static int put_stripped(chat_out *o, const char *const *parts, int n, size_t *head_end) {
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
    put_n(o, all + begin, end - begin);
    if (head_end) head_end[0] = start + (head < begin ? 0 : head - begin < end - begin ? head - begin : end - begin);
    free(all);
    return 0;
}

static void mark_system_end(chat_out *o) { o->system_end = o->n; }

/* strftime_now(format) as HF's template helper gives it: the local date
 * when rendering, or the style's fixed instant (tests) in UTC. */
static int put_date(chat_out *o, const char *format) {
    time_t now = o->st->now ? (time_t)o->st->now : time(NULL);
    struct tm tm;
    char text[64];
    if (!(o->st->now ? gmtime_r(&now, &tm) : localtime_r(&now, &tm)) || !strftime(text, sizeof text, format, &tm))
        return pkv_fail(o->err, PKV_ERR_INTERNAL, "chat (%s): no date for the template", pkv_chat_family_name(o->st->family));
    put(o, text);
    return 0;
}

static bool is_role(const pkv_chat_message *m, const char *role) { return !strcmp(m->role, role); }

static int raise(chat_out *o, const char *message) {
    return pkv_fail(o->err, PKV_ERR_ARG, "chat (%s): %s", pkv_chat_family_name(o->st->family), message);
}

/* The check most templates open with: from the first message of msgs on,
 * user, assistant, user, ... (other roles count as not-user). */
static int check_alternation(chat_out *o, const pkv_chat_message *msgs, int n, const char *message) {
    for (int k = 0; k < n; k++)
        if (is_role(&msgs[k], "user") != (k % 2 == 0)) return raise(o, message);
    return 0;
}

static const char ALTERNATE[] = "Conversation roles must alternate user/assistant/user/assistant/...";
static const char ALTERNATE_AFTER_SYSTEM[] =
    "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...";
static const char ONLY_USER_ASSISTANT_SYSTEM[] =
    "Only user and assistant roles are supported, with the exception of an initial optional system message!";

/* ---------------------------------------------------------------- ChatML, Phi, Granite, ... (one block a message) */

/* s[0, n) without the characters c at its start (lstrip) or end (rstrip). */
static void lstrip_char(const char **s, size_t *n, char c) {
    while (*n && **s == c) (*s)++, (*n)--;
}
static void rstrip_char(const char *s, size_t *n, char c) {
    while (*n && s[*n - 1] == c) (*n)--;
}

static const char *last_of(const char *s, size_t n, const char *needle) {
    const char *found = NULL;
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) found = s + i;
    return found;
}

static bool is_tool_response(const char *c) {
    size_t n = strlen(c), a = strlen("<tool_response>"), b = strlen("</tool_response>");
    return n >= a && n >= b && !memcmp(c, "<tool_response>", a) && !memcmp(c + n - b, "</tool_response>", b);
}

/* Qwen3: no default system prompt; an assistant turn's text after its
 * </think> (the reasoning before it dropped), except after the last user
 * message, where the reasoning is kept in a <think> block (an empty one for
 * the last message); tool results as user turns of <tool_response> blocks. */
static int render_qwen3(chat_out *o, const pkv_chat_message *m, int n) {
    if (is_role(&m[0], "system")) {
        put(o, "<|im_start|>system\n");
        put(o, m[0].content);
        put(o, "<|im_end|>\n");
        mark_system_end(o);
    }
    int last_query = n - 1;
    for (int k = n - 1; k >= 0; k--)
        if (is_role(&m[k], "user") && !is_tool_response(m[k].content)) {
            last_query = k;
            break;
        }
    for (int k = 0; k < n; k++) {
        if (is_role(&m[k], "user") || (is_role(&m[k], "system") && k > 0)) {
            put(o, "<|im_start|>");
            put(o, m[k].role);
            put(o, "\n");
            put(o, m[k].content);
            put(o, "<|im_end|>\n");
        } else if (is_role(&m[k], "assistant")) {
            const char *c = m[k].content, *r = "";
            size_t nc = strlen(c), nr = 0;
            const char *close = strstr(c, "</think>");
            if (close) {
                /* content.split('</think>')[-1].lstrip('\n') and
                 * content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                const char *after = last_of(c, nc, "</think>") + strlen("</think>");
                size_t na = nc - (size_t)(after - c);
                r = c;
                nr = (size_t)(close - c);
                rstrip_char(r, &nr, '\n');
                const char *open = last_of(r, nr, "<think>");
                if (open) {
                    nr -= (size_t)(open + strlen("<think>") - r);
                    r = open + strlen("<think>");
                }
                lstrip_char(&r, &nr, '\n');
                c = after;
                nc = na;
                lstrip_char(&c, &nc, '\n');
            }
            put(o, "<|im_start|>assistant\n");
            if (k > last_query && (k == n - 1 || nr > 0)) {
                lstrip_char(&r, &nr, '\n');
                rstrip_char(r, &nr, '\n');
                put(o, "<think>\n");
                put_n(o, r, nr);
                put(o, "\n</think>\n\n");
                lstrip_char(&c, &nc, '\n');
            }
            put_n(o, c, nc);
            put(o, "<|im_end|>\n");
        } else if (is_role(&m[k], "tool")) {
            if (k == 0 || !is_role(&m[k - 1], "tool")) put(o, "<|im_start|>user");
            put(o, "\n<tool_response>\n");
            put(o, m[k].content);
            put(o, "\n</tool_response>");
            if (k == n - 1 || !is_role(&m[k + 1], "tool")) put(o, "<|im_end|>\n");
        }
    }
    put(o, "<|im_start|>assistant\n");
    return 0;
}

/* OpenHermes, Qwen2, Qwen2.5: <|im_start|>ROLE\nCONTENT<|im_end|>\n; Qwen's
 * templates open with their default system prompt when the first message is
 * not a system message. */
static int render_chatml(chat_out *o, const pkv_chat_message *m, int n) {
    const pkv_chat_style *st = o->st;
    if (st->flags & PKV_CHAT_QWEN3_THINK) return render_qwen3(o, m, n);
    bool qwq = st->flags & PKV_CHAT_QWQ_THINK;
    if (qwq && is_role(&m[0], "system")) {
        put(o, "<|im_start|>system\n");
        put(o, m[0].content);
        put(o, "<|im_end|>\n");
        mark_system_end(o);
    }
    for (int k = 0; k < n; k++) {
        if (k == 0 && st->has_default_system && !is_role(&m[0], "system")) {
            put(o, "<|im_start|>system\n");
            put(o, st->default_system);
            put(o, "<|im_end|>\n");
            mark_system_end(o);
        }
        const char *c = m[k].content;
        if (qwq && (is_role(&m[k], "tool") || !(is_role(&m[k], "user") || is_role(&m[k], "system") ||
                                                 is_role(&m[k], "assistant"))))
            return raise(o, "role not supported (QwQ renders system, user and assistant)");
        if (qwq && is_role(&m[k], "system") && k == 0) continue; /* written in the header */
        if (qwq && is_role(&m[k], "assistant") && k != n - 1) {
            /* content.split('</think>')[-1].lstrip('\n') */
            const char *after = last_of(c, strlen(c), "</think>");
            if (after) c = after + strlen("</think>");
            while (*c == '\n') c++;
        }
        put(o, "<|im_start|>");
        put(o, m[k].role);
        put(o, "\n");
        put(o, c);
        put(o, "<|im_end|>\n");
        if (k == 0 && is_role(&m[0], "system")) mark_system_end(o);
    }
    put(o, qwq ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n");
    return 0;
}

/* Llama 3.1, 3.2, 3.3 (no tools): a system block that always opens with
 * the knowledge cutoff and the date (3.2: today's), then the system
 * message's trimmed text; the other messages as Llama 3's. */
static int render_llama31(chat_out *o, const pkv_chat_message *m, int n) {
    const pkv_chat_style *st = o->st;
    bool has_system = is_role(&m[0], "system");
    put(o, st->bos);
    put(o, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
    if (!(st->flags & PKV_CHAT_DATE_TODAY)) put(o, "26 Jul 2024");
    else if (put_date(o, "%d %b %Y")) return -1;
    put(o, "\n\n");
    if (has_system) put_trimmed(o, m[0].content);
    put(o, "<|eot_id|>");
    mark_system_end(o);
    for (int k = has_system; k < n; k++) {
        bool tool = is_role(&m[k], "tool") || is_role(&m[k], "ipython");
        put(o, "<|start_header_id|>");
        put(o, tool ? "ipython" : m[k].role);
        put(o, "<|end_header_id|>\n\n");
        if (tool) put(o, m[k].content);
        else put_trimmed(o, m[k].content);
        put(o, "<|eot_id|>");
    }
    put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* Llama 3: every message a header block, its content trimmed; BOS first. */
static int render_llama3(chat_out *o, const pkv_chat_message *m, int n) {
    if (o->st->flags & PKV_CHAT_DATE_HEADER) return render_llama31(o, m, n);
    for (int k = 0; k < n; k++) {
        if (k == 0) put(o, o->st->bos);
        put(o, "<|start_header_id|>");
        put(o, m[k].role);
        put(o, "<|end_header_id|>\n\n");
        put_trimmed(o, m[k].content);
        put(o, "<|eot_id|>");
        if (k == 0 && is_role(&m[0], "system")) mark_system_end(o);
    }
    put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* Phi 3 / 3.5: <|ROLE|>\nCONTENT<|end|>\n for system, user and assistant;
 * Phi 3.5 skips an empty system message; Phi-4-mini writes <|ROLE|>CONTENT<|end|>
 * for every role. */
static int render_phi3(chat_out *o, const pkv_chat_message *m, int n) {
    if (o->st->flags & PKV_CHAT_COMPACT) {
        for (int k = 0; k < n; k++) {
            put(o, "<|");
            put(o, m[k].role);
            put(o, "|>");
            put(o, m[k].content);
            put(o, "<|end|>");
            if (k == 0 && is_role(&m[0], "system")) mark_system_end(o);
        }
        put(o, "<|assistant|>");
        return 0;
    }
    for (int k = 0; k < n; k++) {
        bool sys = is_role(&m[k], "system");
        if (sys && (o->st->flags & PKV_CHAT_SKIP_EMPTY_SYSTEM) && !m[k].content[0]) continue;
        if (!sys && !is_role(&m[k], "user") && !is_role(&m[k], "assistant")) continue;
        put(o, "<|");
        put(o, m[k].role);
        put(o, "|>\n");
        put(o, m[k].content);
        put(o, "<|end|>\n");
        if (k == 0 && sys) mark_system_end(o);
    }
    put(o, "<|assistant|>\n");
    return 0;
}

/* Phi 4: the assistant header follows each user turn; no generation prompt
 * of its own. */
static int render_phi4(chat_out *o, const pkv_chat_message *m, int n) {
    for (int k = 0; k < n; k++) {
        if (is_role(&m[k], "system")) {
            put(o, "<|im_start|>system<|im_sep|>");
            put(o, m[k].content);
            put(o, "<|im_end|>");
            if (k == 0) mark_system_end(o);
        } else if (is_role(&m[k], "user")) {
            put(o, "<|im_start|>user<|im_sep|>");
            put(o, m[k].content);
            put(o, "<|im_end|><|im_start|>assistant<|im_sep|>");
        } else if (is_role(&m[k], "assistant")) {
            put(o, m[k].content);
            put(o, "<|im_end|>");
        }
    }
    return 0;
}

/* Zephyr (TinyLlama chat): <|ROLE|>\nCONTENT</s>\n, the generation prompt
 * after the last message. */
static int render_zephyr(chat_out *o, const pkv_chat_message *m, int n) {
    for (int k = 0; k < n; k++) {
        if (is_role(&m[k], "user") || is_role(&m[k], "system") || is_role(&m[k], "assistant")) {
            put(o, "<|");
            put(o, m[k].role);
            put(o, "|>\n");
            put(o, m[k].content);
            put(o, o->st->eos);
            put(o, "\n");
            if (k == 0 && is_role(&m[0], "system")) mark_system_end(o);
        }
        if (k == n - 1) put(o, "<|assistant|>\n");
    }
    return 0;
}

/* Falcon 3 (its template's branch without tools): the last assistant turn
 * has no newline after its EOS. */
static int render_falcon3(chat_out *o, const pkv_chat_message *m, int n) {
    for (int k = 0; k < n; k++) {
        if (is_role(&m[k], "system") || is_role(&m[k], "user")) {
            put(o, "<|");
            put(o, m[k].role);
            put(o, "|>\n");
            put(o, m[k].content);
            put(o, "\n");
            if (k == 0 && is_role(&m[0], "system")) mark_system_end(o);
        } else if (is_role(&m[k], "assistant")) {
            put(o, "<|assistant|>\n");
            put(o, m[k].content);
            put(o, o->st->eos);
            if (k != n - 1) put(o, "\n");
        }
        if (k == n - 1) put(o, "<|assistant|>\n");
    }
    return 0;
}

/* Granite 3.1, 3.2 (no tools, documents or thinking): a system block
 * always, the template's default with today's date when there is no system
 * message; then every message alike, the generation prompt after the last. */
static int render_granite31(chat_out *o, const pkv_chat_message *m, int n) {
    bool has_system = is_role(&m[0], "system");
    put(o, "<|start_of_role|>system<|end_of_role|>");
    if (has_system) {
        put(o, m[0].content);
    } else {
        put(o, "Knowledge Cutoff Date: April 2024.\nToday's Date: ");
        if (put_date(o, "%B %d, %Y")) return -1;
        put(o, ".\nYou are Granite, developed by IBM. You are a helpful AI assistant.");
    }
    put(o, "<|end_of_text|>\n");
    mark_system_end(o);
    for (int k = has_system; k < n; k++) {
        put(o, "<|start_of_role|>");
        put(o, m[k].role);
        put(o, "<|end_of_role|>");
        put(o, m[k].content);
        put(o, "<|end_of_text|>\n");
        if (k == n - 1) put(o, "<|start_of_role|>assistant<|end_of_role|>");
    }
    return 0;
}

/* Granite 3.0: <|start_of_role|>ROLE<|end_of_role|>CONTENT<|end_of_text|>\n. */
static int render_granite(chat_out *o, const pkv_chat_message *m, int n) {
    if (o->st->flags & PKV_CHAT_GRANITE_DATE) return render_granite31(o, m, n);
    for (int k = 0; k < n; k++) {
        const char *r = m[k].role;
        if (!strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") || !strcmp(r, "tool_response")) {
            put(o, "<|start_of_role|>");
            put(o, r);
            put(o, "<|end_of_role|>");
        } else if (!strcmp(r, "assistant_tool_call")) {
            put(o, "<|start_of_role|>assistant<|end_of_role|><|tool_call|>");
        } else {
            if (k == n - 1) put(o, "<|start_of_role|>assistant<|end_of_role|>");
            continue;
        }
        put(o, m[k].content);
        put(o, "<|end_of_text|>\n");
        if (k == 0 && is_role(&m[0], "system")) mark_system_end(o);
        if (k == n - 1) put(o, "<|start_of_role|>assistant<|end_of_role|>");
    }
    return 0;
}

/* EXAONE 3 / 3.5: an empty system block opens a conversation without one;
 * a user turn ends with a newline, the others with [|endofturn|]\n. */
static int render_exaone3(chat_out *o, const pkv_chat_message *m, int n) {
    for (int k = 0; k < n; k++) {
        if (k == 0 && !is_role(&m[0], "system")) {
            put(o, "[|system|][|endofturn|]\n");
            mark_system_end(o);
        }
        put(o, "[|");
        put(o, m[k].role);
        put(o, "|]");
        put(o, m[k].content);
        put(o, is_role(&m[k], "user") ? "\n" : "[|endofturn|]\n");
        if (k == 0 && is_role(&m[0], "system")) mark_system_end(o);
    }
    put(o, "[|assistant|]");
    return 0;
}

/* OpenChat 3.5: 'GPT4 Correct ' + role.title() + ': '. */
static int render_openchat(chat_out *o, const pkv_chat_message *m, int n) {
    put(o, o->st->bos);
    for (int k = 0; k < n; k++) {
        put(o, "GPT4 Correct ");
        /* str.title() of an ASCII role: upper after a non-letter, lower after a letter */
        bool after_letter = false;
        for (const char *c = m[k].role; *c; c++) {
            bool letter = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z');
            char ch = *c;
            if (letter) ch = after_letter ? (char)(ch | 0x20) : (char)(ch & ~0x20);
            put_n(o, &ch, 1);
            after_letter = letter;
        }
        put(o, ": ");
        put(o, m[k].content);
        put(o, "<|end_of_turn|>");
        if (k == 0 && is_role(&m[0], "system")) mark_system_end(o);
    }
    put(o, "GPT4 Correct Assistant:");
    return 0;
}

/* Vicuna 1.1 and its Orca variant (no role but system and user: assistant). */
static int render_vicuna(chat_out *o, const pkv_chat_message *m, int n) {
    bool orca = o->st->family == PKV_CHAT_VICUNA_ORCA;
    for (int k = 0; k < n; k++) {
        if (is_role(&m[k], "system")) {
            put(o, orca ? "SYSTEM: " : "");
            put(o, m[k].content);
            put(o, orca ? "\n" : "\n\n");
            if (k == 0) mark_system_end(o);
        } else if (is_role(&m[k], "user")) {
            put(o, "USER: ");
            put(o, m[k].content);
            put(o, "\n");
        } else {
            put(o, "ASSISTANT: ");
            put(o, m[k].content);
            put(o, "</s>\n");
        }
    }
    put(o, "ASSISTANT:");
    return 0;
}

/* DeepSeek Coder: its default system prompt unless some message is a system
 * message; every role but system and user is a response. */
static int render_deepseek(chat_out *o, const pkv_chat_message *m, int n) {
    bool found = false;
    for (int k = 0; k < n; k++) found |= is_role(&m[k], "system");
    put(o, o->st->bos);
    if (!found && o->st->has_default_system) {
        put(o, o->st->default_system);
        mark_system_end(o);
    }
    for (int k = 0; k < n; k++) {
        if (is_role(&m[k], "system")) {
            put(o, m[k].content);
            if (k == 0) mark_system_end(o);
        } else if (is_role(&m[k], "user")) {
            put(o, "### Instruction:\n");
            put(o, m[k].content);
            put(o, "\n");
        } else {
            put(o, "### Response:\n");
            put(o, m[k].content);
            put(o, "\n<|EOT|>\n");
        }
    }
    put(o, "### Response:\n");
    return 0;
}

#define DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DS_END "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

/* DeepSeek V3 / R1: the system prompts first (V3 joins them all, R1 keeps
 * the last), then user and assistant turns with no separator. */
static int render_deepseek3(chat_out *o, const pkv_chat_message *m, int n) {
    unsigned fl = o->st->flags;
    put(o, o->st->bos);
    bool first = true;
    int last = -1;
    for (int k = 0; k < n; k++) {
        if (!is_role(&m[k], "system")) continue;
        if (fl & PKV_CHAT_SYSTEM_JOIN) {
            if (!first) put(o, "\n\n");
            put(o, m[k].content);
            first = false;
        }
        last = k;
    }
    if (!(fl & PKV_CHAT_SYSTEM_JOIN) && last >= 0) put(o, m[last].content);
    if (is_role(&m[0], "system")) mark_system_end(o);
    for (int k = 0; k < n; k++) {
        if (is_role(&m[k], "user")) {
            put(o, DS_USER);
            put(o, m[k].content);
        } else if (is_role(&m[k], "assistant")) {
            const char *c = m[k].content, *think;
            if (fl & PKV_CHAT_STRIP_THINK)
                while ((think = strstr(c, "</think>"))) c = think + strlen("</think>");
            put(o, DS_ASSISTANT);
            put(o, c);
            put(o, DS_END);
        } else if (is_role(&m[k], "tool")) {
            return raise(o, "tool messages are not supported");
        }
    }
    put(o, DS_ASSISTANT);
    if (fl & PKV_CHAT_THINK_PROMPT) put(o, "<think>\n");
    return 0;
}

/* ---------------------------------------------------------------- the [INST] families */

/* Llama 2 without a system role (Mistral 7B v0.1's first template). */
static int render_llama2(chat_out *o, const pkv_chat_message *m, int n) {
    if (check_alternation(o, m, n, ALTERNATE)) return -1;
    put(o, o->st->bos);
    for (int k = 0; k < n; k++) {
        if (is_role(&m[k], "user")) {
            put(o, "[INST] ");
            put(o, m[k].content);
            put(o, " [/INST]");
        } else if (is_role(&m[k], "assistant")) {
            put(o, m[k].content);
            put(o, o->st->eos);
        } else {
            return raise(o, "Only user and assistant roles are supported!");
        }
    }
    return 0;
}

/* Llama 2 chat: BOS before every turn, contents stripped, the system block
 * inside the first turn (stripped with it as one string). */
static int render_llama2_sys(chat_out *o, const pkv_chat_message *m, int n) {
    bool has_system = is_role(&m[0], "system");
    const pkv_chat_message *loop = m + has_system;
    int nl = n - has_system;
    if (check_alternation(o, loop, nl, ALTERNATE)) return -1;
    for (int k = 0; k < nl; k++) {
        bool with_system = k == 0 && has_system;
        const char *parts[4] = {"<<SYS>>\n", with_system ? m[0].content : "", "\n<</SYS>>\n\n", loop[k].content};
        const char *const *content = with_system ? parts : parts + 3;
        int n_parts = with_system ? 4 : 1;
        size_t head_end;
        if (is_role(&loop[k], "user")) {
            put(o, o->st->bos);
            put(o, "[INST] ");
            if (put_stripped(o, content, n_parts, &head_end)) return -1;
            put(o, " [/INST]");
        } else if (is_role(&loop[k], "assistant")) {
            put(o, " ");
            if (put_stripped(o, content, n_parts, &head_end)) return -1;
            put(o, " ");
            put(o, o->st->eos);
        } else {
            continue;
        }
        if (with_system) o->system_end = head_end;
    }
    return 0;
}

/* Mistral v1: " [INST] ", the system prompt before the first user turn. */
static int render_mistral_v1(chat_out *o, const pkv_chat_message *m, int n) {
    bool has_system = is_role(&m[0], "system");
    const pkv_chat_message *loop = m + has_system;
    int nl = n - has_system;
    if (check_alternation(o, loop, nl, ALTERNATE_AFTER_SYSTEM)) return -1;
    put(o, o->st->bos);
    for (int k = 0; k < nl; k++) {
        if (is_role(&loop[k], "user")) {
            put(o, " [INST] ");
            if (k == 0 && has_system) {
                put(o, m[0].content);
                put(o, "\n\n");
                mark_system_end(o);
            }
            put(o, loop[k].content);
            put(o, " [/INST]");
        } else if (is_role(&loop[k], "assistant")) {
            put(o, " ");
            put(o, loop[k].content);
            put(o, o->st->eos);
        } else {
            return raise(o, ONLY_USER_ASSISTANT_SYSTEM);
        }
    }
    return 0;
}

/* Mistral v3 and v3-tekken (Nemo): the system prompt goes into the last
 * message when that is a user turn (and nowhere otherwise); v3 writes
 * "[INST] " and " " + the assistant's trimmed text, tekken neither space nor
 * the trim. */
static int render_mistral_v3(chat_out *o, const pkv_chat_message *m, int n) {
    bool tekken = o->st->family == PKV_CHAT_MISTRAL_V3_TEKKEN;
    bool has_system = is_role(&m[0], "system");
    const pkv_chat_message *loop = m + has_system;
    int nl = n - has_system;
    if (check_alternation(o, loop, nl, ALTERNATE_AFTER_SYSTEM)) return -1;
    put(o, o->st->bos);
    for (int k = 0; k < nl; k++) {
        if (is_role(&loop[k], "user")) {
            put(o, tekken ? "[INST]" : "[INST] ");
            if (k == nl - 1 && has_system) {
                put(o, m[0].content);
                put(o, "\n\n");
                mark_system_end(o);
            }
            put(o, loop[k].content);
            put(o, "[/INST]");
        } else if (is_role(&loop[k], "assistant")) {
            if (tekken) {
                put(o, loop[k].content);
            } else {
                put(o, " ");
                put_trimmed(o, loop[k].content);
            }
            put(o, o->st->eos);
        } else {
            return raise(o, ONLY_USER_ASSISTANT_SYSTEM);
        }
    }
    return 0;
}

/* Mistral v7: system prompts anywhere, in their own block; v7-tekken
 * (Mistral Small 3) without the spaces after the tags and before the
 * assistant's text. */
static int render_mistral_v7(chat_out *o, const pkv_chat_message *m, int n) {
    bool tekken = o->st->family == PKV_CHAT_MISTRAL_V7_TEKKEN;
    put(o, o->st->bos);
    for (int k = 0; k < n; k++) {
        if (is_role(&m[k], "user")) {
            put(o, tekken ? "[INST]" : "[INST] ");
            put(o, m[k].content);
            put(o, "[/INST]");
        } else if (is_role(&m[k], "system")) {
            put(o, tekken ? "[SYSTEM_PROMPT]" : "[SYSTEM_PROMPT] ");
            put(o, m[k].content);
            put(o, "[/SYSTEM_PROMPT]");
            if (k == 0) mark_system_end(o);
        } else if (is_role(&m[k], "assistant")) {
            if (!tekken) put(o, " ");
            put(o, m[k].content);
            put(o, o->st->eos);
        } else {
            return raise(o, "Only user, system and assistant roles are supported!");
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- Gemma, Command R */

/* Gemma 3: a leading system message is prepended to the first turn's content
 * (not trimmed) with a blank line; Gemma 2 refuses it. Roles alternate
 * user/model; contents are trimmed. */
static int render_gemma(chat_out *o, const pkv_chat_message *m, int n) {
    bool has_system = is_role(&m[0], "system");
    if (has_system && (o->st->flags & PKV_CHAT_SYSTEM_RAISES)) return raise(o, "System role not supported");
    const pkv_chat_message *loop = m + has_system;
    int nl = n - has_system;
    if (check_alternation(o, loop, nl, ALTERNATE)) return -1;
    put(o, o->st->bos);
    for (int k = 0; k < nl; k++) {
        put(o, "<start_of_turn>");
        put(o, is_role(&loop[k], "assistant") ? "model" : loop[k].role);
        put(o, "\n");
        if (k == 0 && has_system) {
            put(o, m[0].content);
            put(o, "\n\n");
            mark_system_end(o);
        }
        put_trimmed(o, loop[k].content);
        put(o, "<end_of_turn>\n");
    }
    put(o, "<start_of_turn>model\n");
    return 0;
}

/* Command R: the system prompt as given, the turns stripped. */
static int render_command_r(chat_out *o, const pkv_chat_message *m, int n) {
    bool has_system = is_role(&m[0], "system");
    const pkv_chat_message *loop = m + has_system;
    int nl = n - has_system;
    put(o, o->st->bos);
    if (has_system) {
        put(o, "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>");
        put(o, m[0].content);
        put(o, "<|END_OF_TURN_TOKEN|>");
        mark_system_end(o);
    }
    if (check_alternation(o, loop, nl, ALTERNATE)) return -1;
    for (int k = 0; k < nl; k++) {
        if (is_role(&loop[k], "user")) put(o, "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>");
        else if (is_role(&loop[k], "assistant")) put(o, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
        else continue;
        put_trimmed(o, loop[k].content);
        put(o, "<|END_OF_TURN_TOKEN|>");
    }
    put(o, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
    return 0;
}

/* ---------------------------------------------------------------- dispatch */

typedef int (*render_fn)(chat_out *o, const pkv_chat_message *m, int n);

static const render_fn RENDER[PKV_CHAT_N_FAMILIES] = {
    [PKV_CHAT_CHATML] = render_chatml,
    [PKV_CHAT_LLAMA2] = render_llama2,
    [PKV_CHAT_LLAMA2_SYS] = render_llama2_sys,
    [PKV_CHAT_LLAMA3] = render_llama3,
    [PKV_CHAT_MISTRAL_V1] = render_mistral_v1,
    [PKV_CHAT_MISTRAL_V3] = render_mistral_v3,
    [PKV_CHAT_MISTRAL_V3_TEKKEN] = render_mistral_v3,
    [PKV_CHAT_MISTRAL_V7] = render_mistral_v7,
    [PKV_CHAT_MISTRAL_V7_TEKKEN] = render_mistral_v7,
    [PKV_CHAT_PHI3] = render_phi3,
    [PKV_CHAT_PHI4] = render_phi4,
    [PKV_CHAT_GEMMA] = render_gemma,
    [PKV_CHAT_DEEPSEEK] = render_deepseek,
    [PKV_CHAT_DEEPSEEK3] = render_deepseek3,
    [PKV_CHAT_COMMAND_R] = render_command_r,
    [PKV_CHAT_ZEPHYR] = render_zephyr,
    [PKV_CHAT_VICUNA] = render_vicuna,
    [PKV_CHAT_VICUNA_ORCA] = render_vicuna,
    [PKV_CHAT_OPENCHAT] = render_openchat,
    [PKV_CHAT_GRANITE] = render_granite,
    [PKV_CHAT_FALCON3] = render_falcon3,
    [PKV_CHAT_EXAONE3] = render_exaone3,
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
