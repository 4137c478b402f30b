#!/bin/sh
# docs/options.md is generated from the option table by `minfer options --markdown`; fails when they differ.
#
# usage: check_options_doc.sh PATH/TO/minfer PATH/TO/docs/options.md
set -u

MINFER=${1:?usage: check_options_doc.sh PATH/TO/minfer PATH/TO/docs/options.md}
DOC=${2:?usage: check_options_doc.sh PATH/TO/minfer PATH/TO/docs/options.md}
REGEN="build/minfer options --markdown > docs/options.md"

T=$(mktemp -d "${TMPDIR:-/tmp}/minfer-optdoc.XXXXXX") || { echo "check_options_doc: mktemp -d failed" >&2; exit 1; }
trap 'rm -rf "$T"' EXIT

printf 'check: %s matches the output of %s ... ' "$DOC" "'minfer options --markdown'"
"$MINFER" options --markdown >"$T/generated.md" 2>"$T/err"
RC=$?
if [ "$RC" -ne 0 ]; then
    echo FAILED
    echo "FAIL: '$MINFER options --markdown' exited with $RC:" >&2
    cat "$T/err" >&2
    exit 1
fi
if [ ! -s "$T/generated.md" ]; then
    echo FAILED
    echo "FAIL: '$MINFER options --markdown' printed nothing" >&2
    exit 1
fi
if [ ! -f "$DOC" ]; then
    echo FAILED
    echo "FAIL: $DOC does not exist; generate it from the source root with:" >&2
    echo "    $REGEN" >&2
    exit 1
fi
if ! diff -u "$DOC" "$T/generated.md" >"$T/diff"; then
    echo FAILED
    echo "FAIL: $DOC differs from the option table (- the file, + the table):" >&2
    sed -e "s|$T/generated.md|minfer options --markdown|" "$T/diff" >&2
    echo "Regenerate it from the source root with:" >&2
    echo "    $REGEN" >&2
    exit 1
fi
echo ok
echo "options_doc: 1 passed, 0 failed"
