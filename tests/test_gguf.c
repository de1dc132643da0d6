/*
 * GGUF reader/writer tests (docs/engine.md §1).
 *
 * Independent references: two files written by gguf-py 0.19.0 (the Python
 * GGUF library that ships with llama.cpp) are embedded below. The reader must
 * decode the values the script put in, and the writer, given the same
 * content, must reproduce the second file byte for byte. The script:
 *
 *   import numpy as np
 *   from gguf import GGUFWriter, GGUFValueType as V, GGMLQuantizationType as Q
 *   w = GGUFWriter("a.gguf", "test")          # -> gguf_py_all_types
 *   w.add_uint8("t.u8", 200); w.add_int8("t.i8", -100)
 *   w.add_uint16("t.u16", 60000); w.add_int16("t.i16", -30000)
 *   w.add_uint32("t.u32", 4000000000); w.add_int32("t.i32", -2000000000)
 *   w.add_float32("t.f32", 0.15625); w.add_bool("t.bool", True)
 *   w.add_string("t.str", "h\u00e9llo"); w.add_uint64("t.u64", 2**63 + 7)
 *   w.add_int64("t.i64", -(2**62) - 3); w.add_float64("t.f64", -1e300)
 *   w.add_key_value("t.arr_u8", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
 *   w.add_key_value("t.arr_i16", [-1, 300], V.ARRAY, sub_type=V.INT16)
 *   w.add_key_value("t.arr_bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
 *   w.add_key_value("t.arr_u64", [2**64 - 1], V.ARRAY, sub_type=V.UINT64)
 *   w.add_key_value("t.arr_f64", [0.25, -8.0], V.ARRAY, sub_type=V.FLOAT64)
 *   w.add_key_value("t.arr_str", ["x", "", "\u2581y"], V.ARRAY, sub_type=V.STRING)
 *   w.add_tensor("v", np.array([1.0, -2.0, 0.5], dtype=np.float32))
 *   w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
 *
 *   w = GGUFWriter("b.gguf", "test")          # -> gguf_py_writer_subset
 *   w.add_custom_alignment(64)
 *   w.add_uint32("t.u32", 4000000000); w.add_int32("t.i32", -123456)
 *   w.add_uint64("t.u64", 2**40 + 5); w.add_float32("t.f32", 1.5)
 *   w.add_bool("t.bool", True); w.add_string("t.str", "h\u00e9llo")
 *   w.add_key_value("t.arr_str", ["a", "", "\u2581b"], V.ARRAY, sub_type=V.STRING)
 *   w.add_key_value("t.arr_f32", [0.5, -2.0, 3.25], V.ARRAY, sub_type=V.FLOAT32)
 *   w.add_key_value("t.arr_i32", [1, -2, 2147483647], V.ARRAY, sub_type=V.INT32)
 *   w.add_tensor("w.f32", np.arange(6, dtype=np.float32).reshape(2, 3))
 *   w.add_tensor("w.f16", np.array([1, 2, 3, 4, 5], dtype=np.float16))
 *   q = (np.arange(68) * 7 % 256).astype(np.uint8).reshape(2, 34)
 *   w.add_tensor("w.q8", q, raw_dtype=Q.Q8_0)
 *   (then the same three write calls)
 *
 * Hostile inputs are made by writing a valid file and corrupting bytes at
 * positions located from the spec layout (key/name string, then type, value).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf.h"
#include "test.h"

static const uint8_t gguf_py_all_types[] = {
    0x47, 0x47, 0x55, 0x46, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x13, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x67, 0x65, 0x6e, 0x65, 0x72, 0x61, 0x6c, 0x2e, 0x61, 0x72, 0x63, 0x68, 0x69, 0x74, 0x65, 0x63,
    0x74, 0x75, 0x72, 0x65, 0x08, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x74, 0x65, 0x73, 0x74, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x75, 0x38,
    0x00, 0x00, 0x00, 0x00, 0xc8, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x69,
    0x38, 0x01, 0x00, 0x00, 0x00, 0x9c, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e,
    0x75, 0x31, 0x36, 0x02, 0x00, 0x00, 0x00, 0x60, 0xea, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x74, 0x2e, 0x69, 0x31, 0x36, 0x03, 0x00, 0x00, 0x00, 0xd0, 0x8a, 0x05, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x75, 0x33, 0x32, 0x04, 0x00, 0x00, 0x00, 0x00, 0x28, 0x6b,
    0xee, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x69, 0x33, 0x32, 0x05, 0x00,
    0x00, 0x00, 0x00, 0x6c, 0xca, 0x88, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e,
    0x66, 0x33, 0x32, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3e, 0x06, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x74, 0x2e, 0x62, 0x6f, 0x6f, 0x6c, 0x07, 0x00, 0x00, 0x00, 0x01, 0x05, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x73, 0x74, 0x72, 0x08, 0x00, 0x00, 0x00, 0x06,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x68, 0xc3, 0xa9, 0x6c, 0x6c, 0x6f, 0x05, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x75, 0x36, 0x34, 0x0a, 0x00, 0x00, 0x00, 0x07, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e,
    0x69, 0x36, 0x34, 0x0b, 0x00, 0x00, 0x00, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xbf, 0x05,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x66, 0x36, 0x34, 0x0c, 0x00, 0x00, 0x00,
    0x9c, 0x75, 0x00, 0x88, 0x3c, 0xe4, 0x37, 0xfe, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x74, 0x2e, 0x61, 0x72, 0x72, 0x5f, 0x75, 0x38, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0xff, 0x09, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x74, 0x2e, 0x61, 0x72, 0x72, 0x5f, 0x69, 0x31, 0x36, 0x09, 0x00, 0x00, 0x00,
    0x03, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x2c, 0x01,
    0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x61, 0x72, 0x72, 0x5f, 0x62, 0x6f,
    0x6f, 0x6c, 0x09, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x01, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x61,
    0x72, 0x72, 0x5f, 0x75, 0x36, 0x34, 0x09, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x09, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x61, 0x72, 0x72, 0x5f, 0x66, 0x36, 0x34, 0x09,
    0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0xd0, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0xc0, 0x09,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x61, 0x72, 0x72, 0x5f, 0x73, 0x74, 0x72,
    0x09, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x78, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe2, 0x96, 0x81, 0x79, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x76, 0x01, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

static const uint8_t gguf_py_writer_subset[] = {
    0x47, 0x47, 0x55, 0x46, 0x03, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x67, 0x65, 0x6e, 0x65, 0x72, 0x61, 0x6c, 0x2e, 0x61, 0x72, 0x63, 0x68, 0x69, 0x74, 0x65, 0x63,
    0x74, 0x75, 0x72, 0x65, 0x08, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x74, 0x65, 0x73, 0x74, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x67, 0x65, 0x6e, 0x65,
    0x72, 0x61, 0x6c, 0x2e, 0x61, 0x6c, 0x69, 0x67, 0x6e, 0x6d, 0x65, 0x6e, 0x74, 0x04, 0x00, 0x00,
    0x00, 0x40, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x75,
    0x33, 0x32, 0x04, 0x00, 0x00, 0x00, 0x00, 0x28, 0x6b, 0xee, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x74, 0x2e, 0x69, 0x33, 0x32, 0x05, 0x00, 0x00, 0x00, 0xc0, 0x1d, 0xfe, 0xff, 0x05,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x75, 0x36, 0x34, 0x0a, 0x00, 0x00, 0x00,
    0x05, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x74, 0x2e, 0x66, 0x33, 0x32, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0x3f, 0x06, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x62, 0x6f, 0x6f, 0x6c, 0x07, 0x00, 0x00, 0x00, 0x01,
    0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x73, 0x74, 0x72, 0x08, 0x00, 0x00,
    0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x68, 0xc3, 0xa9, 0x6c, 0x6c, 0x6f, 0x09,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x61, 0x72, 0x72, 0x5f, 0x73, 0x74, 0x72,
    0x09, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x61, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe2, 0x96, 0x81, 0x62, 0x09, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x2e, 0x61, 0x72, 0x72, 0x5f, 0x66, 0x33, 0x32, 0x09, 0x00,
    0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x50, 0x40, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x74, 0x2e, 0x61, 0x72, 0x72, 0x5f, 0x69, 0x33, 0x32, 0x09, 0x00, 0x00, 0x00, 0x05,
    0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0xfe,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x77,
    0x2e, 0x66, 0x33, 0x32, 0x02, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x77, 0x2e, 0x66, 0x31,
    0x36, 0x01, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x77, 0x2e, 0x71, 0x38, 0x02, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x80, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x40,
    0x00, 0x00, 0x80, 0x40, 0x00, 0x00, 0xa0, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x3c, 0x00, 0x40, 0x00, 0x42, 0x00, 0x44, 0x00, 0x45, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x07, 0x0e, 0x15, 0x1c, 0x23, 0x2a, 0x31, 0x38, 0x3f, 0x46, 0x4d, 0x54, 0x5b, 0x62, 0x69,
    0x70, 0x77, 0x7e, 0x85, 0x8c, 0x93, 0x9a, 0xa1, 0xa8, 0xaf, 0xb6, 0xbd, 0xc4, 0xcb, 0xd2, 0xd9,
    0xe0, 0xe7, 0xee, 0xf5, 0xfc, 0x03, 0x0a, 0x11, 0x18, 0x1f, 0x26, 0x2d, 0x34, 0x3b, 0x42, 0x49,
    0x50, 0x57, 0x5e, 0x65, 0x6c, 0x73, 0x7a, 0x81, 0x88, 0x8f, 0x96, 0x9d, 0xa4, 0xab, 0xb2, 0xb9,
    0xc0, 0xc7, 0xce, 0xd5, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

/* ------------------------------------------------------------ helpers */

