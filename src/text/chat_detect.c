/*
 * Which chat family a model's template belongs to (docs/engine.md §4.7).
 *
 * A template is recognised by its markers, in llama.cpp's order
 * (llm_chat_detect_template), with markers of our own where the real
 * templates of a family differ in what they render (gemma 2 refuses a system
 * message, DeepSeek R1 drops the reasoning of earlier turns, ...) or where
 * llama.cpp's marker misses the real template (Falcon 3's and Zephyr's name
 * no </s> or <|endoftext|> literally). The templates each family is checked
 * against are in tools/chat_templates.py.
 */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "text/chat_detect.h"
#include "text/tokenizer.h"

typedef struct {
    const char *s;
    size_t n;
} text_span;

static bool has(text_span t, const char *needle) {
    size_t n = strlen(needle);
    if (t.n < n) return false;
    for (size_t i = 0; i + n <= t.n; i++)
        if (t.s[i] == needle[0] && memcmp(t.s + i, needle, n) == 0) return true;
    return false;
}

/* ---------------------------------------------------------------- names */

static const char *const NAMES[PKV_CHAT_N_FAMILIES] = {
    [PKV_CHAT_NONE] = "none",
    [PKV_CHAT_CHATML] = "chatml",
    [PKV_CHAT_LLAMA2] = "llama2",
    [PKV_CHAT_LLAMA2_SYS] = "llama2-sys",
    [PKV_CHAT_LLAMA3] = "llama3",
    [PKV_CHAT_MISTRAL_V1] = "mistral-v1",
    [PKV_CHAT_MISTRAL_V3] = "mistral-v3",
    [PKV_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [PKV_CHAT_MISTRAL_V7] = "mistral-v7",
    [PKV_CHAT_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
    [PKV_CHAT_PHI3] = "phi3",
    [PKV_CHAT_PHI4] = "phi4",
    [PKV_CHAT_GEMMA] = "gemma",
    [PKV_CHAT_DEEPSEEK] = "deepseek",
    [PKV_CHAT_DEEPSEEK3] = "deepseek3",
    [PKV_CHAT_COMMAND_R] = "command-r",
    [PKV_CHAT_ZEPHYR] = "zephyr",
    [PKV_CHAT_VICUNA] = "vicuna",
    [PKV_CHAT_VICUNA_ORCA] = "vicuna-orca",
    [PKV_CHAT_OPENCHAT] = "openchat",
    [PKV_CHAT_GRANITE] = "granite",
    [PKV_CHAT_FALCON3] = "falcon3",
    [PKV_CHAT_EXAONE3] = "exaone3",
};

const char *pkv_chat_family_name(pkv_chat_family family) {
    return family >= 0 && family < PKV_CHAT_N_FAMILIES ? NAMES[family] : "unknown";
}

const char *pkv_chat_family_list(void) {
    return "chatml, llama2, llama2-sys, llama3, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7, "
           "mistral-v7-tekken, phi3, phi4, gemma, deepseek, deepseek3, command-r, zephyr, vicuna, vicuna-orca, openchat, granite, falcon3, exaone3";
}

/* The default system prompt the family's checked template writes (DeepSeek
 * Coder's; EXAONE's is empty). */
static const char DEEPSEEK_CODER_SYSTEM[] =
    "You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and "
    "you only answer questions related to computer science. For politically sensitive questions, security and "
    "privacy issues, and other non-computer science questions, you will refuse to answer\n";

static void set_default_system(pkv_chat_style *st, const char *text) {
    st->has_default_system = true;
    snprintf(st->default_system, sizeof st->default_system, "%s", text);
}

/* The family's own variant: what its checked template does. */
static void family_defaults(pkv_chat_style *st) {
    if (st->family == PKV_CHAT_DEEPSEEK) set_default_system(st, DEEPSEEK_CODER_SYSTEM);
    if (st->family == PKV_CHAT_DEEPSEEK3) st->flags |= PKV_CHAT_SYSTEM_JOIN;
    if (st->family == PKV_CHAT_PHI3) st->flags |= PKV_CHAT_SKIP_EMPTY_SYSTEM;
}

pkv_chat_family pkv_chat_family_named(const char *name, pkv_chat_style *st) {
    memset(st, 0, sizeof *st);
    if (!name) return PKV_CHAT_NONE;
    if (!strcmp(name, "llama2-sys-bos") || !strcmp(name, "llama2-sys-strip")) name = "llama2-sys";
    for (int f = 1; f < PKV_CHAT_N_FAMILIES; f++)
        if (!strcmp(name, NAMES[f])) st->family = (pkv_chat_family)f;
    family_defaults(st);
    return st->family;
}

/* ---------------------------------------------------------------- the template's own default system prompt */

/* Reads a Jinja string literal closed by `quote` from t.s[from]: its text
 * (escapes \n, \t, \', \" and \\ undone) up to `stop` (NULL: the closing
 * quote) into out. False when the literal ends first or out is too small. */
static bool read_literal(text_span t, size_t from, char quote, const char *stop, char *out, size_t cap) {
    size_t n = 0, ns = stop ? strlen(stop) : 0;
    for (size_t j = from; j < t.n; j++) {
        if (stop && j + ns <= t.n && !memcmp(t.s + j, stop, ns)) {
            out[n] = '\0';
            return true;
        }
        char c = t.s[j];
        if (c == quote) {
            out[n] = '\0';
            return !stop;
        }
        if (c == '\\' && j + 1 < t.n) {
            char e = t.s[++j];
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
        }
        if (n + 1 >= cap) return false;
        out[n++] = c;
    }
    return false;
}

/* ChatML (Qwen2, Qwen2.5): a literal '<|im_start|>system\n...<|im_end|>'
 * written when the first message is not a system message. A literal that
 * ends right after the header (Qwen2.5's tools branch) is not one. */
static void chatml_default_system(text_span t, pkv_chat_style *st) {
    static const char head[] = "<|im_start|>system\\n";
    size_t nh = sizeof head - 1;
    for (size_t i = 1; i + nh <= t.n; i++) {
        if ((t.s[i - 1] != '\'' && t.s[i - 1] != '"') || memcmp(t.s + i, head, nh)) continue;
        char text[sizeof st->default_system];
        if (read_literal(t, i + nh, t.s[i - 1], "<|im_end|>", text, sizeof text) && text[0]) {
            set_default_system(st, text);
            return;
        }
    }
}

/* DeepSeek Coder: the literal written `if not ns.found` (no system message). */
static void deepseek_default_system(text_span t, pkv_chat_style *st) {
    static const char marker[] = "if not ns.found";
    for (size_t i = 0; i + sizeof marker - 1 <= t.n; i++) {
        if (memcmp(t.s + i, marker, sizeof marker - 1)) continue;
        for (size_t j = i; j + 1 < t.n; j++) {
            if (t.s[j] == '{' && t.s[j + 1] == '{') {
                size_t q = j + 2;
                while (q < t.n && (t.s[q] == ' ' || t.s[q] == '-')) q++;
                char text[sizeof st->default_system];
                if (q < t.n && (t.s[q] == '\'' || t.s[q] == '"') && read_literal(t, q + 1, t.s[q], NULL, text, sizeof text))
                    set_default_system(st, text);
                return;
            }
        }
        return;
    }
}

/* ---------------------------------------------------------------- detection */

/* A template of a known family that writes what its family's formatter does
 * not (a default system prompt of its own): refused with *why set, rather
 * than rendered otherwise than the template renders. */
static pkv_chat_family refuse(const char **why, const char *reason) {
    *why = reason;
    return PKV_CHAT_NONE;
}

static pkv_chat_family detect(text_span t, unsigned *flags, const char **why) {
    if (has(t, "<|im_start|>")) {
        if (has(t, "<|im_sep|>")) return PKV_CHAT_PHI4;
        if (has(t, "<end_of_utterance>")) return PKV_CHAT_NONE; /* SmolVLM: <|im_start|> as BOS only */
        if (has(t, "last_query_index") && has(t, "</think>")) *flags |= PKV_CHAT_QWEN3_THINK;
        else if (has(t, "split('</think>')[-1].lstrip('\\n')") && has(t, "assistant\\n<think>\\n"))
            *flags |= PKV_CHAT_QWQ_THINK;
        return PKV_CHAT_CHATML;
    }
    if ((t.n >= 7 && !memcmp(t.s, "mistral", 7)) || has(t, "[INST]")) {
        if (has(t, "[SYSTEM_PROMPT]")) {
            if (has(t, "default_system_message")) /* Mistral Small 3.1, 3.2, Devstral */
                return refuse(why, "a mistral-v7 template with its own default system prompt");
            return has(t, "[INST] ") ? PKV_CHAT_MISTRAL_V7 : PKV_CHAT_MISTRAL_V7_TEKKEN;
        }
        if (has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]")) {
            if (has(t, " [INST]")) return PKV_CHAT_MISTRAL_V1;
            if (has(t, "\"[INST]\"")) return PKV_CHAT_MISTRAL_V3_TEKKEN;
            return PKV_CHAT_MISTRAL_V3;
        }
        return has(t, "<<SYS>>") ? PKV_CHAT_LLAMA2_SYS : PKV_CHAT_LLAMA2;
    }
    if (has(t, "<|assistant|>") && has(t, "<|end|>")) {
        if (has(t, "message['role'] == 'system' and message['content']")) *flags |= PKV_CHAT_SKIP_EMPTY_SYSTEM;
        if (has(t, "'|>' + message['content']")) *flags |= PKV_CHAT_COMPACT;
        return PKV_CHAT_PHI3;
    }
    if (has(t, "<|assistant|>") && has(t, "<|user|>")) {
        /* llama.cpp: "</s>" means Falcon 3; its real template names no </s>
         * but writes eos_token and "Falcon" in its tools text */
        if (has(t, "</s>") || has(t, "Falcon")) return PKV_CHAT_FALCON3;
        if (has(t, "<|endoftext|>") || has(t, "eos_token")) return PKV_CHAT_ZEPHYR;
        return PKV_CHAT_NONE; /* GLM-Edge and the like */
    }
    if (has(t, "<start_of_turn>")) {
        if (has(t, "System role not supported")) *flags |= PKV_CHAT_SYSTEM_RAISES;
        return PKV_CHAT_GEMMA;
    }
    if (has(t, "GPT4 Correct ")) return PKV_CHAT_OPENCHAT;
    if (has(t, "USER: ") && has(t, "ASSISTANT: ")) return has(t, "SYSTEM: ") ? PKV_CHAT_VICUNA_ORCA : PKV_CHAT_VICUNA;
    if (has(t, "### Instruction:") && has(t, "<|EOT|>")) return PKV_CHAT_DEEPSEEK;
    if (has(t, "<|START_OF_TURN_TOKEN|>") && has(t, "<|USER_TOKEN|>")) return PKV_CHAT_COMMAND_R;
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) {
        if (has(t, "Cutting Knowledge Date")) *flags |= PKV_CHAT_DATE_HEADER;
        if (has(t, "Cutting Knowledge Date") && has(t, "strftime_now")) *flags |= PKV_CHAT_DATE_TODAY;
        return PKV_CHAT_LLAMA3;
    }
    if (has(t, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>") && has(t, "<\xef\xbd\x9cUser\xef\xbd\x9c>") &&
        has(t, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>")) {
        if (has(t, "ns.is_first_sp")) *flags |= PKV_CHAT_SYSTEM_JOIN;
        if (has(t, "split('</think>')")) *flags |= PKV_CHAT_STRIP_THINK;
        if (has(t, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\\n")) *flags |= PKV_CHAT_THINK_PROMPT;
        return PKV_CHAT_DEEPSEEK3;
    }
    if (has(t, "[|system|]") && has(t, "[|assistant|]") && has(t, "[|endofturn|]"))
        return has(t, "[|tool|]") ? PKV_CHAT_NONE : PKV_CHAT_EXAONE3; /* EXAONE 4 is another format */
    if (has(t, "<|start_of_role|>")) {
        if (has(t, "set system_message = \"Knowledge Cutoff Date: April 2024.\nToday's Date: \"") &&
            has(t, "You are Granite, developed by IBM.\""))
            *flags |= PKV_CHAT_GRANITE_DATE; /* 3.1, 3.2 */
        else if (has(t, "Knowledge Cutoff Date") || has(t, "set system_message = 'You are"))
            return refuse(why, "a granite template with its own default system prompt"); /* 3.3, 4.0 350M */
        return PKV_CHAT_GRANITE;
    }
    return PKV_CHAT_NONE;
}

pkv_chat_family pkv_chat_detect_text(const char *tmpl, size_t len, pkv_chat_style *st) {
    memset(st, 0, sizeof *st);
    text_span t = {tmpl, tmpl ? len : 0};
    const char *why = NULL;
    st->family = detect(t, &st->flags, &why);
    if (st->family == PKV_CHAT_CHATML) chatml_default_system(t, st);
    if (st->family == PKV_CHAT_DEEPSEEK) deepseek_default_system(t, st);
    if (st->family == PKV_CHAT_EXAONE3) set_default_system(st, "");
    if (st->family == PKV_CHAT_NONE) {
        /* the first non-blank line, for the message */
        size_t b = 0;
        while (b < t.n && (t.s[b] == '\n' || t.s[b] == '\r' || t.s[b] == ' ')) b++;
        size_t e = b;
        while (e < t.n && t.s[e] != '\n' && t.s[e] != '\r') e++;
        int shown = e - b > 96 ? 96 : (int)(e - b);
        if (why)
            snprintf(st->unknown, sizeof st->unknown, "%s, first line \"%.*s%s\"", why, shown > 48 ? 48 : shown,
                     t.s + b, e - b > 48 ? "..." : "");
        else
            snprintf(st->unknown, sizeof st->unknown, "first line \"%.*s%s\"", shown, t.s + b, e - b > 96 ? "..." : "");
    }
    return st->family;
}

/* ---------------------------------------------------------------- a model's style */

void pkv_chat_style_default_tokens(pkv_chat_style *st) {
    const char *bos = "<s>", *eos = "</s>";
    switch (st->family) {
    case PKV_CHAT_LLAMA3: bos = "<|begin_of_text|>", eos = "<|eot_id|>"; break;
    case PKV_CHAT_GEMMA: bos = "<bos>", eos = "<eos>"; break;
    case PKV_CHAT_CHATML: bos = "", eos = "<|im_end|>"; break;
    case PKV_CHAT_PHI3: eos = "<|endoftext|>"; break;
    case PKV_CHAT_PHI4: bos = "<|endoftext|>", eos = "<|im_end|>"; break;
    case PKV_CHAT_DEEPSEEK: bos = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", eos = "<|EOT|>"; break;
    case PKV_CHAT_DEEPSEEK3:
        bos = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
        eos = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
        break;
    case PKV_CHAT_COMMAND_R: bos = "<BOS_TOKEN>", eos = "<|END_OF_TURN_TOKEN|>"; break;
    case PKV_CHAT_OPENCHAT: eos = "<|end_of_turn|>"; break;
    case PKV_CHAT_GRANITE: bos = eos = "<|end_of_text|>"; break;
    case PKV_CHAT_FALCON3: bos = eos = "<|endoftext|>"; break;
    case PKV_CHAT_EXAONE3: bos = "[BOS]", eos = "[|endofturn|]"; break;
    default: break;
    }
    snprintf(st->bos, sizeof st->bos, "%s", bos);
    snprintf(st->eos, sizeof st->eos, "%s", eos);
}

/* A special token's text from the vocabulary (texts point into the file and
 * are not NUL-terminated); false without one. */
static bool token_text(const pkv_tokenizer *vocab, int32_t id, char *out, size_t cap) {
    size_t len = 0;
    const char *text = vocab && id >= 0 ? pkv_tokenizer_text(vocab, id, &len) : NULL;
    if (!text || len + 1 > cap) return false;
    memcpy(out, text, len);
    out[len] = '\0';
    return true;
}

static pkv_chat_family from_arch(const gguf_file *f, const char *arch, pkv_chat_style *st) {
    memset(st, 0, sizeof *st);
    if (!arch) return PKV_CHAT_NONE;
    if (!strcmp(arch, "gemma3") || !strcmp(arch, "gemma2") || !strcmp(arch, "gemma")) st->family = PKV_CHAT_GEMMA;
    if (!strcmp(arch, "qwen2")) {
        st->family = PKV_CHAT_CHATML; /* Qwen2-Instruct's template and its default system prompt */
        set_default_system(st, "You are a helpful assistant.");
    }
    if (!strcmp(arch, "llama") && f) {
        const gguf_value *tokens;
        pkv_error err;
        if (gguf_get_arr(f, "tokenizer.ggml.tokens", &tokens, &err) == 0 && tokens->v.arr.elem_type == GGUF_VT_STRING)
            for (uint64_t i = 0; i < tokens->v.arr.count; i++)
                if (gguf_str_eq(tokens->v.arr.strs[i], "<|start_header_id|>")) st->family = PKV_CHAT_LLAMA3;
    }
    return st->family;
}

int pkv_chat_style_for_model(const gguf_file *f, const char *arch, const pkv_tokenizer *vocab, const char *override,
                             pkv_chat_style *st, pkv_error *err) {
    gguf_str tmpl;
    pkv_error miss;
    if (override) {
        if (pkv_chat_family_named(override, st) == PKV_CHAT_NONE &&
            pkv_chat_detect_text(override, strlen(override), st) == PKV_CHAT_NONE)
            return pkv_fail(err, PKV_ERR_ARG, "chat template (%s) is not a format promptkv knows (names: %s)",
                            st->unknown, pkv_chat_family_list());
    } else if (f && gguf_get_str(f, "tokenizer.chat_template", &tmpl, &miss) == 0) {
        pkv_chat_detect_text(tmpl.ptr, tmpl.len, st);
    } else {
        from_arch(f, arch, st);
    }
    pkv_chat_style_default_tokens(st);
    token_text(vocab, vocab ? pkv_tokenizer_bos(vocab) : -1, st->bos, sizeof st->bos);
    token_text(vocab, vocab ? pkv_tokenizer_eos(vocab) : -1, st->eos, sizeof st->eos);
    return 0;
}
