#!/usr/bin/python3
"""Reference logits of the Hugging Face models megago exported, generated with PyTorch.

Run from anywhere with (Debian 12's python3-torch 1.13 and python3-numpy):

    /usr/bin/python3 gen_export.py      # writes export/<model>/reference.safetensors

export/<model>/config.json and model.safetensors were written by megago's ExportHF
(MEGAGO_UPDATE_EXPORT=1 go test ./checkpoint -run TestExportHFMatchesPyTorch): a tiny
BERT initialized by megago's own generator, exported to BertForPreTraining's format.
This script reads those files as Hugging Face would (the safetensors reader below
follows the format's definition: an 8-byte little-endian header length, a JSON header
of dtype, shape and data offsets, then the data; config.json's fields), runs the
hand-written BertForPreTraining of nn/testdata/golden/gen.py (imported, not copied) on
fixed inputs with dropout off, and writes the inputs (int64) and the float32 outputs:

    logits            [B, T, V] the masked-LM prediction scores
    seq_relationship  [B, 2]    the next-sentence / sentence-order scores

The test then checks that megago's model, before export, gives these logits. The
export's own tied copies (cls.predictions.decoder.weight and .bias) are not in the file,
as save_pretrained leaves them out; the reference ties them to the word embeddings and
cls.predictions.bias, as Hugging Face does on loading.
"""

import importlib.util
import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "nn", "testdata", "golden"))
import gen as ref  # noqa: E402  (the hand-written Hugging Face reference models)

_spec = importlib.util.spec_from_file_location("checkpoint_gen", os.path.join(HERE, "gen.py"))
checkpoint_gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checkpoint_gen)  # this directory's gen.py, for its safetensors writer
write_safetensors = checkpoint_gen.write_safetensors

NP_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        lo, hi = h["data_offsets"]
        a = np.frombuffer(data[lo:hi], dtype=NP_DTYPES[h["dtype"]]).reshape(h["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out


def bert_inputs(cfg, g):
    """Two sequences of 7 tokens, the second padded after 5; the first has both segments."""
    B, T, V = 2, 7, cfg["vocab_size"]
    ids = torch.randint(1, V, (B, T), generator=g)
    tt = torch.zeros(B, T, dtype=torch.long)
    tt[0, 3:] = 1
    tt[1, 2:5] = 1
    am = torch.ones(B, T, dtype=torch.long)
    am[1, 5:] = 0
    ids[1, 5:] = cfg["pad_token_id"]
    labels = torch.full((B, T), ref.IGNORE, dtype=torch.long)
    labels[0, 2], labels[1, 4] = 5, 9
    return {"input_ids": ids, "token_type_ids": tt, "attention_mask": am,
            "masked_lm_labels": labels, "next_sentence_label": torch.tensor([1, 0])}


def bert():
    d = os.path.join(HERE, "export", "bert")
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["architectures"] == ["BertForPreTraining"] and cfg["hidden_act"] == "gelu", cfg
    params = read_safetensors(os.path.join(d, "model.safetensors"))
    assert "cls.predictions.decoder.weight" not in params
    inputs = bert_inputs(cfg, torch.Generator().manual_seed(20261130))
    with torch.no_grad():
        logits, _, out = ref.bert_forward(params, cfg, inputs)
    refs = {k: v.to(torch.int64) for k, v in inputs.items()}
    refs["logits"] = logits.float()
    refs["seq_relationship"] = out["seq_relationship_logits"].float()
    write_safetensors(os.path.join(d, "reference.safetensors"), refs)
    print(f"export/bert: {len(params)} tensors read, logits {list(logits.shape)}")


if __name__ == "__main__":
    torch.set_default_dtype(torch.float32)
    bert()