#define NAME "t.gguf" /* the name given to gguf_open_memory in these tests */

typedef struct {
    uint8_t *data;
    size_t size;
} blob;

/* An exact-size heap copy, so that ASan catches any read past the end. */
static blob blob_copy(const void *p, size_t n) {
    blob b = {malloc(n ? n : 1), n};
    if (b.data && n) memcpy(b.data, p, n);
    return b;
}

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static float get_f32(const uint8_t *p) {
    uint32_t bits = (uint32_t)get_le(p, 4);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Offset of the only occurrence of s in b, or 0 (a test failure) when it is
 * missing or not unique. Offset 0 is the magic, never a string. */
static size_t find_unique_(const char *file, int line, const blob *b, const char *s) {
    size_t n = strlen(s), found = 0, hits = 0;
    for (size_t i = 0; i + n <= b->size; i++)
        if (memcmp(b->data + i, s, n) == 0) {
            found = i;
            hits++;
        }
    if (hits != 1) {
        test_fail(file, line, "'%s' occurs %zu times in the file", s, hits);
        return 0;
    }
    return found;
}
#define find_unique(b, s) find_unique_(__FILE__, __LINE__, b, s)

/* Spec layout of a kv pair (§1.1): u64 key length | key | u32 type | value. */
#define KV_TYPE(b, key) (find_unique(b, key) + strlen(key))
#define KV_VALUE(b, key) (KV_TYPE(b, key) + 4)

/* Spec layout of a tensor info: u64 name length | name | u32 n_dims |
 * u64 dims[n_dims] | u32 type | u64 offset. */
typedef struct {
    size_t n_dims, dims, type, offset;
} info_fields;

static info_fields tensor_fields(const blob *b, size_t name_pos, const char *name) {
    info_fields t;
    t.n_dims = name_pos + strlen(name);
    uint32_t n_dims = (uint32_t)get_le(b->data + t.n_dims, 4);
    t.dims = t.n_dims + 4;
    t.type = t.dims + 8 * (size_t)n_dims;
    t.offset = t.type + 4;
    return t;
}
#define TENSOR(b, name) tensor_fields(b, find_unique(b, name), name)

/* Opening b must fail with a FORMAT error whose one-line message starts with
 * the file name and contains both needles (n2 may be NULL). */
static void expect_format_error_(const char *file, int line, const blob *b, const char *n1,
                                 const char *n2) {
    gguf_file f;
    pkv_error err = {0};
    int rc = gguf_open_memory(&f, b->data, b->size, NAME, &err);
    if (rc != -1 || err.code != PKV_ERR_FORMAT) {
        test_fail(file, line, "expected a format error, got rc %d code %d: %s", rc, err.code,
                  err.msg);
        if (rc == 0) gguf_close(&f);
        return;
    }
    if (strncmp(err.msg, NAME ": ", strlen(NAME) + 2) != 0 || strchr(err.msg, '\n'))
        test_fail(file, line, "message does not start with the file name: %s", err.msg);
    if (!strstr(err.msg, n1) || (n2 && !strstr(err.msg, n2)))
        test_fail(file, line, "message lacks '%s'%s%s%s: %s", n1, n2 ? " / '" : "", n2 ? n2 : "",
                  n2 ? "'" : "", err.msg);
    if (f.kv || f.tensors || f.n_kv || f.n_tensors || f.base)
        test_fail(file, line, "gguf_file not left closed after an error");
}
#define EXPECT_FORMAT_ERROR(b, n1, n2) expect_format_error_(__FILE__, __LINE__, b, n1, n2)

static void open_ok_(const char *file, int line, const blob *b, gguf_file *f) {
    pkv_error err = {0};
    if (gguf_open_memory(f, b->data, b->size, NAME, &err) != 0)
        test_fail(file, line, "open failed: %s", err.msg);
}
#define OPEN_OK(b, f)                                                                          \
    do {                                                                                       \
        open_ok_(__FILE__, __LINE__, b, f);                                                    \
        REQUIRE(!test_failed());                                                               \
    } while (0)

/* A small byte builder for files the writer cannot express (spec layout). */
typedef struct {
    uint8_t data[1024];
    size_t len;
} bytes;

static void b_put(bytes *b, uint64_t v, int n) {
    put_le(b->data + b->len, v, n);
    b->len += (size_t)n;
}
static void b_str(bytes *b, const char *s, size_t n) {
    b_put(b, n, 8);
    memcpy(b->data + b->len, s, n);
    b->len += n;
}
static void b_header(bytes *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    memcpy(b->data, "GGUF", 4);
    b->len = 4;
    b_put(b, version, 4);
    b_put(b, n_tensors, 8);
    b_put(b, n_kv, 8);
}
static void b_pad(bytes *b, size_t alignment) {
    while (b->len % alignment) b->data[b->len++] = 0;
}

/* ------------------------------------------------------------ the basic file */

static const char *const basic_tokens[] = {"<s>", "a", "bc"};
static const float basic_scores[] = {0.5f, -1.0f, 2.0f};
static const int32_t basic_ids[] = {3, -4};
static const uint16_t basic_f16[] = {0x3c00, 0x4000, 0x4200}; /* 1, 2, 3 in binary16 */

static void basic_f32(float out[8]) {
    for (int i = 0; i < 8; i++) out[i] = 0.5f * (float)i - 1.0f;
}
static void basic_q8(uint8_t out[68]) {
    for (int i = 0; i < 68; i++) out[i] = (uint8_t)(i * 3 + 1);
}

/* kv indices: 0 general.architecture, 1 t.count, 2 t.flag, 3 t.name,
 * 4 t.tokens, 5 t.scores, 6 t.ids, 7 t.big, 8 t.neg, 9 t.eps.
 * Tensors: a.weight F32 [4,2] (32 bytes), q.weight Q8_0 [32,2] (2 blocks of
 * 34 = 68 bytes), n.weight F16 [3] (6 bytes). With alignment 32 the offsets
 * are 0, 32 and pad(32+68) = 128. */
static gguf_writer *basic_writer(void) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return NULL;
    gguf_write_str(w, "general.architecture", "llama");
    gguf_write_u32(w, "t.count", 7);
    gguf_write_bool(w, "t.flag", true);
    gguf_write_str(w, "t.name", "hello");
    gguf_write_arr_str(w, "t.tokens", basic_tokens, 3);
    gguf_write_arr_f32(w, "t.scores", basic_scores, 3);
    gguf_write_arr_i32(w, "t.ids", basic_ids, 2);
    gguf_write_u64(w, "t.big", 1ull << 40);
    gguf_write_i32(w, "t.neg", -5);
    gguf_write_f32(w, "t.eps", 1e-6f);
    float f32[8];
    uint8_t q8[68];
    basic_f32(f32);
    basic_q8(q8);
    pkv_error err;
    const uint64_t ne_a[] = {4, 2}, ne_q[] = {32, 2}, ne_n[] = {3};
    if (gguf_write_tensor(w, "a.weight", 0, 2, ne_a, f32, sizeof f32, &err) ||
        gguf_write_tensor(w, "q.weight", 8, 2, ne_q, q8, sizeof q8, &err) ||
        gguf_write_tensor(w, "n.weight", 1, 1, ne_n, basic_f16, sizeof basic_f16, &err)) {
        gguf_writer_free(w);
        return NULL;
    }
    return w;
}

static blob basic_blob(void) {
    blob b = {NULL, 0};
    gguf_writer *w = basic_writer();
    pkv_error err;
    if (w && gguf_writer_to_memory(w, &b.data, &b.size, &err) != 0) b.data = NULL;
    gguf_writer_free(w);
    return b;
}

