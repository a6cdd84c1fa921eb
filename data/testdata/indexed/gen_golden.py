#!/usr/bin/env python3
"""Writes the golden indexed datasets that megago's data package is tested against.

An independent writer of Megatron's .bin/.idx format, following MEGATRON-FACTS.md
("Indexed dataset") and Megatron-core's indexed_dataset.py, using only the struct module.
Run from anywhere with any Python 3; it rewrites, next to itself and in ../preprocess:

  indexed/{name}.bin/.idx     one dataset per entry of DATASETS, listed in manifest.json
  indexed/merged.bin/.idx     uint16_docs merged with uint16_more, as IndexedDatasetBuilder.add_index does
  indexed/corrupt/*.bin/.idx  one broken file per error kind; corrupt/manifest.json names the
                              file, field and byte offset each error must report
  preprocess/expected/*       what tools/preprocess_data.py writes for preprocess/cases.json
                              with the NullTokenizer

    python3 data/testdata/indexed/gen_golden.py
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
PREPROCESS = os.path.join(os.path.dirname(HERE), "preprocess")

MAGIC = b"MMIDIDX\x00\x00"
# dtype code -> (struct format character, item size in bytes)
DTYPES = {1: ("B", 1), 2: ("b", 1), 3: ("h", 2), 4: ("i", 4), 5: ("q", 8), 6: ("d", 8), 7: ("f", 4), 8: ("H", 2)}

# Documents are lists of sequences; sequences are lists of token ids. Empty documents are
# recorded as a repeated document boundary.
DOCS = [[[1, 2, 3], [4]], [], [[5, 6]], [], [[7], [8, 9, 10], [11]]]
DATASETS = [
    {"name": "uint8", "dtype": 1, "docs": [[[0, 255, 7]], [], [[128]]]},
    {"name": "int8", "dtype": 2, "docs": [[[-128, 127]], [[0, -1, 5]], []]},
    {"name": "int16", "dtype": 3, "docs": [[[-32768, 32767, 0]], [], [[1, -2]]]},
    {"name": "int32", "dtype": 4, "docs": [[[2147483647, -2147483648, 50256]], [], [[70000], [0]], []]},
    {"name": "int64", "dtype": 5, "docs": DOCS},
    {"name": "float64", "dtype": 6, "docs": [[[1, -2, 300000]], [[65536]], []]},
    {"name": "float32", "dtype": 7, "docs": [[[1, -2, 16777216]], [], [[3]]]},
    {"name": "uint16_docs", "dtype": 8, "docs": DOCS},
    {"name": "uint16_more", "dtype": 8, "docs": [[], [[65535, 0], [12]], [[]]]},
    {"name": "uint16_empty", "dtype": 8, "docs": []},
    {"name": "uint16_modes", "dtype": 8, "docs": [[[1, 2], [3]], [[4]]], "modes": [0, 1, 2]},
]


def index_bytes(code, lengths, doc_idx, modes=None):
    size = DTYPES[code][1]
    pointers, p = [], 0
    for n in lengths:
        pointers.append(p)
        p += n * size
    out = MAGIC + struct.pack("<Q", 1) + struct.pack("<B", code)
    out += struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(doc_idx))
    out += struct.pack("<%di" % len(lengths), *lengths)
    out += struct.pack("<%dq" % len(pointers), *pointers)
    out += struct.pack("<%dq" % len(doc_idx), *doc_idx)
    if modes is not None:
        out += struct.pack("<%db" % len(modes), *modes)
    return out


def dataset_bytes(code, docs, modes=None):
    fmt = DTYPES[code][0]
    data, lengths, doc_idx = bytearray(), [], [0]
    for doc in docs:
        for seq in doc:
            vals = [float(v) for v in seq] if fmt in "df" else seq
            data += struct.pack("<%d%s" % (len(seq), fmt), *vals)
            lengths.append(len(seq))
        doc_idx.append(len(lengths))
    return bytes(data), index_bytes(code, lengths, doc_idx, modes), lengths, doc_idx


def write(prefix, data, idx):
    with open(prefix + ".bin", "wb") as f:
        f.write(data)
    with open(prefix + ".idx", "wb") as f:
        f.write(idx)


def write_datasets():
    parsed = {}
    for ds in DATASETS:
        data, idx, lengths, doc_idx = dataset_bytes(ds["dtype"], ds["docs"], ds.get("modes"))
        write(os.path.join(HERE, ds["name"]), data, idx)
        parsed[ds["name"]] = (data, lengths, doc_idx)
    # Merge as add_index: append lengths, offset the other's document indices by the
    # sequences already present and drop its leading 0, concatenate the .bin bytes.
    a, b = parsed["uint16_docs"], parsed["uint16_more"]
    lengths = a[1] + b[1]
    doc_idx = a[2] + [len(a[1]) + d for d in b[2][1:]]
    write(os.path.join(HERE, "merged"), a[0] + b[0], index_bytes(8, lengths, doc_idx))
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump({"datasets": DATASETS, "merged": {"name": "merged", "parts": ["uint16_docs", "uint16_more"]}}, f, indent=1)
        f.write("\n")


def write_corrupt():
    # Base: uint16, docs [[3, 2 tokens], [], [1, 4 tokens]]: N=4, D=4, lengths at 34,
    # pointers at 50, document indices at 82, file size 114; .bin 20 bytes.
    data, idx, _, _ = dataset_bytes(8, [[[1, 2, 3], [4, 5]], [], [[6], [7, 8, 9, 10]]])
    n, d = 4, 4
    off_len, off_ptr, off_doc = 34, 34 + 4 * n, 34 + 12 * n
    cases = []

    def case(name, idx_bytes, field, offset, file="idx", bin_bytes=data):
        write(os.path.join(HERE, "corrupt", name), bin_bytes, idx_bytes)
        cases.append({"name": name, "file": file, "field": field, "offset": offset})

    def put(b, off, fmt, v):
        b = bytearray(b)
        struct.pack_into(fmt, b, off, v)
        return bytes(b)

    case("bad_magic", b"MMIDIDY" + idx[7:], "magic", 0)
    case("empty_idx", b"", "magic", 0)
    case("bad_version", put(idx, 9, "<Q", 2), "version", 9)
    case("bad_dtype", put(idx, 17, "<B", 9), "dtype", 17)
    case("truncated_header", idx[:20], "sequence_count", 18)
    case("truncated_lengths", idx[:60], "sequence_count", 18)
    case("truncated_documents", idx[:100], "document_count", 26)
    case("huge_sequence_count", put(idx, 18, "<Q", 1 << 62), "sequence_count", 18)
    case("huge_document_count", put(idx, 26, "<Q", (1 << 64) - 1), "document_count", 26)
    case("zero_document_count", put(idx, 26, "<Q", 0), "document_count", 26)
    case("trailing_bytes", idx + b"\x00\x00\x00", "sequence_modes", 114)
    case("negative_length", put(idx, off_len + 4, "<i", -1), "sequence_lengths[1]", off_len + 4)
    case("length_past_bin", put(idx, off_len + 12, "<i", 1000), "sequence_lengths[3]", off_len + 12)
    case("first_pointer_nonzero", put(idx, off_ptr, "<q", 2), "sequence_pointers[0]", off_ptr)
    case("pointer_gap", put(idx, off_ptr + 16, "<q", 12), "sequence_pointers[2]", off_ptr + 16)
    case("pointer_past_bin", put(idx, off_ptr + 24, "<q", 1 << 40), "sequence_pointers[3]", off_ptr + 24)
    case("bin_truncated", idx, "sequence_lengths[3]", off_len + 12, bin_bytes=data[:15])
    case("bin_too_long", idx, "file size", 20, file="bin", bin_bytes=data + b"\x00\x00")
    case("first_document_nonzero", put(idx, off_doc, "<q", 1), "document_indices[0]", off_doc)
    case("documents_not_monotonic", put(idx, off_doc + 16, "<q", 1), "document_indices[2]", off_doc + 16)
    case("document_past_count", put(idx, off_doc + 8, "<q", 9), "document_indices[1]", off_doc + 8)
    case("last_document_short", put(idx, off_doc + 24, "<q", 3), "document_indices[3]", off_doc + 24)
    with open(os.path.join(HERE, "corrupt", "manifest.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")


def null_tokenize(text):
    # Megatron's NullTokenizer: [int(x) for x in text.split(' ')]. Megatron raises on "";
    # megago's NullTokenizer gives no ids, so the empty string is an empty sentence here.
    return [int(x) for x in text.split(" ")] if text else []


def write_preprocess():
    # tools/preprocess_data.py without --split-sentences: per key, a string is one sentence,
    # a list is its sentences; zero-token sentences are dropped; --append-eod appends EOD
    # (vocab_size - 1) to the last sentence of a non-empty document; every line is a
    # document, empty or not (add_document with no lengths repeats the boundary).
    with open(os.path.join(PREPROCESS, "cases.json")) as f:
        cases = json.load(f)
    os.makedirs(os.path.join(PREPROCESS, "expected"), exist_ok=True)
    for c in cases:
        eod = c["vocab_size"] - 1
        code = 8 if c["vocab_size"] < 65500 else 4
        with open(os.path.join(PREPROCESS, c["input"]), encoding="utf-8") as f:
            lines = f.readlines()
        for key in c["json_keys"]:
            docs = []
            for line in lines:
                text = json.loads(line)[key]
                sentences = text if isinstance(text, list) else [text]
                doc = [ids for ids in map(null_tokenize, sentences) if ids]
                if doc and c["append_eod"]:
                    doc[-1].append(eod)
                docs.append(doc)
            data, idx, _, _ = dataset_bytes(code, docs)
            write(os.path.join(PREPROCESS, "expected", "%s_%s_document" % (c["name"], key)), data, idx)


if __name__ == "__main__":
    os.makedirs(os.path.join(HERE, "corrupt"), exist_ok=True)
    write_datasets()
    write_corrupt()
    write_preprocess()
