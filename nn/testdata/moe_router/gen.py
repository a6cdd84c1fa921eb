#!/usr/bin/python3
"""Golden values for megago's mixture-of-experts router (nn/moe_router*.go).

Written from Megatron-core's TopKRouter (megatron/core/transformer/moe/router.py and
moe_utils.py: topk_routing_with_score_function, compute_routing_scores_for_aux_loss,
switch_load_balancing_loss_func, z_loss_func, apply_router_token_dropping,
MoEAuxLossAutoScaler, get_updated_expert_bias), single rank, not from megago's code.
Tokens are laid out as Megatron's, sequence-major [S, B]; inputs and outputs are stored in
megago's batch-major order ([B, T, C] inputs, [B·T, E] probabilities and map), so the
test also checks that megago maps between the two orders.

Megatron leaves the order of torch.topk among equal values open; this reference breaks
ties with a stable sort: lower expert index first when choosing experts, and for capacity
dropping the earlier token in Megatron's [S, B] order first (which is what picks the
tokens of probability 0 that PadToCapacity adds).

Run: /usr/bin/python3 nn/testdata/moe_router/gen.py  (writes golden.json beside it)
"""

import json
import math
import os

import torch

torch.manual_seed(22)


def topk_stable(v, k, dim):
    """Indices of the k largest values along dim, ties to the lower index."""
    return torch.sort(v, dim=dim, descending=True, stable=True)[1].narrow(dim, 0, k)


class AuxLossAutoScaler(torch.autograd.Function):
    """MoEAuxLossAutoScaler: identity on output; backward sends `scale` into aux_loss."""

    scale = 1.0

    @staticmethod
    def forward(ctx, output, aux_loss):
        ctx.save_for_backward(aux_loss)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (aux_loss,) = ctx.saved_tensors
        return grad_output, torch.ones_like(aux_loss) * AuxLossAutoScaler.scale


def topk_routing(logits, topk, pre_softmax, score, expert_bias):
    num_tokens, num_experts = logits.shape
    if score == "softmax":
        if pre_softmax:
            scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
            idx = topk_stable(scores, topk, 1)
            probs = torch.gather(scores, 1, idx)
        else:
            idx = topk_stable(logits, topk, 1)
            probs = torch.softmax(torch.gather(logits, 1, idx), dim=-1, dtype=torch.float32)
    else:
        scores = torch.sigmoid(logits.float())
        if expert_bias is not None:
            idx = topk_stable(scores + expert_bias, topk, 1)
        else:
            idx = topk_stable(scores, topk, 1)
        scores = torch.gather(scores, 1, idx)
        probs = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20) if topk > 1 else scores
    routing_probs = torch.zeros_like(logits).scatter(1, idx, probs)
    routing_map = torch.zeros_like(logits).int().scatter(1, idx, 1).bool()
    return routing_probs, routing_map


def scores_for_aux_loss(logits, topk, score):
    if score == "softmax":
        scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
    else:
        scores = torch.sigmoid(logits.float())
        scores = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20)
    idx = topk_stable(scores, topk, 1)
    routing_map = torch.zeros_like(logits).int().scatter(1, idx, 1).bool()
    return routing_map, scores


def switch_load_balancing_loss(probs, tokens_per_expert, total_num_tokens, topk, num_experts, coeff):
    aggregated = probs.sum(dim=0)
    return torch.sum(aggregated * tokens_per_expert) * (
        num_experts * coeff / (topk * total_num_tokens * total_num_tokens))


def token_dropping(probs, routing_map, topk, capacity_factor, drop_policy, pad):
    num_tokens, num_experts = probs.shape
    capacity = math.ceil((num_tokens * topk / num_experts) * capacity_factor)
    if capacity > num_tokens:
        mask = torch.ones_like(probs).bool()
    else:
        key = probs if drop_policy == "probs" else routing_map.int()
        idx = topk_stable(key, capacity, 0)
        mask = torch.zeros_like(probs).scatter(0, idx, 1).bool()
    final_map = mask if pad else torch.logical_and(routing_map, mask)
    return probs * final_map, final_map


