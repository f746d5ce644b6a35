#!/usr/bin/env python3
"""Writes an edited copy of a GGUF file, as a hostile or careless editor would (tests only).

    gguf_edit.py IN OUT EDIT...

EDIT is one of
    u32:KEY=N             a u32 metadata value, rewritten in place (4 bytes)
    f32:KEY=X             an f32 metadata value in place (X may be inf, -inf, nan)
    type:TENSOR=ID        a tensor's ggml type id in place (0 f32, 1 f16, 30 bf16, ...)
    rename:TENSOR=NAME    a tensor's name (the header is rewritten, the data section kept as is)
    fill:TENSOR=X         every f32 element of a tensor's data set to X (nan, inf, ...)
Standard library only; little-endian GGUF v2/v3.
"""
import struct
import sys


def parse(b):
    """Positions of everything in the header: kv value offsets, tensor infos, data offset."""
    pos = 8
    n_t, n_kv = struct.unpack_from("<QQ", b, pos)
    pos += 16
    kvs = {}
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(t, p):
        if t == 8:
            (n,) = struct.unpack_from("<Q", b, p)
            return p + 8 + n
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, p)
            p += 12
            if et in sizes:
                return p + n * sizes[et]
            for _ in range(n):
                p = skip(et, p)
            return p
        return p + sizes[t]

    align = 32
    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", b, pos)
        key = b[pos + 8:pos + 8 + n].decode("utf-8", "replace")
        pos += 8 + n
        (t,) = struct.unpack_from("<I", b, pos)
        pos += 4
        kvs[key] = (t, pos)
        if key == "general.alignment":
            (align,) = struct.unpack_from("<I", b, pos)
        pos = skip(t, pos)
    tensors = []
    for _ in range(n_t):
        start = pos
        (n,) = struct.unpack_from("<Q", b, pos)
        name = b[pos + 8:pos + 8 + n].decode("utf-8", "replace")
        pos += 8 + n
        (nd,) = struct.unpack_from("<I", b, pos)
        pos += 4 + 8 * nd
        ttype, off = struct.unpack_from("<IQ", b, pos)
        tensors.append({"name": name, "start": start, "type_at": pos, "type": ttype, "offset": off,
                        "ne": struct.unpack_from("<%dQ" % nd, b, pos - 8 * nd), "end": pos + 12})
        pos += 12
    data = (pos + align - 1) // align * align
    return kvs, tensors, data, align


def main():
    src, dst, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
    b = bytearray(open(src, "rb").read())
    for e in edits:
        kvs, tensors, data, align = parse(b)
        op, rest = e.split(":", 1)
        what, val = rest.split("=", 1)
        if op in ("u32", "f32"):
            t, at = kvs[what]
            assert t == (4 if op == "u32" else 6), "%s is type %d" % (what, t)
            struct.pack_into("<I" if op == "u32" else "<f", b, at, int(val) if op == "u32" else float(val))
            continue
        t = next(x for x in tensors if x["name"] == what)
        if op == "type":
            struct.pack_into("<I", b, t["type_at"], int(val))
        elif op == "fill":
            assert t["type"] == 0, "fill needs an f32 tensor"
            n = 1
            for d in t["ne"]:
                n *= d
            struct.pack_into("<%df" % n, b, data + t["offset"], *([float(val)] * n))
        elif op == "rename":
            nb = val.encode()
            head = bytes(b[:t["start"]]) + struct.pack("<Q", len(nb)) + nb + bytes(b[t["start"] + 8 + len(t["name"].encode()):t["end"]])
            rest_infos = bytes(b[t["end"]:tensors[-1]["end"]])
            h = head + rest_infos
            h += b"\0" * ((align - len(h) % align) % align)
            b = bytearray(h + bytes(b[data:]))
        else:
            raise SystemExit("unknown edit " + e)
    open(dst, "wb").write(b)


if __name__ == "__main__":
    main()
