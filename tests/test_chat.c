/*
 * Chat formats (docs/engine.md §4.7). Expected values come from:
 *   - tests/fixtures/chat/templates.ref: real models' chat templates (tools/chat_templates.py) rendered
 *     by HF transformers' render_jinja_template (jinja2), written by tools/make-chat-fixtures.py; each
 *     template must be detected as its family and every conversation must render byte for byte;
 *   - tests/fixtures/tokenizer/chat.ref: the same for the Gemma 3, Llama 3 and Qwen2 templates with
 *     control characters and odd roles (tools/make-tokenizer-fixtures.py);
 *   - hand-written small templates and GGUF files for detection, overrides and errors.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/gguf.h"
#include "mem_gguf.h"
#include "test.h"
#include "text/chat.h"

/* ---------------------------------------------------------------- fixture reading */

static char *next_line(char **cursor) {
    char *s = *cursor;
    if (!s || !*s) return NULL;
    char *nl = strchr(s, '\n');
    if (nl) {
        *nl = '\0';
        *cursor = nl + 1;
    } else {
        *cursor = s + strlen(s);
    }
    return s;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Undoes the fixture escaping (\\ and \xHH) in place; returns the length. */
static size_t unescape(char *s) {
    size_t n = 0, len = strlen(s);
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\\' && i + 1 < len && s[i + 1] == '\\') {
            s[n++] = '\\';
            i++;
        } else if (s[i] == '\\' && i + 3 < len && s[i + 1] == 'x') {
            s[n++] = (char)(hex_digit(s[i + 2]) * 16 + hex_digit(s[i + 3]));
            i += 3;
        } else {
            s[n++] = s[i];
        }
    }
    s[n] = '\0';
    return n;
}

static int split_tabs(char *line, char **fields, int max) {
    int n = 0;
    fields[n++] = line;
    for (char *p = line; *p && n < max; p++)
        if (*p == '\t') {
            *p = '\0';
            fields[n++] = p + 1;
        }
    return n;
}

/* ---------------------------------------------------------------- the real templates vs jinja2 */

#define MAX_MSGS 16

typedef struct {
    pkv_chat_style style;
    char name[64];
    pkv_chat_message msgs[MAX_MSGS];
    int n_msgs;
    const char *want;
    size_t want_len;
    int n_rendered, n_raised, n_templates;
} fixture_state;

static void check_case(fixture_state *fs, const char *case_name, const char *system_end_field) {
    static char got[16384];
    int system_end = -1;
    pkv_error err = {0};
    int n = pkv_chat_render(&fs->style, fs->msgs, fs->n_msgs, got, sizeof got, &system_end, &err);
    if (!system_end_field) {
        CHECK_MSG(n == -1 && err.code == PKV_ERR_ARG, "%s/%s: the template raises; got %d", fs->name, case_name, n);
        if (n == -1) CHECK_MSG(strstr(err.msg, "chat (") == err.msg, "%s/%s: %s", fs->name, case_name, err.msg);
        fs->n_raised++;
        return;
    }
    CHECK_MSG(n == (int)fs->want_len && !memcmp(got, fs->want, fs->want_len), "%s/%s:\n      got  \"%s\"\n      want \"%s\"",
              fs->name, case_name, n >= 0 ? got : err.msg, fs->want);
    CHECK_MSG(system_end == atoi(system_end_field), "%s/%s: system_end %d, want %s", fs->name, case_name, system_end,
              system_end_field);
    fs->n_rendered++;
}

