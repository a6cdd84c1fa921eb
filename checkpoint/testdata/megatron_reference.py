#!/usr/bin/python3
"""A Megatron-LM legacy checkpoint read as Megatron reads it, and its GPT run as Megatron runs it.

Written from Megatron-LM's sources (megatron/training/checkpointing.py,
tools/checkpoint/loader_core.py and saver_base.py, megatron/core/transformer: attention.py,
mlp.py, models/common/embeddings/rotary_pos_embedding.py and rope_utils.py,
fusions/fused_bias_gelu.py), not from megago. Needs Debian 12's python3-torch 1.13.

    /usr/bin/python3 megatron_reference.py CKPT_DIR REFERENCE [OUT]

reads the checkpoint in CKPT_DIR (latest_checkpointed_iteration.txt, then every
iter_N/mp_rank_TT[_PPP]/model_optim_rng.pt, with torch.load), merges its tensor- and
pipeline-parallel shards as Megatron's checkpoint loader does, runs the GPT its "args"
describe on the input_ids of the safetensors file REFERENCE and writes input_ids and the
logits [B, T, V] (float32; V the args' vocab_size, else the padded vocabulary) to OUT
(default: print the largest difference from REFERENCE's logits and fail above 1e-5 of
their largest magnitude).

Layout read (Megatron-core names; Transformer Engine's fused-norm names and _extra_state
entries accepted):
  column-parallel (dim 0): embedding.word_embeddings.weight, linear_qkv.{weight,bias},
                           linear_fc1.{weight,bias}, output_layer.weight
  row-parallel (dim 1):    linear_proj.weight, linear_fc2.weight
  replicated:              norms, position embeddings, linear_proj.bias, linear_fc2.bias
                           (every rank's copy must be equal)
  SwiGLU linear_fc1:       each rank holds [its gate rows; its up rows]
  pipeline stages:         layers numbered from 0 on each stage, stage s holding layers
                           s*L/PP ... (s+1)*L/PP-1; the last stage of a tied model holds
                           a copy of the word embedding as output_layer.weight (ignored)
"""

import json
import math
import os
import re
import struct
import sys

import torch
import torch.nn.functional as F

COLUMN = ("word_embeddings.weight", "linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight", "linear_fc1.bias",
          "output_layer.weight")
ROW = ("linear_proj.weight", "linear_fc2.weight")
TE_NAMES = {"self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
            "self_attention.linear_qkv.layer_norm_bias": "input_layernorm.bias",
            "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
            "mlp.linear_fc1.layer_norm_bias": "pre_mlp_layernorm.bias"}


def read_safetensors(path):
    dtypes = {"F32": torch.float32, "I64": torch.int64, "BF16": torch.bfloat16}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=dtypes[h["dtype"]]).reshape(h["shape"])
    return out


def load_ranks(ckpt_dir):
    """{(tp, pp): checkpoint dict} of the tracker's iteration."""
    with open(os.path.join(ckpt_dir, "latest_checkpointed_iteration.txt")) as f:
        it = f.read().strip()
    idir = os.path.join(ckpt_dir, "release" if it == "release" else f"iter_{int(it):07d}")
    ranks = {}
    for name in sorted(os.listdir(idir)):
        m = re.fullmatch(r"mp_rank_(\d\d)(?:_(\d\d\d))?", name)
        if m:
            ranks[(int(m.group(1)), int(m.group(2) or 0))] = torch.load(
                os.path.join(idir, name, "model_optim_rng.pt"), map_location="cpu")
    return ranks


def merge(ranks):
    """The whole model's state dict (local layers' names, layers numbered globally) and the args."""
    args = ranks[(0, 0)]["args"]
    tp, pp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size
    assert len(ranks) == tp * pp, (len(ranks), tp, pp)
    assert ranks[(0, 0)]["checkpoint_version"] >= 3.0
    per = args.num_layers // pp
    parts = {}
    for (r, s), ckpt in ranks.items():
        for name, t in ckpt["model"].items():
            if name.endswith("_extra_state"):
                assert t is None or (isinstance(t, torch.Tensor) and t.numel() == 0), name
                continue
            if name == "output_layer.weight" and not args.untie_embeddings_and_output_weights:
                continue  # the last stage's copy of the tied embedding
            m = re.fullmatch(r"decoder\.layers\.(\d+)\.(.*)", name)
            if m:
                sub = TE_NAMES.get(m.group(2), m.group(2))
                name = f"decoder.layers.{s * per + int(m.group(1))}.{sub}"
            parts.setdefault(name, {})[r] = t
    state = {}
    for name, by_rank in parts.items():
        ts = [by_rank[r] for r in range(tp)]
        if args.swiglu and name.endswith("linear_fc1.weight") or args.swiglu and name.endswith("linear_fc1.bias"):
            halves = [t.chunk(2) for t in ts]
            state[name] = torch.cat([h[0] for h in halves] + [h[1] for h in halves])
        elif name.endswith(COLUMN):
            state[name] = torch.cat(ts, 0)
        elif name.endswith(ROW):
            state[name] = torch.cat(ts, 1)
        else:
            for t in ts[1:]:
                assert torch.equal(t, ts[0]), f"replicated {name} differs between TP ranks"
            state[name] = ts[0]
    return state, args


def norm(x, w, b, args):
    eps = getattr(args, "norm_epsilon", None) or args.layernorm_epsilon
    if args.normalization == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    return F.layer_norm(x, x.shape[-1:], w, b, eps)


