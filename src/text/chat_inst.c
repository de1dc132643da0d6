/*
 * The [INST] families (Llama 2, Mistral v1 to v7), Gemma and Command R:
 * templates that check the order of roles and merge or move the system
 * prompt. Each follows its real template (tools/chat_templates.py;
 * docs/engine.md §4.7).
 */
#include <string.h>

#include "base/error.h"
#include "text/chat_out.h"

/* ---------------------------------------------------------------- the [INST] families */

static const char ALTERNATE[] = "Conversation roles must alternate user/assistant/user/assistant/...";
static const char ALTERNATE_AFTER_SYSTEM[] =
    "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...";
static const char ONLY_USER_ASSISTANT_SYSTEM[] =
    "Only user and assistant roles are supported, with the exception of an initial optional system message!";

/* Llama 2 without a system role (Mistral 7B v0.1's first template). */
int chat_render_llama2(chat_out *o, const pkv_chat_message *m, int n) {
    if (chat_check_alternation(o, m, n, ALTERNATE)) return -1;
    chat_put(o, o->st->bos);
    for (int k = 0; k < n; k++) {
        if (chat_is_role(&m[k], "user")) {
            chat_put(o, "[INST] ");
            chat_put(o, m[k].content);
            chat_put(o, " [/INST]");
        } else if (chat_is_role(&m[k], "assistant")) {
            chat_put(o, m[k].content);
            chat_put(o, o->st->eos);
        } else {
            return chat_raise(o, "Only user and assistant roles are supported!");
        }
    }
    return 0;
}

/* Llama 2 chat: BOS before every turn, contents stripped, the system block
 * inside the first turn (stripped with it as one string). */
int chat_render_llama2_sys(chat_out *o, const pkv_chat_message *m, int n) {
    bool has_system = chat_is_role(&m[0], "system");
    const pkv_chat_message *loop = m + has_system;
    int nl = n - has_system;
    if (chat_check_alternation(o, loop, nl, ALTERNATE)) return -1;
    for (int k = 0; k < nl; k++) {
        bool with_system = k == 0 && has_system;
        const char *parts[4] = {"<<SYS>>\n", with_system ? m[0].content : "", "\n<</SYS>>\n\n", loop[k].content};
        const char *const *content = with_system ? parts : parts + 3;
        int n_parts = with_system ? 4 : 1;
        size_t head_end;
        if (chat_is_role(&loop[k], "user")) {
            chat_put(o, o->st->bos);
            chat_put(o, "[INST] ");
            if (chat_put_stripped(o, content, n_parts, &head_end)) return -1;
            chat_put(o, " [/INST]");
        } else if (chat_is_role(&loop[k], "assistant")) {
            chat_put(o, " ");
            if (chat_put_stripped(o, content, n_parts, &head_end)) return -1;
            chat_put(o, " ");
            chat_put(o, o->st->eos);
        } else {
            continue;
        }
        if (with_system) o->system_end = head_end;
    }
    return 0;
}

/* The Mistral templates before v7 differ in four strings and two choices. */
typedef struct {
    const char *inst_open, *inst_close, *reply_space;
    bool system_in_last;  /* the system prompt goes into the last message when that is a user turn (v3) */
    bool trim_reply;      /* the assistant's text trimmed (v3) */
} mistral_inst;

static int render_mistral_inst(chat_out *o, const pkv_chat_message *m, int n, const mistral_inst *mi) {
    bool has_system = chat_is_role(&m[0], "system");
    const pkv_chat_message *loop = m + has_system;
    int nl = n - has_system;
    if (chat_check_alternation(o, loop, nl, ALTERNATE_AFTER_SYSTEM)) return -1;
    chat_put(o, o->st->bos);
    for (int k = 0; k < nl; k++) {
        if (chat_is_role(&loop[k], "user")) {
            chat_put(o, mi->inst_open);
            if (has_system && k == (mi->system_in_last ? nl - 1 : 0)) {
                chat_put(o, m[0].content);
                chat_put(o, "\n\n");
                chat_mark_system_end(o);
            }
            chat_put(o, loop[k].content);
            chat_put(o, mi->inst_close);
        } else if (chat_is_role(&loop[k], "assistant")) {
            chat_put(o, mi->reply_space);
            if (mi->trim_reply) chat_put_trimmed(o, loop[k].content);
            else chat_put(o, loop[k].content);
            chat_put(o, o->st->eos);
        } else {
            return chat_raise(o, ONLY_USER_ASSISTANT_SYSTEM);
        }
    }
    return 0;
}

