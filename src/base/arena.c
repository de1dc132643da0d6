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

void pkv_arena_reset(pkv_arena *a) {
    for (pkv_arena_block *b = a->blocks; b; b = b->next) b->used = 0;
    a->used_total = 0;
}

void pkv_arena_free(pkv_arena *a) {
    pkv_arena_block *b = a->blocks;
    while (b) {
        pkv_arena_block *next = b->next;
        free(b->data);
        free(b);
        b = next;
    }
    a->blocks = NULL;
    a->used_total = a->peak = 0;
}
