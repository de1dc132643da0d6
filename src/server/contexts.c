#include "contexts.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The label a saved context carries (docs/cache-file.md): which endpoint it serves. */
static const char *LABEL_CHAT = "promptkv-context chat", *LABEL_TEXT = "promptkv-context text";

void srv_store_init(srv_store *st, uint64_t mem_limit, const char *dir) {
    memset(st, 0, sizeof *st);
    pthread_mutex_init(&st->mu, NULL);
    st->mem_limit = mem_limit;
    st->dir = dir && dir[0] ? dir : NULL;
}

static void context_free(srv_context *c) {
    if (!c) return;
    pkv_session_free(c->session);
    free(c);
}

void srv_store_free(srv_store *st) {
    for (int i = 0; i < st->n; i++) context_free(st->items[i]);
    free(st->items);
    pthread_mutex_destroy(&st->mu);
    memset(st, 0, sizeof *st);
}

static void file_of(const srv_store *st, const char *id, char *path, size_t n) {
    snprintf(path, n, "%s/%s.pkvc", st->dir, id);
}

static bool valid_id(const char *id) {
    if (strncmp(id, "ctx-", 4) != 0 || strlen(id) != 28) return false;
    for (const char *p = id + 4; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
    return true;
}

static void new_id(char *out) {
    unsigned char b[12];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        struct timespec ts; /* no entropy source: the clock, which still differs per context */
        clock_gettime(CLOCK_REALTIME, &ts);
        memset(b, 0, sizeof b);
        memcpy(b, &ts, sizeof b < sizeof ts ? sizeof b : sizeof ts);
    }
    int n = snprintf(out, SRV_CTX_ID, "ctx-");
    for (size_t i = 0; i < sizeof b; i++) n += snprintf(out + n, SRV_CTX_ID - (size_t)n, "%02x", b[i]);
}

/* Rows, bytes and memory of the stored session; the full cache's counts
 * (sliding-window layers, never pressed, count the same in both). */
static void measure(srv_context *c) {
    const pkv_session *s = c->session;
    pkv_model_info info;
    pkv_model_get_info(pkv_session_model(s), &info);
    c->rows = c->rows_full = 0;
    uint64_t row_bytes = 0;
    for (int l = 0; l < pkv_session_n_layers(s); l++) {
        int64_t layer_rows = 0;
        for (int h = 0; h < pkv_session_n_heads(s, l); h++) layer_rows += pkv_session_head_rows(s, l, h);
        c->rows += layer_rows;
        c->rows_full += pkv_session_layer_is_full(s, l) ? (int64_t)info.n_head_kv * c->n_tokens : layer_rows;
    }
    c->bytes = pkv_session_cache_bytes(s);
    if (c->rows > 0) row_bytes = c->bytes / (uint64_t)c->rows;
    c->bytes_full = c->bytes + (uint64_t)(c->rows_full - c->rows) * row_bytes;
    c->mem = pkv_session_mem_bytes(s) + (uint64_t)c->n_tokens * sizeof(int32_t) + (uint64_t)info.n_vocab * sizeof(float);
}

/* ------------------------------------------------------------ the index (callers hold the mutex) */

static void unref_locked(srv_context *c) {
    if (--c->refs == 0) context_free(c);
}

/* Out of the index (its file removed when remove_file), the store's reference dropped. */
static void remove_locked(srv_store *st, int i, bool remove_file) {
    srv_context *c = st->items[i];
    st->items[i] = st->items[--st->n];
    st->stats.mem_used -= c->mem;
    if (remove_file && st->dir) {
        char path[1024];
        file_of(st, c->id, path, sizeof path);
        unlink(path);
    }
    unref_locked(c);
}

static int evict_lru_locked(srv_store *st) {
    int lru = -1;
    for (int i = 0; i < st->n; i++)
        if (lru < 0 || st->items[i]->last_used < st->items[lru]->last_used) lru = i;
    if (lru < 0) return -1;
    remove_locked(st, lru, true);
    st->stats.evicted++;
    return 0;
}

static int too_large(srv_error *e, uint64_t mem, uint64_t limit) {
    return srv_bad(e, "context_too_large", NULL,
                   "this context needs %llu bytes of the context store, more than its limit of %llu "
                   "(--ctx-mem; compress it more with kv_compression)",
                   (unsigned long long)mem, (unsigned long long)limit);
}