TEST(chat_templates_vs_jinja) {
    size_t size;
    char *data = test_read_file(FIXTURE("chat/templates.ref"), &size);
    REQUIRE_MSG(data, "chat/templates.ref missing");
    fixture_state *fs = calloc(1, sizeof *fs);
    REQUIRE(fs);
    char case_name[64] = "";
    long long now = 0;
    char *cursor = data, *line;
    while ((line = next_line(&cursor))) {
        if (line[0] == '#' || !line[0]) continue;
        char *f[4];
        int nf = split_tabs(line, f, 4);
        if (!strcmp(f[0], "T") && nf == 4) {
            snprintf(fs->name, sizeof fs->name, "%s", f[1]);
            size_t len = unescape(f[3]);
            pkv_chat_family got = pkv_chat_detect_text(f[3], len, &fs->style);
            fs->style.now = now; /* the instant strftime_now was given */
            CHECK_MSG(!strcmp(pkv_chat_family_name(got), f[2]), "%s: detected as %s, want %s", f[1],
                      pkv_chat_family_name(got), f[2]);
            fs->n_templates++;
        } else if (!strcmp(f[0], "D")) {
            now = atoll(f[1]);
        } else if (!strcmp(f[0], "B")) {
            unescape(f[1]);
            snprintf(fs->style.bos, sizeof fs->style.bos, "%s", f[1]);
        } else if (!strcmp(f[0], "O")) {
            unescape(f[1]);
            snprintf(fs->style.eos, sizeof fs->style.eos, "%s", f[1]);
        } else if (!strcmp(f[0], "C")) {
            snprintf(case_name, sizeof case_name, "%s", f[1]);
            fs->n_msgs = 0;
        } else if (!strcmp(f[0], "M") && fs->n_msgs < MAX_MSGS) {
            if (nf > 2) unescape(f[2]);
            fs->msgs[fs->n_msgs++] = (pkv_chat_message){f[1], nf > 2 ? f[2] : ""};
        } else if (!strcmp(f[0], "E")) {
            fs->want_len = unescape(f[1]);
            fs->want = f[1];
        } else if (!strcmp(f[0], "S")) {
            check_case(fs, case_name, f[1]);
        } else if (!strcmp(f[0], "X")) {
            check_case(fs, case_name, NULL);
        }
    }
    /* 34 templates x 12 conversations (tools/make-chat-fixtures.py) */
    CHECK_EQ_INT(fs->n_templates, 34);
    CHECK_EQ_INT(fs->n_rendered + fs->n_raised, 34 * 12);
    CHECK(fs->n_rendered >= 320 && fs->n_raised >= 30);
    free(fs);
    free(data);
}

/* The Gemma 3, Llama 3 and Qwen2 (ChatML with its default system prompt)
 * renderings of tokenizer/chat.ref: control characters, empty contents,
 * roles that do not alternate. */
TEST(chat_tokenizer_fixture_vs_jinja) {
    size_t size;
    char *data = test_read_file(FIXTURE("tokenizer/chat.ref"), &size);
    REQUIRE_MSG(data, "tokenizer/chat.ref missing");
    fixture_state *fs = calloc(1, sizeof *fs);
    REQUIRE(fs);
    char *cursor = data, *line;
    while ((line = next_line(&cursor))) {
        if (line[0] == '#' || !line[0]) continue;
        char *f[4];
        int nf = split_tabs(line, f, 4);
        if (!strcmp(f[0], "C")) {
            REQUIRE(pkv_chat_family_named(f[1], &fs->style) != PKV_CHAT_NONE);
            if (fs->style.family == PKV_CHAT_CHATML) {
                fs->style.has_default_system = true; /* Qwen2-7B-Instruct's template */
                strcpy(fs->style.default_system, "You are a helpful assistant.");
            }
            pkv_chat_style_default_tokens(&fs->style);
            snprintf(fs->name, sizeof fs->name, "%s/%s", f[1], f[2]);
            fs->n_msgs = 0;
        } else if (!strcmp(f[0], "M") && fs->n_msgs < MAX_MSGS) {
            if (nf > 2) unescape(f[2]);
            fs->msgs[fs->n_msgs++] = (pkv_chat_message){f[1], nf > 2 ? f[2] : ""};
        } else if (!strcmp(f[0], "E")) {
            fs->want_len = unescape(f[1]);
            fs->want = f[1];
        } else if (!strcmp(f[0], "S")) {
            check_case(fs, "", f[1]);
        } else if (!strcmp(f[0], "X")) {
            check_case(fs, "", NULL);
        }
    }
    CHECK(fs->n_rendered + fs->n_raised >= 27);
    free(fs);
    free(data);
}

/* ---------------------------------------------------------------- names, buffers, errors */

TEST(chat_family_names) {
    pkv_chat_style st;
    int n = 0;
    for (int f = 1; f < PKV_CHAT_N_FAMILIES; f++) {
        const char *name = pkv_chat_family_name((pkv_chat_family)f);
        CHECK_MSG(pkv_chat_family_named(name, &st) == (pkv_chat_family)f, "%s", name);
        CHECK_MSG(strstr(pkv_chat_family_list(), name) != NULL, "%s is not listed", name);
        n++;
    }
    CHECK_EQ_INT(n, 22);
    CHECK_EQ_INT(pkv_chat_family_named("llama2-sys-strip", &st), PKV_CHAT_LLAMA2_SYS);
    CHECK_EQ_INT(pkv_chat_family_named("llama2-sys-bos", &st), PKV_CHAT_LLAMA2_SYS);
    CHECK_EQ_INT(pkv_chat_family_named("chatml2", &st), PKV_CHAT_NONE);
    CHECK_EQ_INT(pkv_chat_family_named(NULL, &st), PKV_CHAT_NONE);
    /* by name, a family takes the variant of its checked template */
    pkv_chat_family_named("deepseek", &st);
    CHECK(st.has_default_system && strstr(st.default_system, "Deepseek Coder"));
    pkv_chat_family_named("chatml", &st);
    CHECK(!st.has_default_system);
    CHECK_STR(pkv_chat_family_name(PKV_CHAT_N_FAMILIES), "unknown");
}

