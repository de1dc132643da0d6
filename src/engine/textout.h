/* The text of one generation (generate.c): token pieces appended as they
 * come, stop strings found (the text is cut before the first), and the part
 * that is safe to stream so far — nothing that could still become a stop
 * string, and no UTF-8 character cut in half. */
#ifndef PKV_ENGINE_TEXTOUT_H
#define PKV_ENGINE_TEXTOUT_H

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
} pkv_textout;

void pkv_textout_init(pkv_textout *t, const char *const *stop, int n_stop);
void pkv_textout_free(pkv_textout *t);

/* Appends a piece; returns -1 when out of memory. Afterwards t->stopped tells
 * whether a stop string ended the text. */
int pkv_textout_append(pkv_textout *t, const char *piece, size_t len);

/* No more pieces: everything left is ready. */
void pkv_textout_finish(pkv_textout *t);

/* Bytes at the end of s[0, len) that start a UTF-8 sequence not yet complete
 * (0 to 3). */
size_t pkv_utf8_incomplete_tail(const char *s, size_t len);


#endif
