#!/usr/bin/env python3
"""Writes the raw layers of the Rust and Go bindings from include/minfer.h.

  bindings/rust/src/sys.rs     the header's constants, enums, handles, callback types and structs in Rust;
                               `Api`, a table with one function pointer per MINFER_API function, filled
                               either by a symbol resolver (dlsym: the default) or from `extern "C"`
                               declarations (the `link` cargo feature).
  bindings/go/minfer_shim.h    the same declarations in C for cgo, the table, and one `static inline`
                               wrapper per function that calls through the table (or, with
                               MINFER_GO_LINKED, the linked function); wrappers of functions that
                               return a status also copy the thread's last error, so Go reads the
                               message of the thread that failed.
  bindings/go/minfer_shim.c    fills the table with dlopen/dlsym (not built with the minfer_pkgconfig tag).

The header is parsed, not pattern-matched line by line: a declaration the parser does not understand
stops the script with its text, so nothing in the header is silently left out. The output depends only
on the header, so a test reruns the script and compares with the committed files (--check).

Usage: gen_bindings.py [--header FILE] [--root DIR]          write the files under DIR (the repository)
       gen_bindings.py --check [--header FILE] [--root DIR]  exit 1 and show the difference when a
                                                             committed file is not what the script writes
"""

import argparse
import difflib
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = ("bindings/rust/src/sys.rs", "bindings/go/minfer_shim.h", "bindings/go/minfer_shim.c")

# C base types of the header and their Rust spelling. Any other base type must be declared in the header.
BUILTIN_RUST = {
    "void": "c_void", "char": "c_char", "int": "c_int", "float": "f32", "double": "f64", "size_t": "usize",
    "int8_t": "i8", "int16_t": "i16", "int32_t": "i32", "int64_t": "i64",
    "uint8_t": "u8", "uint16_t": "u16", "uint32_t": "u32", "uint64_t": "u64",
}


# C names that Rust reserves are written as raw identifiers (r#type).
RUST_KEYWORDS = set("""as async await box break const continue crate dyn else enum extern false fn for if impl in let loop
match mod move mut pub ref return self static struct super trait true type unsafe use where while""".split())


def rust_name(name):
    return "r#" + name if name in RUST_KEYWORDS else name


class HeaderError(Exception):
    pass


# ---- the model of the header ---------------------------------------------------------------------


@dataclass
class CType:
    base: str
    const: bool  # the base type is const
    ptrs: list  # one entry per '*', innermost first: True when that pointer is itself const

    def c(self):
        s = ("const " if self.const else "") + self.base
        for is_const in self.ptrs:
            s += "*" + (" const" if is_const else "")
        return s

    def is_void(self):
        return self.base == "void" and not self.ptrs


@dataclass
class Param:
    name: str
    type: CType

    def c(self):
        return self.type.c() + " " + self.name


@dataclass
class Function:
    name: str
    ret: CType
    params: list


@dataclass
class Define:
    name: str
    value: str  # as written: an integer, a string literal, or an expression of integers and MINFER_ names


@dataclass
class Enum:
    name: str
    values: list  # (name, int)


@dataclass
class Struct:
    name: str
    fields: list  # of Param; None for an opaque handle


@dataclass
class Callback:
    name: str
    ret: CType
    params: list


# ---- parsing ------------------------------------------------------------------------------------


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def split_preprocessor(text):
    """Returns (the #define lines of MINFER_ constants, the code outside preprocessor lines). Code inside
    an `#ifdef __cplusplus` block (extern "C" { ... }) is dropped."""
    defines, code, stack = [], [], []
    for line in text.split("\n"):
        s = line.strip()
        if s.startswith("#"):
            d = s[1:].strip()
            if re.match(r"if(n?def)?\b", d):
                stack.append("__cplusplus" in d)
            elif d.startswith("endif"):
                if not stack:
                    raise HeaderError("unbalanced #endif")
                stack.pop()
            elif d.startswith("define"):
                m = re.match(r"define\s+(MINFER_[A-Z0-9_]+)\s+(.+)$", d)
                if m and m.group(1) != "MINFER_API":
                    defines.append(Define(m.group(1), m.group(2).strip()))
            code.append("")
        else:
            code.append("" if any(stack) else line)
    return defines, "\n".join(code)