#define BASIC(b)                                                                               \
    blob b = basic_blob();                                                                     \
    REQUIRE(b.data != NULL)

static void check_kv_types(const gguf_file *f) {
    static const gguf_vtype want[] = {GGUF_VT_STRING,  GGUF_VT_UINT32, GGUF_VT_BOOL,
                                      GGUF_VT_STRING,  GGUF_VT_ARRAY,  GGUF_VT_ARRAY,
                                      GGUF_VT_ARRAY,   GGUF_VT_UINT64, GGUF_VT_INT32,
                                      GGUF_VT_FLOAT32};
    for (int i = 0; i < 10; i++) CHECK_EQ_INT(f->kv[i].value.type, want[i]);
}

/* Everything the basic file holds, as the reader reports it. */
static void check_basic(const gguf_file *f) {
    REQUIRE(f->n_kv == 10 && f->n_tensors == 3);
    CHECK_EQ_INT(f->version, 3);
    CHECK_EQ_INT(f->alignment, 32);
    check_kv_types(f);
    CHECK_STR(f->kv[0].key, "general.architecture");
    CHECK(gguf_str_eq(f->kv[0].value.v.str, "llama"));
    CHECK_STR(f->kv[1].key, "t.count");
    CHECK_EQ_INT(f->kv[1].value.v.u, 7);
    CHECK_EQ_INT(f->kv[2].value.v.u, 1);
    CHECK(gguf_str_eq(f->kv[3].value.v.str, "hello"));
    const gguf_value *tok = &f->kv[4].value;
    CHECK_EQ_INT(tok->v.arr.elem_type, GGUF_VT_STRING);
    REQUIRE(tok->v.arr.count == 3);
    for (int i = 0; i < 3; i++) CHECK(gguf_str_eq(tok->v.arr.strs[i], basic_tokens[i]));
    const gguf_value *sc = &f->kv[5].value;
    CHECK_EQ_INT(sc->v.arr.elem_type, GGUF_VT_FLOAT32);
    REQUIRE(sc->v.arr.count == 3);
    for (int i = 0; i < 3; i++) CHECK(gguf_arr_f64(sc, (uint64_t)i) == basic_scores[i]);
    const gguf_value *ids = &f->kv[6].value;
    CHECK_EQ_INT(ids->v.arr.elem_type, GGUF_VT_INT32);
    REQUIRE(ids->v.arr.count == 2);
    CHECK_EQ_INT(gguf_arr_i64(ids, 0), 3);
    CHECK_EQ_INT(gguf_arr_i64(ids, 1), -4);
    CHECK(f->kv[7].value.v.u == 1ull << 40);
    CHECK_EQ_INT(f->kv[8].value.v.i, -5);
    CHECK(f->kv[9].value.v.f == (double)1e-6f);

    static const char *const names[] = {"a.weight", "q.weight", "n.weight"};
    static const uint32_t types[] = {0, 8, 1}, n_dims[] = {2, 2, 1};
    static const uint64_t ne[3][4] = {{4, 2, 1, 1}, {32, 2, 1, 1}, {3, 1, 1, 1}};
    static const uint64_t offsets[] = {0, 32, 128}, nbytes[] = {32, 68, 6};
    for (int i = 0; i < 3; i++) {
        const gguf_tensor *t = &f->tensors[i];
        CHECK_STR(t->name, names[i]);
        CHECK_EQ_INT(t->type, types[i]);
        CHECK_EQ_INT(t->n_dims, n_dims[i]);
        for (int j = 0; j < 4; j++) CHECK_EQ_INT(t->ne[j], ne[i][j]);
        CHECK_EQ_INT(t->offset, offsets[i]);
        CHECK_EQ_INT(t->nbytes, nbytes[i]);
        CHECK((const uint8_t *)t->data == f->base + f->data_offset + offsets[i]);
        CHECK(gguf_find_tensor(f, names[i]) == t);
    }
    CHECK_EQ_INT(f->data_offset % 32, 0);
    CHECK_EQ_INT(f->size, f->data_offset + 160); /* last tensor padded to 32 */
    float f32[8];
    uint8_t q8[68];
    basic_f32(f32);
    basic_q8(q8);
    CHECK(memcmp(f->tensors[0].data, f32, sizeof f32) == 0);
    CHECK(memcmp(f->tensors[1].data, q8, sizeof q8) == 0);
    CHECK(memcmp(f->tensors[2].data, basic_f16, sizeof basic_f16) == 0);
    CHECK(gguf_find_tensor(f, "missing") == NULL);
}

static void temp_path(char *buf, size_t n, const char *tag) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = P_tmpdir;
    snprintf(buf, n, "%s/pkv_test_gguf_%ld_%s", dir, (long)getpid(), tag);
}

/* ------------------------------------------------------------ independent references */

TEST(gguf_reads_gguf_py_all_value_types) {
    blob b = blob_copy(gguf_py_all_types, sizeof gguf_py_all_types);
    gguf_file f;
    OPEN_OK(&b, &f);
    CHECK_EQ_INT(f.version, 3);
    CHECK_EQ_INT(f.n_kv, 19);
    CHECK_EQ_INT(f.alignment, 32);
    pkv_error err;
    gguf_str s;
    uint32_t u32;
    int64_t i64;
    float f32;
    bool flag;
    CHECK(gguf_get_str(&f, "general.architecture", &s, &err) == 0 && gguf_str_eq(s, "test"));
    const gguf_kv *kv;
    CHECK((kv = gguf_find_kv(&f, "t.u8")) && kv->value.type == GGUF_VT_UINT8 &&
          kv->value.v.u == 200);
    CHECK((kv = gguf_find_kv(&f, "t.i8")) && kv->value.type == GGUF_VT_INT8 &&
          kv->value.v.i == -100);
    CHECK((kv = gguf_find_kv(&f, "t.u16")) && kv->value.type == GGUF_VT_UINT16 &&
          kv->value.v.u == 60000);
    CHECK((kv = gguf_find_kv(&f, "t.i16")) && kv->value.type == GGUF_VT_INT16 &&
          kv->value.v.i == -30000);
    CHECK(gguf_get_u32(&f, "t.u32", &u32, &err) == 0 && u32 == 4000000000u);
    CHECK(gguf_get_i64(&f, "t.i32", &i64, &err) == 0 && i64 == -2000000000);
    CHECK(gguf_get_f32(&f, "t.f32", &f32, &err) == 0 && f32 == 0.15625f);
    CHECK(gguf_get_bool(&f, "t.bool", &flag, &err) == 0 && flag);
    CHECK(gguf_get_str(&f, "t.str", &s, &err) == 0 && gguf_str_eq(s, "h\xc3\xa9llo"));
    CHECK((kv = gguf_find_kv(&f, "t.u64")) && kv->value.type == GGUF_VT_UINT64 &&
          kv->value.v.u == (1ull << 63) + 7);
    CHECK(gguf_get_i64(&f, "t.i64", &i64, &err) == 0 && i64 == -(INT64_C(1) << 62) - 3);
    CHECK((kv = gguf_find_kv(&f, "t.f64")) && kv->value.type == GGUF_VT_FLOAT64 &&
          kv->value.v.f == -1e300);

    const gguf_value *a;
    REQUIRE(gguf_get_arr(&f, "t.arr_u8", &a, &err) == 0 && a->v.arr.count == 3);
    CHECK_EQ_INT(a->v.arr.elem_type, GGUF_VT_UINT8);
    CHECK(gguf_arr_i64(a, 0) == 1 && gguf_arr_i64(a, 1) == 2 && gguf_arr_i64(a, 2) == 255);
    REQUIRE(gguf_get_arr(&f, "t.arr_i16", &a, &err) == 0 && a->v.arr.count == 2);
    CHECK(gguf_arr_i64(a, 0) == -1 && gguf_arr_i64(a, 1) == 300 && gguf_arr_f64(a, 0) == -1.0);
    REQUIRE(gguf_get_arr(&f, "t.arr_bool", &a, &err) == 0 && a->v.arr.count == 3);
    CHECK_EQ_INT(a->v.arr.elem_type, GGUF_VT_BOOL);
    CHECK(gguf_arr_i64(a, 0) == 1 && gguf_arr_i64(a, 1) == 0 && gguf_arr_i64(a, 2) == 1);
    REQUIRE(gguf_get_arr(&f, "t.arr_u64", &a, &err) == 0 && a->v.arr.count == 1);
    CHECK(gguf_arr_f64(a, 0) == 18446744073709551615.0);
    REQUIRE(gguf_get_arr(&f, "t.arr_f64", &a, &err) == 0 && a->v.arr.count == 2);
    CHECK(gguf_arr_f64(a, 0) == 0.25 && gguf_arr_f64(a, 1) == -8.0 && gguf_arr_i64(a, 1) == -8);
    REQUIRE(gguf_get_arr(&f, "t.arr_str", &a, &err) == 0 && a->v.arr.count == 3);
    CHECK(gguf_str_eq(a->v.arr.strs[0], "x") && gguf_str_eq(a->v.arr.strs[1], "") &&
          gguf_str_eq(a->v.arr.strs[2], "\xe2\x96\x81y"));

    REQUIRE(f.n_tensors == 1);
    const gguf_tensor *t = gguf_find_tensor(&f, "v");
    REQUIRE(t != NULL);
    CHECK(t->n_dims == 1 && t->ne[0] == 3 && t->ne[1] == 1 && t->type == 0 && t->nbytes == 12);
    CHECK_EQ_INT(t->offset, 0);
    const uint8_t *p = t->data;
    CHECK(get_f32(p) == 1.0f && get_f32(p + 4) == -2.0f && get_f32(p + 8) == 0.5f);
    CHECK_EQ_INT(f.size - f.data_offset, 32); /* 12 bytes padded to 32 */
    gguf_close(&f);
    free(b.data);
}

