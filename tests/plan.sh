#!/usr/bin/env bash
# baton-plan end to end: baton-bench --profile writes /profile; baton-plan
# prints a table per node count from it (and from a shape and a node's
# rates), appends /plan, and scripts/plot-plan draws it; a 2-rank
# benchmark of the same model is predicted from the profile (--compare)
# and the simulated timeline written as a Chrome trace. The error against
# the measurement is logged, never held to a bound (docs/benchmarking.md
# reports the real comparison): under make -j, other tests' ranks share
# the 2 cores and a decode step can wait a scheduler slice a hop (measured:
# 25x slower than predicted), so the checks here are the ones timing
# cannot move: every row matched and predicted, the analytic model and the
# event simulator agreeing, the error column the two figures' ratio.
# Bad input: one message, a non-zero exit.
set -u
bin=${BT_BUILDDIR:-$(pwd)}
scripts=${BT_SRCDIR:-$(dirname "$0")/..}/scripts
py=/usr/bin/python3
. "$(dirname "$0")/tap.sh"
tap_mpi 120
tap_tmp plan

m=$tmp/m.gguf
h5=$tmp/r.h5
"$bin/baton-mkmodel" --shape tiny --n-layer 8 --n-embd 256 --n-ff 768 --n-head 4 --n-head-kv 2 \
    --type q8_0 -o "$m" >/dev/null 2>&1 || { echo "baton-mkmodel failed"; exit 1; }

# the profile: 1, 2, 4, ... 64 rows at two contexts, head, embedding and
# sampling; with cores to spare, the layer at context 0 while the others
# read memory (shared)
cores=$(nproc)
if timeout 300 "$bin/baton-bench" -m "$m" --profile -t 1 -ub 64 --profile-ctx 0,128 \
    --hdf5 "$h5" >"$tmp/prof.out" 2>&1 && grep -q "^| layer | 64 | 128 | 1 |" "$tmp/prof.out" &&
    grep -q "^| head | 1 | 0 | 1 |" "$tmp/prof.out"; then
    ok "baton-bench --profile: layers at 7 row counts x 2 contexts, head, embedding"
else
    bad "baton-bench --profile"; cat "$tmp/prof.out"
fi
if "$py" - "$h5" "$cores" <<'PY' 2>"$tmp/err"; then
import sys, h5py
p = h5py.File(sys.argv[1], "r")["profile"][()]
spare = int(sys.argv[2]) > 1
kinds = sorted({k.decode() for k in p["kind"]})
assert kinds == ["embed", "head", "layer", "rest", "sample"] + (["shared"] if spare else []), kinds
assert len(p) == 7 * 2 + 7 + 7 + 7 + 7 + 7 * spare, len(p)
assert (p["seconds"] > 0).all() and (p["n_layer"] == 8).all() and (p["act_bytes_row"] == 1024).all()
shared = p[p["kind"] == b"shared"]
assert sorted(shared["n_rows"]) == ([1, 2, 4, 8, 16, 32, 64] if spare else []), shared["n_rows"]
assert (shared["n_ctx"] == 0).all()
# the rest of a layer besides its products and attention: at context 0,
# a part of the layer's time there, and growing with the rows
rest = p[p["kind"] == b"rest"]
layer = p[(p["kind"] == b"layer") & (p["n_ctx"] == 0)]
assert sorted(rest["n_rows"]) == sorted(layer["n_rows"]) and (rest["n_ctx"] == 0).all()
for r in rest:
    l = layer[layer["n_rows"] == r["n_rows"]][0]
    assert r["seconds"] < l["seconds"], (r["n_rows"], r["seconds"], l["seconds"])
assert rest[rest["n_rows"] == 64][0]["seconds"] > rest[rest["n_rows"] == 1][0]["seconds"]
PY
    ok "/profile: every time positive, 1024 bytes a row (256 floats), 7 sample rows," \
        "rest rows below the layer's, shared rows at context 0 with $((cores - 1)) spare cores"
else
    bad "/profile rows"; cat "$tmp/err"
fi
# -t 2's profile too, for the 1-rank 2-thread row below (shared rows only
# with more than 2 cores)
timeout 300 "$bin/baton-bench" -m "$m" --profile -t 2 -ub 64 --profile-ctx 0,128 \
    --hdf5 "$h5" >/dev/null 2>&1 || bad "baton-bench --profile -t 2"
