#!/usr/bin/env bash
# The real SmolLM2-135M-Instruct (Q4_1) end to end: the greedy continuation
# of fixed prompts equals llama.cpp's (tests/data/smollm2-reference.txt) at
# 1, 2 and 3 ranks with pipelining off and on, for both fast kernel sets; text, chat, interactive and
# sampling through the CLI. Skips when the model has not been fetched
# (scripts/fetch-smollm2; CI fetches it).
set -u
bin=${BT_BUILDDIR:-$(pwd)}
src=${BT_SRCDIR:-$(dirname "$0")/..}
model=${BT_SMOLLM2:-$src/models/SmolLM2-135M-Instruct.Q4_1.gguf}
ref="$src/tests/data/smollm2-reference.txt"
if [ ! -f "$model" ]; then
    echo "SKIP: SmolLM2 model not found at $model (run scripts/fetch-smollm2)"
    exit 77
fi
. "$(dirname "$0")/tap.sh"
tap_mpi 120
tap_tmp smol
field() { sed -n "s/^$1 $2 //p" "$ref" | head -n 1; }

# ---- greedy continuations against the reference ----
# --kernels exact (f32 activations) against llama.cpp on an f32 copy of the
# weights, every token; --kernels cpu (8-bit activations for Q4_1, as
# llama.cpp computes a Q4_1 file) against llama.cpp on the file itself, for
# as long as the two agree: all of A, B until llama.cpp's f16 KV cache
# (baton keeps f32 here) tips a near tie. cpu tokens must also not depend
# on ranks or pipelining.
prefix() { # common leading words of $1 and $2
    local -a a b; read -ra a <<<"$1"; read -ra b <<<"$2"; local i=0
    while [ $i -lt ${#a[@]} ] && [ $i -lt ${#b[@]} ] && [ "${a[$i]}" = "${b[$i]}" ]; do i=$((i + 1)); done
    echo $i
}
for case in A B; do
    prompt=$(field "$case" prompt | tr ' ' ',')
    for kern in exact cpu; do
        if [ $kern = exact ]; then want=$(field "$case" greedy); else want=$(field "$case" greedy-q4); fi
        n=$(echo "$want" | wc -w)
        if [ -z "$prompt" ] || [ "$n" -eq 0 ]; then bad "reference $case missing in $ref"; continue; fi
        need=$n
        if [ $kern = cpu ] && [ $case = B ]; then need=9; fi
        first=
        for np in 1 2 3; do
            for pl in 0 1; do
                got=$(mpi $np "$bin/baton" -m "$model" --tokens "$prompt" -n $((n - 1)) -ub 4 \
                    --pipeline $pl -t 1 --kernels $kern 2>"$tmp/err")
                same=$(prefix "$got" "$want")
                first=${first:-$got}
                if [ "$same" -ge "$need" ] && [ "$got" = "$first" ]; then
                    ok "prompt $case, --kernels $kern: $same of $n greedy tokens as llama.cpp on $np ranks, pipeline $pl"
                else bad "prompt $case, --kernels $kern on $np ranks, pipeline $pl ($same agree, need $need):
  got  $got
  want $want
  1 rank gave $first"; cat "$tmp/err"; fi
            done
        done
    done
done

# ---- logits of prompt A's last position against llama.cpp's (f32 weights) ----
prompt=$(field A prompt | tr ' ' ',')
"$bin/baton" -m "$model" --tokens "$prompt" -n 0 -t 1 --kernels exact --dump-logits "$tmp/a.bin" \
    >/dev/null 2>&1
if python3 - "$tmp/a.bin" "$src/tests/data/smollm2-ref-logits-A.bin" <<'PY'
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
n = len(b) // 4
rows = len(a) // len(b)
x = struct.unpack("<%df" % n, a[(rows - 1) * len(b):]); y = struct.unpack("<%df" % n, b)
d = max(abs(p - q) for p, q in zip(x, y))
print("prompt A last-position logits: max abs diff %.3g vs llama.cpp" % d)
sys.exit(0 if d <= 1e-3 else 1)
PY
then ok "prompt A logits within 1e-3 of llama.cpp's"; else bad "prompt A logits"; fi

# ---- the kernels' instruction sets: the same logits bit for bit from the
# avx512 and avx2 builds (--kernels cpu: exact integer sums, one float
# sequence per output), and the sse2 build's exact kernels within 1e-3 of
# llama.cpp's, as above ----
read -r top mid base <<<"$(case $(uname -m) in aarch64) echo i8mm dotprod armv8 ;; *) echo avx512 avx2 sse2 ;; esac)"
for isa in $top $mid $base; do
    kern=cpu; [ $isa = $base ] && kern=exact
    if BATON_ISA=$isa "$bin/baton" -m "$model" --tokens "$prompt" -n 0 -t 2 --kernels $kern \
        --dump-logits "$tmp/$isa.bin" >/dev/null 2>"$tmp/err"; then :
    elif grep -q "cannot run on this CPU" "$tmp/err"; then
        echo "SKIP: BATON_ISA=$isa logits: this CPU $(grep -o "lacks [^)]*" "$tmp/err")"; continue
    else bad "BATON_ISA=$isa"; cat "$tmp/err"; continue; fi
    case $isa in
    "$mid") if [ ! -f "$tmp/$top.bin" ]; then echo "SKIP: $mid vs $top logits: no $top run on this CPU"
          elif cmp -s "$tmp/$top.bin" "$tmp/$mid.bin"; then ok "$mid build: $top's logits, bit for bit"
          else bad "$mid logits differ from $top's"; fi ;;
    "$base") if python3 - "$tmp/$base.bin" "$src/tests/data/smollm2-ref-logits-A.bin" <<'PY'
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
n = len(b) // 4
x = struct.unpack("<%df" % n, a[-len(b):]); y = struct.unpack("<%df" % n, b)
d = max(abs(p - q) for p, q in zip(x, y))
print("baseline build, prompt A last-position logits: max abs diff %.3g vs llama.cpp" % d)
sys.exit(0 if d <= 1e-3 else 1)
PY
          then ok "$base build: logits within 1e-3 of llama.cpp's"; else bad "$base logits"; fi ;;
    esac
