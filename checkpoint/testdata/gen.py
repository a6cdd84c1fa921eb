#!/usr/bin/python3
"""Reference checkpoints for megago's checkpoint package, generated with PyTorch.

Run from anywhere with (Debian 12's python3-torch 1.13 and python3-numpy):

    /usr/bin/python3 gen.py      # rewrites hf/ and megatron/ beside this file

The models are the hand-written Hugging Face-semantics references of
nn/testdata/golden/gen.py (imported, not copied): GPT2LMHeadModel, BertForPreTraining
and LlamaForCausalLM, each a function of a dict of parameters keyed by the exact Hugging
Face state-dict names. Neither transformers nor safetensors is installed (Debian has
neither), so the safetensors files are written by hand below, in the layout of the
reference implementation: an 8-byte little-endian header length, a compact JSON header
("__metadata__" first, then the tensors in data order, sorted by name) padded with spaces
to a multiple of 8 bytes, then the data.

hf/<model>/               gpt2, bert, llama, t5 (T5 v1.0)
    config.json          the Hugging Face config fields of the model
    model.safetensors    the weights as save_pretrained writes them (tied copies left out)
    reference.safetensors
        the inputs (int64) and the float32 outputs of the reference forward pass:
        logits [B, T, V] (BERT: the masked-LM scores) and, for BERT, seq_relationship [B, 2]

megatron/<model>/         a Megatron-LM legacy checkpoint of a GPT (Megatron-core names with
                          local or Transformer Engine layers, or the legacy model's)
    latest_checkpointed_iteration.txt
    iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt
        torch.save of {"args": argparse.Namespace, "checkpoint_version", "iteration",
        "model": the rank's state dict, "optimizer", "opt_param_scheduler", "rng_state"},
        with the rank's tensor-parallel shard of every tensor of its pipeline stage
    reference.safetensors  input_ids and the logits [B, T, V] of the whole model (the
                           vocabulary without Megatron's padding)

  gpt2_tp2     TP=2, PP=1, float32: GPT-2 (learned positions, LayerNorm, biases, tied
               embeddings, --openai-gelu), 4 heads of 6, vocabulary 50 padded to 64.
  llama_tp2_pp2  TP=2, PP=2, bfloat16: RoPE, RMSNorm, SwiGLU, no biases, untied output,
               grouped-query attention (4 heads in 2 groups), vocabulary 61 padded to 64.
               The reference logits use the bfloat16-rounded weights in float32.
  gpt2_te_tp2_pp2  gpt2_tp2's model at TP=2, PP=2 under Transformer Engine's names (the
               norms fused into linear_qkv and linear_fc1 as layer_norm_weight/_bias) with
               an empty uint8 _extra_state per TE module (te_state); no reference of its
               own: it gives gpt2_tp2's logits.
  gpt2_legacy_tp2_pp2  gpt2_tp2's model at TP=2, PP=2 as the legacy (pre-core) GPTModel
               saved it (legacy_model: language_model.{embedding,encoder},
               word_embeddings_for_head), --openai-gelu with the bias-GeLU fusion off:
               gpt2_tp2's logits.
  llama3_te_tp2_pp2  TP=2, PP=2, bfloat16, Transformer Engine's names: RoPE with base
               500000, Llama 3.1 rope scaling and rotary_percent 0.5, GQA with kv_channels 8
               (heads × kv_channels ≠ hidden), qk_layernorm, a QKV bias alone, RMSNorm,
               SwiGLU, untied. Its weights are drawn in Megatron's layout and its reference
               logits computed by megatron_reference.forward (Megatron's semantics) on the
               whole state.

megatron_reference.py, beside this file, reads any of these checkpoints (or one megago
exported) as Megatron does and computes its logits; run on a fixture with the fixture's
reference.safetensors it checks them.

Megatron-core layouts: linear_qkv.weight is [G*(NH/G + 2)*HS, C], per query group g its
NH/G query heads, then its key head, then its value head; TP ranks hold whole groups
(rows split contiguously). linear_fc1 of SwiGLU is [2F, C] per rank: the rank's slice of
the gate rows, then its slice of the up rows. Column-parallel tensors (word embeddings,
linear_qkv, linear_fc1, output_layer) split dim 0, row-parallel ones (linear_proj.weight,
linear_fc2.weight) dim 1; norms, position embeddings and row-parallel biases are
replicated. Under PP each stage numbers its layers from 0.
"""

