#!/usr/bin/env bash
# The plotting scripts: a tiny two-rank benchmark writes an HDF5 results file
# and Chrome traces (-ub 8, so the pp32 trace has a pipeline fill, steady
# state and drain), scripts/plot-results and scripts/plot-trace turn them
# into PNG images, and plot-results refuses a file that is not HDF5. A trace
# of 2 tensor ranks has the gathers as spans on both tracks and the
# follower's compute under its leader's micro-batches. Files of
# format version 8 with -sm layer and tensor rows plot as configurations of
# their own; copies made as versions 2 and 4 wrote them (without n_parallel;
# without split_mode, tp, tp_comm and gather_s) still plot, and baton-plan's
# reader (check_results --read) takes version 4 with its defaults, not
# version 2.
set -u
bin=${BT_BUILDDIR:-$(pwd)}
scripts=${BT_SRCDIR:-$(dirname "$0")/..}/scripts
py=/usr/bin/python3

missing=""
need() { missing+="${missing:+, }$1"; }
if [ ! -x "$py" ]; then
    need "$py"
else
    for mod in h5py matplotlib; do
        "$py" -c "import $mod" 2>/dev/null || need "Python module $mod for $py"
    done
fi
launcher=${MPIEXEC:-$(command -v mpirun || true)}
[ -n "$launcher" ] || need "mpirun"
if [ -n "$missing" ]; then echo "SKIP: missing $missing"; exit 77; fi

. "$(dirname "$0")/tap.sh"
tap_mpi 60
tap_tmp plots

# is_png NAME FILE: FILE is a PNG (its magic) of at least 600 x 300 pixels
# (the IHDR chunk's width and height).
is_png() {
    local magic size
    magic=$(head -c 8 "$2" 2>/dev/null | od -An -tx1 | tr -d ' \n')
    size=$(od -An -tu1 -j 16 -N 8 "$2" 2>/dev/null |
        awk '{ printf "%d %d", $1*16777216 + $2*65536 + $3*256 + $4, $5*16777216 + $6*65536 + $7*256 + $8 }')
    read -r w h <<<"${size:-0 0}"
    if [ "$magic" = 89504e470d0a1a0a ] && [ "${w:-0}" -ge 600 ] && [ "${h:-0}" -ge 300 ]; then
        ok "$1 (${w}x${h} PNG, $(stat -c %s "$2") bytes)"
    else
        bad "$1: $2 is missing, not a PNG or too small (${w:-?}x${h:-?})"
    fi
}

# plotted WHAT OUT WANT: the script's "plotted ..." line (in OUT) is WANT,
# what the input file holds
plotted() {
    local got
    got=$(grep -o 'plotted .* to ' "$2" | sed 's/ to $//')
    if [ "$got" = "$3" ]; then ok "$1: $got"
    else bad "$1: '$got', want '$3'"; cat "$2"; fi
}

m="$tmp/tiny.gguf"
if ! "$bin/baton-mkmodel" --n-layer 4 -o "$m" >/dev/null 2>"$tmp/err"; then
    bad "baton-mkmodel"; cat "$tmp/err"
elif ! mpi 2 "$bin/baton-bench" -m "$m" -p 32 -n 8 -r 2 --pipeline 0,1 -ub 8 -t 1 \
    --hdf5 "$tmp/results.h5" --trace-dir "$tmp/traces" >"$tmp/out" 2>"$tmp/err"; then
    bad "baton-bench on 2 ranks"; cat "$tmp/out" "$tmp/err"
