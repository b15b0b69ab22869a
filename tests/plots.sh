#!/usr/bin/env bash
# The plotting scripts: a tiny two-rank benchmark writes an HDF5 results file
# and Chrome traces (-ub 8, so the pp32 trace has a pipeline fill, steady
# state and drain), scripts/plot-results and scripts/plot-trace turn them
# into PNG images, and plot-results refuses a file that is not HDF5.
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

if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mpi() { local np=$1; shift; timeout -k 5 60 "$launcher" -np "$np" --oversubscribe --bind-to none \
    --mca mpi_yield_when_idle 1 "$@"; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/baton-plots-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok $pass - $1"; }
bad() { fail=$((fail + 1)); echo "not ok - $1"; }

# is_png NAME FILE: FILE exists, is non-empty and starts with the PNG magic.
is_png() {
    if [ -s "$2" ] && [ "$(head -c 8 "$2" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
        ok "$1 ($(stat -c %s "$2") bytes)"
    else
        bad "$1: $2 is missing, empty or not a PNG"
    fi
}

m="$tmp/tiny.gguf"
if ! "$bin/baton-mkmodel" --n-layer 4 -o "$m" >/dev/null 2>"$tmp/err"; then
    bad "baton-mkmodel"; cat "$tmp/err"
elif ! mpi 2 "$bin/baton-bench" -m "$m" -p 32 -n 8 -r 2 --pipeline 0,1 -ub 8 -t 1 \
    --hdf5 "$tmp/results.h5" --trace-dir "$tmp/traces" >"$tmp/out" 2>"$tmp/err"; then
    bad "baton-bench on 2 ranks"; cat "$tmp/out" "$tmp/err"
else
    if "$py" "$scripts/plot-results" "$tmp/results.h5" -o "$tmp/results.png" \
        --title "plots.sh" 2>"$tmp/err"; then
        is_png "plot-results" "$tmp/results.png"
    else
        bad "plot-results exited $?"; cat "$tmp/err"
    fi
    traces=("$tmp"/traces/*pp32*pipeline1*.json)
    trace=${traces[0]}
    if [ ! -f "$trace" ]; then
        bad "no pp32 pipeline 1 trace in $tmp/traces: $(ls "$tmp/traces" 2>&1)"
    elif "$py" "$scripts/plot-trace" "$trace" -o "$tmp/trace.png" 2>"$tmp/err"; then
        is_png "plot-trace $(basename "$trace")" "$tmp/trace.png"
    else
        bad "plot-trace exited $?"; cat "$tmp/err"
    fi
fi

echo "not an HDF5 file" >"$tmp/bogus.h5"
if "$py" "$scripts/plot-results" "$tmp/bogus.h5" -o "$tmp/bogus.png" 2>"$tmp/err"; then
    bad "plot-results on a non-HDF5 file exited 0"
elif ! grep -q "bogus.h5" "$tmp/err"; then
    bad "plot-results on a non-HDF5 file: message does not name the file"; cat "$tmp/err"
else
    ok "plot-results rejects a non-HDF5 file: $(head -n 1 "$tmp/err")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