static int insert_locked(srv_store *st, srv_context *c, srv_error *e) {
    if (c->mem > st->mem_limit) {
        st->stats.refused_too_large++;
        return too_large(e, c->mem, st->mem_limit);
    }
    while (st->stats.mem_used + c->mem > st->mem_limit)
        if (evict_lru_locked(st)) break;
    if (st->n == st->cap) {
        int cap = st->cap ? 2 * st->cap : 16;
        srv_context **items = realloc(st->items, (size_t)cap * sizeof *items);
        if (!items) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory for the context index");
        st->items = items;
        st->cap = cap;
    }
    c->last_used = ++st->tick;
    c->refs = 1;
    st->items[st->n++] = c;
    st->stats.mem_used += c->mem;
    return 0;
}

/* ------------------------------------------------------------ adding, reloading */

int srv_store_add(srv_store *st, const pkv_session *src, bool chat, const char *press, double seconds,
                  pkv_session_opts opts, srv_context **out, srv_error *e) {
    *out = NULL;
    pkv_error err;
    srv_context *c = calloc(1, sizeof *c);
    opts.n_threads = 1; /* a stored session never computes: no thread pool */
    opts.keep_press_window = 0;
    opts.keep_attn_sums = false;
    if (!c || !(c->session = pkv_session_new((pkv_model *)pkv_session_model(src), &opts, &err)) ||
        pkv_session_copy(c->session, src, NULL, NULL, &err)) {
        context_free(c);
        return srv_fail(e, 500, "server_error", NULL, NULL, "storing the context: %s", c ? err.msg : "out of memory");
    }
    new_id(c->id);
    c->chat = chat;
    snprintf(c->press, sizeof c->press, "%s", press ? press : "none");
    c->n_tokens = pkv_session_n_pos(src);
    c->seconds = seconds;
    c->created = (long long)time(NULL);
    measure(c);
    if (c->mem > st->mem_limit) { /* before its file is written */
        pthread_mutex_lock(&st->mu);
        st->stats.refused_too_large++;
        pthread_mutex_unlock(&st->mu);
        uint64_t mem = c->mem;
        context_free(c);
        return too_large(e, mem, st->mem_limit);
    }
    if (st->dir) {
        char path[1024];
        file_of(st, c->id, path, sizeof path);
        if (pkv_session_save(c->session, path, c->press, chat ? LABEL_CHAT : LABEL_TEXT, &err)) {
            context_free(c);
            return srv_fail(e, 500, "server_error", NULL, NULL, "persisting the context under --ctx-dir: %s", err.msg);
        }
    }
    pthread_mutex_lock(&st->mu);
    int rc = insert_locked(st, c, e);
    if (rc == 0) {
        st->stats.created++;
        c->refs++; /* the caller's */
        *out = c;
    }
    pthread_mutex_unlock(&st->mu);
    if (rc) {
        if (st->dir) {
            char path[1024];
            file_of(st, c->id, path, sizeof path);
            unlink(path);
        }
        context_free(c);
    }
    return rc;
}

typedef struct {
    char id[SRV_CTX_ID];
    struct timespec mtime;
} found_file;

static int by_mtime(const void *a, const void *b) {
    const found_file *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->id, y->id);
}

int srv_store_reload(srv_store *st, pkv_model *model, const pkv_session_opts *opts_in, pkv_error *err) {
    if (!st->dir) return 0;
    DIR *d = opendir(st->dir);
    if (!d && errno == ENOENT && mkdir(st->dir, 0700) == 0) d = opendir(st->dir); /* a first start */
    if (!d) {
        snprintf(err->msg, sizeof err->msg, "--ctx-dir %s: cannot read or create it: %s", st->dir, strerror(errno));
        err->code = PKV_ERR_IO;
        return -1;
    }
    found_file *files = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len != 33 || strcmp(de->d_name + 28, ".pkvc") != 0) continue;
        found_file f = {{0}, {0, 0}};
        memcpy(f.id, de->d_name, 28);
        if (!valid_id(f.id)) continue;
        char path[1024];
        file_of(st, f.id, path, sizeof path);
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        f.mtime = sb.st_mtim;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            found_file *nf = realloc(files, (size_t)cap * sizeof *nf);
            if (!nf) break;
            files = nf;
        }
        files[n++] = f;
    }
    closedir(d);
    if (n) qsort(files, (size_t)n, sizeof *files, by_mtime);
    pkv_session_opts opts = *opts_in;
    opts.n_threads = 1;
    opts.keep_press_window = 0;
    opts.keep_attn_sums = false;
    int loaded = 0;
    for (int i = 0; i < n; i++) {
        char path[1024];
        file_of(st, files[i].id, path, sizeof path);
        pkv_error lerr;
        srv_error e;
        pkv_saved_cache_info *info = malloc(sizeof *info);
        srv_context *c = calloc(1, sizeof *c);
        if (!info || !c || !(c->session = pkv_session_new(model, &opts, &lerr)) ||
            pkv_session_load(c->session, path, info, &lerr)) {
            fprintf(stderr, "promptkv serve: --ctx-dir: not reloaded: %s\n", info && c ? lerr.msg : "out of memory");
            free(info);
            context_free(c);
            continue;
        }
        bool chat = !strcmp(info->label, LABEL_CHAT);
        if (!chat && strcmp(info->label, LABEL_TEXT) != 0) {
            fprintf(stderr, "promptkv serve: --ctx-dir: not reloaded: %s: not a stored context (label '%.60s')\n",
                    path, info->label);
            free(info);
            context_free(c);
            continue;
        }
        memcpy(c->id, files[i].id, sizeof c->id);
        c->chat = chat;
        snprintf(c->press, sizeof c->press, "%.511s", info->press);
        c->n_tokens = info->n_tokens;
        c->created = (long long)files[i].mtime.tv_sec;
        free(info);
        measure(c);
        pthread_mutex_lock(&st->mu);
        int rc = insert_locked(st, c, &e);
        if (rc == 0) st->stats.reloaded++;
        pthread_mutex_unlock(&st->mu);
        if (rc) {
            fprintf(stderr, "promptkv serve: --ctx-dir: not reloaded: %s: %s\n", path, e.message);
            context_free(c);
            continue;
        }
        loaded++;
    }
    free(files);
    return loaded;
}

