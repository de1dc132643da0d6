/*
 * Chat formatting for the three families the engine runs, written to render
 * exactly what each family's official Jinja chat template renders with
 * add_generation_prompt=true (templates quoted in
 * tools/make-tokenizer-fixtures.py, which checks these renderings):
 *   Gemma 3  google/gemma-3-*-it tokenizer_config.json (docs/engine.md §4.6)
 *   Llama 3  meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json
 *   ChatML   Qwen/Qwen2-7B-Instruct tokenizer_config.json
 */
#include "text/chat.h"

#include <string.h>

#include "base/error.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

/* ---------------------------------------------------------------- detection */

static bool str_contains(gguf_str s, const char *needle) {
    size_t n = strlen(needle);
    if (s.len < n) return false;
    for (uint64_t i = 0; i + n <= s.len; i++)
        if (memcmp(s.ptr + i, needle, n) == 0) return true;
    return false;
}

static bool vocab_has_token(const gguf_file *f, const char *text) {
    const gguf_value *tokens;
    pkv_error err;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &tokens, &err) != 0 ||
        tokens->v.arr.elem_type != GGUF_VT_STRING)
        return false;
    for (uint64_t i = 0; i < tokens->v.arr.count; i++)
        if (gguf_str_eq(tokens->v.arr.strs[i], text)) return true;
    return false;
}

pkv_chat_family pkv_chat_detect(const gguf_file *f, const char *arch) {
    gguf_str tmpl;
    pkv_error err;
    if (f && gguf_get_str(f, "tokenizer.chat_template", &tmpl, &err) == 0) {
        if (str_contains(tmpl, "<start_of_turn>")) return PKV_CHAT_GEMMA;
        if (str_contains(tmpl, "<|start_header_id|>")) return PKV_CHAT_LLAMA3;
        if (str_contains(tmpl, "<|im_start|>")) return PKV_CHAT_CHATML;
    }
    if (!arch) return PKV_CHAT_NONE;
    if (!strcmp(arch, "gemma3") || !strcmp(arch, "gemma2") || !strcmp(arch, "gemma"))
        return PKV_CHAT_GEMMA;
    if (!strcmp(arch, "llama") && f && vocab_has_token(f, "<|start_header_id|>"))
        return PKV_CHAT_LLAMA3;
    if (!strcmp(arch, "qwen2")) return PKV_CHAT_CHATML;
    return PKV_CHAT_NONE;
}

/* The default system prompt a ChatML template writes when the conversation has
 * none: the text of a Jinja string literal '<|im_start|>system\n...<|im_end|>'
 * (escapes \n, \t, \', \" and \\ undone). Qwen2's and Qwen2.5's templates
 * hold one each; a template with none gives false. */
bool pkv_chat_default_system(const gguf_file *f, char *buf, int buf_len) {
    gguf_str tmpl;
    pkv_error err;
    if (!f || buf_len < 1 || gguf_get_str(f, "tokenizer.chat_template", &tmpl, &err) != 0) return false;
    static const char head[] = "<|im_start|>system\\n", tail[] = "<|im_end|>";
    size_t nh = sizeof head - 1, nt = sizeof tail - 1;
    for (uint64_t i = 1; i + nh <= tmpl.len; i++) {
        char quote = tmpl.ptr[i - 1];
        if ((quote != '\'' && quote != '"') || memcmp(tmpl.ptr + i, head, nh)) continue;
        /* the literal's text up to <|im_end|>, within the same literal */
        int n = 0;
        bool ok = false;
        for (uint64_t j = i + nh; j < tmpl.len && tmpl.ptr[j] != quote; j++) {
            if (j + nt <= tmpl.len && !memcmp(tmpl.ptr + j, tail, nt)) {
                ok = n > 0;
                break;
            }
            char c = tmpl.ptr[j];
            if (c == '\\' && j + 1 < tmpl.len) {
                char e = tmpl.ptr[++j];
                c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
            }
            if (n + 1 >= buf_len) break;
            buf[n++] = c;
        }
        if (ok) {
            buf[n] = '\0';
            return true;
        }
    }
    return false;
}

const char *pkv_chat_family_name(pkv_chat_family family) {
    switch (family) {
    case PKV_CHAT_NONE: return "none";
    case PKV_CHAT_GEMMA: return "gemma";
    case PKV_CHAT_LLAMA3: return "llama3";
    case PKV_CHAT_CHATML: return "chatml";
    }
    return "unknown";
}

/* ---------------------------------------------------------------- output */

typedef struct {
    char *buf;
    size_t cap; /* bytes that may be written, excluding the NUL */
    size_t n;   /* bytes rendered so far (may exceed cap) */
} chat_out;

static void put_n(chat_out *o, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++, o->n++)
        if (o->n < o->cap) o->buf[o->n] = s[i];
}

static void put(chat_out *o, const char *s) { put_n(o, s, strlen(s)); }

/* Jinja's trim is Python's str.strip(): str.isspace() codepoints, which are
 * Unicode White_Space plus U+001C..U+001F. */
static bool is_python_space(uint32_t cp) {
    return (cp >= 0x1C && cp <= 0x1F) || (pkv_unicode_flags(cp) & PKV_UFLAG_WHITESPACE);
}

