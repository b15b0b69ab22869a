#!/usr/bin/env bash
# baton --batch-file: bad request lines on 1 and 2 ranks (one error line
# each naming the line and the field, the other requests complete, every
# output line valid JSON), files and options that stop the job before any
# work (an earlier -o file left as it was), 20 requests at --parallel 4
# each equal to its solo --tokens run (ids, and the --dump-logits rows for
# some), seeded sampling the same at --parallel 1 and 8 and on 1 and 2
# ranks (two unseeded twins on different lines differ), and a rank SIGKILLed during a
# job: it ends non-zero within 10 s and the output holds only whole, valid
# lines. Text prompts and chat requests need a model with a vocabulary:
# they run on SmolLM2 when it is there (scripts/fetch-smollm2), else SKIP.
set -u
bin=${BT_BUILDDIR:-$(pwd)}
launcher=${MPIEXEC:-$(command -v mpirun || true)}
if [ -z "$launcher" ]; then echo "SKIP: no mpirun"; exit 77; fi
py=$(command -v python3 || true)
if [ -z "$py" ]; then echo "SKIP: no python3 (reads the JSON lines)"; exit 77; fi
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# run NP ARGS...: baton on NP ranks inside a timeout
run() { local np=$1; shift; timeout -k 5 120 "$launcher" -np "$np" --oversubscribe --bind-to none \
    --mca mpi_yield_when_idle 1 "$bin/baton" "$@"; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/baton-batch-XXXXXX")
. "$(dirname "$0")/joblib.sh"

m="$tmp/tiny.gguf"
"$bin/baton-mkmodel" --shape tiny --n-layer 4 -o "$m" >/dev/null 2>&1 ||
    { echo "baton-mkmodel failed"; exit 1; }

# ---- bad lines: one error line each, the rest complete ----
# Each bad line names its field in expect.txt ("-" for a line that is not
# JSON or not an object); good lines have "ok".
cat >"$tmp/bad.jsonl" <<'EOF'
{"id": "good-1", "tokens": [1, 2, 3], "n_predict": 4}
not json at all
{"id": 2, "n_predict": 3}
{"id": 3, "prompt": "x", "tokens": [1]}
{"id": 4, "tokens": [1, 256]}
{"id": 5, "tokens": [1, -1]}
{"id": 6, "tokens": "1,2"}
{"id": 7, "tokens": []}
{"id": 8, "tokens": [1], "n_predict": 0}
{"id": 9, "tokens": [1], "n_predict": "3"}
{"id": 10, "tokens": [1], "n_predict": 2.5}
{"id": 11, "tokens": [1], "temp": -1}
{"id": 12, "tokens": [1], "temp": "hot"}
{"id": 13, "tokens": [1], "top_k": -1}
{"id": 14, "tokens": [1], "top_k": 1.5}
{"id": 15, "tokens": [1], "top_p": 0}
{"id": 16, "tokens": [1], "top_p": 1.5}
{"id": 17, "tokens": [1], "min_p": 2}
{"id": 18, "tokens": [1], "min_p": []}
{"id": 19, "tokens": [1], "seed": -1}
{"id": 20, "tokens": [1], "seed": "s"}
{"id": 21, "tokens": [1], "chat": true}
{"id": 22, "prompt": 5}
{"id": 23, "prompt": "hello"}
{"id": 24, "prompt": "hello", "chat": "yes"}
{"id": 25, "prompt": "hello", "system": "be brief"}
{"id": 26, "tokens": [1], "nonsense": 1}
[1, 2, 3]
{"id": 28, "tokens": [TOOLONG]}
{"id": "good-2", "tokens": [7, 8], "temp": 0.9, "seed": 3, "top_k": 0, "min_p": 0}

{"id": {"k": [1, 2]}, "tokens": [5], "n_predict": 2}
{"tokens": [9, 9], "n_predict": 1}
EOF
sed -i "s/TOOLONG/$(seq -s, 1 65 | sed 's/[0-9]*/1/g')/" "$tmp/bad.jsonl"
cat >"$tmp/expect.txt" <<'EOF'
ok
-
prompt
tokens
tokens
tokens
tokens
tokens
n_predict
n_predict
n_predict
temp
temp
top_k
top_k
top_p
top_p
min_p
min_p
seed
seed
chat
prompt
prompt
chat
system
nonsense
-
tokens
ok
blank
ok
ok
EOF
check_lines() { # OUT EXPECT: the output against expect.txt
    "$py" - "$1" "$2" <<'PY'
import json, sys
raw = open(sys.argv[1], 'rb').read()
assert raw.endswith(b'\n') or not raw, 'output does not end with a newline'
lines = [json.loads(l) for l in raw.decode('utf-8').splitlines()]
want = [w.strip() for w in open(sys.argv[2])]
byline = {}
for o in lines:
    assert o['line'] not in byline, ('two lines for', o['line'])
    byline[o['line']] = o
for n, w in enumerate(want, 1):
    if w == 'blank':
        assert n not in byline, ('a line for the blank line', n)
        continue
    o = byline.get(n)
    assert o is not None, ('no output for line', n)
    if w == 'ok':
        assert o['finish_reason'] in ('stop', 'length'), o
        assert o['n_gen'] == len(o['tokens']) >= 1, o
        assert isinstance(o['text'], str) and o['n_prompt'] >= 1, o
    else:
        assert o['finish_reason'] == 'error', o
        assert o['error'].startswith('line %d: ' % n), o
        if w != '-':
            assert "field '%s'" % w in o['error'], (w, o)
assert len(lines) == sum(w != 'blank' for w in want), (len(lines), 'lines')
ids = {o['line']: o['id'] for o in lines}
assert ids[1] == 'good-1' and ids[32] == {'k': [1, 2]} and ids[33] is None, ids
assert ids[2] is None and ids[4] == 3 and ids[28] is None and ids[27] == 26, ids
assert byline[1]['n_gen'] == 4 and byline[32]['n_gen'] == 2 and byline[33]['n_gen'] == 1
PY
}
for np in 1 2; do
    if run $np -m "$m" --batch-file "$tmp/bad.jsonl" -o "$tmp/bad$np.out" -c 64 -t 1 \
        >/dev/null 2>"$tmp/err" && check_lines "$tmp/bad$np.out" "$tmp/expect.txt" 2>"$tmp/py"
    then
        ok "$np rank(s): 27 bad lines, one error line each naming line and field; 5 requests done"
    else
        bad "$np rank(s): bad lines"; cat "$tmp/py" "$tmp/err"
    fi
done
# the default output is stdout, and carries nothing but the lines
if run 1 -m "$m" --batch-file "$tmp/bad.jsonl" -c 64 -t 1 >"$tmp/stdout.out" 2>/dev/null &&
    check_lines "$tmp/stdout.out" "$tmp/expect.txt" 2>"$tmp/py"; then
    ok "without -o the lines go to stdout"
else
    bad "lines on stdout"; cat "$tmp/py"
fi

# ---- what stops the job before any work: one error line, no output ----
stops() { # NP REGEX ARGS...
    local np=$1 re=$2
    shift 2
    echo earlier >"$tmp/stop.out" # a job that stops leaves an earlier output as it was
    run "$np" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$? errors
    errors=$(grep -c 'error:' "$tmp/err")
    if [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && [ "$errors" -eq 1 ] &&
        grep -qE -- "$re" "$tmp/err" && [ ! -s "$tmp/out" ] &&
        [ "$(cat "$tmp/stop.out")" = earlier ] && ! grep -q ': layers ' "$tmp/err"; then
        ok "$np rank(s): $* stops: $(grep 'error:' "$tmp/err" | sed 's/^\[rank [0-9]*\] //')"
    else
        bad "$np rank(s): $*: exit $rc, $errors error lines"; cat "$tmp/err"
    fi
}
echo '{"tokens": [1]}' >"$tmp/one.jsonl"
for np in 1 2; do
    stops $np "cannot open '.*missing.jsonl'" -m "$m" --batch-file "$tmp/missing.jsonl"
    stops $np "cannot read '.*'" -m "$m" --batch-file "$tmp"
    stops $np "-o: cannot create '.*/no/such/dir/out'" -m "$m" --batch-file "$tmp/one.jsonl" \
        -o "$tmp/no/such/dir/out"
    stops $np "--dump-logits: cannot create files in '.*/no/such/dir/'" -m "$m" \
        --batch-file "$tmp/one.jsonl" --dump-logits "$tmp/no/such/dir/d" -o "$tmp/stop.out"
    stops $np "--parallel: 0 is out of range" -m "$m" --batch-file "$tmp/one.jsonl" --parallel 0 \
        -o "$tmp/stop.out"
    stops $np "--parallel: 'many'" -m "$m" --batch-file "$tmp/one.jsonl" --parallel many
    stops $np "--parallel: -2 is out of range" -m "$m" --batch-file "$tmp/one.jsonl" --parallel -2
    stops $np "--groups: 0 is out of range" -m "$m" --batch-file "$tmp/one.jsonl" --groups 0
    stops $np "--temp must be >= 0" -m "$m" --batch-file "$tmp/one.jsonl" --temp -1 \
        -o "$tmp/stop.out"
    stops $np "cannot be combined with -p" -m "$m" --batch-file "$tmp/one.jsonl" -p hi
    stops $np "need --batch-file" -m "$m" --tokens 1,2 --parallel 4
done

# ---- 20 requests at --parallel 4, each its solo --tokens run ----
"$py" - "$tmp/twenty.jsonl" <<'PY'
import json, random, sys
r = random.Random(7)
with open(sys.argv[1], 'w') as f:
    for i in range(20):
        toks = [r.randrange(256) for _ in range(r.randrange(1, 40))]
        q = {'id': 'r%d' % i, 'tokens': toks, 'n_predict': r.randrange(1, 24)}
        f.write(json.dumps(q) + '\n')
PY
solo_match() { # NP OUT: every line's ids against baton --tokens (dumps for lines 1, 7, 20)
    local np=$1 out=$2 line=0 req toks n want got bad_n=0
    while IFS= read -r req; do
        line=$((line + 1))
        toks=$("$py" -c 'import json,sys
print(",".join(map(str, json.loads(sys.argv[1])["tokens"])))' "$req")
        n=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["n_predict"])' "$req")
        want=$(timeout 60 "$bin/baton" -m "$m" --tokens "$toks" -n "$((n - 1))" -t 1 \
            --dump-logits "$tmp/solo.bin" 2>/dev/null)
        got=$("$py" -c 'import json,sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o["line"] == int(sys.argv[2]): print(" ".join(map(str, o["tokens"])))' "$out" "$line")
        if [ -z "$want" ] || [ "$want" != "$got" ]; then
            bad_n=$((bad_n + 1)); echo "# line $line: solo '$want', batch '$got'"
        fi
        case $line in 1|7|20)
            cmp -s "$tmp/solo.bin" "$tmp/dump$np.$line" ||
                { bad_n=$((bad_n + 1)); echo "# line $line: dump differs from solo"; } ;;
        esac
    done <"$tmp/twenty.jsonl"
    return "$bad_n"
}
for np in 1 2; do # prompts in chunks of 8 and 16 rows
    if run $np -m "$m" --batch-file "$tmp/twenty.jsonl" --parallel 4 -c 64 -t 1 -ub $((8 * np)) \
        -o "$tmp/twenty$np.out" --dump-logits "$tmp/dump$np" >/dev/null 2>"$tmp/err" &&
        [ "$(wc -l <"$tmp/twenty$np.out")" -eq 20 ] && solo_match $np "$tmp/twenty$np.out"; then
        ok "$np rank(s): 20 requests at --parallel 4, -ub $((8 * np)):" \
            "each equal its solo --tokens run (3 dumps too)"
    else
        bad "$np rank(s): 20 requests against solo runs"; tail -n 5 "$tmp/err"
    fi
done
if grep -q 'batch: 20 requests in' "$tmp/err" && grep -q 'time to first token p50' "$tmp/err"; then
    ok "summary: requests, tokens, time to first token and latency"
else
    bad "summary"; cat "$tmp/err"
fi

# ---- deepseek2 (MLA: each slot's latent cache rows): the twenty requests on
# 1 rank at --parallel 1 and on 2 ranks at --parallel 4, the same ids and logits ----
ds=${BT_GOLDEN_DIR:-${BT_SRCDIR:-$(dirname "$0")/..}/tests/data/golden}/tiny-deepseek3-golden.gguf
for cfg in "1 1" "2 4"; do
    set -- $cfg
    run "$1" -m "$ds" --batch-file "$tmp/twenty.jsonl" --parallel "$2" -c 64 -t 1 -ub 8 \
        -o "$tmp/ds-$1-$2.out" --dump-logits "$tmp/ds$1$2" >/dev/null 2>"$tmp/err" ||
        { bad "deepseek2 on $1 rank(s), --parallel $2"; tail -n 5 "$tmp/err"; }
done
same_dumps() { for l in 1 7 20; do cmp -s "$tmp/ds11.$l" "$tmp/ds24.$l" || return 1; done; }
if "$py" - "$tmp/ds-1-1.out" "$tmp/ds-2-4.out" <<'PY' && same_dumps; then
import json, sys
a, b = ({o['line']: o['tokens'] for o in map(json.loads, open(p))} for p in sys.argv[1:])
assert len(a) == 20 and a == b, 'differ'
PY
    ok "deepseek2: 20 requests, 2 ranks at --parallel 4 give 1 rank's --parallel 1 ids and logits"
else
    bad "deepseek2: 2 ranks at --parallel 4 differ from 1 rank at --parallel 1"
fi

# ---- seeded sampling: the same at --parallel 1 and 8, on 1 and 2 ranks ----
"$py" - "$tmp/sampled.jsonl" <<'PY'
import json, random, sys
r = random.Random(11)
with open(sys.argv[1], 'w') as f:
    for i in range(16):
        q = {'id': i, 'tokens': [r.randrange(256) for _ in range(r.randrange(1, 30))],
             'n_predict': r.randrange(4, 20), 'temp': 0.9, 'top_k': 0, 'top_p': 0.95, 'min_p': 0.0}
        if i % 2 == 0:  # the others take a seed derived from --seed and the line
            q['seed'] = 1000 + i
        f.write(json.dumps(q) + '\n')
    # lines 17 and 18: the same request without a seed, so only the line tells them apart
    q = {'id': 'twin', 'tokens': [5, 6, 7], 'n_predict': 12, 'temp': 1.0, 'top_k': 0}
    f.write(json.dumps(q) + '\n' + json.dumps(q) + '\n')
PY
same_tokens() { # A B: the same ids per line
    "$py" - "$1" "$2" <<'PY'
import json, sys
a, b = ({o['line']: o['tokens'] for o in map(json.loads, open(p))} for p in sys.argv[1:])
assert len(a) == 18 and a == b, 'differ'
PY
}
for cfg in "1 1" "1 8" "2 1" "2 8"; do
    set -- $cfg
    run "$1" -m "$m" --batch-file "$tmp/sampled.jsonl" --parallel "$2" -c 64 -t 1 --seed 42 \
        -o "$tmp/s-$1-$2.out" >/dev/null 2>"$tmp/err" ||
        { bad "sampled on $1 rank(s), --parallel $2"; cat "$tmp/err"; }
done
run 2 -m "$m" --batch-file "$tmp/sampled.jsonl" --parallel 4 -c 64 -t 1 --seed 42 \
    --pipeline 0 -o "$tmp/s-2-4.out" >/dev/null 2>"$tmp/err" ||
    { bad "sampled on 2 ranks, --pipeline 0"; cat "$tmp/err"; }
for cfg in "1 8" "2 1" "2 8" "2 4"; do
    set -- $cfg
    if same_tokens "$tmp/s-1-1.out" "$tmp/s-$1-$2.out" 2>/dev/null; then
        ok "seeded sampling: $1 rank(s) at --parallel $2$([ "$2" = 4 ] && echo ", --pipeline 0")" \
            "equal to 1 rank at --parallel 1"
    else
        bad "seeded sampling: $1 rank(s) at --parallel $2 differs from 1 rank at --parallel 1"
    fi
done
run 1 -m "$m" --batch-file "$tmp/sampled.jsonl" -c 64 -t 1 --seed 43 -o "$tmp/s43.out" \
    >/dev/null 2>&1
if "$py" - "$tmp/s-1-1.out" "$tmp/s43.out" <<'PY'
import json, sys
a, b = ({o['line']: o['tokens'] for o in map(json.loads, open(p))} for p in sys.argv[1:])
assert all(a[i] == b[i] for i in a if i <= 16 and (i - 1) % 2 == 0), 'a seeded one changed'
assert any(a[i] != b[i] for i in a if (i - 1) % 2 == 1), 'no derived seed changed with --seed'
assert a[17] != a[18], 'two lines without a seed drew the same tokens'
PY
then ok "a request's own seed ignores --seed; the derived ones follow it and differ by line"
else bad "per-request seeds against --seed and the line"; fi

# ---- text prompts and chat (SmolLM2) ----
sm=${BT_SMOLLM2:-}
if [ -n "$sm" ] && [ -f "$sm" ]; then
    long=$("$py" -c 'print("word " * 400)')
    cat >"$tmp/text.jsonl" <<EOF
{"id": "a", "prompt": "Once upon a time", "n_predict": 12, "temp": 0.8, "seed": 1}
{"id": "b", "prompt": "What is the capital of France?", "chat": true, "n_predict": 16, "temp": 0}
{"id": "c", "prompt": "Hi", "chat": true, "system": "You are terse.", "n_predict": 8, "seed": 9}
{"id": "d", "prompt": "$long"}
{"id": "e", "prompt": "The sky is", "n_predict": 10}
EOF
    for cfg in "1 1" "1 8" "2 4"; do
        set -- $cfg
        run "$1" -m "$sm" --batch-file "$tmp/text.jsonl" --parallel "$2" -c 256 -t 1 --seed 5 \
            -o "$tmp/t-$1-$2.out" >/dev/null 2>"$tmp/err" ||
            { bad "text on $1 rank(s)"; cat "$tmp/err"; }
    done
    if "$py" - "$tmp"/t-1-1.out "$tmp"/t-1-8.out "$tmp"/t-2-4.out <<'PY'
import json, sys
runs = [{o['id']: o for o in map(json.loads, open(p, encoding='utf-8'))} for p in sys.argv[1:]]
for r in runs:
    assert r['d']['finish_reason'] == 'error' and "field 'prompt'" in r['d']['error'], r['d']
    assert all(r[k]['finish_reason'] in ('stop', 'length') and r[k]['n_gen'] >= 1 for k in 'abce')
    assert [(k, r[k]['text']) for k in 'abce'] == [(k, runs[0][k]['text']) for k in 'abce']
PY
    then ok "SmolLM2: text and chat requests, the same text at --parallel 1 and 8 and on" \
        "2 ranks; a prompt over -c is an error line"
    else bad "SmolLM2 text requests"; fi
    # a chat request's text and ids equal baton --chat's
    want=$(timeout 120 "$bin/baton" -m "$sm" --chat -p "What is the capital of France?" -n 16 \
        --temp 0 -t 1 --print-token-ids 2>/dev/null | tail -n 1)
    got=$("$py" -c 'import json,sys
for o in map(json.loads, open(sys.argv[1])):
    if o["id"] == "b": print(",".join(map(str, o["tokens"])))' "$tmp/t-1-8.out")
    if [ -n "$want" ] && [ "$want" = "$got" ]; then
        ok "SmolLM2: a chat request's ids equal baton --chat's"
    else bad "SmolLM2 chat request: '$got', baton --chat: '$want'"; fi
else
    echo "SKIP: text and chat requests: SmolLM2 model not found at ${sm:-BT_SMOLLM2}" \
        "(run scripts/fetch-smollm2)"
fi

# ---- a rank SIGKILLed during a job ----
big="$tmp/big.gguf"
"$bin/baton-mkmodel" --shape tiny --n-layer 6 --n-embd 256 --n-head 4 --n-head-kv 4 \
    -o "$big" >/dev/null 2>&1
"$py" - "$tmp/long.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], 'w') as f:
    for i in range(400):
        f.write(json.dumps({'id': i, 'tokens': [1 + i % 200, 2, 3], 'n_predict': 200}) + '\n')
PY
rank_pid() { # the pid of world rank R among the launcher's children
    local r=$1 p
    for p in $(pgrep -P "$job"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$r"; then
            echo "$p"; return
        fi
    done
}
for victim_rank in 0 1; do
    out="$tmp/killed$victim_rank.out"
    "$launcher" -np 2 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
        "$bin/baton" -m "$big" --batch-file "$tmp/long.jsonl" --parallel 4 -c 256 -t 1 \
        -o "$out" >/dev/null 2>"$tmp/err" &
    job=$!
    for i in $(seq 1 600); do # up to 60 s for 3 finished lines
        [ -f "$out" ] && [ "$(wc -l <"$out")" -ge 3 ] && break
        kill -0 "$job" 2>/dev/null || break
        sleep 0.1
    done
    victim=$(rank_pid "$victim_rank")
    if [ ! -f "$out" ] || [ "$(wc -l <"$out")" -lt 3 ] || [ -z "$victim" ]; then
        bad "kill rank $victim_rank: the job did not reach 3 lines or rank not found"
        tail -n 5 "$tmp/err"; stop_job; continue
    fi
    t0=$(date +%s.%N)
    kill -9 "$victim"
    for i in $(seq 1 150); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$job" 2>/dev/null; then
        bad "kill rank $victim_rank: job still running 15 s after SIGKILL"; stop_job; continue
    fi
    wait "$job"; rc=$?
    job=
    took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ "$rc" -ne 0 ] && awk -v t="$took" 'BEGIN { exit !(t <= 10) }'; then
        ok "SIGKILL of rank $victim_rank during a batch job: exit $rc after $took s"
    else
        bad "SIGKILL of rank $victim_rank: exit $rc after $took s"
    fi
    if n=$("$py" - "$out" <<'PY'
import json, sys
raw = open(sys.argv[1], 'rb').read()
assert raw.endswith(b'\n'), 'a cut line at the end'
lines = [json.loads(l) for l in raw.decode('utf-8').splitlines()]
assert all(o['finish_reason'] == 'length' and o['n_gen'] == 200 for o in lines)
assert len(lines) < 400, 'the job finished before the kill'
print(len(lines))
PY
    ); then ok "after the kill of rank $victim_rank: $n whole, valid lines"
    else bad "output after the kill of rank $victim_rank is not whole valid lines"; fi
done

tap_done
