// Package data is megago's input pipeline, compatible with Megatron-LM: indexed datasets
// (.bin/.idx), the preprocessor that writes them from JSON lines, tokenizers, the GPT,
// BERT and T5 datasets with Megatron's indices and blending, the pretraining sampler and a
// prefetching loader.
//
// Package data imports no other megago package but the internal atomic-file writer
// (megago/internal/atomicfile): batches are plain Go slices ([]int32
// tokens, float32 loss masks), which callers turn into tensors. Everything that reads
// files returns errors naming the file (and, for malformed data, the field and offset):
// the datasets read tokens through TokenSource.ReadTokens and serve samples through
// ReadSample, whose errors name the dataset, the sample and the offset, and only the
// convenience forms AppendTokens and Sample panic instead. Files are written under
// temporary names, fsynced and renamed, with permission 0644 under the umask, so nothing
// half-written ever appears under a final name; the temporary files a killed writer
// leaves are removed by the next writer of the same file (internal/atomicfile).
//
// # Reading order
//
//   - tokenizer.go, tokenizer_*.go: Tokenizer, SpecialIDs, NewTokenizer and the
//     tokenizers; tokenizer_bpe_train.go: the BPE trainer.
//   - source.go: TokenSource, what datasets read (IndexedDataset, MemorySource);
//     source_digest.go: the digest of a source's contents that keys index caches.
//   - indexed*.go, builder*.go: the .bin/.idx reader and writer.
//   - preprocess*.go: Preprocess (megago preprocess).
//   - split.go, gpt_dataset*.go, blended.go, bert_*.go, t5_dataset.go, masking.go:
//     datasets.
//   - sampler.go, loader.go: PretrainingSampler and Loader.
//
// # Indexed datasets
//
// IndexedDataset reads Megatron's .bin/.idx pair (OpenIndexed) in one of
// three ReadModes: mmap (default; zero-copy RawSequence/RawDocument views), cached (both
// files in memory) or lazy (positioned reads of the .bin). Opening validates the whole
// index against the data file — magic, version, dtype, counts checked against the file size
// before use, p[0]=0 and p[i+1]=p[i]+len[i]·itemsize, sequences exactly filling the .bin,
// document indices running from 0 to N without decreasing, an optional N-byte modes array —
// and reports any violation as an *IndexError naming the file, the field and its byte
// offset; a corrupt file never panics or causes an allocation sized by a header field.
// ReadTokens converts every dtype to int32, so IndexedDataset is a TokenSource; in lazy
// mode it returns read errors naming the .bin and the byte offset (a mapped file that is
// truncated under the reader faults instead: use lazy mode where that can happen).
// IndexedBuilder writes the same format (Megatron's add_item, end_document, add_document,
// add_index) in memory independent of the dataset size, under temporary names that Finalize
// fsyncs and renames. Preprocess is tools/preprocess_data.py: JSON lines in, one dataset per
// key out ({prefix}_{key}_document or _sentence), tokenized by parallel workers in input
// order with bounded memory; bad lines are LineErrors, skipped and counted unless Strict,
// and an input with no good line is an error naming the count and the first bad line.
// testdata/indexed/gen_golden.py is an independent writer of the format; the tests require
// byte equality with it in both directions.
//
// # Tokenizers
//
// Tokenizer is what preprocessing and the examples use: Encode, Decode,
// VocabSize and Special (EOD, pad, mask, CLS, SEP, BOS, EOS, T5 sentinels; -1 for none).
// NewTokenizer builds one from Megatron's --tokenizer-type names: GPT2BPETokenizer
// (GPT2BPE: GPT-2's byte-level BPE from vocab.json + merges.txt, its pre-tokenizer and
// merge rules reproduced exactly and checked id for id against tiktoken-go), "gpt2"
// (BuiltinGPT2: GPT-2's vocabulary with no files, recovered from tiktoken-go's embedded
// r50k_base ranks), HuggingFaceTokenizer (HFTokenizer: a tokenizer.json directory given
// as --tokenizer-model; BPE, byte-level as in GPT-2, Llama 3 and Qwen or with byte
// fallback as in Llama 2 and Mistral, and BERT's WordPiece; the Split regexes run as
// hand-written scanners, Go's regexp having no lookahead; the post-processor's BOS
// included unless HFNoSpecialTokens; checked id for id against @huggingface/tokenizers in
// testdata/hf), BertWordPieceLowerCase and BertWordPieceCase (BertWordPiece, with
// Megatron's added [BOS], [EOS] and <extra_id_N>), SentencePieceTokenizer (SentencePiece
// .model files such as T5's: the model's own normalization charsmap, then SentencePiece's
// Viterbi for unigram models or its BPE merges for BPE ones, checked against
// python3-sentencepiece), Llama2Tokenizer and GPTSentencePieceTokenizer (GPTSentencePiece:
// a SentencePiece .model, typically BPE with byte fallback as Llama 2's, given as
// --tokenizer-model; see below), NullTokenizer, and
// "gosource-bpe" (GoSourceBPE: the 8192-id example vocabulary in data/vocab, trained on
// Go standard-library sources). BPETrainer and TrainBPE make a GPT-2-format vocabulary
// from any corpus; GPT2BPE.WriteFiles writes it for Megatron as well. AddSpecialTokens
// appends special tokens a vocabulary lacks (AddedTokens: encoded where their names
// occur in text); ForT5 appends what T5 span corruption needs — a pad token, the
// sentinels <extra_id_0>, <extra_id_1>, ... in order, EOS being the EOD — and is what
// TokenizerConfig.VocabExtraIDs (--vocab-extra-ids) does for tokenizers Megatron does not
// extend (GPT-2 BPE, gosource-bpe, NullTokenizer). Tokenizers are immutable after
// construction and safe for concurrent use.
//
// TikTokenizer (tokenizer_tiktoken*.go) is Megatron-core's TikTokenTokenizer. Its
// --tokenizer-model is a JSON list of {rank, token_bytes (base64), token_str} (read
// through gzip if the name ends in ".gz"), checked as reload_mergeable_ranks does: entry i
// has rank i, ranks 0..255 are the single bytes, no bytes twice, exactly those fields.
// --tiktoken-num-special-tokens n (default 1000) special tokens take ids 0..n−1: <unk> <s>
// </s> <mask> <pad> <cls> <sep> (or --tokenizer-special-tokens, which must hold them),
// then <SPECIAL_i>; rank r is id n + r, and only the first --vocab-size − n ranks are
// used (--vocab-size defaults to 131072; as in Megatron, the file must have that many).
// Decisions: special tokens found in the text are encoded as their ids, as Megatron-core
// does (allowed_special="all"; the legacy CustomTikTokenizer, since removed, used
// encode_ordinary and had only <unk> <s> </s>); the pattern defaults to v2, as in core;
// EOD = EOS = </s>; there are no T5 sentinels (--vocab-extra-ids appends ForT5's); Decode
// returns raw bytes (tiktoken's decode writes U+FFFD where ids split a character). The
// BPE is GPT2BPE's merge code with a rule for every split of a token into two tokens,
// ranked by that token, as tiktoken ranks a pair by its concatenation, after tiktoken's
// look-up of the whole word; merging every pair of the lowest rank in one pass gave
// tiktoken's (leftmost pair first) ids on 2.5 MB of code and multilingual text with the
// full cl100k_base and o200k_base vocabularies, and the tests check a cut o200k vocabulary
// against npm tiktoken's ids (testdata/tiktoken). The patterns v1 (cl100k_base's without
// contractions, one digit a word) and v2 (o200k_base's likewise) run as hand-written
// scanners; characters newer than Go's Unicode tables may be classed differently.
//
// SentencePiece BPE (tokenizer_spbpe*.go) is bpe_model.cc's: the normalized text split
// into characters and frozen user-defined pieces, then repeatedly the adjacent pair whose
// concatenation is a piece with the highest score merged, the leftmost on equal scores
// (SentencePiece's priority queue), an unused piece split back into the halves it was
// last formed from, a character no piece covers becoming its <0xXX> byte pieces (byte
// fallback) or <unk>. Merges look up a table keyed by the two halves' ids, and when no
// piece can span the start of a "▁"-word the text is merged word by word through a
// cache, which gives the same ids (tested against whole-text merging) at the GPT-2 BPE's
// speed. testdata/spbpe/gen.py trains four small models (Llama 2's settings; custom
// normalization rules with user-defined and control pieces; whitespace as a suffix
// without byte fallback; unused pieces) and writes SentencePiece's ids for multilingual
// texts. Llama2Tokenizer and GPTSentencePieceTokenizer follow current Megatron, where
// both are its SentencePieceTokenizer wrapper with default settings: Encode is
// encode_as_ids (no BOS or EOS; "<s>" in text is text), Decode is decode_ids, BOS, EOS
// and pad are the model's bos_id, eos_id and pad_id, EOD is EOS, and CLS, SEP and mask
// are -1. Megatron's legacy tokenizers (--legacy-tokenizer, removed in 2026) had
// _Llama2Tokenizer.tokenize(s, bos=True, eos=False) put BOS before every text;
// TokenizerConfig.LegacyTokenizer does that for Llama2Tokenizer, so datasets made by
// either Megatron can be reproduced.
//
// # Datasets
//
// GPTDataset (gpt_dataset*.go) serves Megatron's GPT samples from one split of a
// TokenSource, each sequence being a document. Its indices are Megatron's: a document
// index (the split's documents repeated over E epochs, E the smallest with
// E·tokens ≥ samples·s + 1, shuffled — the last epoch apart when it would contribute
// under 80% of an epoch), a sample index of (document position, offset) rows where
// sample k reads stream tokens [k·s, k·s+s] so consecutive samples share one token,
// and a shuffle index. Tokens are sample[:-1], labels sample[1:]; attention is causal
// and no mask is built; EODMaskLoss, ResetPositionIDs and ResetAttentionMask (each
// token's document, GPTSample.Segments, in place of Megatron's [T, T] mask) are
// optional. Indices are
// cached by IndexCache under a hash of everything they depend on — the configuration,
// the source's name and a digest of its contents (the SHA-256 of the .idx file, not its
// size or time), so a dataset regenerated under the same name gets new indices — and
// indices loaded from a cache are checked against the source (every sample must span
// SeqLen+1 tokens of its documents). The rank with Builder set writes them (temporary
// file, then rename), the others poll for the file until their context ends, so no
// communicator is needed. BlendedDataset mixes datasets
// by Megatron's greedy weights (BlendSizes, BlendIndices). BERTDataset builds sentence
// pairs [CLS] A [SEP] B [SEP] with a sentence-order target and whole-word n-gram
// masking (15%, 80/10/10); T5Dataset does span corruption with sentinels. T5's
// decoder starts with BOS, or with the padding id when the tokenizer has no BOS — T5's
// SentencePiece vocabularies and ForT5's have none — as Hugging Face's T5 does
// (decoder_start_token_id = pad_token_id; Megatron requires a BOS). Random
// choices come from PCG streams keyed by (seed, purpose, index) — not NumPy's MT19937,
// so permutations differ from Megatron's while every other property holds — and
// BERT/T5 masking is keyed by the global sample index, so a sample does not depend on
// the data-parallel layout. PretrainingSampler is Megatron's: from consumed_samples on,
// DP rank r takes [r·micro, (r+1)·micro) of each global batch, so resuming needs only
// consumed_samples. Loader assembles micro-batches in worker goroutines with at most
// Prefetch in flight, delivers them in order, and stops every goroutine on Close or
// context cancellation; a batch that cannot be read (a disk error, a file truncated or
// changed under the dataset, a panic while assembling it) is an error from Next for that
// batch, never a crash of the process. Batches are plain slices (GPTBatch: [B*T] tokens, labels,
// float32 loss mask, position ids).
package data