if "$py" - "$h5" "$cores" <<'PY' 2>"$tmp/err"; then
import sys, h5py
p = h5py.File(sys.argv[1], "r")["profile"][()]
p = p[p["run_id"] == p["run_id"].max()]
assert (p["n_threads"] == 2).all()
assert ((p["kind"] == b"shared").sum() > 0) == (int(sys.argv[2]) > 2)
PY
    ok "-t 2 on $cores cores: shared rows only with cores beyond the threads"
else
    bad "-t 2 profile's shared rows"; cat "$tmp/err"
fi

# the table: every node count, the split, a prediction that says it is one
if "$bin/baton-plan" --profile "$h5" -t 1 --nodes 1-4 -p 256 -n 16 --parallel 1,4 \
    --latency 50us --bandwidth 10Gbit --hdf5 "$tmp/plan.h5" >"$tmp/table" 2>&1 &&
    grep -q "^Predicted (not measured)" "$tmp/table" && grep -q "^| 4 | 4 | 1 | 2/2/2/2 |" "$tmp/table" &&
    grep -q "plan: 8 rows appended" "$tmp/table"; then
    ok "baton-plan: 4 node counts x 2 sequence counts, 8 rows in /plan"
else
    bad "baton-plan table"; cat "$tmp/table"
fi
# memory a node: the profile's weights, or --model-bytes's against --node-mem
if "$bin/baton-plan" --profile "$h5" -t 1 --nodes 1,2 -p 64 -n 8 --parallel 1 --model-bytes 40G \
    --node-mem 24 >"$tmp/mem" 2>&1 && grep -q "^| 1 | 1 | 1 | 8 |.* | 40 (does not fit) |" "$tmp/mem" &&
    grep -q "^| 2 | 2 | 1 | 4/4 |.* | 20 |" "$tmp/mem"; then
    ok "baton-plan --model-bytes 40G: one 24 GiB node cannot hold it, two hold 20 GiB each"
else
    bad "baton-plan --model-bytes"; cat "$tmp/mem"
fi
if "$bin/baton-plan" --shape llama3-70b --type q4_k --node-tflops 100 --node-gbs 273 --node-mem 64 \
    --nodes 1,2,4 -p 2048 >"$tmp/shape" 2>&1 && grep -q "| 1 | 1 | 1 | 80 |.*(does not fit) |" "$tmp/shape" &&
    grep -q "^| 4 | 4 | 1 | 20/20/20/20 |" "$tmp/shape"; then
    ok "baton-plan --shape llama3-70b: one 64 GiB node cannot hold it, four split 20 layers each"
else
    bad "baton-plan --shape"; cat "$tmp/shape"
fi
# tensor ranks: 2 ranks a node as 2 stages or 1 stage of 2 (--tp 1,2); a
# stage of tensor ranks costs half a layer plus its gathers, so its decode
# of one sequence beats the 2 stages' (one stage works at a time there).
# 64 cores a node: the memory crowding between the ranks (from the shared
# rows, which a loaded machine makes anything) is then 1/63 of its ratio
# (check_plan tests the crowding itself). Faster by 10%: the profile is
# measured here, and beside other tests' ranks (make check -j2) the margin
# has been seen at 1.29x where it is ~1.5x on a quiet machine
if "$bin/baton-plan" --profile "$h5" -t 1 --nodes 1,2 --ranks-per-node 2 --cores-per-node 64 \
    --tp 1,2 -p 256 -n 16 --parallel 1 >"$tmp/tp" 2>&1 &&
    grep -q "^| 1 | 2 | 1 | 4/4 |" "$tmp/tp" && grep -q "^| 1 | 1 | 2 | 8 |" "$tmp/tp" &&
    grep -q "^| 2 | 2 | 2 | 4/4 |" "$tmp/tp" &&
    awk -F'|' '$2 + 0 == 1 && $4 + 0 == 1 { a = $11 + 0 } $2 + 0 == 1 && $4 + 0 == 2 { b = $11 + 0 }
               END { exit !(a > 0 && b > 1.1 * a) }' "$tmp/tp"; then
    ok "baton-plan --tp 1,2: 1 stage of 2 tensor ranks decodes faster than 2 stages"
else
    bad "baton-plan --tp"; cat "$tmp/tp"
fi
# the all-reduce scheme moves 8 192 floats a row and layer where the gathers
# move 14 336 (llama-1b, docs/design.md): over a slow link between the
# tensor ranks its prefill is predicted faster, by up to that ratio
for c in gather allreduce; do
    "$bin/baton-plan" --shape llama-1b --type q4_0 --node-tflops 1 --node-gbs 30 --nodes 1 \
        --ranks-per-node 2 --tp 2 --tp-bandwidth 100Mbit --tp-comm $c >"$tmp/tp-$c" 2>&1
