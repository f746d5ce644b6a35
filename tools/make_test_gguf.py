#!/usr/bin/env python3
"""Writes the GGUF test fixtures: a small valid sample, its expected tensor values, a set of
broken files the reader must refuse (one per kind of defect), and the fuzzer's seed corpus.

    python3 tools/make_test_gguf.py            # writes under the repository's tests/

Needs only python3 and numpy. Deterministic: the same script writes the same bytes, so the
committed fixtures can be regenerated and diffed.

Outputs:
  tests/fixtures/gguf/sample.gguf          GGUF v3, general.architecture = "qwen4exp", a tiny
                                           qwen4exp metadata set and F32/F16/BF16/Q8_0 tensors
  tests/fixtures/gguf/sample_<tensor>.npy  each tensor's values as float32 (numpy shape = ne
                                           reversed); Q8_0 ones are the exact dequantized values
  tests/fixtures/broken/*.gguf             one file per defect (derived from the sample)
  tests/fixtures/broken/MANIFEST.tsv       file name TAB a substring the refusal sentence contains
                                           (fuzz_*.gguf files and their lines, found by the fuzzer
                                           and added by hand, are kept)
  tests/fuzz/corpus/*.gguf                 seed corpus: the sample and small valid variants
"""
import os
import struct
import sys

import numpy as np

# GGUF metadata value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "B",
              U64: "Q", I64: "q", F64: "d"}
# ggml tensor types used here.
T_F32, T_F16, T_Q8_0, T_Q4_K, T_BF16 = 0, 1, 8, 12, 30
TYPE_BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_Q8_0: (32, 34), T_Q4_K: (256, 144), T_BF16: (1, 2)}


def p32(v):
    return struct.pack("<I", v)


def p64(v):
    return struct.pack("<Q", v)


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return p64(len(b)) + b


def enc(t, v):
    """Value bytes (without the type id) of value v of type t. Arrays: v = (elem_type, items)."""
    if t == STRING:
        return gstr(v)
    if t == ARRAY:
        et, items = v
        return p32(et) + p64(len(items)) + b"".join(enc(et, x) for x in items)
    return struct.pack("<" + SCALAR_FMT[t], v)


def kv(key, t, v):
    """A metadata entry: (key bytes, type id, encoded value bytes)."""
    return [key.encode() if isinstance(key, str) else key, t, enc(t, v)]


class Tensor:
    def __init__(self, name, ttype, ne, data=None, values=None, offset=None):
        self.name = name.encode() if isinstance(name, str) else name
        self.type = ttype
        self.ne = list(ne)
        self.data = data        # raw bytes, or None (no data written: for broken files)
        self.values = values    # expected float32 array (numpy shape = ne reversed), or None
        self.offset = offset    # None: laid out automatically

    def copy(self):
        return Tensor(self.name, self.type, self.ne, self.data, self.values, self.offset)


def align(x, a):
    return (x + a - 1) // a * a


def build(kvs, tensors, version=3, magic=b"GGUF", n_tensors=None, n_kv=None, alignment=32, endian="<"):
    """Serializes a GGUF. Returns (bytes, marks) where marks records where each part starts.

    Tensors without an explicit offset are laid out in order, each aligned; explicit offsets are
    written as given (for broken files). Data is padded to the alignment after each tensor, as
    ggml does. `alignment` is the layout's alignment, independent of any general.alignment key."""
    out = bytearray()
    marks = {}
    out += magic
    out += struct.pack(endian + "I", version)
    marks["counts"] = len(out)
    out += struct.pack(endian + "Q", len(tensors) if n_tensors is None else n_tensors)
    out += struct.pack(endian + "Q", len(kvs) if n_kv is None else n_kv)
    for i, (key, t, raw) in enumerate(kvs):
        marks["kv", i] = len(out)
        out += gstr(key) + p32(t)
        marks["val", i] = len(out)
        out += raw
    off = 0
    offsets = []
    for t in tensors:
        if t.offset is None:
            off = align(off, alignment)
            offsets.append(off)
            off += len(t.data) if t.data is not None else 0
        else:
            offsets.append(t.offset)
    for i, t in enumerate(tensors):
        marks["ti", i] = len(out)
        out += gstr(t.name) + p32(len(t.ne)) + b"".join(p64(n) for n in t.ne) + p32(t.type) + p64(offsets[i])
    marks["ti_end"] = len(out)
    out += b"\0" * (align(len(out), alignment) - len(out))
    marks["data"] = len(out)
    data = bytearray()
    for t, o in zip(tensors, offsets):
        if t.data is None:
            continue
        if len(data) < o + len(t.data):
            data += b"\0" * (o + len(t.data) - len(data))
        data[o:o + len(t.data)] = t.data
        marks["tdata", t.name] = marks["data"] + o
    data += b"\0" * (align(len(data), alignment) - len(data))
    out += data
    return bytes(out), marks


