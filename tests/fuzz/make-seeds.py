#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (tests/fuzz/fuzz_*.c) into
tests/fuzz/corpus/seeds/: small GGUF files (a few KB), valid ones that reach
every part of the reader and the tokenizer loader, and broken ones that
stop at each check. Plain Python, no packages; the same run writes the same
bytes.

  python3 tests/fuzz/make-seeds.py tests/fuzz/corpus/seeds
  python3 tests/fuzz/make-seeds.py --models build/baton-mkmodel tests/fuzz/corpus/model
  python3 tests/fuzz/make-seeds.py --api tests/fuzz/corpus/api

The second form writes whole small models for fuzz_model with baton's own
writer (baton-mkmodel: 1-2 layers, n_embd 32, every 32-block type, every
architecture of the table, at most 48 KB), so that a forward pass runs on them.
The third writes fuzz_api's request bodies (*.req): a selector byte (the
endpoint and the server's context, laid out as in tests/fuzz/fuzz_api.c)
and then the JSON body: chat and completion requests with every field,
streaming, stop arrays, token-id prompts and content parts, /tokenize and
/detokenize bodies, and bodies each refused by one check.

Valid: byte-level BPE vocabularies ("gpt2") with merges, special tokens and
each pre-tokenizer family (smollm, llama3, qwen2, gpt2, none named);
SentencePiece style ("llama") with scores, byte tokens and the space
prefix; a model with tensors of several types and no tokenizer; every
metadata value type, nested arrays. Broken: truncated at each section
boundary, bad magic and versions, impossible counts, nested arrays too
deep, duplicate keys and tensor names, overlapping or out-of-file
tensors, bad alignment, unknown types, inconsistent tokenizer arrays.
Boundaries (edge-*): every validation rule of the reader at its largest
legal value and its smallest violation, the same files as check_gguf's
"boundaries" case.
"""
import os
import random
import struct
import sys

# value types (GGUF spec)
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
          F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# tensor types: id -> (block size, block bytes)
T_F32, T_F16, T_Q4_0, T_Q8_0, T_Q4_K, T_Q6_K, T_BF16 = 0, 1, 2, 8, 12, 14, 30
TTYPES = {T_F32: (1, 4), T_F16: (1, 2), T_Q4_0: (32, 18), T_Q8_0: (32, 34),
          T_Q4_K: (256, 144), T_Q6_K: (256, 210), T_BF16: (1, 2)}


def s(x):
    b = x.encode("utf-8") if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    """Encoding of a value of type t (the bytes after the type)."""
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        return out + b"".join(value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


class File:
    def __init__(self, version=3, alignment=32):
        self.version = version
        self.alignment = alignment
        self.kv = []       # (key, type, encoded value)
        self.tensors = []  # (name, ne, type, data bytes)

    def add(self, key, t, v):
        self.kv.append((key, t, value(t, v)))
        return self

    def tensor(self, name, ne, ttype, rng):
        bs, bb = TTYPES[ttype]
        n = ne[0] // bs * bb
        for d in ne[1:]:
            n *= d
        self.tensors.append((name, ne, ttype, bytes(rng.randrange(256) for _ in range(n))))
        return self

    def build(self):
        """Returns (bytes, list of section boundaries) for truncation seeds."""
        out = bytearray(struct.pack("<IIQQ", 0x46554747, self.version,
                                    len(self.tensors), len(self.kv)))
        marks = [4, 8, len(out)]
        for key, t, enc in self.kv:
            out += s(key) + struct.pack("<I", t) + enc
            marks.append(len(out))
        offsets, off = [], 0
        for name, ne, ttype, data in self.tensors:
            offsets.append(off)
            off += (len(data) + self.alignment - 1) // self.alignment * self.alignment
        for (name, ne, ttype, data), o in zip(self.tensors, offsets):
            out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
            out += struct.pack("<IQ", ttype, o)
            marks.append(len(out))
        if self.tensors:
            out += bytes(-len(out) % self.alignment)
            for (name, ne, ttype, data), o in zip(self.tensors, offsets):
                out += data + bytes(-len(data) % self.alignment)
                marks.append(len(out))
        return bytes(out), marks


def byte_alphabet():
    """GPT-2's printable stand-ins for the 256 byte values."""
    keep = list(range(0x21, 0x7f)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def bpe_file(pre, add_bos=None, text=""):
    alpha = byte_alphabet()
    tokens = [alpha[b] for b in range(256)]
    words = ["he", "Ġt", "Ġthe", "in", "Ġw", "or", "ld", "Ġworld", "ll", "Ġ1", "23",
             "Ċ", "ĠĠ", "é"]
    merges = ["h e", "Ġ t", "Ġt he", "i n", "Ġ w", "o r", "l d", "Ġw or", "Ġwor ld",
              "l l", "Ġ 1", "2 3", "Ġ Ġ", "Ã ©"]
    # merges must form tokens: add the intermediate ones
    tokens += words + ["Ġwor", "Ã©"]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>"]
    types = [1] * len(tokens) + [3, 3, 3, 4]
    tokens += specials
    f = File()
    f.add("general.architecture", STR, "llama")
    f.add("tokenizer.ggml.model", STR, "gpt2")
    if pre is not None:
        f.add("tokenizer.ggml.pre", STR, pre)
    f.add("tokenizer.ggml.tokens", ARR, (STR, tokens))
    f.add("tokenizer.ggml.token_type", ARR, (I32, types))
    f.add("tokenizer.ggml.merges", ARR, (STR, merges))
    f.add("tokenizer.ggml.bos_token_id", U32, len(tokens) - 4)
    f.add("tokenizer.ggml.eos_token_id", U32, len(tokens) - 2)
    if add_bos is not None:
        f.add("tokenizer.ggml.add_bos_token", BOOL, add_bos)
    data, marks = f.build()
    return data + text.encode("utf-8"), marks


def spm_file(add_space_prefix=True, text=""):
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    pieces = ["▁", "t", "h", "e", "▁t", "he", "▁the", "w", "o", "r", "l", "d", "▁w",
              "or", "ld", "▁wor", "▁world", "1", "2", "▁1", "é", "日"]
    tokens += pieces + ["<|im_end|>"]
    types += [1] * len(pieces) + [4]
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))] + [0.0]
    f = File()
    f.add("general.architecture", STR, "llama")
    f.add("tokenizer.ggml.model", STR, "llama")
    f.add("tokenizer.ggml.tokens", ARR, (STR, tokens))
    f.add("tokenizer.ggml.scores", ARR, (F32, scores))
    f.add("tokenizer.ggml.token_type", ARR, (I32, types))
    f.add("tokenizer.ggml.add_space_prefix", BOOL, 1 if add_space_prefix else 0)
    f.add("tokenizer.ggml.unknown_token_id", U32, 0)
    data, marks = f.build()
    return data + text.encode("utf-8"), marks


