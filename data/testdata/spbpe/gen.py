#!/usr/bin/python3
"""Trains the small SentencePiece BPE models of the Go tests and writes their golden ids.

Run from this directory with Debian's python3-sentencepiece (0.1.97):

    apt-get install -y python3-sentencepiece
    /usr/bin/python3 gen.py

Inputs: train.txt (the training text), custom_rules.tsv (custom.model's normalization rules,
"source code points<TAB>target code points", hexadecimal).

Outputs (all committed; the Go tests read only these, CI needs no Python):
  llama.model   BPE, 1000 pieces, Llama 2's settings: identity normalization, dummy prefix,
                extra whitespace kept, split_digits, allow_whitespace_only_pieces,
                byte_fallback; unk=0, bos=1, eos=2, no pad.
  custom.model  BPE, 800 pieces, custom_rules.tsv compiled into its charsmap, extra
                whitespace removed, byte_fallback, user-defined "<sep>" and "[MASK]",
                control "<ctrl>"; pad=0, unk=1, bos=2, eos=3.
  suffix.model  BPE, 600 pieces, no byte fallback (unknown characters are <unk>), whitespace
                as a suffix, no dummy prefix, pieces may span whitespace
                (split_by_whitespace=false), character_coverage 0.98.
  unused.model  suffix.model after set_vocabulary(): a third of its pieces UNUSED (single
                characters stay normal), so encoding re-segments them into their parts.
                (set_vocabulary would make a byte-fallback model's <0xXX> pieces unused,
                which SentencePiece then refuses to load.)
  golden.json   {"models": {name: {vocab_size, bos, eos, pad, unk}},
                 "cases": [{model, text, ids, decoded}]}: the ids SentencePiece encodes each
                test text to and the text it decodes those ids to.
"""
import json
import os

import sentencepiece as spm

COMMON = dict(input="train.txt", model_type="bpe", minloglevel=2, num_threads=1)

MODELS = {
    "llama": dict(vocab_size=1000, normalization_rule_name="identity", add_dummy_prefix=True,
                  remove_extra_whitespaces=False, split_digits=True,
                  allow_whitespace_only_pieces=True, byte_fallback=True,
                  unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=0.9995),
    "custom": dict(vocab_size=800, normalization_rule_tsv="custom_rules.tsv", byte_fallback=True,
                   user_defined_symbols=["<sep>", "[MASK]"], control_symbols=["<ctrl>"],
                   pad_id=0, unk_id=1, bos_id=2, eos_id=3, character_coverage=0.9995),
    "suffix": dict(vocab_size=600, normalization_rule_name="identity", add_dummy_prefix=False,
                   remove_extra_whitespaces=False, treat_whitespace_as_suffix=True,
                   split_by_whitespace=False, character_coverage=0.98),
}

# Test texts: none is a line of train.txt. Characters absent from train.txt (rare CJK, other
# emoji, Devanagari ligatures, Ethiopic, ...) make byte fallback (or <unk>) happen.
TEXTS = [
    "Hello world",
    "hello world",
    " Hello world",
    "Hello  world",
    "Hello world ",
    "   ",
    " ",
    "",
    "a",
    "\t",
    "\n",
    "Hello\nworld\n\nagain",
    "tabs\tand\t\ttabs",
    "The tokenizer merges pairs of pieces by score.",
    "Preprocessing 1234567890 tokens at 3.14159 GB/s costs $0.01.",
    "unbelievable tokenization of antidisestablishmentarianism",
    "def f(x):\n    return x * 2  # comment\n",
    "if err != nil {\n\treturn fmt.Errorf(\"read %s: %w\", name, err)\n}",
    "for (size_t i = 0; i < v.size(); ++i) v[i] += 1;",
    "<s>Hello</s> <unk> <pad> <0x41> <0xE2> <sep> [MASK] <ctrl> </s><s>",
    "a<sep>b [MASK]c <s><s></s>",
    "Emoji 😀 and unseen ones 🦩🪐🧬 and a family 👨‍👩‍👧",
    "😀😀😀",
    "日本語のテキストを分かち書きせずに扱う。",
    "龘靐齉 are rare characters",
    "中文和English混合text",
    "한국어와 English가 섞인 문장",
    "مرحبا بكم في عالم الذكاء الاصطناعي",
    "שלום, מה שלומך היום?",
    "Mixed: עברית and العربية and Русский",
    "Ελληνικά και русский язык",
    "हिन्दी में क्षत्रिय और ज्ञान",
    "ሰላም ዓለም",
    "Ꭰ Ꭱ Ꭲ cherokee, ᚠᚢᚦ runes",
    "Full width ＡＢＣ ｄｅｆ １２３ and ﬁ ﬂ ① ②",
    "Non\u00a0breaking\u2003em\u3000ideographic spaces",
    "Combining: e\u0301 A\u0301 cafe\u0301",
    "Control \x01 chars \x7f and \x00 nul",
    "    leading spaces and trailing spaces    ",
    "runs     of          spaces",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "▁ is the meta symbol, and ▁▁ two of them",
    "Price: €12.50 (about ¥2000) — ok?",
    "https://github.com/google/sentencepiece/blob/master/src/bpe_model.cc#L42",
    "x\u200by zero width, soft\u00adhyphen",
    "\U0001F600" * 3 + "end",
    "A quick brown fox jumps over the lazy dog; the dog sleeps.",
    "Training tokenizers for language models is fun.",
]


def train():
    for name, kw in MODELS.items():
        spm.SentencePieceTrainer.train(model_prefix=name, **COMMON, **kw)
    sp = spm.SentencePieceProcessor(model_file="suffix.model")
    keep = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if i % 3 != 0]
    sp.set_vocabulary(keep)
    with open("unused.model", "wb") as f:
        f.write(sp.serialized_model_proto())
    for name in MODELS:
        os.remove(name + ".vocab")


def golden():
    models, cases = {}, []
    for name in ["llama", "custom", "suffix", "unused"]:
        sp = spm.SentencePieceProcessor(model_file=name + ".model")
        models[name] = dict(vocab_size=sp.get_piece_size(), bos=sp.bos_id(), eos=sp.eos_id(),
                            pad=sp.pad_id(), unk=sp.unk_id())
        for text in TEXTS:
            ids = sp.encode(text)
            cases.append(dict(model=name, text=text, ids=ids, decoded=sp.decode(ids)))
    with open("golden.json", "w", encoding="utf-8") as f:
        json.dump(dict(models=models, cases=cases), f, ensure_ascii=False, indent=0)
        f.write("\n")


if __name__ == "__main__":
    train()
    golden()