# ---- tensor data ------------------------------------------------------------------------------

def f32_tensor(name, ne, rng):
    v = rng.standard_normal(tuple(reversed(ne))).astype(np.float32)
    return Tensor(name, T_F32, ne, v.astype("<f4").tobytes(), v)


def f16_tensor(name, ne, rng):
    h = (rng.standard_normal(tuple(reversed(ne))) * 0.5).astype("<f2")
    return Tensor(name, T_F16, ne, h.tobytes(), h.astype(np.float32))


def bf16_tensor(name, ne, rng):
    v = (rng.standard_normal(tuple(reversed(ne))) * 2.0).astype(np.float32)
    u = v.view(np.uint32)
    # round to nearest even on the dropped 16 bits (values are finite)
    b = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype("<u2")
    exact = (b.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return Tensor(name, T_BF16, ne, b.tobytes(), exact)


def q8_0_tensor(name, ne, rng):
    """ggml's quantize_row_q8_0_ref: blocks of 32, d = amax/127 stored as fp16, q = round(x/d)."""
    assert ne[0] % 32 == 0
    x = rng.standard_normal(tuple(reversed(ne))).astype(np.float32)
    blocks = x.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    idv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    scaled = blocks * idv[:, None]
    q = (np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))).astype(np.int8)  # roundf: half away from 0
    d16 = d.astype("<f2")
    raw = bytearray()
    for i in range(blocks.shape[0]):
        raw += d16[i].tobytes() + q[i].tobytes()
    exact = (q.astype(np.float32) * d16.astype(np.float32)[:, None]).astype(np.float32)
    return Tensor(name, T_Q8_0, ne, bytes(raw), exact.reshape(tuple(reversed(ne))))


def raw_tensor(name, ttype, ne, rng):
    """A tensor of any listed type with random bytes (valid structure; values not checked)."""
    bs, ts = TYPE_BLOCK[ttype]
    n = int(np.prod(ne)) // bs * ts
    return Tensor(name, ttype, ne, rng.integers(0, 256, n, dtype=np.uint8).tobytes())


# ---- the sample -------------------------------------------------------------------------------

