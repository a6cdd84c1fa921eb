#!/usr/bin/python3
"""Golden values for megago's nn models, generated with PyTorch.

Run from this directory (or anywhere) with:

    /usr/bin/python3 gen.py          # writes gpt2.json bert.json t5.json llama.json beside this file

Each model is written by hand, as a function of a dict of parameters keyed by
the exact Hugging Face state-dict names, to the semantics of the Hugging Face
class named in its "config" (GPT2LMHeadModel, BertForPreTraining,
T5ForConditionalGeneration with T5 v1.0 settings, LlamaForCausalLM). The
transformers package is not used. Dropout is off (eval semantics) but
gradients are computed. Everything is float32 on the CPU and seeded, so a
rerun writes the same files (tested with torch 1.13.1, numpy 1.24).

One JSON file per model:

    "model"       short name ("gpt2", ...)
    "config"      every hyperparameter, named as in the Hugging Face config class
    "inputs"      {name: {"shape": [...], "data": [ints]}}           (row-major)
    "param_names" parameter names in state-dict order
    "params"      {hf_name: {"shape": [...], "data": [float32 values]}}
    "aliases"     {hf_name: canonical hf_name} for tied tensors that a Hugging
                  Face state dict also holds under another name (not repeated in params)
    "logits"      {"shape": [...], "data": [...]}
    "loss"        float32 scalar
    "grads"       {hf_name: {shape, data}} d loss / d param for every param;
                  a tied tensor's grad is the sum over all of its uses
    "outputs"     other float tensors (intermediate activations, loss parts)
    "tables"      other int tensors (T5 relative-position buckets)
    "notes"       conventions, in words

Floats are written as the shortest decimal that reads back as the same
float32 (numpy's repr of np.float32), so parsing with float32 precision
recovers the exact bits.

Self-checks run before anything is written (the script fails otherwise):
every gradient is nonzero somewhere; a tied tensor's grad equals the sum of
the grads of its uses computed separately; central finite differences on a
float64 copy of each model agree with float64 autograd at a few entries; the
float32 grads agree with the float64 grads; hand-written GeLU/LayerNorm match
torch's.
"""

import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 1234
IGNORE = -100

# Init scales: larger than the usual 0.02 so that no gradient is tiny.
W_STD = 0.2  # linear / conv / embedding weights
B_STD = 0.1  # biases
NORM_W_STD = 0.1  # norm weights are 1 + normal(0, NORM_W_STD)
NORM_B_STD = 0.1  # norm biases


# ---------------------------------------------------------------------------
# Building blocks (each the Hugging Face computation)
# ---------------------------------------------------------------------------


def linear(x, w, b=None):
    """nn.Linear: w is [out, in]; y = x @ w.T + b."""
    y = x @ w.t()
    return y if b is None else y + b