class Router:
    """TopKRouter.routing for one rank (tp_cp group of one, tp_dp_cp group of one)."""

    def __init__(self, c, weight, expert_bias):
        self.c, self.weight, self.expert_bias = c, weight, expert_bias
        self.global_tokens = torch.zeros(c["E"])
        self.ga_steps = 0
        self.logged = {"aux": 0.0, "seq_aux": 0.0, "global_aux": 0.0, "z": 0.0}
        self.tokens_before_drop = torch.zeros(c["E"], dtype=torch.long)
        self.tokens_for_bias = torch.zeros(c["E"])

    def forward(self, x_sbh):  # [S, B, C]
        c = self.c
        S, B, _ = x_sbh.shape
        logits = torch.mm(x_sbh.reshape(-1, c["C"]).float(), self.weight.float().t())  # [S·B, E]
        if c["z_coeff"] > 0:
            z = torch.mean(torch.square(torch.logsumexp(logits, dim=-1))) * c["z_coeff"]
            logits = AuxLossAutoScaler.apply(logits, z)
            self.logged["z"] += z.item()
        probs, rmap = topk_routing(logits, c["topk"], c["pre_softmax"], c["score"], self.expert_bias)
        self.tokens_before_drop += rmap.sum(dim=0)
        if c["capacity"] > 0:
            probs, rmap = token_dropping(probs, rmap, c["topk"], c["capacity"], c["drop"], c["pad"])
        lb, coeff = c["lb"], c["aux_coeff"]
        if coeff > 0 and lb != "none":
            amap, scores = scores_for_aux_loss(logits, c["topk"], c["score"])
            E, k = c["E"], c["topk"]
            if lb == "aux_loss":
                aux = switch_load_balancing_loss(scores, amap.sum(dim=0), S * B, k, E, coeff)
            elif lb == "seq_aux_loss":
                aux = switch_load_balancing_loss(scores.reshape(S, -1), amap.reshape(S, -1).sum(dim=0),
                                                 S, k, E, coeff) / B
            else:
                self.global_tokens += amap.sum(dim=0)
                self.ga_steps += 1
                aux = switch_load_balancing_loss(scores, self.global_tokens / self.ga_steps, S * B, k, E, coeff)
            probs = AuxLossAutoScaler.apply(probs, aux)
            self.logged[{"aux_loss": "aux", "seq_aux_loss": "seq_aux", "global_aux_loss": "global_aux"}[lb]] += aux.item()
        self.tokens_for_bias += rmap.sum(dim=0)
        return probs, rmap  # [S·B, E]

    def updated_expert_bias(self):
        t = self.tokens_for_bias
        offset = t.sum(dim=-1, keepdim=True) / t.shape[-1] - t
        return self.expert_bias + torch.sign(offset) * self.c["rate"]


def sb_to_bt(v, S, B):
    """[S·B, ...] in Megatron's order → [B·S, ...] in megago's."""
    return v.reshape(S, B, *v.shape[1:]).transpose(0, 1).reshape(S * B, *v.shape[1:])


def flat(t):
    return [float("%.9g" % v) for v in t.detach().reshape(-1).tolist()]


def case(name, micro=1, **kw):
    c = dict(B=2, T=5, C=8, E=6, topk=2, score="softmax", pre_softmax=False, bias=False, lb="aux_loss",
             aux_coeff=0.1, z_coeff=0.0, capacity=0.0, drop="probs", pad=False, loss_scale=1.0, rate=1e-3)
    c.update(kw)
    B, T, C, E = c["B"], c["T"], c["C"], c["E"]
    w = (torch.randn(E, C) * 0.5).requires_grad_()
    bias = (torch.randn(E) * 0.05) if c["bias"] else None
    r = Router(c, w, bias)
    AuxLossAutoScaler.scale = c["loss_scale"]
    out = {"name": name, "config": c, "micro": micro, "weight": flat(w)}
    if bias is not None:
        out["expert_bias"] = flat(bias)
    keys = ["x", "dy", "probs", "map", "dx"]
    for k in keys:
        out[k] = []
    for _ in range(micro):
        x = torch.randn(B, T, C).requires_grad_()  # megago's layout
        probs, rmap = r.forward(x.transpose(0, 1))  # Megatron's [S, B, C]
        dy = torch.randn(B * T, E)
        (sb_to_bt(probs, T, B) * dy).sum().backward()
        out["x"] += flat(x)
        out["dy"] += flat(dy)
        out["probs"] += flat(sb_to_bt(probs, T, B))
        out["map"] += [int(v) for v in sb_to_bt(rmap, T, B).reshape(-1).tolist()]
        out["dx"] += flat(x.grad)
    out["dweight"] = flat(w.grad)
    out["logged"] = r.logged
    out["tokens_per_expert"] = r.tokens_before_drop.tolist()
    if bias is not None:
        out["expert_bias_updated"] = flat(r.updated_expert_bias())
    return out


cases = [
    case("softmax_top2_aux"),
    case("softmax_pre_top2_seq_aux_scaled", pre_softmax=True, lb="seq_aux_loss", loss_scale=0.5),
    case("softmax_top1_z", topk=1, lb="none", z_coeff=0.01),
    case("sigmoid_top2_bias_global_aux", micro=2, score="sigmoid", bias=True, lb="global_aux_loss", z_coeff=0.01),
    case("sigmoid_top1_aux", topk=1, score="sigmoid", aux_coeff=0.2),
    case("sigmoid_top3_none", topk=3, score="sigmoid", lb="none"),
    case("capacity_probs", capacity=0.5, z_coeff=0.01),
    case("capacity_position", capacity=0.5, drop="position"),
    case("capacity_probs_pad", capacity=0.5, pad=True, score="sigmoid", bias=True),
    case("capacity_position_pad_pre", capacity=0.75, drop="position", pad=True, pre_softmax=True, lb="seq_aux_loss"),
    case("capacity_above_tokens_pad", capacity=4.0, pad=True),
]

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.json")
with open(path, "w") as f:
    json.dump({"generator": "nn/testdata/moe_router/gen.py", "torch": torch.__version__, "cases": cases}, f,
              separators=(",", ":"))
print(path, os.path.getsize(path), "bytes")
