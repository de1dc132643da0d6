/* A weight tensor as the model sees it: a view into the mapped GGUF file. */
#ifndef PKV_TENSOR_H
#define PKV_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *name;
    uint32_t type;   /* pkv_type */
    int64_t ne[4];   /* ne[0] = row length (fastest), ne[1] = rows; unused dims 1 */
    const void *data; /* NULL: absent (optional tensors such as biases) */
    uint64_t nbytes;
    uint64_t row_bytes;
    /* rows interleaved by 8 at load (kernels/repack.h): row m lies in the
     * group at data + (m / 8) * 8 * row_bytes, not at data + m * row_bytes */
    bool x8;
} pkv_tensor;

static inline int pkv_tensor_present(const pkv_tensor *t) { return t->data != 0; }

#endif
