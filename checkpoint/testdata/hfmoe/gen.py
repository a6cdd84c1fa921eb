#!/usr/bin/python3
"""Tiny Hugging Face mixture-of-experts checkpoints for megago's checkpoint package.

Run from anywhere with (Debian 12's python3-torch 1.13 and python3-numpy):

    /usr/bin/python3 gen.py      # rewrites mixtral/, qwen2_moe/, qwen3_moe/ and qwen3/ beside this file

Neither transformers nor safetensors is used: the tensors are drawn by name, in Hugging
Face's state-dict layout, and written with the hand-written safetensors writer of
../gen.py; the forward pass is written here from the architectures of transformers'
MixtralForCausalLM, Qwen2MoeForCausalLM and Qwen3MoeForCausalLM (eval mode, float32):

  - attention as LlamaForCausalLM (the reference of nn/testdata/golden/gen.py: RoPE
    rotate_half style, grouped-query attention, RMSNorm), with q, k and v biases
    (Qwen2-MoE) or an RMSNorm over each query and key head before RoPE (Qwen3-MoE's
    q_norm, k_norm);
  - the sparse MoE block (MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock,
    Qwen3MoeSparseMoeBlock): router logits x·gateᵀ [N, E]; softmax over the E experts in
    float32; the top num_experts_per_tok probabilities, renormalized to sum to 1 by
    Mixtral and by the Qwen models when norm_topk_prob; each expert
    down(silu(gate(x))·up(x)) (Mixtral's w2(silu(w1 x)·w3 x)) on its tokens, weighted by
    their probability and summed into the output (index_add);
  - Qwen2-MoE's shared expert, a SwiGLU MLP of shared_expert_intermediate_size on every
    token, scaled by sigmoid(x·shared_expert_gateᵀ) and added;
  - dense SwiGLU MLPs of intermediate_size in the layers without experts (Qwen-MoE:
    those in mlp_only_layers, or where (i+1) is not a multiple of decoder_sparse_step).

Every token's k-th and (k+1)-th largest router logits are checked to be apart by more
than MIN_MARGIN, so that float32 rounding in another implementation cannot change which
experts are chosen.

<model>/config.json          the Hugging Face config fields
<model>/model.safetensors    the weights (qwen2_moe: model-0000{1,2}-of-00002.safetensors
                             with model.safetensors.index.json, as save_pretrained shards)
<model>/reference.safetensors  input_ids (int64) [2, 8] and the float32 logits [2, 8, V]

  mixtral    2 layers, hidden 24, 4 heads of 6 in 2 KV groups, 4 experts of 32, top 2,
             untied, vocabulary 67
  qwen2_moe  3 layers (layer 1 dense: mlp_only_layers [1], intermediate 40), hidden 24,
             4 heads of 6 in 2 KV groups with q, k, v biases, 4 experts of 16, top 2
             without renormalization, a shared expert of 20 with its gate, untied,
             vocabulary 61, in two shards
  qwen3_moe  2 layers (decoder_sparse_step 2: layer 0 dense, intermediate 36), hidden 24,
             4 heads of 8 (head_dim ≠ hidden/heads) in 2 KV groups, q_norm and k_norm,
             4 experts of 12, top 2 renormalized, tied embeddings, vocabulary 59
  qwen3      qwen3_moe's model with dense MLPs of 36 in both layers (Qwen3ForCausalLM)
"""

import importlib.util
import json
import math
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ck = load("checkpoint_gen", os.path.join(HERE, "..", "gen.py"))  # write_safetensors, write_json
ref = ck.ref  # nn/testdata/golden/gen.py: Init, rms_norm, linear, llama_rope, rotate_half, ...

SEED = 20261201
MIN_MARGIN = 1e-3
B, T = 2, 8  # T even: megago's MoE splits the tokens over TP ranks along T

