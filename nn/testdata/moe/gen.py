#!/usr/bin/python3
"""Golden values for megago's mixture-of-experts layer, generated with PyTorch.

Run (from anywhere; deterministic, writes beside this file):

    /usr/bin/python3 nn/testdata/moe/gen.py

Two layers are written by hand from their architectures (the transformers package is
not used, nor any megago code):

  mixtral.safetensors    Hugging Face MixtralSparseMoeBlock: router logits x·Wᵀ, softmax
                         over all E experts, top-k, the k weights renormalized to sum 1
                         (identical to Megatron's default: top-k logits, then softmax over
                         them); experts SwiGLU w2(silu(w1 x)·w3 x), no biases.
  qwen2_moe.safetensors  Hugging Face Qwen2MoeSparseMoeBlock with norm_topk_prob false:
                         softmax over all E experts, top-k of the probabilities, not
                         renormalized (Megatron's --moe-router-pre-softmax); plus a shared
                         expert (SwiGLU MLP of hidden SF) scaled by sigmoid(x·shared_expert_gateᵀ).

Both add Megatron's load-balancing losses to what the gradients differentiate, as
Megatron's router attaches them (MoEAuxLossAutoScaler, scale 1):

  aux_loss = coeff_aux · E/(k·N²) · Σ_e tokens_e · Σ_n softmax(logits)[n, e]
             (moe_utils.switch_load_balancing_loss_func, --moe-router-load-balancing-type
             aux_loss, per micro-batch: tokens_e = how many of the N tokens chose e)
  z_loss   = coeff_z · mean_n (logsumexp_e logits[n, e])²           (moe_utils.z_loss_func)
  L        = Σ y·dy + aux_loss + z_loss      (dy is the stored upstream gradient)

Shapes: B=2, T=5, C=16 (N = B·T = 10 tokens, row-major over [B, T]), F=24 per expert,
top-2; Mixtral E=8; Qwen E=6 plus a shared expert of hidden SF=32.

The megago configuration each file corresponds to (TransformerConfig{Hidden: 16,
Activation: SwiGLU, Bias: false, MoE: ...}, one rank, Pass.Train true, LossScale 0 → 1):

  mixtral.safetensors:   MoEConfig{NumExperts: 8, TopK: 2, FFNHidden: 24,
                           PreSoftmax: false, ScoreFunction: "softmax",
                           LoadBalancing: "aux_loss", AuxLossCoeff: 0.01, ZLossCoeff: 0.001}
  qwen2_moe.safetensors: MoEConfig{NumExperts: 6, TopK: 2, FFNHidden: 24,
                           PreSoftmax: true, ScoreFunction: "softmax",
                           LoadBalancing: "aux_loss", AuxLossCoeff: 0.01, ZLossCoeff: 0.001,
                           SharedExpertFFNHidden: 32, SharedExpertGate: true}

Tensors stored (safetensors, written with checkpoint/testdata/gen.py's writer, since the
safetensors package is not installed; the "__metadata__" map holds the configuration as
strings, "megago_moe_config" the MoEConfig as JSON). Parameter names and layouts are
megago's nn.MoE's, relative to the layer's prefix (layers.i.mlp):

  router.weight              F32 [E, C]       (HF gate.weight)
  experts.gate.weight        F32 [E, F, C]    (HF experts.e.w1 / gate_proj, stacked)
  experts.fc1.weight         F32 [E, F, C]    (HF experts.e.w3 / up_proj)
  experts.fc2.weight         F32 [E, C, F]    (HF experts.e.w2 / down_proj)
  shared_expert.gate.weight  F32 [SF, C]      (Qwen only; nn.MLP layout [out, in])
  shared_expert.fc1.weight   F32 [SF, C]
  shared_expert.fc2.weight   F32 [C, SF]
  shared_expert_gate.weight  F32 [1, C]
  x, dy                      F32 [B, T, C]    input and upstream gradient
  y                          F64 [B, T, C]    output
  grad.<param>, grad.x       F64              dL/d param, dL/dx (L above)
  aux_grad.router.weight     F64 [E, C]       d(aux_loss + z_loss)/d router.weight (dy = 0)
  aux_grad.x                 F64 [B, T, C]    d(aux_loss + z_loss)/dx
  router.logits              F64 [N, E]
  router.probs               F64 [N, E]       routing probabilities, 0 where not selected
  router.selected            I64 [N, k]       selected experts, highest probability first
  router.tokens_per_expert   I64 [E]
  aux_loss, z_loss           F64 [1]          coefficient-weighted, as in L

Inputs are float32 values; every F64 result is computed in float64 from those exact
float32 inputs (the precise answer for the stored inputs). The same computation in
float32 is compared with it: its worst error, relative to the largest magnitude of each
tensor, is recorded in the metadata ("fp32_err.<name>") and the script fails unless it is
under a tenth of the tolerance the Go test uses (TOL_RTOL, TOL_SCALE below), so an fp32
implementation can meet that tolerance.

Self-checks before anything is written (the script fails otherwise): a second,
independent NumPy float64 implementation (dense: every expert on every token, masked;
Megatron's softmax-of-top-k-logits for Mixtral; gradients derived by hand, no autograd)
agrees with the PyTorch autograd results; the gap between each token's k-th and (k+1)-th
logit exceeds MIN_GAP so fp32 rounding cannot change the selection; every gradient is
nonzero; files stay under 200 KB. Tested with torch 1.13, numpy 1.24.
"""

