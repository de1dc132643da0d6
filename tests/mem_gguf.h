/*
 * A GGUF written to memory and opened from there, for tests that build a
 * small file with gguf_writer (a vocabulary, a chat template) instead of
 * keeping one under tests/fixtures/.
 */
#ifndef PKV_TEST_MEM_GGUF_H
#define PKV_TEST_MEM_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"

typedef struct {
    uint8_t *data;
    size_t size;
    gguf_file file;
} mem_gguf;

/* Writes w to memory and opens it; frees w. On failure prints the error. */
bool open_written(gguf_writer *w, mem_gguf *m);
void close_written(mem_gguf *m);

#endif