MIXTRAL = dict(architectures=["MixtralForCausalLM"], model_type="mixtral", vocab_size=67, hidden_size=24,
               intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               max_position_embeddings=32, rms_norm_eps=1e-5, rope_theta=1000000.0, hidden_act="silu",
               tie_word_embeddings=False, num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.02,
               output_router_logits=False, sliding_window=None, attention_dropout=0.0)

QWEN2_MOE = dict(architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe", vocab_size=61, hidden_size=24,
                 intermediate_size=40, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=32, rms_norm_eps=1e-6, rope_theta=1000000.0, hidden_act="silu",
                 tie_word_embeddings=False, use_sliding_window=False, sliding_window=32, max_window_layers=3,
                 decoder_sparse_step=1, mlp_only_layers=[1], moe_intermediate_size=16,
                 shared_expert_intermediate_size=20, num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                 output_router_logits=False, router_aux_loss_coef=0.001, attention_dropout=0.0)

QWEN3_MOE = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", vocab_size=59, hidden_size=24,
                 intermediate_size=36, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=8, max_position_embeddings=32, rms_norm_eps=1e-6, rope_theta=1000000.0,
                 hidden_act="silu", tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
                 sliding_window=None, max_window_layers=2, decoder_sparse_step=2, mlp_only_layers=[],
                 moe_intermediate_size=12, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
                 output_router_logits=False, router_aux_loss_coef=0.001, attention_dropout=0.0)


# The dense Qwen3 (Qwen3ForCausalLM) of the same shapes: megago imports it without the MoE
# layer, so its logits check the query/key norms and head_dim now.
QWEN3 = {k: v for k, v in QWEN3_MOE.items() if k not in (
    "decoder_sparse_step", "mlp_only_layers", "moe_intermediate_size", "num_experts", "num_experts_per_tok",
    "norm_topk_prob", "output_router_logits", "router_aux_loss_coef")}
QWEN3.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3")


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def sparse(cfg, i):
    """Whether layer i has the sparse MoE block (Qwen2MoeDecoderLayer's rule; Mixtral: always; Qwen3: never)."""
    if cfg["model_type"] in ("mixtral", "qwen3"):
        return cfg["model_type"] == "mixtral"
    return i not in cfg["mlp_only_layers"] and (i + 1) % cfg["decoder_sparse_step"] == 0


def moe_prefix(cfg, i):
    if cfg["model_type"] == "mixtral":
        return f"model.layers.{i}.block_sparse_moe."
    return f"model.layers.{i}.mlp."


def expert_names(cfg):
    """(gate, up, down) projection names of one expert."""
    if cfg["model_type"] == "mixtral":
        return "w1", "w3", "w2"
    return "gate_proj", "up_proj", "down_proj"


def num_experts(cfg):
    return cfg.get("num_local_experts") or cfg["num_experts"]


def expert_size(cfg):
    return cfg["intermediate_size"] if cfg["model_type"] == "mixtral" else cfg["moe_intermediate_size"]


