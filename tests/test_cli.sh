#!/bin/sh
# The command line: exit codes, messages and output on good and bad files.
#
# usage: test_cli.sh PATH/TO/minfer
#
# Each check prints what it checks; the first failure prints why (with the command's output) and exits 1.
# Exit codes the CLI promises: 0 success, 1 a library error (status name and reason on stderr, nothing on
# stdout), 2 a usage error. Never a signal.
set -u

MINFER=${1:?usage: test_cli.sh PATH/TO/minfer}
HERE=$(cd "$(dirname "$0")" && pwd)
MAKE_HANDMADE="$HERE/make_handmade_gguf.py"

case $MINFER in
/*) ;;
*) MINFER="$(pwd)/$MINFER" ;;
esac
[ -x "$MINFER" ] || { echo "test_cli: '$MINFER' is not an executable" >&2; exit 1; }

T=$(mktemp -d "${TMPDIR:-/tmp}/minfer-cli.XXXXXX") || { echo "test_cli: mktemp -d failed" >&2; exit 1; }
trap 'rm -rf "$T"' EXIT
trap 'exit 130' INT TERM
cd "$T" || exit 1

PASSED=0
SKIPPED=""
CURRENT=""

# check DESCRIPTION: starts a check.
check() {
    CURRENT=$1
    printf 'check: %s ... ' "$CURRENT"
}

ok() {
    PASSED=$((PASSED + 1))
    echo ok
}

# fail REASON: reports the current check as failed, with the last command's output, and stops.
fail() {
    echo FAILED
    echo "FAIL: $CURRENT: $1" >&2
    if [ -n "${LAST_CMD:-}" ]; then
        echo "--- command: $LAST_CMD (exit $RC)" >&2
        echo "--- stdout:" >&2
        head -c 4000 out >&2 2>/dev/null
        echo "--- stderr:" >&2
        head -c 4000 err >&2 2>/dev/null
        echo "---" >&2
    fi
    echo "cli: $PASSED passed, 1 failed" >&2
    exit 1
}

# run ARGS...: runs minfer with ARGS; stdout in ./out, stderr in ./err, exit status in $RC.
run() {
    LAST_CMD="minfer $*"
    "$MINFER" "$@" >out 2>err
    RC=$?
}

expect_rc() {
    if [ "$RC" -ne "$1" ]; then
        if [ "$RC" -ge 128 ]; then
            fail "exited with $RC (killed by signal $((RC - 128))), expected $1"
        fi
        fail "exited with $RC, expected $1"
    fi
}

# expect_line FILE LINE: FILE has a line exactly equal to LINE.
expect_line() {
    grep -qxF -- "$2" "$1" || fail "$1 has no line '$2'"
}

# expect_text FILE TEXT: TEXT occurs in FILE.
expect_text() {
    grep -qF -- "$2" "$1" || fail "$1 does not contain '$2'"
}

# expect_match FILE REGEX: a line of FILE matches the extended regular expression.
expect_match() {
    grep -qE -- "$2" "$1" || fail "$1 has no line matching /$2/"
}

expect_empty() {
    [ ! -s "$1" ] || fail "$1 is not empty"
}

# ---- help and usage errors ------------------------------------------------------------------------

check "minfer --help exits 0 and prints usage on stdout"
run --help
expect_rc 0
expect_match out '^usage: minfer COMMAND'
ok

for cmd in info synth options; do
    check "minfer $cmd --help exits 0 and prints usage on stdout"
    run "$cmd" --help
    expect_rc 0
    expect_match out "^usage: minfer $cmd"
    ok
done

check "minfer with no command exits 2"
run
expect_rc 2
expect_text err "usage: minfer"
ok

check "an unknown command exits 2 (usage error)"
run frobnicate
expect_rc 2
expect_text err "unknown command 'frobnicate'"
expect_empty out
ok

check "minfer info with no model exits 2 (usage error)"
run info
expect_rc 2
expect_text err "no model given"
expect_empty out
ok

check "minfer info with an unknown flag exits 2 (usage error)"
run info --frob x.gguf
expect_rc 2
expect_text err "unknown flag"
ok

check "minfer synth without --preset exits 2 (usage error)"
run synth -o never.gguf
expect_rc 2
expect_text err "--preset is required"
[ ! -e never.gguf ] || fail "never.gguf was written"
ok

# ---- synthetic models ---------------------------------------------------------------------------

check "synth qwen2-tiny f16 seed 3 writes a file"
run synth --preset qwen2-tiny --mix f16 --seed 3 -o q2.gguf --quiet
expect_rc 0
[ -s q2.gguf ] || fail "q2.gguf is missing or empty"
ok

check "info on the qwen2-tiny file describes it"
run info q2.gguf
expect_rc 0
expect_line out "architecture:   qwen2"
expect_line out "layers:         2"
expect_line out "vocabulary:     512"
expect_line out "embedding:      256"
expect_line out "heads:          4 (kv 2, head_dim 64)"
expect_line out "output:         output.weight"
expect_line out "tensors:        27"
expect_match out '^  f16 +[0-9]+ +[0-9]+ '
expect_match out '^  f32 +[0-9]+ +[0-9]+ '
expect_match out '^  total +27 +[0-9]+ '
ok

check "synth qwen3-tiny f16 seed 3 writes a file that info describes"
run synth --preset qwen3-tiny --mix f16 --seed 3 -o q3.gguf --quiet
expect_rc 0
run info q3.gguf
expect_rc 0
expect_line out "architecture:   qwen3"
expect_line out "layers:         2"
expect_line out "vocabulary:     512"
expect_text out "head_dim 128"
expect_line out "output:         tied to token_embd.weight"
expect_match out '^  f16 +[0-9]+ +[0-9]+ '
expect_match out '^  total +[0-9]+ +[0-9]+ '
ok

check "synth with the same seed writes the same bytes"
run synth --preset qwen2-tiny --mix f16 --seed 3 -o q2-again.gguf --quiet
expect_rc 0
cmp -s q2.gguf q2-again.gguf || fail "q2.gguf and q2-again.gguf differ"
ok

check "synth with another seed writes other bytes"
run synth --preset qwen2-tiny --mix f16 --seed 4 -o q2-seed4.gguf --quiet
expect_rc 0
if cmp -s q2.gguf q2-seed4.gguf; then fail "seeds 3 and 4 gave identical files"; fi
ok

check "synth with an unknown preset exits 1 and names the problem"
run synth --preset nope -o Y.gguf
expect_rc 1
expect_text err "MINFER_ERR_INVALID_ARGUMENT"
expect_text err "unknown preset"
expect_empty out
[ ! -e Y.gguf ] || fail "Y.gguf was written"
ok

# ---- a file minfer did not write ----------------------------------------------------------------

command -v python3 >/dev/null 2>&1 || { CURRENT="python3"; LAST_CMD=""; fail "python3 is needed to write the handmade GGUF file"; }
[ -f "$MAKE_HANDMADE" ] || { CURRENT="handmade"; LAST_CMD=""; fail "$MAKE_HANDMADE is missing"; }

for version in 2 3; do
    hm="handmade-v$version.gguf"
    check "make_handmade_gguf.py --version $version writes a file"
    LAST_CMD="python3 make_handmade_gguf.py $hm --version $version"
    python3 "$MAKE_HANDMADE" "$hm" --version "$version" >out 2>err
    RC=$?
    expect_rc 0
    expect_match out '^params=[0-9]+ bytes=[0-9]+$'
    PARAMS=$(sed -n 's/^params=\([0-9]*\) bytes=[0-9]*$/\1/p' out)
    BYTES=$(sed -n 's/^params=[0-9]* bytes=\([0-9]*\)$/\1/p' out)
    SIZE=$(wc -c <"$hm" | tr -d ' ')
    [ "$SIZE" = "$BYTES" ] || fail "the script printed bytes=$BYTES, the file has $SIZE"
    # The version field is bytes 4..7, little-endian.
    VFIELD=$(od -An -tu4 -j4 -N4 "$hm" | tr -d ' ')
    [ "$VFIELD" = "$version" ] || fail "the file's version field is $VFIELD"
    ok

    check "info on the handmade v$version file describes it"
    run info "$hm"
    expect_rc 0
    expect_line out "file:           $hm ($BYTES bytes, $(awk "BEGIN { printf \"%.2f KiB\", $BYTES / 1024 }"))"
    expect_line out "name:           handmade"
    expect_line out "architecture:   qwen2"
    expect_text out "parameters:     $PARAMS ("
    expect_line out "vocabulary:     100"
    expect_line out "context:        4096 (training)"
    expect_line out "embedding:      64"
    expect_line out "layers:         3"
    expect_line out "heads:          4 (kv 2, head_dim 16)"
    expect_line out "feed-forward:   96"
    expect_line out "rope base:      1e+06"
    expect_line out "rms norm eps:   1e-06"
    expect_line out "output:         output.weight"
    # token_embd, output_norm, output and 12 per layer.
    expect_line out "tensors:        39"
    # f32: 3 norms + 3 biases per layer and output_norm; f16: 7 matmuls per layer, token_embd, output.
    expect_match out '^  f32 +16 +3328 '
    expect_match out '^  f16 +23 +209920 '
    expect_match out '^  total +39 +213248 '
    ok

    check "info --meta on the handmade v$version file shows every key"
    run info "$hm" --meta
    expect_rc 0
    expect_line out "metadata (25 keys):"
    expect_match out '^  general\.alignment +64$'
    expect_match out '^  qwen2\.attention\.head_count_kv +2$'
    expect_match out '^  tokenizer\.ggml\.tokens +array\[100\]$'
    expect_match out '^  tokenizer\.ggml\.eos_token_id +99$'
    expect_match out '^  handmade\.i8 +-7$'
    expect_match out '^  handmade\.u16 +65000$'
    expect_match out '^  handmade\.u64 +1099511627776$'
    expect_match out '^  handmade\.bool +true$'
    ok

    check "info --tensors on the handmade v$version file lists tensors at 64-byte offsets"
    run info "$hm" --tensors
    expect_rc 0
    expect_match out '^  token_embd\.weight +f16 +\[64, 100\] @[0-9]+ 12800 bytes$'
    expect_match out '^  blk\.2\.ffn_down\.weight +f16 +\[96, 64\] @[0-9]+ 12288 bytes$'
    expect_match out '^  blk\.0\.attn_k\.bias +f32 +\[32\] @[0-9]+ 128 bytes$'
    expect_match out '^  output\.weight +f16 +\[64, 100\] @[0-9]+ 12800 bytes$'
    BAD_OFFSETS=$(sed -n 's/.* @\([0-9]*\) [0-9]* bytes$/\1/p' out | awk '$1 % 64 != 0' | wc -l | tr -d ' ')
    N_OFFSETS=$(grep -c ' @[0-9]* [0-9]* bytes$' out)
    [ "$N_OFFSETS" = 39 ] || fail "listed $N_OFFSETS tensors, expected 39"
    [ "$BAD_OFFSETS" = 0 ] || fail "$BAD_OFFSETS tensor offsets are not multiples of 64"
    # Offsets are from the start of the file: the first tensor sits at the start of the data section.
    DATA_START=$(sed -n 's/^  token_embd\.weight .* @\([0-9]*\) [0-9]* bytes$/\1/p' out)
    [ -n "$DATA_START" ] || fail "no offset for token_embd.weight"
    [ $((DATA_START % 64)) = 0 ] || fail "the data section starts at $DATA_START, not a multiple of 64"
    ok
done

# ---- bad files ------------------------------------------------------------------------------------

# expect_bad FILE STATUS REASON: info FILE exits exactly 1, prints nothing on stdout, and stderr names the
# status and the reason.
expect_bad() {
    run info "$1"
    expect_rc 1
    expect_empty out
    expect_text err "$2"
    expect_text err "$3"
}

check "an empty file is MINFER_ERR_BAD_MODEL (empty)"
: >empty.gguf
expect_bad empty.gguf MINFER_ERR_BAD_MODEL "empty"
ok

check "a file with bad magic is MINFER_ERR_BAD_MODEL (magic)"
printf 'GGML\003\000\000\000this is not a gguf file at all, only some bytes\n' >badmagic.gguf
expect_bad badmagic.gguf MINFER_ERR_BAD_MODEL "bad magic"
ok

check "a file of 3 bytes is MINFER_ERR_BAD_MODEL (magic)"
printf 'GGU' >short.gguf
expect_bad short.gguf MINFER_ERR_BAD_MODEL "magic"
ok

check "the handmade file cut to half its size is MINFER_ERR_BAD_MODEL (data past the end)"
SIZE=$(wc -c <handmade-v3.gguf | tr -d ' ')
head -c $((SIZE / 2)) handmade-v3.gguf >half.gguf
expect_bad half.gguf MINFER_ERR_BAD_MODEL "runs past the end of the file"
ok

check "the handmade file cut inside its tensor infos is MINFER_ERR_BAD_MODEL (truncated)"
head -c 3000 handmade-v3.gguf >cut-header.gguf
expect_bad cut-header.gguf MINFER_ERR_BAD_MODEL "truncated file"
ok

# The header ends 8 bytes past a multiple of 64 (see make_handmade_gguf.py), so the data starts 56 bytes
# later; a reader that rounded to the default alignment of 32 would put it 24 bytes too early.
check "the handmade file cut just before its 64-aligned data start is MINFER_ERR_BAD_MODEL (truncated)"
cut=$((DATA_START - 2))
head -c $cut handmade-v3.gguf >cut-padding.gguf
expect_bad cut-padding.gguf MINFER_ERR_BAD_MODEL "truncated file"
expect_text err "tensor data would start at offset $DATA_START but the file has $cut bytes"
ok

check "the handmade file cut one byte short is MINFER_ERR_BAD_MODEL"
head -c $((SIZE - 1)) handmade-v3.gguf >one-short.gguf
expect_bad one-short.gguf MINFER_ERR_BAD_MODEL "output.weight"
ok

check "a missing path is MINFER_ERR_IO (No such file)"
expect_bad "$T/does-not-exist.gguf" MINFER_ERR_IO "No such file"
ok

check "a directory is MINFER_ERR_IO (not a regular file)"
mkdir adir.gguf
expect_bad adir.gguf MINFER_ERR_IO "not a regular file"
ok

# ---- options ---------------------------------------------------------------------------------------

check "minfer options lists every option"
run options
expect_rc 0
for name in device threads ctx_len w16_cache w16_enable_bytes fused_b mmq log_level; do
    expect_match out "^$name "
done
ok

check "minfer options --markdown prints a table row per option"
run options --markdown
expect_rc 0
expect_line out "| option | type | default | values | scope | description |"
for name in device threads ctx_len w16_cache w16_enable_bytes fused_b mmq log_level; do
    expect_match out "^\| \`$name\` \|"
done
ok

check "minfer options with an unknown argument exits 2"
run options --frob
expect_rc 2
ok

# ---- run, chat, tokenize, bench ---------------------------------------------------------------------

check "minfer tokenize prints the ids exactly as [id, id, id]"
run synth --preset qwen2-tiny --mix q8_0 --seed 4 -o gen.gguf --quiet
expect_rc 0
run tokenize -m gen.gguf --prompt "Hi!"
expect_rc 0
expect_line out "[72, 105, 33]"
run tokenize -m gen.gguf --prompt "<|im_end|>x" --parse-special
expect_rc 0
expect_line out "[258, 120]"
printf 'a\nb' >prompt.txt
run tokenize -m gen.gguf --prompt-file prompt.txt
expect_line out "[97, 10, 98]"
ok

check "minfer run streams text, reports speeds on stderr, and dumps logits"
run run -m gen.gguf -p "Hello" -n 6 --temp 0 --dump-logits logits.bin --ignore-eos
expect_rc 0
expect_match err "prefill 5 tokens in .* decode 6 tokens in"
# 512 floats per vector: the prompt's last position and 6 decode steps.
[ "$(wc -c <logits.bin)" -eq $((512 * 4 * 7)) ] || fail "logits.bin has $(wc -c <logits.bin) bytes, expected $((512 * 4 * 7))"
cp out greedy1.txt
run run -m gen.gguf -p "Hello" -n 6 --temp 0 --ignore-eos
cmp -s out greedy1.txt || fail "greedy output differs between two runs"
run run -m gen.gguf --prompt-tokens 72,101 -n 3 --seed 7 --temp 1.2 --quiet
expect_rc 0
cp out seeded.txt
run run -m gen.gguf --prompt-tokens 72,101 -n 3 --seed 7 --temp 1.2 --quiet
cmp -s out seeded.txt || fail "the same seed gave different text"
expect_empty err
ok

check "minfer run errors: bad token ids and bad flags"
run run -m gen.gguf --prompt-tokens 1,99999 -n 2
expect_rc 1
expect_text err "MINFER_ERR_INVALID_ARGUMENT"
run run -m gen.gguf --temp lots
expect_rc 2
run run -m gen.gguf -p a --prompt-tokens 1
expect_rc 2
ok

check "minfer run without a model builds and uses the embedded default (random weights)"
XDG_CACHE_HOME="$T/cache"
export XDG_CACHE_HOME
run run -p "Hi" -n 4
expect_rc 0
expect_text err "RANDOM"
ls "$T"/cache/minfer/default-*.gguf >/dev/null 2>&1 || fail "no default model in the cache"
run run -p "Hi" -n 4
expect_rc 0
unset XDG_CACHE_HOME
ok

check "minfer chat holds a multi-turn conversation"
LAST_CMD="minfer chat -m gen.gguf -n 5 (3 turns on stdin)"
printf 'Hello there\nTell me more\n/reset\nAgain\n' | "$MINFER" chat -m gen.gguf -n 5 --quiet >out 2>err
RC=$?
expect_rc 0
expect_text out "(conversation reset)"
[ "$(grep -vc 'conversation reset' out)" -ge 3 ] || fail "expected three replies"
ok

check "minfer chat: a turn the context cannot hold leaves the conversation as it was; a long line is one turn"
# The prefill of "hi" after a refused turn is the one it has alone (system prompt and no stray end of turn).
LAST_CMD="minfer chat -m gen.gguf -n 1 --system SYS --option ctx_len=64 --option log_level=debug (a long turn, then hi)"
printf 'hi\n' | "$MINFER" chat -m gen.gguf -n 1 --system SYS --option ctx_len=64 --option log_level=debug >out 2>alone.err
RC=$?
expect_rc 0
want=$(grep -m1 'prefill: ' alone.err | sed -E 's/.*prefill: ([0-9]+) tokens at position 0.*/\1/')
[ -n "$want" ] || fail "no prefill line at debug level"
{ head -c 200 /dev/zero | tr '\0' a; printf '\nhi\n'; } |
    "$MINFER" chat -m gen.gguf -n 1 --system SYS --option ctx_len=64 --option log_level=debug >out 2>err
