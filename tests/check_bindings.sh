#!/bin/sh
# The raw layers of the bindings (bindings/rust/src/sys.rs, bindings/go/minfer_shim.[ch]) are what
# scripts/gen_bindings.py makes of include/minfer.h, and the check notices a header that changed
# without them: a function added to a copy of the header makes all three files stale, and regenerating
# from that copy brings the function into each.
#
# usage: check_bindings.sh SOURCE_ROOT
set -u
ROOT=${1:?usage: check_bindings.sh SOURCE_ROOT}
GEN="$ROOT/scripts/gen_bindings.py"
PASSED=0
T=$(mktemp -d "${TMPDIR:-/tmp}/minfer-bindings.XXXXXX") || { echo "check_bindings: mktemp -d failed" >&2; exit 1; }
trap 'rm -rf "$T"' EXIT

check() { printf 'check: %s ... ' "$1"; }
ok() { PASSED=$((PASSED + 1)); echo ok; }
fail() {
    echo FAILED
    echo "FAIL: $1" >&2
    echo "bindings: $PASSED passed, 1 failed" >&2
    exit 1
}

check "the committed bindings are what the generator makes of include/minfer.h"
python3 "$GEN" --check >"$T/out" 2>&1 || fail "$(cat "$T/out")"
ok

check "a function added to the header makes every generated file stale"
# The probe goes before the closing extern "C" block, like any other declaration.
awk '/^#ifdef __cplusplus/ { last = NR } { line[NR] = $0 }
     END { for (i = 1; i <= NR; i++) { if (i == last) print "MINFER_API int32_t minfer_drift_probe(const minfer_model* model);"; print line[i] } }' \
    "$ROOT/include/minfer.h" >"$T/minfer.h"
grep -q minfer_drift_probe "$T/minfer.h" || fail "could not add the probe to a copy of the header"
python3 "$GEN" --check --header "$T/minfer.h" >"$T/out" 2>&1 && fail "--check passed on a header with a new function"
N=$(grep -c 'is not what' "$T/out")
[ "$N" = 3 ] || fail "$N of 3 files reported stale: $(cat "$T/out")"
ok

check "regenerating from that header declares the function in each file"
mkdir -p "$T/root"
python3 "$GEN" --header "$T/minfer.h" --root "$T/root" >"$T/out" 2>&1 || fail "$(cat "$T/out")"
grep -q 'pub minfer_drift_probe: unsafe extern "C" fn(\*const minfer_model) -> i32,' "$T/root/bindings/rust/src/sys.rs" ||
    fail "sys.rs has no table entry for minfer_drift_probe"
grep -q 'static inline int32_t go_minfer_drift_probe(const minfer_model\* model)' "$T/root/bindings/go/minfer_shim.h" ||
    fail "minfer_shim.h has no wrapper for minfer_drift_probe"
grep -q 'dlsym(lib, "minfer_drift_probe")' "$T/root/bindings/go/minfer_shim.c" ||
    fail "minfer_shim.c does not resolve minfer_drift_probe"
python3 "$GEN" --check --header "$T/minfer.h" --root "$T/root" >"$T/out" 2>&1 || fail "$(cat "$T/out")"
ok

check "a declaration the generator cannot read stops it"
sed 's/^MINFER_API size_t minfer_option_count(void);/MINFER_API size_t minfer_option_count(int a[4]);/' \
    "$ROOT/include/minfer.h" >"$T/odd.h"
grep -q 'minfer_option_count(int a\[4\])' "$T/odd.h" || fail "could not change a declaration in a copy of the header"
python3 "$GEN" --check --header "$T/odd.h" >"$T/out" 2>&1
RC=$?
[ $RC = 2 ] && grep -q 'minfer_option_count' "$T/out" || fail "exit $RC: $(cat "$T/out")"
ok

echo "bindings: $PASSED passed, 0 failed"