done
if awk -F'|' 'FNR == 1 { f++ } /^\| 1 \| 1 \| 2 \|/ { pp[f] = $7 + 0 }
              END { exit !(pp[1] > 0 && pp[2] > 1.4 * pp[1] && pp[2] < 1.8 * pp[1]) }' \
    "$tmp/tp-gather" "$tmp/tp-allreduce" && grep -q "partial sums" "$tmp/tp-allreduce"; then
    ok "baton-plan --tp-comm allreduce: over 100 Mbit, 1.4-1.8x the gathers' prefill"
else
    bad "baton-plan --tp-comm allreduce"; cat "$tmp/tp-gather" "$tmp/tp-allreduce"
fi
if [ -x "$py" ] && "$py" -c "import h5py, matplotlib" 2>/dev/null; then
    if "$py" "$scripts/plot-plan" "$tmp/plan.h5" --measured "$h5" -o "$tmp/plan.png" \
        >/dev/null 2>"$tmp/err" && [ -s "$tmp/plan.png" ]; then
        ok "scripts/plot-plan draws /plan with the measured points"
    else
        bad "scripts/plot-plan"; cat "$tmp/err"
    fi
else
    echo "SKIP: scripts/plot-plan: no h5py or matplotlib for $py"
fi

# check_rows TP FILE: the number of --compare rows of tp TP in FILE, or what is wrong
# with the first bad one: a measured or predicted figure not positive, the
# simulator's figure (in brackets) more than 5% from the model's, or an
# error column that is not 100 (simulated / measured - 1) within the
# rounding of the printed figures
check_rows() {
    awk -F'|' -v tp="$1" '/^\| (pp|tg)/ && $4 + 0 == tp {
            m = $10 + 0; p = $11 + 0; s = $11; sub(/.*\(/, "", s); s += 0; e = $12 + 0
            if (bad == "" && !(m > 0 && p > 0 && s > 0)) bad = "figure not positive: " $0
            if (bad == "" && (s / p > 1.05 || p / s > 1.05)) bad = "simulator off the model: " $0
            d = e - 100 * (s / m - 1); tol = 1 + 100 * s / m * (0.05 / m + 0.05 / s)
            if (bad == "" && (d > tol || -d > tol))
                bad = "error column off: " $0
            k++ }
        END { print (bad != "" ? bad : k + 0) }' "$2"
}

# prediction against measurement: 2 ranks x 1 thread, pipeline 0 and 1
if mpi 2 "$bin/baton-bench" -m "$m" -p 256 -n 16 -t 1 -ub 32 --pipeline 0,1 -r 3 \
    --hdf5 "$h5" >"$tmp/bench" 2>&1; then
    if "$bin/baton-plan" --profile "$h5" --compare "$h5" --trace "$tmp/sim.json" \
        >"$tmp/cmp" 2>&1; then
        grep -E "^\| (pp|tg)|^compare:" "$tmp/cmp"
        rows=$(check_rows 1 "$tmp/cmp")
        if [ "$rows" = 4 ]; then
            ok "--compare: 4 measured rows predicted, model and simulator agree, $(
                sed -n 's/^compare: .*\(median absolute error [0-9.]*%\).*/\1/p' "$tmp/cmp")"
        else
            bad "--compare: $rows"; cat "$tmp/cmp"
        fi
        if grep -q '"traceEvents"' "$tmp/sim.json" && grep -q '"compute"' "$tmp/sim.json"; then
            ok "--trace: the simulated run in the Chrome trace format"
        else
            bad "--trace"
        fi
    else
        bad "baton-plan --compare"; cat "$tmp/cmp"
    fi
else
    bad "2-rank baton-bench"; cat "$tmp/bench"
fi

# and a stage of 2 tensor ranks (-sm tensor), gathering and adding partial
# sums: its rows predicted too, from the model's dimensions, each row's
# scheme and the run's links within the host
if mpi 2 "$bin/baton-bench" -m "$m" -p 256 -n 16 -t 1 -sm tensor --tp-comm gather,allreduce \
    -r 3 --hdf5 "$tmp/tp.h5" >"$tmp/tpbench" 2>&1; then
    if "$bin/baton-plan" --profile "$h5" --compare "$tmp/tp.h5" >"$tmp/tpcmp" 2>&1; then
        grep -E "^\| (pp|tg)|^compare:" "$tmp/tpcmp"
        rows=$(check_rows 2 "$tmp/tpcmp")
        if [ "$rows" = 4 ]; then
            ok "--compare: pp256 and tg16 of 2 tensor ranks, gather and allreduce, predicted, model and simulator agree"
        else
            bad "--compare of tensor ranks: $rows"; cat "$tmp/tpcmp"
        fi
    else
        bad "baton-plan --compare (tensor ranks)"; cat "$tmp/tpcmp"
    fi
