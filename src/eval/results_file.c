/* Results files: keys, checks, merging, canonical order, writing (results_file.h). */
#include "eval/results_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "eval/json.h"
#include "eval/text.h"

/* ---------------------------------------------------------------- key set */

void pkv_key_set_free(pkv_key_set *s) {
    for (int i = 0; i < s->n; i++) free(s->keys[i]);
    free(s->keys);
    memset(s, 0, sizeof *s);
}

/* index of the first key >= key */
static int lower_bound(const pkv_key_set *s, const char *key) {
    int lo = 0, hi = s->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (strcmp(s->keys[mid], key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool pkv_key_set_has(const pkv_key_set *s, const char *key) {
    int i = lower_bound(s, key);
    return i < s->n && !strcmp(s->keys[i], key);
}

int pkv_key_set_add(pkv_key_set *s, const char *key) {
    int i = lower_bound(s, key);
    if (i < s->n && !strcmp(s->keys[i], key)) return 0;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        char **k = realloc(s->keys, (size_t)cap * sizeof *k);
        if (!k) return -1;
        s->keys = k;
        s->cap = cap;
    }
    char *d = pkv_strdup(key);
    if (!d) return -1;
    memmove(s->keys + i + 1, s->keys + i, (size_t)(s->n - i) * sizeof *s->keys);
    s->keys[i] = d;
    s->n++;
    return 0;
}

/* ---------------------------------------------------------------- files */

/* Reads a whole file; *data NULL (and 0) when it does not exist. */
static int read_all(const char *path, char **data, size_t *len, pkv_error *err) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 0;
        return pkv_fail(err, PKV_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    pkv_sbuf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) pkv_sbuf_add(&b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    if (bad || b.failed) {
        pkv_sbuf_free(&b);
        return pkv_fail(err, bad ? PKV_ERR_IO : PKV_ERR_NOMEM, "%s: cannot read", path);
    }
    *len = b.len;
    *data = b.data;
    return 0;
}

int pkv_jsonl_truncate_partial(const char *path, pkv_error *err) {
    char *data;
    size_t len;
    if (read_all(path, &data, &len, err)) return -1;
    if (!data || len == 0 || data[len - 1] == '\n') {
        free(data);
        return 0;
    }
    size_t keep = len;
    while (keep > 0 && data[keep - 1] != '\n') keep--;
    free(data);
    if (truncate(path, (off_t)keep)) return pkv_fail(err, PKV_ERR_IO, "%s: cannot truncate: %s", path, strerror(errno));
    return 0;
}

/* Calls fn for each complete line of data that parses as an object with a "key". */
typedef int (*line_fn)(void *user, const char *line, size_t len, const pkv_json *row, const char *key);

static int each_line(const char *data, size_t len, line_fn fn, void *user) {
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (data[i] != '\n') continue;
        pkv_json *row = pkv_json_parse(data + start, i - start);
        const char *key = pkv_json_get_str(row, "key", NULL);
        int rc = key ? fn(user, data + start, i - start + 1, row, key) : 0;
        pkv_json_free(row);
        if (rc) return rc;
        start = i + 1;
    }
    return 0;
}

static int add_key_line(void *user, const char *line, size_t len, const pkv_json *row, const char *key) {
    (void)line, (void)len, (void)row;
    return pkv_key_set_add(user, key);
}

int pkv_jsonl_load_keys(const char *path, pkv_key_set *keys, pkv_error *err) {
    char *data;
    size_t len;
    if (read_all(path, &data, &len, err)) return -1;
    int rc = data ? each_line(data, len, add_key_line, keys) : 0;
    free(data);
    return rc ? pkv_fail(err, PKV_ERR_NOMEM, "out of memory reading %s", path) : 0;
}

/* ---------------------------------------------------------------- checking a results file */

typedef struct {
    const char *key;
    uint64_t seed; /* the item's seed this plan gives the key */
} keyed_seed;

static int cmp_keyed(const void *a, const void *b) {
    return strcmp(((const keyed_seed *)a)->key, ((const keyed_seed *)b)->key);
}

typedef struct {
    const pkv_eval_run_id *run;
    keyed_seed *plan_keys;
    long n_plan;
    pkv_key_set *keys;
    pkv_jsonl_check_report *rep;
    pkv_error *err;
    const char *path;
    int line; /* 1-based, of the line being read */
} check_ctx;

static int check_line(check_ctx *c, const char *line, size_t len) {
    c->line++;
    pkv_json *row = pkv_json_parse(line, len);
    const char *key = pkv_json_get_str(row, "key", NULL);
    int rc = 0;
    keyed_seed probe = {key, 0}, *hit = NULL;
    if (!key) {
        if (c->rep->corrupt++ == 0) c->rep->first_corrupt = c->line;
    } else if (!(hit = bsearch(&probe, c->plan_keys, (size_t)c->n_plan, sizeof *hit, cmp_keyed))) {
        if (c->rep->outside++ == 0) {
            c->rep->first_outside = c->line;
            snprintf(c->rep->first_outside_key, sizeof c->rep->first_outside_key, "%s", key);
        }
    } else {
        const char *model = pkv_json_get_str(row, "model", NULL), *seed = pkv_json_get_str(row, "seed", "");
        const pkv_json *chat = pkv_json_get(row, "chat");
        char want_seed[24], why[256] = "";
        snprintf(want_seed, sizeof want_seed, "%016llx", (unsigned long long)hit->seed);
        if (model && strcmp(model, c->run->model))
            snprintf(why, sizeof why, "model '%.60s' where this run's is '%.60s'", model, c->run->model);
        else if (chat && chat->type == PKV_JSON_BOOL && (chat->num != 0) != c->run->chat)
            snprintf(why, sizeof why, "the chat format %s where this run has it %s", chat->num != 0 ? "on" : "off",
                     c->run->chat ? "on" : "off");
        else if (strcmp(seed, want_seed))
            snprintf(why, sizeof why, "item seed '%.20s' where this run's is '%s' (another --seed)", seed, want_seed);
        if (why[0]) {
            rc = pkv_fail(c->err, PKV_ERR_FORMAT,
                          "%s line %d (%.160s) is from another run: %s (remove the line, or --force to start over)",
                          c->path, c->line, key, why);
        } else if (pkv_key_set_add(c->keys, key)) {
            rc = pkv_fail(c->err, PKV_ERR_NOMEM, "out of memory reading %s", c->path);
        }
    }
    pkv_json_free(row);
    return rc;
}

int pkv_jsonl_check(const char *path, const pkv_eval_plan *plan, const pkv_eval_run_id *run, pkv_key_set *keys,
                    pkv_jsonl_check_report *rep, pkv_error *err) {
    memset(rep, 0, sizeof *rep);
    char *data;
    size_t len;
    if (read_all(path, &data, &len, err)) return -1;
    if (!data) return 0;
    int n_units;
    pkv_eval_unit *units = pkv_eval_plan_units(plan, &n_units);
    long n = units ? (long)n_units * plan->n_modes * plan->n_configs : 0;
    keyed_seed *pk = units ? malloc((size_t)(n > 0 ? n : 1) * sizeof *pk) : NULL;
    char *storage = pk ? malloc((size_t)(n > 0 ? n : 1) * 512) : NULL;
    int rc = 0;
    if (!storage) {
        rc = pkv_fail(err, PKV_ERR_NOMEM, "out of memory checking %s", path);
        goto out;
    }
    long k = 0;
    for (int u = 0; u < n_units; u++) {
        pkv_eval_spec spec = pkv_eval_unit_spec(&units[u], plan->base_seed);
        uint64_t seed = pkv_eval_spec_seed(&spec);
        for (int m = 0; m < plan->n_modes; m++)
            for (int c = 0; c < plan->n_configs; c++, k++) {
                pkv_eval_row_key(&units[u], plan->modes[m], &plan->configs[c], storage + k * 512, 512);
                pk[k] = (keyed_seed){storage + k * 512, seed};
            }
    }
    qsort(pk, (size_t)n, sizeof *pk, cmp_keyed);
    check_ctx c = {run, pk, n, keys, rep, err, path, 0};
    size_t start = 0;
    for (size_t i = 0; i < len && rc == 0; i++) {
        if (data[i] != '\n') continue;
        rc = check_line(&c, data + start, i - start);
        start = i + 1;
    }
out:
    free(units);
    free(pk);
    free(storage);
    free(data);
    return rc;
}

/* Writes all of buf (retrying short writes). */
static int write_full(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

int pkv_jsonl_open(pkv_jsonl_writer *w, const char *path, pkv_error *err) {
    w->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (w->fd < 0) return pkv_fail(err, PKV_ERR_IO, "%s: cannot open for appending: %s", path, strerror(errno));
    return 0;
}

int pkv_jsonl_write(pkv_jsonl_writer *w, const char *line, pkv_error *err) {
    /* one write() of the whole line: a kill leaves either all of it or a
     * partial last line, which the next --resume drops */
    if (write_full(w->fd, line, strlen(line)) || fdatasync(w->fd))
        return pkv_fail(err, PKV_ERR_IO, "cannot write a result line: %s", strerror(errno));
    return 0;
}

void pkv_jsonl_close(pkv_jsonl_writer *w) {
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
}

typedef struct {
    pkv_key_set *keys;
    pkv_sbuf out;
} merge_ctx;

static int merge_line(void *user, const char *line, size_t len, const pkv_json *row, const char *key) {
    (void)row;
    merge_ctx *m = user;
    if (pkv_key_set_has(m->keys, key)) return 0;
    if (pkv_key_set_add(m->keys, key)) return -1;
    pkv_sbuf_add(&m->out, line, len);
    return m->out.failed ? -1 : 0;
}

int pkv_jsonl_merge(const char *dst, const char *src, pkv_key_set *keys, pkv_error *err) {
    char *data;
    size_t len;
    if (read_all(src, &data, &len, err)) return -1;
    if (!data) return 0;
    merge_ctx m = {keys, {0}};
    int rc = each_line(data, len, merge_line, &m);
    free(data);
    if (rc) {
        pkv_sbuf_free(&m.out);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory merging %s", src);
    }
    if (pkv_jsonl_truncate_partial(dst, err)) {
        pkv_sbuf_free(&m.out);
        return -1;
    }
    if (m.out.len) {
        pkv_jsonl_writer w;
        if (pkv_jsonl_open(&w, dst, err)) {
            pkv_sbuf_free(&m.out);
            return -1;
        }
        rc = write_full(w.fd, m.out.data, m.out.len) || fdatasync(w.fd);
        pkv_jsonl_close(&w);
        if (rc) {
            pkv_sbuf_free(&m.out);
            return pkv_fail(err, PKV_ERR_IO, "%s: cannot append merged lines: %s", dst, strerror(errno));
        }
    }
    pkv_sbuf_free(&m.out);
    if (unlink(src)) return pkv_fail(err, PKV_ERR_IO, "%s: cannot remove after merging: %s", src, strerror(errno));
    return 0;
}

/* ---------------------------------------------------------------- normalising */

typedef struct {
    char *key;
    long rank; /* canonical position; keys outside the plan come after */
    size_t off, len;
} line_ref;

typedef struct {
    const char *base;
    line_ref *lines;
    int n, cap;
    pkv_key_set seen;
} norm_ctx;

static int collect_line(void *user, const char *line, size_t len, const pkv_json *row, const char *key) {
    (void)row;
    norm_ctx *c = user;
    if (pkv_key_set_has(&c->seen, key)) return 0; /* keep the first copy of a key */
    if (pkv_key_set_add(&c->seen, key)) return -1;
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 1024;
        line_ref *l = realloc(c->lines, (size_t)cap * sizeof *l);
        if (!l) return -1;
        c->lines = l;
        c->cap = cap;
    }
    char *k = pkv_strdup(key);
    if (!k) return -1;
    c->lines[c->n++] = (line_ref){k, 0, (size_t)(line - c->base), len};
    return 0;
}

static int cmp_line(const void *a, const void *b) {
    const line_ref *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return strcmp(x->key, y->key);
}

typedef struct {
    const char *key;
    long rank;
} ranked_key;

static int cmp_ranked(const void *a, const void *b) {
    return strcmp(((const ranked_key *)a)->key, ((const ranked_key *)b)->key);
}

/* Canonical positions of every key of the plan, sorted by key for lookup. */
static ranked_key *plan_ranks(const pkv_eval_plan *plan, int *n_out, char **storage) {
    int n_units;
    pkv_eval_unit *units = pkv_eval_plan_units(plan, &n_units);
    if (!units) return NULL;
    long n = (long)n_units * plan->n_modes * plan->n_configs;
    ranked_key *rk = malloc((size_t)(n > 0 ? n : 1) * sizeof *rk);
    char *keys = malloc((size_t)(n > 0 ? n : 1) * 512);
    if (!rk || !keys) {
        free(units);
        free(rk);
        free(keys);
        return NULL;
    }
    long k = 0;
    for (int u = 0; u < n_units; u++)
        for (int m = 0; m < plan->n_modes; m++)
            for (int c = 0; c < plan->n_configs; c++, k++) {
                pkv_eval_row_key(&units[u], plan->modes[m], &plan->configs[c], keys + k * 512, 512);
                rk[k] = (ranked_key){keys + k * 512, k};
            }
    qsort(rk, (size_t)n, sizeof *rk, cmp_ranked);
    free(units);
    *n_out = (int)n;
    *storage = keys;
    return rk;
}

int pkv_jsonl_normalize(const char *path, const pkv_eval_plan *plan, pkv_error *err) {
    char *data;
    size_t len;
    if (read_all(path, &data, &len, err)) return -1;
    if (!data) return 0;
    norm_ctx c = {.base = data};
    int n_rank = 0;
    char *storage = NULL;
    ranked_key *ranks = plan_ranks(plan, &n_rank, &storage);
    int rc = ranks ? each_line(data, len, collect_line, &c) : -1;
    if (rc) {
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory normalising %s", path);
        goto out;
    }
    for (int i = 0; i < c.n; i++) {
        ranked_key probe = {c.lines[i].key, 0};
        ranked_key *hit = bsearch(&probe, ranks, (size_t)n_rank, sizeof *ranks, cmp_ranked);
        c.lines[i].rank = hit ? hit->rank : (long)n_rank; /* outside the plan: after, by key */
    }
    qsort(c.lines, (size_t)c.n, sizeof *c.lines, cmp_line);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = pkv_fail(err, PKV_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    for (int i = 0; i < c.n && rc == 0; i++)
        if (write_full(fd, data + c.lines[i].off, c.lines[i].len)) rc = -1;
    if (rc == 0 && fsync(fd)) rc = -1;
    close(fd);
    if (rc || rename(tmp, path)) {
        unlink(tmp);
        rc = pkv_fail(err, PKV_ERR_IO, "%s: cannot rewrite: %s", path, strerror(errno));
    }
out:
    for (int i = 0; i < c.n; i++) free(c.lines[i].key);
    free(c.lines);
    pkv_key_set_free(&c.seen);
    free(ranks);
    free(storage);
    free(data);
    return rc;
}
