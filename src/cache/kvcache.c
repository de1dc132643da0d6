#include "cache/kvcache.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"

/*
 * Each head's rows live in one page mapping of their own, not in the malloc
 * heap. A press shrinks each full-attention layer's rows right after that
 * layer's prefill, and the next layer grows its own. In glibc's heap the
 * freed pages would stay resident (after the first large free its mmap
 * threshold rises to 32 MB, so blocks of a few MB come from the heap, and
 * free chunks in its middle are not returned), and the peak RSS of a long
 * compressed prefill would grow with every layer as if nothing had been
 * pressed (docs/compression.md, "The longest prompt that fits a memory cap").
 * mremap grows a block without copying it and shrinks it by returning its
 * tail pages at once. Under AddressSanitizer the heap is used, so overruns of
 * the cache are still caught there.
 */
#if defined(__SANITIZE_ADDRESS__)
enum { ROWS_IN_HEAP = 1 };
#else
enum { ROWS_IN_HEAP = 0 };
#endif

static size_t page_round(size_t bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (bytes == 0) bytes = 1;
    return (bytes + page - 1) / page * page;
}

/* Resizes block p of old_bytes (NULL: none yet) to at least new_bytes; the
 * new size goes to *got. NULL on failure, p untouched. */
static void *block_resize(void *p, size_t old_bytes, size_t new_bytes, size_t *got) {
    if (ROWS_IN_HEAP) {
        *got = new_bytes ? new_bytes : 1;
        return realloc(p, *got);
    }
    *got = page_round(new_bytes);
    if (!p) {
        void *q = mmap(NULL, *got, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return q == MAP_FAILED ? NULL : q;
    }
    if (*got == old_bytes) return p;
    void *q = mremap(p, old_bytes, *got, MREMAP_MAYMOVE);
    return q == MAP_FAILED ? NULL : q;
}

static void block_free(void *p, size_t bytes) {
    if (!p) return;
    if (ROWS_IN_HEAP) free(p);
    else munmap(p, bytes);
}

int pkv_kvcache_init(pkv_kvcache *c, pkv_cache_type type, int n_layers, int n_kv_heads, int head_dim_k,
                     int head_dim_v, const int *sliding_window_per_layer, pkv_error *err) {
    memset(c, 0, sizeof *c);
    c->type = type;
    c->elem_bytes = type == PKV_CACHE_F32 ? 4 : 2;
    c->n_layers = n_layers;
    c->layers = calloc((size_t)n_layers, sizeof *c->layers);
    if (!c->layers) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the KV cache layer table");
    for (int l = 0; l < n_layers; l++) {
        pkv_kv_layer *L = &c->layers[l];
        L->n_heads = L->n_heads_kv = n_kv_heads;
        L->head_dim_k = head_dim_k;
        L->head_dim_v = head_dim_v;
        L->sliding_window = sliding_window_per_layer ? sliding_window_per_layer[l] : 0;
        L->heads = calloc((size_t)n_kv_heads, sizeof *L->heads);
        if (!L->heads) {
            pkv_kvcache_free(c);
            return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the KV cache head table");
        }
    }
    return 0;
}

static void free_head(pkv_kv_head *h) {
    block_free(h->k, h->bytes);
    memset(h, 0, sizeof *h);
}

void pkv_kvcache_free(pkv_kvcache *c) {
    if (!c->layers) return;
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->layers[l].heads) continue;
        for (int h = 0; h < c->layers[l].n_heads; h++) free_head(&c->layers[l].heads[h]);
        free(c->layers[l].heads);
    }
    free(c->layers);
    memset(c, 0, sizeof *c);
}

void pkv_kvcache_clear(pkv_kvcache *c) {
    for (int l = 0; l < c->n_layers; l++) {
        pkv_kv_layer *L = &c->layers[l];
        for (int h = 0; h < L->n_heads; h++) free_head(&L->heads[h]);
        /* a layer split into query heads goes back to the model's KV heads; the
         * freed heads are zeroed, so the first n_heads_kv of them serve as they are */
        L->n_heads = L->n_heads_kv;
    }
}

/* Resizes a head's block to exactly cap rows (cap >= n_rows). The block's
 * layout depends on cap, so the n_rows live rows of V and the positions move:
 * down before a shrink, up after a growth. A failed shrink keeps the larger
 * block (with the new layout); a failed growth changes nothing. */