def statements(code):
    """Splits the code at the semicolons outside braces."""
    out, depth, cur = [], 0, []
    for ch in code:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == ";" and depth == 0:
            out.append(" ".join("".join(cur).split()))
            cur = []
        else:
            cur.append(ch)
    if " ".join("".join(cur).split()):
        raise HeaderError("text after the last declaration: %r" % "".join(cur).strip())
    return [s for s in out if s]


def parse_type(tokens, known, where):
    toks = list(tokens)
    const = False
    while toks and toks[0] == "const":
        const = True
        toks.pop(0)
    if not toks or not re.match(r"[A-Za-z_]\w*$", toks[0]):
        raise HeaderError("cannot read the type in %r" % where)
    base = toks.pop(0)
    if base not in BUILTIN_RUST and base not in known:
        raise HeaderError("unknown type %r in %r" % (base, where))
    ptrs = []
    for t in toks:
        if t == "*":
            ptrs.append(False)
        elif t == "const" and ptrs:
            ptrs[-1] = True
        elif t == "const":
            const = True
        else:
            raise HeaderError("cannot read the type in %r (at %r)" % (where, t))
    return CType(base, const, ptrs)


def parse_decl(text, known):
    """`const char* const* keys` -> Param."""
    tokens = re.findall(r"[A-Za-z_]\w*|\*|\S", text)
    if len(tokens) < 2 or not re.match(r"[A-Za-z_]\w*$", tokens[-1]) or tokens[-1] == "const":
        raise HeaderError("cannot read the declaration %r" % text)
    return Param(tokens[-1], parse_type(tokens[:-1], known, text))


def parse_params(text, known):
    text = text.strip()
    if text == "void":
        return []
    if not text:
        raise HeaderError("an empty parameter list must be written (void)")
    return [parse_decl(p, known) for p in text.split(",")]


def parse_header(text):
    defines, code = split_preprocessor(strip_comments(text))
    items, known = [], set()
    for st in statements(code):
        try:
            parse_statement(st, items, known)
        except HeaderError as e:
            raise HeaderError("%s, in: %s" % (e, st)) from None
    if not any(isinstance(i, Function) for i in items):
        raise HeaderError("no MINFER_API function found")
    return defines, items


def parse_statement(st, items, known):
    """Appends the declaration `st` (one statement, whitespace folded) to items."""
    m = re.fullmatch(r"typedef enum (\w+) \{(.*)\} (\w+)", st)
    if m:
        if m.group(1) != m.group(3):
            raise HeaderError("the enum tag and the typedef name differ")
        values = []
        for v in m.group(2).split(","):
            vm = re.fullmatch(r"\s*(\w+)\s*=\s*(-?\d+)\s*", v)
            if not vm:
                raise HeaderError("every enum value needs an explicit number (%r)" % v.strip())
            values.append((vm.group(1), int(vm.group(2))))
        items.append(Enum(m.group(1), values))
        known.add(m.group(1))
        return
    m = re.fullmatch(r"typedef struct (\w+) (\w+)", st) or re.fullmatch(r"typedef struct (\w+) \{(.*)\} (\w+)", st)
    if m:
        if m.group(1) != m.group(m.lastindex):
            raise HeaderError("the struct tag and the typedef name differ")
        fields = None if m.lastindex == 2 else [parse_decl(f, known) for f in m.group(2).split(";") if f.strip()]
        items.append(Struct(m.group(1), fields))
        known.add(m.group(1))
        return
    m = re.fullmatch(r"typedef (.+?) ?\( ?\* ?(\w+) ?\) ?\((.*)\)", st)
    if m:
        ret = parse_type(re.findall(r"[A-Za-z_]\w*|\*|\S", m.group(1)), known, st)
        items.append(Callback(m.group(2), ret, parse_params(m.group(3), known)))
        known.add(m.group(2))
        return
    m = re.fullmatch(r"MINFER_API (.+?) ?(\w+) ?\((.*)\)", st)
    if m:
        ret = parse_type(re.findall(r"[A-Za-z_]\w*|\*|\S", m.group(1)), known, st)
        items.append(Function(m.group(2), ret, parse_params(m.group(3), known)))
        return
    raise HeaderError("not a declaration the generator knows")


