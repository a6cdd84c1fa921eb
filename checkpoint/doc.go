// Package checkpoint saves and restores megago training state — model parameters,
// optimizer state (sharded over DP under the distributed optimizer), learning-rate
// schedule, loss scaler, data position and seed — from every rank in parallel, and loads
// it at any other parallel layout. It also imports and exports Hugging Face models
// (config.json with model.safetensors, sharded safetensors with
// model.safetensors.index.json, pytorch_model.bin or its sharded index) and imports and
// exports Megatron-LM legacy checkpoints; the megago convert command is a thin layer over it.
//
// It imports nn (models, parameters, Hugging Face converters), optim (its state),
// parallel, tensor, internal/atomicfile, internal/filelock and the root package (megago's
// version), never train: what it builds of a model on a mesh (the layer split over pipeline stages,
// nn.Parts) is nn's, which train uses too.
//
// # Reading order
//
//   - save.go: State (what a rank saves), Save and StartSave, and which rank writes what.
//   - commit.go: PendingSave.Commit and the crash-safe publication of an iteration.
//   - job_lock.go: LockDir, the lock a job holds on its checkpoint directory for its life.
//   - load.go: Load and LoadOptions; SetParams.
//   - reshard.go: pieces of global tensors and their runs, the core of resharding.
//   - manifest.go: Manifest, Layout, FileInfo, the tracker file, the manifest's own
//     checksum; shard.go: shard files.
//   - model_size.go: checking the sizes a file describes against the tensors present.
//   - model.go: Model (architecture and configuration), Compatible, Build, Converter.
//   - architecture.go: the factory, a table keyed by architecture name (ArchGPT,
//     ArchBERT, ArchT5) of what checkpoint needs of each: its vocabulary-padded
//     parameters, its parts on a mesh (nn.NewGPTChunks, NewBERTChunks, NewT5OnMesh), its
//     whole model as an nn.HFConverter and its config.json. A new architecture is a row.
//   - safetensors.go: the safetensors reader (strict) and writer.
//   - convert.go: ReadGlobal, WriteGlobal and Reshard (offline resharding).
//   - hf.go: ImportHF, ExportHF, ExportHFWith, ReadHF, ReadSafetensors, WriteSafetensors.
//   - hf_config.go: ModelFromHFConfig, config.json of each model type read;
//     hf_export_config.go: the config.json written, with hfConfigKeys, the keys
//     transformers writes per model type and where they were read;
//     hf_config_moe.go, hf_export_config_moe.go: the same for the experts of Mixtral,
//     Qwen2-MoE and Qwen3-MoE; hf_names_moe.go: their tensor names (and Qwen3's
//     query/key norms), which nn's Llama mapping lacks, and the stacking of experts.
//   - hf_layout.go: finding and checking a directory's weight files (index.json);
//     hf_torch.go: pytorch_model.bin state dicts; hf_names.go: names of older files
//     (no base prefix, saved buffers, tied copies); hf_shard.go: HFExportOptions and
//     writing shards.
//   - torch.go, pickle_scan.go: reading torch.save files; pickle_write.go,
//     torch_write.go: writing them.
//   - megatron.go, megatron_args.go, megatron_merge.go, megatron_legacy.go:
//     ImportMegatron; megatron_layout.go, megatron_export.go: ExportMegatron.
//
// # Layout on disk
//
// As Megatron's: a directory per iteration plus a tracker file naming the latest.
//
//	<dir>/latest_checkpointed_iteration.txt           "100"
//	<dir>/.megago-save.lock                           locked by the saving job (LockFile)
//	<dir>/.megago-job.lock                            locked by the job saving there (JobLockFile, LockDir)
//	<dir>/iter_0000100/manifest.json                  written last
//	<dir>/iter_0000100/model_tp00_pp000.safetensors   DP rank 0 of each (TP, PP) rank
//	<dir>/iter_0000100/model_tp00_pp000_dp001.safetensors  expert parameters of a DP rank > 0
//	<dir>/iter_0000100/optim_tp00_pp000_dp000.safetensors
//
// Every tensor is stored in safetensors files as a piece of a named global tensor:
// the file's metadata maps "piece.<name>" to the piece's region of the global tensor
// (full shape, start and size along each dim: Param.Region, a TP shard) and the range
// [flat0, flat1) of that region's row-major flattening it holds (all of it, or the part a
// distributed-optimizer shard holds: Megatron's flattened_range). Model pieces have the
// region's shape; optimizer pieces (named optimizer.state.<kind>.<parameter>, see
// optim.State) are flat. A TP-replicated parameter and its state are saved by TP rank 0
// only, the Shared copy of a tied embedding not at all, optimizer state by DP rank 0
// (every DP rank under the distributed optimizer), so each element of each global tensor
// is stored exactly once.
//
// Expert parameters (nn.Param.Expert, a mixture-of-experts layer's stacked experts
// [E, ...]) are pieces like any other: their region (Param.Region) puts the rank's
// experts at their place along dim 0 of the global tensor (EP rank · E/EP) and its part of
// the split dim at its expert-TP rank's, so they load at any expert-parallel and
// expert-TP size. As in Megatron's dist_checkpointing, where an expert tensor's replica
// id is its expert-DP rank, each is saved by expert-DP rank 0 of its experts (and
// expert-TP rank 0 when every expert-TP rank holds it whole), its optimizer state
// likewise or, sharded over expert-DP by the distributed optimizer, by every expert-DP
// rank. Such a rank may have a DP coordinate above 0: its model file is then named with
// it. Non-trainable state tensors (State.Tensors, nn.Stateful: a router's expert bias
// [E]) are whole on every rank of their pipeline stage and saved by its TP and DP rank 0.
//
// Context parallelism (Mesh CP > 1) splits activations, not parameters: the CP ranks of a
// DP rank hold the same parameters, and the gradients and the distributed optimizer's
// shards are over the DP × CP group. So a checkpoint treats the DP × CP ranks as DP × CP
// data-parallel ranks: "DP rank 0" above is CP rank 0 of DP rank 0, each file is named
// with the rank's place in the DP × CP group (DP·CP + CP) as its dp, and the manifest
// records CP (Layout.CP) beside DP. A checkpoint saved at one CP loads at any other.
//
// The manifest (JSON) records megago's version, the Model, the layout (with the
// experts' EP and expert-TP sizes where they are not 1 and TP), the iteration,
// the consumed samples, the seed, the optimizer's scalars (step, loss scaler, schedule;
// absent for a weights-only checkpoint), the caller's Extra values, the size and
// SHA-256 of every file, and its own SHA-256 (Manifest.Checksum, since format version 2;
// manifests of version 1 have none and are still read).
//
// # Resharding
//
// Load needs nothing of the saved layout: for each of this rank's parameters, state
// tensors and optimizer state tensors it intersects the target piece (the region its layout gives,
// and the flat range its optimizer holds) with the stored pieces, run by run, and copies
// the bytes straight from the memory-mapped files. So TP, PP, DP, the distributed
// optimizer and the vocabulary padding (PaddedVocab depends on TP) may all differ: the
// rows of a vocabulary-padded tensor that both layouts have are copied, rows only the
// target has are zero. So may CP, EP and expert-TP: the Model's configuration records
// no layout (TP, CP, CPCommType, CPHierarchy, MoE.EP and MoE.ETP are cleared, and
// Compatible ignores the MoE dispatcher and grouped GEMM, which compute the same
// values). The offline Reshard and
// WriteGlobal write expert parameters at expert-parallel size 1, split over expert-TP =
// TP as a training run at that TP does, and the state tensors whole from rank 0;
// SetState sets a model's state tensors (nn.ModuleState) from global tensors as SetParams
// sets its parameters. The gpt example's tests resume an MoE model (with expert biases)
// saved at EP 2 and at TP 2 with sequence parallelism at EP 2, TP 2, PP 2 and one rank
// (examples/gpt TestMoECheckpointResume), and megago convert's tests take the tiny
// Mixtral and Qwen3-MoE from Hugging Face through TP 2 and PP 2 back to the same bytes.
// Initialization and dropout are keyed by global coordinates (see package tensor), so a
// resumed run at another layout continues as the saved one would have, up to summation
// order; at the same layout resuming is exact, bit for bit.
//
// # Crash safety
//
// Rank 0 of a saving job holds an flock on <dir>/.megago-save.lock from the start of a
// save until Commit returns (the kernel drops it if the process dies), so a second job
// saving into the same directory is refused with an error naming the directory and the
// holder's process id. Holding it, rank 0 removes what interrupted saves left: staging
// directories and temporary files. Save writes into <dir>/iter_NNNNNNN.staging under
// temporary names, fsyncs and renames each file; after every rank has reported its
// files' sizes and checksums (an all-gather over the world), rank 0 writes the manifest
// the same way, renames the staging directory into place and replaces the tracker file
// through a fsynced temporary file and a rename, fsyncing the directories. A crash or an
// error on any rank before the last rename leaves the previous checkpoint as the latest,
// and a save that fails removes its staging directory; Load verifies every file it reads
// against the manifest. StartSave copies the state to host memory and writes it in the
// background; Commit publishes it. Files are written with permission 0644 under the
// umask.
//
// # Conversions
//
// ImportHF and ExportHF use the models' nn.HFConverter (GPT-2 or Llama names for a GPT,
// BertForPreTraining for BERT, T5ForConditionalGeneration) and write safetensors as
// Hugging Face's reference implementation does, so import followed by export gives the
// same file byte for byte.
//
// Hugging Face models imported: gpt2; llama (Llama 1, 2, 3, and 3.1 with rope_scaling
// {rope_type llama3, factor, low_freq_factor 1, high_freq_factor 4,
// original_max_position_embeddings 8192}: nn's RoPEScaling, whose other parameters are
// fixed to those); mistral (a Llama: a sliding_window of null or at least
// max_position_embeddings is accepted, a shorter one refused); qwen2 (a Llama with q, k
// and v biases, QKVBias, without sliding-window layers); qwen3 (a Llama with query/key
// norms, QKNorm: RMSNorm over each head's head_dim channels before RoPE); the mixtures of
// experts below; bert; t5. Tied or untied
// embeddings, grouped-query attention (num_key_value_heads), head_dim, rms_norm_eps and
// rope_theta (or transformers 5's rope_parameters) are read; any other setting megago
// does not implement is refused with its key and value. The weights are read from the
// first present of model.safetensors, model.safetensors.index.json,
// pytorch_model.bin and pytorch_model.bin.index.json (transformers' order); an index's
// weight_map must name each tensor once, in a file inside the directory that holds it,
// and each shard must hold only the tensors listed in it. Files saved by older
// transformers are read too: tensors without the base model's prefix (GPT-2's h.0.…),
// buffers (attn.bias, rotary_emb.inv_freq) dropped, a tied lm_head.weight beside the
// embedding dropped when equal to it.
//
// Mixtures of experts (nn.MoEConfig, the MoE block replacing layers.i.mlp):
//
//   - mixtral: every layer MoE; num_local_experts experts of intermediate_size, top
//     num_experts_per_tok, the top k probabilities renormalized (MoEConfig.PreSoftmax
//     false: the softmax over the top k logits); sliding_window as for mistral;
//     router_jitter_noise other than 0 refused. Names: model.layers.i.block_sparse_moe.gate.weight
//     ↔ layers.i.mlp.router.weight [E, C]; block_sparse_moe.experts.j.w1 (gate), w3 (up)
//     [F, C] and w2 (down) [C, F] ↔ slice j of layers.i.mlp.experts.gate.weight,
//     experts.fc1.weight [E, F, C] and experts.fc2.weight [E, C, F].
//   - qwen2_moe: a Qwen2 whose MoE layers have num_experts experts of
//     moe_intermediate_size, top num_experts_per_tok, renormalized only with
//     norm_topk_prob (norm_topk_prob false is PreSoftmax: the softmax over all experts,
//     not renormalized), and a shared expert of shared_expert_intermediate_size scaled by
//     sigmoid(x·shared_expert_gate) (SharedExpertFFNHidden, SharedExpertGate). The layers
//     in mlp_only_layers, or where (i+1) is not a multiple of decoder_sparse_step, keep a
//     dense MLP of intermediate_size and its dense names (LayerPattern "1,0,..."). Names:
//     model.layers.i.mlp.gate.weight ↔ router; mlp.experts.j.{gate,up,down}_proj.weight ↔
//     slice j of experts.{gate,fc1,fc2}.weight; mlp.shared_expert.{gate,up,down}_proj.weight
//     ↔ layers.i.mlp.shared_expert.{gate,fc1,fc2}.weight; mlp.shared_expert_gate.weight
//     [1, C] ↔ layers.i.mlp.shared_expert_gate.weight.
//   - qwen3_moe: a Qwen3 (query/key norms, head_dim) with Qwen2-MoE's experts and layer
//     rule, without the shared expert.
//
// router_aux_loss_coef becomes MoEConfig.AuxLossCoeff (Megatron's per-micro-batch
// aux_loss; transformers adds its loss only with output_router_logits, which is not
// read). Each expert tensor is read whole from the (possibly sharded) files and stacked,
// so an imported model loads at any EP and expert-TP through SetParams, each rank taking
// its experts' slices (Param.Region). Mixtral, Qwen2-MoE and Qwen3-MoE export back
// (decoder_sparse_step and mlp_only_layers written to give the same layers); routers
// Hugging Face's classes lack (sigmoid scores, expert biases) are refused, and the
// training-only settings (load-balancing type, z-loss, capacity, dispatcher, EP) are not
// written.
//
// A GPT exports as GPT-2, as a Llama (with rope_scaling when it has RoPEScaling), with
// a QKV bias as a Qwen2, with query/key norms as a Qwen3, or with experts as above;
// config.json has exactly the keys save_pretrained writes
// for that model type (hfConfigKeys; bos and eos token ids null, as megago does not
// know the tokenizer; a Qwen2 needs HeadSize·Heads = Hidden). HFExportOptions.MaxShardSize splits the weights in shards with an
// index, as save_pretrained's max_shard_size (megago convert -max-shard-size):
//
//	checkpoint.ExportHFWith("out", m, global, checkpoint.HFExportOptions{MaxShardSize: 5e9})
//	// out/config.json, out/model-00001-of-00003.safetensors, ..., out/model.safetensors.index.json
//	m2, global2, err := checkpoint.ImportHF("out")
//
// ImportMegatron reads a Megatron-LM legacy checkpoint, iter_N/mp_rank_TT[_PPP]/model_optim_rng.pt
// (torch.save zip archives read with gopickle's unpickler behind a validating opcode scan),
// of a GPT with Megatron-core names (local layers, or Transformer Engine's with the norms
// fused into linear_qkv and linear_fc1 and empty _extra_state tensors, which are skipped)
// or the legacy model's nested names, and merges its shards. The configuration comes
// from the checkpoint's arguments, Llama-style ones included (RMSNorm, SwiGLU, RoPE with
// rotary_percent, rotary_base and Llama 3.1 rope scaling, grouped-query attention,
// kv_channels, qk_layernorm, add_qkv_bias, untied output); anything else (MoE,
// interleaved rotary, ...) is refused by name. The GeLU is the one Megatron computes:
// Megatron-core never reads --openai-gelu; with biases and its default bias-GeLU fusion
// it applies the tanh form, otherwise the erf form (the legacy model honoured
// --openai-gelu first). Replicated tensors that differ between TP ranks are reported in
// MegatronInfo.Warnings.
//
// ExportMegatron writes a GPT as a Megatron legacy checkpoint at a chosen TP and PP, as
// Megatron's tools/checkpoint savers do: Megatron loads it with --ckpt-format torch
// (--use-checkpoint-args takes the model's settings from its arguments; a release,
// iteration 0, needs no optimizer or RNG state, an iteration needs --finetune or
// --no-load-optim --no-load-rng). The pickles are written with the opcodes Python's
// pickler chooses (checked byte for byte against torch.save's own pickling), and
// testdata/megatron_reference.py, a reader and forward written from Megatron's sources,
// reproduces megago's logits from the exported files.
//
//	notes, err := checkpoint.ExportMegatron("out", m, global,
//		checkpoint.MegatronExportOptions{TP: 2, PP: 2, Iteration: 1000})
//	// pretrain_gpt.py --load out --ckpt-format torch --use-checkpoint-args --finetune ...
//
// # Errors
//
// Everything read from disk is untrusted: a truncated or corrupt file, a header whose
// sizes or offsets lie, a missing shard, a checkpoint of another architecture, an edited
// manifest or a malformed pickle is an error that names the file and what is wrong,
// never a panic or an allocation sized by an unchecked field. The sizes of a model that
// a file describes (config.json, Megatron's arguments, a manifest's Model) are checked
// against the elements of the tensors actually present before a model is built from
// them (safetensors from their headers, before any tensor is read; torch files after
// reading their records, whose sizes are checked against the archive); an index file is
// read only below 64 MiB; a stored piece's global shape is checked against the pieces that cover it before
// it is assembled; a pickle is scanned before it runs, with bounds on its nesting
// (maxPickleDepth marks, maxPickleStack objects) and on the unpickler's allocations, and
// zip records are read at declared sizes checked against the archive. Save and Load are collective: every rank
// gets an error if any rank failed. Caller bugs (a State without a Model, a parameter
// twice) are errors too, as they may come from configuration.
//
// The byte order of stored tensors is little-endian, the host's on every platform megago
// runs on.
package checkpoint
