// Package optim will hold megago's optimizers. It is planned and not yet
// implemented; this comment records what it will contain (see DESIGN.md).
//
//   - Flat parameter and gradient buffers with Megatron's padding; gradients
//     are views into them, which DDP buckets reduce.
//   - SGD and a fused AdamW.
//   - Learning-rate schedules, gradient clipping, the dynamic loss scaler and
//     mixed precision (bf16 or fp16 compute with fp32 master weights).
//   - The distributed optimizer (ZeRO-1: optimizer state sharded over DP).
//
// Package optim works on []*nn.Param, never on a model.
package optim