def sample_parts():
    rng = np.random.default_rng(20260901)
    a = "qwen4exp."
    kvs = [
        kv("general.architecture", STRING, "qwen4exp"),
        kv("general.name", STRING, "turbospark test sample"),
        kv("general.alignment", U32, 32),
        kv("general.file_type", U32, 7),
        kv("general.quantization_version", U32, 2),
        kv(a + "context_length", U32, 4096),
        kv(a + "embedding_length", U32, 64),
        kv(a + "block_count", U32, 4),
        kv(a + "attention.head_count", U32, 4),
        kv(a + "attention.head_count_kv", U32, 2),
        kv(a + "attention.key_length", U32, 16),
        kv(a + "attention.value_length", U32, 16),
        kv(a + "attention.layer_norm_rms_epsilon", F32, 1e-6),
        kv(a + "rope.freq_base", F32, 1.0e7),
        kv(a + "rope.dimension_count", U32, 4),
        kv(a + "rope.dimension_sections", ARRAY, (I32, [1, 1, 0, 0])),
        kv(a + "expert_count", U32, 8),
        kv(a + "expert_used_count", U32, 2),
        kv(a + "expert_feed_forward_length", U32, 32),
        kv(a + "expert_shared_feed_forward_length", U32, 32),
        kv(a + "ssm.conv_kernel", U32, 4),
        kv(a + "ssm.state_size", U32, 8),
        kv(a + "ssm.group_count", U32, 2),
        kv(a + "ssm.time_step_rank", U32, 4),
        kv(a + "ssm.inner_size", U32, 32),
        kv(a + "full_attention_interval", U32, 4),
        kv(a + "hyper_connection.count", U32, 4),
        kv(a + "hyper_connection.low_rank", U32, 8),
        kv(a + "attention.indexer.head_count", U32, 2),
        kv(a + "attention.indexer.key_length", U32, 8),
        kv(a + "attention.indexer.top_k", U32, 16),
        kv(a + "attention.compress_ratios", ARRAY, (I32, [0, 0, 0, 4])),
        kv(a + "attention.recurrent_layers", ARRAY, (BOOL, [1, 1, 1, 0])),
        kv(a + "ple.layers", ARRAY, (I32, [1])),
        kv(a + "ple.ngram_size", U32, 3),
        kv(a + "ple.heads_per_ngram", U32, 2),
        kv(a + "ple.conv_kernel", U32, 4),
        kv(a + "ple.eos_token_id", U32, 2),
        kv(a + "embedding_length_per_layer_input", U32, 16),
        kv(a + "ple.layer_multipliers", ARRAY, (U64, [23703573157769, 20109073645365, 8052911324071])),
        kv(a + "ple.head_vocab_sizes", ARRAY, (U64, [11, 13, 17, 19])),
        kv(a + "ple.head_offsets", ARRAY, (U64, [0, 11, 24, 41])),
        kv("tokenizer.ggml.model", STRING, "gpt2"),
        kv("tokenizer.ggml.tokens", ARRAY, (STRING, ["<|endoftext|>", "hello", " world", "\u00e9t\u00e9", "\n"])),
        kv("tokenizer.ggml.token_type", ARRAY, (I32, [3, 1, 1, 1, 1])),
        kv("tokenizer.ggml.add_bos_token", BOOL, 0),
        # Nested arrays: an array of arrays of u32, and an array of arrays of strings.
        kv("turbospark.test.nested_u32", ARRAY, (ARRAY, [(U32, [1, 2, 3]), (U32, [4, 5]), (U32, [])])),
        kv("turbospark.test.nested_str", ARRAY, (ARRAY, [(STRING, ["a", "bc"]), (STRING, ["def"])])),
        # One scalar of each remaining type.
        kv("turbospark.test.u8", U8, 200),
        kv("turbospark.test.i8", I8, -100),
        kv("turbospark.test.u16", U16, 60000),
        kv("turbospark.test.i16", I16, -30000),
        kv("turbospark.test.i32", I32, -2000000000),
        kv("turbospark.test.u64", U64, 2**64 - 1),
        kv("turbospark.test.i64", I64, -(2**63)),
        kv("turbospark.test.f64", F64, 3.141592653589793),
    ]
    tensors = [
        q8_0_tensor("token_embd.weight", [64, 16], rng),
        f32_tensor("output_norm.weight", [64], rng),
        f32_tensor("blk.0.attn_norm.weight", [64], rng),
        f16_tensor("blk.0.attn_qkv.weight", [64, 24], rng),
        bf16_tensor("blk.0.ffn_gate_inp.weight", [64, 8], rng),
        f32_tensor("blk.0.ssm_conv1d.weight", [4, 32], rng),
        q8_0_tensor("blk.0.ffn_up_exps.weight", [64, 8, 4], rng),
        bf16_tensor("blk.0.ple_test.weight", [4, 3, 2, 2], rng),
    ]
    return kvs, tensors


def keyidx(kvs, key):
    for i, e in enumerate(kvs):
        if e[0] == key.encode():
            return i
    raise KeyError(key)


# ---- broken files -----------------------------------------------------------------------------

