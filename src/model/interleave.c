/*
 * The model's matmul weights interleaved by 8 rows at load (kernels/repack.h,
 * docs/engine.md §2.5), where the kernel table has the decode kernel for
 * their type: the GGUF rows are copied once into the interleaved layout and
 * the file's pages they came from are released, so the process holds the
 * weights once, as before.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"
#include "kernels/repack.h"
#include "model/model.h"

enum { MAX_WEIGHTS_PER_LAYER = 7, SLICE_BYTES = 8 << 20 };

/* The tensors a matmul reads whole: every layer's projections, and the
 * output matrix. An untied token embedding is only ever read a row at a
 * time, so it keeps the file's layout. */
static int matmul_weights(pkv_model *m, pkv_tensor **out) {
    int n = 0;
    out[n++] = &m->output;
    for (int il = 0; il < m->hp.n_layer; il++) {
        pkv_layer_weights *L = &m->layers[il];
        pkv_tensor *const w[MAX_WEIGHTS_PER_LAYER] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < MAX_WEIGHTS_PER_LAYER; i++) out[n++] = w[i];
    }
    return n;
}

/* A tensor's bytes in the interleaved block, each tensor 64-byte aligned. */
static uint64_t padded_bytes(const pkv_tensor *t) { return (t->nbytes + 63) & ~(uint64_t)63; }

static bool can_interleave(const pkv_model *m, const pkv_tensor *t) {
    return pkv_tensor_present(t) && m->kern->matvec_x8[t->type] && pkv_x8_supported(t->type, t->ne[0], t->ne[1]);
}

/* Drops the file's pages under [p, p + n) from the process (they are read
 * again from the file if anything touches them). */
static void release_file_pages(const pkv_model *m, const void *p, uint64_t n) {
    if (!m->file.mapped) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + n) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

int pkv_model_interleave(pkv_model *m, pkv_error *err) {
    pkv_tensor **w = malloc(sizeof *w * (size_t)(1 + MAX_WEIGHTS_PER_LAYER * m->hp.n_layer));
    if (!w) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the weight list");
    const int n = matmul_weights(m, w);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        if (can_interleave(m, w[i])) total += padded_bytes(w[i]);
    if (total == 0) {
        free(w);
        return 0;
    }
    /* anonymous pages of their own, as huge pages where the system allows:
     * fewer page faults at load, fewer TLB misses while decode streams them */
    void *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        free(w);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory interleaving %llu bytes of weights",
                        (unsigned long long)total);
    }
    madvise(map, total, MADV_HUGEPAGE);
    m->x8_data = map;
    m->x8_bytes = total;
    uint8_t *dst = map;
    const bool tied = m->output.data == m->tok_embd.data;
    for (int i = 0; i < n; i++) {
        pkv_tensor *t = w[i];
        if (!can_interleave(m, t)) continue;
        /* a slice at a time, each slice's file pages released once copied:
         * loading never holds a whole large matrix twice (the peak stays the
         * running process's, which the memory-cap benchmark measures) */
        int64_t slice = SLICE_BYTES / (PKV_X8_RUN_ROWS * t->row_bytes) * PKV_X8_RUN_ROWS; /* whole runs */
        if (slice == 0) slice = PKV_X8_RUN_ROWS;
        for (int64_t r0 = 0; r0 < t->ne[1]; r0 += slice) {
            const int64_t n_rows = t->ne[1] - r0 < slice ? t->ne[1] - r0 : slice;
            const uint8_t *src = (const uint8_t *)t->data + (uint64_t)r0 * t->row_bytes;
            pkv_x8_repack(t->type, src, t->row_bytes, t->ne[0], n_rows, dst + (uint64_t)r0 * t->row_bytes);
            release_file_pages(m, src, (uint64_t)n_rows * t->row_bytes);
        }
        release_file_pages(m, t->data, t->nbytes); /* the pages that straddled two slices */
        t->data = dst;
        t->x8 = true;
        dst += padded_bytes(t);
    }
    if (tied) m->tok_embd = m->output; /* the lookup reads the same interleaved rows (pkv_get_row) */
    free(w);
    return 0;
}

void pkv_model_free_interleaved(pkv_model *m) {
    if (m->x8_data) munmap(m->x8_data, m->x8_bytes);
    m->x8_data = NULL;
}
