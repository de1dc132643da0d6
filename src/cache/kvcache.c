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

/* ------------------------------------------------------------ cache types */

static const char *const TYPE_NAMES[PKV_CACHE_TYPE_COUNT] = {
    [PKV_CACHE_F16] = "f16", [PKV_CACHE_F32] = "f32", [PKV_CACHE_Q8_0] = "q8_0", [PKV_CACHE_Q4_0] = "q4_0"};

const char *pkv_cache_type_name(pkv_cache_type t) {
    return (unsigned)t < PKV_CACHE_TYPE_COUNT ? TYPE_NAMES[t] : "?";
}

bool pkv_cache_type_parse(const char *s, pkv_cache_type *out) {
    for (int t = 0; t < PKV_CACHE_TYPE_COUNT; t++)
        if (s && !strcmp(s, TYPE_NAMES[t])) {
            *out = (pkv_cache_type)t;
            return true;
        }
    return false;
}

pkv_type pkv_kvcache_kern_type(pkv_cache_type t) {
    switch (t) {
    case PKV_CACHE_F32: return PKV_TYPE_F32;
    case PKV_CACHE_Q8_0: return PKV_TYPE_Q8_0;
    case PKV_CACHE_Q4_0: return PKV_TYPE_Q4_0;
    default: return PKV_TYPE_F16;
    }
}

uint64_t pkv_cache_row_bytes(pkv_cache_type t, int n) {
    if ((unsigned)t >= PKV_CACHE_TYPE_COUNT || n < 0) return 0;
    return pkv_row_bytes(pkv_kvcache_kern_type(t), n);
}

/* The row size of one head of a layer in type t, or an error naming the layer. */
static int row_size(pkv_cache_type t, int layer, int dim, const char *what, size_t *out, pkv_error *err) {
    if ((unsigned)t >= PKV_CACHE_TYPE_COUNT)
        return pkv_fail(err, PKV_ERR_ARG, "unknown cache type %d for %s", (int)t, what);
    *out = (size_t)pkv_cache_row_bytes(t, dim);
    if (*out == 0 || dim <= 0)
        return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                        "layer %d: %s head size %d is not a multiple of 32, the block of %s cache rows (f16 and f32 "
                        "rows take any size)", layer, what, dim, pkv_cache_type_name(t));
    return 0;
}

/* ------------------------------------------------------------ the cache */

