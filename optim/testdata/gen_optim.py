#!/usr/bin/env python3
"""Golden values for megago/optim, written to optim_golden.json beside this script.

1. torch.optim (PyTorch 1.13, Debian's python3-torch): Adam, AdamW and SGD run 20 steps on
   fixed parameters and gradients, in float32 and float64, with two parameter groups (the
   1-D parameter "b" gets no weight decay and, in some cases, a learning-rate multiplier),
   optionally after torch.nn.utils.clip_grad_norm_. The parameters after every step are
   recorded.
2. Megatron-LM's learning-rate and weight-decay schedules: OptimizerParamScheduler.get_lr
   and get_wd transcribed below, evaluated at a table of steps.

Run: python3 gen_optim.py
"""
import json
import math
import os

import torch

STEPS = 20
SHAPES = {"w": [4, 3], "b": [3], "x": [2, 2, 2]}

CASES = [
    dict(name="adamw", opt="AdamW", lr=1e-2, betas=(0.9, 0.95), eps=1e-8, wd=0.1, lr_mult_b=0.5),
    dict(name="adamw-defaults", opt="AdamW", lr=1e-3, wd=0.01),
    dict(name="adamw-clip", opt="AdamW", lr=1e-2, wd=0.1, clip=1.0, grad_mult=10.0),
    dict(name="adam-l2", opt="Adam", lr=1e-2, wd=0.05),
    dict(name="adam", opt="Adam", lr=3e-3, wd=0.0, betas=(0.8, 0.99), eps=1e-6),
    dict(name="sgd", opt="SGD", lr=0.1, wd=0.0),
    dict(name="sgd-momentum-wd", opt="SGD", lr=0.05, momentum=0.9, dampening=0.1, wd=0.01, lr_mult_b=2.0),
    dict(name="sgd-nesterov", opt="SGD", lr=0.05, momentum=0.9, nesterov=True, wd=0.01),
]


def run_case(case, init, grads, dtype):
    params = {n: init[n].clone().to(dtype).requires_grad_() for n in SHAPES}
    lr = case["lr"]
    kw = {}
    if case["opt"] in ("Adam", "AdamW"):
        if "betas" in case:
            kw["betas"] = case["betas"]
        if "eps" in case:
            kw["eps"] = case["eps"]
        cls = torch.optim.Adam if case["opt"] == "Adam" else torch.optim.AdamW
    else:
        kw = dict(momentum=case.get("momentum", 0.0), dampening=case.get("dampening", 0.0),
                  nesterov=case.get("nesterov", False))
        cls = torch.optim.SGD
    groups = [
        {"params": [params["w"], params["x"]], "weight_decay": case["wd"]},
        {"params": [params["b"]], "weight_decay": 0.0, "lr": lr * case.get("lr_mult_b", 1.0)},
    ]
    opt = cls(groups, lr=lr, **kw)
    out, norms = [], []
    for t in range(STEPS):
        for n, p in params.items():
            p.grad = grads[t][n].to(dtype) * case.get("grad_mult", 1.0)
        if "clip" in case:
            norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), case["clip"])))
        opt.step()
        out.append({n: p.detach().double().flatten().tolist() for n, p in params.items()})
    return out, norms


class MegatronSchedule:
    """OptimizerParamScheduler.get_lr and get_wd of Megatron-LM (megatron/core/optimizer_param_scheduler.py)."""

    def __init__(self, c):
        self.__dict__.update(c)

    def get_lr(self, num_steps):
        max_lr, min_lr = self.max_lr, self.min_lr
        if self.lr_warmup_steps > 0 and num_steps <= self.lr_warmup_steps:
            return self.init_lr + ((max_lr - self.init_lr) * float(num_steps) / float(self.lr_warmup_steps))
        if self.lr_decay_style == 'constant':
            return max_lr
        if num_steps > self.lr_decay_steps:
            return min_lr
        if self.lr_decay_style == 'inverse-square-root':
            warmup_steps = max(self.lr_warmup_steps, 1)
            num_steps = max(num_steps, 1)
            lr = max_lr * warmup_steps ** 0.5 / (num_steps ** 0.5)
            return max(min_lr, lr)
        num_steps_ = num_steps - self.lr_warmup_steps
        decay_steps_ = self.lr_decay_steps - self.lr_warmup_steps
        decay_ratio = float(num_steps_) / float(decay_steps_)
        assert 0.0 <= decay_ratio <= 1.0
        delta_lr = max_lr - min_lr
        if self.lr_decay_style == 'linear':
            coeff = 1.0 - decay_ratio
        elif self.lr_decay_style == 'cosine':
            coeff = 0.5 * (math.cos(math.pi * decay_ratio) + 1.0)
        elif self.lr_decay_style == 'WSD':
            wsd_anneal_start_ = self.lr_decay_steps - self.wsd_decay_steps
            if num_steps <= wsd_anneal_start_:
                coeff = 1.0
            else:
                wsd_steps = num_steps - wsd_anneal_start_
                wsd_decay_ratio = float(wsd_steps) / float(self.wsd_decay_steps)
                if self.lr_wsd_decay_style == "linear":
                    coeff = 1.0 - wsd_decay_ratio
                elif self.lr_wsd_decay_style == "cosine":
                    coeff = 0.5 * (math.cos(math.pi * wsd_decay_ratio) + 1.0)
                elif self.lr_wsd_decay_style == "exponential":
                    coeff = (2.0 * math.pow(0.5, wsd_decay_ratio)) - 1.0
                elif self.lr_wsd_decay_style == "minus_sqrt":
                    coeff = 1.0 - math.sqrt(wsd_decay_ratio)
        return min_lr + coeff * delta_lr

    def get_wd(self, num_steps):
        if num_steps > self.wd_incr_steps:
            return self.end_wd
        if self.wd_incr_style == 'constant':
            assert self.start_wd == self.end_wd
            return self.end_wd
        incr_ratio = float(num_steps) / float(self.wd_incr_steps)
        delta_wd = self.end_wd - self.start_wd
        if self.wd_incr_style == 'linear':
            coeff = incr_ratio
        elif self.wd_incr_style == 'cosine':
            coeff = 0.5 * (math.cos(math.pi * (1 - incr_ratio)) + 1.0)
        return self.start_wd + coeff * delta_wd