def inv_freq(args, dim):
    """RotaryEmbedding.__init__: dim = int(kv_channels * rotary_percent), Llama 3.1 scaling."""
    inv = 1.0 / (args.rotary_base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    if getattr(args, "use_rope_scaling", False):
        factor, low, high, old = args.rope_scaling_factor, 1, 4, 8192
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) * ~(wavelen > old / low)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rope(t, args):
    """_apply_rotary_pos_emb_bshd on t [B, T, heads, HS]: the first rot_dim channels rotate (halves)."""
    hs = t.shape[-1]
    dim = int(hs * args.rotary_percent) if args.rotary_percent < 1.0 else hs
    freqs = torch.outer(torch.arange(t.shape[1], dtype=torch.float64), inv_freq(args, dim))
    emb = torch.cat([freqs, freqs], -1)[None, :, None, :]  # [1, T, 1, dim]
    x, rest = t[..., :dim], t[..., dim:]
    x1, x2 = x.chunk(2, -1)
    rotated = torch.cat([-x2, x1], -1)
    return torch.cat([x * emb.cos() + rotated * emb.sin(), rest], -1)


def gelu(x, args):
    """MLP.forward: with biases and the bias-GeLU fusion (on by default), bias_gelu_impl is the
    tanh approximation; otherwise F.gelu (erf). --openai-gelu is not read by Megatron-core."""
    if args.add_bias_linear and getattr(args, "bias_gelu_fusion", True):
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))
    return F.gelu(x)


def linear(x, state, name, bias=True):
    y = x @ state[name + ".weight"].t()
    if bias and name + ".bias" in state:
        y = y + state[name + ".bias"]
    return y


def forward(state, args, ids):
    """Logits [B, T, Vp] of Megatron-core's GPTModel in float64."""
    state = {k: v.double() for k, v in state.items()}
    B, T = ids.shape
    NH, HS = args.num_attention_heads, args.kv_channels or args.hidden_size // args.num_attention_heads
    G = args.num_query_groups if args.group_query_attention else NH
    x = state["embedding.word_embeddings.weight"][ids]
    if args.position_embedding_type == "learned_absolute":
        x = x + state["embedding.position_embeddings.weight"][:T]
    causal = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(args.num_layers):
        p = f"decoder.layers.{i}."
        h = norm(x, state[p + "input_layernorm.weight"], state.get(p + "input_layernorm.bias"), args)
        qkv = linear(h, state, p + "self_attention.linear_qkv").view(B, T, G, (NH // G + 2) * HS)
        q, k, v = qkv.split([NH // G * HS, HS, HS], -1)
        q = q.reshape(B, T, NH, HS)
        if args.qk_layernorm:
            q = norm(q, state[p + "self_attention.q_layernorm.weight"], state.get(p + "self_attention.q_layernorm.bias"), args)
            k = norm(k, state[p + "self_attention.k_layernorm.weight"], state.get(p + "self_attention.k_layernorm.bias"), args)
        if args.position_embedding_type == "rope":
            q, k = rope(q, args), rope(k, args)
        k = k.repeat_interleave(NH // G, 2)  # query head h attends with group h // (NH/G)
        v = v.repeat_interleave(NH // G, 2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(HS) + causal
        a = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(B, T, NH * HS)
        x = x + linear(a, state, p + "self_attention.linear_proj")
        h = norm(x, state[p + "pre_mlp_layernorm.weight"], state.get(p + "pre_mlp_layernorm.bias"), args)
        h = linear(h, state, p + "mlp.linear_fc1")
        if args.swiglu:
            g, u = h.chunk(2, -1)
            h = F.silu(g) * u
        else:
            h = gelu(h, args)
        x = x + linear(h, state, p + "mlp.linear_fc2")
    x = norm(x, state["decoder.final_layernorm.weight"], state.get("decoder.final_layernorm.bias"), args)
    head = state["output_layer.weight"] if args.untie_embeddings_and_output_weights else state["embedding.word_embeddings.weight"]
    return x @ head.t()


def reference_logits(ckpt_dir, ids):
    state, args = merge(load_ranks(ckpt_dir))
    logits = forward(state, args, ids)
    vocab = getattr(args, "vocab_size", None) or logits.shape[-1]
    return logits[..., :vocab].float()


def main():
    ckpt_dir, ref_path = sys.argv[1], sys.argv[2]
    ref = read_safetensors(ref_path)
    logits = reference_logits(ckpt_dir, ref["input_ids"])
    if len(sys.argv) > 3:
        import importlib.util  # this directory's gen.py, for its safetensors writer
        spec = importlib.util.spec_from_file_location("checkpoint_gen", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen.py"))
        checkpoint_gen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(checkpoint_gen)
        checkpoint_gen.write_safetensors(sys.argv[3], {"input_ids": ref["input_ids"], "logits": logits})
        print(f"{sys.argv[3]}: logits {list(logits.shape)}")
        return
    logits = logits[..., :ref["logits"].shape[-1]]  # the tokenizer's vocabulary, if the args lack it
    scale = ref["logits"].abs().max().item()
    diff = (logits - ref["logits"]).abs().max().item()
    print(f"{ckpt_dir}: largest |logits - reference| = {diff:.3g} (largest |reference| {scale:.3g})")
    assert diff <= 1e-5 * scale, "the checkpoint does not give the reference logits"


if __name__ == "__main__":
    main()
