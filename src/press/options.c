/* Press options as data (press.h pkv_press_option): one parser for every
 * table, so every press refuses a bad value in the same words. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "press/press.h"

static int refuse(const pkv_press_option *o, const char *who, const char *value, const char *want, pkv_error *err) {
    return pkv_fail(err, PKV_ERR_ARG, "%s %s must be %s, got '%s'%s%s", who, o->key, want, value, o->why ? " " : "",
                    o->why ? o->why : "");
}

static void clear(const pkv_press_option *table, const char *key, void *obj) {
    for (const pkv_press_option *o = table; o->key; o++) {
        if (strcmp(o->key, key)) continue;
        void *field = (char *)obj + o->offset;
        if (o->type == PKV_OPT_REAL) *(double *)field = 0.0;
        else if (o->type == PKV_OPT_U64) *(uint64_t *)field = 0;
        else *(int *)field = 0;
    }
}

int pkv_press_cfg_add_protect(pkv_press_cfg *cfg, int begin, int end, pkv_error *err) {
    if (begin < 0 || end <= begin)
        return pkv_fail(err, PKV_ERR_ARG, "protected span %d:%d must satisfy 0 <= begin < end", begin, end);
    pkv_span *p = realloc(cfg->protect, (size_t)(cfg->n_protect + 1) * sizeof *p);
    if (!p) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    cfg->protect = p;
    cfg->protect[cfg->n_protect++] = (pkv_span){begin, end};
    return 0;
}

static int set_span(pkv_press_cfg *cfg, const char *value, pkv_error *err) {
    char *colon, *end;
    long b = strtol(value, &colon, 10), e;
    if (colon == value || *colon != ':') goto bad;
    e = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || e < 1 || e > 1L << 30) goto bad;
    return pkv_press_cfg_add_protect(cfg, (int)b, (int)e, err);
bad:
    return pkv_fail(err, PKV_ERR_ARG, "protect expects BEGIN:END token positions, got '%s'", value);
}

int pkv_press_option_set(const pkv_press_option *table, const pkv_press_option *o, void *obj, const char *who,
                         const char *value, pkv_press_cfg *cfg, pkv_error *err) {
    void *field = (char *)obj + o->offset;
    char want[256], *end;
    switch (o->type) {
    case PKV_OPT_INT: {
        long v = strtol(value, &end, 10);
        if (*value == '\0' || *end || v < (long)o->lo || v > (long)o->hi || ((o->flags & PKV_OPT_ODD) && v % 2 == 0)) {
            snprintf(want, sizeof want, "%s integer in [%ld, %ld]", o->flags & PKV_OPT_ODD ? "an odd" : "an",
                     (long)o->lo, (long)o->hi);
            return refuse(o, who, value, want, err);
        }
        *(int *)field = (int)v;
        break;
    }
    case PKV_OPT_REAL: {
        double v = strtod(value, &end);
        bool below = o->flags & PKV_OPT_BELOW_HI;
        if (*value == '\0' || *end || !isfinite(v) || v < o->lo || (below ? v >= o->hi : v > o->hi)) {
            snprintf(want, sizeof want, "in [%g, %g%c", o->lo, o->hi, below ? ')' : ']');
            return refuse(o, who, value, want, err);
        }
        *(double *)field = v;
        break;
    }
    case PKV_OPT_U64: {
        unsigned long long v = strtoull(value, &end, 10);
        if (*value == '\0' || *end || *value == '-') return refuse(o, who, value, "a non-negative integer", err);
        *(uint64_t *)field = v;
        break;
    }
    case PKV_OPT_CHOICE: {
        size_t n = 0;
        want[0] = '\0';
        for (const pkv_press_choice *c = o->choices; c->name; c++) {
            if (!strcmp(c->name, value)) {
                *(int *)field = c->value;
                goto set;
            }
            n += (size_t)snprintf(want + n, n < sizeof want ? sizeof want - n : 0, "%s%s", c == o->choices ? "" : " | ",
                                  c->name);
        }
        return refuse(o, who, value, want, err);
    }
    case PKV_OPT_SPAN: return set_span(cfg, value, err);
    case PKV_OPT_CUSTOM: return pkv_fail(err, PKV_ERR_INTERNAL, "%s %s: no parser", who, o->key);
    }
set:
    if (o->clears) clear(table, o->clears, obj);
    return 0;
}
