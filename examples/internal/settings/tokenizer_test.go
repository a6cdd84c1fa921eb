package settings

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/data"
)

// TestTikTokenFlags parses Megatron's TikTokenizer flags, the special tokens given as
// Megatron's lists under both names.
func TestTikTokenFlags(t *testing.T) {
	c, err := parse(t)
	require.NoError(t, err)
	assert.Equal(t, "v2", c.TiktokenPattern, "Megatron-core's default pattern")
	assert.Equal(t, 1000, c.TiktokenNumSpecialTokens, "Megatron's default")

	c, err = parse(t, "--tokenizer-type", "TikTokenizer", "--tokenizer-model", "../../../data/testdata/tiktoken/o200k_8000.json.gz",
		"--vocab-size", "8016", "--tiktoken-num-special-tokens", "16", "--tiktoken-pattern", "v1",
		"--tokenizer-special-tokens", "<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>", "--tiktoken-special-tokens", "<x>")
	require.NoError(t, err)
	cfg := c.Tokenizer()
	assert.Equal(t, []string{"<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>", "<x>"}, cfg.SpecialTokens)
	assert.Equal(t, "v1", cfg.TiktokenPattern)
	tok, err := data.NewTokenizer(cfg)
	require.NoError(t, err)
	assert.Equal(t, 8016, tok.VocabSize())
	assert.Equal(t, []int32{1, 7, 8 + 16}, tok.Encode("<s><x>\x08"), "<s>, <x>, then rank 8 after 16 special tokens")

	_, err = parse(t, "--tiktoken-num-special-tokens", "0")
	require.Error(t, err, "0 must not silently become the default 1000")
	assert.Contains(t, err.Error(), "tiktoken-num-special-tokens")
}
