#!/bin/sh
# libminfer.so exports the public C ABI and nothing else, carries the soname of its major version, does
# not need the CUDA runtime or driver libraries at load time, and loads and answers minfer_version() on a
# machine without a GPU.
#
# usage: check_exports.sh PATH/TO/libminfer.so SONAME_MAJOR
set -u

LIB=${1:?usage: check_exports.sh PATH/TO/libminfer.so SONAME_MAJOR}
MAJOR=${2:?usage: check_exports.sh PATH/TO/libminfer.so SONAME_MAJOR}
HEADER="$(dirname "$0")/../include/minfer.h"
MIN_SYMBOLS=40

PASSED=0
T=$(mktemp -d "${TMPDIR:-/tmp}/minfer-exports.XXXXXX") || { echo "check_exports: mktemp -d failed" >&2; exit 1; }
trap 'rm -rf "$T"' EXIT

check() { printf 'check: %s ... ' "$1"; }
ok() { PASSED=$((PASSED + 1)); echo ok; }
fail() {
    echo FAILED
    echo "FAIL: $1" >&2
    echo "exports: $PASSED passed, 1 failed" >&2
    exit 1
}

for tool in nm readelf; do
    command -v "$tool" >/dev/null 2>&1 || { echo "check_exports: '$tool' not found (Debian: apt-get install binutils)" >&2; exit 1; }
done
[ -f "$LIB" ] || { echo "check_exports: '$LIB' does not exist" >&2; exit 1; }
[ -f "$HEADER" ] || { echo "check_exports: '$HEADER' does not exist" >&2; exit 1; }

# ---- dynamic symbols ---------------------------------------------------------------------------

check "nm -D lists the defined dynamic symbols"
nm -D --defined-only "$LIB" >"$T/nm" 2>"$T/nm.err" || fail "nm -D --defined-only $LIB failed: $(cat "$T/nm.err")"
# "ADDRESS TYPE NAME[@[@]VERSION]"; the version node itself is an absolute symbol (type A).
awk 'NF >= 2 { name = $NF; type = $(NF - 1); sub(/@.*/, "", name);
               if (!(type == "A" && name == "MINFER_0")) print type, name, $NF }' "$T/nm" >"$T/syms"
[ -s "$T/syms" ] || fail "no defined dynamic symbols in $LIB"
ok

check "every defined dynamic symbol starts with minfer_"
awk '$2 !~ /^minfer_/' "$T/syms" >"$T/foreign"
if [ -s "$T/foreign" ]; then
    fail "$(wc -l <"$T/foreign" | tr -d ' ') symbols outside the minfer_ namespace leak from $LIB (fix lib/minfer.map or the visibility):
$(head -n 40 "$T/foreign")"
fi
ok

check "every exported symbol is a function or an object"
awk '$1 !~ /^[TtDdBbRrVvWw]$/' "$T/syms" >"$T/odd"
[ ! -s "$T/odd" ] || fail "symbols of unexpected types:
$(cat "$T/odd")"
ok

check "every exported symbol carries the MINFER_0 version node"
awk '$3 !~ /@@?MINFER_0$/' "$T/syms" >"$T/unversioned"
[ ! -s "$T/unversioned" ] || fail "symbols without the MINFER_0 version:
$(cat "$T/unversioned")"
ok

check "at least $MIN_SYMBOLS minfer_ symbols are exported"
awk '{ print $2 }' "$T/syms" | sort -u >"$T/exported"
N=$(wc -l <"$T/exported" | tr -d ' ')
[ "$N" -ge "$MIN_SYMBOLS" ] || fail "only $N minfer_ symbols are exported, expected at least $MIN_SYMBOLS"
ok

check "the exports and the MINFER_API declarations of include/minfer.h agree"
# Joins each declaration onto one line, then takes the identifier before the first '(' of each
# MINFER_API declaration.
tr '\n' ' ' <"$HEADER" | tr ';' '\n' | sed -n 's/.*MINFER_API[^(]*[^A-Za-z0-9_(]\([A-Za-z_][A-Za-z0-9_]*\) *(.*/\1/p' |
    sort -u >"$T/declared"
[ -s "$T/declared" ] || fail "found no MINFER_API declarations in $HEADER"
MISSING=$(comm -23 "$T/declared" "$T/exported")
EXTRA=$(comm -13 "$T/declared" "$T/exported")
[ -z "$MISSING" ] || fail "declared in minfer.h but not exported: $MISSING"
[ -z "$EXTRA" ] || fail "exported but not declared in minfer.h: $EXTRA"
ok

# ---- dynamic section ------------------------------------------------------------------------------

check "the SONAME is libminfer.so.$MAJOR"
readelf -d "$LIB" >"$T/dyn" 2>"$T/dyn.err" || fail "readelf -d $LIB failed: $(cat "$T/dyn.err")"
SONAME=$(sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p' "$T/dyn")
[ "$SONAME" = "libminfer.so.$MAJOR" ] || fail "SONAME is '$SONAME', expected 'libminfer.so.$MAJOR'"
ok

check "no NEEDED entry for libcudart or libcuda (the runtime is static, the driver opened at run time)"
sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p' "$T/dyn" >"$T/needed"
if grep -E '^libcuda(rt)?\.so' "$T/needed" >"$T/cuda-needed"; then
    fail "$LIB needs $(tr '\n' ' ' <"$T/cuda-needed"); NEEDED entries: $(tr '\n' ' ' <"$T/needed")"
fi
ok

# ---- loading it ---------------------------------------------------------------------------------------

check "the major version in minfer.h matches the soname major"
HEADER_MAJOR=$(sed -n 's/^#define MINFER_VERSION_MAJOR \([0-9][0-9]*\).*/\1/p' "$HEADER")
[ "$HEADER_MAJOR" = "$MAJOR" ] || fail "minfer.h says MINFER_VERSION_MAJOR $HEADER_MAJOR, the soname major is $MAJOR"
ok

check "dlopen works and minfer_version() matches MINFER_VERSION_STRING"
command -v python3 >/dev/null 2>&1 || fail "python3 is needed to dlopen the library through ctypes"
WANT=$(sed -n 's/^#define MINFER_VERSION_STRING "\(.*\)".*/\1/p' "$HEADER")
[ -n "$WANT" ] || fail "no MINFER_VERSION_STRING in $HEADER"
GOT=$(python3 -c '
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.minfer_version.restype = ctypes.c_char_p
print(lib.minfer_version().decode())
' "$LIB" 2>"$T/py.err") || fail "loading $LIB failed: $(cat "$T/py.err")"
[ "$GOT" = "$WANT" ] || fail "minfer_version() returned '$GOT', minfer.h says '$WANT'"
ok

echo "exports: $PASSED passed, 0 failed ($N symbols)"