else
    if "$py" "$scripts/plot-results" "$tmp/results.h5" -o "$tmp/results.png" \
        --title "plots.sh" >"$tmp/plot.out" 2>"$tmp/err"; then
        is_png "plot-results" "$tmp/results.png"
        # pp32 and tg8, each with pipeline 0 and 1, one run
        want=$("$py" -c 'import h5py, sys
f = h5py.File(sys.argv[1], "r")
res = f["results"][()]
tests = {t for t in res["test"]}
configs = {(n, p) for n, p in zip(res["n_ranks"], res["pipeline"])}
runs = len(f["runs"])
print(f"plotted {len(res)} results of {len(tests)} tests in {len(configs)} configurations "
      f"from {runs} runs")' "$tmp/results.h5")
        plotted "plot-results drew every /results row" "$tmp/plot.out" "$want"
    else
        bad "plot-results exited $?"; cat "$tmp/err"
    fi
    traces=("$tmp"/traces/*pp32*pipeline1*.json)
    trace=${traces[0]}
    if [ ! -f "$trace" ]; then
        bad "no pp32 pipeline 1 trace in $tmp/traces: $(ls "$tmp/traces" 2>&1)"
    elif "$py" "$scripts/plot-trace" "$trace" -o "$tmp/trace.png" >"$tmp/plot.out" 2>"$tmp/err"
    then
        is_png "plot-trace $(basename "$trace")" "$tmp/trace.png"
        # every duration event of both ranks, in one pass per repetition (-r 2)
        want=$("$py" -c 'import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
n_compute = sum(1 for e in ev if e["name"] == "compute")
ranks = len({e["tid"] for e in ev})
print(f"plotted {len(ev)} spans ({n_compute} compute) of {ranks} ranks in 2 passes")' "$trace")
        plotted "plot-trace drew every span" "$tmp/plot.out" "$want"
    else
        bad "plot-trace exited $?"; cat "$tmp/err"
    fi
fi

# tensor ranks (-sm tensor): a track per rank, each gather a "collective"
# span inside a compute span, every follower's compute labelled with the
# micro-batch its leader computes at that time; plot-trace draws them all
if ! mpi 2 "$bin/baton-bench" -m "$m" -p 32 -n 4 -ub 8 -r 1 -t 1 -sm tensor \
    --trace-dir "$tmp/tptraces" >"$tmp/out" 2>"$tmp/err"; then
    bad "baton-bench -sm tensor --trace-dir on 2 ranks"; cat "$tmp/out" "$tmp/err"
else
    traces=("$tmp"/tptraces/*pp32*tensor*.json)
    trace=${traces[0]}
    if [ -f "$trace" ] && "$py" - "$trace" <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
by = {}
for e in ev:
    by.setdefault((e["tid"], e["name"]), []).append(e)
def mbs(rank):  # in time order, a run of one micro-batch once (a follower's layers and head)
    out = []
    for e in sorted(by[(rank, "compute")], key=lambda e: e["ts"]):
        if not out or out[-1] != e["args"]["mb"]:
            out.append(e["args"]["mb"])
    return out
lead, follow = mbs(0), mbs(1)
gathers = [len(by.get((r, "collective"), [])) for r in (0, 1)]
if not (lead == follow and min(gathers) > 0 and gathers[0] == gathers[1]):
    sys.exit(f"leader mbs {lead}, follower mbs {follow}, gathers {gathers}")
PY
    then
        ok "tensor trace: the follower's compute carries the leader's micro-batches, gathers on both ranks"
        if "$py" "$scripts/plot-trace" "$trace" -o "$tmp/tptrace.png" >"$tmp/plot.out" \
            2>"$tmp/err"; then
            is_png "plot-trace $(basename "$trace")" "$tmp/tptrace.png"
        else
            bad "plot-trace of a tensor trace exited $?"; cat "$tmp/err"
        fi
    else
        bad "tensor trace $trace"
    fi
fi

# -npl: configurations told apart by n_parallel; a file of format version 2
# (no n_parallel) still plots, as one configuration per ranks and pipeline
if ! mpi 2 "$bin/baton-bench" -m "$m" -p 16 -n 4 -r 1 -ub 8 -t 1 -npl 1,2 \
    --hdf5 "$tmp/npl.h5" >"$tmp/out" 2>"$tmp/err"; then
    bad "baton-bench -npl 1,2 on 2 ranks"; cat "$tmp/out" "$tmp/err"
elif ! "$py" - "$tmp/npl.h5" "$tmp/v2.h5" <<'PY'
import h5py, numpy, sys
src, dst = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "w")
for k, v in src.attrs.items():
    dst.attrs[k] = v
dst.attrs["format_version"] = numpy.int32(2)
for name in src:
    data = src[name][()]
    if name == "results":  # the one-sequence rows, as version 2 wrote them
        keep = [n for n in data.dtype.names if n != "n_parallel"]
        data = numpy.array([tuple(r[n] for n in keep) for r in data if r["n_parallel"] == 1],
                           dtype=[(n, data.dtype[n]) for n in keep])
    dst.create_dataset(name, data=data)
PY
then
    bad "could not write a version 2 copy of the -npl file"
elif ! "$py" - "$tmp/npl.h5" "$tmp/v4.h5" <<'PY'
import h5py, numpy, sys
src, dst = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "w")
for k, v in src.attrs.items():
    dst.attrs[k] = v
dst.attrs["format_version"] = numpy.int32(4)
# what versions 5, 7 and 8 added
new = {"results": ("split_mode", "tp", "expert_rows", "expert_count", "tp_comm"),
       "stage_times": ("gather_s",), "profile": ("experts",), "plan": ("expert_spread",)}
for name in src:
    data = src[name][()]
    if name in new:
        assert set(new[name]) <= set(data.dtype.names), (name, data.dtype.names)
        keep = [n for n in data.dtype.names if n not in new[name]]
        data = numpy.array([tuple(r[n] for n in keep) for r in data],
                           dtype=[(n, data.dtype[n]) for n in keep])
    dst.create_dataset(name, data=data, maxshape=(None,))
PY
then
    bad "could not write a version 4 copy of the -npl file"
else
    for f in npl v4 v2; do
        case $f in
        npl) want="4 results of 2 tests in 2" what="n_parallel 1,2" ;;
        v4) want="4 results of 2 tests in 2" what="version 4: split_mode, tp and tp_comm absent" ;;
        v2) want="2 results of 2 tests in 1" what="version 2: n_parallel absent" ;;
        esac
        if "$py" "$scripts/plot-results" "$tmp/$f.h5" -o "$tmp/$f.png" >"$tmp/plot.out" \
            2>"$tmp/err"; then
            plotted "plot-results, $f file ($what)" "$tmp/plot.out" \
                "plotted $want configurations from 1 runs"
        else
            bad "plot-results on the $f file exited $?"; cat "$tmp/err"
        fi
    done
    # baton-plan's reader: version 4 rows as -sm layer, tp 1, gathers (pp16
    # and tg4 at -npl 1 and 2); version 2 refused, naming the versions it reads
    want=$(printf '%s\n' "pp16 layer 1 gather 1" "tg4 layer 1 gather 1" "pp16 layer 1 gather 1" \
        "tg4 layer 1 gather 1")
    if got=$("$bin/tests/check_results" --read "$tmp/v4.h5" 2>"$tmp/err") && [ "$got" = "$want" ]
    then ok "the results reader takes version 4: split_mode layer, tp 1, tp_comm gather"
    else bad "the results reader on version 4: '$got'"; cat "$tmp/err"; fi
    if ! "$bin/tests/check_results" --read "$tmp/v2.h5" >/dev/null 2>"$tmp/err" &&
        grep -q "v2.h5 is format version 2; this build reads versions 4 to 8" "$tmp/err"
    then ok "the results reader refuses version 2: $(head -n 1 "$tmp/err")"
    else bad "the results reader on version 2"; cat "$tmp/err"; fi
fi

# -sm layer,tensor --pipeline 0,1: version 8 rows of both split modes, the
# tensor test with --pipeline 1 skipped; three configurations (layer with
# pipeline 0 and 1, tensor with 0), told apart by split mode
if ! mpi 2 "$bin/baton-bench" -m "$m" -p 16 -n 4 -r 1 -ub 8 -t 1 -sm layer,tensor \
    --pipeline 0,1 --hdf5 "$tmp/sm.h5" >"$tmp/out" 2>"$tmp/err"; then
    bad "baton-bench -sm layer,tensor on 2 ranks"; cat "$tmp/out" "$tmp/err"
elif "$py" "$scripts/plot-results" "$tmp/sm.h5" -o "$tmp/sm.png" >"$tmp/plot.out" 2>"$tmp/err"
then
    is_png "plot-results, -sm layer,tensor" "$tmp/sm.png"
    plotted "plot-results, version 8 file (-sm layer,tensor)" "$tmp/plot.out" \
        "plotted 6 results of 2 tests in 3 configurations from 1 runs"
    if "$py" - "$tmp/sm.h5" <<'PY'
import h5py, sys
f = h5py.File(sys.argv[1], "r")
assert f.attrs["format_version"] == 8
res = f["results"][()]
got = [(r["split_mode"].decode(), int(r["tp"]), r["tp_comm"].decode(), int(r["pipeline"]))
       for r in res]
assert got == [("layer", 1, "gather", 0)] * 2 + [("layer", 1, "gather", 1)] * 2 + \
    [("tensor", 2, "gather", 0)] * 2, got
PY
    then ok "version 8 file: split_mode, tp, tp_comm and pipeline of each row"
    else bad "version 8 file's split_mode, tp and tp_comm"; fi
else
    bad "plot-results on the -sm layer,tensor file exited $?"; cat "$tmp/err"
fi

echo "not an HDF5 file" >"$tmp/bogus.h5"
if "$py" "$scripts/plot-results" "$tmp/bogus.h5" -o "$tmp/bogus.png" 2>"$tmp/err"; then
    bad "plot-results on a non-HDF5 file exited 0"
elif ! grep -q "bogus.h5" "$tmp/err"; then
    bad "plot-results on a non-HDF5 file: message does not name the file"; cat "$tmp/err"
else
    ok "plot-results rejects a non-HDF5 file: $(head -n 1 "$tmp/err")"
fi

tap_done
