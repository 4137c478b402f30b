#!/usr/bin/env python3
"""Peer check: minfer's logits against Hugging Face transformers, end to end.

    python3 tests/peer/compare_hf.py --lib build/libminfer.so --minfer build/minfer --out DIR

For each synthetic model (`minfer synth`, presets x weight mixes) this script
  1. reads the GGUF file with its own reader (gguf_read.py), derives the hyperparameters from the
     metadata and checks every tensor's shape against them and against minfer's own view;
  2. rebuilds the model in Hugging Face transformers (Qwen2ForCausalLM / Qwen3ForCausalLM, float64,
     eager attention) from those tensors — the reference;
  3. runs minfer through its C API (ctypes on libminfer.so): prefill of seeded prompts, then greedy
     decode steps, reading the logits after each call;
  4. compares the logits of each position: max relative error max|a-b|/max|b|, relative L2
     ||a-b||/||b||, and whether the argmax agrees (a = minfer, b = reference).
It writes OUT/peer.md (a markdown table, also printed last) and OUT/peer.json (every number).

Exit status: 0 every comparison passed; 1 a comparison or a check failed; 2 the setup is broken
(library, binary or Python packages missing); 3 nothing failed, but some or all comparisons could not
be made because minfer's forward pass reported MINFER_ERR_UNSUPPORTED (an engine not yet built).

Needs numpy. The Hugging Face reference needs torch and transformers (no network access: the models
are built from the GGUF tensors, nothing is downloaded). `--reference numpy` uses a plain float64
numpy implementation instead (qwen_ref.py), and `--reference both` runs the two and also reports how
well they agree, which checks this script's own weight mapping.
"""
import argparse
import datetime
import faulthandler
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # keep the source tree clean of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import gguf_read  # noqa: E402
import minfer_capi  # noqa: E402
import qwen_ref  # noqa: E402

DEFAULT_PRESETS = "qwen2-tiny,qwen2-tiny-tied,qwen3-tiny"
DEFAULT_MIXES = "f32,f16"
DEFAULT_BOUNDS = "f32=1e-4,f16=1e-4,bf16=1e-4"


class SetupError(Exception):
    pass


# ---- Hugging Face reference -------------------------------------------------------------------

def _init_params(cls):
    import inspect
    names = set()
    try:
        names |= set(inspect.signature(cls.__init__).parameters)
    except (TypeError, ValueError):
        pass
    names |= set(getattr(cls, "__dataclass_fields__", {}) or {})
    return names


