#!/usr/bin/env python3
"""Writes a small, complete qwen2 GGUF model byte by byte, straight from the GGUF specification.

This writer shares nothing with minfer's C++ writer (lib/gguf/writer.cpp): it exists so the tests can
show that `minfer info` reads files minfer did not produce. Python standard library only.

usage: make_handmade_gguf.py OUT.gguf [--version 2|3] [--small]

--small writes a 1-layer model with n_embd 16 and vocabulary 20 (a compact fuzzing seed).
Prints `params=N bytes=M` (total tensor elements, file size) on stdout.

File layout (all little-endian):
    magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
    kv_count x  (string key, u32 value_type, value)
    tensor_count x (string name, u32 n_dims, u64 dims[n_dims] innermost first, u32 type, u64 offset)
    zero padding up to a multiple of general.alignment
    tensor data; each offset is relative to the data start and a multiple of the alignment
A string is a u64 byte length followed by the bytes (no NUL). Version 2 and version 3 files are laid
out identically for little-endian data; only the version field differs.
"""
import random
import struct
import sys

# Metadata value types.
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = range(13)
SCALAR_FORMAT = {
    T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i", T_F32: "<f",
    T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d",
}

# Tensor types (ggml type ids) and their element sizes.
GGML_F32, GGML_F16 = 0, 1
ELEM_BYTES = {GGML_F32: 4, GGML_F16: 2}

ALIGNMENT = 64  # not GGUF's default of 32, so a reader that ignores general.alignment misplaces the data

# Model shape.
N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB, N_CTX = 64, 3, 4, 2, 96, 100, 4096
HEAD_DIM = N_EMBD // N_HEAD
N_KV = N_HEAD_KV * HEAD_DIM


