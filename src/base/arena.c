#include "base/arena.h"

#include <stdlib.h>
#include <string.h>

struct pkv_arena_block {
    pkv_arena_block *next;
    size_t size, used;
    unsigned char *data;
};

enum { ARENA_ALIGN = 64, ARENA_MIN_BLOCK = 1 << 20 };

void *pkv_arena_alloc(pkv_arena *a, size_t bytes) {
    size_t need = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (need < bytes) return NULL; /* overflow */
    pkv_arena_block *b = a->blocks;
    if (!b || b->size - b->used < need) {
        /* look for a free block kept from before a reset */
        for (b = a->blocks; b; b = b->next)
            if (b->size - b->used >= need) break;
        if (!b) {
            size_t size = need > ARENA_MIN_BLOCK ? need : ARENA_MIN_BLOCK;
            b = malloc(sizeof *b);
            void *data = NULL;
            if (!b || posix_memalign(&data, ARENA_ALIGN, size) != 0) {
                free(b);
                return NULL;
            }
            b->data = data;
            b->size = size;
            b->used = 0;
            b->next = a->blocks;
            a->blocks = b;
        }
    }
    void *p = b->data + b->used;
    b->used += need;
    a->used_total += need;
    if (a->used_total > a->peak) a->peak = a->used_total;
    memset(p, 0, bytes);
    return p;
}

static void free_blocks(pkv_arena_block *b) {
    while (b) {
        pkv_arena_block *next = b->next;
        free(b->data);
        free(b);
        b = next;
    }
}

void pkv_arena_reset(pkv_arena *a) {
    /* Several blocks: replace them by one as large as the most used so far.
     * Blocks are first-fit and a large allocation gets a block of its own
     * size, so a cycle that allocates in another order than the last can
     * leave a second large block beside the first; one block of the peak
     * holds any cycle up to the peak (allocations are the same rounded
     * sizes) and nothing is kept beyond it. */
    if (a->blocks && a->blocks->next) {
        free_blocks(a->blocks);
        a->blocks = NULL;
        size_t size = a->peak > ARENA_MIN_BLOCK ? a->peak : ARENA_MIN_BLOCK;
        pkv_arena_block *b = malloc(sizeof *b);
        void *data = NULL;
        if (b && posix_memalign(&data, ARENA_ALIGN, size) == 0) {
            *b = (pkv_arena_block){.next = NULL, .size = size, .used = 0, .data = data};
            a->blocks = b;
        } else {
            free(b); /* out of memory: the next allocation makes a block again, or fails */
        }
    }
    for (pkv_arena_block *b = a->blocks; b; b = b->next) b->used = 0;
    a->used_total = 0;
}

size_t pkv_arena_held(const pkv_arena *a) {
    size_t n = 0;
    for (const pkv_arena_block *b = a->blocks; b; b = b->next) n += b->size;
    return n;
}

void pkv_arena_free(pkv_arena *a) {
    free_blocks(a->blocks);
    a->blocks = NULL;
    a->used_total = a->peak = 0;
}
