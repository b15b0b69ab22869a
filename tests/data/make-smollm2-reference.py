#!/usr/bin/env python3
"""Makes tests/data/smollm2-reference.txt and smollm2-ref-logits-A.bin.

Reference greedy continuations of SmolLM2-135M-Instruct (Q4_1 GGUF, the file
scripts/fetch-smollm2 fetches, sha256 b179c952...db53) from implementations
independent of baton, for baton's end-to-end test at 1, 2 and 3 ranks.

baton dequantizes weights exactly and computes in f32 (f32 activations, f32
KV cache). llama.cpp, on a Q4_1 file, does not: it quantizes the activations
to Q8_1/Q8_0 for its integer dot products and keeps an f16 KV cache, which
moves SmolLM2's logits by up to ~0.6 (prompt A) and ~1.1 (prompt B) and
changes the greedy ids (at step 5 for A, step 0 for B). So three references
are made, all on the same token ids:

  greedy      llama.cpp (PyPI llama-cpp-python) on an F32 copy of the model
              whose every weight is the exact dequantized Q4_1/Q8_0 value
              (made with llama.cpp's own llama_model_quantize, ftype ALL_F32,
              allow_requantize; checked here bitwise against gguf's
              dequantize), F32 KV cache, flash attention off. Same function
              as baton computes. THIS is what the test should match.
  greedy-f64  a plain NumPy float64 llama forward pass written here, over the
              weights of the Q4_1 file dequantized by the `gguf` package
              (gguf.quants.dequantize). Cross-checks "greedy": on this model
              their logits differ by ~2e-5.
  greedy-q4   llama.cpp on the Q4_1 file as it is (Q8 activations, f16 KV
              cache, its defaults). For information only: baton is not
              expected to match it.

llama.cpp settings for both llama.cpp runs: CPU, 1 thread (n_threads and
n_threads_batch), n_ctx 512, n_batch = n_ubatch = 512, logits_all False; the
prompt is evaluated in one batch, then 32 greedy steps: argmax of the last
position's logits (llama_get_logits_ith(ctx, -1)), fed back one token at a
time. No sampler is involved (no temperature, top-k or repeat penalty), and
end-of-generation does not stop it: exactly 32 ids.

Prompts (ids from llama.cpp's tokenizer, then fed as ids to all three):
  A  the raw text "The capital of France is" (add_bos False, as the GGUF
     says: tokenizer.ggml.add_bos_token = false).
  B  the ChatML prompt for the user message "What is the capital of
     France?" with the model's default system prompt (from its chat
     template), special tokens parsed.

How it was run (Debian 12, 2-core x86-64, pyenv Python 3.11.7; the
llama-cpp-python build from source took about 6.5 minutes):
  python3 -m venv /tmp/lcpvenv
  CMAKE_ARGS="-DGGML_NATIVE=OFF" /tmp/lcpvenv/bin/pip install llama-cpp-python numpy
  /tmp/lcpvenv/bin/pip install gguf
  /tmp/lcpvenv/bin/python tests/data/make-smollm2-reference.py \\
      --model "$(scripts/fetch-smollm2)"
It needs ~1.5 GB of memory and writes a 515 MiB temporary F32 GGUF (in
$TMPDIR), removed at the end; it takes well under a minute. The versions
used are written into the first lines of the reference file. Running it
again gives the same file.

Output format (tests/data/smollm2-reference.txt): one record a line, fields
separated by single spaces; lines starting with '#' are comments. <P> is A
or B.
  <P> prompt <ids...>            prompt token ids
  <P> greedy <32 ids>            llama.cpp, exact F32 weights (the target)
  <P> margins <32 floats>        its top-1 minus top-2 logit at each step
  <P> eos <steps...>             0-based steps where "greedy" holds an
                                 end-of-generation id (- if none)
  <P> text <escaped>             "greedy" detokenized, special tokens
                                 shown; \\n \\t \\r \\\\ escaped, UTF-8; the
                                 text is all of the line after "<P> text "
                                 and may itself start with a space
  <P> greedy-f64 <32 ids>        numpy float64
  <P> margins-f64 <32 floats>
  <P> agree-f64 <n>              leading steps where greedy-f64 == greedy
  <P> greedy-q4 <32 ids>         llama.cpp on the Q4_1 file (information)
  <P> margins-q4 <32 floats>
  <P> eos-q4 <steps...>
  <P> text-q4 <escaped>
  <P> agree-q4 <n>               leading steps where greedy-q4 == greedy
smollm2-ref-logits-A.bin: the "greedy" run's 49152 logits (little-endian
float32) for the first generated position of prompt A, i.e. right after
evaluating the prompt A ids.
"""
import argparse
import os
import struct
import sys

