# tap.sh: what the shell tests share. Source it after `set -u`:
#   . "$(dirname "$0")/tap.sh"
#   ok MSG, bad MSG   a line each, counted
#   tap_tmp NAME      $tmp: a fresh folder, removed at exit
#   tap_mpi [SECONDS] $launcher (or SKIP, exit 77, without one) with root's
#                     permission to run it, and mpi NP CMD...: CMD on NP ranks
#                     with the flags every test uses, inside a timeout
#                     (default 120 s)
#   tap_done          the summary line; the status says whether all passed
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok $pass - $*"; }
bad() { fail=$((fail + 1)); echo "not ok - $*"; }
tap_done() {
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
tap_tmp() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/baton-$1-XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
}
tap_mpi() {
    launcher=${MPIEXEC:-$(command -v mpirun || true)}
    if [ -z "$launcher" ]; then echo "SKIP: no mpirun"; exit 77; fi
    if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
    mpi_timeout=${1:-120}
}
mpi() {
    local np=$1
    shift
    timeout -k 5 "$mpi_timeout" "$launcher" -np "$np" --oversubscribe --bind-to none \
        --mca mpi_yield_when_idle 1 "$@"
}
