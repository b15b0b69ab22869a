#!/usr/bin/env bash
# baton and baton-bench under valgrind's memcheck on 1 and 2 ranks (a tiny
# synthetic model): fails on any invalid access, use of uninitialised
# memory or definite leak outside Open MPI (tests/valgrind-openmpi.supp
# holds Open MPI's own). valgrind does not know AVX-512, so the programs
# are built without -march=native in their own build directory
# (VG_BUILDDIR, default ./build-vg). Run by scripts/check-sanitizers; each
# run prints its ERROR SUMMARY and leak summary.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
builddir=${VG_BUILDDIR:-$top/build-vg}
jobs=${VG_JOBS:-2}
if ! command -v valgrind >/dev/null 2>&1; then
    echo "valgrind.sh: valgrind is not installed (scripts/install-deps installs it)" >&2
    exit 1
fi
launcher=${MPIEXEC:-$(command -v mpirun || true)}
if [ -z "$launcher" ]; then echo "valgrind.sh: no mpirun" >&2; exit 1; fi
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

cd "$top"
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
    autoreconf -fi
fi
mkdir -p "$builddir"
cd "$builddir"
if [ ! -f Makefile ]; then
    "$top/configure" --disable-native >configure.log 2>&1 || { tail -n 30 configure.log >&2; exit 1; }
fi
make -j"$jobs" baton baton-bench baton-mkmodel >make.log 2>&1 || { tail -n 40 make.log >&2; exit 1; }

out="$builddir/valgrind-out"
rm -rf "$out"
mkdir -p "$out"
model="$out/tiny-q8_0.gguf"
./baton-mkmodel --shape tiny --type q8_0 -o "$model" >/dev/null || exit 1

vg=(valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite
    --errors-for-leak-kinds=definite --error-exitcode=99 --num-callers=30
    --suppressions="$top/tests/valgrind-openmpi.supp" --gen-suppressions=all)
export OMP_NUM_THREADS=2
status=0
# run NAME NP PROGRAM ARGS...: every rank's log must show no errors and no
# definite leak.
run() {
    local name=$1 np=$2
    shift 2
    local start=$SECONDS rc=0
    timeout -k 10 "${VG_TIMEOUT:-600}" "$launcher" -np "$np" --oversubscribe --bind-to none \
        --mca mpi_yield_when_idle 1 "${vg[@]}" --log-file="$out/$name.rank%q{OMPI_COMM_WORLD_RANK}.log" \
        "$@" >"$out/$name.out" 2>"$out/$name.err" || rc=$?
    local bad=0 log
    for log in "$out/$name".rank*.log; do
        [ -f "$log" ] || { bad=1; continue; }
        local errs leak
        errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9,]*\) errors.*/\1/p' "$log" | tr -d , | tail -n 1)
        leak=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$log" | tr -d , | tail -n 1)
        echo "valgrind: $name $(basename "$log" .log | sed 's/.*\.//'): ERROR SUMMARY: ${errs:-?} errors; definitely lost: ${leak:-0} bytes"
        if [ "${errs:-x}" != 0 ] || [ "${leak:-0}" != 0 ]; then bad=1; fi
    done
    if [ "$rc" -ne 0 ] || [ "$bad" -ne 0 ]; then
        echo "valgrind: $name FAILED (exit $rc, $((SECONDS - start)) s); logs in $out" >&2
        tail -n 20 "$out/$name.err" >&2
        for log in "$out/$name".rank*.log; do
            grep -q 'ERROR SUMMARY: 0 errors' "$log" 2>/dev/null || sed -n '/^==[0-9]*== [A-Z]/,$p' "$log" | head -n 80 >&2
        done
        status=1
    else
        echo "valgrind: $name ok ($np rank(s), $((SECONDS - start)) s)"
    fi
}

tokens=1,2,3,4,5,6,7,8,9,10,11,12
run baton-np1 1 ./baton -m "$model" --tokens "$tokens" -n 4 -t 2 -ub 4
run baton-np2 2 ./baton -m "$model" --tokens "$tokens" -n 4 -t 2 -ub 4 --pipeline 1
# --batch-file: good and bad lines, per-request dumps on the last stage
printf '%s\n' '{"id": 1, "tokens": [1, 2, 3], "n_predict": 3}' 'not json' \
    '{"id": 3, "tokens": [4, 5], "temp": 0.7, "seed": 1}' '{"id": 4, "tokens": [999]}' \
    '{"id": 5, "tokens": [6], "n_predict": 2}' >"$out/batch.jsonl"
run batch-np2 2 ./baton -m "$model" --batch-file "$out/batch.jsonl" --parallel 2 -c 32 -t 2 \
    -o "$out/batch.out" --dump-logits "$out/batch-dump"
run bench-np1 1 ./baton-bench -m "$model" -p 16 -n 4 -r 1 -t 2 -ub 8 --hdf5 "$out/np1.h5"
run bench-np2 2 ./baton-bench -m "$model" -p 16 -n 4 -r 1 -t 2 -ub 8 --pipeline 0,1 --hdf5 "$out/np2.h5"
run bench-npl-np2 2 ./baton-bench -m "$model" -p 8 -n 3 -pg 4,2 -r 1 -t 2 -ub 4 --pipeline 0,1 \
    -npl 3 --hdf5 "$out/npl.h5"
[ "$status" -eq 0 ] && echo "valgrind: ok"
exit "$status"
