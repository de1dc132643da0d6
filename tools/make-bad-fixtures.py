#!/usr/bin/env python3
"""Writes small malformed or unsupported GGUF files for the command-line tests
(tests/cli-test.sh) into tests/fixtures/bad/.

  unknown-arch.gguf   well-formed, general.architecture = "mamba"
  unknown-type.gguf   a llama file whose first tensor has ggml type id 99
  absurd-dim.gguf     a llama file whose first tensor claims ne[1] = 2^62

Needs the `gguf` package (tools/requirements.txt). Run from the repository root.
"""
import struct
import sys
from pathlib import Path

import numpy as np
import gguf

OUT = Path("tests/fixtures/bad")


def write(path, arch, tensors):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-5)
    for name, arr in tensors:
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tensor_info_offset(data, name):
    """Byte offset of the tensor info record for `name` (its name string)."""
    needle = struct.pack("<Q", len(name)) + name.encode()
    at = data.find(needle)
    assert at >= 0, name
    return at + len(needle)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    emb = np.zeros((16, 8), dtype=np.float32)
    write(OUT / "unknown-arch.gguf", "mamba", [("token_embd.weight", emb)])

    for fname, patch in [("unknown-type.gguf", "type"), ("absurd-dim.gguf", "dim")]:
        path = OUT / fname
        write(path, "llama", [("token_embd.weight", emb)])
        data = bytearray(path.read_bytes())
        at = tensor_info_offset(data, "token_embd.weight")
        n_dims = struct.unpack_from("<I", data, at)[0]
        assert n_dims == 2
        dims_at = at + 4
        type_at = dims_at + 8 * n_dims
        if patch == "type":
            struct.pack_into("<I", data, type_at, 99)
        else:
            struct.pack_into("<Q", data, dims_at + 8, 1 << 62)
        path.write_bytes(bytes(data))
    print("wrote", ", ".join(sorted(p.name for p in OUT.glob("*.gguf"))))


if __name__ == "__main__":
    sys.exit(main())