/* Mistral v1: " [INST] ", the system prompt before the first user turn. */
int chat_render_mistral_v1(chat_out *o, const pkv_chat_message *m, int n) {
    static const mistral_inst V1 = {" [INST] ", " [/INST]", " ", false, false};
    return render_mistral_inst(o, m, n, &V1);
}

/* Mistral v3 and v3-tekken (Nemo): the system prompt goes into the last
 * message when that is a user turn (and nowhere otherwise); v3 writes
 * "[INST] " and " " + the assistant's trimmed text, tekken neither space nor
 * the trim. */
int chat_render_mistral_v3(chat_out *o, const pkv_chat_message *m, int n) {
    static const mistral_inst V3 = {"[INST] ", "[/INST]", " ", true, true};
    static const mistral_inst V3_TEKKEN = {"[INST]", "[/INST]", "", true, false};
    return render_mistral_inst(o, m, n, o->st->family == PKV_CHAT_MISTRAL_V3_TEKKEN ? &V3_TEKKEN : &V3);
}

/* Mistral v7: system prompts anywhere, in their own block; v7-tekken
 * (Mistral Small 3) without the spaces after the tags and before the
 * assistant's text. */
int chat_render_mistral_v7(chat_out *o, const pkv_chat_message *m, int n) {
    bool tekken = o->st->family == PKV_CHAT_MISTRAL_V7_TEKKEN;
    chat_put(o, o->st->bos);
    for (int k = 0; k < n; k++) {
        if (chat_is_role(&m[k], "user")) {
            chat_put(o, tekken ? "[INST]" : "[INST] ");
            chat_put(o, m[k].content);
            chat_put(o, "[/INST]");
        } else if (chat_is_role(&m[k], "system")) {
            chat_put(o, tekken ? "[SYSTEM_PROMPT]" : "[SYSTEM_PROMPT] ");
            chat_put(o, m[k].content);
            chat_put(o, "[/SYSTEM_PROMPT]");
            if (k == 0) chat_mark_system_end(o);
        } else if (chat_is_role(&m[k], "assistant")) {
            if (!tekken) chat_put(o, " ");
            chat_put(o, m[k].content);
            chat_put(o, o->st->eos);
        } else {
            return chat_raise(o, "Only user, system and assistant roles are supported!");
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- Gemma, Command R */

/* Gemma 3: a leading system message is prepended to the first turn's content
 * (not trimmed) with a blank line; Gemma 2 refuses it. Roles alternate
 * user/model; contents are trimmed. */
int chat_render_gemma(chat_out *o, const pkv_chat_message *m, int n) {
    bool has_system = chat_is_role(&m[0], "system");
    if (has_system && (o->st->flags & PKV_CHAT_SYSTEM_RAISES)) return chat_raise(o, "System role not supported");
    const pkv_chat_message *loop = m + has_system;
    int nl = n - has_system;
    if (chat_check_alternation(o, loop, nl, ALTERNATE)) return -1;
    chat_put(o, o->st->bos);
    for (int k = 0; k < nl; k++) {
        chat_put(o, "<start_of_turn>");
        chat_put(o, chat_is_role(&loop[k], "assistant") ? "model" : loop[k].role);
        chat_put(o, "\n");
        if (k == 0 && has_system) {
            chat_put(o, m[0].content);
            chat_put(o, "\n\n");
            chat_mark_system_end(o);
        }
        chat_put_trimmed(o, loop[k].content);
        chat_put(o, "<end_of_turn>\n");
    }
    chat_put(o, "<start_of_turn>model\n");
    return 0;
}

/* Command R: the system prompt as given, the turns stripped. */
int chat_render_command_r(chat_out *o, const pkv_chat_message *m, int n) {
    bool has_system = chat_is_role(&m[0], "system");
    const pkv_chat_message *loop = m + has_system;
    int nl = n - has_system;
    chat_put(o, o->st->bos);
    if (has_system) {
        chat_put(o, "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>");
        chat_put(o, m[0].content);
        chat_put(o, "<|END_OF_TURN_TOKEN|>");
        chat_mark_system_end(o);
    }
    if (chat_check_alternation(o, loop, nl, ALTERNATE)) return -1;
    for (int k = 0; k < nl; k++) {
        if (chat_is_role(&loop[k], "user")) chat_put(o, "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>");
        else if (chat_is_role(&loop[k], "assistant")) chat_put(o, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
        else continue;
        chat_put_trimmed(o, loop[k].content);
        chat_put(o, "<|END_OF_TURN_TOKEN|>");
    }
    chat_put(o, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
    return 0;
}