import argparse
import collections
import json
import os
import random
import re
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "nn", "testdata", "golden"))
import gen as ref  # noqa: E402  (the hand-written Hugging Face reference models)

SEED = 4321


# ---------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------

ST_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.float16: "F16",
             torch.int32: "I32", torch.int64: "I64"}


def tensor_bytes(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: tensor}; data in name order."""
    header, data, at = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: metadata[k] for k in sorted(metadata)}
    for name in sorted(tensors):
        t = tensors[name]
        b = tensor_bytes(t)
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        data.append(b)
        at += len(b)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for b in data:
            f.write(b)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


# ---------------------------------------------------------------------------
# Hugging Face models
# ---------------------------------------------------------------------------

GPT2 = dict(ref.GPT2_CONFIG, vocab_size=67)
GPT2_HF = dict(architectures=["GPT2LMHeadModel"], model_type="gpt2", vocab_size=67, n_embd=24, n_layer=2, n_head=4,
               n_inner=96, n_positions=16, layer_norm_epsilon=1e-5, activation_function="gelu_new",
               tie_word_embeddings=True)

BERT = dict(ref.BERT_CONFIG)
BERT_HF = dict(architectures=["BertForPreTraining"], model_type="bert", vocab_size=71, hidden_size=24,
               num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, hidden_act="gelu",
               max_position_embeddings=16, type_vocab_size=2, layer_norm_eps=1e-12, hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1, position_embedding_type="absolute", tie_word_embeddings=True,
               pad_token_id=0)

LLAMA = dict(ref.LLAMA_CONFIG)
LLAMA_HF = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=73, hidden_size=24,
                intermediate_size=40, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=6,
                max_position_embeddings=32, rms_norm_eps=1e-6, rope_theta=10000.0, hidden_act="silu",
                tie_word_embeddings=False, attention_bias=False, mlp_bias=False)

T5 = dict(ref.T5_CONFIG)
T5_HF = dict(architectures=["T5ForConditionalGeneration"], model_type="t5", vocab_size=61, d_model=24, d_kv=6, d_ff=96,
             num_layers=2, num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=32,
             relative_attention_max_distance=128, dropout_rate=0.1, layer_norm_epsilon=1e-6, feed_forward_proj="relu",
             is_encoder_decoder=True, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1,
             decoder_start_token_id=0)

# name, reference config, Hugging Face config, params, forward, inputs, tied copies save_pretrained drops
HF_MODELS = [
    ("gpt2", GPT2, GPT2_HF, ref.gpt2_params, ref.gpt2_forward, ref.gpt2_inputs, ["lm_head.weight"]),
    ("bert", BERT, BERT_HF, ref.bert_params, ref.bert_forward, ref.bert_inputs,
     ["cls.predictions.decoder.weight", "cls.predictions.decoder.bias"]),
    ("llama", LLAMA, LLAMA_HF, ref.llama_params, ref.llama_forward, ref.llama_inputs, []),
    ("t5", T5, T5_HF, ref.t5_params, ref.t5_forward, ref.t5_inputs,
     ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"]),
]


def hf_models():
    for i, (name, cfg, hf_cfg, make_params, forward, make_inputs, _) in enumerate(HF_MODELS):
        for k in ("vocab_size",):
            assert cfg[k] == hf_cfg[k], (name, k)
        init = ref.Init(SEED + 10 * i)
        make_params(cfg, init)
        params = init.p
        inputs = make_inputs(cfg, torch.Generator().manual_seed(SEED + 10 * i + 1))
        with torch.no_grad():
            logits, _, out = forward(params, cfg, inputs)
        d = os.path.join(HERE, "hf", name)
        os.makedirs(d, exist_ok=True)
        write_json(os.path.join(d, "config.json"), hf_cfg)
        write_safetensors(os.path.join(d, "model.safetensors"), params, {"format": "pt"})
        refs = {k: v.to(torch.int64) for k, v in inputs.items() if v.dtype != torch.float32}
        refs["logits"] = logits.float()
        if "seq_relationship_logits" in out:
            refs["seq_relationship"] = out["seq_relationship_logits"].float()
        write_safetensors(os.path.join(d, "reference.safetensors"), refs)
        print(f"hf/{name}: {len(params)} tensors, logits {list(logits.shape)}")


# ---------------------------------------------------------------------------
# Megatron-LM legacy checkpoints
# ---------------------------------------------------------------------------


def qkv_per_group(q, k, v, groups):
    """q [G*per*HS, ...], k and v [G*HS, ...] -> Megatron's [G*(per+2)*HS, ...], per group q|k|v."""
    rest = q.shape[1:]
    q = q.reshape(groups, -1, *rest)
    k = k.reshape(groups, -1, *rest)
    v = v.reshape(groups, -1, *rest)
    return torch.cat([q, k, v], dim=1).reshape(-1, *rest)


