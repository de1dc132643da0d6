/* What the chat formatters share (chat.c, chat_families.c, chat_inst.c): the
 * output buffer, the text helpers that mirror Jinja's and Python's string
 * operations, the template checks, and each family's renderer. Private to
 * src/text/. */
#ifndef PKV_CHAT_OUT_H
#define PKV_CHAT_OUT_H

#include <stdbool.h>
#include <stddef.h>

#include "promptkv.h"
#include "text/chat_style.h"

typedef struct {
    char *buf;
    size_t cap; /* bytes that may be written, excluding the NUL */
    size_t n;   /* bytes rendered so far (may exceed cap) */
    const pkv_chat_style *st;
    size_t system_end;
    pkv_error *err;
} chat_out;

/* Output: bytes past cap are counted, not written. */
void chat_put_n(chat_out *o, const char *s, size_t len);
void chat_put(chat_out *o, const char *s);
void chat_put_trimmed(chat_out *o, const char *s);
int chat_put_stripped(chat_out *o, const char *const *parts, int n, size_t *head_end);
int chat_put_date(chat_out *o, const char *format);
/* The rendering so far ends the system prompt's span. */
void chat_mark_system_end(chat_out *o);
bool chat_is_role(const pkv_chat_message *m, const char *role);
/* What a template's raise_exception says: an error naming the family. */
int chat_raise(chat_out *o, const char *message);
/* From the first message of msgs on: user, assistant, user, ... (other roles
 * count as not-user), else raise(message). */
int chat_check_alternation(chat_out *o, const pkv_chat_message *msgs, int n, const char *message);
/* Python's lstrip(c), rstrip(c); the last occurrence of needle in s[0, n). */
void chat_lstrip_char(const char **s, size_t *n, char c);
void chat_rstrip_char(const char *s, size_t *n, char c);
const char *chat_last_of(const char *s, size_t n, const char *needle);

int chat_render_chatml(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_llama3(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_phi3(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_phi4(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_zephyr(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_falcon3(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_granite(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_exaone3(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_openchat(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_vicuna(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_deepseek(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_deepseek3(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_llama2(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_llama2_sys(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_mistral_v1(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_mistral_v3(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_mistral_v7(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_gemma(chat_out *o, const pkv_chat_message *m, int n);
int chat_render_command_r(chat_out *o, const pkv_chat_message *m, int n);

#endif