def enc_string(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def enc_scalar(vtype, value):
    return struct.pack("<I", vtype) + struct.pack(SCALAR_FORMAT[vtype], value)


def enc_str_value(s):
    return struct.pack("<I", T_STRING) + enc_string(s)


def enc_array(elem_type, values):
    out = bytearray(struct.pack("<I", T_ARRAY))
    out += struct.pack("<IQ", elem_type, len(values))
    for v in values:
        if elem_type == T_STRING:
            out += enc_string(v)
        else:
            out += struct.pack(SCALAR_FORMAT[elem_type], v)
    return bytes(out)


def metadata(note):
    """The (key, encoded type+value) pairs, in file order. `note` pads the header to a chosen length."""
    tokens = []
    for i in range(N_VOCAB - 1):
        # Printable ASCII single characters first, then a few multi-byte (UTF-8) tokens.
        tokens.append(chr(0x21 + i) if i < 90 else "\u00e9t" + str(i))
    tokens.append("<|endoftext|>")
    token_types = [1] * (N_VOCAB - 1) + [3]  # 1 = normal, 3 = control
    scores = [-float(i) for i in range(N_VOCAB)]
    a = "qwen2."
    return [
        ("general.architecture", enc_str_value("qwen2")),
        ("general.name", enc_str_value("handmade")),
        ("general.alignment", enc_scalar(T_U32, ALIGNMENT)),
        (a + "context_length", enc_scalar(T_U32, N_CTX)),
        (a + "embedding_length", enc_scalar(T_U32, N_EMBD)),
        (a + "block_count", enc_scalar(T_U32, N_LAYER)),
        (a + "feed_forward_length", enc_scalar(T_U32, N_FF)),
        (a + "attention.head_count", enc_scalar(T_U32, N_HEAD)),
        # Signed on purpose: some converters write head counts as i32.
        (a + "attention.head_count_kv", enc_scalar(T_I32, N_HEAD_KV)),
        (a + "rope.freq_base", enc_scalar(T_F32, 1000000.0)),
        (a + "attention.layer_norm_rms_epsilon", enc_scalar(T_F32, 1e-6)),
        ("tokenizer.ggml.model", enc_str_value("gpt2")),
        ("tokenizer.ggml.tokens", enc_array(T_STRING, tokens)),
        ("tokenizer.ggml.token_type", enc_array(T_I32, token_types)),
        ("tokenizer.ggml.scores", enc_array(T_F32, scores)),
        ("tokenizer.ggml.eos_token_id", enc_scalar(T_U32, N_VOCAB - 1)),
        # One key of every remaining value type.
        ("handmade.u8", enc_scalar(T_U8, 200)),
        ("handmade.i8", enc_scalar(T_I8, -7)),
        ("handmade.u16", enc_scalar(T_U16, 65000)),
        ("handmade.i16", enc_scalar(T_I16, -30000)),
        ("handmade.u64", enc_scalar(T_U64, 1 << 40)),
        ("handmade.i64", enc_scalar(T_I64, -(1 << 40))),
        ("handmade.f64", enc_scalar(T_F64, 2.718281828459045)),
        ("handmade.bool", enc_scalar(T_BOOL, True)),
        ("handmade.note", enc_str_value(note)),
    ]


def tensor_specs():
    """(name, ggml type, dims innermost first), in file order."""
    specs = [("token_embd.weight", GGML_F16, [N_EMBD, N_VOCAB])]
    for i in range(N_LAYER):
        b = "blk.%d." % i
        specs += [
            (b + "attn_norm.weight", GGML_F32, [N_EMBD]),
            (b + "attn_q.weight", GGML_F16, [N_EMBD, N_EMBD]),
            (b + "attn_k.weight", GGML_F16, [N_EMBD, N_KV]),
            (b + "attn_v.weight", GGML_F16, [N_EMBD, N_KV]),
            (b + "attn_q.bias", GGML_F32, [N_EMBD]),
            (b + "attn_k.bias", GGML_F32, [N_KV]),
            (b + "attn_v.bias", GGML_F32, [N_KV]),
            (b + "attn_output.weight", GGML_F16, [N_EMBD, N_EMBD]),
            (b + "ffn_norm.weight", GGML_F32, [N_EMBD]),
            (b + "ffn_gate.weight", GGML_F16, [N_EMBD, N_FF]),
            (b + "ffn_up.weight", GGML_F16, [N_EMBD, N_FF]),
            (b + "ffn_down.weight", GGML_F16, [N_FF, N_EMBD]),
        ]
    specs += [
        ("output_norm.weight", GGML_F32, [N_EMBD]),
        ("output.weight", GGML_F16, [N_EMBD, N_VOCAB]),
    ]
    return specs


def n_elements(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def pad_to(n, align):
    return (n + align - 1) // align * align


def tensor_data(rng, name, ttype, dims):
    n = n_elements(dims)
    if name.endswith("norm.weight"):
        values = [1.0 + rng.gauss(0.0, 0.02) for _ in range(n)]
    else:
        values = [rng.gauss(0.0, 0.02) for _ in range(n)]
    fmt = "<%d%s" % (n, "f" if ttype == GGML_F32 else "e")
    return struct.pack(fmt, *values)


def build(version):
    rng = random.Random(20240601)
    specs = tensor_specs()
    blobs = [tensor_data(rng, name, ttype, dims) for name, ttype, dims in specs]
    for (name, ttype, dims), blob in zip(specs, blobs):
        assert len(blob) == n_elements(dims) * ELEM_BYTES[ttype], name

    # Offsets relative to the data section, each rounded up to the alignment.
    offsets, at = [], 0
    for blob in blobs:
        at = pad_to(at, ALIGNMENT)
        offsets.append(at)
        at += len(blob)

    def header(note):
        kvs = metadata(note)
        out = bytearray(b"GGUF")
        out += struct.pack("<IQQ", version, len(specs), len(kvs))
        for key, encoded in kvs:
            out += enc_string(key) + encoded
        for (name, ttype, dims), off in zip(specs, offsets):
            out += enc_string(name)
            out += struct.pack("<I", len(dims))
            for d in dims:
                out += struct.pack("<Q", d)
            out += struct.pack("<IQ", ttype, off)
        return bytes(out)

    # Choose the note's length so the header ends 8 bytes past a multiple of 64: the data then starts
    # 56 bytes later, where a reader rounding to the default 32 would put it 24 bytes too early.
    note = "written byte by byte by tests/make_handmade_gguf.py"
    base = len(header(note))
    note += "." * ((8 - base) % ALIGNMENT)
    head = header(note)
    assert len(head) % ALIGNMENT == 8 and pad_to(len(head), 32) != pad_to(len(head), ALIGNMENT)

    out = bytearray(head)
    out += b"\0" * (pad_to(len(out), ALIGNMENT) - len(out))
    data_start = len(out)
    for blob, off in zip(blobs, offsets):
        out += b"\0" * (data_start + off - len(out))
        out += blob
    params = sum(n_elements(dims) for _, _, dims in specs)
    return bytes(out), params


def main(argv):
    global N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB, HEAD_DIM, N_KV
    usage = "usage: make_handmade_gguf.py OUT.gguf [--version 2|3] [--small]"
    path, version = None, 3
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(usage)
            return 0
        if a == "--version":
            if i + 1 >= len(argv) or argv[i + 1] not in ("2", "3"):
                sys.stderr.write(usage + "\n")
                return 2
            version = int(argv[i + 1])
            i += 2
            continue
        if a == "--small":
            N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB = 16, 1, 2, 1, 16, 20
            HEAD_DIM = N_EMBD // N_HEAD
            N_KV = N_HEAD_KV * HEAD_DIM
            i += 1
            continue
        if path is not None or a.startswith("-"):
            sys.stderr.write(usage + "\n")
            return 2
        path = a
        i += 1
    if path is None:
        sys.stderr.write(usage + "\n")
        return 2
    data, params = build(version)
    with open(path, "wb") as f:
        f.write(data)
    print("params=%d bytes=%d" % (params, len(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
