/*
 * CRC-64/XZ (the ECMA-182 polynomial, reflected, initial value and final xor
 * all ones; xz's and Go's hash/crc64 ECMA checksum): the checksum of saved
 * caches and the fingerprint of a model file (docs/cache-file.md). Check
 * value: CRC-64/XZ("123456789") = 0x995dc9bbdf1939fa. Slicing by eight, so
 * a model file of a few hundred MB takes a fraction of a second; the table is
 * the caller's (no global state).
 */
#ifndef PKV_CRC64_H
#define PKV_CRC64_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t t[8][256];
} pkv_crc64_table;

void pkv_crc64_init(pkv_crc64_table *table);

/* The running CRC of data after crc (start from 0: the CRC of no bytes). */
uint64_t pkv_crc64_update(const pkv_crc64_table *table, uint64_t crc, const void *data, size_t len);

#endif