static int resize_head(const pkv_kvcache *c, const pkv_kv_layer *L, pkv_kv_head *h, int cap, pkv_error *err) {
    const size_t kr = (size_t)L->head_dim_k * c->elem_bytes, vr = (size_t)L->head_dim_v * c->elem_bytes;
    const size_t live_v = (size_t)h->n_rows * vr, live_pos = (size_t)h->n_rows * sizeof(int32_t);
    const size_t v_old = (size_t)h->cap * kr, pos_old = v_old + (size_t)h->cap * vr;
    const size_t v_new = (size_t)cap * kr, pos_new = v_new + (size_t)cap * vr;
    const size_t need = pos_new + (size_t)cap * sizeof(int32_t);
    char *base = h->k;
    if (base && cap < h->cap) {
        memmove(base + v_new, base + v_old, live_v);
        memmove(base + pos_new, base + pos_old, live_pos);
        h->cap = cap;
        h->v = base + v_new;
        h->pos = (int32_t *)(base + pos_new);
    }
    size_t got;
    char *nb = block_resize(base, h->bytes, need, &got);
    if (!nb) {
        if (base && cap <= h->cap) return 0; /* the shrink's layout is in place; the pages stay */
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory growing the KV cache to %d rows", cap);
    }
    if (cap > h->cap && nb) {
        memmove(nb + pos_new, nb + pos_old, live_pos); /* positions first: V's new room may overlap them */
        memmove(nb + v_new, nb + v_old, live_v);
    }
    h->k = nb;
    h->bytes = got;
    h->cap = cap;
    h->v = nb + v_new;
    h->pos = (int32_t *)(nb + pos_new);
    return 0;
}

int pkv_kvcache_copy(pkv_kvcache *dst, const pkv_kvcache *src, pkv_error *err) {
    if (dst->n_layers != src->n_layers || dst->type != src->type)
        return pkv_fail(err, PKV_ERR_ARG, "KV caches of different shapes (%d/%d layers, types %d/%d) cannot be copied",
                        dst->n_layers, src->n_layers, (int)dst->type, (int)src->type);
    pkv_kvcache_clear(dst);
    for (int l = 0; l < src->n_layers; l++) {
        const pkv_kv_layer *S = &src->layers[l];
        pkv_kv_layer *D = &dst->layers[l];
        if (S->n_heads != D->n_heads) {
            /* the source was split into query heads: give dst as many head slots */
            pkv_kv_head *heads = calloc((size_t)S->n_heads, sizeof *heads);
            if (!heads) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory copying the KV cache");
            free(D->heads);
            D->heads = heads;
            D->n_heads = S->n_heads;
        }
        size_t kb = (size_t)S->head_dim_k * src->elem_bytes, vb = (size_t)S->head_dim_v * src->elem_bytes;
        for (int h = 0; h < S->n_heads; h++) {
            const pkv_kv_head *sh = &S->heads[h];
            pkv_kv_head *dh = &D->heads[h];
            if (resize_head(dst, D, dh, sh->n_rows + 16, err)) return -1;
            memcpy(dh->k, sh->k, (size_t)sh->n_rows * kb);
            memcpy(dh->v, sh->v, (size_t)sh->n_rows * vb);
            memcpy(dh->pos, sh->pos, (size_t)sh->n_rows * sizeof *sh->pos);
            dh->n_rows = sh->n_rows;
        }
    }
    return 0;
}

int pkv_kvcache_set_n_heads(pkv_kvcache *c, int layer, int n_heads, pkv_error *err) {
    pkv_kv_layer *L = &c->layers[layer];
    for (int h = 0; h < L->n_heads; h++)
        if (L->heads[h].n_rows || L->heads[h].k)
            return pkv_fail(err, PKV_ERR_INTERNAL, "layer %d: heads are set on a cleared cache only", layer);
    if (n_heads == L->n_heads) return 0;
    if (n_heads < L->n_heads_kv)
        return pkv_fail(err, PKV_ERR_INTERNAL, "layer %d: %d heads, fewer than the model's %d", layer, n_heads,
                        L->n_heads_kv);
    pkv_kv_head *heads = calloc((size_t)n_heads, sizeof *heads);
    if (!heads) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for layer %d's %d heads", layer, n_heads);
    free(L->heads);
    L->heads = heads;
    L->n_heads = n_heads;
    return 0;
}