import importlib.util
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

B, T, C, FF, TOPK = 2, 5, 16, 24, 2
AUX_COEFF, Z_COEFF = 0.01, 0.001
MIN_GAP = 1e-2  # least gap between a token's k-th and (k+1)-th router logit
# Tolerance of the Go test: |got − want| ≤ TOL_RTOL·|want| + TOL_SCALE·max|want|.
TOL_RTOL, TOL_SCALE = 1e-5, 1e-5

CASES = {
    "mixtral": dict(E=8, shared=0, pre_softmax=False, seed=11),
    "qwen2_moe": dict(E=6, shared=32, pre_softmax=True, seed=22),
}

# Initialization scales: router logits spread over a few units, O(1) activations.
STD = {"router": 0.4, "in": 0.25, "out": 0.2, "shared_gate": 0.25}


def make_params(case, g):
    """Returns the float32 parameters of case keyed by megago name (global layouts)."""
    e, sf = case["E"], case["shared"]

    def normal(std, *shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * std

    p = {
        "router.weight": normal(STD["router"], e, C),
        "experts.gate.weight": normal(STD["in"], e, FF, C),
        "experts.fc1.weight": normal(STD["in"], e, FF, C),
        "experts.fc2.weight": normal(STD["out"], e, C, FF),
    }
    if sf:
        p["shared_expert.gate.weight"] = normal(STD["in"], sf, C)
        p["shared_expert.fc1.weight"] = normal(STD["in"], sf, C)
        p["shared_expert.fc2.weight"] = normal(STD["out"], C, sf)
        p["shared_expert_gate.weight"] = normal(STD["shared_gate"], 1, C)
    return p


# ---------------------------------------------------------------------------------------
# PyTorch reference, written as the Hugging Face blocks compute it.


def swiglu_mlp(x, w_gate, w_up, w_down):
    """Mixtral's MixtralBlockSparseTop2MLP / Qwen2MoeMLP: w2(silu(w1 x) · w3 x)."""
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def torch_moe(p, x, case):
    """Returns y [B, T, C] and a dict of router results and the two losses."""
    e = case["E"]
    xs = x.reshape(-1, C)  # [N, C]
    n = xs.shape[0]
    logits = F.linear(xs, p["router.weight"])  # [N, E]
    scores = F.softmax(logits, dim=-1)
    weights, selected = torch.topk(scores, TOPK, dim=-1)  # [N, k]
    if not case["pre_softmax"]:  # Mixtral; Qwen2-MoE's norm_topk_prob false skips this
        weights = weights / weights.sum(dim=-1, keepdim=True)
    y = torch.zeros_like(xs)
    mask = F.one_hot(selected, e).permute(2, 1, 0)  # [E, k, N]
    for i in range(e):
        slot, tok = torch.where(mask[i])
        out = swiglu_mlp(xs[tok], p["experts.gate.weight"][i], p["experts.fc1.weight"][i],
                         p["experts.fc2.weight"][i])
        y = y.index_add(0, tok, out * weights[tok, slot, None])
    if case["shared"]:
        sh = swiglu_mlp(xs, p["shared_expert.gate.weight"], p["shared_expert.fc1.weight"],
                        p["shared_expert.fc2.weight"])
        y = y + torch.sigmoid(F.linear(xs, p["shared_expert_gate.weight"])) * sh
    routing_map = torch.zeros(n, e, dtype=torch.bool).scatter(1, selected, True)
    tokens = routing_map.sum(dim=0)  # [E]
    aux = (scores.sum(dim=0) * tokens).sum() * (e * AUX_COEFF / (TOPK * n * n))
    z = torch.logsumexp(logits, dim=-1).square().mean() * Z_COEFF
    probs = torch.zeros_like(scores).scatter(1, selected, weights)
    r = {"router.logits": logits, "router.probs": probs, "router.selected": selected,
         "router.tokens_per_expert": tokens, "aux_loss": aux.reshape(1), "z_loss": z.reshape(1)}
    return y.reshape(x.shape), r


def torch_run(p32, x32, dy32, case, dtype):
    """Runs the layer in dtype; returns every stored result as float64/int64 tensors."""
    p = {k: v.detach().to(dtype).clone().requires_grad_() for k, v in p32.items()}
    x = x32.detach().to(dtype).clone().requires_grad_()
    y, r = torch_moe(p, x, case)
    loss = (y * dy32.to(dtype)).sum() + r["aux_loss"].sum() + r["z_loss"].sum()
    leaves = [x] + list(p.values())
    grads = torch.autograd.grad(loss, leaves, retain_graph=True)
    out = {"y": y, "grad.x": grads[0]}
    out.update({"grad." + k: g for k, g in zip(p, grads[1:])})
    aux_grads = torch.autograd.grad(r["aux_loss"].sum() + r["z_loss"].sum(), [x, p["router.weight"]])
    out["aux_grad.x"], out["aux_grad.router.weight"] = aux_grads
    out.update(r)
    return {k: (v.detach().to(torch.float64) if v.is_floating_point() else v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------
# Independent NumPy float64 implementation with hand-derived gradients.


def np_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    ez = np.exp(z)
    return ez / ez.sum(axis=-1, keepdims=True)


def np_silu(a):
    return a / (1 + np.exp(-a))


def np_dsilu(a):
    s = 1 / (1 + np.exp(-a))
    return s * (1 + a * (1 - s))


def np_softmax_back(s, ds):
    """Gradient wrt logits of a softmax s (rows), given ds."""
    return s * (ds - (s * ds).sum(axis=-1, keepdims=True))


def np_mlp(xs, wg, wu, wd, dout):
    """SwiGLU MLP forward and backward: returns out, dx, (dwg, dwu, dwd)."""
    a, u = xs @ wg.T, xs @ wu.T  # [N, F]
    h = np_silu(a) * u
    out = h @ wd.T  # [N, C]
    if dout is None:
        return out, None, None
    dh = dout @ wd
    da, du = dh * u * np_dsilu(a), dh * np_silu(a)
    return out, da @ wg + du @ wu, (da.T @ xs, du.T @ xs, dout.T @ h)


def np_moe(p, x, dy, case):
    """Dense forward and hand-written backward; same keys as torch_run."""
    p = {k: v.numpy().astype(np.float64) for k, v in p.items()}
    xs, dys = x.numpy().astype(np.float64).reshape(-1, C), dy.numpy().astype(np.float64).reshape(-1, C)
    n, e = xs.shape[0], case["E"]
    wr = p["router.weight"]
    logits = xs @ wr.T
    s = np_softmax(logits)
    sel = np.argsort(-logits, axis=-1, kind="stable")[:, :TOPK]  # softmax is monotonic
    m = np.zeros((n, e), bool)
    np.put_along_axis(m, sel, True, axis=-1)
    if case["pre_softmax"]:
        probs = np.where(m, s, 0)
    else:  # Megatron's form: softmax over the k chosen logits only
        probs = np.where(m, np_softmax(np.where(m, logits, -np.inf)), 0)
    y = np.zeros_like(xs)
    dx = np.zeros_like(xs)
    dprobs = np.zeros((n, e))
    g = {k: np.zeros_like(v) for k, v in p.items()}
    for i in range(e):  # every expert on every token, weighted by probs (0 if unrouted)
        w = [p["experts.gate.weight"][i], p["experts.fc1.weight"][i], p["experts.fc2.weight"][i]]
        out, dxi, dw = np_mlp(xs, *w, dys * probs[:, i:i + 1])
        y += probs[:, i:i + 1] * out
        dprobs[:, i] = (dys * out).sum(axis=-1)
        dx += dxi
        for name, d in zip(["experts.gate.weight", "experts.fc1.weight", "experts.fc2.weight"], dw):
            g[name][i] = d
    if case["shared"]:
        wsg = p["shared_expert_gate.weight"]
        gate = 1 / (1 + np.exp(-(xs @ wsg.T)))  # [N, 1]
        sh, _, _ = np_mlp(xs, p["shared_expert.gate.weight"], p["shared_expert.fc1.weight"],
                          p["shared_expert.fc2.weight"], None)
        y += gate * sh
        _, dxs, dw = np_mlp(xs, p["shared_expert.gate.weight"], p["shared_expert.fc1.weight"],
                            p["shared_expert.fc2.weight"], dys * gate)
        dx += dxs
        for name, d in zip(["shared_expert.gate.weight", "shared_expert.fc1.weight", "shared_expert.fc2.weight"], dw):
            g[name] = d
        dgl = (dys * sh).sum(axis=-1, keepdims=True) * gate * (1 - gate)  # [N, 1]
        g["shared_expert_gate.weight"] = dgl.T @ xs
        dx += dgl @ wsg
    # Router: the routing weights, then the two losses.
    if case["pre_softmax"]:
        dlogits = np_softmax_back(s, np.where(m, dprobs, 0))
    else:
        dlogits = np_softmax_back(probs, np.where(m, dprobs, 0))  # 0 outside the chosen k
    tokens = m.sum(axis=0)
    aux = AUX_COEFF * e / (TOPK * n * n) * (tokens * s.sum(axis=0)).sum()
    lse = logits.max(axis=-1) + np.log(np.exp(logits - logits.max(axis=-1, keepdims=True)).sum(axis=-1))
    z = Z_COEFF * (lse ** 2).mean()
    daux = np_softmax_back(s, np.broadcast_to(AUX_COEFF * e / (TOPK * n * n) * tokens, s.shape))
    daux = daux + Z_COEFF * 2 * lse[:, None] / n * s
    dlogits = dlogits + daux
    g["router.weight"] = dlogits.T @ xs
    dx += dlogits @ wr
    out = {"y": y.reshape(x.shape), "grad.x": dx.reshape(x.shape),
           "aux_grad.x": (daux @ wr).reshape(x.shape), "aux_grad.router.weight": daux.T @ xs,
           "router.logits": logits, "router.probs": probs, "router.tokens_per_expert": tokens,
           "aux_loss": np.array([aux]), "z_loss": np.array([z])}
    out.update({"grad." + k: v for k, v in g.items()})
    return out, sel, logits


# ---------------------------------------------------------------------------------------
# Checks and output.


def scale_err(got, want):
    """max |got − want| / (TOL_RTOL·|want| + TOL_SCALE·max|want|): ≤ 1 passes the Go test."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    tol = TOL_RTOL * np.abs(want) + TOL_SCALE * np.abs(want).max()
    return float((np.abs(got - want) / tol).max())


def check(name, case, p, x, dy, ref, ref32):
    sel = ref["router.selected"].numpy()
    npref, npsel, logits = np_moe(p, x, dy, case)
    # Selection is well separated: fp32 rounding cannot swap the k-th and (k+1)-th expert.
    srt = np.sort(logits, axis=-1)[:, ::-1]
    gap = (srt[:, TOPK - 1] - srt[:, TOPK]).min()
    assert gap > MIN_GAP, f"{name}: top-{TOPK} gap {gap} too small; choose another seed"
    assert (np.sort(npsel, axis=-1) == np.sort(sel, axis=-1)).all(), f"{name}: numpy selects other experts"
    for k, v in npref.items():
        err = np.abs(np.asarray(v, np.float64) - ref[k].numpy()).max()
        assert err <= 1e-12 * max(1.0, np.abs(v).max()), f"{name}: numpy and torch differ on {k} by {err}"
    for k, v in ref.items():
        if k.startswith("grad."):
            assert np.abs(v.numpy()).max() > 0, f"{name}: {k} is zero"
    errs = {}
    for k, v in ref.items():
        if v.is_floating_point():
            errs[k] = scale_err(ref32[k].numpy(), v.numpy())
            assert errs[k] < 0.1, f"{name}: float32 error of {k} is {errs[k]:.3g} of the Go tolerance"
    assert (ref32["router.selected"] == ref["router.selected"]).all(), f"{name}: float32 selects other experts"
    return errs


def write_safetensors(path, tensors, metadata):
    """Writes tensors (name → numpy array) as a safetensors file, with the writer of
    checkpoint/testdata/gen.py, and checks its size."""
    spec = importlib.util.spec_from_file_location(
        "checkpoint_gen", os.path.join(HERE, "..", "..", "..", "checkpoint", "testdata", "gen.py"))
    ckpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ckpt)
    ckpt.write_safetensors(path, {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()}, metadata)
    size = os.path.getsize(path)
    assert size < 200 << 10, f"{path} is {size} bytes"
    return size


def megago_config(case):
    cfg = {"NumExperts": case["E"], "TopK": TOPK, "FFNHidden": FF, "PreSoftmax": case["pre_softmax"],
           "ScoreFunction": "softmax", "LoadBalancing": "aux_loss", "AuxLossCoeff": AUX_COEFF,
           "ZLossCoeff": Z_COEFF}
    if case["shared"]:
        cfg.update(SharedExpertFFNHidden=case["shared"], SharedExpertGate=True)
    return cfg


def generate(name, case):
    g = torch.Generator().manual_seed(case["seed"])
    p = make_params(case, g)
    x = torch.randn(B, T, C, generator=g, dtype=torch.float32)
    dy = torch.randn(B, T, C, generator=g, dtype=torch.float32)
    ref = torch_run(p, x, dy, case, torch.float64)
    ref32 = torch_run(p, x, dy, case, torch.float32)
    errs = check(name, case, p, x, dy, ref, ref32)
    tensors = {k: v.numpy() for k, v in p.items()}
    tensors.update(x=x.numpy(), dy=dy.numpy())
    tensors.update({k: v.numpy() for k, v in ref.items()})
    meta = {
        "model": name,
        "generator": "nn/testdata/moe/gen.py",
        "megago_moe_config": json.dumps(megago_config(case), sort_keys=True),
        "hidden": str(C), "batch": str(B), "seq": str(T), "activation": "swiglu", "bias": "false",
        "loss": "sum(y*dy) + aux_loss + z_loss",
        "tolerance": f"|got-want| <= {TOL_RTOL}*|want| + {TOL_SCALE}*max|want|",
        "torch": torch.__version__,
    }
    meta.update({"fp32_err." + k: f"{v:.3g}" for k, v in sorted(errs.items())})
    size = write_safetensors(os.path.join(HERE, name + ".safetensors"), tensors, meta)
    worst = max(errs.items(), key=lambda kv: kv[1])
    print(f"{name}: {size} bytes; selected {ref['router.selected'].tolist()[:3]}...; "
          f"aux {ref['aux_loss'].item():.6g} z {ref['z_loss'].item():.6g}; "
          f"worst fp32 error {worst[1]:.3g} of tolerance ({worst[0]})")


def main():
    torch.use_deterministic_algorithms(True)
    for name, case in CASES.items():
        generate(name, case)


if __name__ == "__main__":
    main()