TEST(chat_buffer_and_errors) {
    pkv_chat_style st;
    pkv_chat_family_named("gemma", &st);
    pkv_chat_style_default_tokens(&st);
    pkv_chat_message msgs[] = {{"user", "Test"}};
    char small[8];
    pkv_error err = {0};
    /* too small: the full length is returned, the output truncated and ended */
    int n = pkv_chat_render(&st, msgs, 1, small, sizeof small, NULL, &err);
    CHECK_EQ_INT(n, (int)strlen("<bos><start_of_turn>user\nTest<end_of_turn>\n<start_of_turn>model\n"));
    CHECK_STR(small, "<bos><s");
    CHECK_EQ_INT(pkv_chat_render(&st, NULL, 0, NULL, 0, NULL, &err), -1);
    CHECK_EQ_INT(pkv_chat_render(&st, msgs, 1, NULL, 0, NULL, &err), n); /* length only */
    pkv_chat_message no_content[] = {{"user", NULL}};
    CHECK_EQ_INT(pkv_chat_render(&st, no_content, 1, small, sizeof small, NULL, &err), -1);
    CHECK(strstr(err.msg, "message 0") != NULL);
    pkv_chat_style none;
    pkv_chat_family_named("nope", &none);
    CHECK_EQ_INT(pkv_chat_render(&none, msgs, 1, small, sizeof small, NULL, &err), -1);
    CHECK_EQ_INT(err.code, PKV_ERR_UNSUPPORTED);
    /* a role the template refuses: its message */
    pkv_chat_family_named("mistral-v7", &st);
    pkv_chat_message tool[] = {{"tool", "x"}};
    CHECK_EQ_INT(pkv_chat_render(&st, tool, 1, small, sizeof small, NULL, &err), -1);
    CHECK_STR(err.msg, "chat (mistral-v7): Only user, system and assistant roles are supported!");
}

/* ---------------------------------------------------------------- detection in text, GGUF and overrides */