int pkv_kvcache_put_rows(pkv_kvcache *c, int layer, int head, int n_rows, const void *k, const void *v, const void *pos,
                         pkv_error *err) {
    pkv_kv_layer *L = &c->layers[layer];
    pkv_kv_head *h = &L->heads[head];
    if (h->n_rows) return pkv_fail(err, PKV_ERR_INTERNAL, "layer %d head %d: rows are put into an empty head", layer, head);
    if (resize_head(c, L, h, n_rows + 16, err)) return -1; /* 16 spare rows, as a copy has */
    memcpy(h->k, k, (size_t)n_rows * L->head_dim_k * c->elem_bytes);
    memcpy(h->v, v, (size_t)n_rows * L->head_dim_v * c->elem_bytes);
    memcpy(h->pos, pos, (size_t)n_rows * sizeof *h->pos); /* a little-endian host (docs/engine.md §1) */
    h->n_rows = n_rows;
    return 0;
}

int pkv_kvcache_reserve(pkv_kvcache *c, int layer, int n_more, pkv_error *err) {
    pkv_kv_layer *L = &c->layers[layer];
    for (int hi = 0; hi < L->n_heads; hi++) {
        pkv_kv_head *h = &L->heads[hi];
        if (h->n_rows + n_more <= h->cap) continue;
        /* grow by half again so a decode loop reallocates O(log n) times */
        int cap = h->n_rows + n_more;
        int grown = h->cap + h->cap / 2 + 16;
        if (grown > cap) cap = grown;
        if (resize_head(c, L, h, cap, err)) return -1;
    }
    return 0;
}

void pkv_kvcache_append(pkv_kvcache *c, const pkv_kernels *kern, int layer, const float *k, const float *v,
                        const int32_t *pos, int n) {
    pkv_kv_layer *L = &c->layers[layer];
    int dk = L->head_dim_k, dv = L->head_dim_v;
    /* a layer split per query head (pkv_kvcache_split_heads) holds group heads
     * per KV head: each gets its KV head's new row */
    int group = L->n_heads / L->n_heads_kv;
    for (int hi = 0; hi < L->n_heads; hi++) {
        pkv_kv_head *h = &L->heads[hi];
        int src = hi / group;
        for (int t = 0; t < n; t++) {
            const float *ks = k + ((int64_t)t * L->n_heads_kv + src) * dk;
            const float *vs = v + ((int64_t)t * L->n_heads_kv + src) * dv;
            int row = h->n_rows + t;
            if (c->type == PKV_CACHE_F32) {
                memcpy((float *)h->k + (int64_t)row * dk, ks, (size_t)dk * sizeof(float));
                memcpy((float *)h->v + (int64_t)row * dv, vs, (size_t)dv * sizeof(float));
            } else {
                kern->f32_to_f16(ks, (uint16_t *)h->k + (int64_t)row * dk, dk);
                kern->f32_to_f16(vs, (uint16_t *)h->v + (int64_t)row * dv, dv);
            }
            h->pos[row] = pos[t];
        }
        h->n_rows += n;
    }
}

int pkv_kvcache_keep_rows(pkv_kvcache *c, int layer, int head, const int32_t *rows, int n_keep, int spare,
                          pkv_error *err) {
    pkv_kv_layer *L = &c->layers[layer];
    pkv_kv_head *h = &L->heads[head];
    size_t kb = (size_t)L->head_dim_k * c->elem_bytes, vb = (size_t)L->head_dim_v * c->elem_bytes;
    for (int i = 0; i < n_keep; i++) {
        int r = rows[i];
        if (r < 0 || r >= h->n_rows || (i > 0 && r <= rows[i - 1]))
            return pkv_fail(err, PKV_ERR_INTERNAL, "layer %d head %d: kept row %d is out of order or range", layer,
                            head, r);
        if (r == i) continue;
        /* r > i always (strictly increasing), so moving down never overwrites a row still to be read */
        memmove((char *)h->k + i * kb, (char *)h->k + (size_t)r * kb, kb);
        memmove((char *)h->v + i * vb, (char *)h->v + (size_t)r * vb, vb);
        h->pos[i] = h->pos[r];
    }
    h->n_rows = n_keep;
    /* shrink: the memory saved by the press must really be returned */
    return resize_head(c, L, h, n_keep + spare, err);
}