else
    bad "2-rank baton-bench -sm tensor"; cat "$tmp/tpbench"
fi

# layers of two kinds (deepseek2: a dense first layer, then expert layers):
# the profile times each kind beside the average, and the planner splits by
# them (its table and a prediction of each node count)
ds=$tmp/ds.gguf
"$bin/baton-mkmodel" --shape tiny --arch deepseek2 -o "$ds" >/dev/null 2>&1 || bad "mkmodel deepseek2"
if timeout 300 "$bin/baton-bench" -m "$ds" --profile -t 1 -ub 8 --profile-ctx 0,32 \
    --hdf5 "$tmp/ds.h5" >"$tmp/ds.out" 2>&1 &&
    "$py" - "$tmp/ds.h5" <<'PY' 2>"$tmp/err" &&
import sys, h5py
p = h5py.File(sys.argv[1], "r")["profile"][()]
for kind in (b"layer", b"dense", b"expert"):
    k = p[p["kind"] == kind]
    assert len(k) == 4 * 2 and (k["seconds"] > 0).all(), (kind, len(k))
assert (p["kind"] == b"expert_one").sum() == 1
PY
    "$bin/baton-plan" --profile "$tmp/ds.h5" -t 1 --nodes 1-3 -p 64 -n 8 >"$tmp/ds.plan" 2>&1 &&
    [ "$(grep -cE '^\| [123] \| [123] \| 1 \|' "$tmp/ds.plan")" -eq 3 ]; then
    ok "deepseek2 profile: dense, expert and average layer rows; baton-plan splits 1-3 nodes"
else
    bad "deepseek2 profile"; cat "$tmp/ds.out" "$tmp/err" "$tmp/ds.plan" 2>/dev/null
fi

# experts (qwen3moe, 8 of 2 a token): the profile records the distinct
# experts its calls chose (2 at one row, more at 8) and what one more costs
# a call (expert_one, from calls that chose more against calls that chose
# fewer); a benchmark records its calls' rows and experts (one sequence:
# exactly 2; four: 2 to 8); --compare predicts its rows with them
moe=$tmp/moe.gguf
"$bin/baton-mkmodel" --shape tiny --arch qwen3moe -o "$moe" >/dev/null 2>&1 || bad "mkmodel qwen3moe"
if timeout 300 "$bin/baton-bench" -m "$moe" --profile -t 1 -ub 8 --profile-ctx 0,16 \
    --hdf5 "$tmp/moe.h5" >"$tmp/moe.out" 2>&1 &&
    timeout 300 "$bin/baton-bench" -m "$moe" -t 1 -p 0 -n 4 -npl 1,4 -r 1 \
        --hdf5 "$tmp/moe.h5" >>"$tmp/moe.out" 2>&1 &&
    "$py" - "$tmp/moe.h5" <<'PY' 2>"$tmp/err" &&
import sys, h5py
f = h5py.File(sys.argv[1], "r")
p = f["profile"][()]
layer = p[p["kind"] == b"layer"]
assert len(layer) == 4 * 2, len(layer)
for r in layer:
    assert 2 <= r["experts"] <= min(8, 2 * r["n_rows"]), (r["n_rows"], r["experts"])
    assert r["experts"] == 2 or r["n_rows"] > 1, r
one = p[p["kind"] == b"expert_one"]
assert len(one) == 1 and one[0]["n_rows"] == 8 and one[0]["experts"] >= 1, one
res = f["results"][()]
got = [(int(r["n_parallel"]), float(r["expert_rows"]), float(r["expert_count"])) for r in res]
assert got[0] == (1, 1.0, 2.0), got
assert got[1][:2] == (4, 4.0) and 2 <= got[1][2] <= 8, got
PY
    "$bin/baton-plan" --profile "$tmp/moe.h5" --compare "$tmp/moe.h5" >"$tmp/moe.cmp" 2>&1 &&
    [ "$(check_rows 1 "$tmp/moe.cmp")" = 2 ]; then
    ok "experts: the profile's choices and expert_one, the benchmark's rows and experts a call, --compare"
else
    bad "experts in the profile and the results"
    cat "$tmp/moe.out" "$tmp/err" "$tmp/moe.cmp" 2>/dev/null