RC=$?
expect_rc 0
expect_text out "(the context is full"
grep -q "prefill: $want tokens at position 0" err || fail "hi after the refused turn is not prefilled as alone ($want tokens at position 0)"
# A line longer than any fixed buffer is one message: one refused turn, not several.
LAST_CMD="minfer chat -m gen.gguf -n 1 (one line of 9000 characters)"
{ head -c 9000 /dev/zero | tr '\0' a; printf '\n'; } | "$MINFER" chat -m gen.gguf -n 1 --quiet >out 2>err
RC=$?
expect_rc 0
[ "$(grep -c 'the context is full' out)" -eq 1 ] || fail "the long line made $(grep -c 'the context is full' out) refused turns, expected 1"
ok

check "minfer: output that cannot be written fails the command, with the command line's own message"
if [ -w /dev/full ]; then
    LAST_CMD="minfer run -m gen.gguf -p hi -n 4 >/dev/full"
    "$MINFER" run -m gen.gguf -p hi -n 4 --quiet >/dev/full 2>err
    RC=$?
    expect_rc 1
    expect_text err "cannot write the output"
    run run -m gen.gguf -p hello -n 2 --quiet --dump-logits /dev/full
    expect_rc 1
    expect_text err "MINFER_ERR_IO: cannot write the logits file"
    grep -q "buffer holds" err && fail "a stale library message was printed for the command line's own error"
    ok
