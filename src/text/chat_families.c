/*
 * The families that write one block a message: ChatML (Qwen), Llama 3, Phi,
 * Zephyr, Falcon 3, Granite, EXAONE, OpenChat, Vicuna, DeepSeek. Each follows
 * its real template (tools/chat_templates.py; docs/engine.md §4.7).
 */
#include <string.h>

#include "base/error.h"
#include "text/chat_out.h"

/* ---------------------------------------------------------------- ChatML, Phi, Granite, ... (one block a message) */

static bool is_tool_response(const char *c) {
    size_t n = strlen(c), a = strlen("<tool_response>"), b = strlen("</tool_response>");
    return n >= a && n >= b && !memcmp(c, "<tool_response>", a) && !memcmp(c + n - b, "</tool_response>", b);
}

/* Qwen3: no default system prompt; an assistant turn's text after its
 * </think> (the reasoning before it dropped), except after the last user
 * message, where the reasoning is kept in a <think> block (an empty one for
 * the last message); tool results as user turns of <tool_response> blocks. */
static int chat_render_qwen3(chat_out *o, const pkv_chat_message *m, int n) {
    if (chat_is_role(&m[0], "system")) {
        chat_put(o, "<|im_start|>system\n");
        chat_put(o, m[0].content);
        chat_put(o, "<|im_end|>\n");
        chat_mark_system_end(o);
    }
    int last_query = n - 1;
    for (int k = n - 1; k >= 0; k--)
        if (chat_is_role(&m[k], "user") && !is_tool_response(m[k].content)) {
            last_query = k;
            break;
        }
    for (int k = 0; k < n; k++) {
        if (chat_is_role(&m[k], "user") || (chat_is_role(&m[k], "system") && k > 0)) {
            chat_put(o, "<|im_start|>");
            chat_put(o, m[k].role);
            chat_put(o, "\n");
            chat_put(o, m[k].content);
            chat_put(o, "<|im_end|>\n");
        } else if (chat_is_role(&m[k], "assistant")) {
            const char *c = m[k].content, *r = "";
            size_t nc = strlen(c), nr = 0;
            const char *close = strstr(c, "</think>");
            if (close) {
                /* content.split('</think>')[-1].lstrip('\n') and
                 * content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                const char *after = chat_last_of(c, nc, "</think>") + strlen("</think>");
                size_t na = nc - (size_t)(after - c);
                r = c;
                nr = (size_t)(close - c);
                chat_rstrip_char(r, &nr, '\n');
                const char *open = chat_last_of(r, nr, "<think>");
                if (open) {
                    nr -= (size_t)(open + strlen("<think>") - r);
                    r = open + strlen("<think>");
                }
                chat_lstrip_char(&r, &nr, '\n');
                c = after;
                nc = na;
                chat_lstrip_char(&c, &nc, '\n');
            }
            chat_put(o, "<|im_start|>assistant\n");
            if (k > last_query && (k == n - 1 || nr > 0)) {
                chat_lstrip_char(&r, &nr, '\n');
                chat_rstrip_char(r, &nr, '\n');
                chat_put(o, "<think>\n");
                chat_put_n(o, r, nr);
                chat_put(o, "\n</think>\n\n");
                chat_lstrip_char(&c, &nc, '\n');
            }
            chat_put_n(o, c, nc);
            chat_put(o, "<|im_end|>\n");
        } else if (chat_is_role(&m[k], "tool")) {
            if (k == 0 || !chat_is_role(&m[k - 1], "tool")) chat_put(o, "<|im_start|>user");
            chat_put(o, "\n<tool_response>\n");
            chat_put(o, m[k].content);
            chat_put(o, "\n</tool_response>");
            if (k == n - 1 || !chat_is_role(&m[k + 1], "tool")) chat_put(o, "<|im_end|>\n");
        }
    }
    chat_put(o, "<|im_start|>assistant\n");
    return 0;
}

/* OpenHermes, Qwen2, Qwen2.5: <|im_start|>ROLE\nCONTENT<|im_end|>\n; Qwen's
 * templates open with their default system prompt when the first message is
 * not a system message. */
int chat_render_chatml(chat_out *o, const pkv_chat_message *m, int n) {
    const pkv_chat_style *st = o->st;
    if (st->flags & PKV_CHAT_QWEN3_THINK) return chat_render_qwen3(o, m, n);
    bool qwq = st->flags & PKV_CHAT_QWQ_THINK;
    if (qwq && chat_is_role(&m[0], "system")) {
        chat_put(o, "<|im_start|>system\n");
        chat_put(o, m[0].content);
        chat_put(o, "<|im_end|>\n");
        chat_mark_system_end(o);
    }
    for (int k = 0; k < n; k++) {
        if (k == 0 && st->has_default_system && !chat_is_role(&m[0], "system")) {
            chat_put(o, "<|im_start|>system\n");
            chat_put(o, st->default_system);
            chat_put(o, "<|im_end|>\n");
            chat_mark_system_end(o);
        }
        const char *c = m[k].content;
        if (qwq && (chat_is_role(&m[k], "tool") || !(chat_is_role(&m[k], "user") || chat_is_role(&m[k], "system") ||
                                                 chat_is_role(&m[k], "assistant"))))
            return chat_raise(o, "role not supported (QwQ renders system, user and assistant)");
        if (qwq && chat_is_role(&m[k], "system") && k == 0) continue; /* written in the header */
        if (qwq && chat_is_role(&m[k], "assistant") && k != n - 1) {
            /* content.split('</think>')[-1].lstrip('\n') */
            const char *after = chat_last_of(c, strlen(c), "</think>");
            if (after) c = after + strlen("</think>");
            while (*c == '\n') c++;
        }
        chat_put(o, "<|im_start|>");
        chat_put(o, m[k].role);
        chat_put(o, "\n");
        chat_put(o, c);
        chat_put(o, "<|im_end|>\n");
        if (k == 0 && chat_is_role(&m[0], "system")) chat_mark_system_end(o);
    }
    chat_put(o, qwq ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n");
    return 0;
}

/* Llama 3.1, 3.2, 3.3 (no tools): a system block that always opens with
 * the knowledge cutoff and the date (3.2: today's), then the system
 * message's trimmed text; the other messages as Llama 3's. */
static int chat_render_llama31(chat_out *o, const pkv_chat_message *m, int n) {
    const pkv_chat_style *st = o->st;
    bool has_system = chat_is_role(&m[0], "system");
    chat_put(o, st->bos);
    chat_put(o, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
    if (!(st->flags & PKV_CHAT_DATE_TODAY)) chat_put(o, "26 Jul 2024");
    else if (chat_put_date(o, "%d %b %Y")) return -1;
    chat_put(o, "\n\n");
    if (has_system) chat_put_trimmed(o, m[0].content);
    chat_put(o, "<|eot_id|>");
    chat_mark_system_end(o);
    for (int k = has_system; k < n; k++) {
        bool tool = chat_is_role(&m[k], "tool") || chat_is_role(&m[k], "ipython");
        chat_put(o, "<|start_header_id|>");
        chat_put(o, tool ? "ipython" : m[k].role);
        chat_put(o, "<|end_header_id|>\n\n");
        if (tool) chat_put(o, m[k].content);
        else chat_put_trimmed(o, m[k].content);
        chat_put(o, "<|eot_id|>");
    }
    chat_put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* Llama 3: every message a header block, its content trimmed; BOS first. */
int chat_render_llama3(chat_out *o, const pkv_chat_message *m, int n) {
    if (o->st->flags & PKV_CHAT_DATE_HEADER) return chat_render_llama31(o, m, n);
    for (int k = 0; k < n; k++) {
        if (k == 0) chat_put(o, o->st->bos);
        chat_put(o, "<|start_header_id|>");
        chat_put(o, m[k].role);
        chat_put(o, "<|end_header_id|>\n\n");
        chat_put_trimmed(o, m[k].content);
        chat_put(o, "<|eot_id|>");
        if (k == 0 && chat_is_role(&m[0], "system")) chat_mark_system_end(o);
    }
    chat_put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* Phi 3 / 3.5: <|ROLE|>\nCONTENT<|end|>\n for system, user and assistant;
 * Phi 3.5 skips an empty system message; Phi-4-mini writes <|ROLE|>CONTENT<|end|>
 * for every role. */
int chat_render_phi3(chat_out *o, const pkv_chat_message *m, int n) {
    if (o->st->flags & PKV_CHAT_COMPACT) {
        for (int k = 0; k < n; k++) {
            chat_put(o, "<|");
            chat_put(o, m[k].role);
            chat_put(o, "|>");
            chat_put(o, m[k].content);
            chat_put(o, "<|end|>");
            if (k == 0 && chat_is_role(&m[0], "system")) chat_mark_system_end(o);
        }
        chat_put(o, "<|assistant|>");
        return 0;
    }
    for (int k = 0; k < n; k++) {
        bool sys = chat_is_role(&m[k], "system");
        if (sys && (o->st->flags & PKV_CHAT_SKIP_EMPTY_SYSTEM) && !m[k].content[0]) continue;
        if (!sys && !chat_is_role(&m[k], "user") && !chat_is_role(&m[k], "assistant")) continue;
        chat_put(o, "<|");
        chat_put(o, m[k].role);
        chat_put(o, "|>\n");
        chat_put(o, m[k].content);
        chat_put(o, "<|end|>\n");
        if (k == 0 && sys) chat_mark_system_end(o);
    }
    chat_put(o, "<|assistant|>\n");
    return 0;
}

/* Phi 4: the assistant header follows each user turn; no generation prompt
 * of its own. */
int chat_render_phi4(chat_out *o, const pkv_chat_message *m, int n) {
    for (int k = 0; k < n; k++) {
        if (chat_is_role(&m[k], "system")) {
            chat_put(o, "<|im_start|>system<|im_sep|>");
            chat_put(o, m[k].content);
            chat_put(o, "<|im_end|>");
            if (k == 0) chat_mark_system_end(o);
        } else if (chat_is_role(&m[k], "user")) {
            chat_put(o, "<|im_start|>user<|im_sep|>");
            chat_put(o, m[k].content);
            chat_put(o, "<|im_end|><|im_start|>assistant<|im_sep|>");
        } else if (chat_is_role(&m[k], "assistant")) {
            chat_put(o, m[k].content);
            chat_put(o, "<|im_end|>");
        }
    }
    return 0;
}

/* Zephyr (TinyLlama chat): <|ROLE|>\nCONTENT</s>\n, the generation prompt
 * after the last message. */
int chat_render_zephyr(chat_out *o, const pkv_chat_message *m, int n) {
    for (int k = 0; k < n; k++) {
        if (chat_is_role(&m[k], "user") || chat_is_role(&m[k], "system") || chat_is_role(&m[k], "assistant")) {
            chat_put(o, "<|");
            chat_put(o, m[k].role);
            chat_put(o, "|>\n");
            chat_put(o, m[k].content);
            chat_put(o, o->st->eos);
            chat_put(o, "\n");
            if (k == 0 && chat_is_role(&m[0], "system")) chat_mark_system_end(o);
        }
        if (k == n - 1) chat_put(o, "<|assistant|>\n");
    }
    return 0;
}

/* Falcon 3 (its template's branch without tools): the last assistant turn
 * has no newline after its EOS. */
int chat_render_falcon3(chat_out *o, const pkv_chat_message *m, int n) {
    for (int k = 0; k < n; k++) {
        if (chat_is_role(&m[k], "system") || chat_is_role(&m[k], "user")) {
            chat_put(o, "<|");
            chat_put(o, m[k].role);
            chat_put(o, "|>\n");
            chat_put(o, m[k].content);
            chat_put(o, "\n");
            if (k == 0 && chat_is_role(&m[0], "system")) chat_mark_system_end(o);
        } else if (chat_is_role(&m[k], "assistant")) {
            chat_put(o, "<|assistant|>\n");
            chat_put(o, m[k].content);
            chat_put(o, o->st->eos);
            if (k != n - 1) chat_put(o, "\n");
        }
        if (k == n - 1) chat_put(o, "<|assistant|>\n");
    }
    return 0;
}

/* Granite 3.1, 3.2 (no tools, documents or thinking): a system block
 * always, the template's default with today's date when there is no system
 * message; then every message alike, the generation prompt after the last. */
static int chat_render_granite31(chat_out *o, const pkv_chat_message *m, int n) {
    bool has_system = chat_is_role(&m[0], "system");
    chat_put(o, "<|start_of_role|>system<|end_of_role|>");
    if (has_system) {
        chat_put(o, m[0].content);
    } else {
        chat_put(o, "Knowledge Cutoff Date: April 2024.\nToday's Date: ");
        if (chat_put_date(o, "%B %d, %Y")) return -1;
        chat_put(o, ".\nYou are Granite, developed by IBM. You are a helpful AI assistant.");
    }
    chat_put(o, "<|end_of_text|>\n");
    chat_mark_system_end(o);
    for (int k = has_system; k < n; k++) {
        chat_put(o, "<|start_of_role|>");
        chat_put(o, m[k].role);
        chat_put(o, "<|end_of_role|>");
        chat_put(o, m[k].content);
        chat_put(o, "<|end_of_text|>\n");
        if (k == n - 1) chat_put(o, "<|start_of_role|>assistant<|end_of_role|>");
    }
    return 0;
}

/* Granite 3.0: <|start_of_role|>ROLE<|end_of_role|>CONTENT<|end_of_text|>\n. */
int chat_render_granite(chat_out *o, const pkv_chat_message *m, int n) {
    if (o->st->flags & PKV_CHAT_GRANITE_DATE) return chat_render_granite31(o, m, n);
    for (int k = 0; k < n; k++) {
        const char *r = m[k].role;
        if (!strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") || !strcmp(r, "tool_response")) {
            chat_put(o, "<|start_of_role|>");
            chat_put(o, r);
            chat_put(o, "<|end_of_role|>");
        } else if (!strcmp(r, "assistant_tool_call")) {
            chat_put(o, "<|start_of_role|>assistant<|end_of_role|><|tool_call|>");
        } else {
            if (k == n - 1) chat_put(o, "<|start_of_role|>assistant<|end_of_role|>");
            continue;
        }
        chat_put(o, m[k].content);
        chat_put(o, "<|end_of_text|>\n");
        if (k == 0 && chat_is_role(&m[0], "system")) chat_mark_system_end(o);
        if (k == n - 1) chat_put(o, "<|start_of_role|>assistant<|end_of_role|>");
    }
    return 0;
}

/* EXAONE 3 / 3.5: an empty system block opens a conversation without one;
 * a user turn ends with a newline, the others with [|endofturn|]\n. */
int chat_render_exaone3(chat_out *o, const pkv_chat_message *m, int n) {
    for (int k = 0; k < n; k++) {
        if (k == 0 && !chat_is_role(&m[0], "system")) {
            chat_put(o, "[|system|][|endofturn|]\n");
            chat_mark_system_end(o);
        }
        chat_put(o, "[|");
        chat_put(o, m[k].role);
        chat_put(o, "|]");
        chat_put(o, m[k].content);
        chat_put(o, chat_is_role(&m[k], "user") ? "\n" : "[|endofturn|]\n");
        if (k == 0 && chat_is_role(&m[0], "system")) chat_mark_system_end(o);
    }
    chat_put(o, "[|assistant|]");
    return 0;
}

/* OpenChat 3.5: 'GPT4 Correct ' + role.title() + ': '. */
int chat_render_openchat(chat_out *o, const pkv_chat_message *m, int n) {
    chat_put(o, o->st->bos);
    for (int k = 0; k < n; k++) {
        chat_put(o, "GPT4 Correct ");
        /* str.title() of an ASCII role: upper after a non-letter, lower after a letter */
        bool after_letter = false;
        for (const char *c = m[k].role; *c; c++) {
            bool letter = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z');
            char ch = *c;
            if (letter) ch = after_letter ? (char)(ch | 0x20) : (char)(ch & ~0x20);
            chat_put_n(o, &ch, 1);
            after_letter = letter;
        }
        chat_put(o, ": ");
        chat_put(o, m[k].content);
        chat_put(o, "<|end_of_turn|>");
        if (k == 0 && chat_is_role(&m[0], "system")) chat_mark_system_end(o);
    }
    chat_put(o, "GPT4 Correct Assistant:");
    return 0;
}

/* Vicuna 1.1 and its Orca variant (no role but system and user: assistant). */
int chat_render_vicuna(chat_out *o, const pkv_chat_message *m, int n) {
    bool orca = o->st->family == PKV_CHAT_VICUNA_ORCA;
    for (int k = 0; k < n; k++) {
        if (chat_is_role(&m[k], "system")) {
            chat_put(o, orca ? "SYSTEM: " : "");
            chat_put(o, m[k].content);
            chat_put(o, orca ? "\n" : "\n\n");
            if (k == 0) chat_mark_system_end(o);
        } else if (chat_is_role(&m[k], "user")) {
            chat_put(o, "USER: ");
            chat_put(o, m[k].content);
            chat_put(o, "\n");
        } else {
            chat_put(o, "ASSISTANT: ");
            chat_put(o, m[k].content);
            chat_put(o, "</s>\n");
        }
    }
    chat_put(o, "ASSISTANT:");
    return 0;
}

/* DeepSeek Coder: its default system prompt unless some message is a system
 * message; every role but system and user is a response. */
int chat_render_deepseek(chat_out *o, const pkv_chat_message *m, int n) {
    bool found = false;
    for (int k = 0; k < n; k++) found |= chat_is_role(&m[k], "system");
    chat_put(o, o->st->bos);
    if (!found && o->st->has_default_system) {
        chat_put(o, o->st->default_system);
        chat_mark_system_end(o);
    }
    for (int k = 0; k < n; k++) {
        if (chat_is_role(&m[k], "system")) {
            chat_put(o, m[k].content);
            if (k == 0) chat_mark_system_end(o);
        } else if (chat_is_role(&m[k], "user")) {
            chat_put(o, "### Instruction:\n");
            chat_put(o, m[k].content);
            chat_put(o, "\n");
        } else {
            chat_put(o, "### Response:\n");
            chat_put(o, m[k].content);
            chat_put(o, "\n<|EOT|>\n");
        }
    }
    chat_put(o, "### Response:\n");
    return 0;
}

#define DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DS_END "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

/* DeepSeek V3 / R1: the system prompts first (V3 joins them all, R1 keeps
 * the last), then user and assistant turns with no separator. */
int chat_render_deepseek3(chat_out *o, const pkv_chat_message *m, int n) {
    unsigned fl = o->st->flags;
    chat_put(o, o->st->bos);
    bool first = true;
    int last = -1;
    for (int k = 0; k < n; k++) {
        if (!chat_is_role(&m[k], "system")) continue;
        if (fl & PKV_CHAT_SYSTEM_JOIN) {
            if (!first) chat_put(o, "\n\n");
            chat_put(o, m[k].content);
            first = false;
        }
        last = k;
    }
    if (!(fl & PKV_CHAT_SYSTEM_JOIN) && last >= 0) chat_put(o, m[last].content);
    if (chat_is_role(&m[0], "system")) chat_mark_system_end(o);
    for (int k = 0; k < n; k++) {
        if (chat_is_role(&m[k], "user")) {
            chat_put(o, DS_USER);
            chat_put(o, m[k].content);
        } else if (chat_is_role(&m[k], "assistant")) {
            const char *c = m[k].content, *think;
            if (fl & PKV_CHAT_STRIP_THINK)
                while ((think = strstr(c, "</think>"))) c = think + strlen("</think>");
            chat_put(o, DS_ASSISTANT);
            chat_put(o, c);
            chat_put(o, DS_END);
        } else if (chat_is_role(&m[k], "tool")) {
            return chat_raise(o, "tool messages are not supported");
        }
    }
    chat_put(o, DS_ASSISTANT);
    if (fl & PKV_CHAT_THINK_PROMPT) chat_put(o, "<think>\n");
    return 0;
}
