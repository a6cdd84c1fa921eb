#!/usr/bin/python3
"""Trains the two tiny unigram SentencePiece models of the Go tests and writes their golden ids.

Run from this directory with Debian's python3-sentencepiece (0.1.97):

    apt-get install -y python3-sentencepiece
    /usr/bin/python3 make_golden.py

Outputs (all committed; the Go test reads only these, CI needs no Python):
  nfkc.model      unigram, 300 pieces, nmt_nfkc normalization (its precompiled charsmap),
                  T5's special layout: pad=0, eos=1, unk=2, no bos.
  identity.model  unigram, 400 pieces, identity normalization, byte fallback, the default
                  layout (unk=0, bos=1, eos=2, no pad) and a user-defined symbol "<sep>".
  golden.jsonl    one JSON object a line: model, text, the ids SentencePiece encodes text to,
                  and the text it decodes those ids to.
"""
import json
import os

import sentencepiece as spm

MODELS = {
    "nfkc": dict(vocab_size=300, normalization_rule_name="nmt_nfkc",
                 pad_id=0, eos_id=1, unk_id=2, bos_id=-1),
    "identity": dict(vocab_size=400, normalization_rule_name="identity", byte_fallback=True,
                     user_defined_symbols=["<sep>"]),
}

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A tokenizer turns text into a sequence of integer ids.",
    "Unigram models score every segmentation.",
    "the the the model model",
    "",
    "   ",
    "  leading and trailing spaces  ",
    "many     spaces    between\twords\nand lines",
    "Numbers: 42, 1999, 3.14 and 1000000.",
    "Cafés and naïve résumés.",
    "Combining accents: cafe\u0301 nai\u0308ve.",
    "Full width: ＡＢＣ ｄｅｆ １２３.",
    "Ligatures: ﬁne ﬂow, circled ① ② and roman Ⅻ.",
    "Non\u00a0breaking\u2003spaces\u3000here.",
    "Zero\u200bwidth and soft\u00adhyphen.",
    "Unknown characters: ß ø þ.",
    "Emoji 😀😃 and more 👍🏽!",
    "日本語のテキスト",
    "Greek λόγος and Cyrillic слово.",
    "Control \x01 chars \x7f here.",
    "<s> and </s> and <unk> are plain text.",
    "a <sep> b<sep>c",
    "Question? Exclamation! Quotes \"like this\".",
    "don't won't can't shouldn't",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism.",
    "Tensor parallelism divides each matrix multiplication between ranks.",
    "x",
    "ALL CAPS SHOUTING TEXT",
    "mixedCASE snake_case kebab-case",
    "Tabs\tand\r\nwindows newlines.",
    "…ellipsis “curly quotes” ‘single’ — dash",
    "trailing marker ▁ and ▁▁ in the input",
]


def main():
    for name, opts in MODELS.items():
        spm.SentencePieceTrainer.train(
            input="corpus.txt", model_prefix=name, model_type="unigram",
            num_threads=1, character_coverage=1.0, **opts)
        os.remove(name + ".vocab")  # the piece list; the test reads the .model
    with open("golden.jsonl", "w", encoding="utf-8") as out:
        for name in MODELS:
            sp = spm.SentencePieceProcessor(model_file=name + ".model")
            for text in SENTENCES:
                ids = sp.encode(text)
                row = {"model": name, "text": text, "ids": ids, "decoded": sp.decode(ids)}
                out.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
