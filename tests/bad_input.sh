#!/usr/bin/env bash
# Bad input: every invocation in the table below must exit non-zero (not
# through the timeout), print exactly one "error:" line that matches the
# expected message (naming the value and the reason), and, when run under
# mpirun, leave no rank behind. Covers baton, baton-bench and
# baton-mkmodel on 1 rank and, for setup that is collective, 2 or more:
# missing, empty, directory and truncated model files (cut at every section
# boundary: header, KV metadata, tensor infos, alignment padding, tensor
# data), a wrong architecture, head counts that do not divide, a context of
# 0 or larger than memory allows, a prompt longer than the context, -n
# negative, -ub larger than -b, more ranks than layers, -ts with zeros or
# the wrong count, tensor-parallel layouts that cannot be (-tp not dividing
# np, -sm tensor with --pipeline 1 or another -tp, more tensor ranks than
# heads, shares too big for the node), ranks that see different model files, baton-mkmodel
# families and head dims it cannot write (exit 2), unwritable and
# foreign HDF5 files, 0 threads, a non-numeric value for every numeric
# flag, and an unknown BATON_ISA (on one rank of two too); on 2 ranks, a
# model family's file with a required tensor missing, a key baton does not
# implement, yarn rope scaling, an unknown architecture. Ends with the table: invocation -> message.
set -u
bin=${BT_BUILDDIR:-$(pwd)}
launcher=${MPIEXEC:-$(command -v mpirun || true)}
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
py=$(command -v python3 || true)
if [ -z "$py" ]; then echo "SKIP: no python3 (makes the corrupted model files)"; exit 77; fi
. "$(dirname "$0")/tap.sh"
tap_tmp bad
last_rc=0
n=0
table="$tmp/table.md"
printf '| # | ranks | invocation | exit | message |\n| ---: | ---: | --- | ---: | --- |\n' >"$table"

# Processes still alive (not zombies) that carry this tag in their
# environment: ranks an MPI run left behind.
left_behind() {
    local tag=$1 e p
    for e in /proc/[0-9]*/environ; do
        if grep -qsz "^BT_BAD_INPUT_TAG=$tag\$" "$e"; then
            p=${e#/proc/}; p=${p%/environ}
            case $(ps -o stat= -p "$p" 2>/dev/null) in ''|Z*) ;; *) echo "$p" ;; esac
        fi
    done
}

