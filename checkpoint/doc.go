// Package checkpoint will save and load megago training state. It is planned
// and not yet implemented; this comment records what it will contain (see
// DESIGN.md).
//
//   - Megatron's layout: a directory per iteration (iter_0000100/) plus
//     latest_checkpointed_iteration.txt.
//   - Tensors in safetensors files with each shard's global shape and offset
//     recorded, so a checkpoint written at one (TP, PP, DP) layout can be
//     loaded at another.
//   - Crash-safe writes: a temporary name, fsync, then rename, so a crash
//     never leaves a checkpoint that looks complete but is not.
//   - Model, optimizer state, LR scheduler, RNG state and data-loader
//     position, so resuming gives the same losses as not stopping.
//   - Import and export of Hugging Face and Megatron checkpoints.
package checkpoint