fi
# -v: how many of a call's distinct experts the busiest tensor rank holds
# (a row chooses 2 of 8; each of 2 ranks holds 4, so 1 or 2 a call, and
# these fixed tokens' calls have both), and on one rank all of them
busiest() { sed -n 's/.*the busiest tensor rank holds \([0-9.]*\) of them.*/\1/p' "$1"; }
if mpi 2 "$bin/baton-bench" -m "$moe" -t 1 -p 0 -n 4 -npl 1 -sm tensor -r 1 -v \
    >"$tmp/moe.tp" 2>&1 &&
    timeout 120 "$bin/baton-bench" -m "$moe" -t 1 -p 0 -n 4 -npl 4 -r 1 -v >"$tmp/moe.one" 2>&1 &&
    awk -v b="$(busiest "$tmp/moe.tp")" 'BEGIN { exit !(b > 1 && b < 2) }' &&
    grep -q "experts: \([0-9.]*\) distinct a call of 4.00 rows; the busiest tensor rank holds \1 of" \
        "$tmp/moe.one"; then
    ok "-v: the busiest tensor rank's experts, $(busiest "$tmp/moe.tp") of 2; one rank: all"
else
    bad "-v busiest tensor rank's experts"; cat "$tmp/moe.tp" "$tmp/moe.one"
fi
# the table at --expert-spread 0 and 1, each recorded in /plan: one
# sequence alike (k experts either way), four slower when they spread
# (where the profile's expert_one came out positive: a tiny model's two
# timings may not, and then the profile's own counts are used, -1)
for x in 0 1; do
    "$bin/baton-plan" --profile "$tmp/moe.h5" -t 1 --nodes 1 -p 16 -n 4 --parallel 1,4 \
        --expert-spread $x --hdf5 "$tmp/moeplan.h5" >"$tmp/moeplan$x" 2>&1 ||
        bad "baton-plan --expert-spread $x"
done
if "$py" - "$tmp/moe.h5" "$tmp/moeplan.h5" <<'PY' 2>"$tmp/err"
import sys, h5py
p = h5py.File(sys.argv[1], "r")["profile"][()]
priced = p[p["kind"] == b"expert_one"][0]["seconds"] > 0
plan = h5py.File(sys.argv[2], "r")["plan"][()]
keys = sorted((float(r["expert_spread"]), int(r["n_parallel"])) for r in plan)
got = {(float(r["expert_spread"]), int(r["n_parallel"])): float(r["tg_ts"]) for r in plan}
if priced:
    assert keys == [(0.0, 1), (0.0, 4), (1.0, 1), (1.0, 4)], keys
    assert abs(got[0.0, 1] - got[1.0, 1]) <= 1e-9 * got[0.0, 1], got
    assert got[0.0, 4] > got[1.0, 4], got
else:
    assert keys == [(-1.0, 1), (-1.0, 1), (-1.0, 4), (-1.0, 4)], keys
print("priced" if priced else "not priced")
PY
then ok "--expert-spread 0 and 1: recorded in /plan, one sequence alike, four slower when spread"
else bad "--expert-spread in the table and /plan"; cat "$tmp/err" "$tmp/moeplan0" "$tmp/moeplan1"; fi

# bad input
expect() { # RE CMD...: exits non-zero with one error line matching RE
    local re=$1; shift
    if "$@" >"$tmp/out" 2>&1; then
        bad "$*: exit 0"
    elif [ "$(grep -c 'error:' "$tmp/out")" -eq 1 ] && grep -Eq -- "$re" "$tmp/out"; then
        ok "refused: $(grep 'error:' "$tmp/out")"
    else
        bad "$*: $(cat "$tmp/out")"
    fi
}
expect "no profile given" "$bin/baton-plan" --nodes 2
expect "--model-bytes: 'lots' is not a size" "$bin/baton-plan" --profile "$h5" --model-bytes lots
expect "--latency: 'fast' is not a time" "$bin/baton-plan" --profile "$h5" --latency fast
expect "--expert-spread: '-1' is not a number of 0 or more" "$bin/baton-plan" --profile "$h5" \
    --expert-spread -1
expect "--bandwidth: '10GB' is not a rate" "$bin/baton-plan" --profile "$h5" --bandwidth 10GB
expect "cannot read $tmp/nope.h5" "$bin/baton-plan" --profile "$tmp/nope.h5"
expect "no /profile rows" "$bin/baton-plan" --profile "$tmp/plan.h5"
expect "give the node's rates" "$bin/baton-plan" --shape llama3-70b
expect "unknown model shape 'huge'" "$bin/baton-plan" --shape huge --node-tflops 1 --node-gbs 1
expect "--profile measures one rank" mpi 2 "$bin/baton-bench" -m "$m" --profile

tap_done