static gguf_writer *subset_writer(void) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return NULL;
    gguf_write_str(w, "general.architecture", "test");
    gguf_writer_set_alignment(w, 64);
    gguf_write_u32(w, "t.u32", 4000000000u);
    gguf_write_i32(w, "t.i32", -123456);
    gguf_write_u64(w, "t.u64", (1ull << 40) + 5);
    gguf_write_f32(w, "t.f32", 1.5f);
    gguf_write_bool(w, "t.bool", true);
    gguf_write_str(w, "t.str", "h\xc3\xa9llo");
    const char *const strs[] = {"a", "", "\xe2\x96\x81\x62"}; /* "\u2581b" */
    gguf_write_arr_str(w, "t.arr_str", strs, 3);
    const float fl[] = {0.5f, -2.0f, 3.25f};
    gguf_write_arr_f32(w, "t.arr_f32", fl, 3);
    const int32_t in[] = {1, -2, 2147483647};
    gguf_write_arr_i32(w, "t.arr_i32", in, 3);
    float w32[6];
    for (int i = 0; i < 6; i++) w32[i] = (float)i;
    const uint16_t w16[] = {0x3c00, 0x4000, 0x4200, 0x4400, 0x4500}; /* 1..5 in binary16 */
    uint8_t q8[68];
    for (int i = 0; i < 68; i++) q8[i] = (uint8_t)(i * 7 % 256);
    const uint64_t ne32[] = {3, 2}, ne16[] = {5}, neq[] = {32, 2};
    pkv_error err;
    if (gguf_write_tensor(w, "w.f32", 0, 2, ne32, w32, sizeof w32, &err) ||
        gguf_write_tensor(w, "w.f16", 1, 1, ne16, w16, sizeof w16, &err) ||
        gguf_write_tensor(w, "w.q8", 8, 2, neq, q8, sizeof q8, &err)) {
        gguf_writer_free(w);
        return NULL;
    }
    return w;
}

