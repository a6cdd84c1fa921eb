package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/data"
)

// TestLlama2Tokenizer: Megatron's Llama2Tokenizer (a SentencePiece BPE .model given as
// --tokenizer-model) trains from a dataset preprocessed with it and generates from a
// prompt; the model's vocabulary is the .model's 1000 pieces, padded.
func TestLlama2Tokenizer(t *testing.T) {
	const model = "../../data/testdata/spbpe/llama.model"
	train, err := os.ReadFile("../../data/testdata/spbpe/train.txt")
	require.NoError(t, err)
	dir := t.TempDir()
	var jsonl strings.Builder
	for _, line := range strings.Split(string(train), "\n") {
		b, err := json.Marshal(map[string]string{"text": line})
		require.NoError(t, err)
		jsonl.Write(append(b, '\n'))
	}
	input := filepath.Join(dir, "train.jsonl")
	require.NoError(t, os.WriteFile(input, []byte(jsonl.String()), 0o644))
	tok, err := data.NewTokenizer(data.TokenizerConfig{Type: "Llama2Tokenizer", TokenizerModel: model})
	require.NoError(t, err)
	_, err = data.Preprocess(t.Context(), data.PreprocessConfig{Input: input, OutputPrefix: filepath.Join(dir, "spbpe"),
		JSONKeys: []string{"text"}, AppendEOD: true}, tok)
	require.NoError(t, err)
	args := tinyArgs(t, "--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", model,
		"--data-path", filepath.Join(dir, "spbpe_text_document"), "--split", "90,10,0", "--train-iters", "3",
		"--prompt", "The tokenizer")
	sum, out := runTiny(t, args)
	require.Equal(t, 3, sum.Iterations)
	require.Contains(t, out, "The tokenizer")

	bad := tinyArgs(t, "--tokenizer-type", "Llama2Tokenizer", "--data-path", filepath.Join(dir, "spbpe_text_document"))
	_, err = run(t.Context(), bad, noEnv, new(strings.Builder), new(strings.Builder))
	require.ErrorContains(t, err, "--tokenizer-model", "Llama2Tokenizer without --tokenizer-model")
}
