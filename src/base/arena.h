/* A bump allocator for per-layer scratch (presses): allocations are freed
 * all at once by pkv_arena_reset, which keeps one block as large as the most
 * ever used for the next cycle. */
#ifndef PKV_ARENA_H
#define PKV_ARENA_H

#include <stddef.h>

typedef struct pkv_arena_block pkv_arena_block;

typedef struct {
    pkv_arena_block *blocks; /* newest first */
    size_t used_total;
    size_t peak;
} pkv_arena;

/* 64-byte aligned, zero-filled; NULL when memory runs out. */
void *pkv_arena_alloc(pkv_arena *a, size_t bytes);
void pkv_arena_reset(pkv_arena *a);
/* Bytes of the blocks the arena holds (what it keeps resident). */
size_t pkv_arena_held(const pkv_arena *a);
void pkv_arena_free(pkv_arena *a);

#endif
