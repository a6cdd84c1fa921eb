package main

import (
	"io"
	"testing"

	"megago/tensor"
)

func TestTrainingLowersTheLoss(t *testing.T) {
	losses, err := run(io.Discard, tensor.NewCPU(), 150, 32, 100, 0.5, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Three balanced classes: an untrained model is near ln 3 ≈ 1.10.
	if first, last := losses[0], losses[len(losses)-1]; !(last < 0.8*first) {
		t.Errorf("loss went from %.4f to %.4f; want a drop of at least 20%%", first, last)
	}
}

func TestRejectsBadSettings(t *testing.T) {
	if _, err := run(io.Discard, tensor.NewCPU(), 0, 32, 100, 0.5, 1); err == nil {
		t.Error("steps 0 accepted")
	}
}
