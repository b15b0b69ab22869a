#!/usr/bin/env python3
"""Writes tests/data/gemma3-tokenizer.txt: reference ids for Gemma 3's real
vocabulary (262144 tokens), checked by `check_tokenizer --gemma3`.

The reference is sentencepiece's own BPE encoder, not llama.cpp's algorithm:
a sentencepiece ModelProto is built from the GGUF's tokenizer.ggml.tokens,
scores and token_type (gguf-py; GGUF and sentencepiece number the piece
types alike: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte) with
model_type BPE, byte_fallback, and a normalizer that only escapes spaces to
U+2581 (identity rule, no dummy prefix, no whitespace cleanup): the settings
Gemma 3's tokenizer.model has and that tokenizer.ggml.add_space_prefix =
false states. User-defined pieces (whitespace runs, HTML tags, ...) are
matched by sentencepiece itself (the pieces that are runs of ASCII spaces
are spelled with U+2581 in the proto, because sentencepiece matches
user-defined pieces after escaping spaces; llama.cpp and HF tokenizers match
them in the raw text, which is the same cut). sentencepiece never matches
control pieces in text, so for MODE "special" (llama.cpp's parse_special)
the text is first cut at control-token texts, longest first, and the pieces
between are encoded one by one. Every case is also decoded back by sentencepiece.

Made with: Python 3.11.7, sentencepiece 0.2.3, gguf 0.19.0, protobuf 7.36.2,
in a throw-away venv
(pip install sentencepiece==0.2.3 gguf==0.19.0 protobuf==7.36.2):

  python3 tests/data/make-gemma3-tokenizer-ref.py \\
      models/gemma-3-270m-q4_k_m.gguf tests/data/gemma3-tokenizer.txt

Line format: MODE <TAB> TEXT <TAB> IDS; MODE "special" or "plain"; TEXT
escaped as in smollm2-tokenizer.txt (\\\\, \\n, \\r, \\t, \\xHH); IDS
space-separated, without BOS.
"""
import re
import sys

import gguf
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

