"""The safetensors file format, written without the safetensors package (so an export needs
only this project's core dependencies; loading it is the reader's business).

The format (https://huggingface.co/docs/safetensors): 8 bytes, the little-endian length N of a
JSON header; N bytes of header, ``{name: {"dtype", "shape", "data_offsets": [begin, end]}}``
plus ``"__metadata__"`` (strings only), padded with spaces to a multiple of 8; then the
tensors' bytes back to back, little-endian, in the order of their offsets.

>>> import io
>>> buffer = io.BytesIO()
>>> write(buffer, {"x": torch.arange(3, dtype=torch.float32)}, {"format": "pt"})
>>> data = buffer.getvalue()
>>> n = int.from_bytes(data[:8], "little")
>>> json.loads(data[8 : 8 + n])["x"], n % 8, len(data) - 8 - n
({'dtype': 'F32', 'shape': [3], 'data_offsets': [0, 12]}, 0, 12)
"""

from __future__ import annotations

import json
import struct
import sys
from typing import IO

import torch

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}


def header(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytes:
    """The length-prefixed, space-padded JSON header of ``tensors`` in name order."""
    entries: dict[str, object] = {"__metadata__": metadata}
    at = 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in DTYPES:
            raise ValueError(f"tensor {name!r}: dtype {t.dtype} is not one this writer supports")
        size = t.numel() * t.element_size()
        entries[name] = {
            "dtype": DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [at, at + size],
        }
        at += size
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def write(fh: IO[bytes], tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write ``tensors`` (any device and layout) and string ``metadata`` to ``fh``."""
    if sys.byteorder != "little":  # the format is little-endian; tensors are written as held
        raise ValueError("safetensors files are little-endian; this machine is not")
    fh.write(header(tensors, metadata))
    for name in sorted(tensors):
        flat = tensors[name].detach().cpu().contiguous().reshape(-1)
        fh.write(flat.view(torch.uint8).numpy().tobytes())  # memory order: little-endian
