#!/usr/bin/env bash
# A rank that dies: baton-bench on 3 ranks, one rank SIGKILLed (the first,
# the middle and the last stage) while a ppN test repeats, while a tgN test
# repeats, and between two tests; and on 4 ranks as 2 stages of 2 tensor
# ranks (-tp 2), a follower and a leader killed inside their stage. Each time the whole job must end with a
# non-zero status within 10 s, leave no rank behind, and the HDF5 file must
# keep every row that was finished before the kill, readable by h5dump and
# read back by check_results.
#
# The phase is found from what the job shows, not from sleeps: `-v` makes
# rank 0 log "test N (...): R repetitions" when test N's measured
# repetitions begin and "test N (...): row written to FILE" once its row is
# in the file and the file closed. Prints one line per kill with the time
# from the kill to the job's end.
set -u
bin=${BT_BUILDDIR:-$(pwd)}
launcher=${MPIEXEC:-$(command -v mpirun || true)}
if [ -z "$launcher" ]; then echo "SKIP: no mpirun"; exit 77; fi
for tool in h5ls h5dump; do
    command -v $tool >/dev/null || { echo "SKIP: no $tool (hdf5-tools)"; exit 77; }
done
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/baton-death-XXXXXX")
. "$(dirname "$0")/joblib.sh"

m="$tmp/tiny.gguf"
"$bin/baton-mkmodel" --shape tiny --n-layer 6 -o "$m" >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }

# Rows in /results, read without taking HDF5's file lock (a reader's lock
# would make the writer's next open fail).
rows() {
    HDF5_USE_FILE_LOCKING=FALSE h5ls "$1/results" 2>/dev/null | sed -n 's/.*{\([0-9]*\)\/.*/\1/p'
}

# The pid of world rank R among the launcher's children.
rank_pid() {
    local r=$1 p
    for p in $(pgrep -P "$job"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$r"; then
            echo "$p"; return
        fi
    done
}

now() { date +%s.%N; }

# kill_test NAME RANK PHASE BENCH_ARGS...: PHASE is "test1" (wait for test
# 1's repetitions to begin) or "row1" (wait until test 0's row is written).
kill_test() {
    local name=$1 rank=$2 phase=$3
    shift 3
    local h5="$tmp/$name.h5" err="$tmp/$name.err"
    "$launcher" -np "$np" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
        "$bin/baton-bench" -m "$m" -t 1 -v --hdf5 "$h5" "$@" >/dev/null 2>"$err" &
    job=$!
    local seen=0 i
    for i in $(seq 1 600); do # up to 60 s for the phase
        if [ "$phase" = test1 ]; then
            grep -q '^\[rank 0\] info: test 1 (' "$err" && seen=1
        else # the row is written and the file closed
            grep -q '^\[rank 0\] info: test 0 (.*): row written to' "$err" && seen=1
        fi
        [ "$seen" = 1 ] && break
        kill -0 "$job" 2>/dev/null || break
        sleep 0.1
    done
    local victim
    victim=$(rank_pid "$rank")
    if [ "$seen" != 1 ] || [ -z "$victim" ]; then
        bad "$name: phase '$phase' not reached or rank $rank not found"
        tail -n 5 "$err"; stop_job; return
    fi
    local ranks
    ranks=$(pgrep -P "$job")
    local before
    before=$(rows "$h5")
    [ "$phase" = test1 ] && sleep 0.2 # well inside the repetitions
    local t0 t1 rc
    t0=$(now)
    kill -9 "$victim"
    for i in $(seq 1 150); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$job" 2>/dev/null; then
        bad "$name: job still running 15 s after SIGKILL of rank $rank"
        stop_job; return
    fi
    wait "$job"; rc=$?
    t1=$(now)
    job=
    local took
    took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    # mpirun has exited; the ranks it killed may still be tearing down (an
    # ASan build unmaps its shadow memory on the way out), so each gets up to
    # 5 s to be gone. A zombie (Z) is dead, only not yet reaped by its new parent.
    local left p
    for i in $(seq 1 50); do
        left=0
        for p in $ranks; do
            case $(ps -o stat= -p "$p" 2>/dev/null) in ''|Z*) ;; *) left=$((left + 1)) ;; esac
        done
        [ "$left" -eq 0 ] && break
        sleep 0.1
    done
    if [ "$rc" -ne 0 ] && awk -v t="$took" 'BEGIN { exit !(t <= 10) }' && [ "$left" -eq 0 ]; then
        ok "$name: SIGKILL of rank $rank, job exit $rc after ${took} s, no rank left"
    else
        bad "$name: SIGKILL of rank $rank: exit $rc after ${took} s, $left rank(s) left"
        tail -n 5 "$err"
    fi
    local after
    after=$(rows "$h5")
    # the kill landed in the phase: test 1 had begun and not finished (no
    # second row), or, between tests, test 1's repetitions had not begun
    if [ "$phase" = test1 ] && [ "${after:-0}" -ne 1 ]; then
        bad "$name: test 1 had finished before the kill (${after:-0} rows)"
    elif [ "$phase" = row1 ] && grep -q '^\[rank 0\] info: test 1 (' "$err"; then
        bad "$name: test 1 had begun before the kill"
    fi
    if [ "${after:-0}" -ge "${before:-0}" ] && [ "${after:-0}" -ge 1 ] &&
        h5dump "$h5" >/dev/null 2>&1 &&
        "$bin/tests/check_results" "$h5" 1 "$after" 6 none >"$tmp/chk" 2>&1; then
        ok "$name: file keeps its ${after} finished row(s) (${before} seen before the kill), h5dump reads it"
    else
        bad "$name: file after the kill: ${after:-none} rows, ${before:-none} seen before"
        cat "$tmp/chk" 2>/dev/null
    fi
}

start=$SECONDS
np=3
for rank in 0 1 2; do
    # prefill: pp16 finishes (a row), then pp512 repeats in micro-batches of 32
    kill_test "prefill-rank$rank" "$rank" test1 -p 16,512 -n 0 -ub 32 -r 1500
    # decode: pp16 finishes, then tg256 repeats
    kill_test "decode-rank$rank" "$rank" test1 -p 16 -n 256 -r 400
    # between tests: the first row is written, the next test waits --delay
    kill_test "between-rank$rank" "$rank" row1 -p 16 -n 0 -ub 4,8,16 -r 2 --delay 5
done
# A rank killed inside a tensor group: 4 ranks as 2 stages of 2 tensor
# ranks (-tp 2): the first stage's follower (rank 1) during decode, and the
# second stage's leader (rank 2) and follower (rank 3) during prefill; the
# dead rank's partner waits in a gather or for a command, the other stage
# in the pipeline.
np=4
kill_test "tensor-decode-rank1" 1 test1 -p 16 -n 256 -r 400 -tp 2
kill_test "tensor-prefill-rank2" 2 test1 -p 16,512 -n 0 -ub 32 -r 1500 -tp 2
kill_test "tensor-prefill-rank3" 3 test1 -p 16,512 -n 0 -ub 32 -r 1500 -tp 2
echo "kill tests took $((SECONDS - start)) s"

tap_done