def model_file(rng):
    f = File()
    f.add("general.architecture", STR, "llama")
    f.add("general.name", STR, "fuzz-seed")
    f.add("llama.block_count", U32, 1)
    f.add("llama.embedding_length", U32, 256)
    f.add("llama.rope.freq_base", F32, 10000.0)
    f.add("tokenizer.ggml.model", STR, "none")
    f.tensor("token_embd.weight", [256, 2], T_Q8_0, rng)
    f.tensor("blk.0.attn_norm.weight", [256], T_F32, rng)
    f.tensor("blk.0.attn_q.weight", [256, 1], T_Q4_K, rng)
    f.tensor("blk.0.ffn_down.weight", [256, 1], T_Q6_K, rng)
    f.tensor("blk.0.ffn_up.weight", [32, 2, 1, 1], T_Q4_0, rng)
    f.tensor("output_norm.weight", [8], T_F16, rng)
    f.tensor("output.weight", [8, 2], T_BF16, rng)
    return f.build()


def all_types_file():
    f = File(alignment=64)
    f.add("general.alignment", U32, 64)
    for t in (U8, I8, U16, I16, U32, I32, BOOL, U64, I64):
        f.add("t.%d" % t, t, 1)
    f.add("t.f32", F32, 1.5)
    f.add("t.f64", F64, -2.25)
    f.add("t.str", STR, "x\x00y\\\n\xff")
    f.add("t.arr.u16", ARR, (U16, [1, 2, 3]))
    f.add("t.arr.bool", ARR, (BOOL, [0, 1]))
    f.add("t.arr.empty", ARR, (STR, []))
    f.add("t.arr.nested", ARR, (ARR, [(U8, [1]), (STR, ["a", "b"])]))
    nest = (U8, [7])
    for _ in range(7):
        nest = (ARR, [nest])
    f.add("t.arr.deep8", ARR, nest)
    f.tensor("one", [1], T_F32, random.Random(2))
    return f.build()


# ---- every validation rule at its boundary ----
# The rows of check_gguf's "boundaries" case (tests/check_gguf.c, bounds[]),
# byte for byte: for each rule of the reader the largest legal value and the
# smallest violation (one byte, element, count or alignment unit past it),
# as edge-<rule>-<value>.gguf.

