#!/usr/bin/env python3
"""A small, independent GGUF reader for the peer check (tests/peer/compare_hf.py).

Written from the GGUF format description alone; it shares no code with minfer's C++ reader
(lib/gguf/reader.cpp), so agreeing with it is evidence about the file, not about one implementation.

Parsing needs only the Python standard library (struct, mmap). Tensor data comes back either as a
flat list of Python floats (`tensor_values`, standard library only) or as a numpy array
(`tensor_array`, needs numpy). Only float tensors can be decoded: f32 (type 0), f16 (1), bf16 (30).
Quantized tensors are described (type, shape, byte size) but not dequantized: `tensor_array` raises
UnsupportedTensorType for them.

File layout (all little-endian):
    magic "GGUF" | u32 version (2 or 3) | u64 tensor_count | u64 kv_count
    kv_count x   (string key, u32 value_type, value)
    tensor_count x (string name, u32 n_dims, u64 dims[n_dims] innermost first, u32 type, u64 offset)
    zero padding up to a multiple of general.alignment (default 32)
    tensor data; each offset is relative to the start of this data section
A string is a u64 byte length followed by that many bytes (UTF-8, no NUL). An array value is
u32 element type, u64 count, then the elements.

Shapes: a tensor with GGUF dims [ne0, ne1] (ne0 innermost, contiguous) is, read row-major, a numpy
array of shape (ne1, ne0). For a matmul weight that is (out_features, in_features), the layout of a
PyTorch nn.Linear weight; token_embd.weight [n_embd, n_vocab] becomes (n_vocab, n_embd), the layout of
an nn.Embedding weight.

Command line (a quick look at a file):  python3 gguf_read.py MODEL.gguf [--tensors] [--stats]
"""
import mmap
import struct
import sys

# ---- metadata value types ---------------------------------------------------------------------

GGUF_UINT8, GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32, GGUF_BOOL, \
    GGUF_STRING, GGUF_ARRAY, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64 = range(13)

# struct format character of each scalar value type
_SCALAR_CHAR = {
    GGUF_UINT8: "B", GGUF_INT8: "b", GGUF_UINT16: "H", GGUF_INT16: "h", GGUF_UINT32: "I",
    GGUF_INT32: "i", GGUF_FLOAT32: "f", GGUF_BOOL: "B", GGUF_UINT64: "Q", GGUF_INT64: "q",
    GGUF_FLOAT64: "d",
}
META_TYPE_NAMES = {
    GGUF_UINT8: "u8", GGUF_INT8: "i8", GGUF_UINT16: "u16", GGUF_INT16: "i16", GGUF_UINT32: "u32",
    GGUF_INT32: "i32", GGUF_FLOAT32: "f32", GGUF_BOOL: "bool", GGUF_STRING: "string",
    GGUF_ARRAY: "array", GGUF_UINT64: "u64", GGUF_INT64: "i64", GGUF_FLOAT64: "f64",
}

# ---- tensor types (ggml type ids) -------------------------------------------------------------

TYPE_F32, TYPE_F16, TYPE_BF16 = 0, 1, 30
FLOAT_TYPES = (TYPE_F32, TYPE_F16, TYPE_BF16)

# id -> (name, elements per block, bytes per block). Used to name types and to size tensors so the
# reader can check that every tensor lies inside the file; decoding is only done for FLOAT_TYPES.
TENSOR_TYPES = {
    0: ("f32", 1, 4),
    1: ("f16", 1, 2),
    2: ("q4_0", 32, 18),
    3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22),
    7: ("q5_1", 32, 24),
    8: ("q8_0", 32, 34),
    9: ("q8_1", 32, 36),
    10: ("q2_K", 256, 84),
    11: ("q3_K", 256, 110),
    12: ("q4_K", 256, 144),
    13: ("q5_K", 256, 176),
    14: ("q6_K", 256, 210),
    15: ("q8_K", 256, 292),
    24: ("i8", 1, 1),
    25: ("i16", 1, 2),
    26: ("i32", 1, 4),
    27: ("i64", 1, 8),
    28: ("f64", 1, 8),
    30: ("bf16", 1, 2),
}

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4


