#!/usr/bin/env bash
# The fuzz targets (tests/fuzz/fuzz_*.c) run once on every committed corpus
# file (tests/fuzz/corpus: seeds, model seeds and regress/, the inputs that
# once crashed; fuzz_api reads api/, its request bodies, and regress/),
# built without libFuzzer (tests/fuzz/replay.c) so every build runs them:
# a regression crashes here, and in the sanitizer build
# (scripts/check-sanitizers) AddressSanitizer and UBSan check each input.
set -u
bin=${BT_BUILDDIR:-$(pwd)}
src=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
corpus="$src/tests/fuzz/corpus"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/baton-replay-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0
for t in gguf tokenizer model api; do
    case $t in
    api) dirs=("$corpus/api" "$corpus/regress") ;;
    *) dirs=("$corpus/seeds" "$corpus/model" "$corpus/regress") ;;
    esac
    if timeout 300 "$bin/tests/fuzz/replay_$t" "${dirs[@]}" >"$tmp/$t.out" 2>&1; then
        echo "ok - replay_$t: $(sed -n 's/.*: \([0-9]*\) inputs/\1/p' "$tmp/$t.out") inputs"
    else
        echo "not ok - replay_$t (exit $?)"
        tail -n 40 "$tmp/$t.out"
        status=1
    fi
done
exit "$status"
