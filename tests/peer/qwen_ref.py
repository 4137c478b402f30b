"""Qwen2/Qwen3 GGUF model description for the peer check: hyperparameters from GGUF metadata, the
GGUF -> Hugging Face tensor-name mapping, shape checks, and a plain float64 numpy forward pass that
serves as a second reference beside Hugging Face transformers.

Everything here is written from the model definitions (Qwen2: pre-norm decoder, RMSNorm, GQA
attention with q/k/v biases, NeoX-style RoPE, SwiGLU MLP; Qwen3: the same without biases, with a
per-head RMSNorm on q and k before RoPE, and a head_dim that need not be n_embd / n_head).

q/k weight order. llama.cpp's converter (convert_hf_to_gguf.py) permutes the rows of q_proj/k_proj
only for LLaMA-family models (LlamaModel.permute, "HF models permute some of the tensors, so we need to
undo that"), because those GGUF files use the interleaved (GPT-J style) RoPE pairs. Its Qwen2Model
(and Qwen3Model, a subclass) modify_tensors does no permutation: Qwen GGUF files keep Hugging Face's
row order, and llama.cpp runs them with NeoX-style RoPE (pairs i and i + head_dim/2), which is exactly
Hugging Face's rotate_half. So GGUF q/k rows are loaded into HF unchanged, and the numpy reference
rotates pairs (i, i + head_dim/2). Checked against llama.cpp's converter source with the search tool.
"""
import math


class ModelError(Exception):
    """The GGUF file does not describe a model this check can rebuild."""


SUPPORTED_ARCHS = ("qwen2", "qwen3")


class HParams:
    """Hyperparameters read from GGUF metadata (the peer reader's view, independent of minfer's)."""

    FIELDS = ("arch", "n_vocab", "n_ctx_train", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim",
              "n_ff", "rope_theta", "rms_eps", "tied", "has_qkv_bias", "has_qk_norm")

    def __init__(self, **kw):
        for f in self.FIELDS:
            setattr(self, f, kw[f])

    def as_dict(self):
        return {f: getattr(self, f) for f in self.FIELDS}

    def __repr__(self):
        return "HParams(%s)" % ", ".join("%s=%r" % (f, getattr(self, f)) for f in self.FIELDS)


def _int_key(g, suffix, default=None):
    v = g.arch_key(suffix, default)
    if v is None:
        raise ModelError("%s: missing metadata key %s.%s" % (g.path, g.architecture, suffix))
    if isinstance(v, bool) or not isinstance(v, int):
        raise ModelError("%s: %s.%s is %r, not an integer" % (g.path, g.architecture, suffix, v))
    return v


def _float_key(g, suffix, default=None):
    v = g.arch_key(suffix, default)
    if v is None:
        raise ModelError("%s: missing metadata key %s.%s" % (g.path, g.architecture, suffix))
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ModelError("%s: %s.%s is %r, not a number" % (g.path, g.architecture, suffix, v))
    return float(v)


