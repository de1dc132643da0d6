/* A spill file: an unnamed file on disk holding what a long computation keeps
 * between passes but need not hold in memory (a long prefill's residual
 * stream between layers, docs/compression.md "The residual stream on disk").
 * It is written and read a chunk at a time, in order; each chunk written is
 * handed to the disk and dropped from the page cache once the next one is
 * written, so neither the process nor the kernel's cache holds more than a
 * few chunks of it; each chunk read asks for the next one ahead. The file has no name (O_TMPFILE, or a name removed as soon as
 * it is made): nothing is left behind when the process ends, however it ends. */
#ifndef PKV_SPILL_H
#define PKV_SPILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "promptkv.h"

/* A zeroed pkv_spill is a closed one. */
typedef struct {
    bool open;
    int fd;
    const char *dir;             /* for error messages; the caller's string */
    int64_t last_off, last_len;  /* the chunk written last, dropped from the cache when the next one is */
    uint64_t bytes_written;      /* what the file has taken in, for reports */
} pkv_spill;

/* A directory a spill file can go in: exists, is writable, and is not held in
 * memory (tmpfs, ramfs: spilling there would save nothing). */
int pkv_spill_check_dir(const char *dir, pkv_error *err);

/* A new empty file in dir (f closed first; still closed after a failure). */
int pkv_spill_open(pkv_spill *f, const char *dir, pkv_error *err);

/* len bytes at offset off; a short write (a full disk) is an error naming the directory. */
int pkv_spill_write(pkv_spill *f, const void *buf, size_t len, int64_t off, pkv_error *err);
int pkv_spill_read(pkv_spill *f, void *buf, size_t len, int64_t off, pkv_error *err);

/* Closes the file (its blocks are freed: it has no name). Safe on a closed one. */
void pkv_spill_close(pkv_spill *f);

#endif
