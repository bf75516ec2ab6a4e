"""Minimal safetensors reader/writer for torch tensors (no `safetensors` package needed).

Format (https://github.com/huggingface/safetensors): 8-byte little-endian header length N, N bytes
of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then
the raw little-endian row-major bytes. Names are written sorted, so the same tensors give the same
file bytes.
"""
import json
import struct

import torch

_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.int64: "I64",
    torch.int32: "I32",
}
_BY_NAME = {v: k for k, v in _DTYPES.items()}


def save(tensors, path, metadata=None):
    """Writes {name: tensor} (CPU, any layout) to `path`."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        if t.dtype not in _DTYPES:
            raise ValueError(f"{name}: dtype {t.dtype} is not supported")
        data = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def load(path):
    """Returns ({name: tensor}, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    metadata = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = _BY_NAME[info["dtype"]]
        buf = bytearray(body[begin:end])
        t = torch.frombuffer(buf, dtype=torch.uint8) if buf else torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(dtype).reshape(info["shape"]).clone()
    return out, metadata