void pkv_chat_trim_span(const char *s, size_t len, size_t *begin_out, size_t *end_out) {
    size_t used, begin = 0, end = len;
    while (begin < end && is_python_space(pkv_utf8_decode(s + begin, end - begin, &used)))
        begin += used;
    while (end > begin) {
        size_t start = end - 1;
        while (start > begin && end - start < 4 && ((unsigned char)s[start] & 0xC0) == 0x80)
            start--;
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

/* The BOS token's text (copied by length: vocabulary texts point into the
 * file and are not NUL-terminated); the family's usual text without one. */
static void put_bos(chat_out *o, const pkv_tokenizer *tok, const char *fallback) {
    size_t len = 0;
    const char *text = tok ? pkv_tokenizer_text(tok, pkv_tokenizer_bos(tok), &len) : NULL;
    if (text) put_n(o, text, len);
    else put(o, fallback);
}

static bool is_role(const pkv_chat_message *m, const char *role) { return !strcmp(m->role, role); }

/* ---------------------------------------------------------------- families */

/* Gemma 3: a leading system message is prepended to the first turn's content
 * followed by a blank line; roles must alternate user/model. */
static int render_gemma(const pkv_tokenizer *tok, const pkv_chat_message *msgs, int n, chat_out *o,
                        size_t *system_end, pkv_error *err) {
    put_bos(o, tok, "<bos>");
    bool has_system = is_role(&msgs[0], "system");
    const pkv_chat_message *loop = msgs + has_system;
    int n_loop = n - has_system;
    for (int k = 0; k < n_loop; k++) {
        if (is_role(&loop[k], "user") != (k % 2 == 0))
            return pkv_fail(err, PKV_ERR_ARG,
                            "chat (gemma): message %d has role '%s'; roles must alternate "
                            "user/assistant",
                            k + has_system, loop[k].role);
        put(o, "<start_of_turn>");
        put(o, is_role(&loop[k], "assistant") ? "model" : loop[k].role);
        put(o, "\n");
        if (k == 0 && has_system) {
            put(o, msgs[0].content); /* not trimmed in the template */
            put(o, "\n\n");
            *system_end = o->n;
        }
        put_trimmed(o, loop[k].content);
        put(o, "<end_of_turn>\n");
    }
    put(o, "<start_of_turn>model\n");
    return 0;
}

/* Llama 3: every message is a header block; BOS before the first. */
static int render_llama3(const pkv_tokenizer *tok, const pkv_chat_message *msgs, int n,
                         chat_out *o, size_t *system_end) {
    for (int k = 0; k < n; k++) {
        if (k == 0) put_bos(o, tok, "<|begin_of_text|>");
        put(o, "<|start_header_id|>");
        put(o, msgs[k].role);
        put(o, "<|end_header_id|>\n\n");
        put_trimmed(o, msgs[k].content);
        put(o, "<|eot_id|>");
        if (k == 0 && is_role(&msgs[0], "system")) *system_end = o->n;
    }
    put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* ChatML as Qwen2-Instruct's template: a default system message when the
 * conversation has none (the template's own, e.g. Qwen2.5's "You are Qwen,
 * created by Alibaba Cloud. ..."; Qwen2's otherwise); contents are not
 * trimmed. */
static int render_chatml(const pkv_chat_message *msgs, int n, const char *default_system, chat_out *o,
                         size_t *system_end) {
    for (int k = 0; k < n; k++) {
        if (k == 0 && !is_role(&msgs[0], "system")) {
            put(o, "<|im_start|>system\n");
            put(o, default_system ? default_system : "You are a helpful assistant.");
            put(o, "<|im_end|>\n");
            *system_end = o->n;
        }
        put(o, "<|im_start|>");
        put(o, msgs[k].role);
        put(o, "\n");
        put(o, msgs[k].content);
        put(o, "<|im_end|>\n");
        if (k == 0 && is_role(&msgs[0], "system")) *system_end = o->n;
    }
    put(o, "<|im_start|>assistant\n");
    return 0;
}

int pkv_chat_render(pkv_chat_family family, const pkv_tokenizer *tok, const char *default_system,
                    const pkv_chat_message *messages, int n_messages, char *buf, int buf_len,
                    int *system_end, pkv_error *err) {
    if (!messages || n_messages < 1 || buf_len < 0 || (!buf && buf_len > 0))
        return pkv_fail(err, PKV_ERR_ARG, "chat: need at least one message and a buffer");
    for (int k = 0; k < n_messages; k++)
        if (!messages[k].role || !messages[k].content)
            return pkv_fail(err, PKV_ERR_ARG, "chat: message %d has no role or content", k);
    chat_out o = {buf, buf_len > 0 ? (size_t)buf_len - 1 : 0, 0};
    size_t sys_end = 0;
    int rc;
    switch (family) {
    case PKV_CHAT_GEMMA: rc = render_gemma(tok, messages, n_messages, &o, &sys_end, err); break;
    case PKV_CHAT_LLAMA3: rc = render_llama3(tok, messages, n_messages, &o, &sys_end); break;
    case PKV_CHAT_CHATML: rc = render_chatml(messages, n_messages, default_system, &o, &sys_end); break;
    default: return pkv_fail(err, PKV_ERR_UNSUPPORTED, "chat: no chat template for this model");
    }
    if (rc) return -1;
    if (o.n > (size_t)INT32_MAX)
        return pkv_fail(err, PKV_ERR_LIMIT, "chat: rendering of %zu bytes is too long", o.n);
    if (buf_len > 0) buf[o.n < o.cap ? o.n : o.cap] = '\0';
    if (system_end) *system_end = (int)sys_end;
    return (int)o.n;
}