class GGUFError(Exception):
    """The file is not a GGUF file this reader understands (bad magic, truncation, bad values)."""


class UnsupportedTensorType(GGUFError):
    """The tensor's type is valid but cannot be decoded here (quantized types)."""


def type_name(type_id):
    entry = TENSOR_TYPES.get(type_id)
    return entry[0] if entry else "type%d" % type_id


def align_up(value, alignment):
    return (value + alignment - 1) // alignment * alignment


class TensorInfo:
    """One tensor-info record. `dims` is GGUF order (innermost first); `shape` is numpy order."""

    __slots__ = ("name", "dims", "type", "offset", "file_offset", "n_elements", "n_bytes")

    def __init__(self, name, dims, type_id, offset):
        self.name = name
        self.dims = tuple(dims)
        self.type = type_id
        self.offset = offset          # relative to the data section
        self.file_offset = None       # absolute, set once the data section start is known
        n = 1
        for d in self.dims:
            n *= d
        self.n_elements = n
        self.n_bytes = None           # None for a type this reader cannot size

    @property
    def shape(self):
        return tuple(reversed(self.dims))

    @property
    def type_name(self):
        return type_name(self.type)

    def __repr__(self):
        return "TensorInfo(%s, %s %s @%s)" % (self.name, self.type_name, list(self.dims), self.file_offset)


class _Cursor:
    """Bounds-checked little-endian decoding over a buffer."""

    def __init__(self, buf, size):
        self.buf = buf
        self.size = size
        self.pos = 0

    def need(self, n, what):
        if n < 0 or self.pos + n > self.size:
            raise GGUFError("truncated file: %s needs %d bytes at offset %d, file has %d"
                            % (what, n, self.pos, self.size))

    def unpack(self, fmt, what):
        n = struct.calcsize(fmt)
        self.need(n, what)
        values = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return values

    def u32(self, what):
        return self.unpack("<I", what)[0]

    def u64(self, what):
        return self.unpack("<Q", what)[0]

    def string(self, what):
        n = self.u64(what + " length")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        # surrogateescape keeps arbitrary bytes (a token need not be valid UTF-8) lossless.
        return raw.decode("utf-8", errors="surrogateescape")

    def value(self, vtype, what, depth=0):
        if vtype in _SCALAR_CHAR:
            v = self.unpack("<" + _SCALAR_CHAR[vtype], what)[0]
            return bool(v) if vtype == GGUF_BOOL else v
        if vtype == GGUF_STRING:
            return self.string(what)
        if vtype == GGUF_ARRAY:
            if depth > 8:
                raise GGUFError("%s: arrays nested too deeply" % what)
            etype = self.u32(what + " element type")
            count = self.u64(what + " element count")
            if etype in _SCALAR_CHAR:
                ch = _SCALAR_CHAR[etype]
                self.need(count * struct.calcsize(ch), what)
                values = list(struct.unpack_from("<%d%s" % (count, ch), self.buf, self.pos))
                self.pos += count * struct.calcsize(ch)
                if etype == GGUF_BOOL:
                    values = [bool(v) for v in values]
                return GGUFArray(etype, values)
            if etype in (GGUF_STRING, GGUF_ARRAY):
                # each element takes at least 8 bytes: refuse absurd counts before looping
                self.need(min(count, self.size) * 8, what)
                return GGUFArray(etype, [self.value(etype, what, depth + 1) for _ in range(count)])
            raise GGUFError("%s: unknown array element type %d" % (what, etype))
        raise GGUFError("%s: unknown value type %d" % (what, vtype))


class GGUFArray(list):
    """A metadata array: a list that also remembers its GGUF element type."""

    def __init__(self, elem_type, values):
        super().__init__(values)
        self.elem_type = elem_type