def megatron_gpt2_state(p, cfg, padded):
    """Megatron-core names of a GPT-2 (HF names in p), whole model, vocabulary padded."""
    C, NH, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    g = torch.Generator().manual_seed(SEED + 77)
    wte = p["transformer.wte.weight"]
    pad = torch.randn(padded - wte.shape[0], C, generator=g) * 0.5  # Megatron initializes the padding too
    s = collections.OrderedDict()
    s["embedding.word_embeddings.weight"] = torch.cat([wte, pad])
    s["embedding.position_embeddings.weight"] = p["transformer.wpe.weight"]
    for i in range(L):
        h, m = f"transformer.h.{i}.", f"decoder.layers.{i}."
        s[m + "input_layernorm.weight"] = p[h + "ln_1.weight"]
        s[m + "input_layernorm.bias"] = p[h + "ln_1.bias"]
        w = p[h + "attn.c_attn.weight"].t()  # [3C, C], rows q | k | v
        b = p[h + "attn.c_attn.bias"]
        s[m + "self_attention.linear_qkv.weight"] = qkv_per_group(*w.split(C), NH)
        s[m + "self_attention.linear_qkv.bias"] = qkv_per_group(*b.split(C), NH)
        s[m + "self_attention.linear_proj.weight"] = p[h + "attn.c_proj.weight"].t()
        s[m + "self_attention.linear_proj.bias"] = p[h + "attn.c_proj.bias"]
        s[m + "pre_mlp_layernorm.weight"] = p[h + "ln_2.weight"]
        s[m + "pre_mlp_layernorm.bias"] = p[h + "ln_2.bias"]
        s[m + "mlp.linear_fc1.weight"] = p[h + "mlp.c_fc.weight"].t()
        s[m + "mlp.linear_fc1.bias"] = p[h + "mlp.c_fc.bias"]
        s[m + "mlp.linear_fc2.weight"] = p[h + "mlp.c_proj.weight"].t()
        s[m + "mlp.linear_fc2.bias"] = p[h + "mlp.c_proj.bias"]
    s["decoder.final_layernorm.weight"] = p["transformer.ln_f.weight"]
    s["decoder.final_layernorm.bias"] = p["transformer.ln_f.bias"]
    return s


