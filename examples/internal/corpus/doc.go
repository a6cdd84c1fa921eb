// Package corpus is the data side that megago's example programs share: the default
// corpus (the local Go installation's standard-library sources, tokenized once and
// cached as a Megatron indexed dataset), opening datasets of one's own with a check of
// their ids against the tokenizer, unigram statistics of a split (its entropy, the loss
// of a model that ignores context, and its most frequent token, the trivial baseline of
// masked-token accuracy). (The special tokens BERT and T5 need are appended to a
// vocabulary that lacks them by data.AddSpecialTokens and data.ForT5.)
//
// # Reading order
//
//   - gosource.go: GoSource and Spec, the default corpus: one document per file with one
//     sequence per document (GPT), or documents of sentences (BERT, T5) split by
//     Spec.Documents and Spec.Sentences (Declarations splits Go source into top-level
//     declarations, Lines into lines).
//   - blend.go: Blend, Megatron's blend of several sources: by their weights, or without
//     weights by their sizes (the samples of one epoch of each).
//   - splits.go: BlendSplit, a split's samples from --data-path cut by --split or from
//     the split's own path (--train-data-path, --valid-data-path).
//   - mock.go: Mock, the documents of --mock-data (Megatron's MockGPTLowLevelDataset).
//   - open.go: Sources (--data-path, the per-split paths or the default corpus, as the examples' flags say),
//     Open (indexed datasets checked against the vocabulary), Unigram, WaitForFile.
//
// # Invariants
//
// The cached corpus lives in CACHE/gosrc[-UNIT]-VERSION-HASH, where HASH covers the Go
// version, the tokenizer, the document and sentence splitting and every selected file's
// path and contents, so a different installation or tokenizer gets a corpus of its own. One
// process per host builds it (writing under temporary names renamed into place); the
// others wait for its index file. Everything here is safe for concurrent reads once
// built.
//
// # Errors
//
// A missing Go installation, unreadable sources, a dataset that cannot be opened or that
// holds ids outside the vocabulary are errors that name the file and say what to do
// (give --data-path, check --tokenizer-type).
package corpus
