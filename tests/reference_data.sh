#!/usr/bin/env bash
# Every reference file listed in tests/data/SHA256SUMS is present and has its
# hash. The data ships with the repository, so a missing or changed file is
# a failure that names the file, never a skip. golden/ files are looked up
# in $BT_GOLDEN_DIR when it is set (another copy of the same files).
set -u
src=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
data="$src/tests/data"
golden=${BT_GOLDEN_DIR:-$data/golden}
. "$(dirname "$0")/tap.sh"

if [ ! -f "$data/SHA256SUMS" ]; then
    bad "reference data manifest missing: $data/SHA256SUMS"
else
    while read -r sum name; do
        case "$sum" in '#'* | '') continue ;; esac
        case "$name" in golden/*) path="$golden/${name#golden/}" ;; *) path="$data/$name" ;; esac
        if [ ! -f "$path" ]; then
            bad "reference file missing: $path (listed in tests/data/SHA256SUMS)"
        elif [ "$(sha256sum <"$path" | cut -d' ' -f1)" != "$sum" ]; then
            bad "reference file changed: $path (sha256 differs from tests/data/SHA256SUMS)"
        else
            ok "reference $name"
        fi
    done <"$data/SHA256SUMS"
    [ "$pass" -gt 0 ] || bad "no reference file listed in $data/SHA256SUMS"
fi
tap_done
