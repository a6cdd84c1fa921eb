#!/usr/bin/python3
"""Golden torch.save file for megago's pickle and torch.save writer (torch_write.go).

Run with Debian 12's python3-torch 1.13:

    /usr/bin/python3 gen_pickle.py   # rewrites pickle/sample.pt and pickle/sample.pkl

pickle/sample.pt   torch.save of sample() below (the value TestPickleGolden builds in Go),
                   pickled by torch.save's own code with a pickler in fast mode (no memo:
                   every object written out each time it occurs, as megago's writer does),
                   so its data.pkl and storage records must equal megago's byte for byte
"""

import argparse
import collections
import io
import os
import pickle
import pickletools
import types
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def sample():
    state = collections.OrderedDict()
    state["w"] = torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4
    state["b"] = torch.tensor([1.5, -2.25], dtype=torch.bfloat16)
    state["s"] = torch.tensor(7.0)  # a 0-dim tensor
    state["e"] = torch.empty(0, dtype=torch.uint8)  # Transformer Engine's _extra_state
    args = argparse.Namespace(num_layers=2, hidden_size=300, ffn_hidden_size=70000, big=1 << 40, neg=-5,
                              negbig=-(1 << 40), lr=1e-4, name="GPT2BPETokenizer", none=None, yes=True, no=False,
                              params_dtype=torch.bfloat16, sizes=[1, 2], pair=(3, "x"), empty=[], one=[9],
                              unicode="ü→雪")
    return {"args": args, "checkpoint_version": 3.0, "iteration": 7, "model": state,
            "single": {"k": 1}, "empty": {}, "od1": collections.OrderedDict(a=None)}


class FastPickler(pickle.Pickler):
    """Python's pickler without memoization (fast mode)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fast = True


FAST = types.SimpleNamespace(Pickler=FastPickler, __name__="fast_pickle")


def main():
    buf = io.BytesIO()
    torch.save(sample(), buf, pickle_module=FAST)
    b = buf.getvalue()
    os.makedirs(os.path.join(HERE, "pickle"), exist_ok=True)
    with open(os.path.join(HERE, "pickle", "sample.pt"), "wb") as f:
        f.write(b)
    with zipfile.ZipFile(io.BytesIO(b)) as z:
        pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
        print(z.namelist())
        data = z.read(pkl)
    pickletools.dis(data)


if __name__ == "__main__":
    main()