int pkv_kvcache_init(pkv_kvcache *c, pkv_cache_type type_k, pkv_cache_type type_v, int n_layers, int n_kv_heads,
                     int head_dim_k, int head_dim_v, const int *sliding_window_per_layer, pkv_error *err) {
    memset(c, 0, sizeof *c);
    c->type_k = type_k;
    c->type_v = type_v;
    c->kern_k = pkv_kvcache_kern_type(type_k);
    c->kern_v = pkv_kvcache_kern_type(type_v);
    if (n_layers < 0 || n_kv_heads < 0)
        return pkv_fail(err, PKV_ERR_INTERNAL, "a KV cache of %d layers and %d heads", n_layers, n_kv_heads);
    size_t k_row = 0, v_row = 0;
    for (int l = 0; l < n_layers; l++)
        if (row_size(type_k, l, head_dim_k, "key", &k_row, err) ||
            row_size(type_v, l, head_dim_v, "value", &v_row, err))
            return -1;
    c->n_layers = n_layers;
    c->layers = calloc((size_t)n_layers, sizeof *c->layers);
    if (!c->layers) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the KV cache layer table");
    for (int l = 0; l < n_layers; l++) {
        pkv_kv_layer *L = &c->layers[l];
        L->n_heads = L->n_heads_kv = n_kv_heads;
        L->head_dim_k = head_dim_k;
        L->head_dim_v = head_dim_v;
        L->k_row = k_row;
        L->v_row = v_row;
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

/* Where a block of cap rows puts the values and the positions, and its
 * size. A row of Q8_0/Q4_0 blocks is a multiple of 2 bytes only (34 or 18
 * per block), so both offsets are rounded up to 8: values may be f32 after
 * quantised keys, and positions are int32. */
static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

static void head_layout(const pkv_kv_layer *L, int cap, size_t *v_off, size_t *pos_off, size_t *end) {
    *v_off = align8((size_t)cap * L->k_row);
    *pos_off = align8(*v_off + (size_t)cap * L->v_row);
    *end = *pos_off + (size_t)cap * sizeof(int32_t);
}

/* Resizes a head's block to exactly cap rows (cap >= n_rows). The block's
 * layout depends on cap, so the n_rows live rows of V and the positions move:
 * down before a shrink, up after a growth. A failed shrink keeps the larger
 * block (with the new layout); a failed growth changes nothing. */
static int resize_head(const pkv_kv_layer *L, pkv_kv_head *h, int cap, pkv_error *err) {
    const size_t live_v = (size_t)h->n_rows * L->v_row, live_pos = (size_t)h->n_rows * sizeof(int32_t);
    size_t v_old, pos_old, end_old, v_new, pos_new, need;
    head_layout(L, h->cap, &v_old, &pos_old, &end_old);
    head_layout(L, cap, &v_new, &pos_new, &need);
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
    if (dst->n_layers != src->n_layers || dst->type_k != src->type_k || dst->type_v != src->type_v)
        return pkv_fail(err, PKV_ERR_ARG,
                        "KV caches of different shapes (%d/%d layers, types %s/%s and %s/%s) cannot be copied",
                        dst->n_layers, src->n_layers, pkv_cache_type_name(dst->type_k),
                        pkv_cache_type_name(dst->type_v), pkv_cache_type_name(src->type_k),
                        pkv_cache_type_name(src->type_v));
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
        const size_t kb = S->k_row, vb = S->v_row;
        for (int h = 0; h < S->n_heads; h++) {
            const pkv_kv_head *sh = &S->heads[h];
            pkv_kv_head *dh = &D->heads[h];
            if (resize_head(D, dh, sh->n_rows + 16, err)) return -1;
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
    if (resize_head(L, h, n_rows + 16, err)) return -1; /* 16 spare rows, as a copy has */
    memcpy(h->k, k, (size_t)n_rows * L->k_row);
    memcpy(h->v, v, (size_t)n_rows * L->v_row);
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
        if (resize_head(L, h, cap, err)) return -1;
    }
    return 0;
}

/* One row of n floats into the cache's type t. */
static void put_row(const pkv_kernels *kern, pkv_cache_type t, const float *src, void *dst, int n) {
    switch (t) {
    case PKV_CACHE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    /* as llama.cpp writes a quantised cache row (the CPU type's from_float):
     * Q8_0 with the activation quantiser, the x86 rule of docs/engine.md
     * §2.3 (every level of the table gives the same bits); Q4_0 with the
     * reference round-to-nearest quantiser (quant.c), a scalar function */
    case PKV_CACHE_Q8_0: kern->quantize[PKV_TYPE_Q8_0](src, dst, n); break;
    case PKV_CACHE_Q4_0: pkv_quantize_row_ref(PKV_TYPE_Q4_0, src, dst, n); break;
    default: kern->f32_to_f16(src, dst, n); break;
    }
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
            put_row(kern, c->type_k, ks, (char *)h->k + (size_t)row * L->k_row, dk);
            put_row(kern, c->type_v, vs, (char *)h->v + (size_t)row * L->v_row, dv);
            h->pos[row] = pos[t];
        }
        h->n_rows += n;
    }
}

int pkv_kvcache_keep_rows(pkv_kvcache *c, int layer, int head, const int32_t *rows, int n_keep, int spare,
                          pkv_error *err) {
    pkv_kv_layer *L = &c->layers[layer];
    pkv_kv_head *h = &L->heads[head];
    const size_t kb = L->k_row, vb = L->v_row; /* compaction moves whole rows, whatever their type */
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
    return resize_head(L, h, n_keep + spare, err);
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
    const size_t kb = L->k_row, vb = L->v_row;
    for (int s = 0; s < n_new_heads; s++) {
        const pkv_kv_head *src = &L->heads[s / group];
        pkv_kv_head *dst = &heads[s];
        if (resize_head(L, dst, n_keep[s] + spare, err)) {
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
        const size_t kb = L->k_row, vb = L->v_row;
        int live = h->n_rows - dead;
        memmove(h->k, (char *)h->k + (size_t)dead * kb, (size_t)live * kb);
        memmove(h->v, (char *)h->v + (size_t)dead * vb, (size_t)live * vb);
        memmove(h->pos, h->pos + dead, (size_t)live * sizeof *h->pos);
        h->n_rows = live;
        /* after a long prefill the arrays are far larger than the window: give the memory back */
        int want = live + L->sliding_window + 16;
        if (h->cap > 2 * want) resize_head(L, h, want, NULL); /* a failed shrink keeps the old arrays */
    }
}

void pkv_kvcache_read_k(const pkv_kvcache *c, const pkv_kernels *kern, int layer, int head, float *dst) {
    const pkv_kv_layer *L = &c->layers[layer];
    kern->dequant[c->kern_k](L->heads[head].k, dst, (int64_t)L->heads[head].n_rows * L->head_dim_k);
}

void pkv_kvcache_read_v(const pkv_kvcache *c, const pkv_kernels *kern, int layer, int head, float *dst) {
    const pkv_kv_layer *L = &c->layers[layer];
    kern->dequant[c->kern_v](L->heads[head].v, dst, (int64_t)L->heads[head].n_rows * L->head_dim_v);
}

uint64_t pkv_kvcache_row_bytes(const pkv_kvcache *c, int layer) {
    const pkv_kv_layer *L = &c->layers[layer];
    return (uint64_t)L->k_row + L->v_row + sizeof(int32_t);
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
