// Package nn holds megago's layers and models: the tensor-parallel building blocks
// (column- and row-parallel linear layers, the vocabulary-parallel embedding and cross
// entropy), attention, MLP and transformer layers, and the GPT (GPT-2 and Llama-style),
// BERT and T5 models built from them, with their Hugging Face tensor mappings and text
// generation. It sits above package parallel (it calls the TP/SP mappings) and below
// optim and checkpoint (which see only []*Param).
//
// A model is built once per rank by a Builder holding the device, dtype, initialization
// RNG and the rank's TP group; with a TP group of one rank (parallel.Self) every layer is
// the plain serial layer, and the code is the same at every scale.
//
// # Reading order
//
//   - param_alias.go: Param, an alias of param.Param (package nn/param: a shard of a
//     parameter with its global shape, partition dim, replication and weight-decay
//     metadata), so that optim needs only that package; param.go: Module, Init, newParam
//     (how nn creates a Param), Builder and Pass.
//   - config.go: TransformerConfig with its documented defaults (Defaults), Validate,
//     OutputInitStd and PaddedVocab.
//   - tp_region.go: tpRegion, the mappings by which activations enter and leave TP
//     regions (plain or sequence parallel), chosen once by the Builder.
//   - linear.go: ColumnParallelLinear and RowParallelLinear, their variants chosen by
//     LinearOptions; linear_replicated.go: Linear, a layer every TP rank holds whole.
//   - embedding.go: VocabParallelEmbedding and the replicated Embedding.
//   - cross_entropy.go: VocabParallelCrossEntropy (softmax over the vocabulary split over
//     TP, label smoothing over the global vocabulary; the per-row work in the backend's
//     fused kernels) and MeanLoss.
//   - norm.go: LayerNorm and RMSNorm, and the layout-independent dropout helpers.
//   - rope.go: rotary position embeddings (Hugging Face's rotate_half form), on a
//     fraction of each head's channels (RotaryPercent) and with Llama 3.1's frequency
//     scaling (RoPEScaling, unfused: tensor.RoPE has one θ), as Megatron applies them;
//     relative_bias.go: T5's relative position bias.
//   - attention.go: SelfAttention (multi-head or grouped-query, fused QKV, optional QKV
//     bias alone (Qwen2) and query/key norms over each head, whose replicated weights'
//     gradients are summed over TP as sequence-parallel ones are), CrossAttention,
//     AttentionMask, PaddingMask and KVCache.
//   - mlp.go: the MLP (GeLU, erf GeLU, ReLU or SwiGLU).
//   - layer.go: TransformerLayer (pre- or post-LN residual blocks) and Block, a stack of
//     layers or one pipeline stage's slice of it.
//   - moe.go: MoE, the mixture-of-experts block that replaces the MLP of the layers
//     TransformerConfig.MoE chooses (MoEConfig.IsMoELayer, moe_config_layers.go):
//     moe_router.go (Router, Routing: each token's top-k experts and probabilities, the
//     routing map after capacity dropping), moe_experts.go (Experts: the E experts'
//     weights stacked [E/ep, ...] with dim 0 split over the expert-parallel group and F
//     over expert-TP, run as one tensor.GroupedMatMul per projection or one MatMul per
//     expert, the same bits), moe_dispatch*.go (the token dispatchers: permute by
//     expert, move tokens to the EP ranks holding their experts and back, weigh by the
//     probabilities and sum per token; allgather or alltoall), moe_stats.go
//     (MoELayerStats, MoEStats).
//   - recompute.go: activation recomputation (Builder.Recompute): RecomputeFull reruns
//     each layer in backward, RecomputeSelective only the attention core; both replay
//     the same dropout masks, so gradients are bit for bit those without it.
//   - gpt.go: GPTConfig, LlamaConfig, Stage and GPT (embedding, blocks, final norm, output
//     layer; Forward and Loss); gpt_documents.go: Documents and GPT.ForwardDocuments,
//     for sequences that pack several documents (Megatron's --reset-position-ids and
//     --reset-attention-mask): each token's position (gathered by the learned position
//     embedding on the first stage, rotating queries and keys per sample with RoPE on
//     every stage) and each token's document (AttentionMask.Segments, a document mask in
//     tensor.Attention, or tensor.SegmentMask in the unfused core). With the zero
//     Documents it is Forward, bit for bit; packed documents give each token the logits
//     it has when its document runs alone (gpt_documents_test.go).
//   - bert.go, t5.go: the BERT encoder with its pre-training heads and the T5
//     encoder-decoder. T5 runs with TP and DP only: NewT5 rejects a pipeline stage. Its
//     MLP drops out the activation before fc2 (MLP.Dropout), as Hugging Face's T5 does.
//   - bert_classify.go: BERTClassifier, a BERT encoder with a sequence-classification
//     head (pooler, dropout, linear over N classes: BertForSequenceClassification) whose
//     parameters are named as BERT's, so pre-trained weights load into it by name.
//   - generate.go, generate_sample.go: Generate and GenerateOptions (greedy, temperature,
//     top-k and top-p sampling with a KV cache, under TP).
//   - t5_generate.go: T5Decoding and GenerateT5: the encoder run once, each decoder
//     layer's cross-attention keys and values of its output computed once
//     (CrossAttention.MemoryKV, LayerInput.CrossKV), the decoder one token at a time with
//     a self-attention KV cache.
//   - hf.go and *_hf.go: HFConverter (each model's Hugging Face names and layouts) and
//     LoadGlobal.
//   - pipeline_chunks.go: a model on a parallel.Mesh: ChunkLayers and Stages (Megatron's
//     split of L layers over p stages × V chunks), NewGPTChunks, NewBERTChunks and
//     NewT5OnMesh (PP > 1 is an error). parts.go: Parts, what a trainer and a checkpoint
//     need of this rank's model (each chunk's parameters, the tied copies), GPTParts,
//     BERTParts and T5Parts. Package train calls these; package checkpoint builds a
//     model from its manifest with them.
//
// # Shapes
//
// Comments beside tensors give their shapes with these letters, and per-rank sizes show
// their divisor (C/tp, Vp/tp, T/tp):
//
//	B   micro-batch size              T   sequence length
//	C   hidden size                   F   MLP hidden size
//	NH  attention heads               G   query groups (key/value heads; G = NH without GQA)
//	HS  head size (C/NH by default)   P   max positions (learned position table)
//	V   vocabulary size               Vp  vocabulary padded for TP (PaddedVocab)
//	L   layers                        tp, pp, dp  tensor-, pipeline-, data-parallel group sizes
//	E   experts (MoE)                 ep, etp  expert-parallel, expert-tensor-parallel sizes
//	N   tokens B·T of a micro-batch   M   (token, expert) rows dispatched to experts
//
// Activations are [B, T, C]; attention works on [B, NH/tp, T, HS]; logits are
// [B, T, Vp/tp], this rank's slice of the padded vocabulary.
//
// # Invariants
//
// Parameters are created by global coordinate. Each Param is this rank's slice of a
// global tensor (GlobalShape, PartitionDim, Region) and is drawn from the Builder's RNG
// keyed by the parameter's name and each element's index in the global tensor, so a TP=2
// shard equals the same slice of the TP=1 parameter bit for bit, and checkpoints convert
// between layouts by slicing. Names are global too ("layers.7.mlp.fc1.weight" on whatever
// pipeline stage holds layer 7).
//
// The fused QKV projection is laid out per query group: for each of the G groups, its
// NH/G query heads, then its key head, then its value head. A contiguous TP split
// therefore hands each rank whole groups and whole heads, which is why NH and G must be
// divisible by tp. (Hugging Face's GPT-2 c_attn is q|k|v; the HF converters reorder it.)
//
// A Builder holds what is fixed when a model is built (device, dtype, init RNG, TP group,
// sequence parallelism, activation recomputation); a Pass holds what changes per forward pass (context, training
// mode, dropout RNG, global sample offset). Layers keep only the groups they use, never a
// mesh or package state.
//
// Variants are chosen when a layer is built, never by a flag tested inside Forward (a
// test, forward_flags_test.go, checks that no Forward method branches on its receiver;
// branches on arguments, like a KV cache or Pass.Train, are fine). Each layer holds the
// few function values its constructor picked:
//
//   - its tpRegion (Builder.region): CopyToTP or GatherFromSP into column-parallel
//     layers, ReduceFromTP or ReduceScatterToSP out of row-parallel ones, the embedding's
//     output kept whole or scattered over the sequence (ScatterToSP), the hidden dropout
//     region (the whole sequence or this rank's part) and BERT's first position;
//   - the linear layers' options (LinearOptions: GatherOutput, SkipBiasAdd, ScatterInput);
//   - LayerNorm or RMSNorm; the MLP's activation (plain or SwiGLU); rotary embeddings or
//     none; the attention core (attend, or recomputed in backward) with its scale fixed;
//     pre-LN or post-LN residual blocks (preLN, postLN); a decoder layer's
//     cross-attention or none;
//   - a pipeline stage's first and last steps (embedding or hidden input, heads or
//     hidden output) and the optional norms and heads of its configuration.
//
// These values are also where tensor's fused operations plug in (fused_ops.go, layerOps):
// the attention core is tensor.Attention (grouped keys read in place, no [Tq, Tk] matrix)
// or the unfused attend; the MLP adds fc1's bias in BiasGeLU or BiasSwiGLU; a layer adds
// its sub-blocks' output-projection bias, hidden dropout and residual in BiasDropoutAdd;
// post-LN adds the residual and normalizes in AddLayerNorm; RoPE is tensor.RoPE. The
// fused ops are the default; Builder.Unfused builds the same layers with the unfused
// compositions that define them (tensor's *Reference functions), which agree within
// rounding: the reference the golden tests and benchmarks (megago bench gpt --unfused)
// compare with. Device.FusedCount shows which path ran.
//
// Sequence parallelism is such a construction-time choice (Builder.SequenceParallel):
// the layers built with it hold the SP mappings, and replicated parameters used on
// sequence-split activations are marked SequenceParallel so that their gradients are
// summed over TP (ReduceSequenceParallelGrads). The parameters are the same with and
// without it.
//
// A mixture-of-experts block (MoE) routes each token to its top-k experts and sums their
// outputs weighted by the router's probabilities, plus an optional (gated) shared
// expert. Its experts are spread over Builder.Experts (ExpertGroups: EP, expert-TP and
// their product, Megatron's second decomposition of the world; nil groups are one rank):
// rank q of EP holds experts [q·E/ep, (q+1)·E/ep), each split over expert-TP by F. Expert
// parameters are marked Expert with their EPRank and drawn by global coordinate like any
// other, so EP=1 and EP=N start from the same weights. The dispatcher is chosen when the
// block is built: allgather (Megatron's default) all-gathers the expert TP×EP group's
// tokens, probabilities and routing maps, runs the local experts on the tokens routed to
// them and reduce-scatters the weighted sums back; alltoall permutes the tokens by expert,
// exchanges them over EP with per-rank counts (parallel.AllToAllRows), all-gathers them
// over expert-TP (GatherRowsV), sorts them by local expert and undoes each step after the
// experts. Both compose with sequence parallelism (each TP rank dispatches its [B, T/tp,
// C]); without it, under TP, each TP rank takes its 1/tp of the sequence and runs the
// block as under sequence parallelism, the outputs all-gathered. Capacity dropping and padding are the router's: the dispatchers move what
// Routing.Map says. With top-2 routing and one expert-TP rank, outputs, input gradients
// and expert gradients are those of one rank bit for bit (moe_parallel_test.go).
//
// Context parallelism (Builder.CP of size cp > 1, TransformerConfig.CP) splits the
// sequence: the sequence is cut into 2·cp chunks and rank r holds chunks r and 2·cp−1−r
// (CPPositions; CPSlice cuts a batch's ids and labels so), so a rank's activations are
// [B, T/cp, C] ([B, T/(cp·tp), C] under sequence parallelism). Everything but attention
// is per position: learned positions and RoPE use the global positions, hidden dropout
// draws at them (tpRegion.byRuns). SelfAttention built under CP runs a context-parallel
// core (attention_cp*.go) chosen per layer by CPCommType: p2p (ring attention: keys and
// values passed around the CP group by a parallel.Ring, block i+1's transfer
// overlapping block i's attention, partial outputs combined by their log-sum-exp; in
// backward the blocks travel again with their accumulating gradients, which a last shift
// returns to their owners) or all_gather (keys
// and values gathered once, reduce-scattered in backward), a2a (Ulysses: an all-to-all
// trades the rank's positions of every head for every position of its cp-th of the
// heads, attention runs on the whole sequence, and the inverse all-to-all returns it;
// key/value groups fewer than cp are replicated) or a2a+p2p (CPHierarchy: a2a over the
// inner group, the outer group's keys and values gathered; its groups split once per
// Builder; attention_cp_a2a.go). p2p and all_gather attend at chunk granularity (a causal mask makes a chunk wholly
// visible, diagonal or skipped) and draw attention dropout at each block's global query
// and key offsets, so outputs, masks and gradients are CP=1's within rounding
// (attention_cp_test.go; train's cp_equivalence_test.go for a trained GPT). The p2p core
// is one differentiable function (cpRing, as Transformer Engine's AttnFuncWithCPAndKVP2P)
// whose forward keeps only q, the rank's own k and v, the combined output and the global
// log-sum-exp, so a layer's activations are 1/cp of CP=1's (attention_cp_p2p_test.go);
// selective recomputation does not
// apply to the CP core (full recomputation replays the ring). GPT.Loss under CP is the
// mean over the tokens of the whole sequences, its sum crossing the CP group by an
// all-reduce whose backward is an all-reduce, so each rank's gradient is cp times its
// part of the mean's and the optimizer's average over DP×CP is the mean's gradient
// (Megatron's loss·cp_size). Padding masks, attention bias, documents' segments and KV
// caches (generation) are refused under CP with a panic saying so; BERT and T5 are not
// adapted to it; MoE blocks run under CP (per token), the router's auxiliary losses
// counting tokens over the TP × CP token group and their gradients scaled by cp as the
// main loss's are, so they equal CP=1's too.
//
// Dropout masks depend only on the Pass's RNG, the dropout site's name and global
// coordinates (global sample index, position, feature or head), never on a rank, so they
// are the same at every TP, SP, PP and DP layout and are replayed exactly by activation
// recomputation. Under context parallelism they are
// drawn at global positions too, so they are the same at every CP layout.
//
// Padded vocabulary entries (ids V..Vp−1) are excluded from the cross entropy's softmax
// (CrossEntropyOptions.Vocab, set by GPT.Loss, BERT.Loss and T5.Loss) and never generated, for parity with
// unpadded Hugging Face models; Megatron lets them take part.
//
// # Mixture-of-experts router
//
// Router (moe_router*.go) is Megatron-core's TopKRouter for the N = B·T tokens of its
// input x [B, T, C], E experts, K = MoEConfig.TopK: fp32 logits x·Wᵀ [N, E] (fp64 for an
// fp64 x; W [E, C] replicated over TP), then on the host in float64 the score function of
// topk_routing_with_score_function: softmax over the top K logits (the default,
// Mixtral), softmax over all E then top K (PreSoftmax; probabilities not renormalized),
// or sigmoid, top K of sigmoid + ExpertBias (the bias only chooses; Megatron allows it
// only with sigmoid, and so does Validate), divided by the chosen scores' sum (+1e-20)
// when K > 1. Ties choose the lower expert index. Capacity (CapacityFactor > 0) is
// apply_router_token_dropping: each expert keeps ⌈(N·K/E)·factor⌉ tokens of this rank,
// by probability (DropPolicy "probs") or earliest first ("position"), and PadToCapacity
// makes the map the capacity mask (tokens of probability 0 fill every expert to its
// capacity); nothing is dropped when the capacity exceeds N. "Earliest" and ties between
// equal probabilities follow Megatron's token order, which is sequence-major ([T, B]:
// position t of every sequence before position t+1), not megago's batch-major flattening
// of x, so "position" drops the same tokens as Megatron would; Routing itself is in x's
// row-major order. In training (Pass.Train, gradients recorded) the load-balancing loss
// (MoEConfig.LoadBalancing: aux_loss per micro-batch, seq_aux_loss per sequence averaged
// over B, global_aux_loss with counts averaged over the step's micro-batches, none;
// scores softmax or sigmoid normalized over all E, top K without bias or dropping) times
// AuxLossCoeff, and the z-loss ZLossCoeff·mean(logsumexp(logits)²), are attached to the
// probabilities' backward as MoEAuxLossAutoScaler does: the forward is unchanged and
// their gradients, times Pass.LossScale (0 means 1), join the probabilities' gradient.
// Under sequence parallelism the router counts tokens per expert over the TP group and
// scales the token totals and the z-loss coefficient by its size, as Megatron does over
// its tp_cp group, so a TP=2 sequence-parallel run gives the single-rank losses and (its
// weight being SequenceParallel) gradients. Megatron reduces over TP also without
// sequence parallelism, where every TP rank holds all tokens, which scales those
// gradients by 1/tp; megago counts over one rank then, keeping them those of TP=1. A
// micro-batch's statistics (RouterStats: coefficient-weighted losses whole over the TP
// group, tokens per expert) and the counts that UpdateExpertBias all-reduces (tokens kept
// per expert, after dropping, as Megatron's local_tokens_per_expert) are recorded when its
// backward runs, so activation recomputation, which runs the forward twice, counts it
// once; for the same reason global_aux_loss keys its counts by Pass.SampleOffset, and a
// replayed micro-batch sees what its first forward saw. UpdateExpertBias, after every
// step as in Megatron's finalize_model_grads, moves each bias by rate·sign(mean − count)
// in float32 and ends global_aux_loss's window. Megatron's router bias
// (--add-bias-linear), input jitter, group-limited top-k, sinkhorn and the top-k scaling
// factor are not implemented.
//
// # Errors
//
// Caller bugs panic with the layer, op and values: shapes or sizes not divisible by tp, a
// token id or target outside the vocabulary, a decoder layer without encoder memory
// ("nn: ColumnParallelLinear fc1: out features 10 not divisible by tp 4"). Constructors of
// models validate their configuration and return an error listing every invalid field
// (TransformerConfig.Validate). Communication failures inside Forward and Backward surface as panics with a
// *parallel.Error from the TP mappings (autograd cannot return errors); training entry
// points recover them and abort the job. Generate, an entry point itself, returns them as
// errors, along with invalid options, bad prompts and non-finite logits.
package nn
