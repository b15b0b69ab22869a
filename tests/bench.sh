#!/usr/bin/env bash
# baton-bench end to end: HDF5 results with 1 and 2 ranks read back by
# check_results (append keeps old rows), the kernel benchmark's report,
# the json/jsonl/csv outputs, and -sm layer,tensor and -tp (rows of each
# layout, the skipped tensor tests with --pipeline 1, a -tp that does not
# divide the ranks refused). (Bad flags and unwritable or foreign HDF5
# files: tests/bad_input.sh; a rank killed mid-run: tests/rank_death.sh.)
set -u
bin=${BT_BUILDDIR:-$(pwd)}
. "$(dirname "$0")/tap.sh"
tap_mpi 120
tap_tmp bench

m="$tmp/tiny.gguf"
"$bin/baton-mkmodel" --shape tiny --n-layer 4 -o "$m" >/dev/null 2>&1
b="$bin/baton-bench"

# ---- the kernel benchmark: report format, restriction flags, bad names ----
if timeout 120 "$b" --kernels --kernel-shapes tiny --kernel-types q8_0,q4_k -t 1,2 -r 1 \
    --kernel-tokens 4 --kernel-time 0 --kernel-bw-mib 16 >"$tmp/k.md" 2>"$tmp/err"; then
    ok "--kernels runs"
else
    bad "--kernels"; cat "$tmp/err"
fi
if python3 - "$tmp/k.md" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
num = r"[0-9]+\.[0-9]"
# the int8 peak: the 8-bit dot product of whichever build runs (none in sse2)
dot = rf"{num} GOP/s \(1 thread\), {num} \(2 threads\)"
m = re.search(rf"^FMA peak: {num} GFLOP/s \(1 thread\), {num} \(2 threads\); "
              rf"int8 dot-product peak: ({dot}|none in this build); "
              rf"read bandwidth: {num} GB/s \(1 thread\), {num} GB/s \(2 threads\)$",
              text, re.M)
assert m, "peak line"
has_dot = m.group(1) != "none in this build"
head = ("| kernel | type | shape | tokens | threads | GFLOP/s | GB/s | % FMA peak | "
        "% int8 peak | % read BW | % read BW now |")
assert head in text, "table header"
rows = [l.split("|")[1:-1] for l in text.splitlines() if l.startswith("| gemv") or
        l.startswith("| gemm")]
# q8_0: 5 GEMV matrices (with the head) and 4 GEMM matrices x 1 token count, x 2 thread
# counts; again as "exact" for each (cpu's 8-bit activations differ from it, ffn_down's
# 160, 5 blocks, included)
assert len(rows) == 36, len(rows)
for r in rows:
    r = [c.strip() for c in r]
    assert len(r) == 13 and r[1] == "q8_0", r
    assert r[0] in ("gemv", "gemm", "gemv exact", "gemm exact"), r
    assert r[3] == ("1" if r[0].startswith("gemv") else "4") and r[4] in ("1", "2"), r
    # (a GEMM's % of read bandwidth can round to 0.0; so can any rate of a
    # tiny shape under the sanitizers or on a loaded machine: the format is
    # tested here, not the speed)
    assert all(float(r[i]) >= 0 for i in (5, 6, 7, 9)), r
    # % int8 peak: the cpu kernels' 8-bit path only (n_in 64 and 160 are
    # whole 32-blocks), never the exact kernels' f32 products
    if r[0].endswith("exact") or not has_dot:
        assert r[8] == "-", r
    else:
        assert float(r[8]) >= 0, r
    # % read BW now: a GEMV's rate against the bandwidth measured around it
    if r[0].startswith("gemv"):
        assert float(r[10]) >= 0, r
    else:
        assert r[10] == "-", r
    assert re.fullmatch(r"[0-9.]+-[0-9.]+", r[11]) and r[12] == "1", r