def conv1d(x, w, b):
    """GPT-2 Conv1D: w is [in, out]; y = x @ w + b."""
    return x @ w + b


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased variance
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    """T5LayerNorm / LlamaRMSNorm: no mean subtraction, no bias."""
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def gelu_new(x):
    """GPT-2 "gelu_new": the tanh approximation."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_erf(x):
    """BERT "gelu": exact, with erf."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def split_heads(x, nh):
    """[B, T, nh*hs] -> [B, nh, T, hs]."""
    b, t, c = x.shape
    return x.view(b, t, nh, c // nh).transpose(1, 2)


def merge_heads(x):
    """[B, nh, T, hs] -> [B, T, nh*hs]."""
    b, nh, t, hs = x.shape
    return x.transpose(1, 2).reshape(b, t, nh * hs)


def causal_bias(t, dtype):
    """[1, 1, T, T]: 0 where key <= query, finfo.min above the diagonal."""
    keep = torch.tril(torch.ones(t, t, dtype=torch.bool))
    bias = torch.zeros(t, t, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)
    return bias[None, None]


def padding_bias(mask, dtype):
    """[B, Tk] with 1 = attend -> [B, 1, 1, Tk] additive: (1 - mask) * finfo.min."""
    return (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def ce(logits, labels):
    """Mean cross entropy over positions whose label is not IGNORE."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE)


# ---------------------------------------------------------------------------
# Parameter initialisation
# ---------------------------------------------------------------------------


class Init:
    """Creates parameters in state-dict order from one generator."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)
        self.p = {}

    def _normal(self, shape, std):
        return torch.randn(*shape, generator=self.g, dtype=torch.float32) * std

    def weight(self, name, *shape, std=W_STD):
        self.p[name] = self._normal(shape, std)

    def bias(self, name, n):
        self.p[name] = self._normal((n,), B_STD)

    def norm(self, name, n, bias=True):
        self.p[name + ".weight"] = 1.0 + self._normal((n,), NORM_W_STD)
        if bias:
            self.p[name + ".bias"] = self._normal((n,), NORM_B_STD)

    def linear(self, name, n_out, n_in, bias=True):
        self.weight(name + ".weight", n_out, n_in)
        if bias:
            self.bias(name + ".bias", n_out)


# ---------------------------------------------------------------------------
# GPT-2 (GPT2LMHeadModel)
# ---------------------------------------------------------------------------

GPT2_CONFIG = dict(
    model_type="gpt2", hf_class="GPT2LMHeadModel",
    vocab_size=67, n_positions=16, n_embd=24, n_layer=2, n_head=4, n_inner=96,
    activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=True,
    attn_scale="1/sqrt(head_dim)", dropout=0.0,
)


def gpt2_params(cfg, init):
    V, P, C, L = cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"], cfg["n_layer"]
    Fh = cfg["n_inner"]
    init.weight("transformer.wte.weight", V, C)
    init.weight("transformer.wpe.weight", P, C)
    for i in range(L):
        h = f"transformer.h.{i}."
        init.norm(h + "ln_1", C)
        init.weight(h + "attn.c_attn.weight", C, 3 * C)  # Conv1D: [in, out]
        init.bias(h + "attn.c_attn.bias", 3 * C)
        init.weight(h + "attn.c_proj.weight", C, C)
        init.bias(h + "attn.c_proj.bias", C)
        init.norm(h + "ln_2", C)
        init.weight(h + "mlp.c_fc.weight", C, Fh)
        init.bias(h + "mlp.c_fc.bias", Fh)
        init.weight(h + "mlp.c_proj.weight", Fh, C)
        init.bias(h + "mlp.c_proj.bias", C)
    init.norm("transformer.ln_f", C)


def gpt2_forward(p, cfg, inp, head_weight=None):
    ids = inp["input_ids"]
    B, T = ids.shape
    C, NH, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    HS = C // NH
    out = {}
    h = F.embedding(ids, p["transformer.wte.weight"]) + p["transformer.wpe.weight"][:T][None]  # [B, T, C]
    mask = causal_bias(T, h.dtype)
    for i in range(cfg["n_layer"]):
        pre = f"transformer.h.{i}."
        a = layer_norm(h, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], eps)
        qkv = conv1d(a, p[pre + "attn.c_attn.weight"], p[pre + "attn.c_attn.bias"])  # [B, T, 3C]
        q, k, v = (split_heads(z, NH) for z in qkv.split(C, dim=2))  # [B, NH, T, HS]
        att = q @ k.transpose(-1, -2) / math.sqrt(HS) + mask  # [B, NH, T, T]
        y = merge_heads(torch.softmax(att, dim=-1) @ v)  # [B, T, C]
        h = h + conv1d(y, p[pre + "attn.c_proj.weight"], p[pre + "attn.c_proj.bias"])
        m = layer_norm(h, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], eps)
        m = gelu_new(conv1d(m, p[pre + "mlp.c_fc.weight"], p[pre + "mlp.c_fc.bias"]))  # [B, T, 4C]
        h = h + conv1d(m, p[pre + "mlp.c_proj.weight"], p[pre + "mlp.c_proj.bias"])
    h = layer_norm(h, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps)
    out["last_hidden_state"] = h
    w = p["transformer.wte.weight"] if head_weight is None else head_weight
    logits = h @ w.t()  # [B, T, V]
    loss = ce(logits, inp["labels"])
    return logits, loss, out


def gpt2_inputs(cfg, g):
    B, T, V = 2, 5, cfg["vocab_size"]
    tok = torch.randint(0, V, (B, T + 1), generator=g)
    labels = tok[:, 1:].clone()
    labels[0, 1] = IGNORE
    labels[1, 3] = IGNORE
    labels[1, 4] = IGNORE
    return {"input_ids": tok[:, :T].clone(), "labels": labels}


GPT2_NOTES = [
    "labels[b,t] is the target of position t (already shifted): loss = mean over t with labels != -100 of "
    "CE(logits[b,t], labels[b,t]). Hugging Face's GPT2LMHeadModel(labels=L) shifts internally; here "
    "labels = next token of input_ids, with some set to -100.",
    "lm_head.weight is tied to transformer.wte.weight: logits = ln_f(h) @ wte.T (no bias); the wte grad is "
    "the sum of the embedding-lookup grad and the lm_head grad.",
    "c_attn/c_proj/c_fc are Conv1D with weight [in, out]: y = x @ W + b. c_attn output columns are "
    "q (0:C) | k (C:2C) | v (2C:3C), each with heads contiguous (head h is columns h*HS:(h+1)*HS).",
    "Causal attention, scale 1/sqrt(HS); masked scores set to finfo(float32).min; GeLU tanh approximation; "
    "LayerNorm eps 1e-5 with biased variance; pre-LN blocks; final ln_f.",
    "Only rows 0..T-1 of wpe get gradient (positions start at 0).",
    "The key part of c_attn.bias (columns C:2C) has zero gradient in exact arithmetic (adding a constant to "
    "every score of a query row does not change the softmax); the stored values (~1e-8) are float32 "
    "rounding noise, so compare grads with an absolute tolerance relative to the tensor's scale.",
]


# ---------------------------------------------------------------------------
# BERT (BertForPreTraining)
# ---------------------------------------------------------------------------

BERT_CONFIG = dict(
    model_type="bert", hf_class="BertForPreTraining",
    vocab_size=71, max_position_embeddings=16, type_vocab_size=2, hidden_size=24,
    num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, hidden_act="gelu",
    layer_norm_eps=1e-12, tie_word_embeddings=True, attn_scale="1/sqrt(head_dim)",
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0,
)