# ---- Rust ---------------------------------------------------------------------------------------


def rust_type(t, is_return=False):
    if t.is_void():
        return "()" if is_return else "c_void"
    s = BUILTIN_RUST.get(t.base, t.base)
    pointee_const = t.const
    for is_const in t.ptrs:
        s = ("*const " if pointee_const else "*mut ") + s
        pointee_const = is_const
    return s


def rust_fn_type(ret, params, names=True):
    args = ", ".join((rust_name(p.name) + ": " if names else "") + rust_type(p.type) for p in params)
    r = "" if ret.is_void() else " -> " + rust_type(ret, True)
    return 'unsafe extern "C" fn(%s)%s' % (args, r)


def rust_define(d, ints):
    if re.fullmatch(r'"[^"\\]*"', d.value):
        return "pub const %s: &str = %s;" % (d.name, d.value)
    for tok in re.findall(r"[A-Za-z_]\w*|\S", d.value):
        if not (tok in ints or re.fullmatch(r"[0-9()*+/-]|[0-9]+", tok)):
            raise HeaderError("cannot translate #define %s %s" % (d.name, d.value))
    return "pub const %s: i32 = %s;" % (d.name, d.value)


def block(text, **fields):
    """The lines of a template: `text` dedented, its {names} filled from `fields` (lists of lines are
    joined with newlines)."""
    text = textwrap.dedent(text).strip("\n")
    for name, value in fields.items():
        text = text.replace("{%s}" % name, "\n".join(value) if isinstance(value, list) else value)
    return text.split("\n")


def gen_rust(defines, items, header_name):
    out, ints, fns = [], [], []
    for d in defines:
        out.append(rust_define(d, ints))
        if not d.value.startswith('"'):
            ints.append(d.name)
    for it in items:
        if isinstance(it, Function):
            fns.append(it)
            continue
        out.append("")
        if isinstance(it, Enum):
            signed = any(v < 0 for _, v in it.values)
            out.append("pub type %s = %s;" % (it.name, "c_int" if signed else "c_uint"))
            out += ["pub const %s: %s = %d;" % (name, it.name, v) for name, v in it.values]
        elif isinstance(it, Struct) and it.fields is None:
            out += ["#[repr(C)]", "pub struct %s {" % it.name, "    _opaque: [u8; 0],", "}"]
        elif isinstance(it, Struct):
            out += ["#[repr(C)]", "#[derive(Debug, Clone, Copy, PartialEq)]", "pub struct %s {" % it.name]
            out += ["    pub %s: %s," % (rust_name(f.name), rust_type(f.type)) for f in it.fields]
            out.append("}")
        elif isinstance(it, Callback):
            out.append("pub type %s = Option<%s>;" % (it.name, rust_fn_type(it.ret, it.params)))
    out.append("")
    out += block(r"""
        /// The functions of the header, one pointer each.
        #[derive(Clone, Copy)]
        pub struct Api {
        {fields}
        }

        impl Api {
            /// Fills the table with `resolve`, which returns the address of the symbol named by its
            /// NUL-terminated argument, or null. Fails with the name of the first symbol not found.
            ///
            /// # Safety
            /// Every address `resolve` returns must be the function of that name of minfer.h.
            pub unsafe fn resolve(mut resolve: impl FnMut(&[u8]) -> *mut c_void) -> Result<Api, &'static str> {
                // The target type of each transmute is the field's.
                macro_rules! sym {
                    ($name:literal) => {{
                        let p = resolve(concat!($name, "\0").as_bytes());
                        if p.is_null() {
                            return Err($name);
                        }
                        std::mem::transmute::<*mut c_void, _>(p)
                    }};
                }
                Ok(Api {
        {resolved}
                })
            }

            /// The table of the library linked at build time (the `link` feature).
            #[cfg(feature = "link")]
            pub fn linked() -> Api {
                Api {
        {linked}
                }
            }
        }

        #[cfg(feature = "link")]
        pub mod linked {
            use super::*;

            #[link(name = "minfer")]
            extern "C" {
        {externs}
            }
        }
        """,
        fields=["    pub %s: %s," % (f.name, rust_fn_type(f.ret, f.params, names=False)) for f in fns],
        resolved=['            %s: sym!("%s"),' % (f.name, f.name) for f in fns],
        linked=["            %s: linked::%s," % (f.name, f.name) for f in fns],
        externs=["        pub fn %s(%s)%s;" % (f.name, ", ".join("%s: %s" % (rust_name(p.name), rust_type(p.type)) for p in f.params),
                                              "" if f.ret.is_void() else " -> " + rust_type(f.ret, True)) for f in fns])
    body = "\n".join(out) + "\n"
    raw = [t for t in ("c_char", "c_int", "c_uint", "c_void") if re.search(r"\b%s\b" % t, body)]
    head = block("""
        // Generated by scripts/gen_bindings.py from {header}: do not edit. Change the header and run
        // `python3 scripts/gen_bindings.py`; a test fails when this file and the header disagree.
        //
        // The raw layer: every declaration of the header, and `Api`, a table with one function pointer per
        // function, filled from a symbol resolver (dlsym) or, with the `link` feature, from the linked library.
        #![allow(non_camel_case_types, non_upper_case_globals, dead_code, unused_parens, clippy::all)]

        use std::os::raw::{{raw}};
        """, header=header_name, raw=", ".join(raw))
    return "\n".join(head) + "\n\n" + body