else
    echo "skipped (no writable /dev/full)"
    SKIPPED="$SKIPPED, skipped: output errors (no /dev/full)"
fi

check "minfer run and synth refuse integers they cannot hold"
run run -m gen.gguf -p hi -n 1 --top-k 4294967297
expect_rc 2
run run -m gen.gguf -p hi -n 1 --repeat-last-n 4294967295
expect_rc 2
for seed in "" " -1" "+1" "99999999999999999999999" "12x"; do
    run run -m gen.gguf -p hi -n 1 --seed "$seed"
    expect_rc 2
    run synth --preset qwen2-tiny --seed "$seed" -o bad-seed.gguf --quiet
    expect_rc 2
done
run run -m gen.gguf -p hi -n 1 --seed 18446744073709551615 --quiet
expect_rc 0
ok

check "minfer bench reports pp and tg rows"
run bench -m gen.gguf -p 16 -n 4 -r 2 --quiet
expect_rc 0
expect_match out "^\| .* \| pp16 \| [0-9.]+ ± [0-9.]+ \|$"
expect_match out "^\| .* \| tg4 \| [0-9.]+ ± [0-9.]+ \|$"
expect_match out "^memory: peak resident "
expect_match out "^prefill: [0-9.]+ GFLOP/s \([0-9.e+-]+ GFLOP per pp16 call"
# the operation count from the model's dimensions (minfer info), worked out here independently: per
# token 2 x layers x (q, k, v, o, gate, up, down weights), causal attention 4 x layers x n_head x head_dim
# per key, the output row once
cp out bench_md
run info gen.gguf
python3 - <<'PY' || fail "bench's prefill operation count disagrees with the model's dimensions"
import re
info = open("out").read()
num = lambda key: int(re.search(r"^" + key + r":\s+(\d+)", info, re.M).group(1))
heads = re.search(r"^heads:\s+(\d+) \(kv (\d+), head_dim (\d+)\)", info, re.M)
e, f, L, V = num("embedding"), num("feed-forward"), num("layers"), num("vocabulary")
nh, nkv, hd = (int(g) for g in heads.groups())
q, kv, n = nh * hd, nkv * hd, 16
flops = 2 * L * (e * q + 2 * e * kv + q * e + 3 * e * f) * n + 4 * L * q * (n * (n + 1) / 2) + 2 * e * V
got = float(re.search(r"GFLOP/s \(([0-9.e+-]+) GFLOP per pp16", open("bench_md").read()).group(1)) * 1e9
assert abs(got - flops) <= 1e-3 * flops, (got, flops)
PY
run bench -m gen.gguf -p 16 -n 4 -r 2 --json --quiet
expect_rc 0
python3 -c 'import json, sys; d = json.load(open("out")); t = {x["test"]: x for x in d["tests"]}; assert len(t["pp16"]["runs"]) == 2 and t["tg4"]["tok_per_s"] > 0 and d["peak_rss_bytes"] > 0 and d["options"]["device"] == "auto" and d["pp_gflop_per_s"] > 0' ||
    fail "bench --json is not the expected JSON"
