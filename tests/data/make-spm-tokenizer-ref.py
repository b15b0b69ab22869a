#!/usr/bin/env python3
"""Writes the SentencePiece-style (tokenizer.ggml.model = "llama") test data
of tests/check_tokenizer.c:

  tests/data/spm-tiny.gguf           a vocabulary-only GGUF (no tensors)
  tests/data/spm-tiny-tokenizer.txt  reference ids for test strings

A small SentencePiece BPE model (model_type=bpe: piece scores are merge
priorities, the semantics llama.cpp's SPM tokenizer implements) is trained
here on the paragraphs below with byte_fallback, identity normalization and
no whitespace cleanup, so the only transformations are the ones llama.cpp
applies too (spaces -> U+2581, a leading U+2581). Its pieces, scores and
types are written as tokenizer.ggml.* metadata with gguf-py, the way
llama.cpp's convert script does; the reference ids are sentencepiece's own
encode() of each string. Strings use characters outside the training text
(emoji, CJK, accents, newlines, tabs) to exercise the <0xXX> byte fallback.

Made with: Python 3.11.7, sentencepiece 0.2.3, gguf 0.19.0
(pip install sentencepiece==0.2.3 gguf==0.19.0):

  python3 tests/data/make-spm-tokenizer-ref.py tests/data

Line format of the .txt: TEXT <TAB> IDS, TEXT escaped as in
smollm2-tokenizer.txt (\\\\, \\n, \\r, \\t, \\xHH), IDS space-separated.
"""
import io
import os
import sys

import gguf
import sentencepiece as spm

TRAINING = """\
The pipeline splits a model into stages, and every stage owns a block of layers.
A prompt is cut into micro-batches; stage one works on the second batch while
stage two works on the first. Activations travel from rank to rank with
nonblocking sends and receives, and the last stage samples the next token.
Tokenizers turn text into numbers: a vocabulary of pieces, each with a score,
and a rule for merging adjacent pieces until no better merge is left.
Byte pair encoding starts from characters and merges the most frequent pairs.
SentencePiece treats the input as a raw stream and marks spaces with a special
character, so that decoding can restore the original text exactly.
The quick brown fox jumps over the lazy dog. Pack my box with five dozen
liquor jugs. How vexingly quick daft zebras jump! Sphinx of black quartz,
judge my vow. 0123456789 numbers, dates like 2024-05-06, and prices of $3.50.
Questions? Answers! Lists: apples, pears, plums; (parentheses) and [brackets].
Transformers attend to every previous token; the cache keeps keys and values.
Rotary embeddings rotate queries and keys by position before attention.
"""

CASES = [
    "Hello world",
    "The pipeline splits a model into stages.",
    "  two leading spaces and  double  spaces",
    "trailing space ",
    "numbers 0123456789 and 3.14159",
    "Tokenizers merge pieces; SentencePiece marks spaces.",
    "line one\nline two\n",
    "tab\tseparated",
    "Z\u00fcrich caf\u00e9 na\u00efve",
    "\u4f60\u597d\uff0c\u4e16\u754c",
    "emoji \U0001f44b\U0001f30d\U0001f389",
    "How vexingly quick daft zebras jump!",
    "unseenwordsxyzzyplugh",
    "",
    " ",
    "quartz,judge;vow:(x)[y]",
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
    outdir = sys.argv[1]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING.splitlines()), model_writer=model,
        model_type="bpe", vocab_size=640, byte_fallback=True, character_coverage=1.0,
        normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, split_digits=False, num_threads=1,
        minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())

    pieces, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        pieces.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.is_control(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.is_unused(i):
            types.append(gguf.TokenType.UNUSED)
        elif sp.is_byte(i):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)

    w = gguf.GGUFWriter(os.path.join(outdir, "spm-tiny.gguf"), arch="llama")
    w.add_name("spm-tiny (tests/data/make-spm-tokenizer-ref.py)")
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    with open(os.path.join(outdir, "spm-tiny-tokenizer.txt"), "w", encoding="utf-8") as out:
        out.write("# Reference ids for tests/check_tokenizer.c (vocabulary spm-tiny.gguf); made by\n")
        out.write(f"# tests/data/make-spm-tokenizer-ref.py with sentencepiece {spm.__version__},\n")
        out.write(f"# Python {sys.version.split()[0]}. TEXT\\tIDS (encode without BOS/EOS)\n")
        for text in CASES:
            ids = sp.encode(text)
            assert sp.decode(ids) == text, text
            out.write(f"{escape(text)}\t{' '.join(map(str, ids))}\n")


if __name__ == "__main__":
    main()
