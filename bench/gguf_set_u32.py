#!/usr/bin/env python3
"""gguf_set_u32.py FILE.gguf KEY VALUE — sets a uint32 key of a GGUF file's
header in place (the key must be there with type uint32; nothing else of the
file changes), e.g. `llama.context_length 32768` so that llama-server, which
caps a slot's context at the model's trained length, holds a long history.
Python 3 standard library only."""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def main(path, key, value):
    value = int(value)
    if not 0 <= value < 1 << 32:
        sys.exit("value out of uint32 range")
    with open(path, "r+b") as f:
        def rd(n):
            b = f.read(n)
            if len(b) != n:
                sys.exit("%s: truncated GGUF" % path)
            return b

        if rd(4) != b"GGUF":
            sys.exit("%s: not a GGUF file" % path)
        _, _, nkv = struct.unpack("<IQQ", rd(20))
        for _ in range(nkv):
            k = rd(struct.unpack("<Q", rd(8))[0]).decode("utf-8", "replace")
            t = struct.unpack("<I", rd(4))[0]
            if k == key:
                if t != 4:
                    sys.exit("%s: %s has type %d, not uint32" % (path, key, t))
                f.write(struct.pack("<I", value))
                return
            if t == 8:
                f.seek(struct.unpack("<Q", rd(8))[0], 1)
            elif t == 9:
                et, n = struct.unpack("<IQ", rd(12))
                if et == 8:
                    for _ in range(n):
                        f.seek(struct.unpack("<Q", rd(8))[0], 1)
                else:
                    f.seek(SIZES[et] * n, 1)
            else:
                f.seek(SIZES[t], 1)
    sys.exit("%s: no key %s" % (path, key))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