/* ------------------------------------------------------------ lookups */

srv_context *srv_store_get(srv_store *st, const char *id) {
    srv_context *found = NULL;
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < st->n && !found; i++)
        if (!strcmp(st->items[i]->id, id)) found = st->items[i];
    if (found) {
        found->refs++;
        found->last_used = ++st->tick;
    }
    pthread_mutex_unlock(&st->mu);
    return found;
}

srv_context *srv_store_find_prefix(srv_store *st, const int32_t *tokens, int n, bool chat) {
    srv_context *best = NULL;
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < st->n; i++) {
        srv_context *c = st->items[i];
        if (c->chat != chat || c->n_tokens > n || (best && c->n_tokens <= best->n_tokens)) continue;
        int k;
        const int32_t *ct = pkv_session_tokens(c->session, &k);
        if (!memcmp(ct, tokens, (size_t)k * sizeof *ct)) best = c;
    }
    if (best) {
        best->refs++;
        best->last_used = ++st->tick;
    }
    pthread_mutex_unlock(&st->mu);
    return best;
}

void srv_store_release(srv_store *st, srv_context *c) {
    if (!c) return;
    pthread_mutex_lock(&st->mu);
    unref_locked(c);
    pthread_mutex_unlock(&st->mu);
}

void srv_store_count_use(srv_store *st, bool by_prefix, int tokens) {
    pthread_mutex_lock(&st->mu);
    if (by_prefix) st->stats.requests_by_prefix++;
    else st->stats.requests_by_id++;
    st->stats.tokens_reused += (uint64_t)tokens;
    pthread_mutex_unlock(&st->mu);
}

bool srv_store_delete(srv_store *st, const char *id) {
    pthread_mutex_lock(&st->mu);
    int i;
    for (i = 0; i < st->n; i++)
        if (!strcmp(st->items[i]->id, id)) break;
    bool found = i < st->n;
    if (found) {
        remove_locked(st, i, true);
        st->stats.deleted++;
    }
    pthread_mutex_unlock(&st->mu);
    return found;
}

static int by_recent_use(const void *a, const void *b) {
    const srv_context *x = *(srv_context *const *)a, *y = *(srv_context *const *)b;
    return x->last_used > y->last_used ? -1 : x->last_used < y->last_used;
}

int srv_store_list(srv_store *st, srv_context ***out) {
    pthread_mutex_lock(&st->mu);
    int n = st->n;
    srv_context **list = malloc((size_t)(n ? n : 1) * sizeof *list);
    if (list) {
        for (int i = 0; i < n; i++) {
            list[i] = st->items[i];
            list[i]->refs++;
        }
        qsort(list, (size_t)n, sizeof *list, by_recent_use);
    }
    pthread_mutex_unlock(&st->mu);
    *out = list;
    return list ? n : -1;
}

void srv_store_get_stats(srv_store *st, srv_store_stats *out) {
    pthread_mutex_lock(&st->mu);
    *out = st->stats;
    out->count = (uint64_t)st->n;
    out->mem_limit = st->mem_limit;
    pthread_mutex_unlock(&st->mu);
}