# ---- Go (C for cgo) -------------------------------------------------------------------------------


def c_params(params):
    return ", ".join(p.c() for p in params) if params else "void"


def c_fn_ptr(ret, name, params):
    return "%s (*%s)(%s)" % (ret.c(), name, c_params(params))


def go_wrapper(f):
    """The cgo wrapper of f: go_NAME calls NAME; one returning a status also takes `err`."""
    call = "MINFER_GO_FN(%s)(%s)" % (f.name, ", ".join(p.name for p in f.params))
    if f.ret.base == "minfer_status" and not f.ret.ptrs:
        params = f.params + [Param("err", CType("char", False, [False, False]))]
        body = ["    minfer_status st = %s;" % call, "    if (st != MINFER_OK) *err = minfer_go_last_error();",
                "    return st;"]
    else:
        params = f.params
        body = ["    %s%s;" % ("" if f.ret.is_void() else "return ", call)]
    return ["static inline %s go_%s(%s) {" % (f.ret.c(), f.name, c_params(params))] + body + ["}"]


def gen_go_header(defines, items, header_name):
    decls, fns = [], []
    for it in items:
        if isinstance(it, Function):
            fns.append(it)
            continue
        decls.append("")
        if isinstance(it, Enum):
            decls.append("typedef enum %s {" % it.name)
            decls.append(",\n".join("    %s = %d" % nv for nv in it.values))
            decls.append("} %s;" % it.name)
        elif isinstance(it, Struct) and it.fields is None:
            decls.append("typedef struct %s %s;" % (it.name, it.name))
        elif isinstance(it, Struct):
            decls.append("typedef struct %s {" % it.name)
            decls += ["    %s;" % f.c() for f in it.fields]
            decls.append("} %s;" % it.name)
        elif isinstance(it, Callback):
            decls.append("typedef %s;" % c_fn_ptr(it.ret, it.name, it.params))
    out = block("""
        /* Generated by scripts/gen_bindings.py from {header}: do not edit. Change the header and run
         * `python3 scripts/gen_bindings.py`; a test fails when this file and the header disagree.
         *
         * The raw layer of the Go bindings: the declarations of the header, the function table that
         * minfer_shim.c fills with dlopen/dlsym, and one wrapper per function for cgo. With MINFER_GO_LINKED
         * (the minfer_pkgconfig build tag) the wrappers call the linked library instead of the table. */
        #ifndef MINFER_GO_SHIM_H
        #define MINFER_GO_SHIM_H

        #include <stddef.h>
        #include <stdint.h>
        #include <stdlib.h>
        #include <string.h>

        {defines}
        {decls}

        /* The functions of the header, for the linked build. */
        {prototypes}

        /* One pointer per function, filled by minfer_go_load. */
        typedef struct minfer_go_api {
        {table}
        } minfer_go_api;
        extern minfer_go_api minfer_go_table;
        /* Opens the library at `path` with dlopen and fills the table. Returns 0; 1 when dlopen fails, 2 when
         * a function is missing, with *err set to a message the caller frees with free(). */
        int minfer_go_load(const char* path, char** err);

        #ifdef MINFER_GO_LINKED
        #define MINFER_GO_FN(name) name
        #else
        #define MINFER_GO_FN(name) (*minfer_go_table.name)
        #endif

        /* A malloc'ed copy of the calling thread's last error (NULL when out of memory). */
        static inline char* minfer_go_last_error(void) {
            const char* msg = MINFER_GO_FN(minfer_last_error)();
            size_t n = strlen(msg);
            char* copy = (char*)malloc(n + 1);
            if (copy) memcpy(copy, msg, n + 1);
            return copy;
        }

        /* The wrappers: go_NAME calls NAME; those returning a status take `err`, which receives
         * minfer_go_last_error() on failure. */
        {wrappers}

        #endif /* MINFER_GO_SHIM_H */
        """,
        header=header_name,
        defines=["#define %s %s" % (d.name, d.value) for d in defines],
        decls=decls,
        prototypes=["%s %s(%s);" % (f.ret.c(), f.name, c_params(f.params)) for f in fns],
        table=["    %s;" % c_fn_ptr(f.ret, f.name, f.params) for f in fns],
        wrappers=[line for f in fns for line in go_wrapper(f)])
    return "\n".join(out) + "\n"


