#!/usr/bin/python3
"""Reference logits of the Hugging Face models megago exported, generated with PyTorch.

Run from anywhere with (Debian 12's python3-torch 1.13 and python3-numpy):

    /usr/bin/python3 gen_export.py      # writes export/<model>/reference.safetensors,
                                        # and export/{llama,qwen2}/bin/

BERT:

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

import collections
import importlib.util
import json
import math
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


# ---------------------------------------------------------------------------
# Llama and Qwen2 (LlamaForCausalLM, Qwen2ForCausalLM)
# ---------------------------------------------------------------------------
#
# export/llama and export/qwen2 were written by megago's ExportHF (MEGAGO_UPDATE_EXPORT=1
# go test ./checkpoint -run TestHFRoundTrip): a Llama 3.1-style and a Qwen2-style model
# initialized by megago's generator. decoder_forward below is written from the two
# architectures as transformers' modeling_llama.py and modeling_qwen2.py define them, not
# from megago's exporter; it reads only config.json and the safetensors tensors by their
# Hugging Face names, and computes in float64, so the float32 logits it writes are the
# exact ones rounded once:
#
#   h = embed_tokens[ids]; per layer (pre-norm):
#     x = RMSNorm(h) = w * x / sqrt(mean(x^2) + rms_norm_eps)
#     q, k, v = x q_proj^T (+ q bias), x k_proj^T (+ k bias), x v_proj^T (+ v bias)
#       [num_attention_heads, num_key_value_heads, num_key_value_heads heads of head_dim];
#       biases on q, k and v in Qwen2, none in Llama (attention_bias false)
#     RoPE on q and k (rotate_half layout): inv_freq[j] = 1 / rope_theta^(2j/head_dim),
#       rescaled by rope_scaling "llama3" (Llama 3.1, _compute_llama3_parameters):
#       wavelength w = 2 pi / f; w < old/high_freq_factor: kept; w > old/low_freq_factor:
#       f / factor; between: (1 - s) f / factor + s f with s = (old / w - low) / (high - low)
#     query head i attends with key/value head i // (heads / kv_heads) (repeat_kv),
#       causal, scores scaled by 1/sqrt(head_dim)
#     h = h + o_proj(attention); h = h + down_proj(silu(gate_proj(x)) * up_proj(x)) with
#       x = RMSNorm(h) (post_attention_layernorm)
#   logits = RMSNorm(h) lm_head^T, lm_head = embed_tokens when tie_word_embeddings
#
# The same tensors are then saved as pytorch_model.bin files (torch.save of the state
# dict in transformers' module order), which the Go test imports:
#
#   export/llama/bin:  pytorch_model-00001-of-00002.bin, pytorch_model-00002-of-00002.bin
#                      and pytorch_model.bin.index.json (the layers split between them)
#   export/qwen2/bin:  pytorch_model.bin, whose lm_head.weight is the embedding's tensor
#                      (tied: torch.save stores one storage for both, as transformers'
#                      .bin files of tied models hold it)


def rope_inv_freq(cfg, hs):
    """[HS/2] float64 rotary frequencies, with Llama 3.1's rope_scaling if present."""
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    sc = cfg.get("rope_scaling")
    if sc is None:
        return inv
    assert sc["rope_type"] == "llama3", sc
    factor, low, high = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
    old = sc["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    s = (old / wavelen - low) / (high - low)
    smooth = (1 - s) * scaled / factor + s * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, smooth, scaled)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rms_norm(x, w, eps):
    return w * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def decoder_forward(p, cfg, ids):
    """logits [B, T, V] of LlamaForCausalLM or Qwen2ForCausalLM, in float64."""
    qwen2 = cfg["model_type"] == "qwen2"
    assert cfg["model_type"] in ("llama", "qwen2") and cfg["hidden_act"] == "silu", cfg
    assert qwen2 or not (cfg["attention_bias"] or cfg["mlp_bias"]), cfg
    assert not qwen2 or not cfg["use_sliding_window"], cfg
    nh, kvh, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    hs = cfg.get("head_dim") or cfg["hidden_size"] // nh
    B, T = ids.shape
    h = p["model.embed_tokens.weight"][ids]  # [B, T, C]
    ang = torch.arange(T, dtype=torch.float64)[:, None] * rope_inv_freq(cfg, hs)[None, :]  # [T, HS/2]
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()  # [T, HS]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def proj(x, name, heads):
        y = x @ p[name + ".weight"].t()
        if qwen2:
            y = y + p[name + ".bias"]
        return y.view(B, T, heads, hs).transpose(1, 2)  # [B, heads, T, HS]

    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        x = rms_norm(h, p[pre + "input_layernorm.weight"], eps)
        q = proj(x, pre + "self_attn.q_proj", nh)
        k = proj(x, pre + "self_attn.k_proj", kvh)
        v = proj(x, pre + "self_attn.v_proj", kvh)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(nh // kvh, dim=1), v.repeat_interleave(nh // kvh, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)  # [B, NH, T, T]
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, nh * hs)
        h = h + y @ p[pre + "self_attn.o_proj.weight"].t()
        x = rms_norm(h, p[pre + "post_attention_layernorm.weight"], eps)
        gate = x @ p[pre + "mlp.gate_proj.weight"].t()
        up = x @ p[pre + "mlp.up_proj.weight"].t()
        h = h + (torch.nn.functional.silu(gate) * up) @ p[pre + "mlp.down_proj.weight"].t()
    h = rms_norm(h, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return h @ head.t()


def module_order(names, layers):
    """The state dict's names in transformers' module order."""
    per_layer = ["self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight",
                 "self_attn.k_proj.bias", "self_attn.v_proj.weight", "self_attn.v_proj.bias",
                 "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                 "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"]
    order = ["model.embed_tokens.weight"]
    order += [f"model.layers.{i}.{n}" for i in range(layers) for n in per_layer]
    order += ["model.norm.weight", "lm_head.weight"]
    out = [n for n in order if n in names]
    assert sorted(out) == sorted(names), set(names) ^ set(out)
    return out


def write_bins(d, cfg, params, shards):
    """params as pytorch_model.bin (shards == 1) or in shards with pytorch_model.bin.index.json."""
    out = os.path.join(d, "bin")
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    with open(os.path.join(d, "config.json")) as f:
        cfg_text = f.read()
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(cfg_text)
    state = dict(params)
    if cfg["tie_word_embeddings"]:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]  # one storage, as a tied module's
    names = module_order(list(state), cfg["num_hidden_layers"])
    if shards == 1:
        torch.save(collections.OrderedDict((n, state[n]) for n in names), os.path.join(out, "pytorch_model.bin"))
        return
    cut = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map, total = {}, 0
    for i, part in enumerate(cut):
        fname = f"pytorch_model-{i + 1:05d}-of-{len(cut):05d}.bin"
        torch.save(collections.OrderedDict((n, state[n]) for n in part), os.path.join(out, fname))
        for n in part:
            weight_map[n] = fname
            total += state[n].numel() * state[n].element_size()
    with open(os.path.join(out, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")


def decoder(name, shards):
    d = os.path.join(HERE, "export", name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    params = read_safetensors(os.path.join(d, "model.safetensors"))
    assert all(t.dtype == torch.float32 for t in params.values())
    g = torch.Generator().manual_seed(20261201)
    ids = torch.randint(0, cfg["vocab_size"], (2, 16), generator=g)
    with torch.no_grad():
        logits = decoder_forward({k: v.double() for k, v in params.items()}, cfg, ids)
    write_safetensors(os.path.join(d, "reference.safetensors"), {"input_ids": ids, "logits": logits.float()})
    write_bins(d, cfg, params, shards)
    print(f"export/{name}: {len(params)} tensors read, logits {list(logits.shape)}, {shards} .bin file(s)")


if __name__ == "__main__":
    torch.set_default_dtype(torch.float32)
    bert()
    decoder("llama", 2)
    decoder("qwen2", 1)