def broken_files():
    """(file name, bytes, substring the refusal must contain)."""
    kvs, tensors = sample_parts()
    sample, m = build(kvs, tensors)
    out = []

    def add(name, data, expect):
        out.append((name, data, expect))

    def with_kv(i, entry=None, extra=None):
        """The sample with kv i replaced by entry (None: unchanged) and `extra` entries appended."""
        k = [list(e) for e in kvs]
        if entry is not None:
            k[i] = entry
        return k + (extra or [])

    def with_tensor(i, **changes):
        ts = [t.copy() for t in tensors]
        for a, v in changes.items():
            setattr(ts[i], a, v)
        return ts

    def bld(k=None, t=None, **kw):
        return build(kvs if k is None else k, tensors if t is None else t, **kw)[0]

    arch = keyidx(kvs, "general.architecture")
    align_i = keyidx(kvs, "general.alignment")
    mult = keyidx(kvs, "qwen4exp.ple.layer_multipliers")
    toks = keyidx(kvs, "tokenizer.ggml.tokens")
    nested = keyidx(kvs, "turbospark.test.nested_u32")
    ctx = keyidx(kvs, "qwen4exp.context_length")

    # Header.
    add("empty.gguf", b"", "is empty")
    add("three_bytes.gguf", b"GGU", "only 3 bytes long")
    add("bad_magic.gguf", bld(magic=b"GGML"), "does not start with the magic")
    add("version_1.gguf", bld(version=1), "version 1")
    add("version_4.gguf", bld(version=4), "GGUF version 4")
    add("big_endian.gguf", bld(endian=">"), "big-endian")
    add("too_many_tensors.gguf", bld(n_tensors=2**40), "claims 1099511627776 tensors")
    add("too_many_tensors_max.gguf", bld(n_tensors=2**64 - 1), "claims 18446744073709551615 tensors")
    add("too_many_kv.gguf", bld(n_kv=2**40), "claims 1099511627776 metadata entries")
    add("too_many_kv_max.gguf", bld(n_kv=2**64 - 1), "claims 18446744073709551615 metadata entries")

    # Truncations at several points of the sample.
    add("trunc_version.gguf", sample[:6], "truncated: reading the version")
    add("trunc_tensor_count.gguf", sample[:m["counts"] + 3], "truncated: reading the tensor count")
    add("trunc_kv_count.gguf", sample[:m["counts"] + 12], "truncated: reading the metadata count")
    add("trunc_header_end.gguf", sample[:m["counts"] + 16], "claims %d metadata entries, impossible" % len(kvs))
    # (Cut points past byte 24 + 13 * n_kv, so that the count check above does not catch them first.)
    model = keyidx(kvs, "tokenizer.ggml.model")
    add("trunc_key_length.gguf", sample[:m["kv", 50] + 5], "truncated: reading a metadata key")
    add("trunc_key.gguf", sample[:m["kv", 51] + 8 + 6], "truncated: reading a metadata key")
    add("trunc_value_type.gguf", sample[:m["val", 52] - 2], "truncated: reading 'turbospark.test.i32'")
    add("trunc_scalar.gguf", sample[:m["val", 53] + 5], "truncated: reading 'turbospark.test.u64'")
    add("trunc_string_value.gguf", sample[:m["val", model] + 8 + 2], "truncated: reading 'tokenizer.ggml.model'")
    add("trunc_array_header.gguf", sample[:m["val", mult] + 6], "truncated: reading 'qwen4exp.ple.layer_multipliers'")
    add("trunc_array.gguf", sample[:m["val", mult] + 12 + 13], "qwen4exp.ple.layer_multipliers' claims 3 u64")
    add("trunc_string_array.gguf", sample[:m["val", toks] + 12 + (8 + 13) + (8 + 5) + (8 + 6) + 8 + 2],
        "truncated: reading 'tokenizer.ggml.tokens'")
    add("trunc_nested_array.gguf", sample[:m["val", nested] + 12 + 24 + 12 + 5], "turbospark.test.nested_u32' claims 2 u32")
    add("trunc_tensor_name.gguf", sample[:m["ti", 2] + 8 + 4], "truncated: reading a tensor name")
    add("trunc_tensor_info.gguf", sample[:m["ti", 3] + 8 + len(tensors[3].name) + 4 + 8 + 3], "truncated: reading tensor 'blk.0.attn_qkv.weight'")
    add("trunc_tensor_offset.gguf", sample[:m["ti_end"] - 1], "truncated: reading tensor 'blk.0.ple_test.weight'")
    add("trunc_before_data.gguf", sample[:m["ti_end"]], "runs past the end of the file")
    add("trunc_tensor_data.gguf", sample[:m["tdata", tensors[3].name] + 100], "'blk.0.attn_qkv.weight' data")
    last = tensors[-1]
    add("trunc_last_byte.gguf", sample[:m["tdata", last.name] + len(last.data) - 1], "'blk.0.ple_test.weight' data")

    # Strings and arrays with impossible lengths.
    add("huge_string.gguf", bld(with_kv(arch, [b"general.architecture", STRING, p64(2**64 - 1) + b"qwen4exp"])),
        "truncated: reading 'general.architecture' at byte")
    s = bytearray(sample)
    s[m["kv", 0]:m["kv", 0] + 8] = p64(2**63)
    add("huge_key_length.gguf", bytes(s), "truncated: reading a metadata key")
    add("huge_array_u32.gguf", bld(with_kv(mult, [b"qwen4exp.ple.layer_multipliers", ARRAY,
                                                 p32(U32) + p64(2**62 + 1) + p64(1)])),
        "claims 4611686018427387905 u32 elements")
    add("huge_array_u64.gguf", bld(with_kv(mult, [b"qwen4exp.ple.layer_multipliers", ARRAY,
                                                 p32(U64) + p64(2**64 - 1) + p64(1)])),
        "claims 18446744073709551615 u64 elements")
    add("huge_array_string.gguf", bld(with_kv(toks, [b"tokenizer.ggml.tokens", ARRAY,
                                                    p32(STRING) + p64(2**61) + gstr("a")])),
        "claims 2305843009213693952 string elements")
    add("huge_array_nested.gguf", bld(with_kv(nested, [b"turbospark.test.nested_u32", ARRAY,
                                                      p32(ARRAY) + p64(2**60) + p32(U32) + p64(0)])),
        "claims 1152921504606846976 array elements")
    add("huge_array_inner.gguf", bld(with_kv(nested, [b"turbospark.test.nested_u32", ARRAY,
                                                     p32(ARRAY) + p64(2) + enc(ARRAY, (U32, [1]))
                                                     + p32(I16) + p64(2**63 + 5)])),
        "claims 9223372036854775813 i16 elements")
    add("huge_string_in_array.gguf", bld(with_kv(toks, [b"tokenizer.ggml.tokens", ARRAY,
                                                       p32(STRING) + p64(2) + gstr("a") + p64(2**64 - 9) + b"b"])),
        "truncated: reading 'tokenizer.ggml.tokens'")

    # Types.
    add("unknown_value_type.gguf", bld(with_kv(ctx, [b"qwen4exp.context_length", 13, p32(4096)])),
        "unknown value type 13")
    add("unknown_value_type_max.gguf", bld(with_kv(ctx, [b"qwen4exp.context_length", 0xFFFFFFFF, p32(4096)])),
        "unknown value type 4294967295")
    add("unknown_array_type.gguf", bld(with_kv(mult, [b"qwen4exp.ple.layer_multipliers", ARRAY,
                                                     p32(13) + p64(3) + p64(1) * 3])),
        "array of unknown element type 13")
    add("unknown_nested_array_type.gguf", bld(with_kv(nested, [b"turbospark.test.nested_u32", ARRAY,
                                                              p32(ARRAY) + p64(1) + p32(99) + p64(0)])),
        "array of unknown element type 99")
    deep = (U32, [7])
    for _ in range(8):
        deep = (ARRAY, [deep])
    add("nested_too_deep.gguf", bld(with_kv(nested, kv("turbospark.test.nested_u32", ARRAY, deep))),
        "nests arrays deeper than 8 levels")
    bool_i = keyidx(kvs, "tokenizer.ggml.add_bos_token")
    add("bool_2.gguf", bld(with_kv(bool_i, [b"tokenizer.ggml.add_bos_token", BOOL, b"\x02"])),
        "is a bool stored as 2")
    rl = keyidx(kvs, "qwen4exp.attention.recurrent_layers")
    add("bool_array_2.gguf", bld(with_kv(rl, [b"qwen4exp.attention.recurrent_layers", ARRAY,
                                             p32(BOOL) + p64(4) + b"\x01\x01\x02\x00"])),
        "bool element 2 is 2")

    # Keys.
    add("empty_key.gguf", bld(with_kv(ctx, [b"", U32, p32(4096)])), "metadata key #5 is empty")
    add("key_nul.gguf", bld(with_kv(ctx, [b"qwen4exp.context\0length", U32, p32(4096)])),
        "('qwen4exp.context\\x00length') contains a NUL byte")
    add("duplicate_key.gguf", bld(with_kv(0, None, [kv("qwen4exp.block_count", U32, 5)])),
        "metadata key 'qwen4exp.block_count' appears more than once")
    longkey = b"turbospark.test." + b"k" * 58 + b"\x01" + b"tail"  # 74 printable bytes, then an escape
    add("duplicate_long_key.gguf", bld(with_kv(0, None, [[longkey, U8, b"\x01"], [longkey, U8, b"\x02"]])),
        "appears more than once")

    # Alignment.
    add("alignment_u64.gguf", bld(with_kv(align_i, [b"general.alignment", U64, p64(32)])),
        "general.alignment must be a u32, found u64")
    add("alignment_string.gguf", bld(with_kv(align_i, kv("general.alignment", STRING, "32"))),
        "general.alignment must be a u32, found string")
    add("alignment_0.gguf", bld(with_kv(align_i, kv("general.alignment", U32, 0))),
        "general.alignment is 0, which is not a power of two")
    add("alignment_48.gguf", bld(with_kv(align_i, kv("general.alignment", U32, 48)), alignment=48),
        "general.alignment is 48, which is not a power of two")

    # Tensor infos.
    add("duplicate_tensor.gguf", bld(t=with_tensor(5, name=b"blk.0.attn_norm.weight")),
        "tensor name 'blk.0.attn_norm.weight' appears more than once")
    add("empty_tensor_name.gguf", bld(t=with_tensor(2, name=b"")), "tensor #2 has an empty name")
    add("tensor_name_nul.gguf", bld(t=with_tensor(2, name=b"blk.0\0attn_norm")), "contains a NUL byte")
    add("dims_0.gguf", bld(t=with_tensor(1, ne=[])), "'output_norm.weight' has 0 dimensions")
    add("dims_5.gguf", bld(t=with_tensor(5, ne=[4, 32, 1, 1, 1])), "'blk.0.ssm_conv1d.weight' has 5 dimensions")
    add("dim_zero.gguf", bld(t=with_tensor(3, ne=[64, 0])), "'blk.0.attn_qkv.weight' dimension 1 is 0")
    add("dim_over_int64.gguf", bld(t=with_tensor(1, ne=[2**63])),
        "'output_norm.weight' dimension 0 is 9223372036854775808")
    add("nelements_overflow.gguf", bld(t=with_tensor(1, ne=[2**32, 2**32])), "has too many elements")
    add("nelements_overflow_4d.gguf", bld(t=with_tensor(1, ne=[2**16, 2**16, 2**16, 2**16])), "has too many elements")
    add("nbytes_overflow.gguf", bld(t=with_tensor(1, ne=[2**31, 2**31])),
        "has a byte size that overflows 64 bits")
    add("nbytes_too_big_q8_0.gguf", bld(t=with_tensor(0, ne=[2**58, 8])),
        "more than the whole file holds")
    add("nbytes_too_big.gguf", bld(t=with_tensor(1, ne=[2**20])),
        "more than the whole file holds")
    add("type_4.gguf", bld(t=with_tensor(1, type=4)), "'output_norm.weight' has unknown ggml type id 4")
    add("type_200.gguf", bld(t=with_tensor(1, type=200)), "unknown ggml type id 200")
    add("type_31.gguf", bld(t=with_tensor(1, type=31)), "unknown ggml type id 31")  # removed by ggml
    add("q8_0_ragged.gguf", bld(t=with_tensor(0, ne=[33, 16])), "rows of 33 elements, not a multiple")
    # Offsets (the layout puts output_norm.weight at 1088 and blk.0.attn_norm.weight at 1344).
    add("offset_unaligned.gguf", bld(t=with_tensor(2, offset=1360)),
        "data offset 1360 is not a multiple of the alignment 32")
    add("offset_past_end.gguf", bld(t=with_tensor(7, offset=2**40, data=None)), "runs past the end of the file")
    add("offset_wraps.gguf", bld(t=with_tensor(7, offset=2**64 - 32, data=None)), "runs past the end of the file")
    add("tensors_overlap.gguf", bld(t=with_tensor(2, offset=1088)), "overlap in the data section")
    add("tensors_overlap_partial.gguf", bld(t=with_tensor(3, offset=1344 + 224)), "overlap in the data section")
    # Edited headers whose tensor no longer fills the data laid out for it (refused before binding).
    add("type_f32_as_f16.gguf", bld(t=with_tensor(1, type=T_F16)),
        "'output_norm.weight' (f16, 128 bytes) is followed by 128 unused bytes before tensor 'blk.0.attn_norm.weight'")
    add("shape_shrunk_last.gguf", bld(t=with_tensor(7, ne=[4, 3, 2, 1])),
        "'blk.0.ple_test.weight' (bf16, 48 bytes) is followed by 48 unused bytes before the end of the file")
    add("tensor_name_65.gguf", bld(t=with_tensor(2, name=b"blk.0." + b"n" * 59)),
        "tensor #2 has a name of 65 bytes")
    return out