# fails NP REGEX PROGRAM ARGS...: NP 0 runs the program directly, NP >= 1
# under mpirun with NP ranks (ARGS may hold ": -np 1 PROG ARGS" for MPMD).
fails() {
    local np=$1 re=$2
    shift 2
    n=$((n + 1))
    local tag="$$-$n" rc ranks=$np left= a next=
    local shown="$*"
    shown=${shown//$bin\//}
    [ -n "$smollm2" ] && shown=${shown//$smollm2/${smollm2##*/}}
    shown=${shown//$tmp/\$TMP}
    if [ "$np" -eq 0 ]; then
        ranks=1
        timeout -k 5 30 "$@" >"$tmp/out" 2>"$tmp/err"
        rc=$?
    else
        shown="mpirun -np $np $shown"
        for a in "$@"; do # MPMD: ": -np K PROG ..." adds K ranks
            [ "$next" = 1 ] && ranks=$((ranks + a))
            next=; [ "$a" = -np ] && next=1
        done
        BT_BAD_INPUT_TAG=$tag timeout -k 5 60 "$launcher" -np "$np" --oversubscribe \
            --bind-to none --mca mpi_yield_when_idle 1 "$@" >"$tmp/out" 2>"$tmp/err"
        rc=$?
        left=$(left_behind "$tag")
    fi
    last_rc=$rc
    local msg errors
    errors=$(cat "$tmp/err" "$tmp/out" | grep -c 'error:')
    msg=$(cat "$tmp/err" "$tmp/out" | grep -m1 'error:' | sed 's/^\[rank [0-9]*\] //')
    msg=${msg//$tmp/\$TMP}
    printf '| %d | %d | `%s` | %d | %s |\n' "$n" "$ranks" "$shown" "$rc" "${msg//|/\\|}" \
        >>"$table"
    if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ]; then
        bad "$n $shown: exit $rc"; cat "$tmp/err"
    elif [ "$errors" -ne 1 ]; then
        bad "$n $shown: $errors error lines, want 1"; cat "$tmp/err"
    elif ! grep -qE -- "$re" <<<"$msg"; then
        bad "$n $shown: message does not match /$re/"; cat "$tmp/err"
    elif [ -n "$left" ]; then
        bad "$n $shown: rank(s) left running: $left"
        kill -9 $left 2>/dev/null
    else
        ok "$n $shown"
    fi
}

b="$bin/baton"
bb="$bin/baton-bench"
mk="$bin/baton-mkmodel"
smollm2=${BT_SMOLLM2:-}
m="$tmp/tiny.gguf"
"$mk" --shape tiny --n-layer 4 -o "$m" >/dev/null 2>&1
"$mk" --shape tiny --n-layer 4 --seed 2 -o "$tmp/other.gguf" >/dev/null 2>&1
"$mk" --shape tiny --n-layer 4 --n-head 2 --n-head-kv 1 -o "$tmp/heads2.gguf" >/dev/null 2>&1
"$mk" --shape tiny --n-layer 4 --type q8_0 -o "$tmp/tinyq8.gguf" >/dev/null 2>&1
# KV cache of 16M positions x 8 layers x 512 wide: about 500 GB per rank
"$mk" --n-layer 8 --n-embd 512 --n-head 4 --n-head-kv 4 --type q8_0 -o "$tmp/wide.gguf" \
    >/dev/null 2>&1
[ -f "$m" ] && [ -f "$tmp/other.gguf" ] && [ -f "$tmp/wide.gguf" ] ||
    { echo "baton-mkmodel failed"; exit 1; }

# ---- model files: what the GGUF reader and the model binding refuse ----
"$py" - "$m" "$tmp" <<'PY'
# Writes the corrupted copies: cut at every section boundary (and inside
# the header), a wrong architecture, head counts that do not divide.
import struct, sys
src, out = sys.argv[1], sys.argv[2]
d = bytearray(open(src, 'rb').read())
o = 4
def u(f):
    global o
    v = struct.unpack_from('<' + f, d, o)[0]; o += struct.calcsize('<' + f); return v
def skip(t):
    global o
    if t == 8: k = u('Q'); o += k; return
    if t == 9:
        et, n = u('I'), u('Q')
        for _ in range(n): skip(et)
        return
    o += {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[t]
u('I'); n_tensors = u('Q'); n_kv = u('Q'); header = o
for _ in range(n_kv):
    k = u('Q'); o += k; skip(u('I'))
kv = o
for _ in range(n_tensors):
    k = u('Q'); o += k; k = u('I'); o += 8 * k + 4 + 8
infos = o
data = (o + 31) // 32 * 32   # baton-mkmodel writes the default alignment
assert data > infos, 'no padding to cut at'
cuts = {'in-header': 12, 'header': header, 'kv': kv, 'infos': infos, 'padding': data,
        'data': data + (len(d) - data) // 2}
for name, at in cuts.items():
    open('%s/cut-%s.gguf' % (out, name), 'wb').write(d[:at])
print('cut at bytes: ' + ', '.join('%s %d' % kv for kv in cuts.items()) + ' of %d' % len(d))
def value_at(key):
    k = key.encode()
    i = d.find(struct.pack('<Q', len(k)) + k)
    assert i >= 0, key
    return i + 8 + len(k)
def patched(name, fn):
    e = bytearray(d); fn(e); open('%s/%s.gguf' % (out, name), 'wb').write(e)
def set_u32(key, v):
    def fn(e):
        i = value_at(key); assert struct.unpack_from('<I', e, i)[0] == 4
        struct.pack_into('<I', e, i + 4, v)
    return fn
def set_arch(e):
    i = value_at('general.architecture')
    assert struct.unpack_from('<IQ', e, i) == (8, 5)
    e[i + 12:i + 17] = b'gemma'
patched('arch', set_arch)
patched('heads-kv', set_u32('llama.attention.head_count_kv', 3))  # 4 heads, 3 KV heads
patched('heads', set_u32('llama.attention.head_count', 3))         # n_embd 64, 3 heads
PY
: >"$tmp/empty.gguf"

fails 0 "nope.gguf: cannot open: No such file" "$b" -m "$tmp/nope.gguf" --tokens 1
fails 0 "is a directory, not a GGUF file" "$b" -m "$tmp" --tokens 1
fails 0 "empty.gguf: file is empty" "$b" -m "$tmp/empty.gguf" --tokens 1
fails 0 "cut-in-header.gguf: truncated: .* at offset 8 but file has 12" "$b" \
    -m "$tmp/cut-in-header.gguf" --tokens 1
fails 0 "cut-header.gguf: tensor count [0-9]+ is impossible: 0 bytes follow the header" "$b" \
    -m "$tmp/cut-header.gguf" --tokens 1
fails 0 "cut-kv.gguf: .*(truncated|impossible)" "$b" -m "$tmp/cut-kv.gguf" --tokens 1
fails 0 "cut-infos.gguf: .*(truncated|data|file has)" "$b" -m "$tmp/cut-infos.gguf" --tokens 1
fails 0 "cut-padding.gguf: tensor '.*' ends at byte [0-9]+ but file has" "$b" \
    -m "$tmp/cut-padding.gguf" --tokens 1
fails 0 "cut-data.gguf: tensor '.*' ends at byte [0-9]+ but file has" "$bb" \
    -m "$tmp/cut-data.gguf" -p 8 -n 0 -r 1
fails 2 "cut-data.gguf: tensor '.*' ends at byte [0-9]+ but file has" "$b" \
    -m "$tmp/cut-data.gguf" --tokens 1
fails 0 "architecture 'gemma' is not supported \(supported: llama, qwen2, qwen3, qwen3moe, gemma3, gpt-oss, deepseek2\)" "$b" -m "$tmp/arch.gguf" --tokens 1
fails 2 "head_count 4 is not a multiple of head_count_kv 3" "$b" -m "$tmp/heads-kv.gguf" --tokens 1
fails 0 "embedding_length 64 is not a multiple of head_count 3" "$bb" -m "$tmp/heads.gguf" \
    -p 8 -n 0 -r 1
fails 0 "heads must divide" "$mk" --n-head 5 -o "$tmp/x.gguf"
fails 0 "unknown model shape 'huge'" "$mk" --shape huge -o "$tmp/x.gguf"
fails 0 "--type: 'q3'" "$mk" --type q3 -o "$tmp/x.gguf"
fails 0 "no output file" "$mk"

# ---- context and memory ----
fails 0 "--ctx-size: 0 is out of range" "$b" -m "$m" --tokens 1 -c 0
mem_kb=$(sed -n 's/^MemAvailable: *\([0-9]*\) kB/\1/p' /proc/meminfo)
if [ -n "$mem_kb" ] && [ "$mem_kb" -lt 400000000 ]; then # the runs below need ~500 GB a rank
    fails 0 "the model does not fit in memory \(layers 0-[0-9]+\): it needs [0-9.]+ MiB for the weights, the KV cache \(16000000 positions\) and buffers \(micro-batch 1, [0-9]+ threads\); node '[^']+' \(rank 0\) needs [0-9.]+ MiB but only [0-9.]+ MiB of memory is available" \
        "$b" -m "$tmp/wide.gguf" --tokens 1 -n 1 -c 16000000
    fails 2 "no split of [0-9]+ layers over 2 ranks fits in memory; balanced by compute \(layers [-0-9 |]+\): the ranks need [0-9.]+ \| [0-9.]+ MiB for .*; node '[^']+' \(ranks 0-1\) needs [0-9.]+ MiB but only [0-9.]+ MiB of memory is available" \
        "$b" -m "$tmp/wide.gguf" --tokens 1 -n 1 -c 16000000
    fails 2 "needs [0-9.]+ MiB but only [0-9.]+ MiB of memory is available" \
        "$bb" -m "$tmp/wide.gguf" -p 16000000 -n 0 -r 1
else
    echo "SKIP: 16M-position context refused: MemAvailable ${mem_kb:-unknown} kB is too large to refuse it"
fi
# The node's sum, not one rank's need: a context that one rank alone fits
# and two ranks on this node together do not. The layers split, so the KV
# cache is shared out; 1024 threads' attention scratch (4 bytes a position
# each) is not, so two ranks need about twice what one does, and each of
# them less than one alone. -v reports the need that is compared; it is
# affine in the context, so two small contexts give it for any context.
# An id outside the vocabulary stops a run that passed the check before it
# touches its (lazily mapped) buffers.
mem_m="$tmp/mem.gguf"
"$mk" --n-layer 2 --n-embd 32 --n-head 4 --n-head-kv 1 -o "$mem_m" >/dev/null 2>&1
# A fixed node size: the machine's MemAvailable moves while other tests run
# beside this one (make -j), by more than the margin the check is sized with.
export BATON_MEM_AVAILABLE=16G
mem_args=(-m "$mem_m" --tokens 99999 -n 1 -t 1024 --kv-type f16)
mem_need() { # NP CTX: "need MiB available MiB" from rank 0's -v line
    timeout -k 5 60 "$launcher" -np "$1" --oversubscribe --bind-to none \
        --mca mpi_yield_when_idle 1 "$b" "${mem_args[@]}" -c "$2" -v 2>&1 |
        sed -n 's/^\(\[rank 0\] \)\{0,1\}debug: memory: .* need \([0-9.]*\) MiB of \([0-9.]*\) MiB available$/\2 \3/p'
}
mem_plan=$(printf '%s %s\n' "$(mem_need 1 100000)" "$(mem_need 1 1000000)" \
    "$(mem_need 2 100000)" "$(mem_need 2 1000000)" | "$py" -c '
import sys
v = [float(x) for x in sys.stdin.read().split()]
if len(v) != 8:
    print("error", "-v gave no memory line:", v); sys.exit()
(a1, avail, b1, _, a2, _, b2, _), c1, c2 = v, 1e5, 1e6
s1, s2 = (b1 - a1) / (c2 - c1), (b2 - a2) / (c2 - c1)  # MiB per position
ctx = int((0.7 * avail - (a1 - s1 * c1)) / s1)          # one rank: 70% of what is available
two = a2 + s2 * (ctx - c1)
if ctx > 1 << 24:
    print("skip", f"MemAvailable {avail:.0f} MiB needs a context above 16M positions")
elif two < 1.2 * avail:
    print("error", f"2 ranks need {two:.0f} MiB at {ctx} positions, not 1.2 x {avail:.0f}")
else:
    print("ok", ctx, f"{two:.0f}", f"{avail:.0f}")')
read -r mem_what mem_ctx mem_two mem_avail <<<"$mem_plan"
if [ "$mem_what" = ok ]; then
    timeout -k 5 60 "$b" "${mem_args[@]}" -c "$mem_ctx" >"$tmp/out" 2>"$tmp/err"
    if grep -q "outside the vocabulary" "$tmp/err" && ! grep -q "MiB of memory" "$tmp/err"; then
        ok "1 rank, $mem_ctx positions (70% of ${mem_avail} MiB): passes the memory check"
    else
        bad "1 rank, $mem_ctx positions (70% of ${mem_avail} MiB) refused"; cat "$tmp/err"
    fi
    fails 2 "no split of 2 layers over 2 ranks fits in memory.* the KV cache \($mem_ctx positions\).*\(ranks 0-1\) needs [0-9.]+ MiB but only [0-9.]+ MiB of memory is available" \
        "$b" "${mem_args[@]}" -c "$mem_ctx"
elif [ "$mem_what" = skip ]; then
    echo "SKIP: node memory sum of 2 ranks: ${mem_plan#skip }"
else
    bad "node memory sum: cannot size the context: $mem_plan"
fi
unset BATON_MEM_AVAILABLE
# BATON_MEM_AVAILABLE stands for the node's memory: a node too small for
# any split is refused with the need per rank; a malformed value is named
fails 2 "no split of 2 layers over 2 ranks fits in memory; balanced by compute \(layers 0-0 \| 1-1\): the ranks need [0-9.]+ \| [0-9.]+ MiB .*\(ranks 0-1\) needs [0-9.]+ MiB but only 0.1 MiB of memory is available" env BATON_MEM_AVAILABLE=100K \
    "$b" -m "$mem_m" --tokens 1 -n 1
fails 0 "the model does not fit in memory" env BATON_MEM_AVAILABLE=100K "$bb" -m "$mem_m" -p 8 -n 0 -r 1
fails 2 "BATON_MEM_AVAILABLE='12Q' is not a size" env BATON_MEM_AVAILABLE=12Q "$b" -m "$mem_m" --tokens 1 -n 1
fails 0 "BATON_MEM_AVAILABLE='-5' is not a size" env BATON_MEM_AVAILABLE=-5 "$b" -m "$mem_m" --tokens 1 -n 1
fails 0 "--ctx-size 4 is smaller than the prompt \(9\) plus -n \(1\)" "$b" -m "$m" \
    --tokens 1,2,3,4,5,6,7,8,9 -n 1 -c 4
if [ -n "$smollm2" ] && [ -f "$smollm2" ]; then
    fails 2 "the prompt \([0-9]+ tokens\) and 4 more do not fit the context: 0 of 8 positions" \
        "$b" -m "$smollm2" -p "a prompt that is certainly longer than eight tokens, surely" \
        -c 8 -n 4 -t 1
else
    echo "SKIP: no SmolLM2 model (BT_SMOLLM2) for the text prompt longer than the context"
fi

# ---- flags with values that make no sense ----
fails 0 "-n: -3 is out of range" "$b" -m "$m" --tokens 1 -n -3
fails 0 "-n: -1 is out of range" "$bb" -m "$m" -n -1
fails 2 "-ub 64 is larger than -b 32" "$b" -m "$m" --tokens 1 -ub 64 -b 32
fails 0 "-ub 64 is larger than -b 32" "$bb" -m "$m" -p 8 -ub 64 -b 32
fails 0 "--threads: 0 is out of range" "$b" -m "$m" --tokens 1 -t 0
fails 2 "-t: 0 is out of range" "$bb" -m "$m" -p 8 -n 0 -r 1 -t 0
fails 0 "-ub: 0 is out of range" "$b" -m "$m" --tokens 1 -ub 0
fails 2 "--pipeline: 2 is out of range" "$b" -m "$m" --tokens 1 --pipeline 2
fails 0 "nothing to run: every -p and -n is 0" "$bb" -m "$m" -p 0 -n 0
fails 0 "-npl: 0 is out of range" "$bb" -m "$m" -npl 0
fails 2 "--parallel: 4097 is out of range" "$bb" -m "$m" -p 8 -n 0 --parallel 1,4097
fails 0 "--groups 2 applies only to tests with -npl above 1" "$bb" -m "$m" -p 8 --groups 2
fails 0 "--tp-comm: 'sum' is not one of gather, allreduce" "$bb" -m "$m" -p 8 --tp-comm sum
fails 0 "--tp-comm allreduce applies only to tests with tensor ranks" "$bb" -m "$m" -p 8 \
    --tp-comm allreduce
fails 0 "--temp must be >= 0" "$b" -m "$m" --tokens 1 --temp -1
fails 0 "id 256 at index 1 is outside" "$b" -m "$m" --tokens 1,256
fails 2 "id 300 at index 1 is outside" "$b" -m "$m" --tokens 1,300
fails 0 "--tokens: .*item 2 is empty" "$b" -m "$m" --tokens 1,,2
fails 0 "no model given" "$b" --tokens 1
fails 0 "no model given" "$bb" -p 8
fails 0 "no prompt given" "$b" -m "$m"
fails 0 "unknown option '--bogus'" "$b" -m "$m" --tokens 1 --bogus
fails 0 "unknown option '--bogus'" "$bb" -m "$m" --bogus
fails 0 "option '--tokens' needs a value" "$b" -m "$m" --tokens
fails 0 "option '-p' needs a value" "$bb" -m "$m" -p
fails 0 "-o: 'xml'" "$bb" -m "$m" -o xml
fails 0 "-t: '4-1' is not a valid range" "$bb" -m "$m" -t 4-1
fails 0 "-r: 0 is out of range" "$bb" -m "$m" -r 0
fails 0 "-ub: 0 is out of range" "$bb" -m "$m" -ub 0
fails 0 "-p: -4 is out of range" "$bb" -m "$m" -p -4
fails 0 "nope.gguf: cannot open" "$bb" -m "$tmp/nope.gguf" -p 8 -n 0 -r 1
fails 0 "--kernel-types: 'q3_x' is not a type" "$bb" --kernels --kernel-types q3_x
fails 0 "unknown model shape 'huge'" "$bb" --kernels --kernel-shapes huge
fails 0 "markdown table only" "$bb" --kernels -o json
fails 2 "--kernels times one process; run it with one rank, not 2" "$bb" --kernels \
    --kernel-shapes tiny
fails 0 "--kv-type: 'q8' is not one of f32, f16" "$b" -m "$m" --tokens 1 --kv-type q8
fails 2 "--kv-type: 'bf16' is not one of f32, f16" "$bb" -m "$m" -p 8 -n 0 -r 1 --kv-type bf16
fails 0 "--kernels: 'gpu' is not one of cpu, exact, ref" "$b" -m "$m" --tokens 1 --kernels gpu
fails 0 "--ops: 'gpu' is not one of cpu, exact, ref" "$bb" -m "$m" -p 8 -n 0 -r 1 --ops gpu
fails 0 "--mmap: 2 is out of range" "$bb" -m "$m" -p 8 -n 0 -r 1 -mmp 2
# --kernels cuda: refused at once by a build without CUDA; with CUDA but no
# GPU (this machine), by every rank with one message (2 ranks)
if grep -q 'define BT_HAVE_CUDA 1' "$bin/config.h" 2>/dev/null; then
    if [ -e /dev/nvidia0 ]; then
        fails 2 "--gpu 99: this node has" "$b" -m "$m" --tokens 1 --kernels cuda --gpu 99
    else
        fails 2 "--kernels cuda: no usable CUDA device on this node" "$b" -m "$m" --tokens 1 \
            --kernels cuda
        fails 0 "--kernels cuda: no usable CUDA device on this node" "$bb" -m "$m" -p 8 -n 0 -r 1 \
            --ops cuda
    fi
else
    fails 0 "--kernels cuda: this build has no CUDA kernels \\(configure --with-cuda\\)" "$b" -m "$m" \
        --tokens 1 --kernels cuda
    fails 0 "--ops cuda: this build has no CUDA kernels \\(configure --with-cuda\\)" "$bb" -m "$m" \
        -p 8 -n 0 -r 1 --ops cuda
fi
fails 0 "--gpu: -1 is out of range" "$b" -m "$m" --tokens 1 --gpu -1
# the kernels' instruction set (BATON_ISA), checked by every rank; the
# builds' names are the architecture's (docs/kernels.md)
case $(uname -m) in
x86_64) isas="avx512, avx2, sse2" ;;
aarch64) isas="i8mm, dotprod, armv8" ;;
*) isas="generic" ;;
esac
fails 0 "BATON_ISA: 'avx9' is not one of auto, $isas" env BATON_ISA=avx9 \
    "$b" -m "$m" --tokens 1
fails 1 "BATON_ISA: 'sse4' is not one of auto, $isas" "$b" -m "$m" --tokens 1 \
    : -np 1 env BATON_ISA=sse4 "$b" -m "$m" --tokens 1
fails 2 "BATON_ISA: 'AVX2' is not one of auto, $isas" env BATON_ISA=AVX2 \
    "$bb" -m "$m" -p 8 -n 0 -r 1
fails 0 "BATON_ISA: 'neon' is not one of auto, $isas" env BATON_ISA=neon \
    "$bb" --kernels --kernel-shapes tiny
# the kernels' prefetch switch (BATON_PREFETCH), the same way
fails 0 "BATON_PREFETCH: 'x' is not 0 or 1" env BATON_PREFETCH=x "$b" -m "$m" --tokens 1
fails 1 "BATON_PREFETCH: '2' is not 0 or 1" "$b" -m "$m" --tokens 1 \
    : -np 1 env BATON_PREFETCH=2 "$b" -m "$m" --tokens 1
fails 0 "BATON_PREFETCH: 'yes' is not 0 or 1" env BATON_PREFETCH=yes \
    "$bb" --kernels --kernel-shapes tiny

# ---- a model family's strict loading (on 2 ranks: every rank refuses, one reports) ----
golden_dir=${BT_GOLDEN_DIR:-${BT_SRCDIR:-$(dirname "$0")/..}/tests/data/golden}
rewrite() { # SRC: the golden files rewritten with one change each
"$py" - "$1" "$tmp" <<'PY'
# Rewrites a golden file with one change each. qwen2: a required tensor
# left out, a key baton does not implement, yarn rope scaling. qwen3moe
# (3-D expert tensors): more experts per token than there are, a router of
# the wrong shape, an expert tensor one expert short. deepseek3: a latent
# rank that disagrees with the shapes, groups that do not divide the
# experts or more used than exist, a gating function baton does not know,
# a shared expert left out, the combined attn_kv_b of older converters.
import struct, sys
src, out = sys.argv[1], sys.argv[2]
d = open(src, 'rb').read()
o = 0
def u(f):
    global o
    v = struct.unpack_from('<' + f, d, o)[0]; o += struct.calcsize('<' + f); return v
def skip(t):
    global o
    if t == 8: n = u('Q'); o += n; return
    if t == 9:
        et, n = u('I'), u('Q')
        for _ in range(n): skip(et)
        return
    o += {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[t]
def s(b): return struct.pack('<Q', len(b)) + b
assert u('I') == 0x46554747
version = u('I'); n_tensors = u('Q'); n_kv = u('Q')
kvs, align = [], 32
for _ in range(n_kv):
    k = d[o + 8:o + 8 + u('Q')]; o += len(k); t = u('I'); at = o; skip(t)
    kvs.append((k, t, d[at:o]))
    if k == b'general.alignment': align = struct.unpack('<I', d[at:o])[0]
infos = []
for _ in range(n_tensors):
    name = d[o + 8:o + 8 + u('Q')]; o += len(name)
    nd = u('I'); ne = [u('Q') for _ in range(nd)]; typ = u('I'); off = u('Q')
    infos.append([name, ne, typ, off])
data = (o + align - 1) // align * align
ends = sorted(i[3] for i in infos)[1:] + [len(d) - data]
chunk = {i[3]: d[data + i[3]:data + e] for i, e in zip(sorted(infos, key=lambda i: i[3]), ends)}
def write(name, drop=None, kv_set=(), shape=None, rename=None):
    ks = [(k, t, v) for k, t, v in kvs if k not in [a for a, _, _ in kv_set]] + list(kv_set)
    ts = [i for i in infos if i[0] != drop]
    h = struct.pack('<IIQQ', 0x46554747, version, len(ts), len(ks))
    h += b''.join(s(k) + struct.pack('<I', t) + v for k, t, v in ks)
    body, off = b'', 0
    for name_, ne, typ, old in ts:
        if shape and name_ == shape[0]:  # the same bytes (too many: never read) under a new shape
            ne = shape[1]
        if rename and name_ == rename[0]:
            name_ = rename[1]
        h += s(name_) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', n) for n in ne)
        h += struct.pack('<IQ', typ, off)
        body += chunk[old]; off += len(chunk[old])
    h += bytes((-len(h)) % align)
    open('%s/%s.gguf' % (out, name), 'wb').write(h + body)
if 'qwen2' in src:
    write('q2-same')
    write('q2-missing', drop=b'blk.1.attn_k.bias')
    write('q2-key', kv_set=[(b'qwen2.attention.logit_softcapping', 6, struct.pack('<f', 30.0))])
    write('q2-yarn', kv_set=[(b'qwen2.rope.scaling.type', 8, s(b'yarn')),
                             (b'qwen2.rope.scaling.factor', 6, struct.pack('<f', 4.0))])
elif 'deepseek3' in src:
    u32 = lambda v: struct.pack('<I', v)
    write('ds-same')
    write('ds-lora', kv_set=[(b'deepseek2.attention.kv_lora_rank', 4, u32(41))])
    write('ds-qlora', kv_set=[(b'deepseek2.attention.q_lora_rank', 4, u32(33))])
    write('ds-groups', kv_set=[(b'deepseek2.expert_group_count', 4, u32(3))])
    write('ds-used', kv_set=[(b'deepseek2.expert_group_used_count', 4, u32(3))])
    write('ds-gating', kv_set=[(b'deepseek2.expert_gating_func', 4, u32(3))])
    write('ds-shared', drop=b'blk.2.ffn_gate_shexp.weight')
    write('ds-kvb', rename=(b'blk.0.attn_k_b.weight', b'blk.0.attn_kv_b.weight'))
else:
    write('moe-same')
    write('moe-used', kv_set=[(b'qwen3moe.expert_used_count', 4, struct.pack('<I', 9))])
    write('moe-router', shape=(b'blk.1.ffn_gate_inp.weight', [64, 4]))
    ne = [i[1] for i in infos if i[0] == b'blk.2.ffn_up_exps.weight'][0]
    write('moe-count', shape=(b'blk.2.ffn_up_exps.weight', ne[:2] + [ne[2] - 1]))
PY
}
rewrite "$golden_dir/tiny-qwen2-golden.gguf"
rewrite "$golden_dir/tiny-qwen3moe-golden.gguf"
rewrite "$golden_dir/tiny-deepseek3-golden.gguf"
for f in q2 moe ds; do
    g=$golden_dir/tiny-qwen2-golden.gguf
    [ $f = moe ] && g=$golden_dir/tiny-qwen3moe-golden.gguf
    [ $f = ds ] && g=$golden_dir/tiny-deepseek3-golden.gguf
    if cmp -s "$tmp/$f-same.gguf" "$g"; then
        ok "${g##*/} rewritten without a change is byte for byte the same"
    else
        bad "${g##*/} rewritten without a change differs (the rewriter is wrong)"
    fi
done
fails 2 "q2-missing.gguf: tensor 'blk.1.attn_k.bias' is missing \(architecture 'qwen2'\)" \
    "$b" -m "$tmp/q2-missing.gguf" --tokens 1,2
fails 2 "q2-key.gguf: key 'qwen2.attention.logit_softcapping' is not supported for architecture 'qwen2'" \
    "$b" -m "$tmp/q2-key.gguf" --tokens 1,2
fails 2 "q2-yarn.gguf: qwen2.rope.scaling.type = 'yarn' is not supported" \
    "$bb" -m "$tmp/q2-yarn.gguf" -p 8 -n 0 -r 1
fails 2 "moe-used.gguf: qwen3moe.expert_used_count = 9 must be in 1..qwen3moe.expert_count = 8" \
    "$b" -m "$tmp/moe-used.gguf" --tokens 1,2
fails 2 "moe-router.gguf: tensor 'blk.1.ffn_gate_inp.weight' has shape \[64, 4, 1, 1\], expected \[64, 8\]" \
    "$bb" -m "$tmp/moe-router.gguf" -p 8 -n 0 -r 1
fails 2 "moe-count.gguf: tensor 'blk.2.ffn_up_exps.weight' has shape \[[0-9]+, [0-9]+, 7, 1\], expected \[[0-9]+, [0-9]+, 8\]" \
    "$b" -m "$tmp/moe-count.gguf" --tokens 1,2
fails 2 "architecture 'gemma' is not supported \(supported: llama, qwen2, qwen3, qwen3moe, gemma3, gpt-oss, deepseek2\)" \
    "$b" -m "$tmp/arch.gguf" --tokens 1
fails 2 "ds-lora.gguf: Multi-head Latent Attention: key_length must be kv_lora_rank \+ rope \(head_count_kv 1, key_length 56, kv_lora_rank 41, rope.dimension_count 16" \
    "$b" -m "$tmp/ds-lora.gguf" --tokens 1,2
fails 2 "ds-qlora.gguf: tensor 'blk.0.attn_q_a.weight' has shape \[64, 32, 1, 1\], expected \[64, 33\]" \
    "$b" -m "$tmp/ds-qlora.gguf" --tokens 1,2
fails 2 "ds-groups.gguf: deepseek2.expert_group_count = 3, deepseek2.expert_group_used_count = 1 do not fit 8 experts of which 3 are used" \
    "$bb" -m "$tmp/ds-groups.gguf" -p 8 -n 0 -r 1
fails 2 "ds-used.gguf: deepseek2.expert_group_count = 2, deepseek2.expert_group_used_count = 3 do not fit 8 experts" \
    "$b" -m "$tmp/ds-used.gguf" --tokens 1,2
fails 2 "ds-gating.gguf: deepseek2.expert_gating_func = 3 is not a gating function baton knows" \
    "$b" -m "$tmp/ds-gating.gguf" --tokens 1,2
fails 2 "ds-shared.gguf: tensor 'blk.2.ffn_gate_shexp.weight' is missing \(architecture 'deepseek2'\)" \
    "$b" -m "$tmp/ds-shared.gguf" --tokens 1,2
fails 2 "ds-kvb.gguf: tensor 'blk.0.attn_kv_b.weight': the combined attn_kv_b layout of older converters is not implemented" \
    "$b" -m "$tmp/ds-kvb.gguf" --tokens 1,2
fails 2 "tensor parallelism of Multi-head Latent Attention \(architecture 'deepseek2'\) is not implemented" \
    "$b" -m "$golden_dir/tiny-deepseek3-golden.gguf" --tokens 1,2 -sm tensor

# ---- ranks: more than layers, -ts, different files ----
fails 5 "cannot split 4 layers over 5 stages" "$b" -m "$m" --tokens 1,2
fails 5 "cannot split 4 layers over 5 stages" "$bb" -m "$m" -p 8 -n 0 -r 1
# tensor parallelism: layouts that cannot be (np = stages x -tp; -sm tensor: one stage)
fails 2 "-tp 3 does not divide the 2 ranks into stages" "$b" -m "$m" --tokens 1,2 -n 1 -tp 3
fails 3 "-tp 2 does not divide the 3 ranks into stages" "$b" -m "$m" --tokens 1,2 -n 1 -tp 2
fails 2 "-tp: 0 is out of range" "$b" -m "$m" --tokens 1 -tp 0
fails 2 "-sm tensor with --pipeline 1: the 2 ranks form one stage" "$b" -m "$m" --tokens 1,2 \
    -sm tensor --pipeline 1
fails 2 "-sm tensor makes all 2 ranks one stage of 2 tensor ranks, but -tp is 1" "$b" -m "$m" \
    --tokens 1,2 -sm tensor -tp 1
fails 2 "-sm: 'rows' is not one of layer, tensor" "$b" -m "$m" --tokens 1 -sm rows
fails 2 "--tp-comm: 'sum' is not one of gather, allreduce" "$b" -m "$m" --tokens 1 -sm tensor \
    --tp-comm sum
# allreduce cuts attn_output by the heads' columns: tiny's heads are 16 wide, Q8_0's blocks 32
fails 3 "--tp-comm allreduce cuts blk.0.attn_output.weight by its columns at [0-9]+ and [0-9]+, but its type q8_0 stores blocks of 32" \
    "$b" -m "$tmp/tinyq8.gguf" --tokens 1,2 -n 1 -sm tensor --tp-comm allreduce
fails 4 "4 tensor ranks per stage, but the model has 2 query heads: each tensor rank needs at least one" \
    "$b" -m "$tmp/heads2.gguf" --tokens 1,2 -n 1 -sm tensor
fails 2 "the model does not fit in memory \(layers 0-3\): it needs [0-9.]+ MiB for 2 tensor ranks' shares of the weights.*only 0.1 MiB" \
    env BATON_MEM_AVAILABLE=100K "$b" -m "$m" --tokens 1,2 -n 1 -sm tensor
fails 2 "-ts: ratio 1 is 0; every ratio must be positive" "$b" -m "$m" --tokens 1 -ts 1,0
fails 2 "-ts: ratio 0 is 0; every ratio must be positive" "$bb" -m "$m" -p 8 -n 0 -r 1 -ts 0/1
fails 2 "-ts: 3 ratios given for 2 ranks" "$b" -m "$m" --tokens 1 -ts 1,1,1
fails 2 "-ts: 3 ratios given for 2 ranks" "$bb" -m "$m" -p 8 -n 0 -r 1 -ts 1/1/1
fails 2 "-ts: '1,a': item 2 is not a number" "$b" -m "$m" --tokens 1 -ts 1,a
fails 1 "ranks opened different model files: .*differing: rank 1 " \
    "$b" -m "$m" --tokens 1 : -np 1 "$b" -m "$tmp/other.gguf" --tokens 1
fails 1 "ranks opened different model files: .*differing: rank 1 " \
    "$bb" -m "$m" -p 8 -n 0 -r 1 : -np 1 "$bb" -m "$tmp/other.gguf" -p 8 -n 0 -r 1
fails 1 "nope.gguf: cannot open" \
    "$b" -m "$m" --tokens 1 : -np 1 "$b" -m "$tmp/nope.gguf" --tokens 1
fails 3 "nope.gguf: cannot open" "$b" -m "$tmp/nope.gguf" --tokens 1

# ---- output files ----
fails 0 "nodir/r.h5: creating the file failed" "$bb" -m "$m" -p 8 -n 0 -r 1 \
    --hdf5 "$tmp/nodir/r.h5"
fails 2 "nodir/r.h5: creating the file failed" "$bb" -m "$m" -p 8 -n 0 -r 1 \
    --hdf5 "$tmp/nodir/r.h5"
echo "not hdf5" >"$tmp/text.h5"
fails 0 "text.h5 exists but is not an HDF5 file" "$bb" -m "$m" -p 8 -n 0 -r 1 --hdf5 "$tmp/text.h5"
if command -v h5copy >/dev/null && timeout 60 "$bb" -m "$m" -p 8 -n 0 -r 1 -t 1 \
    --hdf5 "$tmp/valid.h5" >/dev/null 2>&1 &&
    h5copy -i "$tmp/valid.h5" -o "$tmp/foreign.h5" -s /samples -d /other >/dev/null 2>&1; then
    sum=$(md5sum <"$tmp/foreign.h5")
    fails 2 "foreign.h5 is not a baton-bench results file" "$bb" -m "$m" -p 8 -n 0 -r 1 \
        --hdf5 "$tmp/foreign.h5"
    [ "$sum" = "$(md5sum <"$tmp/foreign.h5")" ] && ok "foreign HDF5 file left untouched" ||
        bad "foreign HDF5 file changed"
else
    bad "could not make an HDF5 file of another layout (baton-bench, h5copy)"
fi
# a results file of an older format version (rows without n_parallel): refused,
# with both versions and what to do, its bytes and mtime (set to 2001) unchanged
if timeout 60 "$bb" -m "$m" -p 8 -n 0 -r 1 -t 1 --hdf5 "$tmp/older.h5" >/dev/null 2>&1 &&
    "$bin/tests/check_results" --set-version "$tmp/older.h5" 2 &&
    touch -d "2001-01-01 00:00:00.123456789" "$tmp/older.h5"; then
    sum=$(md5sum <"$tmp/older.h5") when=$(stat -c %y "$tmp/older.h5")
    fails 2 "older.h5 is format version 2, older than version 8 that this build writes.*give --hdf5 a new file" \
        "$bb" -m "$m" -p 8 -n 0 -r 1 --hdf5 "$tmp/older.h5"
    [ "$sum" = "$(md5sum <"$tmp/older.h5")" ] && [ "$when" = "$(stat -c %y "$tmp/older.h5")" ] &&
        ok "older-version HDF5 file left untouched (bytes and mtime)" ||
        bad "older-version HDF5 file changed"
else
    bad "could not make a format version 2 results file (baton-bench, check_results --set-version)"
fi
fails 0 "--dump-logits: cannot create '/nonexistent/dir/x.bin'" "$b" -m "$m" --tokens 1 \
    --dump-logits /nonexistent/dir/x.bin
fails 2 "--trace: cannot create '/nonexistent/dir/t.json'" "$b" -m "$m" --tokens 1 \
    --trace /nonexistent/dir/t.json
fails 0 "--trace-dir: cannot create '/nonexistent/dir'" "$bb" -m "$m" -p 8 -n 0 -r 1 \
    --trace-dir /nonexistent/dir
fails 0 "/nonexistent/dir" "$mk" -o /nonexistent/dir/x.gguf

# ---- a non-numeric value for every numeric flag ----
for f in -n -b -ub --pipeline --top-k --repeat-last-n --mmap; do
    fails 0 "^error: $f: 'x' is not an integer" "$b" -m "$m" --tokens 1 "$f" x
done
fails 0 "^error: --ctx-size: 'x' is not an integer" "$b" -m "$m" --tokens 1 -c x
fails 0 "^error: --threads: 'x' is not an integer" "$b" -m "$m" --tokens 1 -t x
for f in --temp --top-p --min-p --repeat-penalty; do
    fails 0 "^error: $f: 'x' is not a number" "$b" -m "$m" --tokens 1 "$f" x
done
fails 0 "^error: --seed: 'x' is not a 64-bit non-negative integer" "$b" -m "$m" --tokens 1 -s x
fails 0 "^error: --tokens: 'x' is not an integer" "$b" -m "$m" --tokens x
fails 0 "^error: -ts: '1,x': item 2 is not a number" "$b" -m "$m" --tokens 1 -ts 1,x
for f in -p -n -b -ub -t --pipeline --kernel-tokens; do
    fails 0 "^error: $f: 'x' is not an integer or range" "$bb" -m "$m" "$f" x
done
fails 0 "^error: -pg: 'x' is not an integer or range" "$bb" -m "$m" -pg 8,x
fails 0 "^error: -r: 'x' is not an integer" "$bb" -m "$m" -r x
fails 0 "^error: --mmap: 'x' is not an integer" "$bb" -m "$m" -mmp x
fails 0 "^error: --kernel-bw-mib: 'x' is not an integer" "$bb" --kernels --kernel-bw-mib x
fails 0 "^error: --delay: 'x' is not a number of seconds" "$bb" -m "$m" --delay x
fails 0 "^error: --kernel-time: 'x' is not a number of seconds" "$bb" --kernels --kernel-time x
fails 0 "^error: -ts: 'x': item 1 is not a number" "$bb" -m "$m" -ts x
for f in --n-vocab --n-embd --n-layer --n-head --n-head-kv --n-ff --n-ctx --n-rot --head-dim \
    --swa --rope-freqs; do
    fails 0 "^error: $f: 'x' is not an integer" "$mk" "$f" x -o "$tmp/x.gguf"
done
fails 0 "^error: --seed: 'x' is not a 64-bit non-negative integer" "$mk" --seed x -o "$tmp/x.gguf"
fails 0 "^error: --rope-base: 'x' is not a positive number" "$mk" --rope-base x -o "$tmp/x.gguf"
fails 0 "^error: mkmodel: n_rot 6 must be even and at most the head dim 4 " \
    "$mk" --n-embd 16 --n-head 4 --n-rot 6 -o "$tmp/x.gguf"
fails 0 "^error: mkmodel: n_rot 3 must be even" "$mk" --n-rot 3 -o "$tmp/x.gguf"
# a family or shape baton-mkmodel cannot write: a usage error, exit 2, no file
usage_exit() {
    if [ "$last_rc" -eq 2 ] && [ ! -e "$tmp/x.gguf" ]; then ok "$n: exit 2, no file"; else
        bad "$n: exit $last_rc (want 2), file $([ -e "$tmp/x.gguf" ] && echo written || echo none)"
    fi
    rm -f "$tmp/x.gguf"
}
fails 0 "^error: unknown architecture 'nope' \(known: llama, qwen2, qwen3, qwen3moe, gemma3, gpt-oss, deepseek2\)" \
    "$mk" --arch nope -o "$tmp/x.gguf"
usage_exit
fails 0 "^error: mkmodel: head dim 33 must be even" "$mk" --arch qwen3 --head-dim 33 \
    -o "$tmp/x.gguf"
usage_exit
fails 0 "^error: mkmodel: sliding window 8: architecture llama has no sliding-window layers" \
    "$mk" --swa 8 -o "$tmp/x.gguf"
usage_exit
fails 0 "^error: mkmodel: rope factors for context 64: architecture qwen2 has no rope_freqs" \
    "$mk" --arch qwen2 --rope-freqs 64 -o "$tmp/x.gguf"
usage_exit
fails 0 "^error: mkmodel: n_rot 34 must be even and at most the head dim 32 " \
    "$mk" --arch gemma3 --n-rot 34 -o "$tmp/x.gguf"
usage_exit
fails 0 "^error: unknown model shape 'nope' \(known: tiny, " "$mk" --shape nope -o "$tmp/x.gguf"
usage_exit
# --vocab-from: a file without a vocabulary, one that is not there, and --n-vocab beside it
fails 0 "^error: mkmodel: --vocab-from [$]TMP/tiny.gguf: no tokenizer.ggml.tokens array of strings" \
    "$mk" --vocab-from "$m" -o "$tmp/x.gguf"
usage_exit
fails 0 "^error: gguf: [$]TMP/none.gguf: cannot open: No such file" \
    "$mk" --vocab-from "$tmp/none.gguf" -o "$tmp/x.gguf"
usage_exit
fails 0 "^error: --n-vocab and --vocab-from: the vocabulary's size is its token count" \
    "$mk" --vocab-from "${BT_SRCDIR:-$(dirname "$0")/..}/tests/data/spm-tiny.gguf" --n-vocab 5 \
    -o "$tmp/x.gguf"
usage_exit

echo
echo "Bad input table ($n invocations; \$TMP is a fresh temporary folder):"
cat "$table"
echo
tap_done