class HFReference:
    """A transformers model rebuilt from GGUF tensors, float64."""

    def __init__(self, hp, weights, device, attn="eager"):
        import torch
        import transformers
        self.torch = torch
        self.device = device
        self.notes = []
        if hp.arch == "qwen2":
            from transformers import Qwen2Config as Config, Qwen2ForCausalLM as Model
        elif hp.arch == "qwen3":
            try:
                from transformers import Qwen3Config as Config, Qwen3ForCausalLM as Model
            except ImportError:
                raise SetupError("transformers %s has no Qwen3 (added in 4.51)" % transformers.__version__)
        else:
            raise qwen_ref.ModelError("no Hugging Face class for %s" % hp.arch)

        params = _init_params(Config)
        kw = dict(
            vocab_size=hp.n_vocab,
            hidden_size=hp.n_embd,
            intermediate_size=hp.n_ff,
            num_hidden_layers=hp.n_layer,
            num_attention_heads=hp.n_head,
            num_key_value_heads=hp.n_head_kv,
            hidden_act="silu",
            max_position_embeddings=hp.n_ctx_train,
            rms_norm_eps=hp.rms_eps,
            tie_word_embeddings=hp.tied,
            use_sliding_window=False,
            attention_dropout=0.0,
        )
        # transformers 5 keeps RoPE settings in `rope_parameters`; 4.x takes `rope_theta`.
        if "rope_parameters" in params:
            kw["rope_parameters"] = {"rope_type": "default", "rope_theta": hp.rope_theta}
        else:
            kw["rope_theta"] = hp.rope_theta
            kw["rope_scaling"] = None
        late_head_dim = False
        if hp.arch == "qwen3":
            kw["head_dim"] = hp.head_dim
            # Qwen3's attention_bias adds biases to q, k, v and o together; qwen3 GGUF files have none.
            kw["attention_bias"] = hp.has_qkv_bias
        elif hp.head_dim != hp.n_embd // hp.n_head:
            # Qwen2Config has no head_dim field; Qwen2Attention reads getattr(config, "head_dim", ...).
            if "head_dim" in params or "kwargs" in params:
                kw["head_dim"] = hp.head_dim
            else:
                late_head_dim = True
        try:
            config = Config(attn_implementation=attn, **kw)
        except TypeError:
            config = Config(**kw)
        if late_head_dim:
            config.head_dim = hp.head_dim
        try:
            config._attn_implementation = attn
        except Exception:
            pass
        model = Model(config)
        if getattr(model.config, "_attn_implementation", attn) != attn and hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(attn)
        self.attn_implementation = getattr(model.config, "_attn_implementation", "?")
        if self.attn_implementation != attn:
            self.notes.append("attention implementation is %s, not %s" % (self.attn_implementation, attn))
        model = model.to(torch.float64)
        model.eval()

        # State dict: every key the model has, from the GGUF tensors.
        sd_keys = set(model.state_dict().keys())
        provided = {k: torch.from_numpy(v) for k, v in weights.items()}
        if hp.tied and "lm_head.weight" not in sd_keys:
            provided.pop("lm_head.weight", None)
        current = model.state_dict()
        for k in sorted(sd_keys - set(provided)):
            # Biases HF's class always has but the file lacks are zero (Qwen2 q/k/v without bias,
            # Qwen3 o_proj with attention_bias): that is what the file's model computes.
            if k.endswith(".bias") and ".self_attn." in k:
                provided[k] = torch.zeros_like(current[k], dtype=torch.float64)
                self.notes.append("zero %s" % k)
        missing = sd_keys - set(provided)
        unexpected = set(provided) - sd_keys
        if missing or unexpected:
            raise qwen_ref.ModelError("HF state dict mismatch: missing %s, unexpected %s"
                                      % (sorted(missing), sorted(unexpected)))
        for k, t in provided.items():
            if tuple(current[k].shape) != tuple(t.shape):
                raise qwen_ref.ModelError("HF %s has shape %s, GGUF gives %s"
                                          % (k, tuple(current[k].shape), tuple(t.shape)))
        model.load_state_dict(provided, strict=True)
        model = model.to(device)
        self.model = model
        self._verify(hp, weights)

    def _verify(self, hp, weights):
        """Checks that the settings reached the modules (versions differ in where they read them)."""
        torch = self.torch
        m = self.model
        # weights, and tying (or not) of the output projection
        emb = m.get_input_embeddings().weight.detach().cpu()
        out = m.get_output_embeddings().weight.detach().cpu()
        if not torch.equal(emb, torch.from_numpy(weights["model.embed_tokens.weight"])):
            raise qwen_ref.ModelError("HF embedding differs from token_embd.weight after loading")
        if not torch.equal(out, torch.from_numpy(weights["lm_head.weight"])):
            raise qwen_ref.ModelError("HF lm_head differs from %s after loading"
                                      % ("token_embd.weight (tied)" if hp.tied else "output.weight"))
        # RoPE frequencies and scaling
        want = 1.0 / (hp.rope_theta ** (torch.arange(0, hp.head_dim, 2, dtype=torch.float64) / hp.head_dim))
        seen = 0
        for name, mod in m.named_modules():
            inv = getattr(mod, "inv_freq", None)
            if isinstance(inv, torch.Tensor):
                seen += 1
                got = inv.detach().to("cpu", torch.float64)
                if got.shape != want.shape or float(((got - want).abs() / want).max()) > 1e-5:
                    raise qwen_ref.ModelError("HF %s.inv_freq does not match rope theta %g / head_dim %d"
                                              % (name, hp.rope_theta, hp.head_dim))
                scaling = getattr(mod, "attention_scaling", 1.0)
                if abs(float(scaling) - 1.0) > 1e-12:
                    raise qwen_ref.ModelError("HF %s.attention_scaling is %r, not 1" % (name, scaling))
        if seen == 0:
            self.notes.append("no inv_freq buffer found: RoPE theta not verified")
        # attention geometry
        for name, mod in m.named_modules():
            if hasattr(mod, "q_proj") and hasattr(mod, "head_dim"):
                if mod.head_dim != hp.head_dim:
                    raise qwen_ref.ModelError("HF %s.head_dim is %d, GGUF says %d" % (name, mod.head_dim, hp.head_dim))
                if getattr(mod, "sliding_window", None):
                    raise qwen_ref.ModelError("HF %s uses a sliding window" % name)
            if hasattr(mod, "variance_epsilon"):
                if abs(mod.variance_epsilon - hp.rms_eps) > 1e-12 * max(1.0, hp.rms_eps):
                    raise qwen_ref.ModelError("HF %s eps %g != %g" % (name, mod.variance_epsilon, hp.rms_eps))

    def logits(self, tokens):
        """(L, n_vocab) float64 numpy logits for every position."""
        torch = self.torch
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
        with torch.no_grad():
            out = self.model(input_ids=ids, use_cache=False)
        lg = out.logits[0]
        self.logits_dtype = str(lg.dtype)
        return lg.detach().to("cpu", torch.float64).numpy()