def gen_go_loader(items, header_name):
    fns = [it for it in items if isinstance(it, Function)]
    out = block("""
        //go:build !minfer_pkgconfig

        /* Generated by scripts/gen_bindings.py from {header}: do not edit. */
        /* Fills minfer_go_table with dlopen/dlsym (the default build; the minfer_pkgconfig tag links instead). */
        #include <dlfcn.h>

        #include "minfer_shim.h"

        minfer_go_api minfer_go_table;

        /* malloc'ed a + b. */
        static char* join(const char* a, const char* b) {
            size_t na = strlen(a), nb = strlen(b);
            char* s = (char*)malloc(na + nb + 1);
            if (!s) return NULL;
            memcpy(s, a, na);
            memcpy(s + na, b, nb + 1);
            return s;
        }

        static int missing(void* lib, const char* name, char** err) {
            *err = join("the library lacks ", name);
            dlclose(lib);
            return 2;
        }

        int minfer_go_load(const char* path, char** err) {
            minfer_go_api t;
            void* sym;
            void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (!lib) {
                const char* why = dlerror();
                *err = join(why ? why : "dlopen failed: ", why ? "" : path);
                return 1;
            }
        {resolve}
            minfer_go_table = t;
            return 0;
        }
        """,
        header=header_name,
        resolve=[line for f in fns for line in (
            '    if (!(sym = dlsym(lib, "%s"))) return missing(lib, "%s", err);' % (f.name, f.name),
            "    memcpy(&t.%s, &sym, sizeof sym);" % f.name)])
    return "\n".join(out) + "\n"


# ---- main ---------------------------------------------------------------------------------------


def generate(header):
    defines, items = parse_header(header.read_text(encoding="utf-8"))
    name = "include/minfer.h"
    return {
        OUTPUTS[0]: gen_rust(defines, items, name),
        OUTPUTS[1]: gen_go_header(defines, items, name),
        OUTPUTS[2]: gen_go_loader(items, name),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--header", type=Path, default=ROOT / "include/minfer.h")
    ap.add_argument("--root", type=Path, default=ROOT, help="where the bindings/ folder is")
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    try:
        files = generate(args.header)
    except (HeaderError, OSError) as e:
        print("gen_bindings: %s: %s" % (args.header, e), file=sys.stderr)
        return 2
    stale = 0
    for rel, text in files.items():
        path = args.root / rel
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old == text:
            continue
        if args.check:
            stale += 1
            print("gen_bindings: %s is not what %s gives; run python3 scripts/gen_bindings.py" % (rel, args.header))
            diff = difflib.unified_diff((old or "").splitlines(), text.splitlines(), rel + " (committed)",
                                        rel + " (generated)", lineterm="", n=1)
            for i, line in enumerate(diff):
                if i == 60:
                    print("...")
                    break
                print(line)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print("gen_bindings: wrote %s" % rel)
    if args.check:
        print("gen_bindings: %d of %d files up to date" % (len(files) - stale, len(files)))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