CASES = [
    ("special", "The capital of France is"),                 # golden prompt 1
    ("special", "Here is a short poem about the sea:\n"),    # golden prompt 2
    ("special", "Hello world"),
    ("special", " leading space, then  two,   three and    four"),
    ("special", "a  b   c    d     e      f                                        g"),
    ("special", "trailing spaces   "),
    ("special", "tabs\tand\t\ttabs\t\t\t\tend\t"),
    ("special", "line one\nline two\r\nline three\n\n\nfour\n\n\n\n\n\n\n\n"),
    ("special", "mixed \t\n \n\t  x\n \t \n"),
    ("special", "\n"),
    ("special", "def fibonacci(n):\n    if n < 2:\n        return n\n"
                "    return fibonacci(n - 1) + fibonacci(n - 2)\n"),
    ("special", "int main(void) {\n\tfor (int i = 0; i < 10; i++) {\n\t\tprintf(\"%d\\n\", i);"
                "\n\t}\n\treturn 0;\n}\n"),
    ("special", "caf\u00e9 na\u00efve \u00c6r\u00f8sk\u00f8bing Z\u00fcrich \u0151\u0171 "
                "cr\u00e8me br\u00fbl\u00e9e"),
    ("special", "\u4f60\u597d\uff0c\u4e16\u754c\u3002\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002"),
    ("special", "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\uff01"
                "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a"),
    ("special", "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8"),
    ("special", "\U0001f44b\U0001f30d\U0001f389 \U0001f916 \U0001f980\U0001fae0\U0001fabf"
                " \u2764\ufe0f \U0001f468\u200d\U0001f469\u200d\U0001f467"),
    ("special", "Mixed: English, \u0440\u0443\u0441\u0441\u043a\u0438\u0439, "
                "\u0627\u0644\u0639\u0631\u0628\u064a\u0629, \u0939\u093f\u0928\u094d\u0926"
                "\u0940 and 123 numbers"),
    ("special", "12345 3.14159 1,000,000 2024-05-06T07:08:09Z"),
    ("special", "https://huggingface.co/google/gemma-3-270m?x=1&y=2#frag"),
    ("special", "control bytes a\x01b\x7fc and private use \ue000\U000f0000"),
    ("special", "reply</s>next </s>"),
    ("special", "<b>bold</b> <table><tr><td>x</td></tr></table> <h1>T</h1>"),
    ("special", "[multimodal]<start_of_image><end_of_image>"),
    ("special", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"),
    ("plain", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"),
    ("special", "<start_of_turn>user\nYou are terse.\n\nWhat is 2+2?<end_of_turn>\n"
                "<start_of_turn>model\n4<end_of_turn>\n<start_of_turn>user\nAnd 3+3?"
                "<end_of_turn>\n<start_of_turn>model\n"),
    ("special", "<bos>text<eos> <unused0><mask><pad>"),
    ("plain", "<bos>text<eos> <unused0><mask>"),
    ("special", "Pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilistic"),
    ("special", "x = {'a': [1, 2], \"b\": None}  # comment\n\n\nclass A:\n  pass"),
    ("special", ""),
    ("special", " "),
    ("special", "  "),
]


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
    src, dst = sys.argv[1:3]
    r = gguf.GGUFReader(src)
    tf = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(tf.parts[i]).decode("utf-8") for i in tf.data]
    sf, yf = r.fields["tokenizer.ggml.scores"], r.fields["tokenizer.ggml.token_type"]
    scores = [float(sf.parts[i][0]) for i in sf.data]
    types = [int(yf.parts[i][0]) for i in yf.data]
    assert len(tokens) == len(scores) == len(types) == 262144

    m = pb.ModelProto()
    for text, score, ty in zip(tokens, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = text, score, ty
        if ty == 4 and text.strip(" ") == "":
            # sentencepiece matches user-defined pieces in the text after
            # it escaped the spaces, so a piece of ASCII spaces would never
            # match; spell it as the escaped text it is meant to match.
            p.piece = "\u2581" * len(text)
    ts = m.trainer_spec
    ts.model_type = pb.TrainerSpec.BPE
    ts.vocab_size = len(tokens)
    ts.byte_fallback = True
    ts.unk_id, ts.bos_id, ts.eos_id, ts.pad_id = 3, 2, 1, 0
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = False
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())

    control = sorted((t for t, ty in zip(tokens, types) if ty == 3 and t),
                     key=lambda t: (-len(t), t))
    cut = re.compile("(" + "|".join(map(re.escape, control)) + ")")
    ids_of = {t: i for i, t in enumerate(tokens) if types[i] == 3}

    with open(dst, "w", encoding="utf-8") as out:
        out.write("# Reference ids for check_tokenizer --gemma3 (Gemma 3's vocabulary, from\n")
        out.write("# gemma-3-270m-q4_k_m.gguf); made by tests/data/make-gemma3-tokenizer-ref.py\n")
        out.write(f"# (see its header) with sentencepiece {spm.__version__}, gguf-py, Python "
                  f"{sys.version.split()[0]}.\n# MODE\\tTEXT\\tIDS (no BOS)\n")
        for mode, text in CASES:
            ids = []
            parts = cut.split(text) if mode == "special" else [text]
            for k, part in enumerate(parts):
                if mode == "special" and k % 2 == 1:
                    ids.append(ids_of[part])
                elif part:
                    ids += sp.encode(part)
            plain_ids = [i for i in ids if not sp.is_control(i)]
            dec = sp.decode(plain_ids)
            want = cut.sub("", text) if mode == "special" else text
            assert dec == want, (text, dec)
            out.write(f"{mode}\t{escape(text)}\t{' '.join(map(str, ids))}\n")


if __name__ == "__main__":
    main()