class GGUFFile:
    """A parsed GGUF file. Use as a context manager, or call close().

    Attributes: path, version, metadata (dict key -> value, file order), meta_types (key -> value type),
    tensors (dict name -> TensorInfo, file order), alignment, data_start, file_size.
    """

    def __init__(self, path):
        self.path = path
        self._file = open(path, "rb")
        try:
            self.file_size = self._file.seek(0, 2)
            if self.file_size == 0:
                raise GGUFError("%s: empty file" % path)
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
            self._parse()
        except Exception:
            self.close()
            raise

    def close(self):
        m = getattr(self, "_map", None)
        if m is not None:
            m.close()
            self._map = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- parsing --------------------------------------------------------------------------------

    def _parse(self):
        cur = _Cursor(self._map, self.file_size)
        cur.need(4, "magic")
        magic = bytes(self._map[0:4])
        if magic != GGUF_MAGIC:
            raise GGUFError("%s: bad magic %r (expected b'GGUF')" % (self.path, magic))
        cur.pos = 4
        self.version = cur.u32("version")
        if self.version not in (2, 3):
            if self.version in (0x02000000, 0x03000000):
                raise GGUFError("%s: big-endian GGUF files are not supported" % self.path)
            raise GGUFError("%s: unsupported GGUF version %d (2 and 3 are read)" % (self.path, self.version))
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")
        # every record takes at least 8 bytes; refuse counts the file cannot hold
        if n_tensors * 8 > self.file_size or n_kv * 8 > self.file_size:
            raise GGUFError("%s: counts (%d tensors, %d keys) exceed the file size" % (self.path, n_tensors, n_kv))

        self.metadata = {}
        self.meta_types = {}
        for i in range(n_kv):
            key = cur.string("metadata key %d" % i)
            vtype = cur.u32("type of %s" % key)
            value = cur.value(vtype, key)
            if key in self.metadata:
                raise GGUFError("%s: duplicate metadata key %s" % (self.path, key))
            self.metadata[key] = value
            self.meta_types[key] = vtype

        self.alignment = DEFAULT_ALIGNMENT
        if "general.alignment" in self.metadata:
            a = self.metadata["general.alignment"]
            if isinstance(a, bool) or not isinstance(a, int) or a <= 0 or (a & (a - 1)) != 0:
                raise GGUFError("%s: general.alignment %r is not a positive power of two" % (self.path, a))
            self.alignment = a

        self.tensors = {}
        for i in range(n_tensors):
            name = cur.string("tensor name %d" % i)
            n_dims = cur.u32("n_dims of %s" % name)
            if n_dims < 1 or n_dims > MAX_DIMS:
                raise GGUFError("%s: tensor %s has %d dims (1..%d allowed)" % (self.path, name, n_dims, MAX_DIMS))
            dims = cur.unpack("<%dQ" % n_dims, "dims of %s" % name)
            type_id = cur.u32("type of %s" % name)
            offset = cur.u64("offset of %s" % name)
            if name in self.tensors:
                raise GGUFError("%s: duplicate tensor %s" % (self.path, name))
            self.tensors[name] = TensorInfo(name, dims, type_id, offset)

        self.header_end = cur.pos
        self.data_start = align_up(cur.pos, self.alignment)

        for t in self.tensors.values():
            if t.offset % self.alignment != 0:
                raise GGUFError("%s: tensor %s offset %d is not a multiple of the alignment %d"
                                % (self.path, t.name, t.offset, self.alignment))
            t.file_offset = self.data_start + t.offset
            entry = TENSOR_TYPES.get(t.type)
            if entry is not None:
                _, block, block_bytes = entry
                if t.dims[0] % block != 0:
                    raise GGUFError("%s: tensor %s (%s) row length %d is not a multiple of the block size %d"
                                    % (self.path, t.name, entry[0], t.dims[0], block))
                t.n_bytes = t.n_elements // block * block_bytes
                if t.file_offset + t.n_bytes > self.file_size:
                    raise GGUFError("%s: tensor %s data [%d, %d) runs past the end of the file (%d bytes)"
                                    % (self.path, t.name, t.file_offset, t.file_offset + t.n_bytes, self.file_size))

    # -- metadata helpers -----------------------------------------------------------------------

    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def require(self, key):
        if key not in self.metadata:
            raise GGUFError("%s: missing metadata key %s" % (self.path, key))
        return self.metadata[key]

    @property
    def architecture(self):
        return self.require("general.architecture")

    def arch_key(self, suffix, default=None, required=False):
        key = "%s.%s" % (self.architecture, suffix)
        if required:
            return self.require(key)
        return self.metadata.get(key, default)

    # -- tensor data ----------------------------------------------------------------------------

    def tensor(self, name):
        if name not in self.tensors:
            raise GGUFError("%s: no tensor named %s" % (self.path, name))
        return self.tensors[name]

    def tensor_bytes(self, name):
        """The raw bytes of a tensor (a copy)."""
        t = self.tensor(name)
        if t.n_bytes is None:
            raise UnsupportedTensorType("%s: tensor %s has type id %d, which this reader cannot size"
                                        % (self.path, name, t.type))
        return bytes(self._map[t.file_offset:t.file_offset + t.n_bytes])

    def tensor_values(self, name):
        """The tensor's elements as a flat list of Python floats, innermost dim fastest.
        Standard library only; f32, f16 and bf16."""
        t = self.tensor(name)
        if t.type not in FLOAT_TYPES:
            raise UnsupportedTensorType("%s: tensor %s is %s; only f32, f16 and bf16 are decoded"
                                        % (self.path, name, t.type_name))
        raw = self.tensor_bytes(name)
        n = t.n_elements
        if t.type == TYPE_F32:
            return list(struct.unpack("<%df" % n, raw))
        if t.type == TYPE_F16:
            return list(struct.unpack("<%de" % n, raw))
        # bf16: the high 16 bits of an IEEE float32
        halves = struct.unpack("<%dH" % n, raw)
        widened = struct.pack("<%dI" % n, *[h << 16 for h in halves])
        return list(struct.unpack("<%df" % n, widened))

    def tensor_array(self, name, dtype=None):
        """The tensor as a numpy array of shape reversed(dims) (see the module docstring), a copy.
        f32 -> float32, f16 -> float16, bf16 -> float32 (exact). `dtype` converts afterwards
        (f16 and bf16 values are exactly representable in float32 and float64)."""
        import numpy as np
        t = self.tensor(name)
        if t.type not in FLOAT_TYPES:
            raise UnsupportedTensorType("%s: tensor %s is %s; only f32, f16 and bf16 are decoded"
                                        % (self.path, name, t.type_name))
        if t.type == TYPE_F32:
            a = np.frombuffer(self._map, dtype="<f4", count=t.n_elements, offset=t.file_offset).copy()
        elif t.type == TYPE_F16:
            a = np.frombuffer(self._map, dtype="<f2", count=t.n_elements, offset=t.file_offset).copy()
        else:
            h = np.frombuffer(self._map, dtype="<u2", count=t.n_elements, offset=t.file_offset)
            a = (h.astype(np.uint32) << 16).view(np.float32)
        a = a.reshape(t.shape)
        if dtype is not None:
            a = a.astype(dtype)
        return a


