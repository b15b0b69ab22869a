#!/usr/bin/env bash
# CLI tests for baton and baton-mkmodel: the golden run through the command
# line and synthetic models of the named shapes. (Bad invocations:
# tests/bad_input.sh.)
set -u
bin=${BT_BUILDDIR:-$(pwd)}
. "$(dirname "$0")/tap.sh"
tap_tmp cli

# ---- golden through the CLI ----
golden=${BT_GOLDEN_DIR:-${BT_SRCDIR:-$(dirname "$0")/..}/tests/data/golden}/tiny-llama-golden-f32.gguf
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
    then ok "golden dump within 1e-4"; else bad "golden dump differs from ${golden%.gguf}.logits.bin"; fi
else
    bad "golden reference file missing: $golden (golden CLI checks; it ships in tests/data/golden)"
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
# every family's tiny file through the command line (check_synth reads
# them back); --arch llama is the default's bytes
for arch in llama qwen2 qwen3 gemma3; do
    m="$tmp/tiny-$arch.gguf"
    if out=$(timeout 60 "$bin/baton-mkmodel" --shape tiny --arch "$arch" --type q8_0 -o "$m" \
        2>"$tmp/err") && [ "$out" = "$m" ] && [ -s "$m" ] &&
        grep -q "^wrote $m: shape tiny, $arch, q8_0, " "$tmp/err"; then
        ok "mkmodel --shape tiny --arch $arch: $(wc -c <"$m") bytes"
    else
        bad "mkmodel --shape tiny --arch $arch"; cat "$tmp/err"
    fi
done
timeout 60 "$bin/baton-mkmodel" --shape tiny --type q8_0 -o "$tmp/tiny-default.gguf" >/dev/null 2>&1
if cmp -s "$tmp/tiny-default.gguf" "$tmp/tiny-llama.gguf"; then ok "mkmodel --arch llama = default"
else bad "mkmodel --arch llama differs from the default"; fi
rm -f "$tmp"/tiny-*.gguf
m="$tmp/tiny.gguf"
timeout 60 "$bin/baton-mkmodel" --shape tiny --n-layer 3 --type bf16 --seed 9 -o "$m" >/dev/null
a=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7 -n 4 -t 1 2>/dev/null)
b=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7 -n 4 -t 2 -ub 1 2>/dev/null)
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "tiny bf16 same tokens for -t 1 and -t 2 -ub 1"; else
    bad "tiny bf16: '$a' vs '$b'"; fi
c=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7 -n 4 --ref-kernels 2>/dev/null)
if [ "$a" = "$c" ]; then ok "tiny bf16 reference kernels agree"; else bad "ref: '$a' vs '$c'"; fi
# BATON_PREFETCH moves the one-token products' prefetches (the quantized
# kernels' own; the float panels' per stream or their next unit, also for
# the prompt's 3 tokens), never a bit of a result (a value that is not 0
# or 1: tests/bad_input.sh). Rows of 256 make whole units of 8 float
# panels, which take the per-stream path.
for t in q8_0 f16; do
    q="$tmp/tiny-$t.gguf"
    timeout 60 "$bin/baton-mkmodel" --shape tiny --n-layer 2 --n-embd 256 --n-ff 512 --type "$t" \
        --seed 4 -o "$q" >/dev/null
    for v in 0 1; do
        BATON_PREFETCH=$v timeout 60 "$bin/baton" -m "$q" --tokens 5,6,7 -n 4 -t 1 \
            --dump-logits "$tmp/pf$v.bin" >/dev/null 2>"$tmp/pf$v.err"
    done
    if [ -s "$tmp/pf0.bin" ] && cmp -s "$tmp/pf0.bin" "$tmp/pf1.bin"
    then ok "$t: BATON_PREFETCH=0, 1: the same logits"; else bad "$t: BATON_PREFETCH changed the logits"; fi
    if ! grep -q BATON_PREFETCH "$tmp/pf0.err" "$tmp/pf1.err"
    then ok "$t: BATON_PREFETCH=0, 1 accepted quietly"; else bad "$t: BATON_PREFETCH: $(cat "$tmp"/pf?.err)"; fi
    rm -f "$q"
done
# an f16 KV cache: the same tokens whatever the micro-batch, and the
# reference kernels read the same f16 cache
a=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7,8,9 -n 4 -t 1 --kv-type f16 2>/dev/null)
b=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7,8,9 -n 4 -t 1 -ub 2 --kv-type f16 2>/dev/null)
c=$(timeout 60 "$bin/baton" -m "$m" --tokens 5,6,7,8,9 -n 4 --kernels ref --kv-type f16 2>/dev/null)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ]; then ok "--kv-type f16: $a (ub 5, ub 2, ref)"
else bad "--kv-type f16: '$a' vs '$b' vs '$c'"; fi

tap_done