def megatron_llama_state(p, cfg, padded):
    C, NH, G, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    g = torch.Generator().manual_seed(SEED + 78)
    s = collections.OrderedDict()
    emb = p["model.embed_tokens.weight"]
    s["embedding.word_embeddings.weight"] = torch.cat([emb, torch.randn(padded - emb.shape[0], C, generator=g)])
    for i in range(L):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        s[m + "input_layernorm.weight"] = p[h + "input_layernorm.weight"]
        a = h + "self_attn."
        s[m + "self_attention.linear_qkv.weight"] = qkv_per_group(
            p[a + "q_proj.weight"], p[a + "k_proj.weight"], p[a + "v_proj.weight"], G)
        s[m + "self_attention.linear_proj.weight"] = p[a + "o_proj.weight"]
        s[m + "pre_mlp_layernorm.weight"] = p[h + "post_attention_layernorm.weight"]
        # linear_fc1 [2F, C]: gate then up (split per TP rank when sharding, see shard()).
        s[m + "mlp.linear_fc1.weight"] = torch.cat([p[h + "mlp.gate_proj.weight"], p[h + "mlp.up_proj.weight"]])
        s[m + "mlp.linear_fc2.weight"] = p[h + "mlp.down_proj.weight"]
    s["decoder.final_layernorm.weight"] = p["model.norm.weight"]
    out = p["lm_head.weight"]
    s["output_layer.weight"] = torch.cat([out, torch.randn(padded - out.shape[0], C, generator=g)])
    return s


COLUMN = ("embedding.word_embeddings.weight", "linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight",
          "linear_fc1.bias", "output_layer.weight")
ROW = ("linear_proj.weight", "linear_fc2.weight")


def shard(name, t, tp, r, swiglu):
    """Rank r's part of the whole tensor t of Megatron name."""
    if swiglu and name.endswith("linear_fc1.weight"):
        gate, up = t.chunk(2)
        return torch.cat([gate.chunk(tp)[r], up.chunk(tp)[r]])
    if name.endswith(COLUMN):
        return t.chunk(tp, dim=0)[r].clone()
    if name.endswith(ROW):
        return t.chunk(tp, dim=1)[r].clone()
    return t.clone()


def stage_of(name, layers_per_stage, pp):
    """The pipeline stage holding name, and its name on that stage."""
    if name.startswith("embedding."):
        return 0, name
    if name.startswith("decoder.layers."):
        i = int(name.split(".")[2])
        rest = name.split(".", 3)[3]
        return i // layers_per_stage, f"decoder.layers.{i % layers_per_stage}.{rest}"
    return pp - 1, name


def te_state(state):
    """The state of a local-layer model under Transformer Engine's names: the layer norms fused into
    linear_qkv and linear_fc1 (layer_norm_weight, layer_norm_bias) and an empty uint8 _extra_state
    after each Transformer Engine module, as TE writes it when FP8 is off."""
    out = collections.OrderedDict()
    extra = lambda: torch.empty(0, dtype=torch.uint8)  # noqa: E731
    for k, v in state.items():
        m = re.fullmatch(r"(decoder\.layers\.\d+\.)(.*)", k)
        if not m:
            out[k] = v
            continue
        p, sub = m.groups()
        if sub.startswith("input_layernorm."):
            out[p + "self_attention.core_attention._extra_state"] = extra()
            out[p + "self_attention.linear_qkv.layer_norm_" + sub.split(".")[1]] = v
        elif sub.startswith("pre_mlp_layernorm."):
            out[p + "mlp.linear_fc1.layer_norm_" + sub.split(".")[1]] = v
        else:
            out[k] = v
    for k in list(out):
        m = re.fullmatch(r"(decoder\.layers\.\d+\..*\.linear_(?:qkv|proj|fc1|fc2))\.weight", k)
        if m:
            out[m.group(1) + "._extra_state"] = extra()
    return out


LEGACY_NAMES = [("input_layernorm.", "input_norm."), ("self_attention.linear_qkv.", "self_attention.query_key_value."),
                ("self_attention.linear_proj.", "self_attention.dense."), ("pre_mlp_layernorm.", "post_attention_norm."),
                ("mlp.linear_fc1.", "mlp.dense_h_to_4h."), ("mlp.linear_fc2.", "mlp.dense_4h_to_h.")]


