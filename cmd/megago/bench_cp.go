package main

import (
	"context"
	"io"

	"megago/parallel"
)

// benchGPT runs megago bench gpt: on one rank, or with --context-parallel-size N on N
// goroutine ranks of this process connected by the in-process transport, each with its
// own device and its 2 chunks of every sequence. Only rank 0 writes progress; its result
// is the line printed (every rank steps together, so its times are the CP group's).
func benchGPT(ctx context.Context, c benchConfig, progress io.Writer) (*benchResult, error) {
	if c.CP.Size <= 1 {
		return benchRank(ctx, c, parallel.Self(), progress)
	}
	var res *benchResult
	err := parallel.RunLocal(c.CP.Size, func(cp parallel.Comm) error {
		out := io.Discard
		if cp.Rank() == 0 {
			out = progress
		}
		r, err := benchRank(ctx, c, cp, out)
		if cp.Rank() == 0 {
			res = r
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
