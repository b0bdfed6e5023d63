"""safetensors read/write for the oracles with only json + struct + torch
(the `safetensors` package is not installed): an 8-byte little-endian
header length, a JSON header {name: {dtype, shape, data_offsets}}, the data.
F32, BF16 and I32 tensors."""
import json
import struct

import torch

_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "I32": torch.int32}
_NAMES = {v: k for k, v in _DTYPES.items()}


def load(path):
    """{name: tensor} of every tensor in the file (copies, CPU)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        dtype = _DTYPES[e["dtype"]]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(e["shape"]).clone()
    return out


def save(path, tensors, metadata=None):
    """Writes {name: tensor} (F32, BF16 or I32) in insertion order."""
    header = {}
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        b = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
