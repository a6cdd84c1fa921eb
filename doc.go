// Package megago is a Go library for building and training transformer models with
// Megatron-style parallelism: tensor (TP), sequence (SP), pipeline (PP) and data (DP)
// parallelism. Users import its packages and write their own training loops; every unit
// test runs on the CPU backend, with no GPU, CUDA toolkit or Python needed.
//
// This package holds only the release [Version]. The library lives in the packages
// below, in reading order: each depends only on packages above it (data on none of
// them) and on small helpers in internal (internal/atomicfile).
//
// # tensor: where the numbers are
//
// megago/tensor is the foundation: Tensor, DType and Shape, the Device/Backend interface,
// the reverse-mode autograd engine (a dynamic graph recorded as ops run, like PyTorch
// eager, with custom functions and recomputation), memory scopes that return a training
// step's tensors to the device's pool, the CPU backend, and a counter-based random
// generator whose output does not depend on the parallel layout. Start here.
// tensor/gorgonia converts to and from gorgonia tensors.
//
// # parallel: where the communication is
//
// megago/parallel holds the Comm interface and its transports (in-process goroutine ranks
// with RunLocal; TCP across processes and hosts in megago/parallel/tcp), the Mesh that
// builds TP/CP/PP/DP groups in Megatron's rank order, the autograd-aware TP and SP
// mappings, point-to-point transfers, pipeline schedules (no pipelining, 1F1B,
// interleaved) with a trace, and the DDP gradient-bucket engine. It works on tensors only and never sees a layer.
//
// # nn: where the model is
//
// megago/nn holds Param and Module, the tensor-parallel linear and embedding layers,
// vocab-parallel cross entropy, norms, RoPE, attention (multi-head, grouped-query,
// cross), the MLP, TransformerLayer and Block, the GPT (GPT-2 and Llama-style), BERT and
// T5 models with their Hugging Face mappings, and generation with a KV cache.
//
// # optim: where the update is
//
// megago/optim holds the flat parameter and gradient buffers (Megatron's padding and
// buckets), SGD, Adam and AdamW as fused kernels, learning-rate and weight-decay
// schedules, gradient clipping across model-parallel groups, loss scaling, mixed
// precision with fp32 master weights and the distributed (ZeRO-1) optimizer. It works on
// []*nn.Param, never on a model.
//
// # train: where the loop is
//
// megago/train ties nn, optim and parallel together for 3-D parallel training: it splits
// a GPT's or BERT's layers into pipeline stages and virtual chunks, keeps a tied
// embedding's copies in sync over the embedding group, reduces gradients over DP bucket by
// bucket while backward runs, and steps the optimizer under a pipeline schedule.
//
// # checkpoint
//
// megago/checkpoint saves and loads sharded checkpoints in Megatron's directory layout,
// reshards them across parallel layouts, and imports and exports Hugging Face and
// Megatron checkpoints.
//
// # data: where the tokens come from
//
// megago/data reads and builds Megatron-compatible indexed datasets (.bin/.idx),
// preprocesses JSON lines, tokenizes text (GPT-2 BPE, WordPiece, SentencePiece, a BPE
// trainer) and provides the GPT, BERT and T5 datasets, blending, Megatron's sampler and a
// prefetching loader. It imports no other megago package: batches are plain Go slices.
//
// # cuda: the GPU backend
//
// megago/cuda is the GPU backend: libcuda, cuBLASLt, NVRTC and NCCL opened at run time
// through purego (so the module always builds with CGO_ENABLED=0, and a machine without
// a GPU gets cuda.ErrNoDevice), a caching allocator, cuBLASLt GEMMs, CUDA C kernels
// compiled by NVRTC (fused ones among them, each with a CPU twin) and an NCCL Comm. It
// registers itself with tensor as "cuda". It is built and tested without a GPU: its
// kernels are compile-checked with NVRTC, and with MEGAGO_CUDA_EMU=1 any program opens a
// kernel emulator instead of a GPU (the kernels compiled with g++ and run on the CPU, NCCL
// over host memory), on which CI runs its GPU tests and the gpt example with --device
// cuda. It has not yet run on a GPU. The examples and megago bench open it with --device
// cuda through internal/device.
//
// # examples: training programs
//
// megago/examples holds training programs, each a readable main.go plus small files:
// examples/gpt pretrains a GPT on the Go standard library's sources and generates text;
// examples/bert pretrains a BERT (masked language modelling and sentence order) and
// fine-tunes it for classification; examples/t5 pretrains a T5 by span corruption and
// fills masked spans; examples/mlp trains a two-layer MLP with the autograd engine
// alone. What gpt, bert and t5 share is in examples/internal: Megatron's flags, the
// default corpus, the training loop, progress reports, checkpointing and the ranks.
//
// # tune: hyperparameter search
//
// megago/tune searches the examples' settings: a search space of flags, random, grid and
// TPE (Tree-structured Parzen Estimator) sampling, early stopping by successive halving
// (ASHA) with promoted trials resuming their checkpoints, parallel trials, and a results
// file from which a search resumes.
//
// # cmd/megago
//
// megago/cmd/megago is the command-line tool: preprocess and inspect datasets, launch
// ranks across processes like torchrun, convert checkpoints (resharding, Hugging Face and
// Megatron-LM), bench training steps beside PyTorch, and tune an example's
// hyperparameters, one file per subcommand.
//
// # internal
//
// megago/internal holds test helpers (a fake backend with opaque buffers, golden-file
// readers, TCP ranks as processes), the launcher behind megago launch, atomic file
// writes, and the generator of the GEMM assembly.
package megago
