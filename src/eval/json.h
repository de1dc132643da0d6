/*
 * Just enough JSON for the evaluation's result lines: escaping for the
 * writer, and a small parser that reads a line back into a tree (resume,
 * merge and the summary read the JSONL file).
 */
#ifndef PKV_EVAL_JSON_H
#define PKV_EVAL_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "eval/text.h"

/* Appends s as a JSON string literal (quotes included). */
void pkv_json_str(pkv_sbuf *b, const char *s);
/* Appends a number; non-finite values become null. */
void pkv_json_num(pkv_sbuf *b, double v);

typedef enum { PKV_JSON_NULL, PKV_JSON_BOOL, PKV_JSON_NUM, PKV_JSON_STR, PKV_JSON_ARR, PKV_JSON_OBJ } pkv_json_type;

typedef struct pkv_json pkv_json;
struct pkv_json {
    pkv_json_type type;
    double num; /* NUM, BOOL (0/1) */
    char *str;  /* STR; the key of an object member */
    char *key;
    pkv_json *items; /* ARR elements, OBJ members */
    int n_items;
};

/* Parses one JSON value spanning the whole text (surrounding whitespace
 * allowed); NULL on malformed input or allocation failure. */
pkv_json *pkv_json_parse(const char *text, size_t len);
void pkv_json_free(pkv_json *v);

/* Member of an object (NULL if absent or not an object). */
const pkv_json *pkv_json_get(const pkv_json *obj, const char *key);
/* Typed member access with a default. */
double pkv_json_get_num(const pkv_json *obj, const char *key, double dflt);
const char *pkv_json_get_str(const pkv_json *obj, const char *key, const char *dflt);

#endif
