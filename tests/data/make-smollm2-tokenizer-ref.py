#!/usr/bin/env python3
"""Writes tests/data/smollm2-tokenizer.txt, the reference token ids that
tests/check_tokenizer.c compares baton's BPE tokenizer against.

The ids come from Hugging Face `tokenizers` (Rust), an implementation
independent of baton's, built from the vocabulary and merges inside the
SmolLM2 GGUF (read with gguf-py) -- not from baton and not from llama.cpp.
Each pre-tokenizer baton supports is rebuilt with tokenizers' own pieces:

  smollm   Digits(individual_digits=True) + ByteLevel(add_prefix_space=False),
           exactly the pre-tokenizer of SmolLM2's tokenizer.json
  gpt2     ByteLevel(add_prefix_space=False) (its built-in GPT-2 regex)
  llama3   Split(llama3 regex, isolated) + ByteLevel(use_regex=False), and
           BPE(ignore_merges=True) as llama.cpp sets for llama3
  qwen2    as llama3 with \\p{N} one digit at a time, merges not ignored
  default  llama.cpp's default chain as four isolated Splits + ByteLevel

Mode "special": the GGUF's control tokens are added as special tokens, so
their text in the input becomes one id (baton: parse_special = true).
Mode "plain": no added tokens (baton: parse_special = false).

Made with: Python 3.11.7, tokenizers 0.23.3, gguf 0.19.0 (pip install
tokenizers==0.23.3 gguf==0.19.0), from SmolLM2-135M-Instruct.Q4_1.gguf
(sha256 b179c952...db53, see scripts/fetch-smollm2):

  python3 tests/data/make-smollm2-tokenizer-ref.py MODEL.gguf > tests/data/smollm2-tokenizer.txt

Line format: PRE <TAB> MODE <TAB> TEXT <TAB> IDS, TEXT escaped (\\\\, \\n, \\r,
\\t, \\xHH for other control bytes; everything else as UTF-8), IDS space-separated.
"""
import sys

import gguf
import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

CASES = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "!!!???...",
    "12345 3.14159",
    "   leading and trailing spaces   ",
    "tabs\tand\t\ttabs",
    "\n\n\n",
    "line one\nline two\r\nline three\n\n",
    "don't I'll we've they're she's I'm he'd",
    "DON'T I'LL WE'VE THEY'RE",
    "caf\u00e9 na\u00efve \u00c6r\u00f8sk\u00f8bing",
    "\u4f60\u597d\uff0c\u4e16\u754c",
    "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\uff01\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a",
    "\U0001f44b\U0001f30d\U0001f389",
    "Mixed: English, \u0440\u0443\u0441\u0441\u043a\u0438\u0439, \u0627\u0644\u0639\u0631\u0628\u064a\u0629, "
    "\u0939\u093f\u0928\u094d\u0926\u0940, \ud55c\uad6d\uc5b4 and 123 numbers",
    "def f(x):\n    return x**2\n",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "end<|endoftext|>start <repo_name>x",
    "Pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious",
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2#frag",
    "user@example.com: 2024-01-02T03:04:05Z",
    "",
    " ",
    "a  b   c    d",
    "  \t \n  x",
    "1,000,000.00 and \u0661\u0662\u0663 and \u00bd \u2153 \u216b",
    "$100 + 20% = <tag> ^~| 'quoted' \"double\"",
    "x\u00a0y\u3000z\u2003w",
    "thumbs \U0001f44d\U0001f3fd family \U0001f468\u200d\U0001f469\u200d\U0001f467",
    "e\u0301 a\u0308 combining",
    "    indented\n\tcode();\n",
    "123456789012",
]

GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = LLAMA3_RE.replace(r"\p{N}{1,3}", r"\p{N}")


def split(regex):
    return pre_tokenizers.Split(Regex(regex), behavior="isolated")


def byte_level(use_regex):
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)


def pre_tokenizer(pre):
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        byte_level(True)])
    if pre == "gpt2":
        return byte_level(True)
    if pre == "llama3":
        return pre_tokenizers.Sequence([split(LLAMA3_RE), byte_level(False)])
    if pre == "qwen2":
        return pre_tokenizers.Sequence([split(QWEN2_RE), byte_level(False)])
    if pre == "default":
        return pre_tokenizers.Sequence([split(r"[\p{P}\$\+<=>\^~\|]+"), split(GPT2_RE),
                                        split(r"\p{N}+"), split(r"[0-9][0-9][0-9]"),
                                        byte_level(False)])
    raise ValueError(pre)


def build(pre, vocab, merges, control):
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=(pre == "llama3")))
    tk.pre_tokenizer = pre_tokenizer(pre)
    tk.decoder = decoders.ByteLevel()
    if control:
        tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    return tk


def escape(s):
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\x%02X" % ord(ch))
        else:
            out.append(ch)
    return "".join(out)


def main():
    reader = gguf.GGUFReader(sys.argv[1])
    f = reader.fields
    tokens = f["tokenizer.ggml.tokens"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in f["tokenizer.ggml.merges"].contents()]
    vocab = {t: i for i, t in enumerate(tokens)}
    control = [t for t, ty in zip(tokens, types) if ty == 3]
    out = sys.stdout
    out.write("# Reference ids for tests/check_tokenizer.c; made by\n")
    out.write("# tests/data/make-smollm2-tokenizer-ref.py (see its header) with\n")
    out.write(f"# tokenizers {tokenizers.__version__}, gguf-py, Python {sys.version.split()[0]},\n")
    out.write("# from SmolLM2-135M-Instruct.Q4_1.gguf. PRE\\tMODE\\tTEXT\\tIDS\n")
    for pre in ["smollm", "gpt2", "llama3", "qwen2", "default"]:
        special = build(pre, vocab, merges, control)
        plain = build(pre, vocab, merges, [])
        for text in CASES:
            modes = [("special", special)]
            if "<" in text:
                modes.append(("plain", plain))
            for mode, tk in modes:
                ids = tk.encode(text, add_special_tokens=False).ids
                assert tk.decode(ids, skip_special_tokens=False) == text, (pre, mode, text)
                out.write(f"{pre}\t{mode}\t{escape(text)}\t{' '.join(map(str, ids))}\n")


if __name__ == "__main__":
    main()
