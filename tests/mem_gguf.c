/* A GGUF written to memory and opened from there (mem_gguf.h). */
#include "mem_gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool open_written(gguf_writer *w, mem_gguf *m) {
    pkv_error err = {0};
    memset(m, 0, sizeof *m);
    bool ok = gguf_writer_to_memory(w, &m->data, &m->size, &err) == 0 &&
              gguf_open_memory(&m->file, m->data, m->size, "mem.gguf", &err) == 0;
    if (!ok) printf("    %s\n", err.msg);
    gguf_writer_free(w);
    return ok;
}

void close_written(mem_gguf *m) {
    gguf_close(&m->file);
    free(m->data);
}