TEST(gguf_writer_matches_gguf_py_bytes) {
    gguf_writer *w = subset_writer();
    REQUIRE(w != NULL);
    uint8_t *out = NULL;
    size_t size = 0;
    pkv_error err;
    REQUIRE_MSG(gguf_writer_to_memory(w, &out, &size, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(size, sizeof gguf_py_writer_subset);
    size_t n = size < sizeof gguf_py_writer_subset ? size : sizeof gguf_py_writer_subset;
    size_t first_diff = n;
    for (size_t i = 0; i < n; i++)
        if (out[i] != gguf_py_writer_subset[i]) {
            first_diff = i;
            break;
        }
    CHECK_MSG(first_diff == n, "first differing byte at offset %zu", first_diff);
    free(out);
    gguf_writer_free(w);
}

TEST(gguf_reads_gguf_py_layout_with_alignment_64) {
    blob b = blob_copy(gguf_py_writer_subset, sizeof gguf_py_writer_subset);
    gguf_file f;
    OPEN_OK(&b, &f);
    CHECK_EQ_INT(f.alignment, 64);
    CHECK_EQ_INT(f.data_offset % 64, 0);
    REQUIRE(f.n_tensors == 3);
    /* gguf-py: offsets 0, pad(24, 64) = 64, 64 + pad(10, 64) = 128 */
    CHECK_EQ_INT(f.tensors[0].offset, 0);
    CHECK_EQ_INT(f.tensors[1].offset, 64);
    CHECK_EQ_INT(f.tensors[2].offset, 128);
    const gguf_tensor *q = gguf_find_tensor(&f, "w.q8");
    REQUIRE(q != NULL);
    CHECK(q->ne[0] == 32 && q->ne[1] == 2 && q->nbytes == 68 && q->type == 8);
    CHECK_EQ_INT(((const uint8_t *)q->data)[67], 67 * 7 % 256);
    const gguf_tensor *t = gguf_find_tensor(&f, "w.f32");
    REQUIRE(t != NULL);
    CHECK(t->ne[0] == 3 && t->ne[1] == 2);
    CHECK(get_f32((const uint8_t *)t->data + 4 * 5) == 5.0f);
    gguf_close(&f);
    free(b.data);
}

/* ------------------------------------------------------------ round trip */

TEST(gguf_round_trip_memory) {
    BASIC(b);
    blob exact = blob_copy(b.data, b.size);
    gguf_file f;
    OPEN_OK(&exact, &f);
    check_basic(&f);
    CHECK(!f.mapped);
    CHECK_STR(f.path, NAME);
    gguf_close(&f);
    gguf_close(&f); /* closing twice is harmless */
    free(exact.data);
    free(b.data);
}

TEST(gguf_round_trip_file) {
    char path[512];
    temp_path(path, sizeof path, "rt.gguf");
    gguf_writer *w = basic_writer();
    REQUIRE(w != NULL);
    pkv_error err;
    REQUIRE_MSG(gguf_writer_save(w, path, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
    gguf_file f;
    int rc = gguf_open(&f, path, &err);
    remove(path);
    REQUIRE_MSG(rc == 0, "%s", err.msg);
    CHECK(f.mapped);
    check_basic(&f);
    gguf_close(&f);
}

TEST(gguf_round_trip_empty_and_zero_tensor_file) {
    gguf_writer *w = gguf_writer_new();
    REQUIRE(w != NULL);
    gguf_write_arr_f32(w, "t.empty", NULL, 0);
    gguf_write_arr_str(w, "t.nostr", NULL, 0);
    gguf_write_str(w, "t.blank", "");
    uint8_t *out;
    size_t size;
    pkv_error err;
    REQUIRE(gguf_writer_to_memory(w, &out, &size, &err) == 0);
    gguf_writer_free(w);
    blob b = blob_copy(out, size);
    free(out);
    gguf_file f;
    OPEN_OK(&b, &f);
    CHECK_EQ_INT(f.n_tensors, 0);
    REQUIRE(f.n_kv == 3);
    CHECK(f.kv[0].value.v.arr.count == 0 && f.kv[0].value.v.arr.elem_type == GGUF_VT_FLOAT32);
    CHECK(f.kv[1].value.v.arr.count == 0 && f.kv[1].value.v.arr.elem_type == GGUF_VT_STRING);
    CHECK(f.kv[2].value.v.str.len == 0);
    gguf_close(&f);
    free(b.data);
}

/* ------------------------------------------------------------ versions, header */

TEST(gguf_version_2_accepted) {
    BASIC(b);
    put_le(b.data + 4, 2, 4);
    gguf_file f;
    OPEN_OK(&b, &f);
    CHECK_EQ_INT(f.version, 2);
    CHECK_EQ_INT(f.n_tensors, 3);
    gguf_close(&f);
    /* and a hand-made v2 file: one kv, one tensor, spec layout */
    bytes h;
    b_header(&h, 2, 1, 1);
    b_str(&h, "general.architecture", 20);
    b_put(&h, GGUF_VT_STRING, 4);
    b_str(&h, "llama", 5);
    b_str(&h, "x", 1);
    b_put(&h, 1, 4);  /* n_dims */
    b_put(&h, 2, 8);  /* ne[0] */
    b_put(&h, 0, 4);  /* F32 */
    b_put(&h, 0, 8);  /* offset */
    b_pad(&h, 32);
    size_t data_at = h.len;
    b_put(&h, 0x3f800000, 4); /* 1.0f */
    b_put(&h, 0xc0000000, 4); /* -2.0f */
    blob hb = blob_copy(h.data, h.len);
    OPEN_OK(&hb, &f);
    CHECK_EQ_INT(f.version, 2);
    CHECK_EQ_INT(f.data_offset, data_at);
    const uint8_t *x = f.tensors[0].data;
    CHECK(get_f32(x) == 1.0f && get_f32(x + 4) == -2.0f);
    gguf_close(&f);
    free(hb.data);
    free(b.data);
}

TEST(gguf_no_tensors_final_padding_optional) {
    bytes h;
    b_header(&h, 3, 0, 1);
    b_str(&h, "t.x", 3);
    b_put(&h, GGUF_VT_UINT16, 4);
    b_put(&h, 513, 2);
    REQUIRE(h.len % 32 != 0);
    blob hb = blob_copy(h.data, h.len);
    gguf_file f;
    OPEN_OK(&hb, &f);
    CHECK_EQ_INT(f.n_tensors, 0);
    CHECK_EQ_INT(f.data_offset, h.len);
    CHECK_EQ_INT(f.kv[0].value.v.u, 513);
    gguf_close(&f);
    free(hb.data);
}

TEST(gguf_bad_magic) {
    BASIC(b);
    memcpy(b.data, "GGML", 4);
    EXPECT_FORMAT_ERROR(&b, "header: magic", "'GGML' is not 'GGUF'");
    b.data[0] = 0x01;
    EXPECT_FORMAT_ERROR(&b, "header: magic", "'?GML'");
    free(b.data);
}

TEST(gguf_version_1_0_and_4_rejected) {
    BASIC(b);
    put_le(b.data + 4, 1, 4);
    EXPECT_FORMAT_ERROR(&b, "header: version", "1 is not supported (2..3)");
    put_le(b.data + 4, 0, 4);
    EXPECT_FORMAT_ERROR(&b, "header: version", "0 is not supported");
    put_le(b.data + 4, 4, 4);
    EXPECT_FORMAT_ERROR(&b, "header: version", "4 is not supported");
    free(b.data);
}

TEST(gguf_byte_swapped_version_rejected) {
    BASIC(b);
    put_le(b.data + 4, 0x03000000, 4); /* version 3 written big-endian */
    EXPECT_FORMAT_ERROR(&b, "header: version", "byte-swapped");
    put_le(b.data + 4, 0x02000000, 4);
    EXPECT_FORMAT_ERROR(&b, "0x02000000", "little-endian");
    free(b.data);
}

TEST(gguf_huge_counts_rejected) {
    BASIC(b);
    put_le(b.data + 16, 1ull << 62, 8);
    EXPECT_FORMAT_ERROR(&b, "header: kv count: 4611686018427387904 pairs", "14 bytes each");
    put_le(b.data + 16, UINT64_MAX, 8);
    EXPECT_FORMAT_ERROR(&b, "header: kv count", NULL);
    put_le(b.data + 16, 10, 8);
    put_le(b.data + 8, 1ull << 62, 8);
    EXPECT_FORMAT_ERROR(&b, "header: tensor count: 4611686018427387904 tensors", "32 bytes each");
    put_le(b.data + 8, 4, 8); /* one more than present: the data is read as an info */
    EXPECT_FORMAT_ERROR(&b, "tensor 3", NULL);
    free(b.data);
}

/* ------------------------------------------------------------ truncation */

/* Every prefix of a valid file: parses only when it still holds every
 * tensor's bytes (trailing padding may be cut), else fails cleanly. */
static void check_prefixes(const uint8_t *full, size_t size) {
    blob whole = blob_copy(full, size);
    gguf_file f;
    OPEN_OK(&whole, &f);
    uint64_t needed = f.data_offset;
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        uint64_t end = f.data_offset + f.tensors[i].offset + f.tensors[i].nbytes;
        if (end > needed) needed = end;
    }
    uint64_t n_kv = f.n_kv;
    gguf_close(&f);
    free(whole.data);
    CHECK(needed < size); /* the test needs trailing padding to be meaningful */
    int unexpected = 0;
    for (size_t len = 0; len < size && unexpected < 5; len++) {
        blob cut = blob_copy(full, len);
        pkv_error err = {0};
        int rc = gguf_open_memory(&f, cut.data, cut.size, NAME, &err);
        if (len >= needed) {
            if (rc != 0 || f.n_kv != n_kv) {
                test_fail(__FILE__, __LINE__, "prefix %zu (>= %llu) rejected: %s", len,
                          (unsigned long long)needed, err.msg);
                unexpected++;
            }
        } else if (rc == 0 || err.code != PKV_ERR_FORMAT ||
                   strncmp(err.msg, NAME ": ", strlen(NAME) + 2) != 0) {
            test_fail(__FILE__, __LINE__, "prefix %zu of %zu: rc %d code %d: %s", len, size, rc,
                      err.code, err.msg);
            unexpected++;
        }
        if (rc == 0) gguf_close(&f);
        free(cut.data);
    }
}

TEST(gguf_truncated_at_every_length) {
    BASIC(b);
    check_prefixes(b.data, b.size);
    check_prefixes(gguf_py_all_types, sizeof gguf_py_all_types);
    /* messages name the item, the field and the bytes missing */
    size_t at = KV_VALUE(&b, "t.eps") + 2;
    blob cut = blob_copy(b.data, at);
    char want[128];
    snprintf(want, sizeof want,
             "kv 9 't.eps': value: truncated: needs 4 bytes at offset %zu, file has %zu", at - 2,
             at);
    EXPECT_FORMAT_ERROR(&cut, want, NULL);
    free(cut.data);
    info_fields n = TENSOR(&b, "n.weight");
    cut = blob_copy(b.data, n.offset + 3);
    EXPECT_FORMAT_ERROR(&cut, "tensor 2 'n.weight': offset: truncated: needs 8 bytes", NULL);
    free(cut.data);
    /* infos complete, padding before the data cut: the data would start past the end */
    size_t infos_end = n.offset + 8;
    REQUIRE(infos_end % 32 != 0);
    cut = blob_copy(b.data, infos_end);
    EXPECT_FORMAT_ERROR(&cut, "data section: start", "past the end of the file");
    free(cut.data);
    free(b.data);
}

/* ------------------------------------------------------------ hostile kv pairs */

TEST(gguf_huge_key_and_string_lengths) {
    BASIC(b);
    size_t key = find_unique(&b, "t.count");
    put_le(b.data + key - 8, 1ull << 40, 8);
    EXPECT_FORMAT_ERROR(&b, "kv 1: key length: length 1099511627776 exceeds the limit 65535", NULL);
    put_le(b.data + key - 8, 65536, 8);
    EXPECT_FORMAT_ERROR(&b, "kv 1: key length", "limit 65535");
    put_le(b.data + key - 8, strlen("t.count"), 8);
    size_t val = KV_VALUE(&b, "t.name");
    put_le(b.data + val, 1ull << 63, 8);
    EXPECT_FORMAT_ERROR(&b, "kv 3 't.name': string length: length 9223372036854775808",
                        "bytes left");
    put_le(b.data + val, 5, 8);
    /* a string inside a string array */
    size_t tok = KV_VALUE(&b, "t.tokens");
    put_le(b.data + tok + 4 + 8 + 8 + 3, UINT64_MAX, 8); /* second element's length */
    EXPECT_FORMAT_ERROR(&b, "kv 4 't.tokens': array element 1: length 18446744073709551615", NULL);
    free(b.data);
}

TEST(gguf_huge_array_counts) {
    BASIC(b);
    size_t sc = KV_VALUE(&b, "t.scores");
    put_le(b.data + sc + 4, 1ull << 61, 8);
    EXPECT_FORMAT_ERROR(&b, "kv 5 't.scores': array count: 2305843009213693952 elements of FLOAT32",
                        "bytes left");
    put_le(b.data + sc + 4, (1ull << 62) + 1, 8); /* count * 4 overflows */
    EXPECT_FORMAT_ERROR(&b, "kv 5 't.scores': array count", NULL);
    put_le(b.data + sc + 4, 3, 8);
    size_t tok = KV_VALUE(&b, "t.tokens");
    put_le(b.data + tok + 4, 1ull << 60, 8);
    EXPECT_FORMAT_ERROR(&b, "kv 4 't.tokens': array count: 1152921504606846976 strings",
                        "8 bytes each");
    put_le(b.data + tok + 4, UINT64_MAX, 8);
    EXPECT_FORMAT_ERROR(&b, "kv 4 't.tokens': array count", NULL);
    free(b.data);
}

TEST(gguf_nested_array_and_bad_types) {
    BASIC(b);
    size_t ids = KV_VALUE(&b, "t.ids");
    put_le(b.data + ids, GGUF_VT_ARRAY, 4);
    EXPECT_FORMAT_ERROR(&b, "kv 6 't.ids': array element type: nested arrays", NULL);
    put_le(b.data + ids, 13, 4);
    EXPECT_FORMAT_ERROR(&b, "kv 6 't.ids': array element type: invalid value type 13", NULL);
    put_le(b.data + ids, GGUF_VT_INT32, 4);
    size_t type = KV_TYPE(&b, "t.count");
    put_le(b.data + type, 13, 4);
    EXPECT_FORMAT_ERROR(&b, "kv 1 't.count': value type: invalid value type 13", NULL);
    put_le(b.data + type, 0xFFFFFFFF, 4);
    EXPECT_FORMAT_ERROR(&b, "kv 1 't.count': value type: invalid value type 4294967295", NULL);
    free(b.data);
}

TEST(gguf_bool_must_be_0_or_1) {
    BASIC(b);
    size_t flag = KV_VALUE(&b, "t.flag");
    b.data[flag] = 2;
    EXPECT_FORMAT_ERROR(&b, "kv 2 't.flag': value: bool byte 2 is not 0 or 1", NULL);
    b.data[flag] = 1;
    /* t.ids re-typed as a BOOL array: its first byte is 3 (from int32 3) */
    put_le(b.data + KV_VALUE(&b, "t.ids"), GGUF_VT_BOOL, 4);
    EXPECT_FORMAT_ERROR(&b, "kv 6 't.ids': array element 0: bool byte 3 is not 0 or 1", NULL);
    free(b.data);
}

TEST(gguf_duplicate_empty_and_nul_keys) {
    BASIC(b);
    memcpy(b.data + find_unique(&b, "t.neg"), "t.big", 5);
    EXPECT_FORMAT_ERROR(&b, "kv 8 't.big': key: duplicate key", NULL);
    free(b.data);

    bytes h;
    b_header(&h, 3, 0, 1);
    b_str(&h, "", 0);
    b_put(&h, GGUF_VT_UINT8, 4);
    b_put(&h, 1, 1);
    b_put(&h, 0, 8); /* slack, so the kv count bound is not what fails */
    blob e = blob_copy(h.data, h.len);
    EXPECT_FORMAT_ERROR(&e, "kv 0: key: empty key", NULL);
    free(e.data);

    /* a long key is shortened in messages */
    static const char long_key[] = "k.0123456789012345678901234567890123456789"
                                    "012345678901234567890123456789xyz";
    b_header(&h, 3, 0, 2);
    for (int i = 0; i < 2; i++) {
        b_str(&h, long_key, sizeof long_key - 1);
        b_put(&h, GGUF_VT_UINT8, 4);
        b_put(&h, 1, 1);
    }
    e = blob_copy(h.data, h.len);
    EXPECT_FORMAT_ERROR(&e, "kv 1 'k.0123456789", "...': key: duplicate key");
    free(e.data);

    b_header(&h, 3, 0, 1);
    b_str(&h, "a\0b", 3);
    b_put(&h, GGUF_VT_UINT8, 4);
    b_put(&h, 1, 1);
    e = blob_copy(h.data, h.len);
    EXPECT_FORMAT_ERROR(&e, "kv 0: key: contains a NUL byte", NULL);
    free(e.data);
}

/* ------------------------------------------------------------ alignment */

TEST(gguf_alignment_must_be_u32_power_of_two) {
    gguf_writer *w = basic_writer();
    REQUIRE(w != NULL);
    gguf_writer_set_alignment(w, 64);
    blob b;
    pkv_error err;
    REQUIRE(gguf_writer_to_memory(w, &b.data, &b.size, &err) == 0);
    gguf_writer_free(w);
    gguf_file f;
    OPEN_OK(&b, &f);
    CHECK_EQ_INT(f.alignment, 64);
    CHECK_EQ_INT(f.data_offset % 64, 0);
    CHECK_EQ_INT(f.tensors[1].offset, 64);
    CHECK_EQ_INT(f.tensors[2].offset, 192); /* 64 + pad(68, 64) */
    gguf_close(&f);

    size_t val = KV_VALUE(&b, "general.alignment");
    put_le(b.data + val, 48, 4);
    EXPECT_FORMAT_ERROR(&b, "kv 10 'general.alignment': value: alignment 48", "power of two");
    put_le(b.data + val, 0, 4);
    EXPECT_FORMAT_ERROR(&b, "kv 10 'general.alignment': value: alignment 0", NULL);
    put_le(b.data + val, 64, 4);
    put_le(b.data + KV_TYPE(&b, "general.alignment"), GGUF_VT_INT32, 4);
    EXPECT_FORMAT_ERROR(&b, "kv 10 'general.alignment': value type: must be UINT32, is INT32",
                        NULL);
    put_le(b.data + KV_TYPE(&b, "general.alignment"), GGUF_VT_UINT32, 4);
    put_le(b.data + val, 1u << 31, 4);
    EXPECT_FORMAT_ERROR(&b, "tensor 1 'q.weight': offset: 64 is not a multiple of the alignment",
                        "2147483648");
    free(b.data);
}

/* ------------------------------------------------------------ hostile tensor infos */

TEST(gguf_duplicate_and_bad_tensor_names) {
    BASIC(b);
    memcpy(b.data + find_unique(&b, "n.weight"), "a.weight", 8);
    EXPECT_FORMAT_ERROR(&b, "tensor 2 'a.weight': name: duplicate tensor name", NULL);
    memcpy(b.data + find_unique(&b, "q.weight"), "q.we\0ght", 8);
    EXPECT_FORMAT_ERROR(&b, "tensor 1: name: contains a NUL byte", NULL);
    memcpy(b.data + find_unique(&b, "q.we"), "q.weight", 8);
    put_le(b.data + find_unique(&b, "q.weight") - 8, 64, 8);
    EXPECT_FORMAT_ERROR(&b, "tensor 1: name length: length 64 exceeds the limit 63", NULL);
    free(b.data);
}

TEST(gguf_n_dims_outside_1_to_4) {
    BASIC(b);
    info_fields a = TENSOR(&b, "a.weight");
    put_le(b.data + a.n_dims, 0, 4);
    EXPECT_FORMAT_ERROR(&b, "tensor 0 'a.weight': n_dims: 0 is outside 1..4", NULL);
    put_le(b.data + a.n_dims, 5, 4);
    EXPECT_FORMAT_ERROR(&b, "tensor 0 'a.weight': n_dims: 5 is outside 1..4", NULL);
    put_le(b.data + a.n_dims, 0x80000000u, 4);
    EXPECT_FORMAT_ERROR(&b, "tensor 0 'a.weight': n_dims: 2147483648", NULL);
    free(b.data);
}

TEST(gguf_absurd_dims_and_overflow) {
    BASIC(b);
    info_fields a = TENSOR(&b, "a.weight"), n = TENSOR(&b, "n.weight");
    put_le(b.data + a.dims + 8, 1ull << 62, 8); /* [4, 2^62]: 2^64 elements */
    EXPECT_FORMAT_ERROR(&b, "tensor 0 'a.weight': dims[1]: element count", "overflows INT64_MAX");
    put_le(b.data + a.dims + 8, 1ull << 63, 8);
    EXPECT_FORMAT_ERROR(&b, "tensor 0 'a.weight': dims[1]: 9223372036854775808 exceeds INT64_MAX",
                        NULL);
    put_le(b.data + a.dims + 8, 2, 8);
    put_le(b.data + a.dims, 1ull << 61, 8); /* [2^61, 2] F32: 2^62 elements, 2^64 bytes */
    EXPECT_FORMAT_ERROR(&b, "tensor 0 'a.weight': dims: size in bytes", "overflows");
    put_le(b.data + a.dims, 4, 8);
    put_le(b.data + n.dims, 1ull << 62, 8); /* F16 [2^62]: 2^63 bytes, far past EOF */
    EXPECT_FORMAT_ERROR(&b, "tensor 2 'n.weight': offset: 128 + 9223372036854775808 bytes",
                        "past the end");
    free(b.data);
}

TEST(gguf_zero_sized_dim_accepted) {
    /* ggml accepts dims of 0 (an empty tensor); so do we, with no data */
    BASIC(b);
    info_fields a = TENSOR(&b, "a.weight");
    put_le(b.data + a.dims + 8, 0, 8);
    gguf_file f;
    OPEN_OK(&b, &f);
    CHECK_EQ_INT(f.tensors[0].nbytes, 0);
    CHECK_EQ_INT(f.tensors[0].ne[1], 0);
    gguf_close(&f);
    free(b.data);
}

TEST(gguf_row_not_multiple_of_block) {
    BASIC(b);
    info_fields q = TENSOR(&b, "q.weight");
    put_le(b.data + q.dims, 48, 8);
    EXPECT_FORMAT_ERROR(&b, "tensor 1 'q.weight': dims[0]: 48 is not a multiple of the Q8_0",
                        "block size 32");
    put_le(b.data + q.dims, 32, 8);
    put_le(b.data + q.type, 12, 4); /* Q4_K: 256-element blocks */
    EXPECT_FORMAT_ERROR(&b, "dims[0]: 32 is not a multiple of the Q4_K block size 256", NULL);
    free(b.data);
}

TEST(gguf_unknown_and_retired_type_ids) {
    BASIC(b);
    info_fields a = TENSOR(&b, "a.weight");
    put_le(b.data + a.type, 99, 4);
    EXPECT_FORMAT_ERROR(&b, "tensor 0 'a.weight': type: unknown ggml type id 99", NULL);
    put_le(b.data + a.type, 43, 4);
    EXPECT_FORMAT_ERROR(&b, "type: unknown ggml type id 43", NULL);
    put_le(b.data + a.type, 4, 4);
    EXPECT_FORMAT_ERROR(&b, "tensor 0 'a.weight': type: ggml type id 4 is Q4_2 (retired)", NULL);
    put_le(b.data + a.type, 31, 4);
    EXPECT_FORMAT_ERROR(&b, "ggml type id 31", "retired");
    /* known types the engine cannot compute still parse (the loader names them) */
    put_le(b.data + a.dims, 256, 8); /* IQ4_XS [256, 2] = 2 blocks = 272 bytes */
    put_le(b.data + a.type, 23, 4);
    put_le(b.data + TENSOR(&b, "q.weight").offset, 288, 8);
    put_le(b.data + TENSOR(&b, "n.weight").offset, 384, 8);
    blob big = {calloc(1, b.size + 512), b.size + 512};
    REQUIRE(big.data != NULL);
    memcpy(big.data, b.data, b.size);
    gguf_file f;
    OPEN_OK(&big, &f);
    CHECK(f.tensors[0].type == 23 && f.tensors[0].nbytes == 272);
    gguf_close(&f);
    free(big.data);
    free(b.data);
}

TEST(gguf_misaligned_offset_and_past_eof) {
    BASIC(b);
    info_fields q = TENSOR(&b, "q.weight"), n = TENSOR(&b, "n.weight");
    put_le(b.data + q.offset, 48, 8);
    EXPECT_FORMAT_ERROR(&b, "tensor 1 'q.weight': offset: 48 is not a multiple of the alignment 32",
                        NULL);
    put_le(b.data + q.offset, 32, 8);
    put_le(b.data + n.offset, 160, 8); /* aligned, but 160 + 6 > 160 */
    EXPECT_FORMAT_ERROR(&b, "tensor 2 'n.weight': offset: 160 + 6 bytes extends past the end",
                        "(160 bytes)");
    put_le(b.data + n.offset, UINT64_MAX - 31, 8); /* aligned; offset + nbytes overflows */
    EXPECT_FORMAT_ERROR(&b, "tensor 2 'n.weight': offset: 18446744073709551584", "past the end");
    /* ggml requires dense offsets; any aligned in-bounds layout whose tensors
     * do not share bytes is accepted (here: n.weight moved past a gap) */
    put_le(b.data + n.offset, 128, 8);
    gguf_file f;
    OPEN_OK(&b, &f);
    gguf_close(&f);
    /* n.weight on top of tensor 0: two tensors, one region */
    put_le(b.data + n.offset, 0, 8);
    EXPECT_FORMAT_ERROR(&b, "tensor 2 'n.weight': offset: data [0, 6) overlaps tensor", NULL);
    free(b.data);
}

/* ------------------------------------------------------------ single-byte corruption sweep */

/* Every byte of the basic file set to a few values: each result either
 * parses (and then every tensor lies inside the buffer) or fails cleanly. */
TEST(gguf_every_byte_corrupted) {
    BASIC(b);
    int bad = 0;
    for (size_t i = 0; i < b.size && bad < 5; i++) {
        const uint8_t orig = b.data[i];
        const uint8_t values[] = {0x00, 0xff, 0x80, (uint8_t)(orig ^ 1), (uint8_t)(orig + 0x40)};
        for (size_t v = 0; v < sizeof values; v++) {
            b.data[i] = values[v];
            gguf_file f;
            pkv_error err = {0};
            if (gguf_open_memory(&f, b.data, b.size, NAME, &err) == 0) {
                for (uint64_t t = 0; t < f.n_tensors; t++) {
                    const uint8_t *p = f.tensors[t].data;
                    if (p < b.data || (size_t)(p - b.data) + f.tensors[t].nbytes > b.size) bad++;
                }
                gguf_close(&f);
            } else if (err.code != PKV_ERR_FORMAT || strchr(err.msg, '\n') ||
                       strncmp(err.msg, NAME ": ", strlen(NAME) + 2) != 0) {
                test_fail(__FILE__, __LINE__, "byte %zu = 0x%02x: code %d: %s", i, values[v],
                          err.code, err.msg);
                bad++;
            }
        }
        b.data[i] = orig;
    }
    CHECK_EQ_INT(bad, 0);
    free(b.data);
}

/* ------------------------------------------------------------ getters */

TEST(gguf_typed_getters_widen_and_check_range) {
    BASIC(b);
    gguf_file f;
    OPEN_OK(&b, &f);
    pkv_error err = {0};
    uint32_t u32 = 99;
    int64_t i64 = 99;
    float f32 = 9.0f;
    bool flag = false;
    gguf_str s;
    const gguf_value *arr;

    CHECK(gguf_get_u32(&f, "t.count", &u32, &err) == 0 && u32 == 7);
    CHECK(gguf_get_i64(&f, "t.count", &i64, &err) == 0 && i64 == 7);
    CHECK(gguf_get_f32(&f, "t.count", &f32, &err) == 0 && f32 == 7.0f);
    CHECK(gguf_get_i64(&f, "t.big", &i64, &err) == 0 && i64 == INT64_C(1) << 40);
    CHECK(gguf_get_i64(&f, "t.neg", &i64, &err) == 0 && i64 == -5);
    CHECK(gguf_get_f32(&f, "t.eps", &f32, &err) == 0 && f32 == 1e-6f);
    CHECK(gguf_get_bool(&f, "t.flag", &flag, &err) == 0 && flag);
    CHECK(gguf_get_str(&f, "t.name", &s, &err) == 0 && gguf_str_eq(s, "hello"));
    CHECK(gguf_get_arr(&f, "t.ids", &arr, &err) == 0 && arr->v.arr.count == 2);

    /* absent: 1, output untouched */
    u32 = 42;
    CHECK(gguf_get_u32(&f, "t.absent", &u32, &err) == 1 && u32 == 42);
    CHECK(gguf_get_str(&f, "t.absent", &s, &err) == 1);

    /* out of range and wrong type: -1 with a message naming file and key */
    err = (pkv_error){0};
    CHECK(gguf_get_u32(&f, "t.big", &u32, &err) == -1 && u32 == 42);
    CHECK(err.code == PKV_ERR_FORMAT && strstr(err.msg, NAME ": kv 't.big'") &&
          strstr(err.msg, "1099511627776"));
    err = (pkv_error){0};
    CHECK(gguf_get_u32(&f, "t.neg", &u32, &err) == -1 && strstr(err.msg, "'t.neg'") &&
          strstr(err.msg, "-5"));
    err = (pkv_error){0};
    CHECK(gguf_get_u32(&f, "t.name", &u32, &err) == -1 && strstr(err.msg, "type STRING"));
    CHECK(gguf_get_bool(&f, "t.count", &flag, &err) == -1 && strstr(err.msg, "expected BOOL"));
    CHECK(gguf_get_str(&f, "t.count", &s, &err) == -1 && strstr(err.msg, "expected STRING"));
    CHECK(gguf_get_arr(&f, "t.name", &arr, &err) == -1 && strstr(err.msg, "expected ARRAY"));
    CHECK(gguf_get_f32(&f, "t.tokens", &f32, &err) == -1 && strstr(err.msg, "type ARRAY"));
    CHECK(gguf_get_i64(&f, "t.eps", &i64, &err) == -1 && strstr(err.msg, "type FLOAT32"));
    gguf_close(&f);
    free(b.data);

    /* ranges of the wider types, from the gguf-py file */
    b = blob_copy(gguf_py_all_types, sizeof gguf_py_all_types);
    OPEN_OK(&b, &f);
    CHECK(gguf_get_u32(&f, "t.u8", &u32, &err) == 0 && u32 == 200);
    CHECK(gguf_get_u32(&f, "t.u16", &u32, &err) == 0 && u32 == 60000);
    CHECK(gguf_get_i64(&f, "t.i8", &i64, &err) == 0 && i64 == -100);
    CHECK(gguf_get_i64(&f, "t.i16", &i64, &err) == 0 && i64 == -30000);
    CHECK(gguf_get_u32(&f, "t.i16", &u32, &err) == -1);
    CHECK(gguf_get_i64(&f, "t.u64", &i64, &err) == -1 && strstr(err.msg, "9223372036854775815"));
    CHECK(gguf_get_f32(&f, "t.f64", &f32, &err) == -1 && strstr(err.msg, "'t.f64'"));
    CHECK(gguf_get_u32(&f, "t.bool", &u32, &err) == -1);
    gguf_close(&f);
    free(b.data);

    /* a non-negative signed value converts to unsigned */
    gguf_writer *w = gguf_writer_new();
    REQUIRE(w != NULL);
    gguf_write_i32(w, "t.pos", 2147483647);
    REQUIRE(gguf_writer_to_memory(w, &b.data, &b.size, &err) == 0);
    gguf_writer_free(w);
    OPEN_OK(&b, &f);
    CHECK(gguf_get_u32(&f, "t.pos", &u32, &err) == 0 && u32 == 2147483647u);
    gguf_close(&f);
    free(b.data);
}

TEST(gguf_string_helpers) {
    gguf_str s = {"hello world", 5};
    char buf[4];
    gguf_str_copy(s, buf, sizeof buf);
    CHECK_STR(buf, "hel");
    char big[16];
    gguf_str_copy(s, big, sizeof big);
    CHECK_STR(big, "hello");
    CHECK(gguf_str_eq(s, "hello"));
    CHECK(!gguf_str_eq(s, "hello "));
    CHECK(!gguf_str_eq(s, "hell"));
    CHECK(gguf_str_eq((gguf_str){NULL, 0}, ""));
    CHECK_STR(gguf_vtype_name(GGUF_VT_FLOAT64), "FLOAT64");
    CHECK_STR(gguf_vtype_name((gguf_vtype)77), "INVALID");
}

/* ------------------------------------------------------------ files and the writer */

TEST(gguf_open_io_errors) {
    gguf_file f;
    pkv_error err = {0};
    char path[512];
    temp_path(path, sizeof path, "missing.gguf");
    CHECK(gguf_open(&f, path, &err) == -1 && err.code == PKV_ERR_IO && strstr(err.msg, path));
    CHECK(f.base == NULL && f.kv == NULL);
    const char *dir = getenv("TMPDIR");
    CHECK(gguf_open(&f, dir && *dir ? dir : P_tmpdir, &err) == -1 && err.code == PKV_ERR_IO &&
          strstr(err.msg, "not a regular file"));
    /* a FIFO with no writer: refused at once, never waited on */
    temp_path(path, sizeof path, "fifo.gguf");
    REQUIRE(mkfifo(path, 0600) == 0);
    int frc = gguf_open(&f, path, &err);
    remove(path);
    CHECK(frc == -1 && err.code == PKV_ERR_IO && strstr(err.msg, "not a regular file") && strstr(err.msg, "pipe"));
    temp_path(path, sizeof path, "empty.gguf");
    FILE *fp = fopen(path, "wb");
    REQUIRE(fp != NULL);
    fclose(fp);
    int rc = gguf_open(&f, path, &err);
    remove(path);
    CHECK(rc == -1 && err.code == PKV_ERR_FORMAT && strstr(err.msg, "empty"));
    /* a broken file on disk: the message names the path */
    BASIC(b);
    put_le(b.data + 4, 1, 4);
    temp_path(path, sizeof path, "v1.gguf");
    fp = fopen(path, "wb");
    REQUIRE(fp != NULL);
    CHECK(fwrite(b.data, 1, b.size, fp) == b.size);
    fclose(fp);
    rc = gguf_open(&f, path, &err);
    remove(path);
    CHECK(rc == -1 && err.code == PKV_ERR_FORMAT && strstr(err.msg, path) &&
          strstr(err.msg, "version"));
    free(b.data);
}

TEST(gguf_writer_rejects_bad_input) {
    pkv_error err;
    uint8_t *out;
    size_t size;

    gguf_writer *w = gguf_writer_new();
    REQUIRE(w != NULL);
    gguf_write_u32(w, "k", 1);
    gguf_write_i32(w, "k", 2);
    CHECK(gguf_writer_to_memory(w, &out, &size, &err) == -1 && err.code == PKV_ERR_ARG &&
          strstr(err.msg, "duplicate key 'k'"));
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_set_alignment(w, 48);
    CHECK(gguf_writer_to_memory(w, &out, &size, &err) == -1 && strstr(err.msg, "alignment 48"));
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_write_u64(w, "general.alignment", 64);
    CHECK(gguf_writer_to_memory(w, &out, &size, &err) == -1 && strstr(err.msg, "UINT32"));
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_write_str(w, "", "x");
    CHECK(gguf_writer_to_memory(w, &out, &size, &err) == -1 && strstr(err.msg, "key"));
    gguf_writer_free(w);

    w = gguf_writer_new();
    float data[64] = {0};
    const uint64_t ne[] = {8, 2}, ne33[] = {33};
    CHECK(gguf_write_tensor(w, "t", 0, 2, ne, data, 60, &err) == -1 && strstr(err.msg, "60 bytes"));
    CHECK(gguf_write_tensor(w, "t", 0, 5, ne, data, 64, &err) == -1 && strstr(err.msg, "n_dims"));
    CHECK(gguf_write_tensor(w, "t", 0, 0, ne, data, 64, &err) == -1);
    CHECK(gguf_write_tensor(w, "t", 4, 2, ne, data, 64, &err) == -1 && strstr(err.msg, "type 4"));
    CHECK(gguf_write_tensor(w, "t", 8, 1, ne33, data, 34, &err) == -1 &&
          strstr(err.msg, "whole blocks"));
    char long_name[80];
    memset(long_name, 'x', 64);
    long_name[64] = '\0';
    CHECK(gguf_write_tensor(w, long_name, 0, 2, ne, data, 64, &err) == -1 &&
          strstr(err.msg, "name"));
    long_name[63] = '\0'; /* 63 bytes is the longest allowed */
    CHECK(gguf_write_tensor(w, long_name, 0, 2, ne, data, 64, &err) == 0);
    CHECK(gguf_write_tensor(w, long_name, 0, 2, ne, data, 64, &err) == -1 &&
          strstr(err.msg, "duplicate tensor name"));
    /* rejected tensors leave the writer usable */
    CHECK(gguf_writer_to_memory(w, &out, &size, &err) == 0);
    blob b = blob_copy(out, size);
    free(out);
    gguf_file f;
    OPEN_OK(&b, &f);
    CHECK(f.n_tensors == 1 && strlen(f.tensors[0].name) == 63);
    gguf_close(&f);
    free(b.data);
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_write_str(w, "s", NULL);
    CHECK(gguf_writer_to_memory(w, &out, &size, &err) == -1 && strstr(err.msg, "NULL string"));
    gguf_writer_free(w);
    w = gguf_writer_new();
    gguf_write_arr_i32(w, "a", NULL, 2);
    CHECK(gguf_writer_to_memory(w, &out, &size, &err) == -1 && strstr(err.msg, "NULL array"));
    gguf_writer_free(w);
    w = gguf_writer_new();
    const char *strs[] = {"x", NULL};
    gguf_write_arr_str(w, "a", strs, 2);
    CHECK(gguf_writer_to_memory(w, &out, &size, &err) == -1 && strstr(err.msg, "NULL string 1"));
    gguf_writer_free(w);

    char path[512];
    temp_path(path, sizeof path, "no_such_dir/x.gguf");
    w = gguf_writer_new();
    CHECK(gguf_writer_save(w, path, &err) == -1 && err.code == PKV_ERR_IO);
    /* a write error (full device) is reported, and the device is left alone */
    if (access("/dev/full", W_OK) == 0) {
        gguf_write_u32(w, "k", 1);
        CHECK(gguf_writer_save(w, "/dev/full", &err) == -1 && err.code == PKV_ERR_IO &&
              strstr(err.msg, "write failed"));
        CHECK(access("/dev/full", W_OK) == 0);
    }
    gguf_writer_free(w);
}