def bert_params(cfg, init):
    V, P, C = cfg["vocab_size"], cfg["max_position_embeddings"], cfg["hidden_size"]
    Fh, L = cfg["intermediate_size"], cfg["num_hidden_layers"]
    init.weight("bert.embeddings.word_embeddings.weight", V, C)
    init.weight("bert.embeddings.position_embeddings.weight", P, C)
    init.weight("bert.embeddings.token_type_embeddings.weight", cfg["type_vocab_size"], C)
    init.norm("bert.embeddings.LayerNorm", C)
    for i in range(L):
        pre = f"bert.encoder.layer.{i}."
        init.linear(pre + "attention.self.query", C, C)
        init.linear(pre + "attention.self.key", C, C)
        init.linear(pre + "attention.self.value", C, C)
        init.linear(pre + "attention.output.dense", C, C)
        init.norm(pre + "attention.output.LayerNorm", C)
        init.linear(pre + "intermediate.dense", Fh, C)
        init.linear(pre + "output.dense", C, Fh)
        init.norm(pre + "output.LayerNorm", C)
    init.linear("bert.pooler.dense", C, C)
    init.linear("cls.predictions.transform.dense", C, C)
    init.norm("cls.predictions.transform.LayerNorm", C)
    init.bias("cls.predictions.bias", V)
    init.linear("cls.seq_relationship", 2, C)


def bert_forward(p, cfg, inp, head_weight=None):
    ids, tt, am = inp["input_ids"], inp["token_type_ids"], inp["attention_mask"]
    B, T = ids.shape
    C, NH, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    HS = C // NH
    out = {}
    e = "bert.embeddings."
    h = (F.embedding(ids, p[e + "word_embeddings.weight"]) + p[e + "position_embeddings.weight"][:T][None]
         + F.embedding(tt, p[e + "token_type_embeddings.weight"]))  # [B, T, C]
    h = layer_norm(h, p[e + "LayerNorm.weight"], p[e + "LayerNorm.bias"], eps)
    out["embedding_output"] = h
    mask = padding_bias(am, h.dtype)  # [B, 1, 1, T]
    for i in range(cfg["num_hidden_layers"]):
        pre = f"bert.encoder.layer.{i}."
        s = pre + "attention.self."
        q = split_heads(linear(h, p[s + "query.weight"], p[s + "query.bias"]), NH)  # [B, NH, T, HS]
        k = split_heads(linear(h, p[s + "key.weight"], p[s + "key.bias"]), NH)
        v = split_heads(linear(h, p[s + "value.weight"], p[s + "value.bias"]), NH)
        att = q @ k.transpose(-1, -2) / math.sqrt(HS) + mask  # [B, NH, T, T]
        ctx = merge_heads(torch.softmax(att, dim=-1) @ v)  # [B, T, C]
        o = pre + "attention.output."
        a = layer_norm(linear(ctx, p[o + "dense.weight"], p[o + "dense.bias"]) + h,
                       p[o + "LayerNorm.weight"], p[o + "LayerNorm.bias"], eps)
        m = gelu_erf(linear(a, p[pre + "intermediate.dense.weight"], p[pre + "intermediate.dense.bias"]))
        h = layer_norm(linear(m, p[pre + "output.dense.weight"], p[pre + "output.dense.bias"]) + a,
                       p[pre + "output.LayerNorm.weight"], p[pre + "output.LayerNorm.bias"], eps)
    out["last_hidden_state"] = h
    pooled = torch.tanh(linear(h[:, 0], p["bert.pooler.dense.weight"], p["bert.pooler.dense.bias"]))  # [B, C]
    out["pooler_output"] = pooled
    t = "cls.predictions.transform."
    x = gelu_erf(linear(h, p[t + "dense.weight"], p[t + "dense.bias"]))
    x = layer_norm(x, p[t + "LayerNorm.weight"], p[t + "LayerNorm.bias"], eps)
    w = p[e + "word_embeddings.weight"] if head_weight is None else head_weight
    logits = x @ w.t() + p["cls.predictions.bias"]  # [B, T, V]
    nsp = linear(pooled, p["cls.seq_relationship.weight"], p["cls.seq_relationship.bias"])  # [B, 2]
    out["seq_relationship_logits"] = nsp
    mlm_loss = ce(logits, inp["masked_lm_labels"])
    nsp_loss = F.cross_entropy(nsp, inp["next_sentence_label"])
    out["mlm_loss"] = mlm_loss
    out["nsp_loss"] = nsp_loss
    return logits, mlm_loss + nsp_loss, out


