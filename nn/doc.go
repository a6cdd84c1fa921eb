// Package nn will hold megago's layers and models. It is planned and not yet
// implemented; this comment records what it will contain (see DESIGN.md).
//
//   - Module, which exposes named parameters (layers.3.mlp.fc1.bias) to
//     optimizers and checkpoints, and Param, which carries parallel metadata:
//     partition dim and stride, TP-replicated, shared (tied embedding copy),
//     sequence-parallel, excluded from weight decay.
//   - Layers: Linear, Embedding, LayerNorm, RMSNorm, ColumnParallelLinear,
//     RowParallelLinear, VocabParallelEmbedding, attention, MLP and
//     TransformerLayer. A layer receives only the groups it uses.
//   - TransformerConfig, a typed struct with documented defaults and
//     Validate() error.
//   - The GPT, BERT and T5 models (and a Llama-style configuration), each
//     with its Hugging Face tensor-name mapping, and vocab-parallel cross
//     entropy.
//
// Shape letters used in comments throughout megago will be defined here:
// B micro-batch, T sequence, C hidden, NH heads, HS head size, F MLP hidden,
// V vocab (Vp padded), L layers, and tp/pp/dp for group sizes.
package nn