TEST(chat_detect_markers) {
    pkv_chat_style st;
    static const struct {
        const char *text, *family;
    } cases[] = {
        {"{{ '<|im_start|>' + message['role'] }}", "chatml"},
        {"<|im_start|>{{ role }}<|im_sep|>", "phi4"},
        {"{{ '<|im_start|>' }}<end_of_utterance>", "none"},           /* SmolVLM */
        {"mistral", "llama2"},                                           /* a template that is just the name */
        {"[INST] <<SYS>>", "llama2-sys"},
        {"{{ ' [INST] ' + system_message }}", "mistral-v1"},
        {"[AVAILABLE_TOOLS] {{ \"[INST] \" }}", "mistral-v3"},
        {"[AVAILABLE_TOOLS] {{ \"[INST]\" }}", "mistral-v3-tekken"},
        {"[INST] [SYSTEM_PROMPT]", "mistral-v7"},
        {"<|user|>\n<|assistant|>\n<|end|>", "phi3"},
        {"<|user|> <|assistant|> </s>", "falcon3"},
        {"<|user|> <|assistant|> <|endoftext|>", "zephyr"},
        {"<|user|> <|assistant|>", "none"},                              /* GLM-Edge */
        {"<start_of_turn>", "gemma"},
        {"GPT4 Correct User", "openchat"},
        {"USER: x ASSISTANT: y", "vicuna"},
        {"SYSTEM: USER: x ASSISTANT: y", "vicuna-orca"},
        {"### Instruction: <|EOT|>", "deepseek"},
        {"<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", "command-r"},
        {"<|start_header_id|>x<|end_header_id|>", "llama3"},
        {"<\xef\xbd\x9cUser\xef\xbd\x9c><\xef\xbd\x9c" "Assistant\xef\xbd\x9c><\xef\xbd\x9c"
         "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "deepseek3"},
        {"[|system|][|assistant|][|endofturn|]", "exaone3"},
        {"[|system|][|assistant|][|endofturn|][|tool|]", "none"},        /* EXAONE 4 */
        {"<|start_of_role|>", "granite"},
        {"", "none"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pkv_chat_family f = pkv_chat_detect_text(cases[i].text, strlen(cases[i].text), &st);
        CHECK_MSG(!strcmp(pkv_chat_family_name(f), cases[i].family), "\"%s\": %s, want %s", cases[i].text,
                  pkv_chat_family_name(f), cases[i].family);
    }
    /* an unknown template: its first non-blank line, quoted and cut */
    pkv_chat_detect_text("\n\n{% for m in messages %}{{ m.content }}\n{% endfor %}", 49, &st);
    CHECK_STR(st.unknown, "first line \"{% for m in messages %}{{ m.content }}\"");
    char long_line[300];
    memset(long_line, 'x', sizeof long_line - 1);
    long_line[sizeof long_line - 1] = '\0';
    pkv_chat_detect_text(long_line, strlen(long_line), &st);
    CHECK(strlen(st.unknown) < 120 && strstr(st.unknown, "...\"") != NULL);
    /* templates of known families that write a default system prompt their formatter does not: refused */
    static const char small32[] = "{%- set default_system_message = 'You are Mistral Small 3' %}\n[SYSTEM_PROMPT] [INST]";
    CHECK_EQ_INT(pkv_chat_detect_text(small32, strlen(small32), &st), PKV_CHAT_NONE);
    CHECK_STR(st.unknown, "a mistral-v7 template with its own default system prompt, first line "
                          "\"{%- set default_system_message = 'You are Mistra...\"");
    static const char granite33[] = "{%- set system_message = \" Knowledge Cutoff Date: April 2024.\n Today's Date: \" "
                                    "%}<|start_of_role|>";
    CHECK_EQ_INT(pkv_chat_detect_text(granite33, strlen(granite33), &st), PKV_CHAT_NONE);
    CHECK(strstr(st.unknown, "a granite template with its own default system prompt") == st.unknown);
}

static bool gguf_with_template(const char *tmpl, mem_gguf *m) {
    gguf_writer *w = gguf_writer_new();
    if (tmpl) gguf_write_str(w, "tokenizer.chat_template", tmpl);
    static const char *const tokens[] = {"a", "<|start_header_id|>"};
    gguf_write_arr_str(w, "tokenizer.ggml.tokens", tokens, 2);
    return open_written(w, m);
}

TEST(chat_style_for_model) {
    static const char qwen25[] =
        "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n{%- else %}\n"
        "    {%- if messages[0]['role'] == 'system' %}\n"
        "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
        "    {%- else %}\n"
        "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}";
    mem_gguf m;
    pkv_chat_style st;
    pkv_error err = {0};
    /* the template's family and its own default system prompt (after the tools branch's bare header) */
    REQUIRE(gguf_with_template(qwen25, &m));
    REQUIRE(pkv_chat_style_for_model(&m.file, "qwen2", NULL, NULL, &st, &err) == 0);
    CHECK_EQ_INT(st.family, PKV_CHAT_CHATML);
    CHECK(st.has_default_system);
    CHECK_STR(st.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    /* an override by name wins over the template */
    REQUIRE(pkv_chat_style_for_model(&m.file, "qwen2", NULL, "llama3", &st, &err) == 0);
    CHECK_EQ_INT(st.family, PKV_CHAT_LLAMA3);
    CHECK_STR(st.bos, "<|begin_of_text|>");
    /* an override given as template text is detected */
    REQUIRE(pkv_chat_style_for_model(&m.file, "qwen2", NULL, "{{ '<start_of_turn>user' }}", &st, &err) == 0);
    CHECK_EQ_INT(st.family, PKV_CHAT_GEMMA);
    /* an unknown override: one line naming it and the formats */
    CHECK_EQ_INT(pkv_chat_style_for_model(&m.file, "qwen2", NULL, "my-format\nsecond line", &st, &err), -1);
    CHECK_EQ_INT(err.code, PKV_ERR_ARG);
    CHECK(strstr(err.msg, "chat template (first line \"my-format\") is not a format promptkv knows (names: chatml, ") ==
          err.msg);
    CHECK(strchr(err.msg, '\n') == NULL);
    close_written(&m);

    /* an unknown template in the file: no chat format, the reason kept, not an error */
    REQUIRE(gguf_with_template("{% for m in messages %}<|turn|>{{ m.content }}{% endfor %}", &m));
    REQUIRE(pkv_chat_style_for_model(&m.file, "llama", NULL, NULL, &st, &err) == 0);
    CHECK_EQ_INT(st.family, PKV_CHAT_NONE);
    CHECK_STR(st.unknown, "first line \"{% for m in messages %}<|turn|>{{ m.content }}{% endfor %}\"");
    close_written(&m);

    /* no template: the architecture decides (llama needs Llama 3's header token) */
    REQUIRE(gguf_with_template(NULL, &m));
    REQUIRE(pkv_chat_style_for_model(&m.file, "llama", NULL, NULL, &st, &err) == 0);
    CHECK_EQ_INT(st.family, PKV_CHAT_LLAMA3);
    REQUIRE(pkv_chat_style_for_model(&m.file, "gemma3", NULL, NULL, &st, &err) == 0);
    CHECK_EQ_INT(st.family, PKV_CHAT_GEMMA);
    REQUIRE(pkv_chat_style_for_model(&m.file, "qwen2", NULL, NULL, &st, &err) == 0);
    CHECK(st.family == PKV_CHAT_CHATML && !strcmp(st.default_system, "You are a helpful assistant."));
    REQUIRE(pkv_chat_style_for_model(&m.file, "phi3", NULL, NULL, &st, &err) == 0);
    CHECK(st.family == PKV_CHAT_NONE && st.unknown[0] == '\0');
    close_written(&m);
    gguf_writer *w = gguf_writer_new();
    static const char *const plain[] = {"a", "b"};
    gguf_write_arr_str(w, "tokenizer.ggml.tokens", plain, 2);
    REQUIRE(open_written(w, &m));
    REQUIRE(pkv_chat_style_for_model(&m.file, "llama", NULL, NULL, &st, &err) == 0);
    CHECK_EQ_INT(st.family, PKV_CHAT_NONE);
    close_written(&m);
}

/* The default system prompts the templates write, read from their text. */
TEST(chat_default_system_literals) {
    pkv_chat_style st;
    /* DeepSeek Coder's, with its escaped newline */
    static const char ds[] = "{%- if not ns.found -%}\n{{'You are a coder\\n'}}\n{%- endif %}### Instruction:<|EOT|>";
    REQUIRE(pkv_chat_detect_text(ds, strlen(ds), &st) == PKV_CHAT_DEEPSEEK);
    CHECK(st.has_default_system);
    CHECK_STR(st.default_system, "You are a coder\n");
    /* ChatML without one (OpenHermes), and one whose literal stops at the header only */
    static const char bare[] = "{{ '<|im_start|>system\\n' }}{{ '<|im_start|>' + m.role }}";
    REQUIRE(pkv_chat_detect_text(bare, strlen(bare), &st) == PKV_CHAT_CHATML);
    CHECK(!st.has_default_system);
    /* EXAONE's empty system block counts as one (an empty text) */
    static const char ex[] = "[|system|][|endofturn|]\\n [|assistant|]";
    REQUIRE(pkv_chat_detect_text(ex, strlen(ex), &st) == PKV_CHAT_EXAONE3);
    CHECK(st.has_default_system && st.default_system[0] == '\0');
}

/* Llama 3.2 writes today's date (HF's strftime_now, the local date): without
 * a date given, the formatter writes the day it renders on. */
TEST(chat_llama32_today) {
    static const char tmpl[] = "<|start_header_id|><|end_header_id|>Cutting Knowledge Date: {{ strftime_now('%d %b %Y') }}";
    pkv_chat_style st;
    REQUIRE(pkv_chat_detect_text(tmpl, strlen(tmpl), &st) == PKV_CHAT_LLAMA3);
    CHECK(st.flags & PKV_CHAT_DATE_HEADER);
    CHECK(st.flags & PKV_CHAT_DATE_TODAY);
    pkv_chat_style_default_tokens(&st);
    pkv_chat_message msgs[] = {{"user", "Hi"}};
    char out[512], want[512], day[32];
    pkv_error err = {0};
    time_t now = time(NULL);
    struct tm tm;
    REQUIRE(localtime_r(&now, &tm) && strftime(day, sizeof day, "%d %b %Y", &tm));
    int n = pkv_chat_render(&st, msgs, 1, out, sizeof out, NULL, &err);
    snprintf(want, sizeof want,
             "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
             "Today Date: %s\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n",
             day);
    CHECK_EQ_INT(n, (int)strlen(want));
    CHECK_STR(out, want);
    /* Llama 3.1's fixed date unless the template calls strftime_now */
    static const char tmpl31[] = "<|start_header_id|><|end_header_id|>Cutting Knowledge Date: {{ date_string }}";
    REQUIRE(pkv_chat_detect_text(tmpl31, strlen(tmpl31), &st) == PKV_CHAT_LLAMA3);
    CHECK(!(st.flags & PKV_CHAT_DATE_TODAY));
    pkv_chat_style_default_tokens(&st);
    CHECK(pkv_chat_render(&st, msgs, 1, out, sizeof out, NULL, &err) > 0 && strstr(out, "Today Date: 26 Jul 2024\n"));
}
