"""ctypes access to libminfer.so for the peer check; Python standard library only.

Declares just the part of include/minfer.h that tests/peer/compare_hf.py uses. Every function is
looked up when first called, so a library built before a function existed still loads and the failure
names the missing symbol. A non-zero minfer_status becomes a MinferError carrying the status name
(minfer_status_string) and the library's message (minfer_last_error).
"""
import array
import ctypes
import os

MINFER_OK = 0
MINFER_ERR_UNSUPPORTED = 4

_c_model_p = ctypes.c_void_p
_c_context_p = ctypes.c_void_p

# name -> (restype, argtypes); mirrors include/minfer.h
_SIGNATURES = {
    # tests/libminfer_testhooks.so only (the mutation check); libminfer.so does not export it
    "minfer_testing_plant": (ctypes.c_int, [ctypes.c_char_p]),
    "minfer_version": (ctypes.c_char_p, []),
    "minfer_build_info": (ctypes.c_char_p, []),
    "minfer_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "minfer_last_error": (ctypes.c_char_p, []),
    "minfer_open_with_options": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
                                                ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                                ctypes.POINTER(_c_model_p)]),
    "minfer_close": (None, [_c_model_p]),
    "minfer_model_architecture": (ctypes.c_char_p, [_c_model_p]),
    "minfer_model_n_vocab": (ctypes.c_int32, [_c_model_p]),
    "minfer_model_n_ctx_train": (ctypes.c_int32, [_c_model_p]),
    "minfer_model_n_embd": (ctypes.c_int32, [_c_model_p]),
    "minfer_model_n_layer": (ctypes.c_int32, [_c_model_p]),
    "minfer_model_n_head": (ctypes.c_int32, [_c_model_p]),
    "minfer_model_n_head_kv": (ctypes.c_int32, [_c_model_p]),
    "minfer_model_head_dim": (ctypes.c_int32, [_c_model_p]),
    "minfer_model_n_ff": (ctypes.c_int32, [_c_model_p]),
    "minfer_model_rope_freq_base": (ctypes.c_double, [_c_model_p]),
    "minfer_model_rms_norm_eps": (ctypes.c_double, [_c_model_p]),
    "minfer_model_tied_output": (ctypes.c_int32, [_c_model_p]),
    "minfer_context_create": (ctypes.c_int, [_c_model_p, ctypes.POINTER(_c_context_p)]),
    "minfer_context_free": (None, [_c_context_p]),
    "minfer_context_n_ctx": (ctypes.c_int32, [_c_context_p]),
    "minfer_context_n_past": (ctypes.c_int32, [_c_context_p]),
    "minfer_prefill": (ctypes.c_int, [_c_context_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t]),
    "minfer_decode": (ctypes.c_int, [_c_context_p, ctypes.POINTER(ctypes.c_int32)]),
    "minfer_context_logits": (ctypes.c_int, [_c_context_p, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t]),
    "minfer_context_reset": (ctypes.c_int, [_c_context_p]),
}


# every function above; compare_hf.py refuses a library that lacks one
# Every symbol libminfer.so must export: all but the test-only hook (a plain library has none, and the
# peer check refuses a library missing any of these).
REQUIRED = tuple(name for name in _SIGNATURES if name != "minfer_testing_plant")


class MinferError(Exception):
    """A failed minfer call. `status` is the minfer_status value (None for a missing symbol)."""

    def __init__(self, call, status, status_name, message):
        self.call = call
        self.status = status
        self.status_name = status_name
        self.message = message
        if status is None:
            text = "%s: %s" % (call, message)
        else:
            text = "%s returned %s (%d): %s" % (call, status_name, status, message or "(no message)")
        super().__init__(text)

    @property
    def unsupported(self):
        return self.status == MINFER_ERR_UNSUPPORTED


def _text(b):
    return b.decode("utf-8", errors="replace") if b is not None else ""


