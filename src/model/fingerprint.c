/* The fingerprint of a model file: what a saved cache records so that it is
 * never loaded into another model (docs/cache-file.md). */
#include "base/crc64.h"
#include "model/model.h"

uint64_t pkv_model_fingerprint(const pkv_model *model) {
    pkv_model *m = (pkv_model *)model; /* the cached value only: the model is otherwise untouched */
    uint64_t fp = atomic_load(&m->fingerprint);
    if (fp) return fp;
    pkv_crc64_table tb; /* 16 KiB */
    pkv_crc64_init(&tb);
    /* every byte of the file, not its header alone: a fine-tune of the same
     * base model has the same metadata and shapes, only other weights */
    fp = pkv_crc64_update(&tb, 0, m->file.base, m->file.size);
    uint64_t size = (uint64_t)m->file.size;
    fp = pkv_crc64_update(&tb, fp, &size, sizeof size);
    if (!fp) fp = 1; /* 0 means "not computed" */
    /* threads that race here compute the same value */
    atomic_store(&m->fingerprint, fp);
    return fp;
}