assert "tiny output 64->256" in text and "tiny ffn_down 160->64" in text
assert len(re.findall(r"^\| - \| q4_k \| tiny n_in (64|160) .*skipped", text, re.M)) == 2
PY
then ok "--kernels report: peaks, header, one row per matrix, tokens and threads"
else bad "--kernels report"; cat "$tmp/k.md"; fi
# the decode step of -m models (--kernel-tokens 1): a row per model and
# thread count; "active" against the file's own tensor sizes (every matrix,
# k of E experts, the head; the tiny model's head is its own output.weight)
"$bin/baton-mkmodel" --shape tiny --n-layer 3 --type q8_0 -o "$tmp/dq.gguf" >/dev/null 2>&1
"$bin/baton-mkmodel" --shape tiny --n-layer 2 --n-expert 4 --n-expert-used 2 --type q4_0 \
    -o "$tmp/de.gguf" >/dev/null 2>&1
if timeout 120 "$b" --kernels --kernel-shapes tiny --kernel-types q8_0 -t 1,2 -r 5 \
    --kernel-tokens 1 --kernel-time 0 --kernel-bw-mib 16 -m "$tmp/dq.gguf" -m "$tmp/de.gguf" \
    >"$tmp/d.md" 2>"$tmp/err" && python3 - "$tmp/d.md" "$tmp/dq.gguf" "$tmp/de.gguf" <<'PY'
import re, sys
sys.path.insert(0, ".")
text = open(sys.argv[1]).read()
head = ("| model | type | threads | ms / token | t/s | active MiB | GB/s | % read BW | "
        "% read BW now | outside |")
assert head in text, "decode-step header"
rows = [[c.strip() for c in l.split("|")[1:-1]] for l in text.split(head)[1].splitlines()[2:]
        if l.startswith("|")]
assert [(r[0], r[2]) for r in rows] == [("dq.gguf", "1"), ("dq.gguf", "2"), ("de.gguf", "1"),
                                        ("de.gguf", "2")], rows
assert [r[1] for r in rows] == ["Q8_0", "Q8_0", "Q4_0", "Q4_0"], rows  # the file types

