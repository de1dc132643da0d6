/* The generated text of one request: token pieces appended as they come,
 * stop strings found (the text is cut before the first), and the part that is
 * safe to stream so far — nothing that could still become a stop string, and
 * no UTF-8 character cut in half. */
#ifndef PKV_SERVER_TEXTOUT_H
#define PKV_SERVER_TEXTOUT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *text;
    size_t len, cap;
    size_t ready;       /* text[0, ready) can be sent: final whatever comes next */
    size_t searched;    /* stop strings were looked for in text[0, searched) */
    bool stopped;       /* a stop string was found: text ends before it */
    const char *const *stop;
    int n_stop;
    size_t max_stop_len;
} srv_textout;

void srv_textout_init(srv_textout *t, const char *const *stop, int n_stop);
void srv_textout_free(srv_textout *t);

/* Appends a piece; returns -1 when out of memory. Afterwards t->stopped tells
 * whether a stop string ended the text. */
int srv_textout_append(srv_textout *t, const char *piece, size_t len);

/* No more pieces: everything left is ready. */
void srv_textout_finish(srv_textout *t);

/* Bytes at the end of s[0, len) that start a UTF-8 sequence not yet complete
 * (0 to 3). */
size_t srv_utf8_incomplete_tail(const char *s, size_t len);

/* Copies s[0, len) to out (capacity 3 * len + 1 suffices), replacing every
 * invalid or incomplete sequence with U+FFFD; NUL-terminates; returns the
 * length written. */
size_t srv_utf8_sanitize(const char *s, size_t len, char *out);

#endif