def bert_inputs(cfg, g):
    B, T, V = 2, 7, cfg["vocab_size"]
    ids = torch.randint(5, V, (B, T), generator=g)
    ids[:, 0] = 2  # a [CLS]-like token; no id is special to the model
    tt = torch.zeros(B, T, dtype=torch.long)
    tt[:, 4:] = 1
    am = torch.ones(B, T, dtype=torch.long)
    am[1, 5:] = 0  # sequence 1 is padded at the end
    ids[1, 5:] = cfg["pad_token_id"]
    tt[1, 5:] = 0
    labels = torch.full((B, T), IGNORE, dtype=torch.long)
    for b, pos in ((0, (1, 3, 6)), (1, (2, 4))):
        for t in pos:
            labels[b, t] = int(torch.randint(5, V, (1,), generator=g))
    nsl = torch.tensor([0, 1])
    return {"input_ids": ids, "token_type_ids": tt, "attention_mask": am,
            "masked_lm_labels": labels, "next_sentence_label": nsl}


BERT_NOTES = [
    "loss = MLM loss (mean CE over positions with masked_lm_labels != -100, over V) + NSP loss (mean CE "
    "over the batch, over 2 classes). outputs.mlm_loss and outputs.nsp_loss give the parts. Hugging Face's "
    "current argument name for masked_lm_labels is labels.",
    "logits are the MLM prediction scores [B, T, V] = LN(gelu(dense(h))) @ word_embeddings.T + "
    "cls.predictions.bias. The decoder weight is tied to bert.embeddings.word_embeddings.weight, whose grad "
    "sums both uses; a Hugging Face state dict also holds cls.predictions.decoder.weight (= word embeddings) "
    "and cls.predictions.decoder.bias (= cls.predictions.bias).",
    "attention_mask 1 = attend, 0 = padding; keys at padding get finfo(float32).min added to the scores "
    "(scale 1/sqrt(HS)). Queries at padding are computed normally; their labels are -100.",
    "Post-LN: a = LN(dense(attn) + h); h' = LN(dense(gelu(dense(a))) + a). Exact erf GeLU. LayerNorm eps 1e-12.",
    "Embeddings: word + position (0..T-1) + token_type, then LayerNorm. Pooler: tanh(dense(h[:, 0])).",
    "attention.self.key.bias has zero gradient in exact arithmetic (a per-query constant added to every "
    "score does not change the softmax); the stored values (~1e-8) are float32 rounding noise, so compare "
    "grads with an absolute tolerance relative to the tensor's scale.",
]


# ---------------------------------------------------------------------------
# T5 v1.0 (T5ForConditionalGeneration)
# ---------------------------------------------------------------------------

T5_CONFIG = dict(
    model_type="t5", hf_class="T5ForConditionalGeneration",
    vocab_size=61, d_model=24, d_kv=6, d_ff=96, num_layers=2, num_decoder_layers=2, num_heads=4,
    relative_attention_num_buckets=32, relative_attention_max_distance=128,
    layer_norm_epsilon=1e-6, feed_forward_proj="relu", tie_word_embeddings=True,
    is_gated_act=False, dropout_rate=0.0, attn_scale="none",
    pad_token_id=0, decoder_start_token_id=0,
)


