"""gguf_read.py: the f32 tensors and scalar metadata of a GGUF file (versions 2 and 3), enough for
train.py --init-gguf to start from a model kvbound wrote (`kvbound convert ... --type f32`).

Design: one pass over the header (metadata, then tensor infos), then each tensor read from the data
section at general.alignment (default 32). Only f32 tensors are read; any other type is refused by name,
so a quantized file never loads as garbage. Arrays in the metadata are skipped, not kept. A tensor's
shape is returned in numpy's order (the GGUF's ne[] reversed: a torch weight [out, in] is ne = {in, out}).
"""
import struct

import numpy as np

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class GGUFError(Exception):
    pass


def read_gguf(path):
    """({key: scalar or str}, {tensor name: float32 numpy array}) of an f32 GGUF file."""
    with open(path, "rb") as f:
        buf = f.read()
    at = 0

    def take(fmt):
        nonlocal at
        n = struct.calcsize(fmt)
        if at + n > len(buf):
            raise GGUFError("%s: truncated at byte %d" % (path, at))
        v = struct.unpack_from(fmt, buf, at)
        at += n
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal at
        n = take("<Q")
        if at + n > len(buf):
            raise GGUFError("%s: a string runs past the end" % path)
        s = buf[at:at + n].decode("utf-8", "replace")
        at += n
        return s

    def value(t):
        if t in _SCALAR:
            return take(_SCALAR[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            for _ in range(n):
                value(et)
            return None  # arrays (the vocabulary) are not kept
        raise GGUFError("%s: unknown metadata type %d" % (path, t))

    if buf[:4] != b"GGUF":
        raise GGUFError("%s: not a GGUF file" % path)
    at = 4
    version = take("<I")
    if version not in (2, 3):
        raise GGUFError("%s: GGUF version %d (2 or 3 read here)" % (path, version))
    n_tensors, n_kv = take("<Q"), take("<Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        infos.append((name, ne, take("<I"), take("<Q")))
    align = int(meta.get("general.alignment") or 32)
    base = (at + align - 1) // align * align
    tensors = {}
    for name, ne, t, off in infos:
        if t != 0:
            raise GGUFError("%s: tensor %s is of GGML type %d, not f32 (convert with --type f32)" % (path, name, t))
        count = int(np.prod(ne))
        start = base + off
        if start + 4 * count > len(buf):
            raise GGUFError("%s: tensor %s runs past the end" % (path, name))
        tensors[name] = np.frombuffer(buf, dtype="<f4", count=count, offset=start).reshape(list(reversed(ne))).copy()
    return meta, tensors