done

# ---- text in, text out ----
# (exact kernels: with 8-bit activations this 135M Q4_1 model answers
# "L'Étoile, ...", as llama.cpp does on the same file)
out=$(mpi 2 "$bin/baton" -m "$model" --chat -p "What is the capital of France?" -n 32 --temp 0 \
    -t 1 --kernels exact 2>"$tmp/err")
if echo "$out" | grep -q "Paris"; then ok "chat answer on 2 ranks: $(echo "$out" | head -c 80)"
else bad "chat answer: '$out'"; cat "$tmp/err"; fi
grep -q "prompt eval time" "$tmp/err" && grep -q " eval time" "$tmp/err" && ok "timings line" ||
    bad "timings line"
out=$("$bin/baton" -m "$model" -p "The capital of France is" -n 8 --temp 0 --print-token-ids -t 1 \
    --kernels exact 2>/dev/null)
ids=$(echo "$out" | tail -n 1)
if echo "$out" | head -n 1 | grep -q "Paris" && echo "$ids" | grep -qE '^[0-9]+(,[0-9]+)*$'; then
    ok "text prompt and --print-token-ids ($ids)"
else bad "text prompt: '$out'"; fi

# interactive: two turns on stdin, one KV cache
printf 'What is the capital of France?\nAnd of Italy?\n' >"$tmp/turns"
out=$(mpi 2 "$bin/baton" -m "$model" --chat -i -n 24 --temp 0 -t 1 --kernels exact <"$tmp/turns" \
    2>"$tmp/err")
turns=$(echo "$out" | grep -c '^> ')
if [ "$turns" -ge 2 ] && echo "$out" | grep -q "Paris" && echo "$out" | grep -q "Rome"; then
    ok "interactive chat: two turns answered (Paris, Rome)"
else bad "interactive chat:
$out"; cat "$tmp/err"; fi

# sampling: the same seed gives the same text, on 1 and 2 ranks alike
s1=$("$bin/baton" -m "$model" -p "Once upon a time" -n 24 --temp 0.9 --seed 7 -t 1 2>/dev/null)
s2=$(mpi 2 "$bin/baton" -m "$model" -p "Once upon a time" -n 24 --temp 0.9 --seed 7 -t 1 2>/dev/null)
s3=$("$bin/baton" -m "$model" -p "Once upon a time" -n 24 --temp 0.9 --seed 8 -t 1 2>/dev/null)
if [ -n "$s1" ] && [ "$s1" = "$s2" ]; then ok "seeded sampling repeats across rank counts"
else bad "seeded sampling: '$s1' vs '$s2'"; fi
[ "$s1" != "$s3" ] && ok "another seed, another text" || bad "seeds 7 and 8 gave the same text"

# bad input
m="$tmp/none.gguf"
"$bin/baton-mkmodel" --n-layer 2 -o "$m" >/dev/null 2>&1
"$bin/baton" -m "$m" -p "hello" >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "has no tokenizer" "$tmp/err" && ok "text prompt on a model without vocabulary" ||
    { bad "no-vocabulary model"; cat "$tmp/err"; }
"$bin/baton" -m "$model" -p "hi" --temp -1 >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "temp must be >= 0" "$tmp/err" && ok "--temp -1 refused" ||
    { bad "--temp -1"; cat "$tmp/err"; }

tap_done