def tensors(path):  # GGUF v3: name -> bytes, from the header alone
    import struct
    f = open(path, "rb").read()
    n_t, n_kv = struct.unpack_from("<QQ", f, 8)
    o = 24
    def s(o):
        n, = struct.unpack_from("<Q", f, o); return f[o + 8:o + 8 + n].decode(), o + 8 + n
    size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def val(t, o):
        if t == 8: return s(o)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", f, o); o += 12
            for _ in range(n): o = val(et, o)
            return o
        return o + size[t]
    for _ in range(n_kv):
        _, o = s(o); t, = struct.unpack_from("<I", f, o); o = val(t, o + 4)
    out = {}
    for _ in range(n_t):
        name, o = s(o); nd, = struct.unpack_from("<I", f, o); o += 4
        dims = struct.unpack_from("<%dQ" % nd, f, o); o += 8 * nd
        t, = struct.unpack_from("<I", f, o); o += 12
        n = 1
        for d in dims: n *= d
        bs, bb = {0: (1, 4), 2: (32, 18), 8: (32, 34)}[t]
        out[name] = (n // bs * bb, dims)
    return out

for path, (lo, hi) in zip(sys.argv[2:], [(0, 2), (2, 4)]):
    ts = tensors(path)
    want = 0
    for name, (b, dims) in ts.items():
        if name.endswith("_exps.weight"):
            want += b * 2 // 4          # 2 of 4 experts
        elif len(dims) == 2 and name != "token_embd.weight":
            want += b
    if "output.weight" not in ts:       # tied: the head streams the embeddings
        want += ts["token_embd.weight"][0]
    for r in rows[lo:hi]:
        assert abs(float(r[5]) - want / 2**20) <= 0.006, (r, want / 2**20)
        ms, tps, gbs = float(r[3]), float(r[4]), float(r[6])
        assert ms > 0 and abs(tps - 1e3 / ms) <= 0.02 * tps + 0.1, r
        assert abs(gbs - want / (ms / 1e3) / 1e9) <= 0.01 * gbs + 0.05, r
        assert all(r[i].endswith("%") for i in (7, 8, 9)), r
PY
then ok "--kernels -m: a decode-step row per model and thread count, active bytes from the file"
else bad "--kernels -m decode steps"; cat "$tmp/d.md" "$tmp/err"; fi
# ---- results: 1 rank, then 2 ranks appended ----
h5="$tmp/r.h5"
if mpi 1 "$b" -m "$m" -p 32 -n 8 -r 2 -t 1 --hdf5 "$h5" >"$tmp/md1" 2>"$tmp/err"; then
    ok "1-rank benchmark"
else
    bad "1-rank benchmark"; cat "$tmp/err"
fi
grep -q '| pp32 |' "$tmp/md1" && grep -q '| tg8 |' "$tmp/md1" && ok "markdown rows" ||
    { bad "markdown rows"; cat "$tmp/md1"; }
# the columns, llama-bench style: every one shown, sm layer, tp 1, tp comm
# gather and parallel (-npl) 1 by default
md_head='| model | size | params | backend | threads | ranks | split | pipeline | sm | tp | tp comm | ub | parallel | test | t/s |'
if [ "$(head -1 "$tmp/md1")" = "$md_head" ] &&
    [ "$(awk -F'|' 'NR > 2 && NF == 17 && $10 == " layer " && $11 == " 1 " &&
        $12 == " gather " && $14 == " 1 " && $4 != ""' "$tmp/md1" | wc -l)" -eq 2 ]
then ok "markdown header and 15 cells a row, sm layer, tp 1, tp comm gather, parallel 1"
else bad "markdown columns"; cat "$tmp/md1"; fi
cp "$h5" "$tmp/before.h5"
"$bin/tests/check_results" "$h5" 1 2 4 none >"$tmp/chk" 2>&1 && ok "1-rank file reads back" ||
    { bad "1-rank file"; cat "$tmp/chk"; }
if mpi 2 "$b" -m "$m" -p 32 -n 8 -r 2 -t 1 --pipeline 0,1 --hdf5 "$h5" >"$tmp/md2" 2>"$tmp/err"
then ok "2-rank benchmark appended"; else bad "2-rank benchmark"; cat "$tmp/err"; fi
grep -q '| 2/2 | 1 |' "$tmp/md2" && ok "2-rank split and pipeline columns" ||
    { bad "2-rank columns"; cat "$tmp/md2"; }
"$bin/tests/check_results" "$h5" 2 6 4 "$tmp/before.h5" >"$tmp/chk" 2>&1 &&
    ok "appended file reads back, old rows unchanged" || { bad "appended file"; cat "$tmp/chk"; }
# the comparison can fail: another 1-rank run of the same tests is not
# what the appended file began with
if mpi 1 "$b" -m "$m" -p 32 -n 8 -r 2 -t 1 --hdf5 "$tmp/other.h5" >/dev/null 2>"$tmp/err" &&
    ! "$bin/tests/check_results" "$h5" 2 6 4 "$tmp/other.h5" >"$tmp/chk" 2>&1 &&
    grep -q "old rows changed" "$tmp/chk"
then ok "a before-file the rows did not come from is refused"
else bad "append check against a foreign before-file"; cat "$tmp/chk" "$tmp/err"; fi
# the link probe: -v prints every link s -> s+1 with its latency and bandwidth
if mpi 3 "$b" -m "$m" -p 8 -n 0 -r 1 -t 1 -v >/dev/null 2>"$tmp/err" &&
    [ "$(grep -cE 'link [01] -> [12] \(.*\): latency [0-9.]+ us, bandwidth [0-9.]+ MB/s' "$tmp/err")" -eq 2 ]
then ok "-v prints the 2 links of 3 ranks"; else bad "-v link probe lines"; cat "$tmp/err"; fi
# the writer alone: n_parallel, split_mode, tp, tp_comm and gather_s round
# trips; older (4 included) and newer format versions refused with their
# bytes and mtime unchanged; the reader takes versions 4 to 8 only, a
# version 7 file's missing tp_comm as gather
mkdir -p "$tmp/writer"
"$bin/tests/check_results" --writer "$tmp/writer" >"$tmp/chk" 2>&1 &&
    ok "HDF5 writer: n_parallel, split_mode, tp, tp_comm, gather_s read back; other versions refused" ||
    { bad "HDF5 writer"; cat "$tmp/chk"; }
if command -v h5dump >/dev/null; then
    h5dump -H "$h5" >/dev/null 2>&1 && ok "h5dump reads the file" || bad "h5dump"
fi

# ---- -npl: P sequences at once through the serve engine ----
# 12 tests (pp, tg, pg x pipeline 0/1 x -npl 1/3): rows, stage times and
# the trace files of the parallel tests, as for the others
if mpi 2 "$b" -m "$m" -p 16 -n 4 -pg 8,3 -r 2 -t 1 -ub 8 --pipeline 0,1 -npl 1,3 -o jsonl \
    --hdf5 "$tmp/npl.h5" --trace-dir "$tmp/npl-traces" >"$tmp/npl.jsonl" 2>"$tmp/err"
then ok "-npl 1,3 on 2 ranks, pipeline 0 and 1"; else bad "-npl 1,3"; cat "$tmp/err"; fi
"$bin/tests/check_results" "$tmp/npl.h5" 1 12 4 none >"$tmp/chk" 2>&1 &&
    ok "-npl file reads back: n_parallel, t/s over every sequence, stage times" ||
    { bad "-npl file"; cat "$tmp/chk"; }
if python3 - "$tmp/npl.jsonl" "$tmp/npl-traces" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 12, len(rows)
assert [r["n_parallel"] for r in rows] == [1] * 3 + [3] * 3 + [1] * 3 + [3] * 3, rows
assert [r["pipeline"] for r in rows] == [0] * 6 + [1] * 6
for r in rows:
    tok = r["n_parallel"] * (r["n_prompt"] + r["n_gen"])
    for n, t in zip(r["samples_ns"], r["samples_ts"]):
        assert abs(t - tok / (n * 1e-9)) <= 1e-5 * t, (r["test"], n, t, tok)
names = sorted(os.listdir(sys.argv[2]))
assert len(names) == 12, names
assert sum(n.endswith("-npl3.json") for n in names) == 6, names
assert "test-004-tg4-pipeline0-ub8-npl3.json" in names, names
for n in names:
    ev = json.load(open(os.path.join(sys.argv[2], n)))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    assert {e.get("tid") for e in ev if e.get("ph") == "X"} >= {0, 1}, n  # a track per rank
PY
then ok "-npl rows: n_parallel by test, t/s = P x tokens per repetition, a trace per test"
else bad "-npl rows and traces"; cat "$tmp/npl.jsonl"; ls "$tmp/npl-traces"; fi
if mpi 3 "$b" -m "$m" -p 8 -n 4 -r 1 -t 1 -ub 4 -npl 4 --groups 2 -v >"$tmp/npl.md" 2>"$tmp/err" &&
    [ "$(awk -F'|' 'NR > 2 && $14 == " 4 "' "$tmp/npl.md" | wc -l)" -eq 2 ] &&
    [ "$(grep -c 'bubble: measured' "$tmp/err")" -eq 2 ]
then ok "-npl 4 --groups 2 on 3 ranks: parallel column, stage figures"
else bad "-npl 4 --groups 2 on 3 ranks"; cat "$tmp/npl.md" "$tmp/err"; fi

# ---- machine-readable outputs ----
mpi 2 "$b" -m "$m" -p 16 -n 4 -r 3 -t 1 -o json >"$tmp/r.json" 2>/dev/null
mpi 1 "$b" -m "$m" -p 16 -n 4 -r 3 -t 1 -o jsonl >"$tmp/r.jsonl" 2>/dev/null
mpi 1 "$b" -m "$m" -p 16 -n 0 -r 3 -t 1 -o csv >"$tmp/r.csv" 2>/dev/null
if python3 - "$tmp/r.json" "$tmp/r.jsonl" "$tmp/r.csv" <<'PY'
import csv, json, statistics, sys
rows = json.load(open(sys.argv[1]))
assert isinstance(rows, list) and len(rows) == 2, rows
for r in rows:
    assert len(r["samples_ns"]) == 3 and len(r["samples_ts"]) == 3, r
    assert r["n_ranks"] == 2 and r["layer_split"] == "2/2", r
    for k in ("build_commit", "cpu_info", "model_filename", "model_type", "model_size",
              "model_n_params", "n_batch", "n_ubatch", "n_threads", "n_prompt", "n_gen",
              "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "pipeline", "hosts",
              "n_parallel", "expert_rows", "expert_count", "split_mode", "tp", "tp_comm"):
        assert k in r, k
    assert r["n_parallel"] == 1 and r["tp_comm"] == "gather", r
    assert r["expert_rows"] == 0 and r["expert_count"] == 0, r  # a model without experts
    # t/s per repetition, then mean and sample stddev of those, to the
    # printed rounding (t/s to 1e-6, ns to 1 ns)
    ns, ts = r["samples_ns"], r["samples_ts"]
    tok = r["n_parallel"] * (r["n_prompt"] + r["n_gen"])
    for n, t in zip(ns, ts):
        assert abs(t - tok / (n * 1e-9)) <= 1e-5 * t, ("t/s of a repetition", n, t, tok)
    assert abs(r["avg_ts"] - statistics.mean(ts)) <= 2e-6, ("avg_ts", r["avg_ts"], ts)
    assert abs(r["stddev_ts"] - statistics.stdev(ts)) <= 4e-6, ("stddev_ts", r["stddev_ts"], ts)
    assert abs(r["avg_ns"] - statistics.mean(ns)) <= 1, ("avg_ns", r["avg_ns"], ns)
    assert abs(r["stddev_ns"] - statistics.stdev(ns)) <= 2, ("stddev_ns", r["stddev_ns"], ns)
lines = [json.loads(l) for l in open(sys.argv[2])]
assert len(lines) == 2 and lines[1]["n_gen"] == 4 and lines[1]["n_parallel"] == 1
c = list(csv.DictReader(open(sys.argv[3])))
assert len(c) == 1 and c[0]["n_prompt"] == "16" and json.loads(c[0]["samples_ns"])
assert c[0]["n_parallel"] == "1" and c[0]["tp_comm"] == "gather", c[0]
PY
then ok "json, jsonl and csv parse and hold the samples; avg and stddev (ns, t/s) are theirs"
else bad "json/jsonl/csv"; fi

# ---- -sm and -tp ----
# the reference command: layer with pipeline 0 and 1, tensor with 0 (pp and
# tg each); tensor with --pipeline 1 is skipped with one note from rank 0
if mpi 2 "$b" -m "$m" -sm layer,tensor --pipeline 0,1 -p 2048 -n 128 -ub 512 -t 1 -o jsonl \
    --hdf5 "$tmp/sm.h5" >"$tmp/sm.jsonl" 2>"$tmp/err"
then ok "-sm layer,tensor --pipeline 0,1 on 2 ranks"; else bad "-sm layer,tensor"; cat "$tmp/err"; fi
if python3 - "$tmp/sm.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
got = [(r["test"], r["split_mode"], r["pipeline"], r["tp"], r["layer_split"]) for r in rows]
want = [(t, "layer", p, 1, "2/2") for p in (0, 1) for t in ("pp2048", "tg128")] + \
       [(t, "tensor", 0, 2, "4") for t in ("pp2048", "tg128")]
assert got == want, got
assert all(r["n_ranks"] == 2 for r in rows), rows
PY
then ok "rows layer/0, layer/1, tensor/0 (pp2048, tg128 each): split_mode, pipeline, tp, layer_split"
else bad "-sm rows"; cat "$tmp/sm.jsonl"; fi
note='skipped: pp2048, tg128 (-ub 512, -npl 1): -sm tensor with --pipeline 1 (one stage has nothing to pipeline)'
if [ "$(grep -c 'skipped' "$tmp/err")" -eq 1 ] && grep -qxF "[rank 0] info: $note" "$tmp/err"
then ok "one skip note, from rank 0: $note"
else bad "skip note"; cat "$tmp/err"; fi
"$bin/tests/check_results" "$tmp/sm.h5" 1 6 4 none >"$tmp/chk" 2>&1 &&
    ok "-sm file reads back: split_mode, tp, one stage for tensor, gather seconds on tensor ranks" ||
    { bad "-sm file"; cat "$tmp/chk"; }
# stages of 2 tensor ranks on 4 ranks (-tp 2) beside -tp 1; a skipped first
# test keeps the json a valid array; -v times the -tp 2 tests' stage
# boundary (pp32: one row and an 8-row micro-batch; tg4: one row)
if mpi 4 "$b" -m "$m" -tp 1,2 -p 32 -n 4 -ub 8 -r 1 -t 1 -v --hdf5 "$tmp/tp.h5" -o csv \
    >"$tmp/tp.csv" 2>"$tmp/err" &&
    mpi 2 "$b" -m "$m" -sm tensor,layer --pipeline 1,0 -p 8 -n 0 -r 1 -t 1 -o json \
    >"$tmp/sm.json" 2>>"$tmp/err" &&
    python3 - "$tmp/tp.csv" "$tmp/sm.json" <<'PY'
import csv, json, sys
c = list(csv.DictReader(open(sys.argv[1])))
got = [(r["test"], r["split_mode"], r["tp"], r["layer_split"], r["n_ranks"]) for r in c]
assert got == [(t, "layer", tp, split, "4") for tp, split in (("1", "1/1/1/1"), ("2", "2/2"))
               for t in ("pp32", "tg4")], got
rows = json.load(open(sys.argv[2]))
got = [(r["split_mode"], r["pipeline"], r["tp"]) for r in rows]
assert got == [("tensor", 0, 2), ("layer", 1, 1), ("layer", 0, 1)], got
PY
then ok "-tp 1,2 on 4 ranks: tp and layers per stage; json with a skipped first test"
    boundary=$(grep -Ec 'stage boundary, 2 stages x 2 tensor ranks, (1 rows|8 rows) \([0-9]+ B\): stage [0-9.]+ us, pair-split [0-9.]+ us, pair-whole [0-9.]+ us' "$tmp/err")
    [ "$boundary" -eq 3 ] && ok "-v on -tp 2: the stage boundary's three crossings, once per size of each test" ||
        { bad "-v stage boundary lines: $boundary of 3"; grep boundary "$tmp/err"; }
else bad "-tp 1,2 on 4 ranks or json after a skip"; cat "$tmp/tp.csv" "$tmp/sm.json" "$tmp/err"; fi
"$bin/tests/check_results" "$tmp/tp.h5" 1 4 4 none >"$tmp/chk" 2>&1 &&
    ok "-tp 2 file reads back: only each stage's leader sends and receives" ||
    { bad "-tp 2 file"; cat "$tmp/chk"; }
# a -tp that does not divide the ranks: refused before any test, every rank
# exits (no hang), rank 0 reports once, naming -tp and the rank count
mpi 2 "$b" -m "$m" -tp 1,3 -p 8 -n 0 -r 1 -t 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && [ ! -s "$tmp/out" ] &&
    [ "$(grep -c 'error:' "$tmp/err")" -eq 1 ] &&
    grep -q '^\[rank 0\] error: -tp 3 does not divide the 2 ranks into stages' "$tmp/err"
then ok "-tp 3 on 2 ranks refused (exit $rc): $(grep 'error:' "$tmp/err")"
else bad "-tp 3 on 2 ranks: exit $rc"; cat "$tmp/out" "$tmp/err"; fi

tap_done
