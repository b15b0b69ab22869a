#!/usr/bin/env bash
# baton over several ranks through mpirun: the golden run on 2 and 3 ranks
# and the trace file (every run inside a timeout). (Setup errors that must
# stop every rank with one message: tests/bad_input.sh.)
set -u
bin=${BT_BUILDDIR:-$(pwd)}
. "$(dirname "$0")/tap.sh"
tap_mpi 60
tap_tmp mpicli

golden=${BT_GOLDEN_DIR:-${BT_SRCDIR:-$(dirname "$0")/..}/tests/data/golden}/tiny-llama-golden-f32.gguf
if [ -f "$golden" ]; then
    "$bin/baton" -m "$golden" --tokens "$(seq -s, 1 32)" -n 8 -t 1 \
        --dump-logits "$tmp/l1.bin" >/dev/null 2>&1
    for np in 2 3; do
        for pl in 0 1; do
            out=$(mpi $np "$bin/baton" -m "$golden" --tokens "$(seq -s, 1 32)" -n 8 -ub 5 \
                --pipeline $pl -t 1 --dump-logits "$tmp/l$np.bin" 2>"$tmp/err")
            if [ "$out" = "235 206 155 56 69 202 167 91 210" ]; then
                ok "golden tokens on $np ranks, pipeline $pl"
            else
                bad "golden on $np ranks, pipeline $pl: '$out'"; cat "$tmp/err"
            fi
        done
        if cmp -s "$tmp/l1.bin" "$tmp/l$np.bin"; then ok "golden logits on $np ranks bitwise equal to 1 rank"
        else bad "golden logits on $np ranks differ from 1 rank"; fi
    done
else
    bad "golden reference file missing: $golden (golden MPI checks; it ships in tests/data/golden)"
fi

m="$tmp/tiny.gguf"
"$bin/baton-mkmodel" --shape tiny --n-layer 4 -o "$m" >/dev/null 2>&1

# the CUDA set's arithmetic (cuda-host: what a GPU must give) keeps
# invariant 1 too: the same logits on 1 rank, 2 stages and 2 tensor ranks
q="$tmp/tiny-q4k.gguf"
"$bin/baton-mkmodel" --shape tiny --n-layer 4 --type q4_k -o "$q" >/dev/null 2>&1
"$bin/baton" -m "$q" --tokens "$(seq -s, 1 24)" -n 4 -t 1 --kernels cuda-host \
    --dump-logits "$tmp/c1.bin" >/dev/null 2>&1
for layout in "-ub 5" "-ub 3 --pipeline 0" "-sm tensor --pipeline 0 -ub 7"; do
    # shellcheck disable=SC2086
    if mpi 2 "$bin/baton" -m "$q" --tokens "$(seq -s, 1 24)" -n 4 -t 1 --kernels cuda-host \
        $layout --dump-logits "$tmp/c2.bin" >/dev/null 2>"$tmp/err" &&
        [ -s "$tmp/c1.bin" ] && cmp -s "$tmp/c1.bin" "$tmp/c2.bin"; then
        ok "cuda-host logits on 2 ranks ($layout) bitwise equal to 1 rank"
    else
        bad "cuda-host logits on 2 ranks ($layout) differ from 1 rank"; cat "$tmp/err"
    fi
done

# trace: valid Chrome trace JSON with a track per rank
if mpi 3 "$bin/baton" -m "$m" --tokens "$(seq -s, 1 40)" -n 2 -ub 8 -t 1 \
    --trace "$tmp/trace.json" >/dev/null 2>"$tmp/err" &&
    python3 - "$tmp/trace.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
ranks = {e["tid"] for e in ev if e.get("ph") == "X" and e["name"] == "compute"}
assert ranks == {0, 1, 2}, ranks
PY
then
    ok "trace JSON: compute events on ranks 0-2"
    # every printed share is a percentage, a stage's busy and wait fit in
    # the span, and the bubble is the idle share: 100 - the mean busy share
    if python3 - "$tmp/err" 3 <<'PY'
import re, sys
text, n = open(sys.argv[1]).read(), int(sys.argv[2])
st = re.findall(r"stage (\d+): busy +([0-9.]+)%  wait +([0-9.]+)%", text)
assert [int(s[0]) for s in st] == list(range(n)), st
busy = [float(s[1]) for s in st]
wait = [float(s[2]) for s in st]
b = re.search(r"bubble: measured ([0-9.]+)% .* ideal \(S-1\)/\(M\+S-1\) = ([0-9.]+)% "
              r"for S=(\d+), M=(\d+)", text)
assert b, "no bubble line"
bubble, ideal, S, M = float(b[1]), float(b[2]), int(b[3]), int(b[4])
for x in busy + wait + [bubble, ideal]:
    assert 0 <= x <= 100, ("out of [0,100]", busy, wait, bubble, ideal)
for u, w in zip(busy, wait):
    assert u + w <= 100.1, ("busy + wait > 100", u, w)  # each printed to 0.1
assert abs(bubble - (100 - sum(busy) / n)) <= 0.15, ("bubble != 100 - mean busy", bubble, busy)
assert S == n and abs(ideal - 100 * (S - 1) / (M + S - 1)) <= 0.05, ("ideal", ideal, S, M)
PY
    then ok "busy, wait and bubble in [0,100]%, busy+wait <= 100, bubble = 100 - mean busy"
    else bad "busy/wait/bubble figures"; grep -E "stage|bubble" "$tmp/err"; fi
else
    bad "trace"; cat "$tmp/err"
fi

# more threads than the rank's affinity mask allows (what mpirun's default
# binding to one core does): one warning naming the fix; none when they fit
on_cpu0() {
    timeout -k 5 "$mpi_timeout" taskset -c 0 "$launcher" -np 1 --bind-to none "$bin/baton" \
        -m "$m" --tokens 1,2,3 -n 2 "$@" >/dev/null
}
if command -v taskset >/dev/null; then
    on_cpu0 -t 2 2>"$tmp/err"
    on_cpu0 -t 1 2>"$tmp/err1"
    if [ "$(grep -c 'warning: 2 threads, but this rank may run on 1 CPU .*--bind-to none' "$tmp/err")" = 1 ] &&
        ! grep -q warning "$tmp/err1"; then
        ok "-t 2 on one CPU: one warning with the fix; -t 1: none"
    else
        bad "-t 2 on one CPU: $(cat "$tmp/err"); -t 1: $(grep warning "$tmp/err1")"
    fi
else
    bad "taskset is missing (util-linux)"
fi

tap_done