MAGIC = 0x46554747
T_I8 = 24


def hdr(nt, nkv, ver=3, magic=MAGIC):
    return struct.pack("<IIQQ", magic, ver, nt, nkv)


def tinfo(name, ne, ttype, offset):
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + \
        struct.pack("<IQ", ttype, offset)


def pad(b, align=32):
    return b + bytes(-len(b) % align)


def one_tensor(name, ne, ttype, offset, data):
    return pad(hdr(1, 0) + tinfo(name, ne, ttype, offset)) + bytes(data)


def one_kv(key, t):
    return hdr(0, 1) + s(key) + struct.pack("<I", t)


def nested(depth):
    """depth levels of arrays around one u8 (after the outer ARRAY type)"""
    return struct.pack("<IQ", ARR, 1) * (depth - 1) + struct.pack("<IQB", U8, 1, 42)


PAIRS = [("ab", "ac"), ("a", "ab"), ("ab", "a"), ("ab", "ab")]
VSIZE = {U8: 1, I8: 1, U16: 2, I16: 2, U32: 4, I32: 4, F32: 4, BOOL: 1, U64: 8, I64: 8, F64: 8}
M64 = 1 << 64

EDGE = {
    "magic": (lambda v: struct.pack("<IIQQ", v, 3, 0, 0), [MAGIC - 1, MAGIC, MAGIC + 1]),
    "version": (lambda v: hdr(0, 0, ver=v), [1, 2, 3, 4]),
    "tensor-count": (lambda v: pad(hdr(v, 0) + tinfo("w", [1], T_F32, 0)) + bytes(4), [1, 2]),
    "tensor-count-tight": (lambda v: hdr(v, 0) + tinfo("w", [1], T_F32, 0), [1, 2]),
    "kv-count": (lambda v: hdr(0, v) + s("k") + struct.pack("<IB", U8, 1), [1, 2]),
    "kv-count-tight": (lambda v: hdr(0, v) + s("k") + struct.pack("<I", U8), [1, 2]),
    "key-length": (lambda v: hdr(0, 1) + struct.pack("<Q", v) + b"abcde", [5, 6]),
    "key-empty": (lambda v: hdr(0, 1) + s(b"kk"[:v]) + struct.pack("<IB", U8, 1), [0, 1]),
    "string-length": (lambda v: one_kv("s", STR) + struct.pack("<Q", v) + b"hello", [5, 6]),
    "array-string-length": (lambda v: one_kv("a", ARR) + struct.pack("<IQQ", STR, 1, v) + b"hello",
                            [5, 6]),
    "value-type": (lambda v: one_kv("k", v) + bytes(8), [F64, F64 + 1]),
    "array-element-type": (lambda v: one_kv("k", ARR) + struct.pack("<IQ", v, 0), [F64, F64 + 1]),
    "bool": (lambda v: one_kv("b", BOOL) + bytes([v]), [1, 2]),
    "bool-array": (lambda v: one_kv("b", ARR) + struct.pack("<IQ", BOOL, 3) + bytes([1, 0, v]),
                   [1, 2]),
    "array-nesting": (lambda v: one_kv("d", ARR) + nested(v), [8, 9]),
    "array-u8-count": (lambda v: one_kv("a", ARR) + struct.pack("<IQ", U8, v) + b"abcde", [5, 6]),
    "array-u32-count": (lambda v: one_kv("a", ARR) + struct.pack("<IQ", U32, v) + bytes(8),
                        [2, 3]),
    "array-u64-bytes": (lambda v: one_kv("a", ARR) + struct.pack("<IQ", U64, v) + bytes(16),
                        [(1 << 61) - 1, 1 << 61]),
    "array-string-count": (lambda v: one_kv("a", ARR) + struct.pack("<IQ", STR, v) + bytes(32),
                           [4, 5]),
    "array-array-count": (lambda v: one_kv("a", ARR) + struct.pack("<IQ", ARR, v) +
                          struct.pack("<IQ", U8, 0) * 3, [3, 4]),
    "name-length": (lambda v: one_tensor("n" * v, [8], T_F32, 0, 32), [0, 1, 64, 65]),
    "n-dims": (lambda v: one_tensor("w", [8, 1, 1, 1, 1][:v], T_F32, 0, 32), [0, 1, 4, 5]),
    "dim-zero": (lambda v: one_tensor("w", [8, v], T_F32, 0, 32), [0, 1]),
    "dim-range": (lambda v: one_tensor("w", [v], T_I8, 0, 32), [(1 << 63) - 1, 1 << 63]),
    "element-count": (lambda v: one_tensor("w", [2, v], T_I8, 0, 32), [(1 << 62) - 1, 1 << 62]),
    "byte-size": (lambda v: one_tensor("w", [v], T_F32, 0, 32), [(1 << 62) - 1, 1 << 62]),
    "type-id": (lambda v: one_tensor("w", [256], v, 0, 2048),
                [3, 4, 5, 6, 15, 16, 23, 24, 28, 29, 30, 31, 38, 39, 40]),
    "block-q8_0": (lambda v: one_tensor("w", [v], T_Q8_0, 0, 64), [31, 32, 33]),
    "block-q4_k": (lambda v: one_tensor("w", [v], T_Q4_K, 0, 288), [255, 256, 257]),
    "offset": (lambda v: one_tensor("w", [8], T_F32, v, 128), [31, 32, 33, 96, 128]),
    "offset-align64": (lambda v: pad(hdr(1, 1) + s("general.alignment") +
                                     struct.pack("<II", U32, 64) + tinfo("w", [8], T_F32, v),
                                     64) + bytes(128), [32, 64]),
    "file-size": (lambda v: (hdr(1, 0) + tinfo("w", [1], T_F32, 0)).ljust(v, b"\0"),
                  [63, 64, 68]),
    "tensor-end": (lambda v: (hdr(1, 0) + tinfo("w", [8], T_F32, 0)).ljust(v, b"\0"), [95, 96]),
    "start-overflow": (lambda v: one_tensor("w", [1], T_F32, v, 32), [M64 - 96, M64 - 64]),
    "end-overflow": (lambda v: one_tensor("w", [v], T_F32, M64 - 96, 32), [7, 8]),
    "overlap": (lambda v: pad(hdr(2, 0) + tinfo("a", [v], T_I8, 0) + tinfo("b", [32], T_I8, 32)) +
                bytes(64), [32, 33]),
    "duplicate-key": (lambda v: hdr(0, 2) + b"".join(s(k) + struct.pack("<II", U32, i + 1)
                                                     for i, k in enumerate(PAIRS[v])),
                      [0, 1, 2, 3]),
    "duplicate-name": (lambda v: pad(hdr(2, 0) + tinfo(PAIRS[v][0], [8], T_F32, 0) +
                                     tinfo(PAIRS[v][1], [8], T_F32, 32)) + bytes(64),
                       [0, 1, 2, 3]),
    "alignment-type": (lambda v: one_kv("general.alignment", v) +
                       (32).to_bytes(VSIZE[v], "little"), [U16, U32, I32, U64]),
    "alignment": (lambda v: hdr(0, 1) + s("general.alignment") + struct.pack("<II", U32, v),
                  [0, 1, 2, 31, 32, 33, 96, 1 << 31, (1 << 31) + (1 << 30)]),
    "alignment1-odd-offset": (lambda v: hdr(1, 1) + s("general.alignment") +
                              struct.pack("<II", U32, v) + tinfo("w", [3], T_I8, 1) + bytes(4),
                              [1, 2]),
}