def t5_params(cfg, init):
    V, C, Fh, NH = cfg["vocab_size"], cfg["d_model"], cfg["d_ff"], cfg["num_heads"]
    inner = NH * cfg["d_kv"]
    init.weight("shared.weight", V, C, std=1.0)  # logits are scaled by C^-0.5, so unit embeddings
    for stack, n in (("encoder", cfg["num_layers"]), ("decoder", cfg["num_decoder_layers"])):
        for i in range(n):
            pre = f"{stack}.block.{i}.layer."
            sa = pre + "0.SelfAttention."
            for w in "qkv":
                init.weight(sa + w + ".weight", inner, C)
            init.weight(sa + "o.weight", C, inner)
            if i == 0:
                init.weight(sa + "relative_attention_bias.weight", cfg["relative_attention_num_buckets"], NH,
                            std=0.5)
            init.norm(pre + "0.layer_norm", C, bias=False)
            ff = 1
            if stack == "decoder":
                ca = pre + "1.EncDecAttention."
                for w in "qkv":
                    init.weight(ca + w + ".weight", inner, C)
                init.weight(ca + "o.weight", C, inner)
                init.norm(pre + "1.layer_norm", C, bias=False)
                ff = 2
            init.weight(pre + f"{ff}.DenseReluDense.wi.weight", Fh, C)
            init.weight(pre + f"{ff}.DenseReluDense.wo.weight", C, Fh)
            init.norm(pre + f"{ff}.layer_norm", C, bias=False)
        init.norm(f"{stack}.final_layer_norm", C, bias=False)


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """Hugging Face T5Attention._relative_position_bucket, verbatim in effect (float32 log)."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def t5_buckets(cfg, tq, tk, bidirectional):
    ctx = torch.arange(tq, dtype=torch.long)[:, None]
    mem = torch.arange(tk, dtype=torch.long)[None, :]
    return relative_position_bucket(mem - ctx, bidirectional, cfg["relative_attention_num_buckets"],
                                    cfg["relative_attention_max_distance"])  # [tq, tk]


def t5_position_bias(weight, buckets):
    """weight [num_buckets, NH], buckets [Tq, Tk] -> [1, NH, Tq, Tk]."""
    return F.embedding(buckets, weight).permute(2, 0, 1)[None]


def t5_attention(p, pre, x, kv, nh, bias):
    """T5Attention without scaling: softmax(q k^T + bias) v, then o. bias includes the mask."""
    q = split_heads(linear(x, p[pre + "q.weight"]), nh)  # [B, NH, Tq, d_kv]
    k = split_heads(linear(kv, p[pre + "k.weight"]), nh)  # [B, NH, Tk, d_kv]
    v = split_heads(linear(kv, p[pre + "v.weight"]), nh)
    scores = q @ k.transpose(-1, -2) + bias  # [B, NH, Tq, Tk]
    return linear(merge_heads(torch.softmax(scores, dim=-1) @ v), p[pre + "o.weight"])


def t5_ff(p, pre, x):
    return linear(torch.relu(linear(x, p[pre + "DenseReluDense.wi.weight"])), p[pre + "DenseReluDense.wo.weight"])


def t5_forward(p, cfg, inp, head_weight=None):
    ids, am, dids = inp["input_ids"], inp["attention_mask"], inp["decoder_input_ids"]
    Te, Td = ids.shape[1], dids.shape[1]
    C, NH, eps = cfg["d_model"], cfg["num_heads"], cfg["layer_norm_epsilon"]
    out = {}
    dt = p["shared.weight"].dtype

    # Encoder. Block 0's relative bias (plus the padding mask) is reused by every block.
    h = F.embedding(ids, p["shared.weight"])  # [B, Te, C]
    enc_mask = padding_bias(am, dt)  # [B, 1, 1, Te]
    pos = t5_position_bias(p["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                           t5_buckets(cfg, Te, Te, True))  # [1, NH, Te, Te]
    out["encoder_position_bias"] = pos[0]
    bias = pos + enc_mask
    for i in range(cfg["num_layers"]):
        pre = f"encoder.block.{i}.layer."
        x = rms_norm(h, p[pre + "0.layer_norm.weight"], eps)
        h = h + t5_attention(p, pre + "0.SelfAttention.", x, x, NH, bias)
        h = h + t5_ff(p, pre + "1.", rms_norm(h, p[pre + "1.layer_norm.weight"], eps))
    enc = rms_norm(h, p["encoder.final_layer_norm.weight"], eps)  # [B, Te, C]
    out["encoder_last_hidden_state"] = enc

    # Decoder: causal self-attention with unidirectional buckets, cross-attention without position bias.
    h = F.embedding(dids, p["shared.weight"])  # [B, Td, C]
    pos = t5_position_bias(p["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                           t5_buckets(cfg, Td, Td, False))  # [1, NH, Td, Td]
    out["decoder_position_bias"] = pos[0]
    self_bias = pos + causal_bias(Td, dt)
    cross_bias = enc_mask  # [B, 1, 1, Te]
    for i in range(cfg["num_decoder_layers"]):
        pre = f"decoder.block.{i}.layer."
        x = rms_norm(h, p[pre + "0.layer_norm.weight"], eps)
        h = h + t5_attention(p, pre + "0.SelfAttention.", x, x, NH, self_bias)
        x = rms_norm(h, p[pre + "1.layer_norm.weight"], eps)
        h = h + t5_attention(p, pre + "1.EncDecAttention.", x, enc, NH, cross_bias)
        h = h + t5_ff(p, pre + "2.", rms_norm(h, p[pre + "2.layer_norm.weight"], eps))
    h = rms_norm(h, p["decoder.final_layer_norm.weight"], eps)  # [B, Td, C]
    out["last_hidden_state"] = h
    w = p["shared.weight"] if head_weight is None else head_weight
    logits = (h * C ** -0.5) @ w.t()  # [B, Td, V]
    loss = ce(logits, inp["labels"])
    return logits, loss, out


def t5_inputs(cfg, g):
    B, Te, Td, V = 2, 9, 6, cfg["vocab_size"]
    pad = cfg["pad_token_id"]
    ids = torch.randint(2, V, (B, Te), generator=g)
    am = torch.ones(B, Te, dtype=torch.long)
    am[1, 6:] = 0
    ids[1, 6:] = pad
    labels = torch.randint(2, V, (B, Td), generator=g)
    labels[1, 4:] = IGNORE  # padded targets
    labels[0, 2] = IGNORE
    # Hugging Face T5._shift_right: start token, then labels[:-1], with -100 replaced by pad.
    dids = torch.full((B, Td), cfg["decoder_start_token_id"], dtype=torch.long)
    dids[:, 1:] = labels[:, :-1]
    dids[dids == IGNORE] = pad
    return {"input_ids": ids, "attention_mask": am, "decoder_input_ids": dids, "labels": labels}


T5_NOTES = [
    "labels[b,t] is the target of decoder position t; decoder_input_ids = shift_right(labels) (start token 0, "
    "-100 replaced by pad 0), as Hugging Face does when given labels only. loss = mean CE over labels != -100.",
    "lm_head is tied to shared.weight (T5 v1.0): logits = (decoder_final_layer_norm(h) * d_model**-0.5) @ "
    "shared.T. shared.weight's grad sums the encoder lookup, the decoder lookup and lm_head. A Hugging Face "
    "state dict also holds encoder.embed_tokens.weight, decoder.embed_tokens.weight and lm_head.weight as "
    "copies of shared.weight.",
    "Attention has NO 1/sqrt(d_kv) scaling: scores = q k^T + position_bias + mask. q/k/v/o have no biases; "
    "q/k/v weights are [NH*d_kv, C] with heads contiguous in the rows, o is [C, NH*d_kv].",
    "Only block 0 of each stack has relative_attention_bias [num_buckets, NH]; its bias "
    "[NH, Tq, Tk] = weight[bucket(k - q)] (transposed to heads first) is reused by every block of that stack. "
    "Encoder buckets are bidirectional (16 per direction, positive relative positions offset by 16); decoder "
    "buckets are unidirectional (32, only k <= q matters). Cross-attention has no position bias, only the "
    "encoder padding mask. Masked scores get finfo(float32).min added.",
    "tables.relative_position_bucket_{bidirectional,unidirectional}[i] is the bucket of relative position "
    "tables.relative_positions[i] (= key - query) computed with Hugging Face's float32 formula; the log "
    "branch truncates toward zero, so match these integers exactly.",
    "T5LayerNorm: w * x * rsqrt(mean(x^2) + 1e-6), no mean subtraction, no bias. Pre-norm blocks, residual "
    "adds, final_layer_norm on each stack. FF: wo(relu(wi(x))), d_ff = 96.",
    "Encoder padding: sequence 1 has attention_mask 0 at its last 3 positions; padded keys are masked in "
    "encoder self-attention and in decoder cross-attention; padded encoder queries are computed normally.",
]


# ---------------------------------------------------------------------------
# Llama (LlamaForCausalLM)
# ---------------------------------------------------------------------------

LLAMA_CONFIG = dict(
    model_type="llama", hf_class="LlamaForCausalLM",
    vocab_size=73, hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=6, max_position_embeddings=32, rms_norm_eps=1e-6, rope_theta=10000.0,
    hidden_act="silu", attention_bias=False, mlp_bias=False, tie_word_embeddings=False,
    attn_scale="1/sqrt(head_dim)", attention_dropout=0.0,
)


def llama_params(cfg, init):
    V, C, Fh = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
    NH, KVH, HS = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    init.weight("model.embed_tokens.weight", V, C)
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        init.weight(pre + "self_attn.q_proj.weight", NH * HS, C)
        init.weight(pre + "self_attn.k_proj.weight", KVH * HS, C)
        init.weight(pre + "self_attn.v_proj.weight", KVH * HS, C)
        init.weight(pre + "self_attn.o_proj.weight", C, NH * HS)
        init.weight(pre + "mlp.gate_proj.weight", Fh, C)
        init.weight(pre + "mlp.up_proj.weight", Fh, C)
        init.weight(pre + "mlp.down_proj.weight", C, Fh)
        init.norm(pre + "input_layernorm", C, bias=False)
        init.norm(pre + "post_attention_layernorm", C, bias=False)
    init.norm("model.norm", C, bias=False)
    init.weight("lm_head.weight", V, C)


def llama_rope(cfg, t, dtype):
    """cos, sin [T, HS] as in LlamaRotaryEmbedding (inv_freq and angles in float32)."""
    hs, theta = cfg["head_dim"], cfg["rope_theta"]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))  # [HS/2]
    freqs = torch.arange(t, dtype=torch.float32)[:, None] * inv_freq[None, :]  # [T, HS/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [T, HS]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_forward(p, cfg, inp, head_weight=None):
    ids = inp["input_ids"]
    B, T = ids.shape
    NH, KVH, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    HS = cfg["head_dim"]
    out = {}
    h = F.embedding(ids, p["model.embed_tokens.weight"])  # [B, T, C]
    cos, sin = llama_rope(cfg, T, h.dtype)
    out["rope_cos"], out["rope_sin"] = cos, sin
    mask = causal_bias(T, h.dtype)
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        x = rms_norm(h, p[pre + "input_layernorm.weight"], eps)
        q = split_heads(linear(x, p[pre + "self_attn.q_proj.weight"]), NH)  # [B, NH, T, HS]
        k = split_heads(linear(x, p[pre + "self_attn.k_proj.weight"]), KVH)  # [B, KVH, T, HS]
        v = split_heads(linear(x, p[pre + "self_attn.v_proj.weight"]), KVH)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // KVH, dim=1)  # repeat_kv: query head j uses kv head j // (NH/KVH)
        v = v.repeat_interleave(NH // KVH, dim=1)
        att = q @ k.transpose(-1, -2) / math.sqrt(HS) + mask  # [B, NH, T, T]
        y = merge_heads(torch.softmax(att, dim=-1) @ v)  # [B, T, NH*HS]
        h = h + linear(y, p[pre + "self_attn.o_proj.weight"])
        x = rms_norm(h, p[pre + "post_attention_layernorm.weight"], eps)
        m = F.silu(linear(x, p[pre + "mlp.gate_proj.weight"])) * linear(x, p[pre + "mlp.up_proj.weight"])
        h = h + linear(m, p[pre + "mlp.down_proj.weight"])
    h = rms_norm(h, p["model.norm.weight"], eps)
    out["last_hidden_state"] = h
    logits = linear(h, p["lm_head.weight"])  # [B, T, V]
    loss = ce(logits, inp["labels"])
    return logits, loss, out


def llama_inputs(cfg, g):
    B, T, V = 2, 7, cfg["vocab_size"]
    tok = torch.randint(0, V, (B, T + 1), generator=g)
    labels = tok[:, 1:].clone()
    labels[0, 0] = IGNORE
    labels[1, 5] = IGNORE
    return {"input_ids": tok[:, :T].clone(), "labels": labels}


LLAMA_NOTES = [
    "labels[b,t] is the target of position t (already shifted; Hugging Face's LlamaForCausalLM shifts "
    "internally). loss = mean CE over labels != -100.",
    "lm_head.weight is NOT tied to model.embed_tokens.weight.",
    "RMSNorm: w * x * rsqrt(mean(x^2) + 1e-6), in float32. Pre-norm blocks; final model.norm.",
    "RoPE as Hugging Face (rotate_half layout, not interleaved pairs): inv_freq[j] = 1 / theta^(2j/HS) for "
    "j < HS/2; angle[t, j] = t * inv_freq[j]; cos/sin [T, HS] = the HS/2 angles concatenated twice; "
    "q' = q*cos + rotate_half(q)*sin with rotate_half([x1, x2]) = [-x2, x1] (halves of the head dim). "
    "Applied to q and k, per head, positions 0..T-1. outputs.rope_cos/rope_sin hold cos/sin.",
    "GQA: q_proj rows are NH heads of HS, k_proj/v_proj rows KVH heads of HS; query head j uses kv head "
    "j // (NH/KVH) (repeat_kv, i.e. repeat_interleave on the head dim). Causal, scale 1/sqrt(HS), masked "
    "scores get finfo(float32).min.",
    "MLP: down(silu(gate(x)) * up(x)), no biases anywhere.",
]


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------

MODELS = [
    # name, config, params, forward, inputs, notes, tied (canonical name or None), aliases
    ("gpt2", GPT2_CONFIG, gpt2_params, gpt2_forward, gpt2_inputs, GPT2_NOTES,
     "transformer.wte.weight", {"lm_head.weight": "transformer.wte.weight"}),
    ("bert", BERT_CONFIG, bert_params, bert_forward, bert_inputs, BERT_NOTES,
     "bert.embeddings.word_embeddings.weight",
     {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
      "cls.predictions.decoder.bias": "cls.predictions.bias"}),
    ("t5", T5_CONFIG, t5_params, t5_forward, t5_inputs, T5_NOTES, "shared.weight",
     {"encoder.embed_tokens.weight": "shared.weight", "decoder.embed_tokens.weight": "shared.weight",
      "lm_head.weight": "shared.weight"}),
    ("llama", LLAMA_CONFIG, llama_params, llama_forward, llama_inputs, LLAMA_NOTES, None, {}),
]


def run(forward, cfg, params, inputs, dtype=torch.float32, head_weight=None):
    """Forward and backward; returns logits, loss, outputs, grads (dict), leaf params."""
    p = {k: v.detach().to(dtype).clone().requires_grad_(True) for k, v in params.items()}
    hw = None
    if head_weight is not None:
        hw = head_weight.detach().to(dtype).clone().requires_grad_(True)
    logits, loss, out = forward(p, cfg, inputs, head_weight=hw)
    loss.backward()
    grads = {k: v.grad.detach().clone() for k, v in p.items()}
    if hw is not None:
        grads["<head>"] = hw.grad.detach().clone()
    return logits.detach(), loss.detach(), {k: v.detach() for k, v in out.items()}, grads


def check(name, cfg, forward, params, inputs, tied, logits, loss, grads):
    for k, g in grads.items():
        assert torch.isfinite(g).all(), f"{name}: grad of {k} not finite"
        assert (g != 0).any(), f"{name}: grad of {k} is zero everywhere"
    assert torch.isfinite(logits).all() and math.isfinite(float(loss)), f"{name}: logits/loss not finite"

    # float64 reference for all grads.
    _, loss64, _, grads64 = run(forward, cfg, params, inputs, dtype=torch.float64)
    assert abs(float(loss64) - float(loss)) < 1e-5 * max(1.0, abs(float(loss))), f"{name}: loss f32 vs f64"
    for k in grads:
        g32, g64 = grads[k].double(), grads64[k]
        err = (g32 - g64).abs().max().item()
        scale = g64.abs().max().item()
        assert err <= 1e-4 * scale + 1e-7, f"{name}: grad {k} f32 vs f64: err {err:g} scale {scale:g}"

    # Tied weight: grad equals the sum of the grads of its uses, computed with an untied copy.
    if tied is not None:
        _, _, _, gu = run(forward, cfg, params, inputs, dtype=torch.float64, head_weight=params[tied])
        both = gu[tied] + gu["<head>"]
        assert (both - grads64[tied]).abs().max().item() < 1e-10, f"{name}: tied grad is not the sum of uses"
        assert gu["<head>"].abs().max().item() > 0 and gu[tied].abs().max().item() > 0, f"{name}: a tied use is dead"

    # Central finite differences in float64 at a few entries of a few params.
    names = list(params)
    picks = [names[0], names[len(names) // 2], names[-1]]
    if name == "t5":
        picks.append("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
    h = 1e-6
    for k in picks:
        g64 = grads64[k].reshape(-1)
        for idx in (int(g64.abs().argmax()), int(g64.numel() // 3)):
            vals = []
            for sgn in (1.0, -1.0):
                p2 = {n: v.double().clone() for n, v in params.items()}
                p2[k].view(-1)[idx] += sgn * h
                with torch.no_grad():
                    vals.append(float(forward(p2, cfg, inputs)[1]))
            fd = (vals[0] - vals[1]) / (2 * h)
            ad = float(g64[idx])
            assert abs(fd - ad) <= 1e-6 * max(1.0, abs(ad)), f"{name}: finite difference {k}[{idx}]: {fd} vs {ad}"


def check_blocks():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 5, 24, generator=g)
    w, b = torch.randn(24, generator=g), torch.randn(24, generator=g)
    assert torch.allclose(layer_norm(x, w, b, 1e-5), F.layer_norm(x, (24,), w, b, 1e-5), atol=1e-5)
    assert torch.allclose(gelu_new(x), F.gelu(x, approximate="tanh"), atol=1e-6)
    assert torch.allclose(gelu_erf(x), F.gelu(x), atol=1e-6)


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def f32(x):
    """Shortest decimal that reads back as the same float32."""
    v = np.float32(x)
    assert np.isfinite(v), x
    s = str(v)  # numpy's str of a float32 is the shortest round-trip decimal
    assert np.float32(s) == v, (s, v)
    return s


def ftensor(t):
    t = t.detach().to(torch.float32).contiguous()
    data = ",".join(f32(v) for v in t.reshape(-1).numpy())
    return '{"shape": %s, "data": [%s]}' % (json.dumps(list(t.shape)), data)


def itensor(t):
    t = t.detach().to(torch.long).contiguous()
    return '{"shape": %s, "data": %s}' % (json.dumps(list(t.shape)), json.dumps(t.reshape(-1).tolist()))


def obj(entries, indent="  "):
    """A JSON object from (key, already-encoded value) pairs, one per line."""
    if not entries:
        return "{}"
    inner = (",\n" + indent + "  ").join(json.dumps(k) + ": " + v for k, v in entries)
    return "{\n" + indent + "  " + inner + "\n" + indent + "}"


def write(path, name, cfg, inputs, params, aliases, logits, loss, grads, outputs, tables, notes):
    parts = [
        ("model", json.dumps(name)),
        ("config", json.dumps(cfg, sort_keys=True)),
        ("inputs", obj([(k, itensor(v)) for k, v in inputs.items()])),
        ("param_names", json.dumps(list(params))),
        ("params", obj([(k, ftensor(v)) for k, v in params.items()])),
        ("aliases", json.dumps(aliases, sort_keys=True)),
        ("logits", ftensor(logits)),
        ("loss", f32(loss)),
        ("grads", obj([(k, ftensor(grads[k])) for k in params])),
        ("outputs", obj([(k, ftensor(v)) for k, v in outputs.items()])),
        ("tables", obj([(k, itensor(v)) for k, v in tables.items()])),
        ("notes", json.dumps(notes, indent=4)),
    ]
    text = "{\n" + ",\n".join("  " + json.dumps(k) + ": " + v for k, v in parts) + "\n}\n"
    json.loads(text)  # well-formed
    with open(path, "w") as f:
        f.write(text)
    return len(text)


def t5_tables(cfg, inputs):
    rel = torch.arange(-200, 201, dtype=torch.long)
    nb, md = cfg["relative_attention_num_buckets"], cfg["relative_attention_max_distance"]
    Te, Td = inputs["input_ids"].shape[1], inputs["decoder_input_ids"].shape[1]
    return {
        "relative_positions": rel,
        "relative_position_bucket_bidirectional": relative_position_bucket(rel, True, nb, md),
        "relative_position_bucket_unidirectional": relative_position_bucket(rel, False, nb, md),
        "encoder_position_bucket": t5_buckets(cfg, Te, Te, True),
        "decoder_position_bucket": t5_buckets(cfg, Td, Td, False),
    }


def main():
    torch.manual_seed(SEED)
    torch.set_default_dtype(torch.float32)
    check_blocks()
    for i, (name, cfg, make_params, forward, make_inputs, notes, tied, aliases) in enumerate(MODELS):
        init = Init(SEED + 100 * i)
        make_params(cfg, init)
        params = init.p
        inputs = make_inputs(cfg, torch.Generator().manual_seed(SEED + 100 * i + 1))
        logits, loss, outputs, grads = run(forward, cfg, params, inputs)
        check(name, cfg, forward, params, inputs, tied, logits, loss, grads)
        tables = t5_tables(cfg, inputs) if name == "t5" else {}
        n = write(os.path.join(HERE, name + ".json"), name, cfg, inputs, params, aliases, logits, float(loss),
                  grads, outputs, tables, notes)
        nparam = sum(v.numel() for v in params.values())
        print(f"{name}.json: {n} bytes, {len(params)} tensors, {nparam} params, loss {f32(loss)}")


if __name__ == "__main__":
    main()
