#!/usr/bin/env bash
# CLI tests for baton and baton-mkmodel: the golden run through the command
# line, synthetic models of the named shapes, and bad invocations (each must
# exit non-zero with one clear message).
set -u
bin=${BT_BUILDDIR:-$(pwd)}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/baton-cli-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok $pass - $1"; }
bad() { fail=$((fail + 1)); echo "not ok - $1"; }

# run_fails NAME EXPECTED_MESSAGE_REGEX CMD...: must exit non-zero within
# 20 s, print the expected message, and not crash (no signal exit).
run_fails() {
    local name=$1 re=$2
    shift 2
    timeout 20 "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ]; then
        bad "$name: exit status $rc"; cat "$tmp/err"; return
    fi
    if ! grep -qE -- "$re" "$tmp/err"; then
        bad "$name: message does not match /$re/"; cat "$tmp/err"; return
    fi
    ok "$name"
}

# ---- golden through the CLI ----
golden=${BT_GOLDEN_DIR:-}/tiny-llama-golden-f32.gguf
if [ -f "$golden" ]; then
    out=$(timeout 60 "$bin/baton" -m "$golden" --tokens "$(seq -s, 1 32)" -n 8 -ub 5 \
        --dump-logits "$tmp/logits.bin" 2>"$tmp/err")
    if [ "$out" = "235 206 155 56 69 202 167 91 210" ]; then ok "golden tokens"; else
        bad "golden tokens: got '$out'"; cat "$tmp/err"; fi
    if cmp -s <(stat -c %s "$tmp/logits.bin") <(echo 40960); then ok "golden dump size"; else
        bad "golden dump size: $(stat -c %s "$tmp/logits.bin")"; fi
    if command -v python3 >/dev/null && python3 - "$tmp/logits.bin" \
        "${golden%.gguf}.logits.bin" <<'PY'
import struct, sys
a = open(sys.argv[1], 'rb').read(); b = open(sys.argv[2], 'rb').read()
n = len(b) // 4
x = struct.unpack('<%df' % n, a); y = struct.unpack('<%df' % n, b)
d = max(abs(p - q) for p, q in zip(x, y))
print('golden cli max abs diff %.3g' % d)
sys.exit(0 if d <= 1e-4 else 1)
PY
    then ok "golden dump within 1e-4"; else bad "golden dump differs"; fi
else
    echo "SKIP: golden data not found at '${BT_GOLDEN_DIR:-}' (golden CLI checks)"
fi

# ---- synthetic models ----
for type in f32 q8_0; do
    m="$tmp/smollm2-$type.gguf"
    if timeout 120 "$bin/baton-mkmodel" --shape smollm2-135m --type "$type" -o "$m" >/dev/null \
        2>"$tmp/err" && out=$(timeout 120 "$bin/baton" -m "$m" --tokens 1,2,3,4 -n 2 -t 2 \
        2>"$tmp/err") && [ "$(echo "$out" | wc -w)" -eq 3 ]; then
        ok "smollm2-135m $type: $out"
    else
        bad "smollm2-135m $type"; cat "$tmp/err"
    fi
    rm -f "$m"
done
m="$tmp/tiny.gguf"
timeout 60 "$bin/baton-mkmodel" --shape tiny --n-layer 3 --type bf16 --seed 9 -o "$m" >/dev/null
a=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7 -n 4 -t 1 2>/dev/null)
b=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7 -n 4 -t 2 -ub 1 2>/dev/null)
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "tiny bf16 same tokens for -t 1 and -t 2 -ub 1"; else
    bad "tiny bf16: '$a' vs '$b'"; fi