def edge_seeds():
    out = {}
    for rule, (make, values) in EDGE.items():
        for v in values:
            out["edge-%s-%s.gguf" % (rule, v if v < 1 << 32 else hex(v))] = make(v)
    return out


MODELS = {
    # name: baton-mkmodel arguments after --shape tiny
    "model-q4_0.gguf": ["--type", "q4_0"],
    "model-q4_1.gguf": ["--type", "q4_1"],
    "model-q5_0.gguf": ["--type", "q5_0"],
    "model-q5_1.gguf": ["--type", "q5_1"],
    "model-q8_0-gqa.gguf": ["--type", "q8_0", "--n-head", "4", "--n-head-kv", "2"],
    "model-f16.gguf": ["--type", "f16"],
    "model-bf16.gguf": ["--type", "bf16", "--n-vocab", "8"],
    "model-q4_1-untied-2l.gguf": ["--type", "q4_1", "--n-layer", "2", "--untied"],
    # the other families of the architecture table
    "model-llama-ropefreqs.gguf": ["--type", "q8_0", "--rope-freqs", "16"],
    "model-qwen2-q8_0.gguf": ["--arch", "qwen2", "--type", "q8_0"],
    "model-qwen3-hd32.gguf": ["--arch", "qwen3", "--type", "q4_0", "--head-dim", "32"],
    "model-gemma3-2l-swa1.gguf": ["--arch", "gemma3", "--type", "q8_0", "--n-layer", "2",
                                  "--swa", "1"],
    # experts: routed rows, 3-D tensors, MXFP4, gpt-oss's sinks, biases and YaRN
    "model-qwen3moe-q8_0.gguf": ["--arch", "qwen3moe", "--type", "q8_0", "--n-expert", "4",
                                 "--n-expert-used", "2", "--n-ff-exp", "32"],
    "model-gptoss-mxfp4.gguf": ["--arch", "gpt-oss", "--type", "mxfp4", "--n-expert", "4",
                                "--n-expert-used", "2", "--n-ff-exp", "32", "--swa", "2"],
    # deepseek2: MLA (q_lora pair, and attn_q without it), a dense first layer, shared
    # experts, grouped sigmoid routing with the bias / softmax routing
    "model-deepseek2-q8_0.gguf": ["--arch", "deepseek2", "--type", "q8_0", "--n-layer", "2",
                                  "--n-head-kv", "1", "--q-lora", "16", "--kv-lora", "16",
                                  "--d-qk", "24", "--d-v", "16", "--n-rot", "8",
                                  "--n-expert", "4", "--n-expert-used", "2", "--n-ff-exp", "32",
                                  "--n-group", "2", "--n-group-used", "1"],
    "model-deepseek2-lite-mxfp4.gguf": ["--arch", "deepseek2", "--type", "mxfp4", "--n-layer",
                                        "2", "--n-head-kv", "1", "--q-lora", "0", "--kv-lora",
                                        "16", "--d-qk", "24", "--d-v", "16", "--n-rot", "8",
                                        "--n-expert", "4", "--n-expert-used", "2",
                                        "--n-ff-exp", "32", "--n-group", "1",
                                        "--n-group-used", "1", "--softmax"],
}


