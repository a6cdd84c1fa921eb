package parallel

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestTraceFollowsPlan: the forward and backward steps a real pipeline records are its
// plan, in order, and every transfer it waited in is recorded between them.
func TestTraceFollowsPlan(t *testing.T) {
	const p = 4
	s := Interleaved{M: 4, V: 2}
	epoch := time.Now()
	traces := make([]*Trace, p)
	err := RunLocal(p, func(c Comm) error {
		ctx := context.Background()
		dev := tensor.NewCPU()
		pl, err := NewPipeline(ctx, c, dev, P2PShape{})
		if err != nil {
			return err
		}
		w := toyWeight(dev, c.Rank())
		traces[c.Rank()] = NewTrace(c.Rank(), epoch)
		_, err = pl.Train(ctx, s, func(st Step) (*tensor.Tensor, error) {
			x := st.Input
			if x == nil {
				x, _ = toyData(dev, st.Micro)
			}
			y := tensor.Tanh(tensor.MatMul(x, w))
			if st.Last {
				return tensor.Sum(y), nil
			}
			return y, nil
		}, Hooks{Trace: traces[c.Rank()]})
		return err
	})
	require.NoError(t, err)
	for r, tr := range traces {
		plan, err := s.Plan(p, r)
		require.NoError(t, err)
		var steps []PipeOp
		p2p := 0
		var last time.Duration
		for _, e := range tr.Events() {
			require.GreaterOrEqual(t, e.End, e.Start)
			require.GreaterOrEqual(t, e.Start, last-time.Microsecond, "events in order")
			last = e.End
			switch e.Kind {
			case EventForward:
				steps = append(steps, PipeOp{Forward, e.Micro, e.Chunk})
			case EventBackward:
				steps = append(steps, PipeOp{Backward, e.Micro, e.Chunk})
			case EventP2P:
				p2p++
			}
		}
		assert.Equal(t, FormatPlan(plan), FormatPlan(steps), "stage %d", r)
		assert.Positive(t, p2p, "stage %d recorded no transfer", r)
	}
	var buf bytes.Buffer
	require.NoError(t, WriteTimeline(&buf, traces, 40))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 2*p)
	assert.True(t, strings.HasPrefix(lines[6], "stage 3 "), lines[6])
	assert.Positive(t, BubbleFraction(traces))
}

func TestEventString(t *testing.T) {
	e := Event{Start: 1500 * time.Microsecond, End: 2 * time.Millisecond, Kind: EventP2P, Send: Forward, Recv: Backward, Micro: 3, Chunk: 1}
	assert.Equal(t, "1.5ms-2ms p2p send-forward-recv-backward mb 3 chunk 1", e.String())
	e = Event{End: time.Millisecond, Kind: EventSync, Micro: -1}
	assert.Equal(t, "0s-1ms sync", e.String())
	e = Event{End: time.Millisecond, Kind: EventGather, Micro: 2}
	assert.Equal(t, "0s-1ms gather bucket 2", e.String())
}