c=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7 -n 4 --ref-kernels 2>/dev/null)
if [ "$a" = "$c" ]; then ok "tiny bf16 reference kernels agree"; else bad "ref: '$a' vs '$c'"; fi
# an f16 KV cache: the same tokens whatever the micro-batch, and the
# reference kernels read the same f16 cache
a=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7,8,9 -n 4 -t 1 --kv-type f16 2>/dev/null)
b=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7,8,9 -n 4 -t 1 -ub 2 --kv-type f16 2>/dev/null)
c=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7,8,9 -n 4 --kernels ref --kv-type f16 2>/dev/null)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ]; then ok "--kv-type f16: $a (ub 5, ub 2, ref)"
else bad "--kv-type f16: '$a' vs '$b' vs '$c'"; fi

# ---- bad invocations ----
run_fails "no model" "no model given" "$bin/baton" --tokens 1
run_fails "missing file" "nope.gguf" "$bin/baton" -m "$tmp/nope.gguf" --tokens 1
run_fails "directory as model" "$tmp" "$bin/baton" -m "$tmp" --tokens 1
: >"$tmp/empty.gguf"
run_fails "empty file" "empty.gguf" "$bin/baton" -m "$tmp/empty.gguf" --tokens 1
head -c 100 "$m" >"$tmp/trunc.gguf"
run_fails "truncated file" "trunc.gguf" "$bin/baton" -m "$tmp/trunc.gguf" --tokens 1
run_fails "no prompt" "no prompt" "$bin/baton" -m "$m"
run_fails "token out of vocab" "id 256 at index 1 is outside" "$bin/baton" -m "$m" --tokens 1,256
run_fails "bad token list" "--tokens: .*item 2" "$bin/baton" -m "$m" --tokens 1,,2
run_fails "-n negative" "-n: -3 is out of range" "$bin/baton" -m "$m" --tokens 1 -n -3
run_fails "-n non-numeric" "-n: 'x' is not an integer" "$bin/baton" -m "$m" --tokens 1 -n x
run_fails "threads 0" "--threads: 0 is out of range" "$bin/baton" -m "$m" --tokens 1 -t 0
run_fails "ubatch 0" "-ub: 0 is out of range" "$bin/baton" -m "$m" --tokens 1 -ub 0
run_fails "ctx too small" "--ctx-size 2 is smaller" "$bin/baton" -m "$m" --tokens 1,2 -n 4 -c 2
"$bin/baton-mkmodel" --n-layer 2 --n-embd 512 --n-head 4 --n-head-kv 4 -o "$tmp/wide.gguf" >/dev/null 2>&1
run_fails "context larger than memory" "needs [0-9.]+ MiB but only [0-9.]+ MiB" "$bin/baton" \
    -m "$tmp/wide.gguf" --tokens 1 -n 1 --ctx-size 16000000
run_fails "unknown flag" "unknown option '--bogus'" "$bin/baton" -m "$m" --tokens 1 --bogus
run_fails "bad --kv-type" "--kv-type: 'q8' is not one of f32, f16" "$bin/baton" -m "$m" --tokens 1 \
    --kv-type q8
run_fails "bad --kernels" "--kernels: 'gpu' is not one of cpu, exact, ref" "$bin/baton" -m "$m" \
    --tokens 1 --kernels gpu
run_fails "missing value" "needs a value" "$bin/baton" -m "$m" --tokens
run_fails "unwritable dump" "cannot create" "$bin/baton" -m "$m" --tokens 1 \
    --dump-logits /nonexistent/dir/x.bin
run_fails "mkmodel unknown shape" "unknown shape 'huge'" "$bin/baton-mkmodel" --shape huge -o "$tmp/x"
run_fails "mkmodel bad type" "--type: 'q3'" "$bin/baton-mkmodel" --type q3 -o "$tmp/x"
run_fails "mkmodel heads" "heads must divide" "$bin/baton-mkmodel" --n-head 5 -o "$tmp/x"
run_fails "mkmodel no output" "no output file" "$bin/baton-mkmodel"
run_fails "mkmodel unwritable" "/nonexistent/dir" "$bin/baton-mkmodel" -o /nonexistent/dir/x.gguf

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