def write_models(mkmodel, out):
    import subprocess
    os.makedirs(out, exist_ok=True)
    total = 0
    for name, args in sorted(MODELS.items()):
        base = ["--shape", "tiny", "--n-layer", "1", "--n-embd", "32", "--n-ff", "32",
                "--n-vocab", "16", "--n-head", "2", "--n-head-kv", "1", "--n-ctx", "64",
                "--seed", "1"]
        path = os.path.join(out, name)
        subprocess.run([mkmodel] + base + args + ["-o", path], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        total += os.path.getsize(path)
    print("make-seeds: %d models, %d bytes" % (len(MODELS), total))


# fuzz_api's first byte (tests/fuzz/fuzz_api.c)
EP_CHAT, EP_COMPLETION, EP_TOKENIZE, EP_DETOKENIZE = range(4)
CHAT_NONE, CHAT_CHATML, CHAT_GEMMA, CHAT_LLAMA3 = range(4)
VOCAB_1, VOCAB_10, VOCAB_256, VOCAB_LARGE = range(4)


def api_sel(ep, chat=CHAT_CHATML, tokenizer=True, vocab=VOCAB_LARGE, system=False):
    return bytes([ep | chat << 2 | (0 if tokenizer else 0x10) | vocab << 5 |
                  (0x80 if system else 0)])


def api_seeds():
    import json
    user = [{"role": "user", "content": "Hello"}]
    convo = [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "What is 2+2?", "name": "ann"},
             {"role": "assistant", "content": "4"},
             {"role": "user", "content": "And 3+3?"}]
    chat_full = {
        "model": "baton", "messages": convo, "max_tokens": 64, "temperature": 0.7,
        "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1, "seed": 42,
        "stop": ["\n\n", "User:"], "stream": True, "stream_options": {"include_usage": True},
        "logprobs": True, "top_logprobs": 5, "n": 1, "presence_penalty": 0,
        "frequency_penalty": 0.0, "logit_bias": {}, "user": "u1", "tools": [],
        "tool_choice": "none", "functions": [], "function_call": "none",
        "parallel_tool_calls": False, "response_format": {"type": "text"},
        "return_tokens": True,
    }
    completion_full = {
        "model": "baton", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0,
        "top_p": 1, "top_k": 0, "min_p": 0, "repeat_penalty": 100, "seed": 0,
        "stop": "\n", "stream": True, "stream_options": {"include_usage": False},
        "logprobs": 3, "n": 1, "presence_penalty": 0, "frequency_penalty": 0,
        "logit_bias": {}, "user": "u2", "echo": False, "suffix": "", "best_of": 1,
        "return_tokens": False,
    }
    j = lambda v, **kw: json.dumps(v, **kw).encode("utf-8")
    chat = lambda body, **kw: api_sel(EP_CHAT, **kw) + body
    cmpl = lambda body, **kw: api_sel(EP_COMPLETION, **kw) + body
    seeds = {
        # accepted
        "chat-min.req": chat(j({"messages": user})),
        "chat-full-chatml.req": chat(j(chat_full)),
        "chat-full-gemma-system.req": chat(j(chat_full), chat=CHAT_GEMMA, system=True),
        "chat-llama3-parts.req": chat(j({"messages": [
            {"role": "developer", "content": [{"type": "text", "text": "  Be kind. "}]},
            {"role": "user", "content": [{"type": "text", "text": "Hi, "},
                                         {"type": "text", "text": "there\t\n"}]}],
            "max_completion_tokens": 8, "stop": "x"}), chat=CHAT_LLAMA3),
        "chat-gemma-system-only.req": chat(j({"messages": [
            {"role": "system", "content": "Only a system message"}]}), chat=CHAT_GEMMA),
        "chat-chatml-default-system.req": chat(j({"messages": user, "stream": True,
                                                  "stream_options": {}}), system=True),
        "chat-unicode.req": chat(b'{"messages": [{"role": "user", "content": '
                                 b'"caf\u00e9 \ud83d\ude42 \xe6\x97\xa5\xe6\x9c\xac"}], '
                                 b'"stop": ["\xc3\xa9", "\u65e5"]}'),
        "chat-nulls.req": chat(b'{"messages": [{"role": "user", "content": "x"}],'
                               b' "model": null, "temperature": null, "stop": null, '
                               b'"seed": null, "stream_options": null, "top_logprobs": null}'),
        "chat-tiny-numbers.req": chat(b'{"messages": [{"role": "user", "content": "x"}], '
                                      b'"temperature": 1e-30, "top_p": 1e-30, "min_p": 1e-30, '
                                      b'"repeat_penalty": 1e-30, "top_k": 16777216}'),
        "completion-full.req": cmpl(j(completion_full)),
        "completion-ids.req": cmpl(j({"prompt": [1, 2, 3, 255], "max_tokens": 1}),
                                   vocab=VOCAB_256, tokenizer=False),
        "completion-one-string.req": cmpl(j({"prompt": ["Hello"], "logprobs": 0})),
        "completion-stop16.req": cmpl(j({"prompt": "a", "stop": ["s%d" % i for i in range(16)],
                                         "seed": (1 << 63) - 1})),
        "tokenize-full.req": api_sel(EP_TOKENIZE) + j({
            "content": "Hello <|im_start|>", "add_special": True, "parse_special": False,
            "with_pieces": True}),
        "detokenize-ids.req": api_sel(EP_DETOKENIZE, vocab=VOCAB_10) + j({"tokens": [0, 1, 9]}),
        "detokenize-empty.req": api_sel(EP_DETOKENIZE) + j({"tokens": []}),
        # refused, each by one check
        "bad-chat-no-template.req": chat(j({"messages": user}), chat=CHAT_NONE),
        "bad-chat-no-tokenizer.req": chat(j({"messages": user}), tokenizer=False),
        "bad-chat-role.req": chat(j({"messages": [{"role": "tool", "content": "x"}]})),
        "bad-chat-part.req": chat(j({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "x"}}]}]})),
        "bad-chat-top-logprobs.req": chat(j({"messages": user, "top_logprobs": 2})),
        "bad-chat-stream-options.req": chat(j({"messages": user,
                                               "stream_options": {"include_usage": True}})),
        "bad-chat-n2.req": chat(j({"messages": user, "n": 2})),
        "bad-chat-unknown.req": chat(j({"messages": user, "foo": 1})),
        "bad-chat-unknown-utf8.req": chat(j({"messages": user, "stream_options":
                                             {"\u00e9" * 36: 1}, "stream": True},
                                            ensure_ascii=False)),
        "bad-chat-escape.req": chat(b'{"messages": [{"role": "user", "content": "caf\\q"}]}'),
        "bad-chat-temperature.req": chat(j({"messages": user, "temperature": 2.5})),
        "bad-chat-stop17.req": chat(j({"messages": user, "stop": ["s"] * 17})),
        "bad-chat-stop-empty.req": chat(j({"messages": user, "stop": [""]})),
        "bad-chat-duplicate.req": chat(b'{"messages": [], "messages": []}'),
        "bad-chat-truncated.req": chat(j({"messages": user})[:-7]),
        "bad-chat-array.req": chat(b'[{"role": "user", "content": "x"}]'),
        "bad-chat-nul.req": chat(b'{"messages": [{"role": "user", "content": "a\u0000b"}]}'),
        "bad-completion-id-range.req": cmpl(j({"prompt": [1, 10]}), vocab=VOCAB_10),
        "bad-completion-text-no-tokenizer.req": cmpl(j({"prompt": "x"}), tokenizer=False),
        "bad-completion-two-prompts.req": cmpl(j({"prompt": ["a", "b"]})),
        "bad-tokenize-content.req": api_sel(EP_TOKENIZE) + j({"content": 1}),
        "bad-detokenize-negative.req": api_sel(EP_DETOKENIZE) + j({"tokens": [-1]}),
    }
    return seeds