def params(cfg, init):
    V, C, Fd = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
    NH, KVH, HS = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    t = cfg["model_type"]
    init.weight("model.embed_tokens.weight", V, C)
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        for n, rows in (("q", NH * HS), ("k", KVH * HS), ("v", KVH * HS)):
            init.linear(pre + f"self_attn.{n}_proj", rows, C, bias=t == "qwen2_moe")
        init.weight(pre + "self_attn.o_proj.weight", C, NH * HS)
        if t in ("qwen3", "qwen3_moe"):
            init.norm(pre + "self_attn.q_norm", HS, bias=False)
            init.norm(pre + "self_attn.k_norm", HS, bias=False)
        if sparse(cfg, i):
            h, E, Fe = moe_prefix(cfg, i), num_experts(cfg), expert_size(cfg)
            init.weight(h + "gate.weight", E, C)
            g, u, d = expert_names(cfg)
            for j in range(E):
                init.weight(h + f"experts.{j}.{g}.weight", Fe, C)
                init.weight(h + f"experts.{j}.{u}.weight", Fe, C)
                init.weight(h + f"experts.{j}.{d}.weight", C, Fe)
            if t == "qwen2_moe":
                Fs = cfg["shared_expert_intermediate_size"]
                init.weight(h + "shared_expert.gate_proj.weight", Fs, C)
                init.weight(h + "shared_expert.up_proj.weight", Fs, C)
                init.weight(h + "shared_expert.down_proj.weight", C, Fs)
                init.weight(h + "shared_expert_gate.weight", 1, C)
        else:
            init.weight(pre + "mlp.gate_proj.weight", Fd, C)
            init.weight(pre + "mlp.up_proj.weight", Fd, C)
            init.weight(pre + "mlp.down_proj.weight", C, Fd)
        init.norm(pre + "input_layernorm", C, bias=False)
        init.norm(pre + "post_attention_layernorm", C, bias=False)
    init.norm("model.norm", C, bias=False)
    if not cfg["tie_word_embeddings"]:
        init.weight("lm_head.weight", V, C)


def swiglu(x, gate, up, down):
    return ref.linear(F.silu(ref.linear(x, gate)) * ref.linear(x, up), down)


def moe_block(p, cfg, i, x, margins):
    """The sparse MoE block of layer i on x [B, T, C]."""
    B, T, C = x.shape
    h, (g, u, d) = moe_prefix(cfg, i), expert_names(cfg)
    E, k = num_experts(cfg), cfg["num_experts_per_tok"]
    xs = x.reshape(-1, C)  # [N, C]
    logits = ref.linear(xs, p[h + "gate.weight"])  # [N, E]
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)  # [N, E]
    ordered = logits.sort(dim=-1, descending=True).values
    margins.append((ordered[:, k - 1] - ordered[:, k]).min().item())
    weights, chosen = torch.topk(probs, k, dim=-1)  # [N, k]
    if cfg["model_type"] == "mixtral" or cfg["norm_topk_prob"]:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    y = torch.zeros_like(xs)
    for j in range(E):
        tok, slot = torch.where(chosen == j)
        if tok.numel() == 0:
            continue
        e = f"{h}experts.{j}."
        out = swiglu(xs[tok], p[e + g + ".weight"], p[e + u + ".weight"], p[e + d + ".weight"])
        y.index_add_(0, tok, out * weights[tok, slot, None])
    # The same sum computed densely, every expert on every token times its probability
    # (0 where not chosen): a check of the gather/index_add bookkeeping above.
    dense = torch.zeros(xs.shape[0], E).scatter(1, chosen, weights)  # [N, E]
    slow = sum(dense[:, j, None] * swiglu(xs, *(p[f"{h}experts.{j}.{n}.weight"] for n in (g, u, d))) for j in range(E))
    assert torch.allclose(y, slow, rtol=1e-5, atol=1e-6), (y - slow).abs().max()
    if cfg["model_type"] == "qwen2_moe":
        s = h + "shared_expert."
        shared = swiglu(xs, p[s + "gate_proj.weight"], p[s + "up_proj.weight"], p[s + "down_proj.weight"])
        y = y + torch.sigmoid(ref.linear(xs, p[h + "shared_expert_gate.weight"])) * shared
    return y.reshape(B, T, C)