ok

check "minfer bench --bandwidth measures the host's read bandwidth and decode's share of it"
run bench -m gen.gguf -p 0 -n 4 -r 1 --bandwidth --option device=cpu --option threads=1 --quiet
expect_rc 0
expect_match out "^host read bandwidth: [0-9]+\.[0-9] GB/s \(1 GiB summed, best of 3\); decode reads [0-9.]+ GB/s of weights, [0-9]+% of it$"
awk '/^host read bandwidth:/ { exit !($4 > 0.1) }' out || fail "a read bandwidth of 0.1 GB/s or less"
ok

check "minfer bench --depth runs both tests on top of a context and names them with the depth"
run bench -m gen.gguf -p 8 -n 4 -r 2 --depth 100 --quiet
expect_rc 0
expect_match out "^\| .* \| pp8 @ d100 \| [0-9.]+ ± [0-9.]+ \|$"
expect_match out "^\| .* \| tg4 @ d100 \| [0-9.]+ ± [0-9.]+ \|$"
# The context is sized to the depth and the longer of the two tests.
expect_match out "^options:.* ctx_len=108( |$)"
run bench -m gen.gguf -p 0 -n 4 -r 1 -d 64 --json --quiet
expect_rc 0
python3 -c 'import json; d = json.load(open("out")); t = {x["test"]: x for x in d["tests"]}; assert d["depth"] == 64 and list(t) == ["tg4 @ d64"] and t["tg4 @ d64"]["depth"] == 64 and t["tg4 @ d64"]["tok_per_s"] > 0' ||
    fail "bench --depth --json is not the expected JSON"