class NumpyReference:
    def __init__(self, hp, weights):
        self.hp = hp
        self.weights = weights
        self.notes = []

    def logits(self, tokens):
        return qwen_ref.numpy_logits(self.hp, self.weights, tokens)


# ---- metrics ----------------------------------------------------------------------------------

def compare(np, a, b, margin_bound):
    """a: minfer's logits, b: the reference's (1-D). Returns a dict of metrics."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    res = {"finite": bool(np.isfinite(a).all() and np.isfinite(b).all())}
    if not res["finite"]:
        res.update(max_rel=float("nan"), rel_l2=float("nan"), argmax_a=-1, argmax_b=-1, agree=False,
                   margin=float("nan"), argmax_fail=True)
        return res
    d = a - b
    scale = float(np.abs(b).max())
    norm = float(np.linalg.norm(b))
    res["max_rel"] = float(np.abs(d).max()) / scale if scale > 0 else float(np.abs(d).max())
    res["rel_l2"] = float(np.linalg.norm(d)) / norm if norm > 0 else float(np.linalg.norm(d))
    ia, ib = int(np.argmax(a)), int(np.argmax(b))
    top2 = np.sort(b)[-2:] if b.shape[0] >= 2 else np.array([b[0], b[0]])
    res["argmax_a"], res["argmax_b"] = ia, ib
    res["agree"] = ia == ib
    # the reference's top-2 gap, relative to its largest magnitude
    res["margin"] = float(top2[1] - top2[0]) / scale if scale > 0 else 0.0
    res["argmax_fail"] = (not res["agree"]) and res["margin"] > margin_bound
    return res


# ---- running ----------------------------------------------------------------------------------

def parse_bounds(text, default):
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" not in item:
            raise SetupError("--bounds item %r is not MIX=VALUE" % item)
        k, v = item.split("=", 1)
        out[k.strip()] = float(v)
    return lambda mix: out.get(mix, default)


def make_prompts(seed, lengths, n_vocab):
    rng = random.Random(seed)
    return [[rng.randrange(n_vocab) for _ in range(n)] for n in lengths]


def synth(minfer, preset, mix, seed, path):
    cmd = [minfer, "synth", "--preset", preset, "--mix", mix, "--seed", str(seed), "-o", path, "--quiet"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode != 0:
        raise SetupError("%s failed (exit %d): %s" % (" ".join(cmd), p.returncode, (p.stderr or p.stdout).strip()))


def check_minfer_hparams(mh, hp):
    problems = []
    for k, mine in hp.as_dict().items():
        if k not in mh:
            continue
        theirs = mh[k]
        if isinstance(mine, float):
            if not math.isclose(mine, theirs, rel_tol=1e-6):
                problems.append("%s: peer reader %r, minfer %r" % (k, mine, theirs))
        elif mine != theirs:
            problems.append("%s: peer reader %r, minfer %r" % (k, mine, theirs))
    return problems


class Row:
    def __init__(self, model, mix, plen, check):
        self.model, self.mix, self.plen, self.check = model, mix, plen, check
        self.max_rel = None
        self.rel_l2 = None
        self.agree = ""
        self.status = "PASS"   # PASS, FAIL, UNSUPPORTED, SKIP, ERROR (setup)
        self.note = ""
        self.detail = {}

    def fail(self, note, status="FAIL"):
        self.status = status
        self.note = (self.note + "; " if self.note else "") + note

    def as_dict(self):
        return {"model": self.model, "mix": self.mix, "prompt_len": self.plen, "check": self.check,
                "max_rel_err": self.max_rel, "rel_l2": self.rel_l2, "argmax_agree": self.agree,
                "status": self.status, "note": self.note, "detail": self.detail}


def run_minfer(np, ctx, prompt, n_decode, split_at):
    """Prefill, greedy decodes, and (split_at > 0) a second prefill in two parts.
    Returns (logits list [after prefill, after each decode], tokens, split logits or None, error or None);
    on an error the lists hold what ran before it."""
    logits, tokens, split = [], [], None
    try:
        ctx.reset()
        ctx.prefill(prompt)
        logits.append(np.frombuffer(ctx.logits(), dtype=np.float32).copy())
        for _ in range(n_decode):
            tok = ctx.decode()
            tokens.append(tok)
            logits.append(np.frombuffer(ctx.logits(), dtype=np.float32).copy())
        n_past = ctx.n_past
        if n_past != len(prompt) + n_decode:
            raise RuntimeError("minfer_context_n_past is %d after %d prompt tokens and %d decodes"
                               % (n_past, len(prompt), n_decode))
        if split_at:
            ctx.reset()
            ctx.prefill(prompt[:split_at])
            ctx.prefill(prompt[split_at:])
            split = np.frombuffer(ctx.logits(), dtype=np.float32).copy()
    except (minfer_capi.MinferError, RuntimeError) as e:
        return logits, tokens, split, e
    return logits, tokens, split, None


def judge(row, c, bound, args):
    """Fills a row from compare() metrics and applies the bounds."""
    row.max_rel, row.rel_l2 = c["max_rel"], c["rel_l2"]
    row.agree = "yes" if c["agree"] else "no (margin %.1e)" % c["margin"]
    row.detail = c
    if not c["finite"]:
        row.fail("NaN/Inf in logits")
        return
    if c["rel_l2"] > bound:
        row.fail("rel L2 > %g" % bound)
    if args.max_rel_bound is not None and c["max_rel"] > args.max_rel_bound:
        row.fail("max rel err > %g" % args.max_rel_bound)
    if c["argmax_fail"]:
        row.fail("argmax differs with top-2 margin %.1e > %g" % (c["margin"], args.argmax_margin))


def check_prompt(np, args, preset, mix, bound, prompt, ctx, refs):
    """Runs one prompt through minfer and the reference(s). Returns (rows, number of comparisons)."""
    n = len(prompt)
    split_at = (n * 3) // 5 if n >= 2 else 0
    prow = Row(preset, mix, n, "prefill")
    drow = Row(preset, mix, n, "decode x%d" % args.decode_steps)
    srow = Row(preset, mix, n, "prefill %d+%d" % (split_at, n - split_at)) if split_at else None
    m_logits, m_tokens, m_split, m_err = run_minfer(np, ctx, prompt, args.decode_steps, split_at)
    # One reference forward over prompt + minfer's tokens: by causality its position n - 1 is the
    # prompt's last position, and position n - 1 + k follows the k-th decoded token.
    seq = list(prompt) + list(m_tokens)
    try:
        ref_all = {name: r.logits(seq) for name, r in refs}
    except Exception as e:  # the reference itself failed: report it, do not hide it
        prow.fail("reference failed: %s: %s" % (type(e).__name__, e))
        return [prow], 0
    ref = ref_all[refs[0][0]]
    rows, compared = [], 0

    if m_logits:
        judge(prow, compare(np, m_logits[0], ref[n - 1], args.argmax_margin), bound, args)
        compared += 1
    rows.append(prow)

    steps = []
    for k in range(1, len(m_logits)):
        ck = compare(np, m_logits[k], ref[n - 1 + k], args.argmax_margin)
        # the token minfer picked must be the argmax (lowest id on ties) of the logits it reported before
        ck["token"] = m_tokens[k - 1]
        ck["greedy_ok"] = m_tokens[k - 1] == int(np.argmax(m_logits[k - 1]))
        steps.append(ck)
        compared += 1
    if steps:
        drow.max_rel = max(s["max_rel"] for s in steps)
        drow.rel_l2 = max(s["rel_l2"] for s in steps)
        drow.agree = "%d/%d" % (sum(s["agree"] for s in steps), len(steps))
        drow.detail = {"steps": steps, "tokens": m_tokens}
        if not all(s["finite"] for s in steps):
            drow.fail("NaN/Inf in logits")
        else:
            if drow.rel_l2 > bound:
                drow.fail("rel L2 > %g" % bound)
            if args.max_rel_bound is not None and drow.max_rel > args.max_rel_bound:
                drow.fail("max rel err > %g" % args.max_rel_bound)
            if any(s["argmax_fail"] for s in steps):
                drow.fail("argmax differs where the top-2 margin is large")
        bad = [s["token"] for s in steps if not s["greedy_ok"]]
        if bad:
            drow.fail("minfer_decode picked %s, not the argmax of its own logits" % bad)
    if m_logits and args.decode_steps > 0:
        rows.append(drow)

    if srow is not None and m_split is not None:
        judge(srow, compare(np, m_split, ref[n - 1], args.argmax_margin), bound, args)
        compared += 1
        rows.append(srow)

    if m_err is not None:
        # blame the stage that failed: prefill, a decode step, or the split prefill
        st = "UNSUPPORTED" if getattr(m_err, "unsupported", False) else "FAIL"
        if not m_logits:
            target = prow
        elif len(m_logits) < args.decode_steps + 1 or srow is None:
            target = drow
            if drow not in rows:
                rows.append(drow)
        else:
            target = srow
            if srow not in rows:
                rows.append(srow)
        target.fail("minfer: %s" % m_err, st)

    # the two references against each other, over every position of the sequence
    if len(refs) == 2:
        a, b = ref_all[refs[1][0]], ref_all[refs[0][0]]
        rrow = Row(preset, mix, n, "%s vs %s, %d pos" % (refs[1][0], refs[0][0], len(seq)))
        worst = None
        agree = True
        for pos in range(len(seq)):
            cr = compare(np, a[pos], b[pos], args.argmax_margin)
            agree = agree and cr["agree"]
            if worst is None or not cr["finite"] or cr["rel_l2"] > worst["rel_l2"]:
                worst = cr
            if not cr["finite"]:
                break
        rrow.max_rel, rrow.rel_l2 = worst["max_rel"], worst["rel_l2"]
        rrow.agree = "yes" if agree else "no"
        rrow.detail = {"worst": worst, "logits_dtype": getattr(refs[0][1], "logits_dtype", None)}
        if not worst["finite"]:
            rrow.fail("NaN/Inf in reference logits")
        elif worst["rel_l2"] > args.ref_bound:
            rrow.fail("references disagree: rel L2 > %g" % args.ref_bound)
        rows.append(rrow)
    return rows, compared


def fmt(x):
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return "%.2e" % x


def render_table(rows):
    lines = ["| model | mix | prompt len | check | max rel err | rel L2 | argmax agree | result |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        result = r.status + (": " + r.note if r.note else "")
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r.model, r.mix, r.plen if r.plen is not None else "-", r.check, fmt(r.max_rel), fmt(r.rel_l2),
            r.agree or "-", result.replace("|", "/")))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to libminfer.so")
    ap.add_argument("--minfer", required=True, help="path to the minfer binary (for `minfer synth`)")
    ap.add_argument("--out", required=True, help="directory for peer.md and peer.json")
    ap.add_argument("--presets", default=DEFAULT_PRESETS, help="comma-separated synth presets (default %(default)s)")
    ap.add_argument("--mixes", default=DEFAULT_MIXES,
                    help="comma-separated synth weight mixes (default %(default)s); files with tensors other "
                         "than f32/f16/bf16 are skipped: dequantization is out of scope")
    ap.add_argument("--seed", type=int, default=1, help="synth seed (default %(default)s)")
    ap.add_argument("--prompt-seed", type=int, default=1234, help="seed of the prompt tokens (default %(default)s)")
    ap.add_argument("--prompt-lens", default="1,8,100", help="comma-separated prompt lengths (default %(default)s)")
    ap.add_argument("--decode-steps", type=int, default=8, help="greedy decode steps after each prefill (default %(default)s)")
    ap.add_argument("--bounds", default=DEFAULT_BOUNDS,
                    help="rel-L2 bound per mix, MIX=VALUE,... (default %(default)s)")
    ap.add_argument("--default-bound", type=float, default=1e-4, help="rel-L2 bound of a mix not in --bounds")
    ap.add_argument("--max-rel-bound", type=float, default=None,
                    help="also bound max rel err (default: none, it is reported only)")
    ap.add_argument("--argmax-margin", type=float, default=1e-3,
                    help="an argmax disagreement fails when the reference's top-2 gap exceeds this fraction "
                         "of its largest |logit| (default %(default)s)")
    ap.add_argument("--reference", choices=("hf", "numpy", "both"), default="hf",
                    help="hf: transformers (default); numpy: qwen_ref.py; both: hf is compared with minfer, "
                         "and numpy with hf")
    ap.add_argument("--ref-bound", type=float, default=1e-5,
                    help="rel-L2 bound between the two references with --reference both (default %(default)s)")
    ap.add_argument("--device", default="cpu", help="torch device of the HF reference: cpu or cuda (default cpu)")
    ap.add_argument("--attn", default="eager", help="HF attn_implementation (default %(default)s)")
    ap.add_argument("--minfer-device", default="cpu", help="minfer's `device` option (default cpu)")
    ap.add_argument("--minfer-option", action="append", default=[], metavar="KEY=VALUE",
                    help="another minfer option for minfer_open_with_options (repeatable)")
    ap.add_argument("--plant", default=None, metavar="BUG",
                    help="the mutation check: plant BUG in minfer (rms_eps, no_qk_bias, no_qk_norm, rope_base; "
                         "--lib must be tests/libminfer_testhooks.so) and exit 0 only if EVERY comparison fails")
    ap.add_argument("--work", default=None, help="directory for the synthetic models (default: a temporary one)")
    ap.add_argument("--keep-models", action="store_true", help="keep the synthetic models")
    args = ap.parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    # a crash inside libminfer would otherwise end the run silently: show where it happened
    faulthandler.enable()

    try:
        import numpy as np
    except ImportError:
        print("compare_hf: numpy is required", file=sys.stderr)
        return 2

    env = {"python": platform.python_version(), "numpy": np.__version__}
    if args.reference in ("hf", "both"):
        try:
            import torch
            import transformers
        except ImportError as e:
            print("compare_hf: the Hugging Face reference needs torch and transformers (%s); "
                  "--reference numpy runs without them" % e, file=sys.stderr)
            return 2
        env["torch"] = torch.__version__
        env["transformers"] = transformers.__version__
        if args.device.startswith("cuda"):
            if not torch.cuda.is_available():
                print("compare_hf: --device %s but torch sees no GPU" % args.device, file=sys.stderr)
                return 2
            env["gpu"] = torch.cuda.get_device_name(0)
            # no TF32 shortcuts in the reference
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False

    for path, what in ((args.lib, "--lib"), (args.minfer, "--minfer")):
        if not os.path.exists(path):
            print("compare_hf: %s %s does not exist (build minfer first)" % (what, path), file=sys.stderr)
            return 2
    try:
        lib = minfer_capi.Library(args.lib)
        env["minfer"] = lib.version()
        env["minfer_build"] = lib.build_info()
    except (OSError, minfer_capi.MinferError) as e:
        print("compare_hf: cannot load %s: %s" % (args.lib, e), file=sys.stderr)
        return 2
    absent = [f for f in minfer_capi.REQUIRED if not lib.has(f)]
    if absent:
        print("compare_hf: %s (minfer %s) does not export %s: a build older than the API this check uses"
              % (args.lib, env["minfer"], ", ".join(absent)), file=sys.stderr)
        return 2

    if args.plant:
        if not lib.has("minfer_testing_plant"):
            print("compare_hf: --plant needs a library with minfer_testing_plant (tests/libminfer_testhooks.so), "
                  "not %s" % args.lib, file=sys.stderr)
            return 2
        if lib.fn("minfer_testing_plant")(args.plant.encode()) != 0:
            print("compare_hf: --plant %s: no such planted bug" % args.plant, file=sys.stderr)
            return 2

    try:
        bound_of = parse_bounds(args.bounds, args.default_bound)
        lens = [int(x) for x in args.prompt_lens.split(",") if x.strip()]
        options = {"device": args.minfer_device}
        for kv in args.minfer_option:
            if "=" not in kv:
                raise SetupError("--minfer-option %r is not KEY=VALUE" % kv)
            k, v = kv.split("=", 1)
            options[k] = v
    except (SetupError, ValueError) as e:
        print("compare_hf: %s" % e, file=sys.stderr)
        return 2

    os.makedirs(args.out, exist_ok=True)
    work = args.work or tempfile.mkdtemp(prefix="minfer-peer-")
    os.makedirs(work, exist_ok=True)
    log("compare_hf: minfer %s (%s); %s; models in %s" % (
        env["minfer"], env["minfer_build"], ", ".join("%s %s" % kv for kv in env.items()
                                                     if kv[0] not in ("minfer", "minfer_build")), work))

    rows = []
    setup_failed = False
    n_compared = 0
    presets = [p for p in args.presets.split(",") if p.strip()]
    mixes = [m for m in args.mixes.split(",") if m.strip()]
    for preset in presets:
        for mix in mixes:
            path = os.path.join(work, "%s-%s.gguf" % (preset, mix))
            bound = bound_of(mix)
            head = Row(preset, mix, None, "load")
            try:
                synth(args.minfer, preset, mix, args.seed, path)
            except SetupError as e:
                head.fail(str(e), "ERROR")
                rows.append(head)
                setup_failed = True
                log("  %s %s: %s" % (preset, mix, e))
                continue
            g = None
            model = ctx = None
            try:
                g = gguf_read.GGUFFile(path)
                odd = sorted({t.type_name for t in g.tensors.values() if t.type not in gguf_read.FLOAT_TYPES})
                if odd:
                    head.fail("%s tensors need dequantization, out of scope here" % ",".join(odd), "SKIP")
                    rows.append(head)
                    log("  %s %s: skipped (%s tensors)" % (preset, mix, ",".join(odd)))
                    g.close()
                    continue
                hp = qwen_ref.hparams_from_gguf(g)
                problems = qwen_ref.check_tensors(g, hp)
                if problems:
                    raise qwen_ref.ModelError("; ".join(problems))
                weights = qwen_ref.load_weights(g, hp)
                head.detail["hparams"] = hp.as_dict()
                head.detail["tensor_types"] = sorted({t.type_name for t in g.tensors.values()})

                refs = []
                if args.reference in ("hf", "both"):
                    try:
                        refs.append(("hf", HFReference(hp, weights, args.device, args.attn)))
                    except (qwen_ref.ModelError, SetupError):
                        raise
                    except Exception as e:  # an API this script does not know: a setup problem, not minfer's
                        raise SetupError("cannot build the transformers model: %s: %s" % (type(e).__name__, e))
                if args.reference in ("numpy", "both"):
                    refs.append(("numpy", NumpyReference(hp, weights)))
                for name, r in refs:
                    if r.notes:
                        head.detail["%s_notes" % name] = r.notes
                if refs[0][0] == "hf":
                    head.detail["hf_attn"] = refs[0][1].attn_implementation

                model = lib.open(path, options)
                mh = model.hparams()
                head.detail["minfer_hparams"] = mh
                mism = check_minfer_hparams(mh, hp)
                if mism:
                    head.fail("hyperparameters differ: " + "; ".join(mism))
                ctx = model.context()
                head.note = "%s, %d tensors (%s); %s" % (
                    hp.arch, len(g.tensors), ",".join(head.detail["tensor_types"]),
                    "tied output" if hp.tied else "output.weight")
            except (gguf_read.GGUFError, qwen_ref.ModelError, minfer_capi.MinferError, SetupError) as e:
                head.fail(str(e), "UNSUPPORTED" if getattr(e, "unsupported", False)
                          else "ERROR" if isinstance(e, SetupError) else "FAIL")
                rows.append(head)
                log("  %s %s: %s" % (preset, mix, e))
                if isinstance(e, SetupError):
                    setup_failed = True
                if model is not None:
                    model.close()
                if g is not None:
                    g.close()
                continue
            rows.append(head)
            log("  %s %s: %s" % (preset, mix, head.note))

            prompts = make_prompts(args.prompt_seed, lens, hp.n_vocab)
            for prompt in prompts:
                new_rows, compared = check_prompt(np, args, preset, mix, bound, prompt, ctx, refs)
                n_compared += compared
                rows.extend(new_rows)
                for r in new_rows:
                    log("    %-6s len %-4d %-22s max rel %s  rel L2 %s  argmax %-5s %s%s" % (
                        mix, len(prompt), r.check, fmt(r.max_rel), fmt(r.rel_l2), r.agree or "-", r.status,
                        (": " + r.note) if r.note else ""))
            if ctx is not None:
                ctx.free()
            if model is not None:
                model.close()
            g.close()

    if not args.keep_models and args.work is None:
        shutil.rmtree(work, ignore_errors=True)

    statuses = [r.status for r in rows]
    if "FAIL" in statuses:
        code = 1
    elif setup_failed:
        code = 2
    elif "UNSUPPORTED" in statuses or n_compared == 0:
        code = 3
    else:
        code = 0
    verdict = {0: "PASS", 1: "FAIL", 2: "SETUP ERROR", 3: "INCOMPLETE (minfer unsupported / nothing compared)"}[code]
    if args.plant and code in (0, 1):
        # The mutation check inverts the verdict: the planted bug must fail every comparison.
        def caught(r):  # a decode row is caught only if every one of its steps is past the bound
            steps = r.detail.get("steps") if isinstance(r.detail, dict) else None
            if steps:
                return all(st["rel_l2"] > bound_of(r.mix) for st in steps)
            return r.status == "FAIL"
        compared = [r for r in rows if r.check != "load" and " vs " not in r.check and r.rel_l2 is not None]
        missed = [r for r in compared if not caught(r)]
        code = 0 if compared and not missed and not setup_failed else 1
        verdict = "PLANT %s CAUGHT by all %d comparisons" % (args.plant, len(compared)) if code == 0 else \
            "PLANT %s MISSED by %d of %d comparisons" % (args.plant, len(missed), len(compared))

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    md = []
    md.append("# minfer peer check against %s" % {"hf": "Hugging Face transformers", "numpy": "a numpy reference",
                                                    "both": "Hugging Face transformers (and a numpy reference)"}[args.reference])
    md.append("")
    md.append("%s; minfer %s (%s); minfer device %s; reference device %s; %s." % (
        now, env["minfer"], env["minfer_build"], args.minfer_device, args.device,
        ", ".join("%s %s" % kv for kv in env.items() if kv[0] not in ("minfer", "minfer_build"))))
    md.append("Prompts: lengths %s, seed %d; %d greedy decode steps; synth seed %d. Bounds on rel L2: %s "
              "(others %g); argmax disagreement fails above a top-2 margin of %g x max|logit|." % (
                  args.prompt_lens, args.prompt_seed, args.decode_steps, args.seed, args.bounds,
                  args.default_bound, args.argmax_margin))
    md.append("")
    md.append(render_table(rows))
    md.append("")
    md.append("Result: **%s** (%d comparisons)." % (verdict, n_compared))
    text = "\n".join(md) + "\n"
    with open(os.path.join(args.out, "peer.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "peer.json"), "w") as f:
        json.dump({"env": env, "args": vars(args), "exit": code, "verdict": verdict,
                   "rows": [r.as_dict() for r in rows]}, f, indent=1, default=str)
    print()
    print(text, end="")
    return code


if __name__ == "__main__":
    sys.exit(main())
