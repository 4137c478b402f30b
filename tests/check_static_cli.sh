#!/bin/sh
# The minfer CLI links libminfer.a: its dynamic section names no libminfer shared object, the dynamic
# loader resolves none for it, and the library's code is inside the executable. CONTROL is a program
# linked against libminfer.so, on which the same checks must see the dependency.
#
# usage: check_static_cli.sh PATH/TO/minfer PATH/TO/CONTROL
set -u
EXE=${1:?usage: check_static_cli.sh PATH/TO/minfer PATH/TO/CONTROL}
CONTROL=${2:?usage: check_static_cli.sh PATH/TO/minfer PATH/TO/CONTROL}
PASSED=0

check() { printf 'check: %s ... ' "$1"; }
ok() { PASSED=$((PASSED + 1)); echo ok; }
fail() {
    echo FAILED
    echo "FAIL: $1" >&2
    echo "static_cli: $PASSED passed, 1 failed" >&2
    exit 1
}

command -v readelf >/dev/null 2>&1 || { echo "check_static_cli: 'readelf' not found (Debian: apt-get install binutils)" >&2; exit 1; }
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p'; }

check "the control program needs libminfer.so (the checks can see a dependency)"
needed "$CONTROL" | grep -q '^libminfer\.so' || fail "$CONTROL has no NEEDED libminfer: $(needed "$CONTROL" | tr '\n' ' ')"
ldd "$CONTROL" | grep -q 'libminfer\.so' || fail "ldd does not list libminfer for $CONTROL"
ok

check "the CLI is a dynamic executable with a NEEDED list"
[ -n "$(needed "$EXE")" ] || fail "readelf -d $EXE shows no NEEDED entries"
ok

check "no NEEDED entry of the CLI names libminfer"
if needed "$EXE" | grep -q 'libminfer'; then
    fail "$EXE needs $(needed "$EXE" | grep libminfer | tr '\n' ' ')"
fi
ok

check "ldd resolves no libminfer for the CLI"
ldd "$EXE" >/dev/null 2>&1 || fail "ldd $EXE failed"
if ldd "$EXE" | grep -q 'libminfer'; then
    fail "ldd $EXE lists $(ldd "$EXE" | grep libminfer)"
fi
ok

check "the library's code is inside the CLI (minfer_open and minfer_decode are defined in it)"
for f in minfer_open minfer_decode; do
    readelf -sW "$EXE" | awk -v f="$f" '$8 == f && $4 == "FUNC" && $7 != "UND" { found = 1 } END { exit !found }' ||
        fail "$EXE does not define $f"
done
ok

echo "static_cli: $PASSED passed, 0 failed"