import numpy as np

N_GEN = 32
N_CTX = 512
TEXT_A = "The capital of France is"
TEXT_B = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
          "trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the "
          "capital of France?<|im_end|>\n<|im_start|>assistant\n")
# llama.cpp commit vendored by a llama-cpp-python release (from its CHANGELOG).
LLAMA_CPP_COMMIT = {"0.3.36": "ggml-org/llama.cpp@0c1e57098"}
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def top2(logits):
    i = int(np.argmax(logits))
    rest = np.delete(logits, i)
    return i, float(logits[i] - rest.max())


# --------------------------------------------------------------- llama.cpp

def run_llamacpp(model_path, f32_kv=False):
    import llama_cpp
    kv = dict(type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32) if f32_kv else {}
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=N_CTX, n_batch=512,
                          n_ubatch=512, n_threads=1, n_threads_batch=1,
                          n_gpu_layers=0, logits_all=False, seed=0,
                          flash_attn=False, verbose=False, **kv)
    assert llm.n_vocab() == 49152
    ids_a = llm.tokenize(TEXT_A.encode(), add_bos=False, special=False)
    ids_b = llm.tokenize(TEXT_B.encode(), add_bos=False, special=True)
    eog = [t for t in range(llm.n_vocab())
           if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t)]
    out = {}
    for name, ids in (("A", ids_a), ("B", ids_b)):
        llm.reset()
        llm.eval(ids)
        first_logits = None
        gen, margins = [], []
        for step in range(N_GEN):
            # With logits_all False, Llama.eval keeps no logits itself: read
            # the last position's straight from the context.
            ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
            logits = np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()
            if step == 0:
                first_logits = logits.copy()
            tok, margin = top2(logits)
            gen.append(tok)
            margins.append(margin)
            llm.eval([tok])
        text = llm.detokenize(gen, special=True).decode("utf-8", "replace")
        out[name] = dict(prompt=list(ids), greedy=gen, margins=margins,
                         text=text, first_logits=first_logits,
                         eos=[i for i, t in enumerate(gen) if t in eog])
    cp = llm.context_params
    info = dict(version=llama_cpp.__version__,
                kv="type_k %d type_v %d (ggml types; 1 = f16), flash_attn_type %d"
                   % (cp.type_k, cp.type_v, cp.flash_attn_type),
                system=llama_cpp.llama_print_system_info().decode().strip(),
                eog=eog)
    return out, info


# --------------------------------------------------------------- numpy f64