class Library:
    """The loaded libminfer.so."""

    def __init__(self, path):
        if not os.path.exists(path):
            raise FileNotFoundError("no minfer library at %s (build minfer first)" % path)
        self.path = path
        self._lib = ctypes.CDLL(os.path.abspath(path))
        self._fns = {}

    def fn(self, name):
        f = self._fns.get(name)
        if f is None:
            try:
                f = getattr(self._lib, name)
            except AttributeError:
                raise MinferError(name, None, None,
                                  "%s does not export %s (built before this function existed?)"
                                  % (self.path, name)) from None
            restype, argtypes = _SIGNATURES[name]
            f.restype = restype
            f.argtypes = argtypes
            self._fns[name] = f
        return f

    def has(self, name):
        return hasattr(self._lib, name)

    def check(self, status, call):
        if status != MINFER_OK:
            name = _text(self.fn("minfer_status_string")(status))
            message = _text(self.fn("minfer_last_error")())
            raise MinferError(call, status, name, message)

    def version(self):
        return _text(self.fn("minfer_version")())

    def build_info(self):
        return _text(self.fn("minfer_build_info")())

    def open(self, path, options=None):
        """Opens a model with minfer_open_with_options; `options` is a dict of str -> str."""
        options = dict(options or {})
        keys = [k.encode() for k in options]
        values = [str(v).encode() for v in options.values()]
        n = len(keys)
        key_arr = (ctypes.c_char_p * max(n, 1))(*keys)
        val_arr = (ctypes.c_char_p * max(n, 1))(*values)
        handle = _c_model_p()
        st = self.fn("minfer_open_with_options")(os.fsencode(path), key_arr, val_arr, n, ctypes.byref(handle))
        self.check(st, "minfer_open_with_options(%s, %s)" % (path, options))
        if not handle.value:
            raise MinferError("minfer_open_with_options", None, None, "returned MINFER_OK but no model")
        return Model(self, handle)


class Model:
    def __init__(self, lib, handle):
        self.lib = lib
        self.handle = handle

    def close(self):
        if self.handle is not None and self.handle.value:
            self.lib.fn("minfer_close")(self.handle)
        self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _get(self, name):
        return self.lib.fn(name)(self.handle)

    @property
    def n_vocab(self):
        return self._get("minfer_model_n_vocab")

    def hparams(self):
        """minfer's own view of the hyperparameters, keyed like compare_hf.HParams fields."""
        return {
            "arch": _text(self._get("minfer_model_architecture")),
            "n_vocab": self._get("minfer_model_n_vocab"),
            "n_ctx_train": self._get("minfer_model_n_ctx_train"),
            "n_embd": self._get("minfer_model_n_embd"),
            "n_layer": self._get("minfer_model_n_layer"),
            "n_head": self._get("minfer_model_n_head"),
            "n_head_kv": self._get("minfer_model_n_head_kv"),
            "head_dim": self._get("minfer_model_head_dim"),
            "n_ff": self._get("minfer_model_n_ff"),
            "rope_theta": self._get("minfer_model_rope_freq_base"),
            "rms_eps": self._get("minfer_model_rms_norm_eps"),
            "tied": bool(self._get("minfer_model_tied_output")),
        }

    def context(self):
        handle = _c_context_p()
        st = self.lib.fn("minfer_context_create")(self.handle, ctypes.byref(handle))
        self.lib.check(st, "minfer_context_create")
        return Context(self, handle)


class Context:
    def __init__(self, model, handle):
        self.model = model
        self.lib = model.lib
        self.handle = handle
        self.n_vocab = model.n_vocab

    def free(self):
        if self.handle is not None and self.handle.value:
            self.lib.fn("minfer_context_free")(self.handle)
        self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    @property
    def n_past(self):
        return self.lib.fn("minfer_context_n_past")(self.handle)

    @property
    def n_ctx(self):
        return self.lib.fn("minfer_context_n_ctx")(self.handle)

    def reset(self):
        self.lib.check(self.lib.fn("minfer_context_reset")(self.handle), "minfer_context_reset")

    def prefill(self, tokens):
        tokens = list(tokens)
        buf = (ctypes.c_int32 * max(len(tokens), 1))(*tokens)
        st = self.lib.fn("minfer_prefill")(self.handle, buf, len(tokens))
        self.lib.check(st, "minfer_prefill(%d tokens)" % len(tokens))

    def decode(self):
        tok = ctypes.c_int32(-1)
        st = self.lib.fn("minfer_decode")(self.handle, ctypes.byref(tok))
        self.lib.check(st, "minfer_decode")
        return tok.value

    def logits(self):
        """The logits of the last processed position, as array('f') of n_vocab floats."""
        n = self.n_vocab
        buf = (ctypes.c_float * n)()
        st = self.lib.fn("minfer_context_logits")(self.handle, buf, n)
        self.lib.check(st, "minfer_context_logits")
        return array.array("f", bytes(buf))
