#!/usr/bin/env python3
"""Checks a safetensors file written by zrt_partition_export_full the way another tool reads it.

Usage: check_safetensors_shapes.py FILE EXPECTED_JSON, EXPECTED_JSON mapping tensor names to
shapes. The header is read with plain json/struct (the safetensors format: an 8-byte
little-endian header length, the JSON header, the data): every expected tensor must be there
with its shape, and its byte range must hold exactly that many elements. When torch is
importable, the tensors are also loaded with load_state_dict(strict=True) into a module whose
parameters have those shapes, which fails on any shape that would need a reshape.
"""
import json
import math
import struct
import sys

SIZES = {"F32": 4, "F16": 2, "BF16": 2}


def main():
    path, expected_text = sys.argv[1], sys.argv[2]
    expected = json.loads(expected_text)
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    start = 8 + header_len
    header.pop("__metadata__", None)
    if set(header) != set(expected):
        sys.exit(f"tensors {sorted(header)} != expected {sorted(expected)}")
    for name, shape in expected.items():
        entry = header[name]
        if entry["shape"] != shape:
            sys.exit(f"{name}: shape {entry['shape']} != expected {shape}")
        begin, end = entry["data_offsets"]
        if end - begin != math.prod(shape) * SIZES[entry["dtype"]]:
            sys.exit(f"{name}: {end - begin} bytes for shape {shape}")
    try:
        import torch
    except ImportError:
        print("torch not importable: header checked with json/struct only")
        return
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    state = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = bytearray(data[start + begin:start + end])
        flat = torch.frombuffer(raw, dtype=dtypes[entry["dtype"]])
        state[name] = flat.view(entry["shape"])  # a view of the stored shape, no reshape logic
    module = torch.nn.Module()
    for name, shape in expected.items():
        holder = module
        parts = name.split(".")
        for part in parts[:-1]:
            if not hasattr(holder, part):
                holder.add_module(part, torch.nn.Module())
            holder = getattr(holder, part)
        holder.register_parameter(parts[-1], torch.nn.Parameter(torch.zeros(shape)))
    module.load_state_dict(state, strict=True)
    for name, tensor in module.state_dict().items():
        if not torch.equal(tensor.float(), state[name].float()):
            sys.exit(f"{name}: loaded values differ")
    print(f"loaded {len(state)} tensors with torch {torch.__version__} load_state_dict")


if __name__ == "__main__":
    main()