def schedules():
    base = dict(init_lr=0.01, max_lr=0.1, min_lr=0.001, lr_warmup_steps=100, lr_decay_steps=1000,
                wsd_decay_steps=0, lr_wsd_decay_style="", start_wd=0.1, end_wd=0.1, wd_incr_steps=1000,
                wd_incr_style="constant")
    lr_steps = [0, 1, 50, 99, 100, 101, 300, 500, 999, 1000, 1001, 5000]
    wsd = dict(base, init_lr=0.0, max_lr=1e-3, min_lr=1e-5, lr_warmup_steps=10, lr_decay_steps=100,
               lr_decay_style="WSD", wsd_decay_steps=30)
    wsd_steps = [0, 5, 10, 50, 70, 71, 80, 85, 99, 100, 101]
    cfgs = [
        (dict(base, lr_decay_style="linear"), lr_steps),
        (dict(base, lr_decay_style="cosine"), lr_steps),
        (dict(base, lr_decay_style="constant"), lr_steps),
        (dict(base, lr_decay_style="inverse-square-root", lr_decay_steps=100000), [0, 1, 50, 100, 101, 400, 10000, 100000, 100001]),
        (dict(base, lr_decay_style="inverse-square-root", min_lr=0.02, lr_decay_steps=100000), [100, 400, 2500, 10000]),
        (dict(base, lr_decay_style="linear", lr_warmup_steps=0), [0, 1, 500, 1000, 1001]),
        (dict(wsd, lr_wsd_decay_style="linear"), wsd_steps),
        (dict(wsd, lr_wsd_decay_style="cosine"), wsd_steps),
        (dict(wsd, lr_wsd_decay_style="exponential"), wsd_steps),
        (dict(wsd, lr_wsd_decay_style="minus_sqrt"), wsd_steps),
        (dict(base, lr_decay_style="linear", start_wd=0.0, end_wd=0.1, wd_incr_style="linear"), [0, 1, 250, 500, 999, 1000, 1001]),
        (dict(base, lr_decay_style="linear", start_wd=0.01, end_wd=0.1, wd_incr_style="cosine"), [0, 1, 250, 500, 999, 1000, 1001]),
    ]
    out = []
    for c, steps in cfgs:
        s = MegatronSchedule(c)
        out.append({"config": c, "steps": steps, "lr": [s.get_lr(n) for n in steps], "wd": [s.get_wd(n) for n in steps]})
    return out


def main():
    torch.manual_seed(1234)
    init = {n: torch.randn(*s, dtype=torch.float32) for n, s in SHAPES.items()}
    grads = [{n: torch.randn(*s, dtype=torch.float32) for n, s in SHAPES.items()} for _ in range(STEPS)]
    doc = {
        "torch_version": torch.__version__,
        "shapes": SHAPES,
        "init": {n: t.double().flatten().tolist() for n, t in init.items()},
        "grads": [{n: t.double().flatten().tolist() for n, t in g.items()} for g in grads],
        "cases": [],
        "schedules": schedules(),
    }
    for case in CASES:
        entry = dict(case)
        if "betas" in entry:
            entry["betas"] = list(entry["betas"])
        for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
            entry[name], norms = run_case(case, init, grads, dtype)
            if norms:
                entry[name + "_norms"] = norms
        doc["cases"].append(entry)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_golden.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
