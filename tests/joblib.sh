# joblib.sh: what the shell tests that start and kill MPI jobs share.
# Source it after setting tmp (a scratch folder it removes at exit) and,
# while a job runs in the background, job (the launcher's pid).
job=
stop_job() { # the launcher and its ranks, by pid
    [ -n "$job" ] || return 0
    local kids
    kids=$(pgrep -P "$job")
    kill -9 "$job" $kids 2>/dev/null
    wait "$job" 2>/dev/null
    job=
}
cleanup() {
    stop_job
    rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/tap.sh" # ok, bad, tap_done
