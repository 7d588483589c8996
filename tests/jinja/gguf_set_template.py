#!/usr/bin/env python3
"""gguf_set_template.py IN.gguf TEMPLATE.jinja OUT.gguf -- a copy of a GGUF
file with tokenizer.chat_template set to the template's text (added, or
replaced), for tests of models with a Jinja chat template. GGUF v2/v3."""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read_str(b, o):
    n = struct.unpack_from("<Q", b, o)[0]
    return b[o + 8:o + 8 + n], o + 8 + n


def skip_val(b, o, t):
    if t == 8:
        return read_str(b, o)[1]
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        if et == 8:
            for _ in range(n):
                o = read_str(b, o)[1]
            return o
        return o + SIZES[et] * n
    return o + SIZES[t]


def main(src, tmpl, dst):
    b = open(src, "rb").read()
    magic, ver, n_t, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    assert magic == b"GGUF" and ver in (2, 3)
    o = 24
    kvs = []
    align = 32
    for _ in range(n_kv):
        start = o
        k, o = read_str(b, o)
        t = struct.unpack_from("<I", b, o)[0]
        o = skip_val(b, o + 4, t)
        if k == b"general.alignment":
            align = struct.unpack_from("<I", b, o - 4)[0]
        if k != b"tokenizer.chat_template":
            kvs.append(b[start:o])
    ti_start = o
    for _ in range(n_t):
        _, o = read_str(b, o)
        nd = struct.unpack_from("<I", b, o)[0]
        o += 4 + 8 * nd + 4 + 8
    infos = b[ti_start:o]
    data_start = (o + align - 1) // align * align
    text = open(tmpl, "rb").read()
    key = b"tokenizer.chat_template"
    kvs.append(struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(text)) + text)
    head = struct.pack("<4sIQQ", magic, ver, n_t, len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % align)
    open(dst, "wb").write(head + b[data_start:])


if __name__ == "__main__":
    main(*sys.argv[1:4])