class NumpyLlama:
    """Float64 llama forward pass over dequantized GGUF weights."""

    def __init__(self, path):
        from gguf import GGUFReader
        from gguf.quants import dequantize
        r = GGUFReader(path)
        f = r.fields

        def kv(key):
            return f[key].contents()
        assert kv("general.architecture") == "llama"
        self.n_layer = kv("llama.block_count")
        self.n_embd = kv("llama.embedding_length")
        self.n_head = kv("llama.attention.head_count")
        self.n_head_kv = kv("llama.attention.head_count_kv")
        self.eps = float(kv("llama.attention.layer_norm_rms_epsilon"))
        self.base = float(kv("llama.rope.freq_base"))
        self.hd = self.n_embd // self.n_head
        self.n_rot = kv("llama.rope.dimension_count")
        assert self.n_rot == self.hd
        w = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float64)
            w[t.name] = a.reshape([int(n) for n in reversed(t.shape)])
        self.w = w
        self.out = w.get("output.weight", w["token_embd.weight"])  # tied
        i = np.arange(self.hd // 2, dtype=np.float64)
        self.inv_freq = self.base ** (-2.0 * i / self.hd)

    def rmsnorm(self, x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * g

    def rope(self, x, pos):
        # llama.cpp's LLAMA_ROPE_TYPE_NORM: rotate adjacent pairs (GGUF
        # stores Q and K already permuted for this).
        ang = pos[:, None] * self.inv_freq[None, :]     # [T, hd/2]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]              # [T, H, hd/2]
        y = np.empty_like(x)
        y[..., 0::2] = x0 * c - x1 * s
        y[..., 1::2] = x0 * s + x1 * c
        return y

    def reset(self):
        self.kc = [np.zeros((0, self.n_head_kv, self.hd))] * self.n_layer
        self.vc = [np.zeros((0, self.n_head_kv, self.hd))] * self.n_layer

    def eval(self, ids):
        """Appends ids to the cache; returns the logits of the last one."""
        w, T = self.w, len(ids)
        p0 = self.kc[0].shape[0]
        pos = np.arange(p0, p0 + T, dtype=np.float64)
        x = w["token_embd.weight"][np.array(ids)]
        g = self.n_head // self.n_head_kv
        for l in range(self.n_layer):
            b = "blk.%d." % l
            h = self.rmsnorm(x, w[b + "attn_norm.weight"])
            q = (h @ w[b + "attn_q.weight"].T).reshape(T, self.n_head, self.hd)
            k = (h @ w[b + "attn_k.weight"].T).reshape(T, self.n_head_kv, self.hd)
            v = (h @ w[b + "attn_v.weight"].T).reshape(T, self.n_head_kv, self.hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            K = self.kc[l] = np.concatenate([self.kc[l], k])
            V = self.vc[l] = np.concatenate([self.vc[l], v])
            S = K.shape[0]
            mask = np.arange(S)[None, :] > (p0 + np.arange(T))[:, None]
            att = np.empty((T, self.n_head, self.hd))
            for hh in range(self.n_head):
                kh = hh // g
                sc = (q[:, hh, :] @ K[:, kh, :].T) / np.sqrt(self.hd)
                sc[mask] = -np.inf
                sc = np.exp(sc - sc.max(axis=1, keepdims=True))
                sc /= sc.sum(axis=1, keepdims=True)
                att[:, hh, :] = sc @ V[:, kh, :]
            x = x + att.reshape(T, self.n_embd) @ w[b + "attn_output.weight"].T
            h = self.rmsnorm(x, w[b + "ffn_norm.weight"])
            gt = h @ w[b + "ffn_gate.weight"].T
            up = h @ w[b + "ffn_up.weight"].T
            x = x + (gt / (1.0 + np.exp(-gt)) * up) @ w[b + "ffn_down.weight"].T
        x = self.rmsnorm(x[-1], w["output_norm.weight"])
        return self.out @ x


def run_numpy(model_path, prompts):
    m = NumpyLlama(model_path)
    out = {}
    for name, ids in prompts.items():
        m.reset()
        logits = m.eval(ids)
        first = logits.copy()
        gen, margins = [], []
        for _ in range(N_GEN):
            tok, margin = top2(logits)
            gen.append(tok)
            margins.append(margin)
            logits = m.eval([tok])
        out[name] = dict(greedy=gen, margins=margins, first_logits=first)
    return out


# --------------------------------------------------------------- output

def escape(s):
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t") \
            .replace("\r", "\\r")


def make_f32_copy(src, dst):
    """Writes an all-F32 copy of src with llama.cpp's own quantizer and
    checks that each weight equals gguf's dequantization of src, bit for
    bit."""
    import llama_cpp
    from gguf import GGUFReader
    from gguf.quants import dequantize
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    p.allow_requantize = True
    p.nthread = 1
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), p) != 0:
        sys.exit("llama_model_quantize to F32 failed")
    a, b = GGUFReader(src), GGUFReader(dst)
    tb = {t.name: t for t in b.tensors}
    assert len(tb) == len(a.tensors)
    for t in a.tensors:
        u = tb[t.name]
        assert u.tensor_type.name == "F32", t.name
        x = dequantize(t.data, t.tensor_type).astype(np.float32)
        y = np.asarray(u.data, dtype=np.float32).reshape(x.shape)
        if not np.array_equal(x.view(np.uint32), y.view(np.uint32)):
            sys.exit("F32 copy of %s differs from gguf's dequantization" % t.name)


def leading_agree(x, y):
    n = 0
    while n < len(x) and x[n] == y[n]:
        n += 1
    return n


def ids(v):
    return " ".join(map(str, v))


def floats(v):
    return " ".join("%.4f" % m for m in v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)))
    a = ap.parse_args()

    import hashlib
    import importlib.metadata
    import tempfile
    h = hashlib.sha256()
    with open(a.model, "rb") as fh:
        for blk in iter(lambda: fh.read(1 << 20), b""):
            h.update(blk)
    if h.hexdigest() != MODEL_SHA256:
        sys.exit("model sha256 %s != %s" % (h.hexdigest(), MODEL_SHA256))

    q4, info = run_llamacpp(a.model)
    with tempfile.TemporaryDirectory() as tmp:
        f32_path = os.path.join(tmp, "smollm2-f32.gguf")
        make_f32_copy(a.model, f32_path)
        ref, info32 = run_llamacpp(f32_path, f32_kv=True)
    for k in ref:
        assert ref[k]["prompt"] == q4[k]["prompt"]
    num = run_numpy(a.model, {k: v["prompt"] for k, v in ref.items()})

    ver = importlib.metadata.version
    lines = [
        "# SmolLM2-135M-Instruct.Q4_1.gguf (sha256 %s)" % MODEL_SHA256,
        "# reference greedy continuations, made by tests/data/make-smollm2-reference.py",
        "# (its header tells the format, the settings and how it was run).",
        "# llama.cpp: llama-cpp-python %s (vendoring %s), CPU, 1 thread," % (
            info["version"], LLAMA_CPP_COMMIT.get(info["version"], "llama.cpp")),
        "#   n_ctx %d, n_batch 512, argmax of the last logits, %d steps, no stop." % (N_CTX, N_GEN),
        "#   system info: %s" % info["system"],
        "#   end-of-generation ids: %s" % ids(info["eog"]),
        "# greedy: llama.cpp on an F32 copy of the weights (exact dequantization),",
        "#   %s" % info32["kv"],
        "# greedy-f64: numpy %s float64 forward pass, weights from gguf %s dequantize" % (
            np.__version__, ver("gguf")),
        "# greedy-q4: llama.cpp on the Q4_1 file as is (information only),",
        "#   %s" % info["kv"],
    ]
    for name in ("A", "B"):
        r, n, q = ref[name], num[name], q4[name]
        d = n["first_logits"] - r["first_logits"].astype(np.float64)
        dq = q["first_logits"].astype(np.float64) - r["first_logits"]
        lines += [
            "# %s: first-step logits: |f64 - greedy| max %.2g; |q4 - greedy| max %.2g"
            % (name, np.abs(d).max(), np.abs(dq).max()),
            "%s prompt %s" % (name, ids(r["prompt"])),
            "%s greedy %s" % (name, ids(r["greedy"])),
            "%s margins %s" % (name, floats(r["margins"])),
            "%s eos %s" % (name, ids(r["eos"]) or "-"),
            "%s text %s" % (name, escape(r["text"])),
            "%s greedy-f64 %s" % (name, ids(n["greedy"])),
            "%s margins-f64 %s" % (name, floats(n["margins"])),
            "%s agree-f64 %d" % (name, leading_agree(n["greedy"], r["greedy"])),
            "%s greedy-q4 %s" % (name, ids(q["greedy"])),
            "%s margins-q4 %s" % (name, floats(q["margins"])),
            "%s eos-q4 %s" % (name, ids(q["eos"]) or "-"),
            "%s text-q4 %s" % (name, escape(q["text"])),
            "%s agree-q4 %d" % (name, leading_agree(q["greedy"], r["greedy"])),
        ]
    path = os.path.join(a.out_dir, "smollm2-reference.txt")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    print("wrote", path, file=sys.stderr)

    fl = ref["A"]["first_logits"].astype("<f4")
    assert fl.shape == (49152,)
    path = os.path.join(a.out_dir, "smollm2-ref-logits-A.bin")
    with open(path, "wb") as fh:
        fh.write(fl.tobytes())
    print("wrote", path, file=sys.stderr)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