run bench -m gen.gguf -p 16 -n 4 -r 1 --json --quiet
python3 -c 'import json; d = json.load(open("out")); assert d["depth"] == 0 and [x["depth"] for x in d["tests"]] == [0, 0]' ||
    fail "bench --json without --depth does not report depth 0"
ok

check "minfer bench --depth beyond the model's context fails with a message"
# qwen2-tiny's training context is 2048 tokens.
run bench -m gen.gguf -p 8 -n 4 -r 1 --depth 2045 --quiet
expect_rc 1
expect_text err "need a context of 2053 tokens, beyond the model's training context of 2048 tokens"
expect_empty out
run bench -m gen.gguf -p 8 -n 4 -r 1 --depth 100 --option ctx_len=64 --quiet
expect_rc 1
expect_text err "beyond the ctx_len option of 64 tokens"
run bench -m gen.gguf -p 8 -n 4 -r 1 --depth -5 --quiet
expect_rc 2
ok

check "minfer bench --seqs serves a batch, greedy and sampled (--temp, --top-k); --temp without --seqs, --top-k without --temp are refused"
run bench -m gen.gguf --seqs 1,3 -p 4 -n 3 -r 1 --quiet
expect_rc 0
grep -q "| 3 | 4 | 3 | greedy |" out || fail "bench --seqs has no greedy row for 3 sequences"
run bench -m gen.gguf --seqs 3 -p 4 -n 3 -r 1 --temp 0.7 --quiet
expect_rc 0
grep -q "| 3 | 4 | 3 | temp 0.70 |" out || fail "bench --seqs --temp has no sampled row"
run bench -m gen.gguf -p 4 -n 3 --temp 1 --quiet
expect_rc 2
expect_text err "--temp goes with --seqs"
run bench -m gen.gguf --seqs 2 --temp 0 --quiet
expect_rc 2
run bench -m gen.gguf --seqs 3 -p 4 -n 3 -r 1 --temp 0.7 --top-k 40 --quiet
expect_rc 0
grep -q "| 3 | 4 | 3 | temp 0.70 top-k 40 |" out || fail "bench --seqs --temp --top-k has no row cut to 40"
run bench -m gen.gguf --seqs 3 -p 4 -n 3 --top-k 40 --quiet
expect_rc 2
expect_text err "--top-k goes with --temp"
run bench -m gen.gguf --seqs 3 --temp 1 --top-k 0 --quiet
expect_rc 2
ok

echo "cli: $PASSED passed, 0 failed$SKIPPED"