def open_gguf(path):
    return GGUFFile(path)


def _main(argv):
    import argparse
    p = argparse.ArgumentParser(description="Describe a GGUF file with the peer reader.")
    p.add_argument("model")
    p.add_argument("--tensors", action="store_true", help="list every tensor")
    p.add_argument("--stats", action="store_true", help="mean/std of each float tensor (slow without numpy)")
    args = p.parse_args(argv)
    with GGUFFile(args.model) as f:
        print("version %d, %d keys, %d tensors, alignment %d, data at %d, %d bytes"
              % (f.version, len(f.metadata), len(f.tensors), f.alignment, f.data_start, f.file_size))
        for k, v in f.metadata.items():
            if isinstance(v, GGUFArray):
                print("  %-48s array[%d] of %s" % (k, len(v), META_TYPE_NAMES.get(v.elem_type, "?")))
            else:
                print("  %-48s %r" % (k, v))
        if args.tensors or args.stats:
            for t in f.tensors.values():
                line = "  %-32s %-5s %-16s @%d %s bytes" % (t.name, t.type_name, list(t.dims), t.file_offset, t.n_bytes)
                if args.stats and t.type in FLOAT_TYPES:
                    vals = f.tensor_values(t.name)
                    mean = sum(vals) / len(vals)
                    var = sum((v - mean) ** 2 for v in vals) / len(vals)
                    line += "  mean %.4g std %.4g" % (mean, var ** 0.5)
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