def legacy_model(model):
    """A stage's Megatron-core state dict as the legacy GPTModel's state_dict_for_save_checkpoint
    nests it: language_model.{embedding.{word,position}_embeddings, encoder, output_layer} and, on
    the last stage of a pipelined tied model, word_embeddings_for_head."""
    lm, out = {}, {}
    for k, v in model.items():
        if k.startswith("embedding."):
            _, table, w = k.split(".")
            lm.setdefault("embedding", {}).setdefault(table, collections.OrderedDict())[w] = v
        elif k.startswith("decoder.final_layernorm."):
            lm.setdefault("encoder", collections.OrderedDict())["final_norm." + k.split(".")[-1]] = v
        elif k.startswith("decoder.layers."):
            i, sub = k.split(".", 3)[2:]
            for core, legacy in LEGACY_NAMES:
                sub = sub.replace(core, legacy)
            lm.setdefault("encoder", collections.OrderedDict())[f"layers.{i}.{sub}"] = v
        elif k == "output_layer.weight":
            out["word_embeddings_for_head"] = collections.OrderedDict(weight=v)
        else:
            raise KeyError(k)
    out["language_model"] = lm
    return out


def write_megatron(name, state, args, iteration, dtype, legacy=False):
    d = os.path.join(HERE, "megatron", name)
    tp, pp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size
    per = args.num_layers // pp
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    for s in range(pp):
        for r in range(tp):
            model = collections.OrderedDict()
            for k, v in state.items():
                st, local = stage_of(k, per, pp)
                if st == s and k.endswith("_extra_state"):
                    model[local] = v
                elif st == s:
                    model[local] = shard(k, v, tp, r, args.swiglu).to(dtype)
            if pp > 1 and s == pp - 1 and not args.untie_embeddings_and_output_weights:
                model["output_layer.weight"] = shard("output_layer.weight", state["embedding.word_embeddings.weight"],
                                                     tp, r, False).to(dtype)
            rank_dir = f"mp_rank_{r:02d}" if pp == 1 else f"mp_rank_{r:02d}_{s:03d}"
            path = os.path.join(d, f"iter_{iteration:07d}", rank_dir, "model_optim_rng.pt")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            first = next(iter(model.values()))
            ckpt = {
                "args": args,
                "checkpoint_version": 3.0,
                "iteration": iteration,
                "model": legacy_model(model) if legacy else model,
                "optimizer": {"optimizer": {"state": {0: {"step": torch.tensor(float(iteration)),
                                                          "exp_avg": torch.zeros_like(first, dtype=torch.float32),
                                                          "exp_avg_sq": torch.zeros_like(first, dtype=torch.float32)}},
                                            "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.95), "params": [0]}]},
                              "fp32_from_fp16_params": [[first.float()]]},
                "opt_param_scheduler": {"max_lr": 1e-4, "num_steps": iteration * 8},
                "rng_state": [{"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
                               "torch_rng_state": torch.get_rng_state(), "cuda_rng_state": torch.get_rng_state(),
                               "rng_tracker_states": {"model-parallel-rng": torch.get_rng_state()}}],
                "num_floating_point_operations_so_far": 12345,
            }
            torch.save(ckpt, path)
    with open(os.path.join(d, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))


def megatron_args(**kw):
    base = dict(
        num_layers=2, hidden_size=24, ffn_hidden_size=96, num_attention_heads=4, kv_channels=6,
        group_query_attention=False, num_query_groups=1, max_position_embeddings=16,
        position_embedding_type="learned_absolute", normalization="LayerNorm", norm_epsilon=1e-5,
        layernorm_epsilon=1e-5, swiglu=False, openai_gelu=False, squared_relu=False, add_bias_linear=True,
        add_qkv_bias=False, untie_embeddings_and_output_weights=False, apply_residual_connection_post_layernorm=False,
        qk_layernorm=False, rotary_base=10000, rotary_percent=1.0, rotary_interleaved=False,
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1, virtual_pipeline_model_parallel_size=None,
        make_vocab_size_divisible_by=128, padded_vocab_size=None, vocab_size=None, params_dtype=torch.float32,
        fp16=False, bf16=False, transformer_impl="local", tokenizer_type="GPT2BPETokenizer", seq_length=16,
        iteration=0, consumed_train_samples=0, lr=1e-4, seed=1234, use_distributed_optimizer=False,
    )
    base.update(kw)
    return argparse.Namespace(**base)


def megatron_models():
    # GPT-2: TP=2, float32, tied, OpenAI (tanh) GeLU so that the reference is GPT-2's.
    cfg = dict(ref.GPT2_CONFIG, vocab_size=50)
    init = ref.Init(SEED + 100)
    ref.gpt2_params(cfg, init)
    p = init.p
    inputs = ref.gpt2_inputs(cfg, torch.Generator().manual_seed(SEED + 101))
    with torch.no_grad():
        logits, _, _ = ref.gpt2_forward(p, cfg, inputs)
    args = megatron_args(tensor_model_parallel_size=2, make_vocab_size_divisible_by=16, padded_vocab_size=64,
                         openai_gelu=True, iteration=7, consumed_train_samples=56)
    write_megatron("gpt2_tp2", megatron_gpt2_state(p, cfg, 64), args, 7, torch.float32)
    write_safetensors(os.path.join(HERE, "megatron", "gpt2_tp2", "reference.safetensors"),
                      {"input_ids": inputs["input_ids"].to(torch.int64), "logits": logits.float()})
    print(f"megatron/gpt2_tp2: logits {list(logits.shape)}")

    # The same GPT-2 under Transformer Engine's names, with TE's empty _extra_state tensors, at
    # TP=2 x PP=2 (the last stage holds the tied output layer's copy): gpt2_tp2's logits.
    args_te = argparse.Namespace(**dict(vars(args), pipeline_model_parallel_size=2,
                                        transformer_impl="transformer_engine"))
    write_megatron("gpt2_te_tp2_pp2", te_state(megatron_gpt2_state(p, cfg, 64)), args_te, 7, torch.float32)
    print("megatron/gpt2_te_tp2_pp2: gpt2_tp2's logits")

    # The same GPT-2 as the legacy (pre-core) model saved it, nested under language_model, at
    # TP=2 x PP=2 (word_embeddings_for_head on the last stage), with --openai-gelu and the bias-GeLU
    # fusion off, so that its GeLU is tanh only by openai_gelu: gpt2_tp2's logits.
    args_legacy = argparse.Namespace(**dict(vars(args), pipeline_model_parallel_size=2, bias_gelu_fusion=False))
    write_megatron("gpt2_legacy_tp2_pp2", megatron_gpt2_state(p, cfg, 64), args_legacy, 7, torch.float32, legacy=True)
    print("megatron/gpt2_legacy_tp2_pp2: gpt2_tp2's logits")

    # Llama-style: TP=2, PP=2, bfloat16; the reference uses the rounded weights.
    cfg = dict(ref.LLAMA_CONFIG, vocab_size=61, num_hidden_layers=4)
    init = ref.Init(SEED + 200)
    ref.llama_params(cfg, init)
    p = {k: v.to(torch.bfloat16).float() for k, v in init.p.items()}
    inputs = ref.llama_inputs(cfg, torch.Generator().manual_seed(SEED + 201))
    with torch.no_grad():
        logits, _, _ = ref.llama_forward(p, cfg, inputs)
    args = megatron_args(num_layers=4, ffn_hidden_size=cfg["intermediate_size"], group_query_attention=True,
                         num_query_groups=cfg["num_key_value_heads"], max_position_embeddings=cfg["max_position_embeddings"],
                         position_embedding_type="rope", normalization="RMSNorm", norm_epsilon=cfg["rms_norm_eps"],
                         swiglu=True, add_bias_linear=False, untie_embeddings_and_output_weights=True,
                         tensor_model_parallel_size=2, pipeline_model_parallel_size=2, make_vocab_size_divisible_by=16,
                         padded_vocab_size=64, vocab_size=61, rotary_base=int(cfg["rope_theta"]),
                         params_dtype=torch.bfloat16, bf16=True, iteration=5, consumed_train_samples=40,
                         use_distributed_optimizer=True)
    write_megatron("llama_tp2_pp2", megatron_llama_state(p, cfg, 64), args, 5, torch.bfloat16)
    write_safetensors(os.path.join(HERE, "megatron", "llama_tp2_pp2", "reference.safetensors"),
                      {"input_ids": inputs["input_ids"].to(torch.int64), "logits": logits.float()})
    print(f"megatron/llama_tp2_pp2: logits {list(logits.shape)}")
    llama3_megatron()


def llama3_megatron():
    """llama3_te_tp2_pp2: a Llama-3-style Megatron-core GPT under Transformer Engine's names, TP=2 x
    PP=2, bfloat16: RMSNorm, SwiGLU, RoPE with base 500000, Llama 3.1 rope scaling (factor 8) and
    rotary_percent 0.5, grouped-query attention (4 heads of 8 in 2 groups, kv_channels 8 with hidden
    24), qk_layernorm, a QKV bias without other biases, untied output, vocabulary 61 padded to 64.
    The weights are drawn in Megatron's layout; the reference logits are megatron_reference.forward
    of the whole (unsharded) state, rounded to bfloat16 as stored."""
    import megatron_reference as mref
    C, NH, G, HS, F_, L, V, Vp = 24, 4, 2, 8, 40, 2, 61, 64
    g = torch.Generator().manual_seed(SEED + 300)
    rnd = lambda *shape, std=0.2: (torch.randn(*shape, generator=g) * std).to(torch.bfloat16).float()  # noqa: E731
    norm_w = lambda n: (1 + rnd(n, std=0.1)).to(torch.bfloat16).float()  # noqa: E731
    s = collections.OrderedDict()
    s["embedding.word_embeddings.weight"] = rnd(Vp, C, std=0.5)
    for i in range(L):
        m = f"decoder.layers.{i}."
        s[m + "input_layernorm.weight"] = norm_w(C)
        s[m + "self_attention.linear_proj.weight"] = rnd(C, NH * HS)
        s[m + "self_attention.linear_qkv.weight"] = rnd(G * (NH // G + 2) * HS, C)
        s[m + "self_attention.linear_qkv.bias"] = rnd(G * (NH // G + 2) * HS, std=0.1)
        s[m + "self_attention.q_layernorm.weight"] = norm_w(HS)
        s[m + "self_attention.k_layernorm.weight"] = norm_w(HS)
        s[m + "pre_mlp_layernorm.weight"] = norm_w(C)
        s[m + "mlp.linear_fc1.weight"] = rnd(2 * F_, C)  # gate rows, then up rows
        s[m + "mlp.linear_fc2.weight"] = rnd(C, F_)
    s["decoder.final_layernorm.weight"] = norm_w(C)
    s["output_layer.weight"] = rnd(Vp, C, std=0.5)
    args = megatron_args(num_layers=L, hidden_size=C, ffn_hidden_size=F_, num_attention_heads=NH, kv_channels=HS,
                         group_query_attention=True, num_query_groups=G, max_position_embeddings=32,
                         position_embedding_type="rope", rotary_base=500000, rotary_percent=0.5, use_rope_scaling=True,
                         rope_scaling_factor=8.0, normalization="RMSNorm", norm_epsilon=1e-5, swiglu=True,
                         add_bias_linear=False, add_qkv_bias=True, qk_layernorm=True, bias_gelu_fusion=False,
                         untie_embeddings_and_output_weights=True, tensor_model_parallel_size=2,
                         pipeline_model_parallel_size=2, make_vocab_size_divisible_by=16, padded_vocab_size=Vp,
                         vocab_size=V, params_dtype=torch.bfloat16, bf16=True, transformer_impl="transformer_engine",
                         iteration=3, consumed_train_samples=24)
    ids = torch.randint(0, V, (2, 12), generator=g)
    with torch.no_grad():
        logits = mref.forward(s, args, ids)[..., :V].float()
    write_megatron("llama3_te_tp2_pp2", te_state(s), args, 3, torch.bfloat16)
    write_safetensors(os.path.join(HERE, "megatron", "llama3_te_tp2_pp2", "reference.safetensors"),
                      {"input_ids": ids.to(torch.int64), "logits": logits})
    print(f"megatron/llama3_te_tp2_pp2: logits {list(logits.shape)}")


def main():
    torch.set_default_dtype(torch.float32)
    hf_models()
    megatron_models()


if __name__ == "__main__":
    main()