def hparams_from_gguf(g):
    arch = g.architecture
    if arch not in SUPPORTED_ARCHS:
        raise ModelError("%s: architecture %r; this check knows %s" % (g.path, arch, ", ".join(SUPPORTED_ARCHS)))
    n_embd = _int_key(g, "embedding_length")
    n_head = _int_key(g, "attention.head_count")
    n_head_kv = _int_key(g, "attention.head_count_kv", n_head)
    if n_head <= 0 or n_head_kv <= 0 or n_head % n_head_kv != 0:
        raise ModelError("%s: head_count %d is not a multiple of head_count_kv %d" % (g.path, n_head, n_head_kv))
    head_dim = _int_key(g, "attention.key_length", n_embd // n_head)
    v_len = _int_key(g, "attention.value_length", head_dim)
    if v_len != head_dim:
        raise ModelError("%s: value_length %d != key_length %d (not a Qwen2/Qwen3 shape)" % (g.path, v_len, head_dim))
    rope_dims = g.arch_key("rope.dimension_count")
    if rope_dims is not None and rope_dims != head_dim:
        raise ModelError("%s: partial RoPE (rope.dimension_count %d of head_dim %d) is not modelled"
                         % (g.path, rope_dims, head_dim))
    scaling = g.arch_key("rope.scaling.type")
    if scaling not in (None, "none"):
        raise ModelError("%s: RoPE scaling %r is not modelled" % (g.path, scaling))
    tokens = g.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ModelError("%s: no tokenizer.ggml.tokens" % g.path)
    names = g.tensors
    return HParams(
        arch=arch,
        n_vocab=len(tokens),
        n_ctx_train=_int_key(g, "context_length"),
        n_embd=n_embd,
        n_layer=_int_key(g, "block_count"),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ff=_int_key(g, "feed_forward_length"),
        rope_theta=_float_key(g, "rope.freq_base", 10000.0),
        rms_eps=_float_key(g, "attention.layer_norm_rms_epsilon"),
        tied="output.weight" not in names,
        has_qkv_bias="blk.0.attn_q.bias" in names,
        has_qk_norm="blk.0.attn_q_norm.weight" in names,
    )


# GGUF per-layer tensor name -> (HF per-layer module path, expected GGUF dims as a function of hp)
_LAYER_MAP = {
    "attn_norm.weight": ("input_layernorm.weight", lambda h: [h.n_embd]),
    "attn_q.weight": ("self_attn.q_proj.weight", lambda h: [h.n_embd, h.n_head * h.head_dim]),
    "attn_k.weight": ("self_attn.k_proj.weight", lambda h: [h.n_embd, h.n_head_kv * h.head_dim]),
    "attn_v.weight": ("self_attn.v_proj.weight", lambda h: [h.n_embd, h.n_head_kv * h.head_dim]),
    "attn_q.bias": ("self_attn.q_proj.bias", lambda h: [h.n_head * h.head_dim]),
    "attn_k.bias": ("self_attn.k_proj.bias", lambda h: [h.n_head_kv * h.head_dim]),
    "attn_v.bias": ("self_attn.v_proj.bias", lambda h: [h.n_head_kv * h.head_dim]),
    "attn_q_norm.weight": ("self_attn.q_norm.weight", lambda h: [h.head_dim]),
    "attn_k_norm.weight": ("self_attn.k_norm.weight", lambda h: [h.head_dim]),
    "attn_output.weight": ("self_attn.o_proj.weight", lambda h: [h.n_head * h.head_dim, h.n_embd]),
    "ffn_norm.weight": ("post_attention_layernorm.weight", lambda h: [h.n_embd]),
    "ffn_gate.weight": ("mlp.gate_proj.weight", lambda h: [h.n_embd, h.n_ff]),
    "ffn_up.weight": ("mlp.up_proj.weight", lambda h: [h.n_embd, h.n_ff]),
    "ffn_down.weight": ("mlp.down_proj.weight", lambda h: [h.n_ff, h.n_embd]),
}
_GLOBAL_MAP = {
    "token_embd.weight": ("model.embed_tokens.weight", lambda h: [h.n_embd, h.n_vocab]),
    "output_norm.weight": ("model.norm.weight", lambda h: [h.n_embd]),
    "output.weight": ("lm_head.weight", lambda h: [h.n_embd, h.n_vocab]),
}


def required_layer_tensors(hp):
    names = ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
             "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"]
    if hp.arch == "qwen2":
        names += ["attn_q.bias", "attn_k.bias", "attn_v.bias"]
    if hp.arch == "qwen3":
        names += ["attn_q_norm.weight", "attn_k_norm.weight"]
    return names


def hf_name(gguf_name):
    """The Hugging Face state-dict key of a GGUF tensor name, or None if unknown."""
    if gguf_name in _GLOBAL_MAP:
        return _GLOBAL_MAP[gguf_name][0]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER_MAP:
        return "model.layers.%s.%s" % (parts[1], _LAYER_MAP[parts[2]][0])
    return None


def expected_dims(gguf_name, hp):
    if gguf_name in _GLOBAL_MAP:
        return _GLOBAL_MAP[gguf_name][1](hp)
    parts = gguf_name.split(".", 2)
    return _LAYER_MAP[parts[2]][1](hp)


def check_tensors(g, hp):
    """Every tensor known and of the shape the metadata implies; every required tensor present.
    Returns a list of problems (empty when the file is consistent)."""
    problems = []
    for name, t in g.tensors.items():
        if hf_name(name) is None:
            problems.append("unexpected tensor %s" % name)
            continue
        parts = name.split(".", 2)
        if parts[0] == "blk" and int(parts[1]) >= hp.n_layer:
            problems.append("tensor %s beyond block_count %d" % (name, hp.n_layer))
            continue
        want = expected_dims(name, hp)
        if list(t.dims) != want:
            problems.append("tensor %s has dims %s, metadata implies %s" % (name, list(t.dims), want))
    required = ["token_embd.weight", "output_norm.weight"]
    for i in range(hp.n_layer):
        required += ["blk.%d.%s" % (i, n) for n in required_layer_tensors(hp)]
    for name in required:
        if name not in g.tensors:
            problems.append("missing tensor %s" % name)
    return problems


