// Package data will hold megago's datasets and loaders. It is planned and not
// yet implemented; this comment records what it will contain (see
// DESIGN.md).
//
//   - Indexed datasets byte-compatible with Megatron's .bin/.idx files, read
//     through mmap, and builders that write them.
//   - Tokenizers.
//   - GPT, BERT and T5 datasets, dataset blending and samplers.
//   - A prefetching loader.
//
// Package data imports no other megago package: batches are plain Go slices
// ([]int32 tokens, masks), turned into tensors by callers.
package data