# ---- seed corpus ------------------------------------------------------------------------------

def corpus_files():
    rng = np.random.default_rng(7)
    kvs, tensors = sample_parts()
    out = [("sample.gguf", build(kvs, tensors)[0])]
    out.append(("empty_v3.gguf", build([], [])[0]))
    small_kvs = [kv("general.architecture", STRING, "llama"), kv("general.alignment", U32, 64)]
    out.append(("v2_align64.gguf", build(small_kvs, [
        f32_tensor("a", [3], rng), f16_tensor("b", [2, 2, 2, 2], rng), raw_tensor("c", T_Q8_0, [32], rng),
        raw_tensor("d", T_Q4_K, [256], rng), bf16_tensor("e", [5, 1], rng)], version=2, alignment=64)[0]))
    every = []
    for t, v in [(U8, 1), (I8, -1), (U16, 2), (I16, -2), (U32, 3), (I32, -3), (F32, 0.5), (BOOL, 1),
                 (U64, 4), (I64, -4), (F64, -0.25)]:
        every.append(kv("s.%d" % t, t, v))
        every.append(kv("a.%d" % t, ARRAY, (t, [v, v])))
    every.append(kv("s.str", STRING, "x"))
    every.append(kv("a.str", ARRAY, (STRING, ["", "yz"])))
    every.append(kv("a.empty", ARRAY, (U8, [])))
    every.append(kv("a.nested", ARRAY, (ARRAY, [(STRING, ["q"]), (ARRAY, [(I8, [1])])])))
    out.append(("every_type.gguf", build(every, [])[0]))
    deep = (U8, [1, 2])
    for _ in range(7):
        deep = (ARRAY, [deep])  # 8 levels: the deepest allowed
    out.append(("nested8.gguf", build([kv("deep", ARRAY, deep)], [f32_tensor("t", [2], rng)])[0]))
    return out


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    gdir = os.path.join(root, "tests", "fixtures", "gguf")
    bdir = os.path.join(root, "tests", "fixtures", "broken")
    cdir = os.path.join(root, "tests", "fuzz", "corpus")
    for d in (gdir, bdir, cdir):
        os.makedirs(d, exist_ok=True)

    kvs, tensors = sample_parts()
    sample, _ = build(kvs, tensors)
    assert len(sample) < 200 * 1024
    with open(os.path.join(gdir, "sample.gguf"), "wb") as f:
        f.write(sample)
    for t in tensors:
        np.save(os.path.join(gdir, "sample_%s.npy" % t.name.decode()), t.values.astype(np.float32))

    # Inputs the fuzzer found (fuzz_*.gguf, added by hand with their manifest lines) are kept;
    # the generated files are rewritten, and files of cases that no longer exist dropped.
    manifest = os.path.join(bdir, "MANIFEST.tsv")
    kept = []
    if os.path.exists(manifest):
        with open(manifest) as f:
            kept = [ln for ln in f if ln.startswith("fuzz_") and os.path.exists(os.path.join(bdir, ln.split("\t")[0]))]
    for name in os.listdir(bdir):
        if (name.endswith(".gguf") and not name.startswith("fuzz_")) or name == "MANIFEST.tsv":
            os.remove(os.path.join(bdir, name))
    lines = []
    for name, data, expect in broken_files():
        assert "\t" not in expect and "\n" not in expect and not name.startswith("fuzz_")
        with open(os.path.join(bdir, name), "wb") as f:
            f.write(data)
        lines.append("%s\t%s\n" % (name, expect))
    with open(manifest, "w") as f:
        f.write("# file\tsubstring the one-sentence refusal must contain (tools/make_test_gguf.py writes this;\n"
                "# fuzz_* lines are inputs the fuzzer found, kept across runs)\n")
        f.writelines(lines + kept)

    for name in os.listdir(cdir):
        if name.endswith(".gguf"):
            os.remove(os.path.join(cdir, name))
    for name, data in corpus_files():
        with open(os.path.join(cdir, name), "wb") as f:
            f.write(data)
    print("wrote %s (%d bytes), %d tensors' .npy, %d broken files, %d corpus files" % (
        os.path.relpath(os.path.join(gdir, "sample.gguf"), root), len(sample), len(tensors), len(lines),
        len(corpus_files())))


if __name__ == "__main__":
    sys.exit(main())