def write_api(out):
    os.makedirs(out, exist_ok=True)
    seeds = api_seeds()
    for name in os.listdir(out):
        if name.endswith(".req") and name not in seeds:
            os.remove(os.path.join(out, name))
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)
    print("make-seeds: %d request bodies, %d bytes, largest %d" %
          (len(seeds), sum(map(len, seeds.values())), max(map(len, seeds.values()))))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--models":
        write_models(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--api":
        write_api(sys.argv[2])
        return
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus/seeds"
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1)
    seeds = {}

    bpe, bpe_marks = bpe_file("smollm", text="Hello world 123")
    seeds["bpe-smollm.gguf"] = bpe
    seeds["bpe-llama3.gguf"] = bpe_file("llama3", text=" I'LL go  \n\n 12345")[0]
    seeds["bpe-qwen2.gguf"] = bpe_file("qwen2", add_bos=1, text="caf\u00e9 \u65e5\u672c")[0]
    seeds["bpe-gpt2.gguf"] = bpe_file("gpt2", text="<|im_start|>user\nhi<|im_end|>")[0]
    seeds["bpe-nopre.gguf"] = bpe_file(None, text="$3.50+x")[0]
    seeds["bpe-unknown-pre.gguf"] = bpe_file("no-such-pre")[0]
    spm, spm_marks = spm_file(text="the world 12")
    seeds["spm.gguf"] = spm
    seeds["spm-noprefix.gguf"] = spm_file(False, text="  the\t\u65e5\u00e9!")[0]
    model, model_marks = model_file(rng)
    seeds["model-tensors.gguf"] = model
    seeds["all-value-types.gguf"] = all_types_file()[0]
    seeds["empty-v2.gguf"] = struct.pack("<IIQQ", 0x46554747, 2, 0, 0)

    # truncated at section boundaries (and one byte past each)
    for name, (data, marks) in (("bpe", (bpe, bpe_marks)), ("spm", (spm, spm_marks)),
                                ("model", (model, model_marks))):
        first = marks[:3] if name == "bpe" else []
        picks = sorted(set(first + [marks[len(marks) // 2], marks[-2]]))
        for m in picks:
            if 0 < m < len(data):
                seeds["trunc-%s-%d.gguf" % (name, m)] = data[:m]
                seeds["trunc-%s-%d.gguf" % (name, m + 1)] = data[:m + 1]

    hdr = lambda nt, nkv, ver=3, magic=0x46554747: struct.pack("<IIQQ", magic, ver, nt, nkv)
    seeds["bad-magic.gguf"] = hdr(0, 0, magic=0x46554748)
    seeds["bad-version1.gguf"] = hdr(0, 0, ver=1)
    seeds["bad-version-bigendian.gguf"] = hdr(0, 0, ver=0x03000000)
    seeds["bad-huge-tensor-count.gguf"] = hdr(1 << 62, 0) + bytes(64)
    seeds["bad-huge-kv-count.gguf"] = hdr(0, (1 << 64) - 1) + bytes(64)

    def kvfile(*kvs, tensors=(), alignment=32):
        f = File(alignment=alignment)
        for k in kvs:
            f.add(*k)
        for t in tensors:
            f.tensor(*t, rng)
        return f.build()[0]

    nest = (U8, [1])
    for _ in range(8):
        nest = (ARR, [nest])
    seeds["bad-nested-9.gguf"] = kvfile(("a", ARR, nest))
    seeds["bad-dup-key.gguf"] = kvfile(("k", U32, 1), ("k", U32, 2))
    raw = bytearray(kvfile(("b", BOOL, 1)))
    raw[-1] = 2
    seeds["bad-bool.gguf"] = bytes(raw)
    seeds["bad-align-type.gguf"] = kvfile(("general.alignment", U64, 32))
    seeds["bad-align-npow2.gguf"] = kvfile(("general.alignment", U32, 48))
    seeds["bad-value-type.gguf"] = hdr(0, 1) + s("k") + struct.pack("<I", 13) + bytes(8)
    seeds["bad-array-count.gguf"] = hdr(0, 1) + s("k") + struct.pack("<IIQ", ARR, STR, 1 << 60)
    seeds["bad-string-len.gguf"] = hdr(0, 1) + s("k") + struct.pack("<IQ", STR, 1 << 63) + b"abc"

    two = [("a", [32], T_F32), ("b", [32], T_F32)]
    good = bytearray(kvfile(tensors=two))
    seeds["tensors-two.gguf"] = bytes(good)
    # tensor infos start at 24; each: name (8+1), n_dims 4, ne 8, type 4, offset 8
    t1 = 24 + 9 + 4 + 8 + 4 + 8
    dup = bytearray(good)
    dup[t1 + 8] = ord("a")
    seeds["bad-dup-tensor.gguf"] = bytes(dup)
    ov = bytearray(good)
    struct.pack_into("<Q", ov, t1 + 9 + 4 + 8 + 4, 1024)
    seeds["bad-tensor-past-end.gguf"] = bytes(ov)
    struct.pack_into("<Q", ov, t1 + 9 + 4 + 8 + 4, 96)
    seeds["bad-tensor-overlap.gguf"] = bytes(good[:t1 + 9 + 4 + 8 + 4]) + struct.pack("<Q", 0) + bytes(good[t1 + 33:])
    un = bytearray(good)
    struct.pack_into("<Q", un, t1 + 9 + 4 + 8 + 4, 8)
    seeds["bad-tensor-unaligned.gguf"] = bytes(un)
    ty = bytearray(good)
    struct.pack_into("<I", ty, 24 + 9 + 4 + 8, 99)
    seeds["bad-tensor-type.gguf"] = bytes(ty)
    nd = bytearray(good)
    struct.pack_into("<I", nd, 24 + 9, 5)
    seeds["bad-tensor-ndims.gguf"] = bytes(nd)
    ne0 = bytearray(good)
    struct.pack_into("<Q", ne0, 24 + 9 + 4, 0)
    seeds["bad-tensor-ne0.gguf"] = bytes(ne0)
    seeds["bad-tensor-block.gguf"] = kvfile(tensors=[("q", [33], T_F32)])[:24] + \
        s("q") + struct.pack("<IQIQ", 1, 33, T_Q8_0, 0) + bytes(64)

    seeds.update(edge_seeds())

    # tokenizer metadata that loads as a GGUF but not as a tokenizer
    toks = (STR, ["a", "b", "ab"])
    seeds["tok-bad-merge.gguf"] = kvfile(("tokenizer.ggml.model", STR, "gpt2"),
                                         ("tokenizer.ggml.tokens", ARR, toks),
                                         ("tokenizer.ggml.merges", ARR, (STR, ["a c"])))
    seeds["tok-merge-no-space.gguf"] = kvfile(("tokenizer.ggml.model", STR, "gpt2"),
                                              ("tokenizer.ggml.tokens", ARR, toks),
                                              ("tokenizer.ggml.merges", ARR, (STR, ["ab"])))
    seeds["tok-types-short.gguf"] = kvfile(("tokenizer.ggml.model", STR, "llama"),
                                           ("tokenizer.ggml.tokens", ARR, toks),
                                           ("tokenizer.ggml.token_type", ARR, (I32, [1, 1])))
    seeds["tok-scores-type.gguf"] = kvfile(("tokenizer.ggml.model", STR, "llama"),
                                           ("tokenizer.ggml.tokens", ARR, toks),
                                           ("tokenizer.ggml.scores", ARR, (F64, [0.0, 1.0, 2.0])))
    seeds["tok-special-range.gguf"] = kvfile(("tokenizer.ggml.model", STR, "llama"),
                                             ("tokenizer.ggml.tokens", ARR, toks),
                                             ("tokenizer.ggml.bos_token_id", U32, 7),
                                             ("tokenizer.ggml.eos_token_id", I32, -1))
    seeds["tok-unknown-model.gguf"] = kvfile(("tokenizer.ggml.model", STR, "bert"),
                                             ("tokenizer.ggml.tokens", ARR, toks))
    seeds["tok-model-type.gguf"] = kvfile(("tokenizer.ggml.model", U32, 2))
    seeds["tok-no-tokens.gguf"] = kvfile(("tokenizer.ggml.model", STR, "gpt2"))

    for name in os.listdir(out):
        if name.endswith(".gguf") and name not in seeds:
            os.remove(os.path.join(out, name))
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)
    print("make-seeds: %d files, %d bytes, largest %d" %
          (len(seeds), sum(map(len, seeds.values())), max(map(len, seeds.values()))))


if __name__ == "__main__":
    main()