def forward(p, cfg, ids, margins):
    B, T = ids.shape
    NH, KVH, HS, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg), cfg["rms_norm_eps"]
    h = F.embedding(ids, p["model.embed_tokens.weight"])  # [B, T, C]
    cos, sin = ref.llama_rope(dict(head_dim=HS, rope_theta=cfg["rope_theta"]), T, h.dtype)  # [T, HS]
    mask = ref.causal_bias(T, h.dtype)
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        x = ref.rms_norm(h, p[pre + "input_layernorm.weight"], eps)
        a = pre + "self_attn."
        q = ref.split_heads(ref.linear(x, p[a + "q_proj.weight"], p.get(a + "q_proj.bias")), NH)  # [B, NH, T, HS]
        k = ref.split_heads(ref.linear(x, p[a + "k_proj.weight"], p.get(a + "k_proj.bias")), KVH)  # [B, KVH, T, HS]
        v = ref.split_heads(ref.linear(x, p[a + "v_proj.weight"], p.get(a + "v_proj.bias")), KVH)
        if a + "q_norm.weight" in p:  # Qwen3: RMSNorm over each head's HS channels, before RoPE
            q = ref.rms_norm(q, p[a + "q_norm.weight"], eps)
            k = ref.rms_norm(k, p[a + "k_norm.weight"], eps)
        q = q * cos + ref.rotate_half(q) * sin
        k = k * cos + ref.rotate_half(k) * sin
        k = k.repeat_interleave(NH // KVH, dim=1)
        v = v.repeat_interleave(NH // KVH, dim=1)
        att = q @ k.transpose(-1, -2) / math.sqrt(HS) + mask  # [B, NH, T, T]
        h = h + ref.linear(ref.merge_heads(torch.softmax(att, dim=-1) @ v), p[a + "o_proj.weight"])
        x = ref.rms_norm(h, p[pre + "post_attention_layernorm.weight"], eps)
        if sparse(cfg, i):
            h = h + moe_block(p, cfg, i, x, margins)
        else:
            m = pre + "mlp."
            h = h + swiglu(x, p[m + "gate_proj.weight"], p[m + "up_proj.weight"], p[m + "down_proj.weight"])
    h = ref.rms_norm(h, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return ref.linear(h, head)  # [B, T, V]


def write_sharded(d, tensors, first):
    """save_pretrained's sharded layout: the tensors named in first in shard 1, the rest in shard 2."""
    shards = [{n: t for n, t in tensors.items() if n in first}, {n: t for n, t in tensors.items() if n not in first}]
    weight_map, total = {}, 0
    for s, part in enumerate(shards):
        name = f"model-{s + 1:05d}-of-{len(shards):05d}.safetensors"
        ck.write_safetensors(os.path.join(d, name), part, {"format": "pt"})
        for n, t in part.items():
            weight_map[n] = name
            total += t.numel() * t.element_size()
    ck.write_json(os.path.join(d, "model.safetensors.index.json"),
                  {"metadata": {"total_size": total}, "weight_map": weight_map})


def main():
    torch.set_default_dtype(torch.float32)
    for n, (name, cfg) in enumerate((("mixtral", MIXTRAL), ("qwen2_moe", QWEN2_MOE), ("qwen3_moe", QWEN3_MOE),
                                     ("qwen3", QWEN3))):
        init = ref.Init(SEED + 10 * n)
        params(cfg, init)
        p = init.p
        ids = torch.randint(0, cfg["vocab_size"], (B, T), generator=torch.Generator().manual_seed(SEED + 10 * n + 1))
        margins = []
        with torch.no_grad():
            logits = forward(p, cfg, ids, margins)
        assert min(margins, default=1) > MIN_MARGIN, (name, margins)
        d = os.path.join(HERE, name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        ck.write_json(os.path.join(d, "config.json"), cfg)
        if name == "qwen2_moe":
            write_sharded(d, p, {t for t in p if t.startswith(("model.embed_tokens.", "model.layers.0."))})
        else:
            ck.write_safetensors(os.path.join(d, "model.safetensors"), p, {"format": "pt"})
        ck.write_safetensors(os.path.join(d, "reference.safetensors"), {"input_ids": ids.to(torch.int64),
                                                                         "logits": logits.float()})
        print(f"{name}: {len(p)} tensors, logits {list(logits.shape)}, smallest top-k logit margin {min(margins, default=math.inf):.3g}")


if __name__ == "__main__":
    main()
