#!/usr/bin/env bash
# baton-server over real sockets on 127.0.0.1 (tests/server.py says what is
# checked). Installs the official openai package from PyPI into a private
# virtual environment for the client checks; without PyPI those checks are
# a SKIP that says so.
set -u
. "$(dirname "$0")/tap.sh"
tap_mpi 300
tap_tmp server
bin=${BT_BUILDDIR:-$(pwd)}
command -v curl >/dev/null || { echo "not ok - curl is missing (scripts/install-deps installs it)"; exit 1; }
openai_py=
venv=${BT_OPENAI_VENV:-$bin/tests/openai-venv}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import openai' 2>/dev/null; then
    openai_py=$venv/bin/python
elif python3 -m venv "$venv" >/dev/null 2>&1 &&
    timeout 300 "$venv/bin/pip" install -q openai >"$tmp/pip.log" 2>&1; then
    openai_py=$venv/bin/python
else
    echo "SKIP: openai client checks: the openai package could not be installed from PyPI ($(tail -1 "$tmp/pip.log" 2>/dev/null))"
fi
MPIEXEC=$launcher timeout -k 10 900 python3 "$(dirname "$0")/server.py" "$bin" "$tmp" $openai_py