int pkv_kvcache_split_heads(pkv_kvcache *c, int layer, int n_new_heads, const int32_t *const *rows,
                            const int *n_keep, int spare, pkv_error *err) {
    pkv_kv_layer *L = &c->layers[layer];
    if (n_new_heads % L->n_heads != 0)
        return pkv_fail(err, PKV_ERR_INTERNAL, "layer %d: %d heads cannot split into %d", layer, L->n_heads,
                        n_new_heads);
    int group = n_new_heads / L->n_heads;
    pkv_kv_head *heads = calloc((size_t)n_new_heads, sizeof *heads);
    if (!heads) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory splitting layer %d into query heads", layer);
    size_t kb = (size_t)L->head_dim_k * c->elem_bytes, vb = (size_t)L->head_dim_v * c->elem_bytes;
    for (int s = 0; s < n_new_heads; s++) {
        const pkv_kv_head *src = &L->heads[s / group];
        pkv_kv_head *dst = &heads[s];
        if (resize_head(c, L, dst, n_keep[s] + spare, err)) {
            for (int i = 0; i <= s; i++) free_head(&heads[i]);
            free(heads);
            return -1;
        }
        for (int i = 0; i < n_keep[s]; i++) {
            int r = rows[s][i];
            memcpy((char *)dst->k + i * kb, (const char *)src->k + (size_t)r * kb, kb);
            memcpy((char *)dst->v + i * vb, (const char *)src->v + (size_t)r * vb, vb);
            dst->pos[i] = src->pos[r];
        }
        dst->n_rows = n_keep[s];
    }
    for (int h = 0; h < L->n_heads; h++) free_head(&L->heads[h]);
    free(L->heads);
    L->heads = heads;
    L->n_heads = n_new_heads;
    return 0;
}

void pkv_kvcache_trim_window(pkv_kvcache *c, int layer, int next_pos) {
    pkv_kv_layer *L = &c->layers[layer];
    if (L->sliding_window <= 0) return;
    int oldest_visible = next_pos - L->sliding_window + 1;
    for (int hi = 0; hi < L->n_heads; hi++) {
        pkv_kv_head *h = &L->heads[hi];
        int dead = 0;
        while (dead < h->n_rows && h->pos[dead] < oldest_visible) dead++;
        if (dead == 0 || dead < h->n_rows - dead) continue;
        size_t kb = (size_t)L->head_dim_k * c->elem_bytes, vb = (size_t)L->head_dim_v * c->elem_bytes;
        int live = h->n_rows - dead;
        memmove(h->k, (char *)h->k + (size_t)dead * kb, (size_t)live * kb);
        memmove(h->v, (char *)h->v + (size_t)dead * vb, (size_t)live * vb);
        memmove(h->pos, h->pos + dead, (size_t)live * sizeof *h->pos);
        h->n_rows = live;
        /* after a long prefill the arrays are far larger than the window: give the memory back */
        int want = live + L->sliding_window + 16;
        if (h->cap > 2 * want) resize_head(c, L, h, want, NULL); /* a failed shrink keeps the old arrays */
    }
}

static void read_rows(const pkv_kvcache *c, const pkv_kernels *kern, const void *src, int n_rows, int dim,
                      float *dst) {
    if (c->type == PKV_CACHE_F32) memcpy(dst, src, (size_t)n_rows * dim * sizeof(float));
    else kern->f16_to_f32(src, dst, (int64_t)n_rows * dim);
}

void pkv_kvcache_read_k(const pkv_kvcache *c, const pkv_kernels *kern, int layer, int head, float *dst) {
    const pkv_kv_layer *L = &c->layers[layer];
    read_rows(c, kern, L->heads[head].k, L->heads[head].n_rows, L->head_dim_k, dst);
}

void pkv_kvcache_read_v(const pkv_kvcache *c, const pkv_kernels *kern, int layer, int head, float *dst) {
    const pkv_kv_layer *L = &c->layers[layer];
    read_rows(c, kern, L->heads[head].v, L->heads[head].n_rows, L->head_dim_v, dst);
}

uint64_t pkv_kvcache_row_bytes(const pkv_kvcache *c, int layer) {
    const pkv_kv_layer *L = &c->layers[layer];
    return (uint64_t)(L->head_dim_k + L->head_dim_v) * c->elem_bytes + sizeof(int32_t);
}

int64_t pkv_kvcache_layer_rows(const pkv_kvcache *c, int layer) {
    int64_t n = 0;
    for (int h = 0; h < c->layers[layer].n_heads; h++) n += c->layers[layer].heads[h].n_rows;
    return n;
}

uint64_t pkv_kvcache_alloc_bytes(const pkv_kvcache *c) {
    uint64_t total = 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int h = 0; h < c->layers[l].n_heads; h++)
            total += (uint64_t)c->layers[l].heads[h].cap * pkv_kvcache_row_bytes(c, l);
    return total;
}

uint64_t pkv_kvcache_bytes(const pkv_kvcache *c) {
    uint64_t total = 0;
    for (int l = 0; l < c->n_layers; l++) total += (uint64_t)pkv_kvcache_layer_rows(c, l) * pkv_kvcache_row_bytes(c, l);
    return total;
}