def load_weights(g, hp, dtype="float64"):
    """GGUF tensors as numpy arrays (numpy layout, see gguf_read) keyed by Hugging Face name.
    Tied models get lm_head.weight = the embedding (the same array)."""
    out = {}
    for name in g.tensors:
        out[hf_name(name)] = g.tensor_array(name, dtype=dtype)
    if hp.tied:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


# ---- numpy reference forward pass -------------------------------------------------------------

def _rms_norm(np, x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope_neox(np, x, positions, theta):
    """x: (L, heads, head_dim). Rotates pairs (i, i + head_dim/2) by positions * theta^(-2i/head_dim)."""
    d = x.shape[-1]
    half = d // 2
    inv_freq = theta ** (-np.arange(0, half, dtype=np.float64) * 2.0 / d)
    ang = positions[:, None].astype(np.float64) * inv_freq[None, :]      # (L, half)
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    x1 = x[..., :half]
    x2 = x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def numpy_logits(hp, w, tokens):
    """Logits (L, n_vocab) in float64 for every position of `tokens`, from the weights `w`
    (load_weights output; any float dtype, computed in float64)."""
    import numpy as np
    f64 = np.float64
    tokens = np.asarray(tokens, dtype=np.int64)
    L = tokens.shape[0]
    pos = np.arange(L)
    hd, nh, nkv = hp.head_dim, hp.n_head, hp.n_head_kv
    group = nh // nkv
    mask = np.triu(np.full((L, L), -np.inf), k=1)
    x = w["model.embed_tokens.weight"].astype(f64)[tokens]                 # (L, n_embd)
    for i in range(hp.n_layer):
        p = "model.layers.%d." % i

        def W(n):
            return w[p + n].astype(f64)

        h = _rms_norm(np, x, W("input_layernorm.weight"), hp.rms_eps)
        q = h @ W("self_attn.q_proj.weight").T
        k = h @ W("self_attn.k_proj.weight").T
        v = h @ W("self_attn.v_proj.weight").T
        if p + "self_attn.q_proj.bias" in w:
            q = q + W("self_attn.q_proj.bias")
            k = k + W("self_attn.k_proj.bias")
            v = v + W("self_attn.v_proj.bias")
        q = q.reshape(L, nh, hd)
        k = k.reshape(L, nkv, hd)
        v = v.reshape(L, nkv, hd)
        if p + "self_attn.q_norm.weight" in w:
            q = _rms_norm(np, q, W("self_attn.q_norm.weight"), hp.rms_eps)
            k = _rms_norm(np, k, W("self_attn.k_norm.weight"), hp.rms_eps)
        q = _rope_neox(np, q, pos, hp.rope_theta)
        k = _rope_neox(np, k, pos, hp.rope_theta)
        att = np.empty((L, nh, hd), dtype=f64)
        scale = 1.0 / math.sqrt(hd)
        for head in range(nh):
            kv = head // group                                             # GQA: query head -> kv head
            s = (q[:, head, :] @ k[:, kv, :].T) * scale + mask             # (L, L)
            s = s - s.max(axis=-1, keepdims=True)
            e = np.exp(s)
            att[:, head, :] = (e / e.sum(axis=-1, keepdims=True)) @ v[:, kv, :]
        o = att.reshape(L, nh * hd) @ W("self_attn.o_proj.weight").T
        if p + "self_attn.o_proj.bias" in w:
            o = o + W("self_attn.o_proj.bias")
        x = x + o
        h = _rms_norm(np, x, W("post_attention_layernorm.weight"), hp.rms_eps)
        gate = h @ W("mlp.gate_proj.weight").T
        up = h @ W("mlp.up_proj.weight").T
        act = gate / (1.0 + np.exp(-gate)) * up                             # SiLU(gate) * up
        x = x + act @ W("mlp.down_proj.weight").T
    x = _rms_norm(np, x, w["model.norm.weight"].astype(f64), hp.rms_eps)
    return x @ w["lm_head.weight"].astype(f64).T
