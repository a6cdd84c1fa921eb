// Package megago is a Go library for building and training transformer
// models with Megatron-style parallelism: tensor (TP), pipeline (PP), data
// (DP) and sequence parallelism. Users import its packages and write their
// own training loops; every unit test runs on the CPU backend, with no GPU,
// CUDA toolkit or Python needed.
//
// This package holds only the release [Version]. The library lives in the
// packages below, listed in reading order: each depends only on packages
// above it (data depends on none). As of now tensor, the mlp example and
// cmd/megago exist; the others are planned and hold just a package comment
// describing what they will contain.
//
// # tensor (exists)
//
// megago/tensor is the foundation: Tensor, DType and Shape, the
// Device/Backend interface, the reverse-mode autograd engine (a dynamic
// graph recorded as ops run, like PyTorch eager), memory scopes that return
// a training step's tensors to the device's pool, the CPU backend, and a
// counter-based random generator whose output does not depend on the
// parallel layout. Start here.
//
// # parallel (planned)
//
// megago/parallel will hold the Comm interface and its transports
// (in-process goroutine ranks, TCP), the Mesh that builds TP/CP/PP/DP groups
// in Megatron's rank order, the autograd-aware TP and sequence-parallel
// mappings, point-to-point transfers, pipeline schedules (1F1B, interleaved)
// and DDP gradient buckets. It works on tensors only and never sees a layer.
//
// # nn (planned)
//
// megago/nn will hold the model: Module and Param, the basic layers, the
// tensor-parallel linear and embedding layers, attention, MLP,
// TransformerLayer, the GPT, BERT and T5 models and vocab-parallel cross
// entropy.
//
// # optim (planned)
//
// megago/optim will hold the flat parameter and gradient buffers, SGD and
// AdamW, learning-rate schedules, gradient clipping, the loss scaler, mixed
// precision and the distributed (ZeRO-1) optimizer. It works on []*nn.Param,
// never on a model.
//
// # train
//
// megago/train ties nn, optim and parallel together for 3-D parallel training: it
// splits a GPT's or BERT's layers into pipeline stages and virtual chunks, keeps a tied
// embedding's copies in sync over the embedding group, reduces gradients over DP bucket
// by bucket while backward runs, and steps the optimizer under a pipeline schedule
// (no pipelining, 1F1B, interleaved 1F1B).
//
// # checkpoint (planned)
//
// megago/checkpoint will save and load sharded checkpoints in Megatron's
// directory layout, reshard them across parallel layouts, resume training
// exactly, and import and export Hugging Face and Megatron checkpoints.
//
// # data (planned)
//
// megago/data will read and build Megatron-compatible indexed datasets
// (.bin/.idx), tokenize text and provide the GPT, BERT and T5 datasets,
// blending, samplers and a prefetching loader. It imports no other megago
// package: batches are plain Go slices.
//
// # cuda (planned)
//
// megago/cuda will be the GPU backend: libcuda, cuBLASLt, NVRTC and NCCL
// opened at run time through purego (so the module always builds with
// CGO_ENABLED=0), a caching allocator, fused kernels and an NCCL Comm. It
// registers itself with tensor.
//
// # examples (mlp exists; gpt, bert, t5 planned)
//
// megago/examples holds training programs, each a readable main.go plus
// small files. examples/mlp trains a two-layer MLP with the autograd engine
// and prints its falling loss; the GPT, BERT and T5 programs are planned.
//
// # cmd/megago (exists: version)
//
// megago/cmd/megago is the command-line tool. It dispatches subcommands from
// a table; today it has help and version, and later work adds preprocess,
// launch, convert, bench and inspect, one file each.
//
// # internal
//
// megago/internal holds test helpers, generated assembly and anything else
// that must not become API.
package megago
